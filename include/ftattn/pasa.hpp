// PASA's shift parameter beta (Cheng et al., "Online Pseudo-Average Shifting Attention"), solved
// per key-block size and storage type. Codegen bakes it into f16_pasa kernels; the values are
// pinned by tests against the paper's table.
#pragma once

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

}  // namespace ftattn::pasa
