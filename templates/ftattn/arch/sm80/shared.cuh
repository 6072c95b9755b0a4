// Plain shared-memory stores and loads by 32-bit shared address.
#pragma once

#include "ftattn/common/types.cuh"

namespace ftattn::sm80 {

__device__ __forceinline__ void st_shared_u32(u32 addr, u32 v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v));
}

__device__ __forceinline__ u32 ld_shared_u32(u32 addr) {
  u32 v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

// Two consecutive 32-bit words (8-byte aligned).
__device__ __forceinline__ void ld_shared_u64(u32 addr, u32 (&v)[2]) {
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(v[0]), "=r"(v[1]) : "r"(addr));
}

__device__ __forceinline__ void st_shared_u128(u32 addr, uint4_ v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w));
}

__device__ __forceinline__ uint4_ ld_shared_u128(u32 addr) {
  uint4_ v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}

}  // namespace ftattn::sm80
