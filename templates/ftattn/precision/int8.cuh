// Precision policy int8 (INT-FlashAttention): INT8 Q, K, V with FP32 dequantisation scales,
// m16n8k32 s8 tensor-core MMAs with exact INT32 accumulation, P quantised to round(127 p) (the
// wgmma skeletons: unsigned round(255 p) against a lazy reference, kernel/fwd_q8_sm90.cuh).
// Used by the 8-bit skeletons and the quantisation kernels.
#pragma once

#include "ftattn/common/types.cuh"

namespace ftattn::precision {

struct Int8 {
  static constexpr int element_bytes = 1;
  using Acc = int;  // GEMM accumulator element
  // INT32 accumulators: P·V accumulates one key block in an INT32 tile that is then added to O
  // (the rescale between blocks is a float; on Hopper O itself stays INT32, q8::lazy_softmax).
  static constexpr bool float_accumulators = false;
  static constexpr float range = 127.f;  // symmetric: |q| <= 127 (the paper's "256" overflows)
  // P = round(127 * 2^(s - m)) = round(2^(s - m + log2 127)), in [0, 127]; 7 bits used.
  static constexpr float p_log2_range = 6.988684686772166f;
  // The wgmma skeletons' P is unsigned (u8 x s8 MMAs): round(255 * 2^(s - ref)) against a
  // reference that moves only in whole powers of two (kernel/fwd_q8_sm90.cuh, lazy_softmax).
  static constexpr float lazy_p_log2_range = 7.994353436858858f;  // log2(255)

  // c += a * b: 16x32 by 32x8 INT8, INT32 accumulators (wrap-around, no saturation).
  __device__ __forceinline__ static void mma(int (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }

  // The MMAs start from this bit pattern instead of 0 (INT32 adds wrap, so the accumulator ends
  // at acc_zero + S). While |S| < 2^22 (127 * 127 * 256 keys or channels at most) the same bits
  // read as the float 1.5 * 2^23 + S exactly, so FP32 ops convert: no I2F, whose conversion pipe
  // runs at a quarter of the FP32 rate.
  static constexpr int acc_zero = 0x4B400000;
  static constexpr float kMagic = 12582912.f;  // 1.5 * 2^23

  __device__ __forceinline__ static float to_float(int x) { return __int_as_float(x) - kMagic; }

  // S * s_K in one FMA: (kMagic + S) * s_K + dequant_bias(s_K). The bias rounds once, an error
  // of at most 0.375 s_K (three eighths of one integer step of S).
  __device__ __forceinline__ static float dequant_bias(float key_scale) {
    return -kMagic * key_scale;
  }
  __device__ __forceinline__ static float acc_as_float(int x) { return __int_as_float(x); }

  // P = 127 * 2^t for t = x s_Q - max <= 0 (the skeleton rounds the max up, so t never exceeds
  // 0 and P never 127.5).
  __device__ __forceinline__ static float p_offset(float shift) { return -shift; }

  // Four P values as the bytes of one A-operand register, `t0` in the lowest byte, and their sum
  // added to `sum` (the paper's l = rowsum(P_int): exact, and what P V sees). 2^t on the FP32
  // special-function unit, then packed in pairs: ex2.approx.f16x2 is no packed instruction on
  // sm_80 to sm_90 (ptxas issues two MUFU.EX2.F16 and a prmt to rejoin them), so this saves two
  // prmts per word and rounds t no more. fma.rn.f16x2 rounds Range * 2^t to an integer inside
  // the f16 1536 + P (f16 steps are 1 in [1024, 2048)), whose low byte is P; one prmt gathers
  // four low bytes, one dp4a sums them. For t <= 0, 2^t rounds to at most 1 in f16, so
  // Range * 2^t rounds to Range at most and 1536 + 255 stays below 2048.
  using PSum = unsigned;
  template <int Range = 127>
  __device__ __forceinline__ static u32 p_word(float t0, float t1, float t2, float t3,
                                               unsigned& sum) {
    static_assert(Range == 127 || Range == 255, "P is a signed or an unsigned byte");
    constexpr u32 range2 = Range == 127 ? 0x57F057F0u : 0x5BF85BF8u;  // f16x2 {Range, Range}
    u32 w;
    asm("{\n\t"
        ".reg .b32 a, b;\n\t"
        ".reg .f32 e0, e1, e2, e3;\n\t"
        "ex2.approx.ftz.f32 e0, %1;\n\t"
        "ex2.approx.ftz.f32 e1, %2;\n\t"
        "ex2.approx.ftz.f32 e2, %3;\n\t"
        "ex2.approx.ftz.f32 e3, %4;\n\t"
        "cvt.rn.f16x2.f32 a, e1, e0;\n\t"
        "cvt.rn.f16x2.f32 b, e3, e2;\n\t"
        "fma.rn.f16x2 a, a, %5, %6;\n\t"
        "fma.rn.f16x2 b, b, %5, %6;\n\t"
        "prmt.b32 %0, a, b, 0x6420;\n\t"
        "}"
        : "=r"(w)
        : "f"(t0), "f"(t1), "f"(t2), "f"(t3), "r"(range2), "r"(0x66006600u) /* 1536, 1536 */);
    asm("dp4a.u32.u32 %0, %1, %2, %0;" : "+r"(sum) : "r"(w), "r"(0x01010101u));
    return w;
  }
  __device__ __forceinline__ static float p_sum(unsigned sum) { return static_cast<float>(sum); }

  // Four values -> one register, `a` in the lowest byte (the quantisation kernels): each clamped
  // to [-127, 127] and rounded to the nearest integer, ties to even, by adding kMagic (whose
  // float then holds the integer in its low bits, two's complement), as cvt.rni.s32.f32 rounds.
  // The adds run on the FP32 pipe; the conversion ran at a quarter of its rate, one per element,
  // and held the quantisation passes below DRAM speed. The clamp keeps the product x * scale
  // rounded once on its own before the add (no FMA contraction), as the host's model has it.
  __device__ __forceinline__ static u32 pack4(float a, float b, float c, float d) {
    auto bits = [](float x) { return __float_as_uint(fminf(fmaxf(x, -127.f), 127.f) + kMagic); };
    u32 lo, hi, w;
    asm("prmt.b32 %0, %1, %2, 0x0040;" : "=r"(lo) : "r"(bits(a)), "r"(bits(b)));
    asm("prmt.b32 %0, %1, %2, 0x0040;" : "=r"(hi) : "r"(bits(c)), "r"(bits(d)));
    asm("prmt.b32 %0, %1, %2, 0x5410;" : "=r"(w) : "r"(lo), "r"(hi));
    return w;
  }
};

}  // namespace ftattn::precision
