// Asynchronous global -> shared copies (cp.async, sm_80+), grouped so the main loop can wait
// for exactly the tile it needs next while later tiles are still in flight.
#pragma once

#include "ftattn/common/types.cuh"

namespace ftattn::sm80 {

__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes, or writes 16 zero bytes when !valid (rows past the sequence end).
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `Pending` of the most recently committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

}  // namespace ftattn::sm80
