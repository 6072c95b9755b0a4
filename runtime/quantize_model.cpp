#include "ftattn/quantize_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ftattn/codegen.hpp"
#include "ftattn/errors.hpp"

namespace ftattn::quant_model {

int permuted_key(int k) { return 4 * ((k % 8) / 2) + 2 * (k / 8) + (k % 2); }

float round_e4m3(float x) {
  if (std::isnan(x)) return x;
  const float a = std::min(std::abs(x), 448.0f);
  if (a == 0.0f) return std::copysign(0.0f, x);
  int e = 0;
  std::frexp(a, &e);                                 // a = m 2^e, m in [0.5, 1)
  const int exponent = std::max(e - 1, -6);          // E4M3's smallest normal is 2^-6
  const float ulp = std::ldexp(1.0f, exponent - 3);  // 3 mantissa bits
  return std::copysign(std::min(std::nearbyint(a / ulp) * ulp, 448.0f), x);
}

float range(Precision p) {
  switch (p) {
    case Precision::int8:
      return 127.0f;
    case Precision::fp8_e4m3:
      return 448.0f;
    default:
      break;
  }
  throw ConfigError(fmt::format("precision {} is not an 8-bit precision", to_string(p)));
}

float quantize_value(float x, Precision p) {
  if (p == Precision::int8) return std::clamp(std::nearbyint(x), -127.0f, 127.0f);
  range(p);
  return round_e4m3(x);
}

namespace {

// Quantisation of head_dim values with the scale amax / range (amax: the row's own largest
// magnitude when negative): dequantised values, as the kernel sees them.
std::vector<double> dequantized_row(const std::vector<float>& x, Precision p, float amax = -1) {
  if (amax < 0)
    for (float v : x) amax = std::max(amax, std::abs(v));
  std::vector<double> out(x.size(), 0.0);
  if (amax == 0) return out;
  const float inv = range(p) / amax, scale = amax / range(p);
  for (size_t i = 0; i < x.size(); ++i) out[i] = double(quantize_value(x[i] * inv, p)) * scale;
  return out;
}

}  // namespace

std::vector<double> attention_row(const Problem& pr, Precision p, Mask mask, int block_n,
                                  const reference::Tensor16& q, const reference::Tensor16& k,
                                  const reference::Tensor16& v, int b, int h, int row,
                                  bool lazy_int8) {
  // No block mask is passed here: a block-sparse row would silently read as dense.
  if (is_block_sparse(mask))
    throw ConfigError(
        fmt::format("quant_model::attention_row: mask {} is not modelled (the 8-bit "
                    "kernels run none and causal)",
                    to_string(mask)));
  const int d = pr.head_dim;
  const int hk = h / (pr.heads_q / pr.heads_kv);
  const Precision storage = Precision::f16;
  auto row_of = [&](const reference::Tensor16& t, int head, int s) {
    std::vector<float> x(d);
    for (int i = 0; i < d; ++i) x[i] = t.at(storage, b, head, s, i);
    return x;
  };
  const std::vector<double> qd = dequantized_row(row_of(q, h, row), p);
  // V: a scale per channel over the whole sequence.
  std::vector<float> v_amax(d, 0.0f);
  for (int s = 0; s < pr.seqlen_k; ++s)
    for (int i = 0; i < d; ++i)
      v_amax[i] = std::max(v_amax[i], std::abs(v.at(storage, b, hk, s, i)));

  const int last = is_causal(mask) ? std::min(pr.seqlen_k - 1, row + pr.seqlen_k - pr.seqlen_q)
                                   : pr.seqlen_k - 1;
  std::vector<double> out(d, 0.0);
  if (last < 0) return out;
  std::vector<double> logits(last + 1);
  double mx = -std::numeric_limits<double>::infinity();
  // K: a scale per run of codegen::k_scale_block keys (per token for int8, per 64 for fp8).
  const int run = codegen::k_scale_block(p);
  std::vector<float> k_amax((pr.seqlen_k + run - 1) / run, 0.0f);
  for (int s = 0; s < pr.seqlen_k; ++s)
    for (int i = 0; i < d; ++i)
      k_amax[s / run] = std::max(k_amax[s / run], std::abs(k.at(storage, b, hk, s, i)));
  for (int j = 0; j <= last; ++j) {
    const std::vector<double> kd = dequantized_row(row_of(k, hk, j), p, k_amax[j / run]);
    double s = 0;
    for (int i = 0; i < d; ++i) s += qd[i] * kd[i];
    logits[j] = s * pr.scale() * M_LOG2E;  // base 2, as the kernel works
    mx = std::max(mx, logits[j]);
  }
  // The kernel's online softmax over blocks of block_n keys: P is quantised against the running
  // max of the blocks seen so far, and the earlier state is rescaled when the max grows. Lazy
  // int8: against a whole-number reference that moves to a block's max's ceiling only when that
  // max exceeds it, P = round(255 2^(logit - reference)).
  const bool lazy = lazy_int8 && p == Precision::int8;
  const double p_log2_range = lazy                   ? std::log2(255.0)
                              : p == Precision::int8 ? std::log2(127.0)
                                                     : 8.0;
  std::vector<double> vscale(d);
  for (int i = 0; i < d; ++i) vscale[i] = v_amax[i] / range(p);
  double l = 0, m = -std::numeric_limits<double>::infinity();
  for (int key0 = 0; key0 <= last; key0 += block_n) {
    const int end = std::min(last + 1, key0 + block_n);
    double mn = m;
    for (int j = key0; j < end; ++j) mn = std::max(mn, logits[j]);
    if (lazy) {
      double block_max = -std::numeric_limits<double>::infinity();
      for (int j = key0; j < end; ++j) block_max = std::max(block_max, logits[j]);
      mn = block_max > m ? std::ceil(block_max) : m;
    }
    const double rescale = std::exp2(m - mn);
    l *= rescale;
    for (double& x : out) x *= rescale;
    m = mn;
    for (int j = key0; j < end; ++j) {
      const double y = std::exp2(logits[j] - m + p_log2_range);
      const double pq = p == Precision::int8 ? std::nearbyint(y) : double(round_e4m3(float(y)));
      l += p == Precision::int8 ? pq : y;  // fp8 sums the unrounded P
      for (int i = 0; i < d; ++i) {
        const double vq =
            vscale[i] == 0 ? 0.0 : quantize_value(float(v.at(storage, b, hk, j, i) / vscale[i]), p);
        out[i] += pq * vq;
      }
    }
  }
  for (int i = 0; i < d; ++i) out[i] *= vscale[i];
  for (double& x : out) x /= l;
  return out;
}

}  // namespace ftattn::quant_model
