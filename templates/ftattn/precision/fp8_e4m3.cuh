// Precision policy fp8_e4m3 (sm_89+): E4M3 Q, K, V with FP32 dequantisation scales (per token for
// Q, per 64 keys for K, per channel for V), m16n8k32 e4m3 tensor-core MMAs with FP32 accumulation,
// P stored as E4M3. Used by the 8-bit skeleton (kernel/fwd_q8_sm80.cuh) and the quantisation
// kernels.
#pragma once

#include "ftattn/common/math.cuh"
#include "ftattn/common/types.cuh"

namespace ftattn::precision {

struct Fp8E4M3 {
  static constexpr int element_bytes = 1;
  using Acc = float;
  // FP32 accumulators, so no integer tile between P·V and O, but no accumulation into O either:
  // every skeleton computes each block's P·V from zero and adds it to O on the CUDA cores, since
  // the E4M3 MMAs keep only about 22 bits when they add into a large accumulator (Hopper's wgmma,
  // measured: kernel/fwd_q8_sm90.cuh, q8::fold_output; Ada's mma.sync by SageAttention2's
  // account; kernel/fwd_q8_sm80.cuh). On the wgmma skeletons the fold also takes O's rescale.
  static constexpr bool float_accumulators = true;
  static constexpr float range = 448.f;  // largest finite E4M3
  // P is stored as 256 p: E4M3 then keeps 3 mantissa bits down to p = 2^-14 and subnormals to
  // 2^-17, instead of flushing everything below 2^-9; 256 (a power of two) cancels in O / l.
  static constexpr float p_log2_range = 8.f;

  // c += a * b: 16x32 by 32x8 E4M3, FP32 accumulators.
  __device__ __forceinline__ static void mma(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }

  static constexpr float acc_zero = 0.f;  // the MMAs' starting value
  __device__ __forceinline__ static float to_float(float x) { return x; }
  __device__ __forceinline__ static float dequant_bias(float) { return 0.f; }
  __device__ __forceinline__ static float acc_as_float(float x) { return x; }

  // P = 2^(t + 8) for t = x s_Q - max <= 0.
  __device__ __forceinline__ static float p_offset(float shift) { return p_log2_range - shift; }

  // Four P values as E4M3 bytes, `t0` (already offset) in the lowest byte. l sums the unrounded
  // P (FlashAttention-3's FP8 choice): rounding to E4M3 is unbiased, and converting every P back
  // would cost a cvt per element.
  using PSum = float;
  __device__ __forceinline__ static u32 p_word(float t0, float t1, float t2, float t3, float& sum) {
    const float p0 = fast_exp2(t0), p1 = fast_exp2(t1), p2 = fast_exp2(t2), p3 = fast_exp2(t3);
    sum += (p0 + p1) + (p2 + p3);
    return pack4(p0, p1, p2, p3);
  }
  __device__ __forceinline__ static float p_sum(float sum) { return sum; }

  // Two floats -> two E4M3 bytes (round to nearest even, saturated to +-448), `lo` first.
  __device__ __forceinline__ static u32 pack2(float lo, float hi) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
  }

  // Four values -> one register, `a` in the lowest byte (the quantisation kernels).
  __device__ __forceinline__ static u32 pack4(float a, float b, float c, float d) {
    return pack2(a, b) | (pack2(c, d) << 16);
  }
};

}  // namespace ftattn::precision
