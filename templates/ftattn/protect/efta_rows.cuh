// EFTA's per-row work in the fused 16-bit kernels, shared by the mma.sync (fwd_sm80.cuh) and
// warpgroup-MMA (fwd_sm90.cuh) skeletons, whose accumulators have the same m16n8 layout per warp:
// the probabilities of one row half with the product check fused into their exps, and the
// epilogue's check of the row sum against the ones column and SNVR's range.
#pragma once

#include "ftattn/common/faults.cuh"
#include "ftattn/common/math.cuh"
#include "ftattn/params.cuh"
#include "ftattn/protect/checks.cuh"

namespace ftattn::detail {

// efta_correct's product check: the most negative sum of exponents a group of factors may have
// for its partial products to stay in FP32's normal range (see efta_probs_row).
inline constexpr float kGroupExponentFloor = 100.f;

// f(x) for each of this thread's values of row half r of s.
template <int kST, class F>
__device__ __forceinline__ void for_row_half(const float (&s)[kST][4], int r, F&& f) {
#pragma unroll
  for (int nt = 0; nt < kST; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) f(s[nt][2 * r + c]);
}

// The product check's groups of score tiles: kGroup tiles, 2 kGroup factors of a row half.
template <int kST>
inline constexpr int kScoreGroup = kST >= 4 ? 4 : kST;

// The raw scores of a row half summed per group, where efta_correct's GEMM I check has them
// (Given): the product check then takes each group's exponent sum from them, one FMA per group
// instead of an add per score. Not given: it sums the exponents itself.
template <int kST, bool Given>
struct ScoreGroupSums {
  static constexpr bool given = Given;
  static constexpr int count = kST / kScoreGroup<kST>;
  float sum[Given ? count : 1];
};

// Row half r of s summed per group of score tiles, and their total.
template <int kST>
__device__ __forceinline__ float sum_score_groups(const float (&s)[kST][4], int r,
                                                  ScoreGroupSums<kST, true>& out) {
  constexpr int kGroup = kScoreGroup<kST>;
  float total = 0.f;
#pragma unroll
  for (int g = 0; g < ScoreGroupSums<kST, true>::count; ++g) {
    float sum = 0.f;
#pragma unroll
    for (int nt = g * kGroup; nt < (g + 1) * kGroup; ++nt) sum += s[nt][2 * r] + s[nt][2 * r + 1];
    out.sum[g] = sum;
    total += sum;
  }
  return total;
}

// P = 2^(S * scale - shift) for row half r of this thread's kST score tiles, in place, packed once
// as GEMM II's A operand into packed[nt][r]. EFTA's product check is fused into the exps: prod
// over the thread's P of this row equals 2^(the sum of their exponents), and that sum is the GEMM
// I checksum `ref` (the masked raw scores taken out) scaled, less n * max, n the unmasked
// elements. Each factor is multiplied by 2^-(mean exponent) so the product stays near 1 instead
// of underflowing; masked elements (P == 0, not in n) count as 1. The FP32 sum of P goes into
// this thread's share of l, `row_sum`, rescaled by `rescale` first. A failed check sets `alarm_bit`
// in `alarms` and its deviation and bound in `alarm_dev` and `alarm_tol`, for the caller to report
// after GEMM II. `inject_p(nt, c, x)` is the probabilities' injection point, `on_stray(j, x)`
// reports a masked P that is not 0 (element j). efta_correct checks the exps against the
// exponents they were given instead (`raw_groups`, where given, sums them per group; see the
// end), and the exponents against the checksum's sum.
template <class T, bool kMasked, int kST, class Groups, class InjectP, class OnStray>
__device__ __forceinline__ void efta_probs_row(const AttentionParams& p, float (&s)[kST][4],
                                               u32 (&packed)[kST][2], int r, float mx, float shift,
                                               float ref, int n, float q_norm, float k_norm,
                                               const Groups& raw_groups, float& row_sum,
                                               float rescale, unsigned& alarms, unsigned alarm_bit,
                                               float& alarm_dev, float& alarm_tol,
                                               InjectP&& inject_p, OnStray&& on_stray) {
  using P = typename T::Precision;
  // Off the mask n is the constant 2 * kST (a power of two: the division is a multiply).
  const float num = ref * p.scale_log2 - n * shift;
  const float mean = n > 0 ? (kMasked ? __fdividef(num, float(n)) : num / n) : 0.f;
  // Every factor tiny (mean below 2^-60, so that norm^2 stays finite): nothing checkable, see
  // the README.
  const bool check = n > 0 && mx != neg_inf() && mean > -60.f;
  // efta_detect's fallback where the product check gives up on a live row: a score flipped far
  // up becomes the row's max and takes every other exponent below 2^-60 (a far-down flip or a
  // NaN lands here too). The raw scores are then held to GEMM I's checksum, within tol_scores of
  // |q| sum |k| (Cauchy-Schwarz: at least the sum of |s| over every key of the block, masked ones
  // included, which the checksum rounds with) plus efta_correct's random-walk term: looser than
  // efta_correct's check, which follows sum |s|, and ample for a flip far up. Clean rows need it
  // only with outliers: a branch on the warp's vote, uniform, so that the softmax around it keeps
  // its schedule.
  if constexpr (!T::Protect::correct) {
    const bool fallback = !check && n > 0 && mx != neg_inf();
    if (__any_sync(0xffffffffu, fallback)) {
      float raw = 0.f;
      for_row_half(s, r, [&](float x) { raw += kMasked && x == neg_inf() ? 0.f : x; });
      const float contributions = q_norm * k_norm;
      const float tol =
          fmaf(p.tol_scores, contributions,
               protect::score_walk_tol<T::head_dim>(p.tol_scores, p.tol_floor, contributions));
      if (fallback && !protect::scores_ok(ref - raw, tol)) {
        alarms |= alarm_bit;
        alarm_dev = fabsf(ref - raw);
        alarm_tol = tol;
      }
    }
  }
  const float norm = check ? fast_exp2(-mean) : 1.f;
  const float norm2 = norm * norm;
  float sum = 0.f, prod = 1.f;
  // efta_correct: the exponents first, in place, summed per group of kGroup tiles (masked keys
  // stay -inf, out of the sums), and a factor 2^-k per group, k the group's mean exponent
  // rounded (see below).
  constexpr int kGroup = kScoreGroup<kST>;
  constexpr int kGroups = kST / kGroup;
  static_assert(kST % kGroup == 0, "whole groups of tiles");
  // Off the mask with the raw sums given, each group's exponent sum is one FMA of its raw sum.
  constexpr bool kFromRaw = Groups::given && !kMasked;
  [[maybe_unused]] float t_sum = 0.f, residual = 0.f, group_norm2[kGroups];
  [[maybe_unused]] bool in_range = true;
  if constexpr (T::Protect::correct) {
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      float t_group = 0.f;
#pragma unroll
      for (int nt = g * kGroup; nt < (g + 1) * kGroup; ++nt) {
        float pair = 0.f;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& x = s[nt][2 * r + c];
          const bool masked = kMasked && x == neg_inf();
          x = fmaf(x, p.scale_log2, -shift);
          if constexpr (!kFromRaw) pair += masked ? 0.f : x;
        }
        if constexpr (!kFromRaw) t_group += pair;
      }
      if constexpr (kFromRaw)
        t_group = fmaf(raw_groups.sum[g], p.scale_log2, -(2 * kGroup) * shift);
      t_sum += t_group;
      in_range = in_range && t_group >= -kGroupExponentFloor;
      // k = the group's mean exponent rounded, in [-13, 0] while in range (out of range, the
      // factor's bits are never checked): by adding 1.5 * 2^23, whose float then holds k in its
      // low bits, on the FMA pipe (a float-int conversion would take the exps' pipe).
      const float biased = fmaf(t_group, 0.5f / kGroup, 12582912.f);
      const int k = __float_as_int(biased) - 0x4B400000;
      residual += fmaf(-2.f * kGroup, biased - 12582912.f, t_group);
      group_norm2[g] = __int_as_float((127 << 23) - k * (1 << 24));  // 2^-2k, exact
    }
  }
  int stray = -1;  // a masked P that is not 0: its index among the thread's row values
  float stray_p = 0.f;
#pragma unroll
  for (int nt = 0; nt < kST; ++nt) {
    bool masked[2];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float& x = s[nt][2 * r + c];
      masked[c] = kMasked && x == neg_inf();
      if constexpr (T::Protect::correct)
        x = fast_exp2(x);  // already the exponent
      else
        x = fast_exp2(fmaf(x, p.scale_log2, -shift));
      inject_p(nt, c, x);
      if constexpr (kMasked) {
        // A masked probability is exactly 0 and outside the product check, and GEMM II's
        // checksum sums whatever it becomes: a fault there would pass every later check. The
        // mask itself is the reference. Selects, not a branch per element (whose inlined
        // reports bloated the masked step): one report per row, below.
        const bool bad = masked[c] && x != 0.f;
        stray = bad ? 2 * nt + c : stray;
        stray_p = bad ? fabsf(x) : stray_p;
        if constexpr (T::Protect::correct) x = masked[c] ? 0.f : x;
      }
    }
    const float x0 = s[nt][2 * r], x1 = s[nt][2 * r + 1];
    if constexpr (T::Protect::correct) {
      // Every factor, a masked one as 1, times its group's 2^-k (exact): the product is
      // 2^residual, whatever the mask.
      const float n2 = group_norm2[nt / kGroup];
      if constexpr (kMasked)
        prod *= (masked[0] ? 1.f : x0) * ((masked[1] ? 1.f : x1) * n2);
      else
        prod *= x0 * (x1 * n2);
    } else if constexpr (kMasked) {
      // One normalisation per pair off the mask (three multiplies for two factors).
      prod *= (masked[0] ? 1.f : x0 * norm) * (masked[1] ? 1.f : x1 * norm);
    } else {
      prod *= x0 * (x1 * norm2);
    }
    // l is the ones column (the 16-bit P that O was multiplied with); this FP32 sum of the
    // unrounded P checks it (efta_row_sum).
    packed[nt][r] = P::pack(x0, x1);
    sum += x0 + x1;
  }
  if constexpr (kMasked)
    if (stray >= 0) on_stray(stray, stray_p);
  row_sum = row_sum * rescale + sum;
  // A factor flushed to zero, or a product past FP32's range (a row whose exponents spread far
  // around their mean: outliers), makes it unverifiable, not wrong. A fault that blows a factor
  // up still reaches the row-sum and output checks as inf. The exponents' sum, from the
  // checksum, is off by up to tol_probs |q| sum|k|; exp2 adds its own rounding per factor.
  // 2^y - 1 = e^z - 1 <= z + z^2 for z = y ln 2 <= 1: no exp2 on the special-function unit,
  // which the softmax keeps busy.
  const float z = 0.6931472f * p.scale_log2 * (p.tol_probs * q_norm * k_norm + p.tol_floor);
  float tol = (z < 1.f ? fmaf(z, z, z) : -neg_inf()) + n * 4e-7f + 1e-5f;
  float dev = fabsf(prod - 1.f);
  if constexpr (T::Protect::correct) {
    // efta_correct has already checked (and corrected) the scores against their checksum, so
    // the product's reference is the exponents the exps were given. Each factor, a masked one as
    // 1, is scaled by its group's 2^-k (exact), so prod must be 2^residual, residual = the sum
    // over groups of (exponents - 2 kGroup k), at most kGroup each: to within the exps' error
    // (2^-22 each, one more for 2^residual), the 1.5 n multiplies' rounding and the group sums'
    // (a few 2^-24 |t_sum|: every exponent is <= 0). That catches a flip of P down to a few
    // 1e-5 of it, where the checksum's reference leaves 1e-3 to 1e-2 (z) to GEMM I's rounding;
    // the exponents are then held to the checksum's sum with that budget. No partial product
    // leaves FP32's normal range while every group's exponents sum to at least
    // -kGroupExponentFloor (a prefix of a group is within 2^(+-(that + kGroup)) of the groups
    // before it, which are within 2^(kGroup each) of 1; a pair within 2^-that and 2^(that /
    // kGroup + 1)): then a product that is 0, inf or NaN is a fault too. A row with a group
    // below that (outliers) is left to the exponent check.
    const float expected = fast_exp2(residual);
    // The group sums' rounding in exponent units (u = 2^-24 < 6e-8): summed from the
    // exponents, a few roundings of partial sums of like-signed terms; from the raw sums, also
    // 2 kGroup - 1 roundings of sum |s| scale <= |t| + |shift| per score.
    const float shift_term = kFromRaw ? n * (2 * kGroup - 1) * fabsf(shift) : 0.f;
    const float rounding = 6e-8f * ((2 * kGroup + 2) * fabsf(t_sum) + shift_term + fabsf(num));
    tol = (n * 5e-7f + 1e-5f + 0.6931472f * rounding) * expected;
    dev = fabsf(prod - expected);
    const float apart = fabsf(t_sum - num);
    const float budget = z * 1.4426950f + rounding;  // z in base-2 exponent units
    const bool exponents_ok = apart <= budget;
    if (!exponents_ok) dev = apart, tol = budget;  // what the report then shows
    const bool live = n > 0 && mx != neg_inf();
    const bool alarm = live && (!exponents_ok || (in_range && !(dev <= tol)));
    alarms |= alarm ? alarm_bit : 0u;
    alarm_dev = alarm ? dev : alarm_dev;
    alarm_tol = alarm ? tol : alarm_tol;
    return;
  }
  // The product left FP32's range (0, inf or NaN): unverifiable as a product. A score flipped
  // far down (or a large one's sign flipped) gives a P of 0, and so a product of 0, as clean rows
  // with an exponent below -126 (exp2 flushes there) do. There the exponents are taken back from
  // P instead (log2, on the rare rows only: a branch on the warp's vote): the checksum's sum
  // less those of the P that are not 0 is the zeros' sum, at most -126 each when clean, while a
  // zero made by a fault leaves that score's own exponent, above -126. Within the checksum's
  // budget (z in exponent units) and the logs' rounding.
  const bool lost = check && !(prod != 0.f && fabsf(prod) < -neg_inf());
  if (__any_sync(0xffffffffu, lost)) {
    float logs = 0.f;
    int zeros = 0;
    for_row_half(s, r, [&](float x) {
      logs += x > 0.f ? fast_log2(x) : 0.f;
      zeros += x > 0.f ? 0 : 1;
    });
    zeros -= 2 * kST - n;  // the masked keys' P are 0 too
    const float rest = num - logs;
    const float budget = z * 1.4426950f + n * 1e-4f + 1e-3f;
    const bool bad = lost && !(zeros == 0 ? fabsf(rest) <= budget : rest <= budget - 126.f * zeros);
    alarms |= bad ? alarm_bit : 0u;
    alarm_dev = bad ? rest : alarm_dev;
    alarm_tol = bad ? budget - 126.f * zeros : alarm_tol;
  }
  // Selects, not a branch: the caller reports after GEMM II, so that nothing splits the softmax
  // from GEMM II's MMAs.
  const bool alarm = check && prod != 0.f && fabsf(prod) < -neg_inf() && !(dev <= tol);
  alarms |= alarm ? alarm_bit : 0u;
  alarm_dev = alarm ? dev : alarm_dev;
  alarm_tol = alarm ? tol : alarm_tol;
}

// SNVR's running lower bound of l, updated for a key block: l >= the sum over blocks of
// e^(block max - max), rescaled like l.
__device__ __forceinline__ float snvr_lower_bound(float lower, float rescale, float block_max,
                                                  float scale_log2, float shift) {
  return lower * rescale +
         (block_max == neg_inf() ? 0.f : fast_exp2(fmaf(block_max, scale_log2, -shift)));
}

// The epilogue's l for one row under EFTA. l is the ones column `ones`: the 16-bit P that GEMM
// II multiplied into O, summed through the tensor cores. The FP32 sum of the unrounded P, `sum`,
// checks it: rounding to 16 bits moves each P by at most half an ulp (2^-11 of it for f16, 2^-8
// for bf16; f16 subnormals, below 2^-14, by at most 2^-25 each), which tol_row_sum's default
// covers with FP32 accumulation on top, so a fault the check misses moves l, and the row's
// output, by about an ulp of a 16-bit output at most. SNVR's range LB <= l <= (unmasked keys)
// decides which of the two is wrong when they disagree; lane 0 of the quad reports.
//
// Each lane of the quad keeps its own copy of the running max (the block maxima it takes are the
// quad's), so a fault in one copy weights that lane's keys apart from the rest for the remainder
// of the row, and does so alike in O, its checksums and l: no check sees it, and on the H200
// 8-13% of 16-bit efta_correct's max flips were silent, each moving the whole row. Fault-free,
// the four copies are equal bit for bit; a fault healed by a later, larger block max leaves the
// lane's rescale apart instead, which the output check sees. So the copies must agree here.
template <class T>
__device__ __forceinline__ float efta_row_sum(const AttentionParams& p, float sum, float ones,
                                              float lb, int row, float row_max, int lane, int batch,
                                              int head) {
  const float lead = __shfl_sync(0xffffffffu, row_max, lane & ~3);
  float gap = row_max == lead ? 0.f : fabsf(row_max - lead);
  if (!(gap <= 3.402823466e38f)) gap = -neg_inf();  // a NaN copy
  gap = fmaxf(gap, __shfl_xor_sync(0xffffffffu, gap, 1));
  gap = fmaxf(gap, __shfl_xor_sync(0xffffffffu, gap, 2));
  if (gap > 0.f && row < p.seqlen_q && lane % 4 == 0)
    record_fault(p.fault_log, batch, head, row, -1, fault_stage_row_max, false, gap, 0.f);
  const int diag = p.seqlen_k - p.seqlen_q;
  const int keys = T::causal ? max(0, min(p.seqlen_k, row + diag + 1)) : p.seqlen_k;
  float l = ones;
  // LB comes from the unrounded block maxima, l from 16-bit probabilities: each can sit below
  // its FP32 value by half an ulp (2^-9 for bf16). Above: a row's max element
  // exp2(fma(s, scale, -shift)) exceeds 1 by the fma's rounding (large scores), and the 16-bit
  // rounding can take it up a whole ulp of 1 (2^-7 for bf16).
  auto in_range = [&](float x) { return x >= lb * (1.f - 4e-3f) && x <= keys * (1.f + 1.6e-2f); };
  const float tol = p.tol_row_sum * fmaxf(fabsf(sum), fabsf(ones)) + keys * 3e-8f + p.tol_floor;
  if (row < p.seqlen_q && row_max != neg_inf()) {
    if (!(fabsf(sum - ones) <= tol)) {
      // Resolved when exactly one of the two is in range: l is then that one.
      const bool ones_ok = in_range(ones), fix = ones_ok != in_range(sum);
      if (lane % 4 == 0)
        record_fault(p.fault_log, batch, head, row, -1, fault_stage_row_sum, fix, fabsf(sum - ones),
                     tol);
      if (fix && !ones_ok) l = sum;
    } else if (!in_range(ones)) {
      if (lane % 4 == 0)
        record_fault(p.fault_log, batch, head, row, -1, fault_stage_row_sum, false, ones, lb);
      l = lb;  // EFTA's SNVR restriction
    }
  }
  return l;
}

}  // namespace ftattn::detail
