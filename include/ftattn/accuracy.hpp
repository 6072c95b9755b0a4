// Accuracy against a golden output, with the papers' exact metric definitions
// (shared/notes/seed-numerics.md, section D), and the symmetric INT8 quantisation of
// INT-FlashAttention as a host model.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ftattn::accuracy {

struct Metrics {
  long long elements = 0;
  double rel_l2 = 0.0;           // ||O - G|| / ||G||: PASA's "RMSE"
  double max_abs = 0.0;          // max |O - G|
  double mre = 0.0;              // mean |O - G| / (|G| + 1e-5) over all elements
  double mre_last4 = 0.0;        // the same over the last 4 elements (INT-FlashAttention's code)
  double abs_ratio = 0.0;        // sum |O - G| / sum |G|: MRE without the epsilon
  double cosine = 0.0;           // <O, G> / (||O|| ||G||)
  double non_finite_rate = 0.0;  // share of NaN or Inf outputs
  std::string summary() const;
};

// Metrics of `output` against `golden` (same length, flattened alike). Non-finite outputs count
// in non_finite_rate and make every other metric NaN, as they would in the papers' tables. A
// non-finite golden value throws Error: the reference itself is broken, not the output.
Metrics compare(std::span<const double> golden, std::span<const double> output);

// Symmetric INT8 quantisation with R = 127 (the paper's "R = 256" would overflow int8):
// scale = max |x| / 127, q = round-to-nearest-even(x / scale), in [-127, 127]. A zero row gets
// scale 1 and zeros.
struct Quantized {
  std::vector<int8_t> values;
  std::vector<float> scales;  // one per row (per token), or one for the tensor
};
// `rows` x `cols`, row-major: one scale per row (Q and K: per token).
Quantized quantize_per_row(std::span<const float> x, int rows, int cols);
// One scale for the whole tensor (V in INT-FlashAttention).
Quantized quantize_per_tensor(std::span<const float> x);
// Back to float: values[i] * scale of its row (cols = values.size() for per-tensor).
std::vector<float> dequantize(const Quantized& q, int cols);

// P in INT-FlashAttention: round(127 * exp(s - m)) with s <= m, in [0, 127]; 0 when
// exp(s - m) < 1/254 (the flush the digest warns about).
int8_t quantize_probability(float s_minus_max);

// Whether INT32 accumulation of an S row sum (|q| <= 127 or 128) over head_dim x block_n
// products cannot overflow: 127^2 * d * Bc < 2^31 (128^2 with -128 present).
bool int32_headroom(int head_dim, int block_n, bool minus_128_present = true);

}  // namespace ftattn::accuracy
