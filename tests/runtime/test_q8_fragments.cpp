// CPU emulation of the 8-bit forward kernel (kernel/fwd_q8_sm80.cuh, int8): shared memory as a
// byte array, ldmatrix and mma.m16n8k32 distributing elements over the 32 lanes as the PTX ISA
// specifies, the kernel's own lane addressing, scale reads, P packing and cp.async schedule.
// Copies may land as soon as they are issued (the earliest the hardware allows) or only at the
// wait that needs them: both must reproduce the host model (quant_model::attention_row). The
// GPU runs the same layouts for e4m3 (the m16n8k32 fragments are shared by .s8 and .e4m3).
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ftattn/config.hpp"
#include "ftattn/quantize_model.hpp"
#include "ftattn/reference.hpp"

using namespace ftattn;

namespace {

using u32 = uint32_t;

struct Tile {
  int d, bm, bn, warps, stages;
};

// The quantised operands in the layout of params.cuh (one batch, one head).
struct Operands {
  int sq = 0, sk = 0, d = 0, keys_padded = 0;
  std::vector<uint8_t> q, k, vt;  // int8 bytes
  std::vector<float> q_scale, k_scale, v_scale;
};

int8_t quantize(float x, float inv) {
  return static_cast<int8_t>(quant_model::quantize_value(x * inv, Precision::int8));
}

Operands quantize_operands(const Problem& pr, const reference::Tensor16& q,
                           const reference::Tensor16& k, const reference::Tensor16& v) {
  Operands o;
  o.sq = pr.seqlen_q, o.sk = pr.seqlen_k, o.d = pr.head_dim;
  o.keys_padded = (o.sk + 15) / 16 * 16;
  auto rows = [&](const reference::Tensor16& t, int n, int scale_n, std::vector<uint8_t>& out,
                  std::vector<float>& scale) {
    out.assign(static_cast<size_t>(n) * o.d, 0);
    scale.assign(scale_n, 0.0f);
    for (int s = 0; s < n; ++s) {
      float amax = 0;
      for (int i = 0; i < o.d; ++i)
        amax = std::max(amax, std::abs(t.at(Precision::f16, 0, 0, s, i)));
      const float inv = amax > 0 ? 127.0f / amax : 0.0f;
      for (int i = 0; i < o.d; ++i)
        out[s * o.d + i] = static_cast<uint8_t>(quantize(t.at(Precision::f16, 0, 0, s, i), inv));
      scale[s] = amax / 127.0f;
    }
  };
  rows(q, o.sq, o.sq, o.q, o.q_scale);
  rows(k, o.sk, o.keys_padded, o.k, o.k_scale);
  o.v_scale.assign(o.d, 0.0f);
  for (int s = 0; s < o.sk; ++s)
    for (int i = 0; i < o.d; ++i)
      o.v_scale[i] = std::max(o.v_scale[i], std::abs(v.at(Precision::f16, 0, 0, s, i)) / 127.0f);
  o.vt.assign(static_cast<size_t>(o.d) * o.keys_padded, 0);
  for (int s = 0; s < o.sk; ++s)
    for (int i = 0; i < o.d; ++i) {
      const float inv = o.v_scale[i] > 0 ? 1.0f / o.v_scale[i] : 0.0f;
      const int col = (s & ~15) + quant_model::permuted_key(s % 16);
      o.vt[i * o.keys_padded + col] =
          static_cast<uint8_t>(quantize(v.at(Precision::f16, 0, 0, s, i), inv));
    }
  return o;
}

class Emulator {
 public:
  Emulator(Tile t, bool causal, bool eager, bool prefetch_before_dequant)
      : t_(t), causal_(causal), eager_(eager), old_order_(prefetch_before_dequant) {
    mt_ = t.bm / (16 * t.warps), st_ = t.bn / 8, ot_ = t.d / 8;
    qk_stride_ = t.d + 16, vt_stride_ = t.bn + 16;
    k_stage_ = t.bn * qk_stride_ + t.bn * 4, v_stage_ = t.d * vt_stride_;
    sK_ = t.bm * qk_stride_, sV_ = sK_ + t.stages * k_stage_;
    smem_.assign(sV_ + t.stages * v_stage_, 0xAB);  // garbage until written
  }

  // Runs every CTA; out is seqlen_q x d, lse per row (natural log).
  void run(const Operands& in, float scale_log2, std::vector<float>& out, std::vector<float>& lse) {
    out.assign(static_cast<size_t>(in.sq) * in.d, 0.0f);
    lse.assign(in.sq, 0.0f);
    for (int m = 0; m < (in.sq + t_.bm - 1) / t_.bm; ++m) cta(in, scale_log2, m, out, lse);
  }

 private:
  struct Copy {
    int dst;
    const uint8_t* src;  // null: zero-fill
  };
  Tile t_;
  bool causal_, eager_, old_order_;
  int mt_, st_, ot_, qk_stride_, vt_stride_, k_stage_, v_stage_, sK_, sV_;
  std::vector<uint8_t> smem_;
  std::vector<std::vector<Copy>> groups_;
  std::vector<Copy> open_;

  void land(const Copy& c) {
    for (int i = 0; i < 16; ++i) smem_.at(c.dst + i) = c.src ? c.src[i] : 0;
  }
  void cp16(int dst, const uint8_t* src) {
    if (eager_)
      land({dst, src});
    else
      open_.push_back({dst, src});
  }
  void commit() {
    groups_.push_back(open_);
    open_.clear();
  }
  void wait(int n) {
    while (static_cast<int>(groups_.size()) > n) {
      for (const Copy& c : groups_.front()) land(c);
      groups_.erase(groups_.begin());
    }
  }
  // sm80::load_rows
  void load_rows(int dst, const uint8_t* src, long stride, int valid_rows, int valid_bytes,
                 int rows, int row_bytes, int smem_stride) {
    for (int r = 0; r < rows; ++r)
      for (int col = 0; col < row_bytes; col += 16) {
        const bool valid = r < valid_rows && col < valid_bytes;
        cp16(dst + r * smem_stride + col, valid ? src + r * stride + col : nullptr);
      }
  }
  u32 word(int addr) const {
    u32 w;
    std::memcpy(&w, &smem_.at(addr), 4);
    return w;
  }
  float f32(int addr) const {
    float f;
    std::memcpy(&f, &smem_.at(addr), 4);
    return f;
  }
  // ldmatrix.x4.b16: lane l supplies row l % 8 of matrix l / 8; register j of lane l is the
  // 4-byte word l % 4 of row l / 4 of matrix j.
  void ldmatrix_x4(const int (&addr)[32], u32 (&r)[32][4]) const {
    for (int l = 0; l < 32; ++l)
      for (int j = 0; j < 4; ++j) r[l][j] = word(addr[8 * j + l / 4] + 4 * (l % 4));
  }
  // mma.m16n8k32.row.col.s32.s8.s8.s32 with the PTX ISA fragment layouts: A register r of lane
  // (g, t) holds row g + 8 (r % 2), k = 4t + 16 (r / 2) + byte; B register r holds k = 4t + 16 r
  // + byte of column g; C element i is row g + 8 (i / 2), column 2t + i % 2.
  static void mma(int (&c)[32][4], const u32 (&a)[32][4], const u32 (&b0)[32],
                  const u32 (&b1)[32]) {
    int A[16][32], B[32][8];
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      for (int e = 0; e < 4; ++e) {
        for (int r = 0; r < 4; ++r)
          A[g + 8 * (r % 2)][4 * t + 16 * (r / 2) + e] = static_cast<int8_t>(a[l][r] >> (8 * e));
        B[4 * t + e][g] = static_cast<int8_t>(b0[l] >> (8 * e));
        B[4 * t + 16 + e][g] = static_cast<int8_t>(b1[l] >> (8 * e));
      }
    }
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) {
        const int row = l / 4 + 8 * (i / 2), col = 2 * (l % 4) + i % 2;
        int acc = 0;
        for (int kk = 0; kk < 32; ++kk) acc += A[row][kk] * B[kk][col];
        c[l][i] += acc;
      }
  }
  static u32 pack4(float a, float b, float c, float d) {
    auto byte = [](float x) {
      return static_cast<u32>(static_cast<int>(std::clamp(std::nearbyint(x), -127.0f, 127.0f))) &
             0xffu;
    };
    return byte(a) | byte(b) << 8 | byte(c) << 16 | byte(d) << 24;
  }

  void cta(const Operands& in, float scale_log2, int m_block, std::vector<float>& out,
           std::vector<float>& lse) {
    const int S = t_.stages, W = t_.warps, MT = mt_, ST = st_, OT = ot_;
    groups_.clear();
    open_.clear();
    const int row0 = m_block * t_.bm, diag = in.sk - in.sq;
    int n_blocks = (in.sk + t_.bn - 1) / t_.bn;
    if (causal_) {
      const int last_key = row0 + t_.bm - 1 + diag;
      n_blocks = last_key < 0 ? 0 : std::min(n_blocks, last_key / t_.bn + 1);
    }
    const auto* kscale = reinterpret_cast<const uint8_t*>(in.k_scale.data());
    auto load_k = [&](int stage, int n) {
      const int key0 = n * t_.bn, dst = sK_ + stage * k_stage_;
      load_rows(dst, in.k.data() + key0 * in.d, in.d, in.sk - key0, t_.d, t_.bn, t_.d, qk_stride_);
      load_rows(dst + t_.bn * qk_stride_, kscale + key0 * 4, 0, 1, (in.keys_padded - key0) * 4, 1,
                t_.bn * 4, 0);
      commit();
    };
    auto load_v = [&](int stage, int n) {
      const int key0 = n * t_.bn;
      load_rows(sV_ + stage * v_stage_, in.vt.data() + key0, in.keys_padded, t_.d,
                in.keys_padded - key0, t_.d, t_.bn, vt_stride_);
      commit();
    };
    load_rows(0, in.q.data() + row0 * in.d, in.d, in.sq - row0, t_.d, t_.bm, t_.d, qk_stride_);
    commit();
    int ahead = 0;
    if (S == 1 && ahead < n_blocks) load_k(0, ahead++);
    for (int s = 0; s < S - 1; ++s) {
      if (ahead < n_blocks) {
        load_k(s, ahead);
        load_v(s, ahead++);
      } else {
        commit();
        commit();
      }
    }

    // Per warp, per lane state, flattened: [warp][lane][mt][...].
    auto at3 = [&](int w, int l, int mt, int inner) { return ((w * 32 + l) * MT + mt) * inner; };
    std::vector<float> q_scale(W * 32 * MT * 2), row_max(W * 32 * MT * 2, -INFINITY),
        row_sum(W * 32 * MT * 2, 0.0f), o(W * 32 * MT * OT * 4, 0.0f);
    for (int w = 0; w < W; ++w)
      for (int l = 0; l < 32; ++l)
        for (int mt = 0; mt < MT; ++mt)
          for (int r = 0; r < 2; ++r) {
            const int row = row0 + w * MT * 16 + mt * 16 + l / 4 + r * 8;
            q_scale[at3(w, l, mt, 2) + r] = row < in.sq ? in.q_scale[row] * scale_log2 : 0.0f;
          }
    std::vector<float> x(W * 32 * MT * ST * 4);
    auto xi = [&](int w, int l, int mt, int nt) { return at3(w, l, mt, ST * 4) + nt * 4; };

    auto step = [&](int n_block, bool masked) {
      const int stage = n_block % S;
      if (S == 1) {
        wait(0);
        load_v(0, n_block);
      } else {
        wait(2 * S - 3);
        if (ahead < n_blocks) {
          load_k((n_block + S - 1) % S, ahead);
          load_v((n_block + S - 1) % S, ahead++);
        } else {
          commit();
          commit();
        }
      }
      const int sKs = sK_ + stage * k_stage_;
      // GEMM I, every warp.
      std::vector<int> s(W * 32 * MT * ST * 4, 0);
      for (int w = 0; w < W; ++w) {
        const int warp_row = w * MT * 16;
        for (int ks = 0; ks < t_.d / 32; ++ks)
          for (int mt = 0; mt < MT; ++mt) {
            int addr[32];
            u32 a[32][4];
            for (int l = 0; l < 32; ++l)
              addr[l] = (warp_row + mt * 16 + l % 16) * qk_stride_ + ks * 32 + (l / 16) * 16;
            ldmatrix_x4(addr, a);
            for (int np = 0; np < ST / 2; ++np) {
              u32 b[32][4], b0[32], b1[32], b2[32], b3[32];
              for (int l = 0; l < 32; ++l)
                addr[l] = sKs + (np * 16 + (l / 16) * 8 + l % 8) * qk_stride_ + ks * 32 +
                          ((l / 8) % 2) * 16;
              ldmatrix_x4(addr, b);
              for (int l = 0; l < 32; ++l)
                b0[l] = b[l][0], b1[l] = b[l][1], b2[l] = b[l][2], b3[l] = b[l][3];
              for (int half = 0; half < 2; ++half) {
                int c[32][4];
                for (int l = 0; l < 32; ++l)
                  for (int i = 0; i < 4; ++i) c[l][i] = s[xi(w, l, mt, 2 * np + half) + i];
                if (half == 0)
                  mma(c, a, b0, b1);
                else
                  mma(c, a, b2, b3);
                for (int l = 0; l < 32; ++l)
                  for (int i = 0; i < 4; ++i) s[xi(w, l, mt, 2 * np + half) + i] = c[l][i];
              }
            }
          }
      }
      auto prefetch_k = [&] {
        wait(0);
        if (ahead < n_blocks) load_k(0, ahead++);
      };
      if (S == 1 && old_order_) prefetch_k();
      // Dequantise with the key scales from the K buffer.
      const int sKscale = sKs + t_.bn * qk_stride_;
      for (int w = 0; w < W; ++w)
        for (int l = 0; l < 32; ++l)
          for (int nt = 0; nt < ST; ++nt) {
            const int ka = sKscale + (nt * 8 + (l % 4) * 2) * 4;
            const float ks2[2] = {f32(ka), f32(ka + 4)};
            for (int mt = 0; mt < MT; ++mt)
              for (int i = 0; i < 4; ++i)
                x[xi(w, l, mt, nt) + i] = static_cast<float>(s[xi(w, l, mt, nt) + i]) *
                                          (q_scale[at3(w, l, mt, 2) + i / 2] * ks2[i % 2]);
          }
      const int key0 = n_block * t_.bn;
      for (int w = 0; w < W; ++w) {
        const int warp_row = w * MT * 16;
        if (masked)
          for (int l = 0; l < 32; ++l)
            for (int mt = 0; mt < MT; ++mt)
              for (int nt = 0; nt < ST; ++nt)
                for (int i = 0; i < 4; ++i) {
                  const int row = row0 + warp_row + mt * 16 + l / 4 + (i / 2) * 8;
                  const int key = key0 + nt * 8 + (l % 4) * 2 + (i % 2);
                  if (key >= in.sk || (causal_ && key > row + diag))
                    x[xi(w, l, mt, nt) + i] = -INFINITY;
                }
        // Online softmax: max over the quad's lanes.
        for (int mt = 0; mt < MT; ++mt)
          for (int r = 0; r < 2; ++r) {
            float mx[32];
            for (int l = 0; l < 32; ++l) {
              mx[l] = row_max[at3(w, l, mt, 2) + r];
              for (int nt = 0; nt < ST; ++nt)
                mx[l] = std::max(
                    mx[l], std::max(x[xi(w, l, mt, nt) + 2 * r], x[xi(w, l, mt, nt) + 2 * r + 1]));
            }
            for (int l = 0; l < 32; ++l) {
              const int q0 = l & ~3;
              const float m =
                  std::max(std::max(mx[q0], mx[q0 + 1]), std::max(mx[q0 + 2], mx[q0 + 3]));
              float& rm = row_max[at3(w, l, mt, 2) + r];
              const float shift = m == -INFINITY ? 0.0f : m;
              const float rescale = std::exp2(rm - shift);
              rm = m;
              const float offset = 6.988684686772166f - shift;
              float sum = 0;
              for (int nt = 0; nt < ST; ++nt)
                for (int c = 0; c < 2; ++c) {
                  float& v = x[xi(w, l, mt, nt) + 2 * r + c];
                  v = std::nearbyint(std::exp2(v + offset));
                  sum += v;
                }
              float& rs = row_sum[at3(w, l, mt, 2) + r];
              rs = rs * rescale + sum;
              for (int nt = 0; nt < OT; ++nt)
                for (int c = 0; c < 2; ++c)
                  o[at3(w, l, mt, OT * 4) + nt * 4 + 2 * r + c] *= rescale;
            }
          }
      }
      if (S == 1 && !old_order_) prefetch_k();  // P is in registers
      if (S > 1) wait(2 * S - 2);
      // GEMM II: P (packed in registers) times V^T.
      const int sVs = sV_ + stage * v_stage_;
      for (int w = 0; w < W; ++w)
        for (int mt = 0; mt < MT; ++mt)
          for (int dp = 0; dp < OT / 2; ++dp) {
            int acc[2][32][4] = {};
            for (int kc = 0; kc < ST / 4; ++kc) {
              u32 pa[32][4];
              for (int l = 0; l < 32; ++l)
                for (int h = 0; h < 2; ++h) {
                  const float* t0 = &x[xi(w, l, mt, 4 * kc + 2 * h)];
                  const float* t1 = &x[xi(w, l, mt, 4 * kc + 2 * h + 1)];
                  pa[l][2 * h] = pack4(t0[0], t0[1], t1[0], t1[1]);
                  pa[l][2 * h + 1] = pack4(t0[2], t0[3], t1[2], t1[3]);
                }
              int addr[32];
              u32 b[32][4], b0[32], b1[32], b2[32], b3[32];
              for (int l = 0; l < 32; ++l)
                addr[l] = sVs + (dp * 16 + (l / 16) * 8 + l % 8) * vt_stride_ + kc * 32 +
                          ((l / 8) % 2) * 16;
              ldmatrix_x4(addr, b);
              for (int l = 0; l < 32; ++l)
                b0[l] = b[l][0], b1[l] = b[l][1], b2[l] = b[l][2], b3[l] = b[l][3];
              mma(acc[0], pa, b0, b1);
              mma(acc[1], pa, b2, b3);
            }
            for (int l = 0; l < 32; ++l)
              for (int i = 0; i < 8; ++i)
                o[at3(w, l, mt, OT * 4) + (2 * dp + i / 4) * 4 + i % 4] +=
                    static_cast<float>(acc[i / 4][l][i % 4]);
          }
    };
    int n_unmasked = in.sk / t_.bn;
    if (causal_) n_unmasked = std::min(n_unmasked, std::max(0, (row0 + diag + 1) / t_.bn));
    n_unmasked = std::min(n_unmasked, n_blocks);
    for (int n = 0; n < n_unmasked; ++n) step(n, false);
    for (int n = n_unmasked; n < n_blocks; ++n) step(n, true);
    wait(0);

    // Epilogue: O * s_V / l and the LSE, per row.
    for (int w = 0; w < W; ++w)
      for (int l = 0; l < 32; ++l)
        for (int mt = 0; mt < MT; ++mt)
          for (int r = 0; r < 2; ++r) {
            const int q0 = l & ~3;
            float sum = 0;
            for (int j = 0; j < 4; ++j) sum += row_sum[at3(w, q0 + j, mt, 2) + r];
            const float inv = sum > 0 ? 1.0f / sum : 0.0f;
            const int row = row0 + w * MT * 16 + mt * 16 + l / 4 + r * 8;
            if (row >= in.sq) continue;
            for (int nt = 0; nt < OT; ++nt)
              for (int c = 0; c < 2; ++c) {
                const int col = nt * 8 + (l % 4) * 2 + c;
                out[row * in.d + col] =
                    o[at3(w, l, mt, OT * 4) + nt * 4 + 2 * r + c] * inv * in.v_scale[col];
              }
            lse[row] = sum > 0
                           ? (row_max[at3(w, l, mt, 2) + r] + std::log2(sum) - 6.988684686772166f) *
                                 0.6931471805599453f
                           : -INFINITY;
          }
  }
};

struct Result {
  double rel_l2 = 0, max_lse_error = 0;
};

Result emulate(Tile t, bool causal, bool eager, bool old_order, int sq, int sk, uint64_t seed) {
  const Problem pr = Problem::bhsd(1, 1, 1, sq, sk, t.d);
  std::mt19937_64 rng(seed);
  const auto q = reference::random_tensor(rng, Precision::f16, pr.q, 1, 1, sq, t.d);
  const auto k = reference::random_tensor(rng, Precision::f16, pr.k, 1, 1, sk, t.d);
  const auto v = reference::random_tensor(rng, Precision::f16, pr.v, 1, 1, sk, t.d);
  const Operands in = quantize_operands(pr, q, k, v);
  std::vector<float> out, lse;
  Emulator(t, causal, eager, old_order).run(in, static_cast<float>(pr.scale() * M_LOG2E), out, lse);
  const Mask mask = causal ? Mask::causal : Mask::none;
  double err2 = 0, ref2 = 0;
  Result r;
  for (int row = 0; row < sq; ++row) {
    const auto model =
        quant_model::attention_row(pr, Precision::int8, mask, t.bn, q, k, v, 0, 0, row);
    double ref_lse = 0;
    reference::attention_row(pr, Precision::f16, mask, q, k, v, 0, 0, row, &ref_lse);
    for (int i = 0; i < t.d; ++i) {
      const double e = out[row * t.d + i] - model[i];
      err2 += e * e;
      ref2 += model[i] * model[i];
    }
    r.max_lse_error =
        std::max(r.max_lse_error, std::isinf(ref_lse) ? (lse[row] == ref_lse ? 0.0 : INFINITY)
                                                      : std::abs(lse[row] - ref_lse));
  }
  r.rel_l2 = std::sqrt(err2 / ref2);
  return r;
}

}  // namespace

TEST_CASE("8-bit kernel emulated lane by lane reproduces the host model", "[quantize][q8emu]") {
  // The tiles the tuner picks by default on sm_90 (all single-stage) and multi-stage ones.
  const std::vector<Tile> tiles = {{32, 128, 128, 8, 1}, {64, 64, 64, 4, 2},
                                   {96, 128, 64, 8, 1},  {128, 64, 64, 4, 1},
                                   {128, 128, 64, 8, 3}, {256, 128, 32, 8, 1}};
  for (const Tile& t : tiles)
    for (bool causal : {false, true})
      for (bool eager : {false, true}) {
        const Result r = emulate(t, causal, eager, false, 150, 203, 11 + t.d);
        INFO("d" << t.d << " m" << t.bm << "n" << t.bn << " w" << t.warps << "s" << t.stages
                 << (causal ? " causal" : "") << (eager ? " eager" : " lazy") << ": rel L2 "
                 << r.rel_l2 << ", lse error " << r.max_lse_error);
        CHECK(r.rel_l2 < 5e-3);
        CHECK(r.max_lse_error < 1e-1);
      }
}

TEST_CASE("8-bit emulation: prefetching K before its scales are read breaks one stage",
          "[quantize][q8emu]") {
  // The order the kernel had: with one K buffer, the next block's copy may overwrite the key
  // scales before the dequantisation reads them.
  const Result r = emulate({64, 128, 128, 8, 1}, false, true, true, 150, 203, 5);
  INFO("rel L2 " << r.rel_l2);
  CHECK(r.rel_l2 > 5e-2);
}

// The int8 kernel's register encodings (precision/int8.cuh), restated here so a change to them
// has to change this test too.

namespace {

// prmt.b32 d, a, b, c as the PTX ISA defines it (default mode): byte i of d is byte c[4i+2:4i] of
// the eight bytes {b, a}, a in bytes 0-3.
u32 prmt(u32 a, u32 b, u32 selector) {
  const uint64_t bytes = (static_cast<uint64_t>(b) << 32) | a;
  u32 d = 0;
  for (int i = 0; i < 4; ++i)
    d |= static_cast<u32>((bytes >> (8 * ((selector >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return d;
}

}  // namespace

TEST_CASE("int8 encodings: biased INT32 accumulators read back exactly as floats", "[q8]") {
  // Accumulators start at the bits of 1.5 * 2^23; MMAs add S with INT32 wrap-around.
  constexpr uint32_t kBias = 0x4B400000u;
  constexpr float kMagic = 12582912.f;
  auto read = [&](int32_t s) {
    return std::bit_cast<float>(kBias + static_cast<uint32_t>(s)) - kMagic;
  };
  const int32_t reach = 127 * 127 * 256;  // the largest |S| or |P V| block sum the kernel forms
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> any(-reach, reach);
  for (int32_t s : {0, 1, -1, reach, -reach, 1 << 22, -(1 << 22)}) CHECK(read(s) == float(s));
  for (int i = 0; i < 200000; ++i) {
    const int32_t s = any(rng);
    REQUIRE(read(s) == float(s));
  }
  // Past 2^22 the float's step is 2: the bound the kernel's head dims and block sizes respect.
  CHECK(read((1 << 22) + 1) != float((1 << 22) + 1));
  CHECK(read(-(1 << 22) - 1) != float(-(1 << 22) - 1));
}

TEST_CASE("int8 encodings: P rides in the low byte of the f16 1536 + P, prmt gathers four",
          "[q8]") {
  // fma.rn.f16x2(2^t, 127, 1536): f16 steps are 1 in [1024, 2048), so the sum rounds 127 * 2^t to
  // an integer P in [0, 127] and its bits are those of 1536 + P.
  CHECK(reference::to_bits(127.f, Precision::f16) == 0x57F0);
  CHECK(reference::to_bits(1536.f, Precision::f16) == 0x6600);
  for (int k = 0; k <= 127; ++k) {
    const uint16_t h = reference::to_bits(1536.f + k, Precision::f16);
    INFO(k);
    CHECK(h == 0x6600 + k);
    CHECK((h & 0xff) == k);
    // A value just off an integer rounds to it (half-way: to even).
    CHECK(reference::to_bits(1536.f + k + 0.375f, Precision::f16) == 0x6600 + k);
    CHECK(reference::to_bits(1536.f + k + 0.5f, Precision::f16) == 0x6600 + k + (k % 2));
  }
  // Two f16x2 words (t0 low, t1 high; t2 low, t3 high) -> one A-operand register, t0 lowest.
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> p(0, 127);
  for (int i = 0; i < 1000; ++i) {
    const u32 p0 = p(rng), p1 = p(rng), p2 = p(rng), p3 = p(rng);
    const u32 lo = (0x6600u + p1) << 16 | (0x6600u + p0);
    const u32 hi = (0x6600u + p3) << 16 | (0x6600u + p2);
    REQUIRE(prmt(lo, hi, 0x6420) == (p0 | p1 << 8 | p2 << 16 | p3 << 24));
  }
}

TEST_CASE("fp8 checksum MMAs: half of an m16n8k32 A fragment, as f16, is an m16n8k16 A fragment",
          "[quantize][q8]") {
  // protect/fp8_checksums.cuh: e4m3_half_to_f16 turns registers 2h and 2h + 1 of a lane's
  // m16n8k32 A fragment (row g, then g + 8; bytes k = 16h + 4t .. 4t + 3) into an m16n8k16 A
  // fragment (low halves first, then high halves), and the B operand is the 4 consecutive k
  // 16h + 4t .. 4t + 3 of column g as two f16 pairs. With the PTX ISA layouts of both shapes the
  // f16 MMA must then sum exactly the 16 k of half h. Values are small integers: exact in f16
  // and in E4M3, so only the positions are under test.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> v(-8, 8);
  int A[16][32], Bt[8][32];  // A row-major; B as its 8 columns of 32 k (the checksum rows)
  for (auto& row : A)
    for (int& x : row) x = v(rng);
  for (auto& row : Bt)
    for (int& x : row) x = v(rng);
  for (int h = 0; h < 2; ++h) {
    int C[16][8] = {};
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      // The lane's m16n8k32 A registers, one value per byte position.
      int a8[4][4];
      for (int r = 0; r < 4; ++r)
        for (int e = 0; e < 4; ++e) a8[r][e] = A[g + 8 * (r % 2)][4 * t + 16 * (r / 2) + e];
      // e4m3_half_to_f16: {lo(a[2h]), lo(a[2h + 1]), hi(a[2h]), hi(a[2h + 1])}, two values each.
      const int a16[4][2] = {{a8[2 * h][0], a8[2 * h][1]},
                             {a8[2 * h + 1][0], a8[2 * h + 1][1]},
                             {a8[2 * h][2], a8[2 * h][3]},
                             {a8[2 * h + 1][2], a8[2 * h + 1][3]}};
      // B: 4 consecutive k of column g from 16h + 4t, as b0 (first two) and b1.
      const int b16[2][2] = {{Bt[g][16 * h + 4 * t], Bt[g][16 * h + 4 * t + 1]},
                             {Bt[g][16 * h + 4 * t + 2], Bt[g][16 * h + 4 * t + 3]}};
      // mma.m16n8k16 (PTX ISA): A register r holds row g + 8 (r % 2), k 2t + 8 (r / 2) + e; B
      // register r holds k 2t + 8 r + e of column g. Scatter this lane's share into the operands.
      static int A16[16][16], B16[16][8];
      for (int r = 0; r < 4; ++r)
        for (int e = 0; e < 2; ++e) A16[g + 8 * (r % 2)][2 * t + 8 * (r / 2) + e] = a16[r][e];
      for (int r = 0; r < 2; ++r)
        for (int e = 0; e < 2; ++e) B16[2 * t + 8 * r + e][g] = b16[r][e];
      if (l == 31)
        for (int row = 0; row < 16; ++row)
          for (int col = 0; col < 8; ++col)
            for (int k = 0; k < 16; ++k) C[row][col] += A16[row][k] * B16[k][col];
    }
    for (int row = 0; row < 16; ++row)
      for (int col = 0; col < 8; ++col) {
        int expect = 0;
        for (int k = 16 * h; k < 16 * h + 16; ++k) expect += A[row][k] * Bt[col][k];
        INFO("half " << h << ", row " << row << ", column " << col);
        REQUIRE(C[row][col] == expect);
      }
  }
}
