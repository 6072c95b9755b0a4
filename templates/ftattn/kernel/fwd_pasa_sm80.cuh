// PASA forward (Cheng et al., "Online Pseudo-Average Shifting Attention") on the sm80 skeleton:
// the FlashAttention-2 loop of fwd_sm80.cuh with S accumulated in FP16 by the tensor cores
// (m16n8k16 with f16 accumulators: half the S registers) and P = 2^(S - b) on the f16x2
// special-function path; m, l and O stay in FP32.
//
// FP16 scores overflow when Q and K carry a large bias along the sequence (PASA section 2.1:
// with mean 30 and d = 128, every Q K^T element is ~115,200 > 65,504). PASA shifts each key block
// by beta times its mean before GEMM I and recovers the removed bias in the online softmax:
//
//   shift kernel (once per call, per KV head and key block j of block_n keys; the paper's
//   K'^T = K^T M, done as its own pass, section B.6 item 6 of the digest):
//     r_j = fl16(beta * mean of the block's n_j real keys)           (tail block: n_j < block_n)
//     K'_t = fl16(c * (K_t - r_j)),  c = softmax scale * log2(e)     (scale folded in FP32, then
//                                                                     one rounding: no 1/alpha in
//                                                                     M)
//   main loop, block j:  S'' = Q K'^T (FP16 accumulators),  rec = c * (q . r_j) (FP32, below)
//     the true base-2 logit is S''[t] + rec: PASA's recovery, beta/(1-beta) * rowmean(S'_j),
//     equals q . r_j exactly in exact arithmetic. It is evaluated here as one extra MMA with FP32
//     accumulators against r_j itself (every lane of the ldmatrix points at the one shift row,
//     so all 8 columns of that n8 tile hold q . r_j) instead of from the FP16 S' tile, whose
//     rounding the paper's form amplifies by beta/(1-beta) = 63.5.
//     m   = max(m, rowmax(S'') + rec)                     FP32, absolute: no running-mean frame
//     b   = m - rec, split into f16 b_hi + b_lo          so that P = 2^((S'' - b_hi) - b_lo)
//     P   = ex2.approx.f16x2(S'' - b_hi - b_lo)           in (0, 1], masked keys -inf -> 0
//     l   = l * 2^(m_old - m) + sum(P)                   (P summed pairwise in f16, then FP32)
//     O   = O * 2^(m_old - m) + P V                      FP32 accumulators
// (The Hopper kernels keep m while a block's max stays within 8 of it, bias's kSlack: P is then
// below 2^8 and most blocks leave O as it is.)
// The first block needs no special case (m starts at -inf in FP32, unlike the paper's m_0 = 0),
// and the recovery uses the same r_j that was subtracted, so it is exact for any n_j and beta.
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm80/global.cuh"
#include "ftattn/arch/sm80/ldmatrix.cuh"
#include "ftattn/arch/sm80/shared.cuh"
#include "ftattn/common/math.cuh"
#include "ftattn/common/types.cuh"
#include "ftattn/kernel/fwd_sm80.cuh"
#include "ftattn/params.cuh"
#include "ftattn/precision/f16_pasa.cuh"
#include "ftattn/protect/none.cuh"
#include "ftattn/protect/workspace.cuh"

namespace ftattn {

template <int HeadDim, int BlockM, int BlockN, int NumWarps, int NumStages, bool Causal,
          bool BlockSparse, class ProtectT = protect::None, bool Inject = false>
struct PasaTraits : FwdTraits<HeadDim, BlockM, BlockN, NumWarps, NumStages, precision::F16Pasa,
                              ProtectT, Causal, BlockSparse, Inject> {
  using Base = FwdTraits<HeadDim, BlockM, BlockN, NumWarps, NumStages, precision::F16Pasa, ProtectT,
                         Causal, BlockSparse, Inject>;
  // Each K stage: the K tile, EFTA's 8 * k_atoms checksum rows of the shifted keys (placed as in
  // fwd_sm80.cuh), then the block's shift vector r_j.
  static constexpr int shift_row = BlockN + 8 * ProtectT::k_atoms;
  static constexpr int k_rows = shift_row + 1;
  static constexpr int smem_bytes = (BlockM + NumStages * (k_rows + BlockN)) * Base::row_stride * 2;
  static constexpr int shift_threads = 128;  // the shift kernel's CTA
};

// The shift kernel: one CTA per (key block, KV head, batch). Column sums of the block's real
// keys in FP32, r_j = fl16(beta * mean), then K' = fl16(scale_log2 * (K - r_j)).
template <class T>
__device__ __forceinline__ void pasa_shift_sm80(const PasaShiftParams& p, float beta) {
  using P = precision::F16Pasa;
  constexpr int kThreads = T::shift_threads;
  constexpr int cpr = T::head_dim / 8;  // 16-byte chunks per row
  constexpr int rows_per_pass = kThreads / cpr;
  constexpr int passes = (T::block_n + rows_per_pass - 1) / rows_per_pass;
  __shared__ float partial[rows_per_pass][T::head_dim];
  __shared__ u16 shift_h[T::head_dim];

  const int n_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const int key0 = n_block * T::block_n;
  const int n = min(T::block_n, p.seqlen_k - key0);  // the tail block's real keys
  const int tid = threadIdx.x;
  const bool active = tid < rows_per_pass * cpr;
  const int r0 = tid / cpr, col = (tid % cpr) * 8;
  const u16* k = static_cast<const u16*>(p.k) + batch * p.k_batch_stride + head * p.k_head_stride +
                 key0 * p.k_seq_stride;

  // The block's keys stay in registers from the column sums to the shifted write: K is read
  // from DRAM once (reading it again doubled the kernel's DRAM bytes at head dim 128, ncu).
  uint4_ rows[passes];
  float sum[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) sum[j] = 0.f;
  if (active) {
#pragma unroll
    for (int i = 0; i < passes; ++i) {
      const int r = r0 + i * rows_per_pass;
      rows[i] = r < n ? *reinterpret_cast<const uint4_*>(k + r * p.k_seq_stride + col)
                      : uint4_{0u, 0u, 0u, 0u};
    }
#pragma unroll
    for (int i = 0; i < passes; ++i) {
      const int r = r0 + i * rows_per_pass;
      if (r < n) {
        const uint4_ v = rows[i];
        const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          sum[2 * j] += P::lo(w[j]);
          sum[2 * j + 1] += P::hi(w[j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) partial[r0][col + j] = sum[j];
  }
  __syncthreads();

  const i64 n_blocks = (p.seqlen_k + T::block_n - 1) / T::block_n;
  u16* shift = static_cast<u16*>(p.shift) +
               ((static_cast<i64>(batch) * p.heads_kv + head) * n_blocks + n_block) * T::head_dim;
  for (int c = tid; c < T::head_dim; c += kThreads) {
    float s = 0.f;
#pragma unroll
    for (int r = 0; r < rows_per_pass; ++r) s += partial[r][c];
    const u16 h = P::to_half(beta * (s / n));
    shift_h[c] = h;
    shift[c] = h;
  }
  __syncthreads();

  if (active) {
    float r[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) r[j] = P::lo(shift_h[col + j]);
    u16* out = static_cast<u16*>(p.k_shifted) +
               ((static_cast<i64>(batch) * p.heads_kv + head) * p.seqlen_k + key0) * T::head_dim;
#pragma unroll
    for (int i = 0; i < passes; ++i) {
      const int row = r0 + i * rows_per_pass;
      if (row < n) {
        const uint4_ v = rows[i];
        const u32 w[4] = {v.x, v.y, v.z, v.w};
        u32 o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
          o[j] = P::pack(p.scale_log2 * (P::lo(w[j]) - r[2 * j]),
                         p.scale_log2 * (P::hi(w[j]) - r[2 * j + 1]));
        sm80::st_global_u128(out + row * T::head_dim + col, uint4_{o[0], o[1], o[2], o[3]});
      }
    }
  }
}

namespace pasa {

// One evaluation of key block's softmax bias for an MMA row tile: the new running max of rows g
// and g + 8 (base-2 logits: max of S'' plus the recovery rec), the rescale of the old state, and
// -b = -(m - rec) as splatted f16 hi + lo, so that P = 2^((S'' - b_hi) - b_lo). EFTA's second
// evaluation (Second) reads S'' + zero, a zero the compilers cannot see, so that they keep it
// apart from the first; it is then equal to the first bit for bit unless a fault hit one.
// The recovery of row half r is rc[2 r] (column 2t of the shift row's MMA tile) for the first
// evaluation and rc[2 r + 1] (column 2t + 1, the same value computed apart) for the second.
// kSlack > 0: FlashAttention-4's lazy rescale, as detail::softmax_block takes it (a row keeps its
// max while a block stays within kSlack of it, so P < 2^kSlack, exact in f16 and far from its
// 65504; the row's f16 pair sums stay below kST * 2^kSlack).
template <bool Second, int kST, int kSlack = 0>
__device__ __forceinline__ void bias(const u32 (&x)[kST][2], u32 zero2, const float (&rc)[4],
                                     float scale_log2, float (&row_max)[2], float (&rescale)[2],
                                     u32 (&neg_b_hi)[2], u32 (&neg_b_lo)[2]) {
  using P = precision::F16Pasa;
  auto in = [&](u32 v) { return Second ? P::hadd2(v, zero2) : v; };
  u32 m0 = in(x[0][0]), m1 = in(x[0][1]);
#pragma unroll
  for (int nt = 1; nt < kST; ++nt) {
    m0 = P::hmax2(m0, in(x[nt][0]));
    m1 = P::hmax2(m1, in(x[nt][1]));
  }
  u32 mm = P::hmax2(P::lows(m0, m1), P::highs(m0, m1));  // (row g, row g + 8)
  mm = P::hmax2(mm, __shfl_xor_sync(0xffffffffu, mm, 1));
  mm = P::hmax2(mm, __shfl_xor_sync(0xffffffffu, mm, 2));
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float rec = rc[2 * r + (Second ? 1 : 0)] * scale_log2;
    const float block_max = (r == 0 ? P::lo(mm) : P::hi(mm)) + rec;
    float mx = fmaxf(row_max[r], block_max);
    if constexpr (kSlack > 0)  // -inf plus the slack is -inf: the first finite block moves it
      if (mx <= row_max[r] + kSlack) mx = row_max[r];
    const float mref = mx == neg_inf() ? 0.f : mx;  // nothing seen yet: P stays 0
    rescale[r] = fast_exp2(row_max[r] - mref);
    row_max[r] = mx;
    // Finite in f16 whatever the scores: a +-inf b would turn masked -inf into NaN.
    const float b = fminf(fmaxf(mref - rec, -65504.f), 65504.f);
    const unsigned short bh = P::to_half(b);
    const unsigned short bl = P::to_half(b - P::lo(bh));
    neg_b_hi[r] = P::splat(bh ^ 0x8000);
    neg_b_lo[r] = P::splat(bl ^ 0x8000);
  }
}

// P for the two halves of one S'' register, by the evaluation's bias.
template <bool Second>
__device__ __forceinline__ u32 prob(u32 x, u32 zero2, u32 neg_b_hi, u32 neg_b_lo) {
  using P = precision::F16Pasa;
  if constexpr (Second) x = P::hadd2(x, zero2);
  return P::hexp2(P::hadd2(P::hadd2(x, neg_b_hi), neg_b_lo));
}

// The running l of rows g and g + 8 (`sum` holds their P registers): the block's P summed
// pairwise in f16 (each half at most kST / 2 ... kST terms of at most 1), then the two halves in
// FP32. Consumes `sum`.
template <int kST>
__device__ __forceinline__ void add_row_sums(float (&l)[2], const float (&rescale)[2],
                                             u32 (&sum)[2][kST]) {
  using P = precision::F16Pasa;
#pragma unroll
  for (int w = 1; w < kST; w *= 2)
#pragma unroll
    for (int nt = 0; nt + w < kST; nt += 2 * w)
#pragma unroll
      for (int r = 0; r < 2; ++r) sum[r][nt] = P::hadd2(sum[r][nt], sum[r][nt + w]);
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = l[r] * rescale[r] + (P::lo(sum[r][0]) + P::hi(sum[r][0]));
}

// The FP32 sums of this thread's S'' values of row half r and of their magnitudes. The ones
// MMA's sums are shared by the quad (a non-finite value, times the zeros of the other groups'
// columns, reaches every column), so a failed check is settled on the thread's own values.
template <int kST>
__device__ __forceinline__ void own_sums(const u32 (&s)[kST][2], int r, float& sum,
                                         float& abs_sum) {
  using P = precision::F16Pasa;
  sum = abs_sum = 0.f;
#pragma unroll
  for (int nt = 0; nt < kST; ++nt) {
    const float x0 = P::lo(s[nt][r]), x1 = P::hi(s[nt][r]);
    sum += x0 + x1;
    abs_sum += fabsf(x0) + fabsf(x1);
  }
}

// GEMM I's threshold for a thread's S'' values whose magnitudes sum to abs_sum: FP16
// accumulation rounds each running sum once per 16-wide k-step, so the error scales with the
// running sums: the scores themselves where q and k' line up (PASA's biased inputs), and
// |q| |k'| / sqrt(head_dim), a random walk's, where the scores cancel to little (a tail block's
// few keys). `walk` is the latter summed over the thread's keys; tol_scores is per rounding,
// calibrated (runtime/protected_launch.cpp).
template <class T>
__device__ __forceinline__ float scores_tol(const AttentionParams& p, float abs_sum, float walk) {
  return p.tol_scores * (T::head_dim / 16 + 2) * (abs_sum + walk) + p.tol_floor;
}

// efta_correct's repair of row half r of an S'' tile: the thread's f16 values, widened, are
// located and rebuilt against the FP32 checksums (protect::correct_row), and the rebuilt one is
// rounded back into its half. Returns its index among the thread's values, or -1.
template <int kST>
__device__ __forceinline__ int correct_scores(u32 (&s)[kST][2], int r, float ref,
                                              float weighted_ref) {
  using P = precision::F16Pasa;
  float x[kST][4];
  float sum = 0.f;
#pragma unroll
  for (int nt = 0; nt < kST; ++nt) {
    x[nt][2 * r] = P::lo(s[nt][r]);
    x[nt][2 * r + 1] = P::hi(s[nt][r]);
    x[nt][2 * (1 - r)] = x[nt][2 * (1 - r) + 1] = 0.f;
    sum += x[nt][2 * r] + x[nt][2 * r + 1];
  }
  const int bad = protect::correct_row(x, r, ref - sum, ref, weighted_ref);
#pragma unroll
  for (int nt = 0; nt < kST; ++nt) {
    if (bad == 2 * nt) s[nt][r] = (s[nt][r] & 0xffff0000u) | P::to_half(x[nt][2 * r]);
    if (bad == 2 * nt + 1)
      s[nt][r] = (s[nt][r] & 0x0000ffffu) | (u32(P::to_half(x[nt][2 * r + 1])) << 16);
  }
  return bad;
}

// The wgmma skeletons' recovery of key block j: one m64n8k16 MMA per k-step against the shift
// rows of blocks j - j % 8 ... j - j % 8 + 7 leaves q . r_j in column j % 8 of its FP32 tile
// `table` (the m16n8 accumulator layout per warp: register 2 r + c of lane l is row half r,
// column 2 (l % 4) + c). The lane of the row's quad that holds the column sends it to all four;
// rc[2 r] and rc[2 r + 1] are row half r's, as bias() reads them.
template <int kBlocks>
__device__ __forceinline__ void block_recovery(const float (&table)[4], int j, int lane,
                                               float (&rc)[4]) {
  static_assert(kBlocks == 8, "an n8 tile has eight columns");
  const int col = j % kBlocks;
  const int src = (lane & ~3) | (col >> 1);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float mine = (col & 1) ? table[2 * r + 1] : table[2 * r];
    rc[2 * r] = rc[2 * r + 1] = __shfl_sync(0xffffffffu, mine, src);
  }
}

// The recovery tile copied out of its MMA's registers into `table`, pinned there: read after the
// branch that issued the MMA, the MMA's own registers made ptxas serialise every wgmma (C7514).
// EFTA's GEMM I checksum tile (fwd_ws_sm90.cuh) likewise.
__device__ __forceinline__ void keep_recovery_tile(const float (&tile)[4], float (&table)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    table[i] = tile[i];
    asm volatile("" : "+f"(table[i]));
  }
}

// EFTA's second evaluation of PASA's softmax on the warp-specialised kernel (wgmma_softmax): its
// own running max and l, the zero it adds to S'' (unknown to the compilers, so that they keep the
// two apart), and the row halves whose P differed from the first evaluation's (bit r).
struct SecondEvaluation {
  float row_max[2];
  float row_sum[2];
  u32 zero2;
  unsigned alarms;
};

// EFTA's end-of-row comparison of l and the final max (the LSE's) with the second evaluation's:
// the same operations on the same values, so equal unless a fault hit one. Earlier maxima are
// checked through the next block's P.
__device__ __forceinline__ void check_second_evaluation(const AttentionParams& p, float row_sum,
                                                        float row_sum2, float row_max,
                                                        float row_max2, int row, int batch,
                                                        int head) {
  if (row >= p.seqlen_q) return;
  if (row_sum != row_sum2)
    record_fault(p.fault_log, batch, head, row, -1, fault_stage_row_sum, false,
                 fabsf(row_sum - row_sum2), 0.f);
  if (row_max != row_max2)
    record_fault(p.fault_log, batch, head, row, -1, fault_stage_probs, false,
                 fabsf(row_max - row_max2), 0.f);
}

// One key block's softmax on the Hopper PASA kernels (fwd_pasa_sm90.cuh, fwd_ws_sm90.cuh) for a
// warp's 16 rows in the wgmma accumulator layout: keys past the sequence end and, for causal, past
// each row's diagonal -inf; the max with the recovered bias; P = 2^(S'' - b) in place of S''; l
// and O rescaled; then P as GEMM II's A fragments (keys 16 kc .. 16 kc + 15), pinned in registers
// of their own: free to sink the exponentials between GEMM II's wgmmas, or to share S''s
// registers under the next GEMM I, ptxas serialised every wgmma of the kernel (C7511 / C7513).
// kSlack > 0 (bias): O skips its multiplies where no row of the warp moved its max.
// kRowSums false: l is kept elsewhere (the ones column of a tile beside O in `o`, rescaled with
// it), so the f16 pair sums are skipped. `on_rescale` sees the block's factors before l and O take
// them (the injection builds' rescale site), `on_prob(i, p)` each P register i (2 nt + r) as it is
// made (EFTA's probs site, before the comparison). `second` (EFTA): the block evaluated a second
// time from S'' + zero with its own max and l, each P compared with the first's bit for bit.
template <class T, bool kMasked, int kSlack, bool kRowSums = true, int kST, int kOT,
          class OnRescale = detail::Nothing, class OnProb = detail::Nothing,
          class Second = detail::Nothing>
__device__ __forceinline__ void wgmma_softmax(const AttentionParams& p, u32 (&s)[kST][2],
                                              const float (&rc)[4], int first_row, int key0,
                                              int lane, int diag, float (&row_max)[2],
                                              float (&row_sum)[2], float (&o)[kOT][4],
                                              u32 (&pa)[kST / 2][4], OnRescale&& on_rescale = {},
                                              OnProb&& on_prob = {}, Second&& second = {}) {
  using P = precision::F16Pasa;
  constexpr bool kSecond = !detail::is_nothing<Second>;
  if constexpr (kMasked)
    detail::for_each_masked<1, kST, T::causal>(
        first_row, key0, lane, p.seqlen_k, diag, [&](int, int nt, int i) {
          u32& x = s[nt][i / 2];
          x = i % 2 == 0 ? (x & 0xffff0000u) | P::neg_inf_half
                         : (x & 0x0000ffffu) | (u32(P::neg_inf_half) << 16);
        });
  float rescale[2], rescale2[2];
  u32 neg_b_hi[2], neg_b_lo[2], neg_b_hi2[2], neg_b_lo2[2];
  bias<false, kST, kSlack>(s, 0u, rc, p.scale_log2, row_max, rescale, neg_b_hi, neg_b_lo);
  on_rescale(rescale);
  if constexpr (kSecond)
    bias<true, kST, kSlack>(s, second.zero2, rc, p.scale_log2, second.row_max, rescale2, neg_b_hi2,
                            neg_b_lo2);
  u32 sum[2][kST], sum2[2][kST];
#pragma unroll
  for (int nt = 0; nt < kST; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const u32 x = s[nt][r];
      s[nt][r] = prob<false>(x, 0u, neg_b_hi[r], neg_b_lo[r]);
      on_prob(2 * nt + r, s[nt][r]);
      sum[r][nt] = s[nt][r];
      if constexpr (kSecond) {
        sum2[r][nt] = prob<true>(x, second.zero2, neg_b_hi2[r], neg_b_lo2[r]);
        second.alarms |= sum2[r][nt] != s[nt][r] ? 1u << r : 0u;
      }
    }
  if constexpr (kRowSums) {
    add_row_sums(row_sum, rescale, sum);
  }
  if constexpr (kSecond) {
    add_row_sums(second.row_sum, rescale2, sum2);
  }
  // P pinned before O's branch: packed after it, it took 32 register moves a block.
#pragma unroll
  for (int kc = 0; kc < kST / 2; ++kc) {
    pa[kc][0] = s[2 * kc][0];
    pa[kc][1] = s[2 * kc][1];
    pa[kc][2] = s[2 * kc + 1][0];
    pa[kc][3] = s[2 * kc + 1][1];
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(pa[kc][i]));
  }
  detail::rescale_output<(kSlack > 0)>(o, rescale);
}

}  // namespace pasa

// EFTA on PASA (efta_detect, efta_correct): the scores S'' = Q K'^T live in FP16 accumulators,
// so the checks are laid out for them:
//   GEMM I   K' (the shifted keys) carries EFTA's strided checksum rows, from the checksum
//            prologue run on K' (hi + lo, FP32 sums; efta_correct adds weighted ones); an MMA
//            with FP32 accumulators gives each thread q . (sum of its keys' k'). Its own S''
//            elements are summed exactly by an f16 MMA against a B operand of ones (FP32
//            accumulators), and the two must agree within the FP16 accumulation's rounding:
//            tol_scores * (head_dim / 16 + 2) * (sum |S''| + |q| sum |k'| / sqrt(head_dim)),
//            the magnitudes through a second ones MMA. Relative to |q| sum |k'| alone (the worst
//            case, as the f16 kernel bounds its FP32 scores) the threshold had to be 8x looser
//            for normal inputs than for PASA's biased ones, and let a fifth of the score flips
//            through silently; sum |S''| alone is too tight where a tail block's scores are few
//            and small.
//            efta_correct locates and rebuilds a single faulty element, as fwd_sm80.cuh does.
//   softmax  EFTA's product identity does not survive PASA's f16 P (flushes below 2^-24 and
//            ex2.approx.f16x2's error), so max, bias and P are evaluated twice and compared bit
//            for bit (as the 8-bit skeleton does); the recovery q . r_j of the second evaluation
//            is the MMA tile's other column, computed independently. l and the final max keep a
//            second running copy.
//   GEMM II  the V checksum atoms of fwd_sm80.cuh, checked against O at the end.
template <class T>
__device__ __forceinline__ void attention_fwd_pasa_sm80(const AttentionParams& p) {
  using P = precision::F16Pasa;
  using Protect = typename T::Protect;
  constexpr bool kEfta = Protect::k_atoms > 0;
  constexpr int kMT = T::m_tiles;
  constexpr int kST = T::s_tiles;
  constexpr int kOT = T::o_tiles;
  constexpr int kStages = T::num_stages;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const detail::SmemTiles<T> smem(sm80::smem_addr(smem_raw));
  const u32 sQ = smem.q;

  int m_block, head, batch;
  detail::tile_coords<T>(p, m_block, head, batch);
  const int head_kv = head / p.group_size;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;

  const int row0 = m_block * T::block_m;
  const int diag = p.seqlen_k - p.seqlen_q;  // bottom-right causal alignment
  const int n_blocks_all = (p.seqlen_k + T::block_n - 1) / T::block_n;
  int n_blocks = n_blocks_all;
  if (T::causal) {
    const int last_key = row0 + T::block_m - 1 + diag;
    n_blocks = last_key < 0 ? 0 : min(n_blocks, last_key / T::block_n + 1);
  }

  const detail::HeadOperands in = detail::head_operands(p, batch, head, head_kv, row0);
  const u16 *q = in.q, *k = in.k, *v = in.v;
  const u16* shift = static_cast<const u16*>(p.k_shift) +
                     (static_cast<i64>(batch) * p.heads_kv + head_kv) * n_blocks_all * T::head_dim;

  const unsigned char* mask_row =
      T::block_sparse ? p.block_mask + head * p.block_mask_head_stride +
                            static_cast<i64>(row0 / p.sparse_block_m) * p.block_mask_k_blocks
                      : nullptr;
  auto active = [&](int n_block) {
    return !T::block_sparse || mask_row[n_block * T::block_n / p.sparse_block_n] != 0;
  };
  auto next_active = [&](int n_block) {
    while (n_block < n_blocks && !active(n_block)) ++n_block;
    return n_block;
  };

  // Protection: this KV head's checksums (protect/workspace.cuh), computed from the shifted keys.
  const ChecksumWorkspace cs = checksum_workspace(p.batch, p.heads_kv, p.seqlen_k, T::head_dim,
                                                  T::block_n, Protect::k_atoms, Protect::v_atoms);
  const long long cs_head = static_cast<long long>(batch) * p.heads_kv + head_kv;
  const unsigned char* cs_base = static_cast<const unsigned char*>(p.checksums);

  // A K tile brings its checksum rows (EFTA) and its shift row r_j; each load is one cp.async
  // group.
  auto load_k = [&](int stage, int n_block) {
    const int key0 = n_block * T::block_n;
    const u32 dst = smem.k_stage(stage);
    detail::load_tile<T, T::block_n>(dst, k + key0 * p.k_seq_stride, p.k_seq_stride,
                                     p.seqlen_k - key0);
    if constexpr (kEfta) detail::load_k_checksum_rows<T>(dst, cs_base, cs, cs_head, n_block);
    if (tid < T::chunks_per_row)
      sm80::cp_async_16(dst + (T::shift_row * T::row_stride + tid * 8) * 2,
                        shift + n_block * T::head_dim + tid * 8, true);
    sm80::cp_async_commit();
  };
  // Checksum schemes: this KV head's V checksum columns ride with V tiles.
  auto load_v = [&](int stage, int n_block) {
    detail::load_v_tile<T>(smem.v_stage(stage), v, p, n_block * T::block_n, cs_base, cs_head,
                           cs.v_per_head);
  };
  auto skip_kv = [] {
    sm80::cp_async_commit();
    sm80::cp_async_commit();
  };

  detail::load_tile<T, T::block_m>(sQ, q, p.q_seq_stride, p.seqlen_q - row0);
  sm80::cp_async_commit();
  auto load_kv = [&](int stage, int n_block) {
    load_k(stage, n_block);
    load_v(stage, n_block);
  };
  int ahead = detail::prefetch_key_blocks<T>(n_blocks, next_active, load_k, load_kv, skip_kv);

  float o[kMT][kOT][4];
  float row_max[kMT][2];  // base 2, absolute (the recovered logits)
  float row_sum[kMT][2];  // this thread's partial sums; the quad is summed at the end
  detail::clear_accumulators(o, row_max, row_sum);
  constexpr int kAtoms = Protect::v_atoms > 0 ? Protect::v_atoms : 1;
  float oc[kMT][kAtoms][4];  // GEMM II checksum accumulators, rescaled like O
  // EFTA: the second evaluation's running max and l.
  float row_max2[kMT][2], row_sum2[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int g = 0; g < kAtoms; ++g)
#pragma unroll
      for (int i = 0; i < 4; ++i) oc[mt][g][i] = 0.f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max2[mt][r] = neg_inf();
      row_sum2[mt][r] = 0.f;
    }
  }

  const int warp_row = warp * kMT * 16;
  const detail::LaneAddressing<T> at(warp_row, lane);
  const int shift_col = ((lane / 8) % 2) * 8;  // the shift row as 8 equal keys
  const int quad_t = lane % 4;  // this thread's column group within every 8-wide tile
  auto global_row = [&](int mt, int r) { return row0 + warp_row + mt * 16 + lane / 4 + r * 8; };
  // 0 at run time, unknown to the compilers: the second evaluation starts from S'' + 0.
  const u32 zero2 = static_cast<u32>(min(p.seqlen_k, 0));
  // GEMM I check: an f16 B operand that sums a thread's own S'' elements of a 16-key step into
  // its own columns (key k goes to columns 2t, 2t + 1 where t = (k % 8) / 2).
  const u32 ones_b = quad_t == (lane / 4) / 2 ? 0x3c003c00u : 0u;
  constexpr int n_sc = kEfta ? kMT * 4 : 0, n_oc = Protect::v_atoms * kMT * 4;
  float q_walk = 0.f;  // EFTA: the largest |q| of this thread's rows over sqrt(head_dim)

  auto step = [&](const int it, const int n_block, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const int stage = it % kStages;
    if constexpr (kStages == 1) {
      sm80::cp_async_wait<0>();
      __syncthreads();
      load_v(0, n_block);
    } else {
      sm80::cp_async_wait<2 * kStages - 4>();  // K and V of this block: one barrier per block
      __syncthreads();
      if (ahead < n_blocks) {
        load_kv((it + kStages - 1) % kStages, ahead);
        ahead = next_active(ahead + 1);
      } else {
        skip_kv();
      }
    }

    // GEMM I with FP16 accumulators; the recovery q . r_j and (EFTA) the checksum columns with
    // FP32 ones.
    u32 s[kMT][kST][2];
    float rc[kMT][4], sc[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kST; ++nt) s[mt][nt][0] = s[mt][nt][1] = 0u;
#pragma unroll
      for (int i = 0; i < 4; ++i) rc[mt][i] = sc[mt][i] = 0.f;
    }
    const u32 sKs = smem.k_stage(stage);
    // Checksum atom g: 8 rows below the K tile, as an mma B operand at k-step ks.
    auto checksum_rows = [&](int g, int ks) {
      return sKs + at.k_offset +
             ((T::block_n + 8 * g + at.k_row) * T::row_stride + ks * 16 + at.k_col) * 2;
    };
    detail::gemm_qk<T>(
        s, sQ + at.q_offset, sKs + at.k_offset, at.warp_row, at.a_row, at.a_col, at.k_row, at.k_col,
        [](u32(&acc)[2], const u32(&a)[4], u32 b0, u32 b1) { P::mma_f16(acc, a, b0, b1); },
        [&](const u32(&a)[kMT][4], int ks) {  // the shift row: q . r_j in FP32
          u32 br[2];
          sm80::ldmatrix_x2(br, sKs + (T::shift_row * T::row_stride + ks * 16 + shift_col) * 2);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) P::mma(rc[mt], a[mt], br[0], br[1]);
          if constexpr (kEfta) {
            u32 b[2];
            sm80::ldmatrix_x2(b, checksum_rows(0, ks));
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) P::mma(sc[mt], a[mt], b[0], b[1]);
          }
        });
    if constexpr (T::inject) {
      inject_values(p.fault, fault_site_scores, it, &s[0][0][0], kMT * kST * 2);
      // The checksum site is the concatenation [S checksums, O checksums]: S's are hit here.
      if constexpr (n_sc > 0)
        if (p.fault.element % (n_sc + n_oc) < n_sc)
          inject_values(p.fault, fault_site_checksum, it, &sc[0][0], n_sc);
    }

    // EFTA: GEMM I checked on the raw S'' before the softmax reads it; efta_correct rebuilds a
    // single faulty element. The threshold is relative to the sum of |S''| the check covers.
    if constexpr (kEfta) {
      float ssum[kMT][4], sabs[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) ssum[mt][i] = sabs[mt][i] = 0.f;
#pragma unroll
        for (int kp = 0; kp < kST / 2; ++kp) {
          const u32 a[4] = {s[mt][2 * kp][0], s[mt][2 * kp][1], s[mt][2 * kp + 1][0],
                            s[mt][2 * kp + 1][1]};
          P::mma(ssum[mt], a, ones_b, ones_b);
          const u32 m[4] = {a[0] & 0x7fff7fffu, a[1] & 0x7fff7fffu, a[2] & 0x7fff7fffu,
                            a[3] & 0x7fff7fffu};
          P::mma(sabs[mt], m, ones_b, ones_b);
        }
      }
      const float walk = q_walk * reinterpret_cast<const float*>(
                                      cs_base + cs.knorm_offset +
                                      cs_head * cs.knorm_per_head)[n_block * 4 + quad_t];
      bool failed = false;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          failed |= !protect::scores_ok(sc[mt][2 * r] + sc[mt][2 * r + 1] - ssum[mt][2 * r],
                                        pasa::scores_tol<T>(p, sabs[mt][2 * r], walk));
      if constexpr (Protect::correct) {
        // The weighted checksum locates the element; its MMAs run only when a check of the warp
        // failed (Q and the K checksum rows are still in shared memory).
        if (__any_sync(0xffffffffu, failed)) {
          float sw[kMT][4];
          detail::weighted_score_checksums<T>(sw, sQ, at, checksum_rows);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const float ref = sc[mt][2 * r] + sc[mt][2 * r + 1];
              float sum, abs_sum;
              pasa::own_sums(s[mt], r, sum, abs_sum);
              const float e1 = ref - sum, tol = pasa::scores_tol<T>(p, abs_sum, walk);
              if (protect::scores_ok(e1, tol)) continue;
              const int bad =
                  pasa::correct_scores(s[mt], r, ref, sw[mt][2 * r] + sw[mt][2 * r + 1]);
              record_fault(
                  p.fault_log, batch, head, global_row(mt, r),
                  bad >= 0 ? n_block * T::block_n + protect::row_group_column(bad, quad_t) : -1,
                  fault_stage_scores, bad >= 0, fabsf(e1), tol);
            }
        }
      } else if (failed) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            float sum, abs_sum;
            pasa::own_sums(s[mt], r, sum, abs_sum);
            const float e1 = sc[mt][2 * r] + sc[mt][2 * r + 1] - sum;
            const float tol = pasa::scores_tol<T>(p, abs_sum, walk);
            if (!protect::scores_ok(e1, tol))
              record_fault(p.fault_log, batch, head, global_row(mt, r), -1, fault_stage_scores,
                           false, fabsf(e1), tol);
          }
      }
    }

    if constexpr (kStages == 1) {
      sm80::cp_async_wait<0>();
      __syncthreads();  // V landed, and every warp is done with K: load the next block's K
      if (ahead < n_blocks) {
        load_k(0, ahead);
        ahead = next_active(ahead + 1);
      }
    }

    // Keys past the sequence end and, for causal, past each row's diagonal: -inf.
    if constexpr (kMasked) {
      detail::for_each_masked<kMT, kST, T::causal>(
          row0 + warp_row, n_block * T::block_n, lane, p.seqlen_k, diag,
          [&](int mt, int nt, int i) {
            u32& x = s[mt][nt][i / 2];
            x = i % 2 == 0 ? (x & 0xffff0000u) | P::neg_inf_half
                           : (x & 0x0000ffffu) | (u32(P::neg_inf_half) << 16);
          });
    }

    // Online softmax with the recovered bias (EFTA: twice, compared bit for bit).
    float rescale[kMT][2];
    unsigned p_alarms = 0;  // EFTA: rows whose two evaluations' P differ (bit 2 mt + r)
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      u32 neg_b_hi[2], neg_b_lo[2], neg_b_hi2[2], neg_b_lo2[2];
      pasa::bias<false>(s[mt], zero2, rc[mt], p.scale_log2, row_max[mt], rescale[mt], neg_b_hi,
                        neg_b_lo);
      float rescale2[2];
      if constexpr (kEfta)
        pasa::bias<true>(s[mt], zero2, rc[mt], p.scale_log2, row_max2[mt], rescale2, neg_b_hi2,
                         neg_b_lo2);
      if constexpr (T::inject) inject_values(p.fault, fault_site_rescale, it, rescale[mt], 2);
      u32 sum[2][kST], sum2[2][kST];
#pragma unroll
      for (int nt = 0; nt < kST; ++nt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const u32 x = s[mt][nt][r];
          u32 p1 = pasa::prob<false>(x, zero2, neg_b_hi[r], neg_b_lo[r]);
          if constexpr (T::inject)
            inject_value_at(p.fault, fault_site_probs, it, (mt * kST + nt) * 2 + r, kMT * kST * 2,
                            p1);
          if constexpr (kEfta) {
            const u32 p2 = pasa::prob<true>(x, zero2, neg_b_hi2[r], neg_b_lo2[r]);
            p_alarms |= p1 != p2 ? 1u << (2 * mt + r) : 0u;
            sum2[r][nt] = p2;
          }
          s[mt][nt][r] = p1;
          sum[r][nt] = p1;
        }
      pasa::add_row_sums(row_sum[mt], rescale[mt], sum);
      if constexpr (kEfta) pasa::add_row_sums(row_sum2[mt], rescale2, sum2);
    }
    if constexpr (T::inject) {
      inject_values(p.fault, fault_site_row_max, it, &row_max[0][0], kMT * 2);
      inject_values(p.fault, fault_site_row_sum, it, &row_sum[0][0], kMT * 2);
    }

    bool new_max = !T::lazy_rescale;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) new_max |= rescale[mt][0] != 1.f || rescale[mt][1] != 1.f;
    if (!T::lazy_rescale || __any_sync(0xffffffffu, new_max))
      detail::rescale_output<Protect>(o, oc, rescale);

    // GEMM II: O += P V, P straight from the FP16 S accumulators (C layout == A layout).
    const u32 sVs = smem.v_stage(stage) + at.v_offset;
#pragma unroll
    for (int kp = 0; kp < kST / 2; ++kp) {
      u32 a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        a[mt][0] = s[mt][2 * kp][0];
        a[mt][1] = s[mt][2 * kp][1];
        a[mt][2] = s[mt][2 * kp + 1][0];
        a[mt][3] = s[mt][2 * kp + 1][1];
      }
      detail::gemm_pv_step<T>(
          o, oc, a, sVs, at, kp,
          [](float(&acc)[4], const u32(&x)[4], u32 b0, u32 b1) { P::mma(acc, x, b0, b1); });
    }
    // Reported after GEMM II, so that nothing splits the softmax from GEMM II's MMAs.
    if constexpr (kEfta)
      if (p_alarms != 0)
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r)
            if ((p_alarms >> (2 * mt + r)) & 1u)
              record_fault(p.fault_log, batch, head, global_row(mt, r), -1, fault_stage_probs,
                           false, 1.f, 0.f);
    if constexpr (T::inject) {
      inject_values(p.fault, fault_site_output, it, &o[0][0][0], kMT * kOT * 4);
      detail::inject_output_checksums<n_sc, n_oc>(p.fault, it, &oc[0][0][0]);
    }
  };

  if constexpr (kEfta) {  // once Q has landed
    sm80::cp_async_wait<0>();
    __syncthreads();
    q_walk = detail::q_rows_norm<T, kMT, false>(sQ, warp_row, lane) * rsqrtf(float(T::head_dim));
  }
  detail::walk_key_blocks<T>(p.seqlen_k, row0, diag, n_blocks, next_active, step);
  sm80::cp_async_wait<0>();
  __syncthreads();

  // Epilogue: max is already the base-2 logit.
  float l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if constexpr (kEfta)
        pasa::check_second_evaluation(p, row_sum[mt][r], row_sum2[mt][r], row_max[mt][r],
                                      row_max2[mt][r], global_row(mt, r), batch, head);
      l[mt][r] = quad_sum(row_sum[mt][r]);
    }
  if constexpr (Protect::v_atoms > 0)
    detail::check_output<T>(p, o, oc, l,
                            reinterpret_cast<const float*>(cs_base + cs.vmax_offset +
                                                           cs_head * cs.vmax_per_head)[quad_t],
                            n_blocks, batch, head, lane, global_row);
  detail::store_output<T>(p, o, l, row_max, 1.f, batch, head, row0, warp_row, lane, sQ);
}

}  // namespace ftattn
