// Arithmetic of the checksum checks that the fused kernel runs whatever the scheme: hi/lo
// splitting of checksum operands, and locating and rebuilding a single faulty element.
#pragma once

#include "ftattn/common/faults.cuh"
#include "ftattn/precision/bf16.cuh"
#include "ftattn/precision/f16.cuh"

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

// Where the single faulty element of a thread's group is, from the plain (e1) and weighted (e2)
// discrepancies with weights (j + 1) / n; -1 when the ratio is not a clean index (two faults, a
// hit checksum, or a discrepancy too small to locate). A non-finite element locates itself.
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
  const float ratio = e2 / e1 * N;
  const float j = rintf(ratio);
  if (!finite(ratio) || fabsf(ratio - j) > 0.2f || j < 1.f || j > float(N)) return -1;
  return static_cast<int>(j) - 1;
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

}  // namespace ftattn::protect
