// Host model of the f16_pasa kernel numerics (ftattn/pasa.hpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ftattn/pasa.hpp"

namespace ftattn::pasa {
namespace {

float f16(double x) { return static_cast<float>(round_to(x, Precision::f16)); }

}  // namespace

ShiftedBlock shift_block(const float* k, int n, int d, double beta, float scale_log2) {
  ShiftedBlock b;
  b.shift.resize(d);
  b.k_shifted.resize(static_cast<size_t>(n) * d);
  for (int x = 0; x < d; ++x) {
    float sum = 0.f;  // FP32, as the kernel sums
    for (int t = 0; t < n; ++t) sum += k[t * d + x];
    b.shift[x] = f16(static_cast<float>(beta) * (sum / n));
  }
  for (int t = 0; t < n; ++t)
    for (int x = 0; x < d; ++x)
      b.k_shifted[t * d + x] = f16(scale_log2 * (k[t * d + x] - b.shift[x]));
  return b;
}

std::vector<double> attention_row_model(const float* q, const float* k, const float* v,
                                        int seqlen_k, int d, int block_n, double beta,
                                        float scale) {
  const float scale_log2 = scale * static_cast<float>(M_LOG2E);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int tiles = block_n / 8;
  float m = neg_inf;
  float lane_sum[4] = {0.f, 0.f, 0.f, 0.f};  // the quad's partial row sums
  std::vector<double> o(d, 0.0);
  for (int key0 = 0; key0 < seqlen_k; key0 += block_n) {
    const int n = std::min(block_n, seqlen_k - key0);
    const ShiftedBlock sb = shift_block(k + static_cast<size_t>(key0) * d, n, d, beta, scale_log2);
    double qr = 0.0;
    for (int x = 0; x < d; ++x) qr += double(q[x]) * sb.shift[x];
    const float rec = static_cast<float>(qr) * scale_log2;
    std::vector<float> s(block_n, neg_inf);  // keys past the end stay masked
    for (int t = 0; t < n; ++t) {
      float acc = 0.f;
      for (int ks = 0; ks < d; ks += 16) {
        double partial = 0.0;
        for (int x = ks; x < ks + 16; ++x) partial += double(q[x]) * sb.k_shifted[t * d + x];
        acc = f16(acc + partial);
      }
      s[t] = acc;
    }
    const float block_max = *std::max_element(s.begin(), s.end()) + rec;
    const float mx = std::max(m, block_max);
    const float mref = mx == neg_inf ? 0.f : mx;
    const float rescale = std::exp2(m - mref);
    m = mx;
    const float b = std::min(std::max(mref - rec, -65504.f), 65504.f);
    const float b_hi = f16(b), b_lo = f16(b - b_hi);
    std::vector<float> p(block_n);
    for (int t = 0; t < block_n; ++t) p[t] = f16(std::exp2(f16(f16(s[t] - b_hi) - b_lo)));
    // Column c of n8 tile nt belongs to lane (c % 8) / 2, half c % 2; each half sums its tiles
    // pairwise in f16, then a lane adds its two halves in FP32.
    for (int lane = 0; lane < 4; ++lane) {
      float halves = 0.f;
      for (int h = 0; h < 2; ++h) {
        std::vector<float> t(tiles);
        for (int nt = 0; nt < tiles; ++nt) t[nt] = p[nt * 8 + 2 * lane + h];
        for (int w = 1; w < tiles; w *= 2)
          for (int nt = 0; nt + w < tiles; nt += 2 * w) t[nt] = f16(t[nt] + t[nt + w]);
        halves += t[0];
      }
      lane_sum[lane] = lane_sum[lane] * rescale + halves;
    }
    for (int x = 0; x < d; ++x) {
      double acc = o[x] * rescale;
      for (int t = 0; t < n; ++t) acc += double(p[t]) * v[static_cast<size_t>(key0 + t) * d + x];
      o[x] = acc;
    }
  }
  const float l = (lane_sum[0] + lane_sum[1]) + (lane_sum[2] + lane_sum[3]);
  for (double& x : o) x = l > 0.f ? f16(x / l) : 0.0;
  return o;
}

}  // namespace ftattn::pasa
