// Parameters of the decoupled baseline's three kernels (kernel/decoupled_gemm_sm80.cuh and
// kernel/decoupled_softmax.cuh). Plain C++ like params.cuh: the host includes this file too.
#pragma once

#include "ftattn/params.cuh"

namespace ftattn {

struct DecoupledParams {
  AttentionParams attn;  // the problem, the fault log, the fault plan, as the fused kernels get it
  float* s;              // S = scale * Q K^T: batch x heads_q x seqlen_q rows, FP32
  void* p;               // P = softmax(S), same rows, 16-bit
  long long row_elements;  // elements between rows of S and of P (seqlen_k rounded up to 64)
  // Checksum thresholds, resolved on the host: a check fails when
  // |checksum - recomputed| > tol * (sum of absolute contributions) + floor.
  float tol_scores, tol_output, tol_floor;
};

}  // namespace ftattn
