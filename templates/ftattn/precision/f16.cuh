// Precision policy f16: FP16 Q, K, V, O; FP32 accumulation and softmax.
#pragma once

#include "ftattn/common/types.cuh"

namespace ftattn::precision {

struct F16 {
  static constexpr int element_bytes = 2;
  static constexpr bool pasa = false;  // f16_pasa overrides: K tiles carry shift rows

  // Two floats -> one register of two halves, `lo` at the lower address.
  __device__ __forceinline__ static u32 pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }

  // x rounded to FP16 and back: the value an MMA operand packed from it holds.
  __device__ __forceinline__ static float round(float x) {
    float r;
    asm("{ .reg .b16 h;\n cvt.rn.f16.f32 h, %1;\n cvt.f32.f16 %0, h;\n}\n" : "=f"(r) : "f"(x));
    return r;
  }

  // c += a * b with one m16n8k16 tensor-core MMA, FP32 accumulators.
  __device__ __forceinline__ static void mma(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

}  // namespace ftattn::precision
