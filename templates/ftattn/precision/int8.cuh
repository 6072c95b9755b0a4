// Precision policy int8 (INT-FlashAttention): INT8 Q, K, V with FP32 dequantisation scales,
// m16n8k32 s8 tensor-core MMAs with exact INT32 accumulation, P quantised to round(127 p).
// Used by the 8-bit skeleton (kernel/fwd_q8_sm80.cuh) and the quantisation kernels.
#pragma once

#include "ftattn/common/types.cuh"

namespace ftattn::precision {

struct Int8 {
  static constexpr int element_bytes = 1;
  using Acc = int;  // GEMM accumulator element
  // P·V accumulates one key block in an INT32 tile that is then added to the FP32 O (the rescale
  // between blocks is a float).
  static constexpr bool pv_into_output = false;
  static constexpr float range = 127.f;  // symmetric: |q| <= 127 (the paper's "256" overflows)
  // P = round(127 * 2^(s - m)) = round(2^(s - m + log2 127)), in [0, 127]; 7 bits used.
  static constexpr float p_log2_range = 6.988684686772166f;

  // c += a * b: 16x32 by 32x8 INT8, INT32 accumulators (wrap-around, no saturation).
  __device__ __forceinline__ static void mma(int (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }

  __device__ __forceinline__ static float to_float(int x) { return static_cast<float>(x); }

  // The value P·V will use for p = 2^(s - m + p_log2_range); the row sum l adds exactly these
  // (the paper's l = rowsum(P_int)), so O / l stays consistent with the quantised P.
  __device__ __forceinline__ static float quantize_p(float y) {
    float r;
    asm("cvt.rni.f32.f32 %0, %1;" : "=f"(r) : "f"(y));
    return r;
  }

  // round-to-nearest-even(x), saturated to [-127, 127] by the caller's scale, as a byte.
  __device__ __forceinline__ static u32 to_byte(float x) {
    int r;
    asm("cvt.rni.s32.f32 %0, %1;" : "=r"(r) : "f"(x));
    r = r > 127 ? 127 : (r < -127 ? -127 : r);
    return static_cast<u32>(r) & 0xffu;
  }

  // Four values -> one register, `a` in the lowest byte.
  __device__ __forceinline__ static u32 pack4(float a, float b, float c, float d) {
    return to_byte(a) | (to_byte(b) << 8) | (to_byte(c) << 16) | (to_byte(d) << 24);
  }
};

}  // namespace ftattn::precision
