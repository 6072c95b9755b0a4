#include "ftattn/accuracy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ftattn/errors.hpp"

namespace ftattn::accuracy {

std::string Metrics::summary() const {
  return fmt::format(
      "rel L2 {:.3e}, max abs {:.3e}, MRE {:.3e} (last 4: {:.3e}), sum|err|/sum|ref| {:.3e}, "
      "cosine {:.6f}, NaN/Inf {:.2f}% of {} elements",
      rel_l2, max_abs, mre, mre_last4, abs_ratio, cosine, 100.0 * non_finite_rate, elements);
}

Metrics compare(std::span<const double> golden, std::span<const double> output) {
  if (golden.size() != output.size())
    throw Error(fmt::format("accuracy::compare: {} golden elements but {} outputs", golden.size(),
                            output.size()));
  // A NaN in the golden drops out of max_abs (std::max skips it) and an Inf turns the ratios
  // into NaN: the metrics would read as no worse than the kernel's, or as the kernel's fault.
  long long golden_bad = 0;
  size_t first_bad = 0;
  for (size_t i = 0; i < golden.size(); ++i)
    if (!std::isfinite(golden[i]) && golden_bad++ == 0) first_bad = i;
  if (golden_bad > 0)
    throw Error(fmt::format(
        "accuracy::compare: the golden tensor has {} NaN or Inf values of {} (the first, element "
        "{}, is {}): no metric against it means anything; check the inputs for NaN or Inf (or "
        "values that overflow their 16-bit type) and recompute the golden",
        golden_bad, golden.size(), first_bad, golden[first_bad]));
  Metrics m;
  m.elements = static_cast<long long>(golden.size());
  if (golden.empty()) return m;
  double err2 = 0, ref2 = 0, out2 = 0, dot = 0, rel_sum = 0, abs_err = 0, abs_ref = 0;
  long long bad = 0;
  for (size_t i = 0; i < golden.size(); ++i) {
    const double g = golden[i], o = output[i];
    if (!std::isfinite(o)) ++bad;
    const double e = std::abs(o - g);
    err2 += e * e;
    ref2 += g * g;
    out2 += o * o;
    dot += o * g;
    rel_sum += e / (std::abs(g) + 1e-5);
    abs_err += e;
    abs_ref += std::abs(g);
    m.max_abs = std::max(m.max_abs, e);
  }
  const double n = static_cast<double>(golden.size());
  m.non_finite_rate = bad / n;
  if (bad > 0) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    m.rel_l2 = m.max_abs = m.mre = m.mre_last4 = m.abs_ratio = m.cosine = nan;
    return m;
  }
  m.rel_l2 = std::sqrt(err2 / ref2);
  m.mre = rel_sum / n;
  const size_t last = std::min<size_t>(4, golden.size());
  double tail = 0;
  for (size_t i = golden.size() - last; i < golden.size(); ++i)
    tail += std::abs(output[i] - golden[i]) / (std::abs(golden[i]) + 1e-5);
  m.mre_last4 = tail / static_cast<double>(last);
  m.abs_ratio = abs_err / abs_ref;
  m.cosine = dot / std::sqrt(out2 * ref2);
  return m;
}

namespace {

constexpr float kRange = 127.0f;

int8_t to_int8(float x, float scale) {
  const float q = std::nearbyint(x / scale);  // default rounding mode: to nearest even
  return static_cast<int8_t>(std::clamp(q, -kRange, kRange));
}

float scale_of(std::span<const float> x) {
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::abs(v));
  return amax > 0 ? amax / kRange : 1.0f;
}

}  // namespace

Quantized quantize_per_row(std::span<const float> x, int rows, int cols) {
  if (rows < 0 || cols <= 0 || static_cast<size_t>(rows) * cols != x.size())
    throw Error(
        fmt::format("quantize_per_row: {} values are not {} rows of {}", x.size(), rows, cols));
  Quantized q;
  q.values.resize(x.size());
  q.scales.resize(rows);
  for (int r = 0; r < rows; ++r) {
    const auto row = x.subspan(static_cast<size_t>(r) * cols, cols);
    q.scales[r] = scale_of(row);
    for (int c = 0; c < cols; ++c)
      q.values[static_cast<size_t>(r) * cols + c] = to_int8(row[c], q.scales[r]);
  }
  return q;
}

Quantized quantize_per_tensor(std::span<const float> x) {
  Quantized q;
  q.scales = {scale_of(x)};
  q.values.reserve(x.size());
  for (float v : x) q.values.push_back(to_int8(v, q.scales[0]));
  return q;
}

std::vector<float> dequantize(const Quantized& q, int cols) {
  std::vector<float> out(q.values.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = q.values[i] * q.scales[q.scales.size() == 1 ? 0 : i / cols];
  return out;
}

int8_t quantize_probability(float s_minus_max) {
  return static_cast<int8_t>(std::nearbyint(kRange * std::exp(std::min(s_minus_max, 0.0f))));
}

bool int32_headroom(int head_dim, int block_n, bool minus_128_present) {
  const long long q = minus_128_present ? 128 : 127;
  return q * q * head_dim * block_n <= std::numeric_limits<int32_t>::max();
}

}  // namespace ftattn::accuracy
