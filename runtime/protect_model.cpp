#include "ftattn/protect_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "ftattn/protect/locate.cuh"
#include "ftattn/quantize_model.hpp"

namespace ftattn::protect_model {

RowChecksums encode(std::span<const double> row) {
  if (row.size() % kStride != 0)
    throw std::invalid_argument("tensor checksums need a multiple of 8 columns");
  RowChecksums c{};
  for (size_t j = 0; j < row.size(); ++j) {
    const int t = static_cast<int>(j % kStride);
    const int l = static_cast<int>(j / kStride);
    c.c1[t] += row[j];
    c.c2[t] += (l + 1) * row[j];
  }
  return c;
}

Repair check_and_correct(std::span<double> row, const RowChecksums& expected, double tolerance) {
  const RowChecksums got = encode(row);
  const int groups = static_cast<int>(row.size()) / kStride;
  Repair repair;
  for (int t = 0; t < kStride; ++t) {
    double scale = 0.0, weighted = 0.0;
    for (int l = 0; l < groups; ++l) {
      scale += std::abs(row[t + kStride * l]);
      weighted += (l + 1) * std::abs(row[t + kStride * l]);
    }
    // The bound is relative to the magnitudes summed, so it survives large and tiny rows alike.
    const double tol1 = tolerance * std::max(scale, std::numeric_limits<double>::min());
    const double tol2 = tolerance * std::max(weighted, std::numeric_limits<double>::min());
    const double d1 = expected.c1[t] - got.c1[t];
    const double d2 = expected.c2[t] - got.c2[t];
    const bool off1 = std::abs(d1) > tol1, off2 = std::abs(d2) > tol2;
    if (!off1 && !off2) continue;
    if (off1 != off2) return {Verdict::checksum_hit, -1, 0.0};  // one checksum disagrees alone
    const double ratio = d2 / d1;                               // = l + 1 for one error in group l
    const double group = std::round(ratio);
    if (group < 1 || group > groups || std::abs(ratio - group) > 1e-3)
      return {Verdict::uncorrectable, -1, 0.0};
    const int column = t + kStride * (static_cast<int>(group) - 1);
    row[column] += d1;
    repair = {Verdict::corrected, column, d1};
  }
  return repair;
}

double AbftRow::actual() const {
  double s = 0.0;
  for (double x : out) s += x;
  return s;
}

AbftRow flash_abft_row(std::span<const double> scores, std::span<const double> values, int head_dim,
                       void (*fault)(Stage, int, double&)) {
  const int keys = static_cast<int>(scores.size());
  if (values.size() != static_cast<size_t>(keys) * head_dim)
    throw std::invalid_argument("values must be keys x head_dim");
  AbftRow r;
  r.out.assign(head_dim, 0.0);
  double m = -std::numeric_limits<double>::infinity(), l = 0.0, c = 0.0;
  for (int i = 0; i < keys; ++i) {
    double s = scores[i];
    if (fault) fault(Stage::score, i, s);
    const double m_new = std::max(m, s);
    const double alpha = std::exp(m - m_new);
    double p = std::exp(s - m_new);
    if (fault) fault(Stage::probability, i, p);
    double row_sum = 0.0;  // rowsum(v_i): the checksum lane of V, computed from fault-free V
    for (int x = 0; x < head_dim; ++x) row_sum += values[static_cast<size_t>(i) * head_dim + x];
    l = l * alpha + p;
    c = c * alpha + p * row_sum;
    for (int x = 0; x < head_dim; ++x) {
      r.out[x] = r.out[x] * alpha + p * values[static_cast<size_t>(i) * head_dim + x];
      if (fault && x == 0) fault(Stage::output_accumulator, i, r.out[x]);
    }
    m = m_new;
  }
  for (double& x : r.out) x /= l;
  r.predicted = c / l;
  return r;
}

namespace {

// The top digit of c's balanced base-128 form with `count` digits (lower digits in [-64, 63]).
long long top_digit(long long c, int count) {
  for (int i = 0; i < count - 1; ++i) {
    long long d = ((c % 128) + 128) % 128;
    if (d >= 64) d -= 128;
    c = (c - d) / 128;
  }
  return c;
}

}  // namespace

int int8_checksum_digit_count(int head_dim) {
  if (head_dim < 1) throw std::invalid_argument("head_dim must be positive");
  // |c| <= 127 head_dim, and the top digit grows with |c|: the two extremes decide.
  const long long bound = 127LL * head_dim;
  int count = 1;
  while (std::abs(top_digit(bound, count)) > 127 || std::abs(top_digit(-bound, count)) > 127)
    ++count;
  return count;
}

std::vector<int8_t> int8_checksum_digits(int c, int count) {
  if (count < 1) throw std::invalid_argument("at least one digit");
  std::vector<int8_t> digits(count);
  long long rest = c;
  for (int i = 0; i < count - 1; ++i) {
    const long long d = rest - 128 * top_digit(rest, 2);  // the balanced low digit, [-64, 63]
    digits[i] = static_cast<int8_t>(d);
    rest = (rest - d) / 128;
  }
  if (rest < -127 || rest > 127)
    throw std::invalid_argument("the channel sum needs more base-128 digits");
  digits[count - 1] = static_cast<int8_t>(rest);
  return digits;
}

int int8_checksum_value(std::span<const int8_t> digits) {
  long long c = 0, unit = 1;
  for (int8_t d : digits) {
    c += unit * d;
    unit *= 128;
  }
  return static_cast<int>(c);
}

Int8BlockSums int8_block_sums(std::span<const uint8_t> p, std::span<const int8_t> v, int head_dim,
                              uint32_t bias) {
  const size_t keys = p.size();
  if (v.size() != keys * static_cast<size_t>(head_dim))
    throw std::invalid_argument("v must hold block_n x head_dim values");
  const int count = int8_checksum_digit_count(head_dim);
  Int8BlockSums s;
  s.channels.assign(head_dim, bias);
  s.digits.assign(count, bias);
  for (size_t j = 0; j < keys; ++j) {
    if (p[j] > 127) throw std::invalid_argument("P is quantised to 0..127");
    int c = 0;
    for (int d = 0; d < head_dim; ++d) {
      s.channels[d] += static_cast<uint32_t>(p[j] * v[j * head_dim + d]);  // wraps, as INT32 does
      c += v[j * head_dim + d];
    }
    const std::vector<int8_t> digits = int8_checksum_digits(c, count);
    for (int i = 0; i < count; ++i) s.digits[i] += static_cast<uint32_t>(p[j] * digits[i]);
  }
  return s;
}

Int8Check int8_block_check(const Int8BlockSums& sums, uint32_t bias) {
  Int8Check c;
  for (uint32_t a : sums.channels) c.lhs += a - bias;
  uint32_t unit = 1;
  for (uint32_t a : sums.digits) {
    c.rhs += unit * (a - bias);
    unit *= 128u;
  }
  return c;
}

Int8FoldedRow int8_folded_row(int head_dim) {
  if (int8_checksum_digit_count(head_dim) != 2)
    throw std::invalid_argument(
        "the wgmma kernel's checksum columns hold two digits: head_dim <= 128");
  Int8FoldedRow row;
  row.o.assign(head_dim, 0);
  return row;
}

void int8_folded_add(Int8FoldedRow& row, std::span<const uint8_t> p, std::span<const int8_t> v) {
  const size_t d = row.o.size();
  if (v.size() != p.size() * d)
    throw std::invalid_argument("v must hold block_n x head_dim values");
  auto add = [](int32_t& acc, int x) {  // wraps, as INT32 does
    acc = static_cast<int32_t>(static_cast<uint32_t>(acc) + static_cast<uint32_t>(x));
  };
  for (size_t j = 0; j < p.size(); ++j) {
    int c = 0, w = 0;
    for (size_t ch = 0; ch < d; ++ch) {
      add(row.o[ch], p[j] * v[j * d + ch]);
      c += v[j * d + ch];
      w += static_cast<int>(ch + 1) * v[j * d + ch];
    }
    const std::vector<int8_t> digits = int8_checksum_digits(c, 2);
    add(row.c0, p[j] * digits[0]);
    add(row.c1, p[j] * digits[1]);
    add(row.l, 64 * p[j]);
    const std::vector<int8_t> weighted = int8_checksum_digits(w, 3);
    add(row.w0, p[j] * weighted[0]);
    add(row.w1, p[j] * weighted[1]);
    add(row.w2, p[j] * weighted[2]);
  }
}

void int8_folded_shift(Int8FoldedRow& row, const std::array<int, 4>& shifts) {
  for (int s : shifts)
    if (s < 0 || s > 30) throw std::invalid_argument("a fold shifts by 0 to 30");
  uint32_t moved = 0, moved_w = 0;
  auto fold = [&](int32_t& x, int lane) {  // arithmetic shift: floors
    const int s = shifts[lane];
    const int32_t before = x;
    x = (x + ((int32_t{1} << s) >> 1)) >> s;
    return static_cast<uint32_t>(x - before);
  };
  for (size_t d = 0; d < row.o.size(); ++d) {
    const uint32_t step = fold(row.o[d], static_cast<int>(d % 8 / 2));
    moved += step;
    moved_w += static_cast<uint32_t>(d + 1) * step;
  }
  moved -= fold(row.c0, 0);
  moved -= 128u * fold(row.c1, 0);
  fold(row.l, 3);
  moved_w -= fold(row.w0, 1);
  moved_w -= 128u * fold(row.w1, 1);
  moved_w -= 16384u * fold(row.w2, 2);
  for (int lane = 1; lane < 4; ++lane)
    if (shifts[lane] != shifts[0]) {
      moved += 1u << 30;
      moved_w += 3u << 29;  // a ratio to D's mark that locates no element
    }
  row.c0 = static_cast<int32_t>(static_cast<uint32_t>(row.c0) + moved);
  row.w0 = static_cast<int32_t>(static_cast<uint32_t>(row.w0) + moved_w);
}

int int8_folded_apart(const Int8FoldedRow& row) {
  uint32_t apart = 0;
  for (int32_t x : row.o) apart += static_cast<uint32_t>(x);
  apart -= static_cast<uint32_t>(row.c0) + 128u * static_cast<uint32_t>(row.c1);
  return static_cast<int>(apart);
}

Int8Repair int8_folded_repair(Int8FoldedRow& row) {
  Int8Repair r;
  const auto apart = static_cast<uint32_t>(int8_folded_apart(row));
  if (apart == 0u) return r;
  r.seen = true;
  long long e0 = -(static_cast<long long>(row.c0) + 128LL * row.c1);
  long long e1 = -(static_cast<long long>(row.w0) + 128LL * row.w1 + 16384LL * row.w2);
  for (size_t d = 0; d < row.o.size(); ++d) {
    e0 += row.o[d];
    e1 += static_cast<long long>(d + 1) * row.o[d];
  }
  r.channel = protect::exact_index(e0, e1, static_cast<int>(row.o.size()));
  r.corrected = r.channel >= 0 || e1 == 0;
  if (r.channel >= 0)
    row.o[r.channel] = static_cast<int32_t>(static_cast<uint32_t>(row.o[r.channel]) - apart);
  else
    row.c0 = static_cast<int32_t>(static_cast<uint32_t>(row.c0) + apart);
  return r;
}

Int8StridedRow int8_strided_row(std::span<const int8_t> q, std::span<const int8_t> y, int n,
                                uint32_t bias) {
  const size_t d = q.size();
  if (n < 1 || y.size() != d * static_cast<size_t>(n))
    throw std::invalid_argument("y must hold n rows of head_dim values");
  Int8StridedRow row;
  row.x.assign(n, bias);
  std::vector<int> plain(d, 0), weighted(d, 0);
  for (int j = 0; j < n; ++j)
    for (size_t c = 0; c < d; ++c) {
      const int v = y[j * d + c];
      row.x[j] += static_cast<uint32_t>(q[c] * v);  // wraps, as INT32 does
      plain[c] += v;
      weighted[c] += (j + 1) * v;
    }
  // Each checksum through its digit rows and their own biased accumulators, as the MMAs give it.
  auto through_digits = [&](const std::vector<int>& sums, int count) {
    std::vector<uint32_t> acc(count, bias);
    for (size_t c = 0; c < d; ++c) {
      const std::vector<int8_t> digits = int8_checksum_digits(sums[c], count);
      for (int i = 0; i < count; ++i) acc[i] += static_cast<uint32_t>(q[c] * digits[i]);
    }
    long long value = 0, unit = 1;
    for (int i = 0; i < count; ++i, unit *= 128) value += unit * static_cast<int>(acc[i] - bias);
    return value;
  };
  row.plain = through_digits(plain, 2);
  row.weighted = through_digits(weighted, 3);
  return row;
}

uint32_t int8_strided_diff(const Int8StridedRow& row, uint32_t bias) {
  uint32_t sum = 0;
  for (uint32_t x : row.x) sum += x - bias;
  return sum - static_cast<uint32_t>(row.plain);
}

int int8_strided_repair(Int8StridedRow& row, uint32_t bias) {
  long long e1 = -row.plain, e2 = -row.weighted;
  for (size_t j = 0; j < row.x.size(); ++j) {
    const long long x = static_cast<int32_t>(row.x[j] - bias);
    e1 += x;
    e2 += static_cast<long long>(j + 1) * x;
  }
  const int j = protect::exact_index(e1, e2, static_cast<int>(row.x.size()));
  if (j >= 0) row.x[j] -= static_cast<uint32_t>(e1);
  return j;
}

ProductCheck efta_correct_product_check(std::span<const float> scores, float scale_log2,
                                        float shift, int group, double num_exact, float budget,
                                        void (*fault)(int, float&)) {
  const int n = static_cast<int>(scores.size());
  if (group < 2 || group % 2 != 0 || n % group != 0)
    throw std::invalid_argument("the product check takes whole groups of an even size");
  ProductCheck c;
  c.smallest = std::numeric_limits<float>::infinity();
  auto seen = [&](float x) {
    c.smallest = std::min(c.smallest, std::abs(x));
    c.largest = std::max(c.largest, std::abs(x));
  };
  const float num = static_cast<float>(num_exact);
  float t_sum = 0.f, residual = 0.f, prod = 1.f;
  for (int g = 0; g < n / group; ++g) {
    // The GEMM I check's raw sum of the group, pairwise as the kernel adds a tile's two values.
    float raw = 0.f;
    for (int j = g * group; j < (g + 1) * group; j += 2) raw += scores[j] + scores[j + 1];
    const float t_group = std::fma(raw, scale_log2, -static_cast<float>(group) * shift);
    t_sum += t_group;
    c.in_range = c.in_range && t_group >= -100.f;
    const float biased = std::fma(t_group, 1.f / static_cast<float>(group), 12582912.f);
    int bits;
    std::memcpy(&bits, &biased, sizeof bits);
    const int k = bits - 0x4B400000;
    residual += std::fma(-static_cast<float>(group), biased - 12582912.f, t_group);
    const int norm2_bits = (127 << 23) - k * (1 << 24);
    float norm2;
    std::memcpy(&norm2, &norm2_bits, sizeof norm2);
    for (int j = g * group; j < (g + 1) * group; j += 2) {
      float x[2];
      for (int c2 = 0; c2 < 2; ++c2) {
        x[c2] = std::exp2(std::fma(scores[j + c2], scale_log2, -shift));
        if (fault != nullptr) fault(j + c2, x[c2]);
      }
      const float half = x[1] * norm2;
      const float pair = x[0] * half;
      prod *= pair;
      seen(half);
      seen(pair);
      seen(prod);
    }
  }
  c.prod = prod;
  c.expected = std::exp2(residual);
  const float rounding =
      6e-8f * ((group + 2) * std::abs(t_sum) + n * (group - 1) * std::abs(shift) + std::abs(num));
  c.tol = (n * 5e-7f + 1e-5f + 0.6931472f * rounding) * c.expected;
  c.dev = std::abs(prod - c.expected);
  const bool exponents_ok = std::abs(t_sum - num) <= budget + rounding;
  c.alarm = !exponents_ok || (c.in_range && !(c.dev <= c.tol));
  return c;
}

double fp8_wgmma_scale(int head_dim) { return 0.5 / head_dim; }

double Fp8WgmmaRows::value() const {
  return double{digits[0]} + digits[1] / 16.0 + digits[2] / 256.0;
}

// As fp8_v_digit_rows computes it, in FP32: the sums are exact (E4M3 values of at most 128
// channels), each remainder's subtraction too (the digit is its nearest E4M3).
Fp8WgmmaRows fp8_wgmma_rows(std::span<const float> v) {
  if (v.empty() || v.size() > 128)
    throw std::invalid_argument("fp8_wgmma_rows: a key's 1 to 128 channel values");
  const float s = static_cast<float>(fp8_wgmma_scale(static_cast<int>(v.size())));
  float c = 0.0f, a = 0.0f;
  for (float x : v) {
    c += x;
    a += std::abs(x);
  }
  Fp8WgmmaRows rows;
  float rest = c * s;
  constexpr float weight[3] = {1.0f, 0x1p-4f, 0x1p-8f};
  for (int i = 0; i < 3; ++i) {
    rows.digits[i] = quant_model::round_e4m3(rest / weight[i]);
    rest -= rows.digits[i] * weight[i];
  }
  rows.magnitude = quant_model::round_e4m3(std::max(a * s, 4.0f));
  return rows;
}

Fp8FoldedRow fp8_folded_row(int head_dim) {
  if (head_dim <= 0 || head_dim % 8 != 0 || head_dim > 128)
    throw std::invalid_argument("fp8_folded_row: head_dim a multiple of 8 up to 128");
  Fp8FoldedRow row;
  row.o.assign(head_dim, 0.0f);
  return row;
}

void fp8_folded_add(Fp8FoldedRow& row, std::span<const float> p, std::span<const float> v,
                    const std::array<float, 4>& alpha) {
  const int d = static_cast<int>(row.o.size());
  const size_t keys = p.size();
  if (keys == 0 || v.size() != keys * d)
    throw std::invalid_argument("fp8_folded_add: p has block_n values, v block_n x head_dim");
  std::array<float, 4> part{};
  for (int c = 0; c < d; ++c) {
    double pv = 0;
    for (size_t k = 0; k < keys; ++k) pv += double{p[k]} * v[k * d + c];
    const int lane = (c % 8) / 2;
    row.o[c] = std::fma(row.o[c], alpha[lane], static_cast<float>(pv));
    part[lane] += static_cast<float>(pv);
  }
  std::array<double, 4> columns{};
  for (size_t k = 0; k < keys; ++k) {
    const Fp8WgmmaRows rows = fp8_wgmma_rows(v.subspan(k * d, d));
    for (int i = 0; i < 3; ++i) columns[i] += double{p[k]} * rows.digits[i];
    columns[3] += double{p[k]} * rows.magnitude;
  }
  for (int t = 0; t < 4; ++t) row.folded[t] = std::fma(row.folded[t], alpha[0], part[t]);
  for (int i = 0; i < 4; ++i)
    row.checksum[i] = std::fma(row.checksum[i], alpha[i / 2], static_cast<float>(columns[i]));
  ++row.blocks;
}

Fp8RowChecks fp8_folded_checks(const Fp8FoldedRow& row, float tol_output) {
  const double unscale = 1.0 / fp8_wgmma_scale(static_cast<int>(row.o.size()));
  double sum = 0, values = 0, folded = 0;
  for (float x : row.o) sum += x, values += std::abs(x);
  for (float x : row.folded) folded += x;
  const double checksum =
      (row.checksum[0] + row.checksum[1] / 16.0 + row.checksum[2] / 256.0) * unscale;
  Fp8RowChecks c;
  c.o_error = std::abs(sum - folded);
  c.o_threshold = tol_output * (row.blocks + 16.0) * (values + std::abs(folded));
  c.gemm_error = std::abs(folded - checksum);
  c.gemm_threshold = tol_output * 4096.0 * row.checksum[3] * unscale;
  return c;
}

}  // namespace ftattn::protect_model
