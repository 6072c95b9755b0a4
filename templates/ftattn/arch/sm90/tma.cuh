// Tensor-memory-accelerator copies (sm_90): one thread moves a whole tile from global to shared
// memory, described by a tensor map (params.cuh's TensorMap), and its bytes complete a
// transaction count on an mbarrier, which the readers wait on. Where every thread issued
// cp.async chunks with their own address arithmetic, the copies now cost the CTA a few
// instructions per tile.
#pragma once

#include "ftattn/common/types.cuh"
#include "ftattn/params.cuh"

namespace ftattn::sm90 {

// Makes mbarrier_init's initialisation visible to the TMA unit (the async proxy); the CTA
// barrier that follows makes it visible to the other threads.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also expects `bytes` more bytes of TMA copies before the phase completes.
__device__ __forceinline__ void mbarrier_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Ends an mbarrier's life, so its bytes may be reused as plain shared memory.
__device__ __forceinline__ void mbarrier_inval(u32 bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// The box of `map` at element coordinates (x, y[, z[, w]]) into shared memory at dst, completing
// its bytes on `bar`. `map` must live in parameter (__grid_constant__), constant or global
// memory.
__device__ __forceinline__ void tma_load(u32 dst, const TensorMap& map, int x, int y, u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(&map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_load(u32 dst, const TensorMap& map, int x, int y, int z,
                                         u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(&map)), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void tma_load(u32 dst, const TensorMap& map, int x, int y, int z, int w,
                                         u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(&map)), "r"(x), "r"(y), "r"(z), "r"(w), "r"(bar)
      : "memory");
}

// Fetches a tensor map into the TMA unit's cache ahead of its first copy.
__device__ __forceinline__ void prefetch_tensor_map(const TensorMap& map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(&map)) : "memory");
}

}  // namespace ftattn::sm90
