// f16_pasa's key shift: before each attention launch, K is shifted into a workspace the kernel
// object owns (same stream), and the launch parameters are pointed at it.
#pragma once

#include <cstddef>

#include "ftattn/params.cuh"
#include "ftattn/runtime.hpp"
#include "runtime/driver.hpp"

namespace ftattn::runtime {

// Bytes of the shift workspace for `problem` and key blocks of `block_n`: the shifted keys
// (dense f16, batch x heads_kv x seqlen_k x head_dim) then the shift vectors (batch x heads_kv x
// ceil(seqlen_k / block_n) x head_dim, and 7 rows of slack), each 256-byte aligned.
struct PasaLayout {
  std::size_t k_shifted = 0, shift = 0, bytes = 0;
  static PasaLayout of(const Problem& problem, int block_n);
};

// Enqueues `shift` (the module's pasa_shift kernel) on p's keys into `workspace` (grown as
// needed), then rewrites p's K pointer and strides to the shifted keys and sets its shift vectors.
void enqueue_pasa_shift(CUfunction shift, const KernelConfig& config, const Problem& problem,
                        AttentionParams& p, DeviceBuffer& workspace, CUstream stream);
// Points p's K pointer and strides at the shifted keys in `workspace` (enqueue_pasa_shift's, or
// prepared earlier: PreparedKv) and sets its shift vectors.
void use_shifted_keys(const KernelConfig& config, const Problem& problem, AttentionParams& p,
                      const DeviceBuffer& workspace);

}  // namespace ftattn::runtime
