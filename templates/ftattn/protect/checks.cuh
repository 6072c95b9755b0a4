// Arithmetic of the checksum checks that the fused kernel runs whatever the scheme: hi/lo
// splitting of checksum operands, and locating and rebuilding a single faulty element.
#pragma once

#include "ftattn/common/faults.cuh"
#include "ftattn/precision/bf16.cuh"
#include "ftattn/precision/f16.cuh"
#include "ftattn/protect/locate.cuh"

namespace ftattn::protect {

template <class P>
struct IsBf16 {
  static constexpr bool value = false;
};
template <>
struct IsBf16<precision::BF16> {
  static constexpr bool value = true;
};

// x -> (hi, lo) 16-bit values with hi + lo == x to twice the format's precision; packed with hi
// at the lower address.
template <class P>
__device__ __forceinline__ u32 split_hi_lo(float x) {
  float hi, unused;
  unpack2<IsBf16<P>::value>(P::pack(x, 0.f), hi, unused);
  return P::pack(x, x - hi);
}

// 1 / sqrt(n), evaluated by the compiler (Newton's iteration on a constant).
constexpr float inv_sqrt(int n) {
  double r = n;
  for (int i = 0; i < 64; ++i) r = 0.5 * (r + n / r);
  return static_cast<float>(1.0 / r);
}

// A GEMM I check's discrepancy e1 within its threshold, which must itself be finite: a score
// flipped to infinity makes a threshold that follows the scores infinite.
__device__ __forceinline__ bool scores_ok(float e1, float tol) {
  return fabsf(e1) <= tol && tol <= 3.402823466e38f;
}

// efta_correct's GEMM I check (16-bit): a thread's scores of a row half over its keys of a
// block summed in FP32 against their checksum `ref`, e1 = ref - sum; `tol` gets the threshold
// applied. Both sides round in proportion to their running sums: the scores themselves where they
// add up (q and k aligned, PASA's biased inputs), and inside dot products that cancel about
// |q| |k| / sqrt(head_dim) per key, a random walk's. So the threshold is tol_scores * (sum |s| +
// walk) + floor, `walk_tol` = score_walk_tol's; on unbiased inputs about sqrt(head_dim) below
// |q| sum |k| (Cauchy-Schwarz, the bound before), so flips of the scores' lower mantissa bits
// are seen there. sum |s| (`abs_sum()`) costs an add per score; |ref|, no larger for fault-free
// scores, costs nothing, so the sum runs only where the check fails with |ref| (faults, or scores
// that cancel across keys). tol_scores is calibrated (runtime/protected_launch.cpp). fp8 keeps
// its sum of absolute contributions: there this bound corrected more flips but saw no more
// silent ones, and cost its EFTA kernels 1-8% (README, Protection).
template <class AbsSum>
__device__ __forceinline__ bool scores_within(float tol_scores, float e1, float ref, float walk_tol,
                                              AbsSum&& abs_sum, float& tol) {
  tol = fmaf(tol_scores, fabsf(ref), walk_tol);
  if (scores_ok(e1, tol)) return true;
  tol = fmaf(tol_scores, abs_sum(), walk_tol);
  return scores_ok(e1, tol);
}

// The threshold's random-walk term and floor, once per block: tol_scores * contributions /
// sqrt(head_dim) + floor, `contributions` a bound on the sum of |q_d k_d| over the thread's keys
// (|q| sum |k|).
template <int kHeadDim>
__device__ __forceinline__ float score_walk_tol(float tol_scores, float tol_floor,
                                                float contributions) {
  constexpr float walk = inv_sqrt(kHeadDim);
  return tol_scores * walk * contributions + tol_floor;
}

// Rebuilds element `bad` of `x` from the checksum: x[bad] = ref - sum of the others. Robust to a
// non-finite faulty value, unlike adding the discrepancy.
template <int N>
__device__ __forceinline__ void rebuild(float* x, int bad, float ref) {
  float others = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (i != bad) others += x[i];
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (i == bad) x[i] = ref - others;
}

// Where the single faulty element of a thread's group is (locate_index), from the plain (e1) and
// weighted (e2) discrepancies; a non-finite element locates itself.
template <int N>
__device__ __forceinline__ int locate(const float* x, float e1, float e2) {
  int bad = -1, non_finite = 0;
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (!finite(x[i])) {
      bad = i;
      ++non_finite;
    }
  if (non_finite == 1) return bad;
  if (non_finite > 1) return -1;
  return locate_index(e1, e2, N);
}

// efta_correct's single-error repair of one row of an MMA accumulator tile set (S or O): this
// thread's 2 * NT values of row half r (columns 8 nt + 2 quad + c), checked against the plain
// checksum `ref` (discrepancy e1 = ref - their sum) and the weighted one `weighted_ref`. Rebuilds
// the element it locates and returns its index among the thread's values, or -1.
template <int NT>
__device__ __forceinline__ int correct_row(float (&x)[NT][4], int r, float e1, float ref,
                                           float weighted_ref) {
  constexpr int n = 2 * NT;
  float g[n];
  float wsum = 0.f;
#pragma unroll
  for (int j = 0; j < n; ++j) {
    g[j] = x[j / 2][2 * r + j % 2];
    wsum += (j + 1) / float(n) * g[j];
  }
  const int bad = locate<n>(g, e1, weighted_ref - wsum);
  if (bad >= 0) {
    rebuild<n>(g, bad, ref);
#pragma unroll
    for (int j = 0; j < n; ++j) x[j / 2][2 * r + j % 2] = g[j];
  }
  return bad;
}

// The column within its block of value `j` of a thread's row group (quad_t: lane % 4).
__device__ __forceinline__ int row_group_column(int j, int quad_t) {
  return (j / 2) * 8 + 2 * quad_t + j % 2;
}

// A row of O's checksums under efta_correct: plain, weighted by output_weight and by its square.
struct OutputRowChecksums {
  float plain, weighted, squared;
};

// efta_correct's single-error repair of row half r of O, which a quad holds: this thread's 2 * NT
// values of it at columns row_group_column(j, lane % 4), checked against the row's checksums `c`
// (discrepancy e1 = c.plain - the row's sum; locate_output_column). The lane that holds the
// located element rebuilds it from the checksum and the row's other elements, unless the rebuilt
// value exceeds `bound` (l max sum |v|, which bounds every element of the row): a fault spread
// over many elements, the ratios aliasing one, then leaves a discrepancy no element can hold.
// Returns the column, in every lane of the quad, or -1. Only this lane's quad need be here: the
// shuffles name it alone, and every value the quad's lanes decide on is the same in all four.
template <int NT>
__device__ __forceinline__ int correct_output_row(float (&x)[NT][4], int r, float e1,
                                                  const OutputRowChecksums& c, float bound,
                                                  int lane) {
  constexpr int n = 2 * NT, head_dim = 8 * NT;
  const unsigned quad = 0xfu << (lane & ~3);
  const int quad_t = lane % 4;
  auto quad_total = [&](float v) {
    v += __shfl_xor_sync(quad, v, 1);
    return v + __shfl_xor_sync(quad, v, 2);
  };
  float wsum = 0.f, ssum = 0.f, non_finite = 0.f;
  int mine = -1;
#pragma unroll
  for (int j = 0; j < n; ++j) {
    const float v = x[j / 2][2 * r + j % 2];
    const float w = output_weight(row_group_column(j, quad_t), head_dim);
    wsum += w * v;
    ssum += w * w * v;
    if (!finite(v)) {
      non_finite += 1.f;
      mine = j;
    }
  }
  non_finite = quad_total(non_finite);
  int column;
  if (non_finite > 0.f) {  // a non-finite element locates itself, when it is the only one
    if (non_finite != 1.f) return -1;
    column = mine >= 0 ? row_group_column(mine, quad_t) : -1;
    column = max(column, __shfl_xor_sync(quad, column, 1));
    column = max(column, __shfl_xor_sync(quad, column, 2));
  } else {
    column = locate_output_column(e1, c.weighted - quad_total(wsum), c.squared - quad_total(ssum),
                                  head_dim);
    if (column < 0) return -1;
  }
  // Rebuilt as the checksum less the others, not as x + e1: a flipped exponent makes the row's
  // sum, and so e1, too large for x + e1 to keep the element's digits.
  const bool owner = (column % 8) / 2 == quad_t;
  const int bad = 2 * (column / 8) + column % 2;
  float others = 0.f;
#pragma unroll
  for (int j = 0; j < n; ++j)
    if (!(owner && j == bad)) others += x[j / 2][2 * r + j % 2];
  const float rebuilt = c.plain - quad_total(others);  // the same in every lane of the quad
  if (!(fabsf(rebuilt) <= bound)) return -1;
#pragma unroll
  for (int j = 0; j < n; ++j)
    if (owner && j == bad) x[j / 2][2 * r + j % 2] = rebuilt;
  return column;
}

}  // namespace ftattn::protect
