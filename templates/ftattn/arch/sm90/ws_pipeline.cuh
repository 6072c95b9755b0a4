// The hand-offs of a warp-specialised Hopper kernel (kernel/fwd_ws_sm90.cuh): a ring of
// `Stages` K buffers and one of V buffers, each buffer with a "full" mbarrier (the producer's
// copies arrive on it as they land) and an "empty" one (every consumer warp arrives once done
// with it), and a Q buffer filled once; and the token two consumer warpgroups pass through named
// barriers to take turns on the tensor cores.
#pragma once

#include "ftattn/arch/sm90/barriers.cuh"
#include "ftattn/common/types.cuh"

namespace ftattn::sm90 {

// setmaxnreg's split of the 168 registers per thread a 384-thread CTA (a producer and two
// consumer warpgroups) launches with: what the producer gives up, the consumers take. At 40 (232
// for the consumers) the 16-bit producer's copy loops spilled 68 bytes.
inline constexpr int ws_producer_registers = 56;
inline constexpr int ws_consumer_registers = 168 + (168 - ws_producer_registers) / 2;

template <int Stages, int Producers, int ConsumerWarps>
struct WsPipeline {
  static constexpr int barrier_bytes = 8 * (1 + 4 * Stages);
  u32 bars;  // Q full, then per stage K full, K empty, V full, V empty (8 bytes each)

  __device__ __forceinline__ u32 q_full() const { return bars; }
  __device__ __forceinline__ u32 k_full(int s) const { return bars + 8 * (1 + 4 * s); }
  __device__ __forceinline__ u32 k_empty(int s) const { return bars + 8 * (2 + 4 * s); }
  __device__ __forceinline__ u32 v_full(int s) const { return bars + 8 * (3 + 4 * s); }
  __device__ __forceinline__ u32 v_empty(int s) const { return bars + 8 * (4 + 4 * s); }
  // Block j lives in buffer j % Stages; its n-th use of the buffer is phase n, parity n % 2.
  __device__ __forceinline__ static u32 parity(int j) { return static_cast<u32>((j / Stages) & 1); }

  // By one thread, before a CTA barrier.
  __device__ __forceinline__ void init() const {
    mbarrier_init(q_full(), Producers);
    for (int s = 0; s < Stages; ++s) {
      mbarrier_init(k_full(s), Producers);
      mbarrier_init(v_full(s), Producers);
      mbarrier_init(k_empty(s), ConsumerWarps);  // one arrival per consumer warp
      mbarrier_init(v_empty(s), ConsumerWarps);
    }
  }

  // Producer: wait until block j's buffer is free (blocks j - Stages released), issue its copies,
  // then arrive (each of the Producers threads).
  __device__ __forceinline__ void acquire_k(int j) const {
    if (j >= Stages) mbarrier_wait(k_empty(j % Stages), parity(j - Stages));
  }
  __device__ __forceinline__ void acquire_v(int j) const {
    if (j >= Stages) mbarrier_wait(v_empty(j % Stages), parity(j - Stages));
  }
  __device__ __forceinline__ void commit_k(int j) const { cp_async_arrive(k_full(j % Stages)); }
  __device__ __forceinline__ void commit_v(int j) const { cp_async_arrive(v_full(j % Stages)); }

  // Consumers: wait for block j's copies; release the buffer once the MMAs reading it are done
  // (lane 0 of each warp).
  __device__ __forceinline__ void wait_k(int j) const {
    mbarrier_wait(k_full(j % Stages), parity(j));
  }
  __device__ __forceinline__ void wait_v(int j) const {
    mbarrier_wait(v_full(j % Stages), parity(j));
  }
  __device__ __forceinline__ void release_k(int j) const { mbarrier_arrive(k_empty(j % Stages)); }
  __device__ __forceinline__ void release_v(int j) const { mbarrier_arrive(v_empty(j % Stages)); }
};

// Two consumer warpgroups of `Threads` threads in all take turns: warpgroup `group` waits on
// named barrier FirstId + group, and passes the turn by arriving on the other one. Warpgroup 0
// takes the first turn (start), warpgroup 1 keeps the token after its last.
template <int FirstId, int Threads>
struct TurnToken {
  int group;
  __device__ __forceinline__ void start() const {
    if (group == 1) named_barrier_arrive(FirstId, Threads);
  }
  __device__ __forceinline__ void wait() const { named_barrier_sync(FirstId + group, Threads); }
  __device__ __forceinline__ void pass(bool last) const {
    if (group == 0 || !last) named_barrier_arrive(FirstId + 1 - group, Threads);
  }
};

}  // namespace ftattn::sm90
