// Precision policy f16_pasa (PASA, kernel/fwd_pasa_sm80.cuh): FP16 Q, K, V, O; S = Q K'^T
// accumulated in FP16 by the tensor cores, P = 2^(S - b) in FP16 on the f16x2 special-function
// path; m, l and O in FP32. Every operation is inline PTX: NVRTC runs without cuda_fp16.h.
#pragma once

#include "ftattn/common/types.cuh"
#include "ftattn/precision/f16.cuh"

namespace ftattn::precision {

struct F16Pasa : F16 {
  static constexpr bool pasa = true;

  // c += a * b with one m16n8k16 MMA and FP16 accumulators: c[0] holds row g (columns 2t,
  // 2t + 1) of the n8 tile, c[1] row g + 8 - the A fragment layout, so P needs no repacking.
  __device__ __forceinline__ static void mma_f16(u32 (&c)[2], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
        "{%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%0, %1};\n"
        : "+r"(c[0]), "+r"(c[1])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }

  __device__ __forceinline__ static u32 hmax2(u32 a, u32 b) {
    u32 r;
    asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  __device__ __forceinline__ static u32 hadd2(u32 a, u32 b) {
    u32 r;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  // 2^x for both halves (ex2.approx.f16x2, sm_75+): 2^-inf = 0 keeps masked keys at 0.
  __device__ __forceinline__ static u32 hexp2(u32 x) {
    u32 r;
    asm("ex2.approx.f16x2 %0, %1;" : "=r"(r) : "r"(x));
    return r;
  }
  // Halves <-> float.
  __device__ __forceinline__ static float lo(u32 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(x & 0xffffu)));
    return f;
  }
  __device__ __forceinline__ static float hi(u32 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(x >> 16)));
    return f;
  }
  __device__ __forceinline__ static unsigned short to_half(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
  }
  // Both halves = h.
  __device__ __forceinline__ static u32 splat(unsigned short h) { return h | (u32(h) << 16); }
  // (lo of a, lo of b) and (hi of a, hi of b).
  __device__ __forceinline__ static u32 lows(u32 a, u32 b) { return prmt(a, b, 0x5410); }
  __device__ __forceinline__ static u32 highs(u32 a, u32 b) { return prmt(a, b, 0x7632); }
  __device__ __forceinline__ static u32 prmt(u32 a, u32 b, u32 selector) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
    return r;
  }

  static constexpr unsigned short neg_inf_half = 0xfc00;
};

}  // namespace ftattn::precision
