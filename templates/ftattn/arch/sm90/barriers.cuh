// Barriers of the warp-specialised Hopper skeleton (kernel/fwd_ws_sm90.cuh): mbarriers in shared
// memory for the producer -> consumer hand-off of each stage and back, named barriers that make
// two consumer warpgroups take turns on the tensor cores, and the warpgroup register re-split.
#pragma once

#include "ftattn/common/types.cuh"

namespace ftattn::sm90 {

// An mbarrier whose phase completes after `count` arrivals. Visible to other threads after a
// CTA barrier.
__device__ __forceinline__ void mbarrier_init(u32 bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// One arrival (release: this thread's earlier reads of the stage are done).
__device__ __forceinline__ void mbarrier_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// One arrival once every cp.async this thread issued so far has landed (.noinc: it is one of the
// `count` the phase expects).
__device__ __forceinline__ void cp_async_arrive(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Blocks until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(u32 bar, u32 parity) {
  asm volatile(
      "{\n"
      ".reg .pred ready;\n"
      "retry:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 ready, [%0], %1;\n"
      "@!ready bra retry;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Named CTA barrier `id` (1..15; 0 is __syncthreads) over `threads` threads: wait, or only
// count this warp in.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The calling warpgroup's registers per thread, re-split at run time (multiples of 8, 24-256):
// the producer gives up what the consumers take.
template <int Registers>
__device__ __forceinline__ void shrink_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
}
template <int Registers>
__device__ __forceinline__ void grow_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

}  // namespace ftattn::sm90
