// Precision policy bf16: BF16 Q, K, V, O; FP32 accumulation and softmax.
#pragma once

#include "ftattn/common/types.cuh"

namespace ftattn::precision {

struct BF16 {
  static constexpr int element_bytes = 2;
  static constexpr bool pasa = false;  // f16_pasa overrides: K tiles carry shift rows

  __device__ __forceinline__ static u32 pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }

  // x rounded to BF16 and back (a BF16 is the top half of an FP32).
  __device__ __forceinline__ static float round(float x) {
    u32 r;
    asm("{ .reg .b16 h;\n cvt.rn.bf16.f32 h, %1;\n cvt.u32.u16 %0, h;\n shl.b32 %0, %0, 16;\n}\n"
        : "=r"(r)
        : "f"(x));
    return __uint_as_float(r);
  }

  __device__ __forceinline__ static void mma(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

}  // namespace ftattn::precision
