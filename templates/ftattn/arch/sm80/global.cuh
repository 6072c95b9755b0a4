// Plain global-memory stores.
#pragma once

#include "ftattn/common/types.cuh"

namespace ftattn::sm80 {

// 16 bytes to a 16-byte aligned address in one store. Assigning a uint4_ through a pointer
// became four 32-bit st.global (the struct is copied member by member), four times the store
// instructions of every epilogue.
__device__ __forceinline__ void st_global_u128(void* ptr, const uint4_& v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(ptr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w));
}

}  // namespace ftattn::sm80
