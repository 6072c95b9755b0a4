// PASA's shift parameter beta (Cheng et al., "Online Pseudo-Average Shifting Attention"), solved
// per key-block size and storage type. Codegen bakes it into f16_pasa kernels; the values are
// pinned by tests against the paper's table.
#pragma once

#include <vector>

#include "ftattn/config.hpp"

namespace ftattn::pasa {

// `x` rounded to the nearest value of the 16-bit storage type (f16 or f16_pasa: IEEE half;
// bf16: bfloat16), ties to even, subnormals included. ConfigError for other precisions.
double round_to(double x, Precision storage);

// The bias recovery factor the rounded shifting matrix actually realises (PASA eq. 20): with
// b = fl(beta/n) and a = fl(1 - beta/n) + b, f = b n / (a (a - b n)) + (1 - a) / a. In exact
// arithmetic f = beta / (1 - beta).
double realised_recovery(double beta, int block_n, Precision storage);

// The "optimal accuracy" beta: the fixed point of beta = f(beta) / (1 + f(beta)) (eq. 22), in
// FP64 to 1e-8, started from `start` (the paper starts from 1 - 2^-4, 1 - 2^-5, 1 - 2^-6 and uses
// the last, 0.984497 for FP16 and n = 128). beta then satisfies beta / (1 - beta) = f(beta), so
// the recovery the kernel applies equals the one the rounded matrix needs. ConfigError for a
// start outside (0, 1) (beta = 1 is singular) or a block size < 1.
double optimal_beta(double start, int block_n, Precision storage);

// Host model of the f16_pasa kernels (kernel/fwd_pasa_sm80.cuh): the same roundings in the same
// order. Values are f16-exact floats, rows of head_dim, row-major.

// The shift kernel on one key block of n rows: r = fl16(beta * mean of the n rows) and
// K' = fl16(scale_log2 * (K - r)).
struct ShiftedBlock {
  std::vector<float> shift;      // head_dim values
  std::vector<float> k_shifted;  // n x head_dim
};
ShiftedBlock shift_block(const float* k, int n, int head_dim, double beta, float scale_log2);

// One query row of f16_pasa attention over seqlen_k keys (no mask) in key blocks of block_n:
// S' = q K'^T accumulated in f16 (one rounding per 16-wide k step, as the tensor cores round
// their f16 accumulators), recovery scale_log2 * (q . r) exact, b = m - recovery split into
// f16 hi + lo, P = fl16(2^(fl16(fl16(S' - b_hi) - b_lo))) (ex2.approx modelled as exact),
// per-thread f16 pairwise sums of P, m, l and O in FP32 (O modelled in double), O / l to f16.
std::vector<double> attention_row_model(const float* q, const float* k, const float* v,
                                        int seqlen_k, int head_dim, int block_n, double beta,
                                        float scale);

}  // namespace ftattn::pasa
