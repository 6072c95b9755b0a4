// Device helpers shared by the decoupled baseline's kernels: the fault log, bit flips of the
// injection plan, 16-bit unpacking, and arithmetic the compiler may not merge (for DMR).
#pragma once

#include "ftattn/common/types.cuh"
#include "ftattn/kernel/decoupled_params.cuh"

namespace ftattn::decoupled {

__device__ __forceinline__ int linear_cta() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}

// The plan targets this thread (of this CTA) for one of `sites`.
__device__ __forceinline__ bool plan_hits(const FaultPlanParams& f, int site_a, int site_b = -1) {
  return (f.site == site_a || f.site == site_b) && f.cta == linear_cta() &&
         f.thread == static_cast<int>(threadIdx.x);
}

__device__ __forceinline__ float flip_bit(float x, int bit) {
  return __uint_as_float(__float_as_uint(x) ^ (1u << (bit & 31)));
}

__device__ __forceinline__ bool finite(float x) { return fabsf(x) <= 3.402823466e38f; }

// Counts a detection (and a correction) and keeps the first `capacity` records.
__device__ __forceinline__ void record_fault(FaultLog* log, int batch, int head, int row, int col,
                                             int stage, bool corrected, float magnitude,
                                             float threshold) {
  if (log == nullptr) return;
  atomicAdd(&log->detected, 1u);
  if (corrected) atomicAdd(&log->corrected, 1u);
  const unsigned slot = atomicAdd(&log->recorded, 1u);
  if (slot < log->capacity) {
    FaultRecord& r = reinterpret_cast<FaultRecord*>(log + 1)[slot];
    r.batch = batch;
    r.head = head;
    r.row = row;
    r.col = col;
    r.stage = stage;
    r.corrected = corrected ? 1 : 0;
    r.magnitude = magnitude;
    r.threshold = threshold;
  } else {
    atomicSub(&log->recorded, 1u);  // the count settles at capacity
  }
}

// One register of two 16-bit values -> two floats (`lo` at the lower address).
template <bool Bf16>
__device__ __forceinline__ void unpack2(u32 x, float& lo, float& hi) {
  if constexpr (Bf16) {
    lo = __uint_as_float(x << 16);
    hi = __uint_as_float(x & 0xffff0000u);
  } else {
    asm("{\n .reg .f16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;\n}"
        : "=f"(lo), "=f"(hi)
        : "r"(x));
  }
}

// Arithmetic behind `asm volatile`: two copies of a computation stay two copies (the compiler
// would otherwise merge them and DMR would compare a value with itself).
__device__ __forceinline__ float v_add(float a, float b) {
  float y;
  asm volatile("add.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
__device__ __forceinline__ float v_sub(float a, float b) {
  float y;
  asm volatile("sub.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
__device__ __forceinline__ float v_mul(float a, float b) {
  float y;
  asm volatile("mul.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
__device__ __forceinline__ float v_max(float a, float b) {
  float y;
  asm volatile("max.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
__device__ __forceinline__ float v_ex2(float x) {
  float y;
  asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float v_rcp(float x) {
  float y;
  asm volatile("rcp.rn.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float v_shfl_xor(float x, int lane_mask) {
  float y;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
               : "=f"(y)
               : "f"(x), "r"(lane_mask));
  return y;
}

__device__ __forceinline__ bool same_bits(float a, float b) {
  return __float_as_uint(a) == __float_as_uint(b);
}

}  // namespace ftattn::decoupled
