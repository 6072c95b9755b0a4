// Device helpers shared by the decoupled baseline's kernels: the fault log, bit flips of the
// injection plan, 16-bit unpacking, and arithmetic the compiler may not merge (for DMR).
#pragma once

#include "ftattn/common/faults.cuh"
#include "ftattn/common/types.cuh"
#include "ftattn/kernel/decoupled_params.cuh"

namespace ftattn::decoupled {

// Fault log, plan and unpacking helpers live in common/faults.cuh, shared with the fused kernel.
using ftattn::finite;
using ftattn::flip_bit;
using ftattn::linear_cta;
using ftattn::plan_hits;
using ftattn::record_fault;
using ftattn::unpack2;

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
