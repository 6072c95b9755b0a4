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

  // The MMAs start from this bit pattern instead of 0 (INT32 adds wrap, so the accumulator ends
  // at kBias + S). While |S| < 2^22 (127 * 127 * 256 keys or channels at most) the same bits read
  // as the float 1.5 * 2^23 + S exactly, so one FADD converts: no I2F, whose conversion pipe
  // runs at a quarter of the FP32 rate and was the kernel's bottleneck.
  static constexpr int acc_zero = 0x4B400000;
  static constexpr float kMagic = 12582912.f;  // 1.5 * 2^23

  __device__ __forceinline__ static float to_float(int x) { return __int_as_float(x) - kMagic; }

  // p = 2^(s - m + p_log2_range) as the value P V uses: round(p) rides in the low byte of the
  // float p + 1.5 * 2^23 (the FADD rounds to nearest even). The clamp keeps a rounded-up exp2 or
  // offset from reaching 128, which would read as -128.
  __device__ __forceinline__ static float quantize_p(float y) { return fminf(y, 127.f) + kMagic; }

  // The row sum l adds exactly the quantised P (the paper's l = rowsum(P_int)): the biased
  // floats' bits summed as INT32 (wrapping), less count * bias once per row and block.
  using PSum = int;
  __device__ __forceinline__ static void add_p(int& sum, float q) { sum += __float_as_int(q); }
  __device__ __forceinline__ static float p_sum(int sum, int count) {
    return static_cast<float>(sum - count * acc_zero);
  }

  // Four quantize_p results -> the bytes of one A-operand register, `a` in the lowest byte.
  __device__ __forceinline__ static u32 pack_p(float a, float b, float c, float d) {
    const u32 ab = __byte_perm(__float_as_uint(a), __float_as_uint(b), 0x0040);
    const u32 cd = __byte_perm(__float_as_uint(c), __float_as_uint(d), 0x0040);
    return __byte_perm(ab, cd, 0x5410);
  }

  // round-to-nearest-even(x), saturated to [-127, 127] by the caller's scale, as a byte.
  __device__ __forceinline__ static u32 to_byte(float x) {
    int r;
    asm("cvt.rni.s32.f32 %0, %1;" : "=r"(r) : "f"(x));
    r = r > 127 ? 127 : (r < -127 ? -127 : r);
    return static_cast<u32>(r) & 0xffu;
  }

  // Four values -> one register, `a` in the lowest byte (the quantisation kernels).
  __device__ __forceinline__ static u32 pack4(float a, float b, float c, float d) {
    return to_byte(a) | (to_byte(b) << 8) | (to_byte(c) << 16) | (to_byte(d) << 24);
  }
};

}  // namespace ftattn::precision
