// Scalar helpers for the softmax: base-2 exponentials and quad (4-lane) reductions.
#pragma once

namespace ftattn {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// 2^x on the special-function unit; exp2(-inf) = 0, which the masked scores rely on.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The four lanes of an MMA quad hold one accumulator row between them.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return x;
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

// Sum of this thread's elements of row half r across n8 accumulator tiles: what a per-thread
// (EFTA) checksum column covers. `Abs` sums their magnitudes instead.
template <bool Abs = false, int kN>
__device__ __forceinline__ float thread_row_sum(const float (&x)[kN][4], int r) {
  float sum = 0.f;
#pragma unroll
  for (int nt = 0; nt < kN; ++nt) {
    if constexpr (Abs)
      sum += fabsf(x[nt][2 * r]) + fabsf(x[nt][2 * r + 1]);
    else
      sum += x[nt][2 * r] + x[nt][2 * r + 1];
  }
  return sum;
}

}  // namespace ftattn
