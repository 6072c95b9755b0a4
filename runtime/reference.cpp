#include "ftattn/reference.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>

#include "runtime/hash.hpp"

namespace ftattn::reference {
namespace {

uint16_t float_to_half(float x) {
  const uint32_t f = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN, Inf
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds past the largest half: Inf
  if (abs < 0x38800000u) {                        // subnormal half (or zero)
    // Scale into the subnormal grid and let the FPU round to nearest even.
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;  // 2^24
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t mant = abs & 0x7fffffu;
  uint32_t exp = (abs >> 23) - 112;
  uint32_t half = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // nearest even
  return static_cast<uint16_t>(sign | half);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t float_to_bf16(float x) {
  uint32_t f = std::bit_cast<uint32_t>(x);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // NaN
  f += 0x7fffu + ((f >> 16) & 1u);  // nearest even
  return static_cast<uint16_t>(f >> 16);
}

float bf16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// f16_pasa kernels take and write f16 tensors.
bool is_16bit(Precision p) {
  return p == Precision::f16 || p == Precision::bf16 || p == Precision::f16_pasa;
}

}  // namespace

uint16_t to_bits(float x, Precision p) {
  return p == Precision::bf16 ? float_to_bf16(x) : float_to_half(x);
}

float from_bits(uint16_t bits, Precision p) {
  return p == Precision::bf16 ? bf16_to_float(bits) : half_to_float(bits);
}

size_t span_elements(const Strides& s, int batch, int heads, int seqlen, int head_dim) {
  return static_cast<size_t>((batch - 1) * s.batch + (heads - 1) * s.head + (seqlen - 1) * s.seq +
                             head_dim);
}

namespace {

// Counter-based normal samples: element i depends only on (seed, i), so the fill can be split
// across threads and stays reproducible.
float normal_sample(uint64_t seed, uint64_t i) {
  const uint64_t bits = runtime::splitmix64(seed ^ runtime::splitmix64(i));
  const double u1 = (static_cast<double>(bits >> 40) + 1.0) / 16777217.0;  // (0, 1]
  const double u2 = static_cast<double>(bits & 0xffffffu) / 16777216.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace

Tensor16 random_tensor(std::mt19937_64& rng, Precision p, const Strides& strides, int batch,
                       int heads, int seqlen, int head_dim, float stddev) {
  Tensor16 t;
  t.strides = strides;
  t.data.assign(span_elements(strides, batch, heads, seqlen, head_dim),
                to_bits(std::numeric_limits<float>::quiet_NaN(), p));
  const uint64_t seed = rng();
  const long long rows = 1LL * batch * heads * seqlen;
  auto fill = [&](long long begin, long long end) {
    for (long long r = begin; r < end; ++r) {
      const int s = static_cast<int>(r % seqlen);
      const int h = static_cast<int>((r / seqlen) % heads);
      const int b = static_cast<int>(r / (1LL * seqlen * heads));
      uint16_t* row = t.data.data() + b * strides.batch + h * strides.head + s * strides.seq;
      for (int d = 0; d < head_dim; ++d)
        row[d] = to_bits(stddev * normal_sample(seed, static_cast<uint64_t>(r) * head_dim + d), p);
    }
  };
  const unsigned workers =
      rows * head_dim < (1 << 20) ? 1u : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w)
    threads.emplace_back(fill, rows * w / workers, rows * (w + 1) / workers);
  for (auto& th : threads) th.join();
  return t;
}

std::vector<double> attention_row(const Problem& pr, Precision p, Mask mask, const Tensor16& q,
                                  const Tensor16& k, const Tensor16& v, int b, int h, int row,
                                  double* lse, const uint8_t* block_mask) {
  const int d = pr.head_dim;
  const int hk = h / (pr.heads_q / pr.heads_kv);
  // Bottom-right causal alignment: row i sees keys j <= i + seqlen_k - seqlen_q.
  const int last = is_causal(mask) ? std::min(pr.seqlen_k - 1, row + pr.seqlen_k - pr.seqlen_q)
                                   : pr.seqlen_k - 1;
  if (is_block_sparse(mask) && block_mask == nullptr)
    throw std::invalid_argument("reference: a block-sparse mask needs its block_mask");
  // Key j is kept when its (query block, key block) byte is nonzero.
  auto kept = [&](int j) {
    if (!is_block_sparse(mask)) return true;
    return block_mask[h * pr.block_mask_head_bytes() +
                      int64_t{row / pr.sparse_block_m} * pr.block_mask_k_blocks() +
                      j / pr.sparse_block_n] != 0;
  };
  std::vector<double> out(d, 0.0);
  std::vector<double> qrow(d), scores(std::max(last + 1, 0));
  for (int x = 0; x < d; ++x) qrow[x] = q.at(p, b, h, row, x);
  double mx = -std::numeric_limits<double>::infinity();
  for (int j = 0; j <= last; ++j) {
    if (!kept(j)) continue;
    double s = 0.0;
    for (int x = 0; x < d; ++x) s += qrow[x] * k.at(p, b, hk, j, x);
    scores[j] = s * pr.scale();
    mx = std::max(mx, scores[j]);
  }
  if (mx == -std::numeric_limits<double>::infinity()) {  // the row sees no key at all
    if (lse) *lse = mx;
    return out;
  }
  double sum = 0.0;
  for (int j = 0; j <= last; ++j) {
    if (!kept(j)) continue;
    const double e = std::exp(scores[j] - mx);
    sum += e;
    for (int x = 0; x < d; ++x) out[x] += e * v.at(p, b, hk, j, x);
  }
  for (double& x : out) x /= sum;
  if (lse) *lse = mx + std::log(sum);
  return out;
}

std::string CheckReport::summary() const {
  return fmt::format(
      "{}: {} rows checked, rel L2 error {:.3e} (worst row {:.3e}), max abs error {:.3e}{}, {} "
      "non-finite{}",
      passed ? "PASS" : "FAIL", rows_checked, rel_l2_error, max_row_error, max_abs_error,
      max_lse_error > 0 ? fmt::format(", max lse error {:.3e}", max_lse_error) : "", non_finite,
      bad_lse > 0 ? fmt::format(", {} LSE entries no row can have", bad_lse) : "");
}

Tolerance tolerance(Precision p, const Problem& problem) {
  // 8-bit: quantisation error, not rounding, dominates. The host model of the kernels
  // (quant_model, tests/runtime/test_quantize_model.cpp) gives rel L2 about 2e-2 (int8) and 5e-2
  // (fp8) on N(0, 1) inputs at a few thousand keys; the bounds leave 2x for other shapes. LSE
  // moves by the dequantised scores' error, a few 1e-2 at most.
  // f16_pasa: FP16 scores and FP16 P give each probability a random relative error near 1e-3;
  // the host model (ftattn/pasa.hpp, tests/codegen/test_pasa.cpp) gives rel L2 9e-4 on N(0, 1)
  // at head dim 128 without ex2.approx.f16x2's own error (at most 2^-9.9 relative): 5e-3
  // leaves room for it and about 2x more.
  Tolerance t;
  t.rel_l2 = p == Precision::bf16       ? 1e-2
             : p == Precision::int8     ? 5e-2
             : p == Precision::fp8_e4m3 ? 1e-1
             : p == Precision::f16_pasa ? 5e-3
                                        : 2e-3;
  const bool q8 = p == Precision::int8 || p == Precision::fp8_e4m3;
  t.lse = q8 ? 1e-1 : 1e-2;
  // int8 quantises P = round(127 p) (Hopper: 255 p) against the running max, so keys with p
  // below half a step add nothing (and l leaves them out). The row max of N(0, 1) scores grows
  // like sqrt(2 ln N), so that share grows with the key count: the host model's rel L2 goes
  // 4.3e-2 / 5.2e-2 / 7.7e-2 / 1.0e-1 at 16k / 64k / 256k / 1M keys (round(127 p); round(255 p)
  // 3.4e-2 / 4.0e-2 / 6.2e-2 / 7.9e-2). From 4k keys the bounds grow as the fourth root of the
  // count, twice the model at 1M. fp8 keeps P in floating point: 5.2-5.6e-2 up to 1M keys.
  if (p == Precision::int8 && problem.seqlen_k > 4096) {
    const double growth = std::pow(problem.seqlen_k / 4096.0, 0.25);
    t.rel_l2 *= growth;
    t.lse *= growth;
  }
  // One row may go to 10x the pooled bound, but never to half its own norm: a row left at 0 (or
  // its keys' mean) fails whatever the precision.
  t.row = std::min(10 * t.rel_l2, 0.5);
  return t;
}

CheckReport check(const Problem& pr, Precision p, Mask mask, const Tensor16& q, const Tensor16& k,
                  const Tensor16& v, const Tensor16& o, const std::vector<float>* lse, int rows,
                  uint64_t seed, const uint8_t* block_mask) {
  CheckReport r;
  // int8 and fp8_e4m3 kernels take f16 inputs (quantised on the GPU) and write f16.
  const bool q8 = p == Precision::int8 || p == Precision::fp8_e4m3;
  if (!is_16bit(p) && !q8)
    throw std::invalid_argument(
        "reference::check handles f16, bf16, f16_pasa, int8 and fp8_e4m3 only");
  for (int b = 0; b < pr.batch; ++b)
    for (int h = 0; h < pr.heads_q; ++h)
      for (int s = 0; s < pr.seqlen_q; ++s)
        for (int x = 0; x < pr.head_dim; ++x)
          if (!std::isfinite(o.at(p, b, h, s, x))) ++r.non_finite;
  // Every LSE entry, not only the sampled rows': an LSE store that skips rows leaves the
  // caller's fill (NaN) there. -inf belongs to rows that see no key: causal rows above the
  // bottom-right diagonal; block-sparse rows are not known without their mask walk.
  if (lse != nullptr) {
    for (long long i = 0; i < static_cast<long long>(lse->size()); ++i) {
      const float x = (*lse)[i];
      if (std::isnan(x) || x == INFINITY) {
        ++r.bad_lse;
      } else if (x == -INFINITY && !is_block_sparse(mask)) {
        const long long s = i % pr.seqlen_q;
        const bool sees_none = is_causal(mask) && s + pr.seqlen_k - pr.seqlen_q < 0;
        if (!sees_none) ++r.bad_lse;
      }
    }
  }

  // Which (b, h, row) to compare: all, or a random spread that always includes the first and
  // last rows (the sequence ends are where masking bugs live).
  const long long total = 1LL * pr.batch * pr.heads_q * pr.seqlen_q;
  std::vector<long long> picks;
  if (rows <= 0 || total <= rows) {
    for (long long i = 0; i < total; ++i) picks.push_back(i);
  } else {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<long long> any(0, total - 1);
    picks = {0, total - 1, pr.seqlen_q - 1};
    while (static_cast<int>(picks.size()) < rows) picks.push_back(any(rng));
  }
  double err2 = 0.0, ref2 = 0.0;
  std::vector<std::pair<double, double>> row_sums;  // per checked row: err^2, ref^2
  row_sums.reserve(picks.size());
  for (long long idx : picks) {
    const int s = static_cast<int>(idx % pr.seqlen_q);
    const int h = static_cast<int>((idx / pr.seqlen_q) % pr.heads_q);
    const int b = static_cast<int>(idx / (1LL * pr.seqlen_q * pr.heads_q));
    double ref_lse = 0.0;
    const std::vector<double> ref =
        attention_row(pr, p, mask, q, k, v, b, h, s, &ref_lse, block_mask);
    double row_err2 = 0.0, row_ref2 = 0.0;
    for (int x = 0; x < pr.head_dim; ++x) {
      const double got = o.at(p, b, h, s, x);
      const double e = std::abs(got - ref[x]);
      r.max_abs_error = std::max(r.max_abs_error, std::isnan(e) ? INFINITY : e);
      row_err2 += e * e;
      row_ref2 += ref[x] * ref[x];
    }
    err2 += row_err2;
    ref2 += row_ref2;
    row_sums.emplace_back(row_err2, row_ref2);
    if (lse != nullptr) {
      const double got = (*lse)[idx];
      const double e =
          std::isinf(ref_lse) ? (got == ref_lse ? 0.0 : INFINITY) : std::abs(got - ref_lse);
      r.max_lse_error = std::max(r.max_lse_error, std::isnan(e) ? INFINITY : e);
    }
    ++r.rows_checked;
  }
  r.rel_l2_error = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  // Each row against its own norm, or the rows' root mean square where its own is small (a row
  // whose values cancel): relative error there would read any rounding as huge.
  const double mean_ref2 = row_sums.empty() ? 0.0 : ref2 / static_cast<double>(row_sums.size());
  for (const auto& [e2, f2] : row_sums) {
    const double scale2 = std::max(f2, mean_ref2);
    const double row = scale2 > 0 ? std::sqrt(e2 / scale2) : std::sqrt(e2);
    r.max_row_error = std::max(r.max_row_error, std::isnan(row) ? INFINITY : row);
  }
  const Tolerance tol = tolerance(p, pr);
  r.passed = r.non_finite == 0 && r.bad_lse == 0 && r.rel_l2_error < tol.rel_l2 &&
             r.max_row_error < tol.row && r.max_lse_error < tol.lse &&
             std::isfinite(r.max_abs_error);
  return r;
}

}  // namespace ftattn::reference
