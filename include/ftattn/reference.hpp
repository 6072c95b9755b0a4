// Host-side reference attention in double precision, and 16-bit float conversions, for checking
// kernels (ftattn run, the GPU tests, the tuner) without a second GPU implementation.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ftattn/config.hpp"

namespace ftattn::reference {

// Round-to-nearest-even conversions between float and 16-bit storage (IEEE half or bfloat16).
uint16_t to_bits(float x, Precision p);
float from_bits(uint16_t bits, Precision p);

// A host copy of one tensor in 16-bit storage, addressed with a Problem's strides.
struct Tensor16 {
  std::vector<uint16_t> data;
  Strides strides;
  float at(Precision p, int b, int h, int s, int d) const {
    return from_bits(data[b * strides.batch + h * strides.head + s * strides.seq + d], p);
  }
};

// Elements a tensor with these strides needs (largest offset + 1).
size_t span_elements(const Strides& s, int batch, int heads, int seqlen, int head_dim);

// Random tensor (normal(0, 1) by default) laid out with `strides`; padding elements get NaN so a
// kernel that reads them shows it.
Tensor16 random_tensor(std::mt19937_64& rng, Precision p, const Strides& strides, int batch,
                       int heads, int seqlen, int head_dim, float stddev = 1.0f);

// One output row O[b, h, row, :] and its log-sum-exp, in double. A row that sees no key gives
// zeros and lse = -inf.
// `block_mask` (host bytes laid out as Problem describes) is read for Mask::block_sparse*.
std::vector<double> attention_row(const Problem& problem, Precision p, Mask mask, const Tensor16& q,
                                  const Tensor16& k, const Tensor16& v, int b, int h, int row,
                                  double* lse = nullptr, const uint8_t* block_mask = nullptr);

struct CheckReport {
  int rows_checked = 0;
  double max_abs_error = 0.0;  // over checked elements
  double rel_l2_error = 0.0;   // ||out - ref|| / ||ref|| over checked rows
  double max_lse_error = 0.0;  // when lse was given
  long long non_finite = 0;    // NaN/Inf anywhere in the output (all rows are scanned)
  // LSE entries that no row can have, over every row when lse was given: NaN, +inf, or -inf
  // where the row sees keys (a row with none has -inf, as the reference gives).
  long long bad_lse = 0;
  // The largest checked row's ||out - ref||, relative to that row's ||ref|| or to the rows'
  // root mean square, whichever is larger: a fault confined to a few rows, which the pooled rel
  // L2 dilutes, fails past Tolerance::row.
  double max_row_error = 0.0;
  bool passed = false;
  std::string summary() const;
};

// What check() accepts for precision `p` on `problem`: the pooled rel L2 below rel_l2 (bf16 1e-2,
// f16 2e-3, f16_pasa 5e-3, int8 5e-2, fp8_e4m3 1e-1; both 8-bit ones take f16 inputs and are
// checked against the reference of the unquantised inputs, and int8's grows from 4k keys with the
// fourth root of seqlen_k, as its quantised P drops more keys), each checked row's error below
// `row` (10x rel_l2, at most 0.5), and the LSE within `lse` (1e-2; 8-bit 1e-1, int8's growing as
// its rel_l2 does).
struct Tolerance {
  double rel_l2 = 0.0, row = 0.0, lse = 0.0;
};
Tolerance tolerance(Precision p, const Problem& problem);

// Compares a kernel's output (and optional LSE, dense batch x heads_q x seqlen_q) with the
// reference on `rows` query rows spread over the problem (all rows when rows <= 0 or when the
// problem has no more than that), and scans every output element for NaN/Inf and every LSE entry
// for values no row can have. It passes within tolerance(p, problem).
CheckReport check(const Problem& problem, Precision p, Mask mask, const Tensor16& q,
                  const Tensor16& k, const Tensor16& v, const Tensor16& o,
                  const std::vector<float>* lse, int rows, uint64_t seed = 1,
                  const uint8_t* block_mask = nullptr);

}  // namespace ftattn::reference
