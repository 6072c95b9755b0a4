// Device helpers every protected kernel shares: the fault log, the injection plan's bit flips,
// and 16-bit unpacking for checks that need the rounded operands.
#pragma once

#include "ftattn/common/types.cuh"
#include "ftattn/params.cuh"

namespace ftattn {

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
// INT32 accumulators and packed 8-bit operands (the 8-bit skeleton).
__device__ __forceinline__ int flip_bit(int x, int bit) {
  return static_cast<int>(static_cast<u32>(x) ^ (1u << (bit & 31)));
}
__device__ __forceinline__ u32 flip_bit(u32 x, int bit) { return x ^ (1u << (bit & 31)); }

// Injection builds: flips the plan's bit of value (element % n) of `values` when the plan targets
// this thread, `site` and key-block iteration `it`.
template <class V>
__device__ __forceinline__ void inject_values(const FaultPlanParams& f, int site, int it, V* values,
                                              int n) {
  if (plan_hits(f, site) && f.iteration == it) {
    const int e = f.element % n;
    for (int i = 0; i < n; ++i)
      if (i == e) values[i] = flip_bit(values[i], f.bit);
  }
}

// The same for a single value, number `index` of the site's n values of this thread.
template <class V>
__device__ __forceinline__ void inject_value_at(const FaultPlanParams& f, int site, int it,
                                                int index, int n, V& value) {
  if (plan_hits(f, site) && f.iteration == it && f.element % n == index)
    value = flip_bit(value, f.bit);
}

__device__ __forceinline__ bool finite(float x) { return fabsf(x) <= 3.402823466e38f; }

// Counts a detection (and a correction) and keeps the first `capacity` records.
__device__ __forceinline__ void record_fault(FaultLog* log, int batch, int head, int row, int col,
                                             int stage, bool corrected, float magnitude,
                                             float threshold) {
  if (log == nullptr) return;
  atomicAdd(&log->detected, 1ull);
  if (corrected) atomicAdd(&log->corrected, 1ull);
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

}  // namespace ftattn
