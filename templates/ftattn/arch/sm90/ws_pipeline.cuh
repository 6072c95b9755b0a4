// The hand-offs of a warp-specialised Hopper kernel (kernel/fwd_ws_sm90.cuh): a ring of
// `Stages` K buffers and one of V buffers, each buffer with a "full" mbarrier (the producer's
// copies arrive on it as they land) and an "empty" one (every consumer warp arrives once done
// with it), and a Q buffer filled once; and the token two consumer warpgroups pass through named
// barriers to take turns on the tensor cores.
#pragma once

#include "ftattn/arch/sm90/barriers.cuh"
#include "ftattn/common/types.cuh"

namespace ftattn::sm90 {

// setmaxnreg's split of the registers per thread a CTA of a producer and `Consumers` consumer
// warpgroups launches with (168 for two, 128 for three: 64K over its threads, in steps of 8):
// what the producer gives up, the consumers take. At 40 (232 for two consumers) the 16-bit
// producer's copy loops spilled 68 bytes.
template <int Consumers = 2>
inline constexpr int ws_producer_registers = Consumers == 2 ? 56 : 32;
template <int Consumers>
inline constexpr int ws_launch_registers = 65536 / (128 * (Consumers + 1)) / 8 * 8;
template <int Consumers = 2>
inline constexpr int ws_consumer_registers =
    ws_launch_registers<Consumers> +
    (ws_launch_registers<Consumers> - ws_producer_registers<Consumers>) / Consumers / 8 * 8;

// FullArrivals: the arrivals a K or V "full" phase expects, every producer thread's cp.async
// arrival, or 1 where one thread's TMA copies complete it (mbarrier_expect_tx). QBuffers 2
// (persistent tiles): Q buffer b
// takes tiles b, b + 2, ... of the CTA, each with a "full" and an "empty" mbarrier (every
// consumer warp arrives once its staged O is stored).
template <int Stages, int Producers, int ConsumerWarps, int FullArrivals = Producers,
          int QBuffers = 1>
struct WsPipeline {
  static_assert(QBuffers == 1 || QBuffers == 2, "one Q buffer, or two for persistent tiles");
  static constexpr int barrier_bytes = 8 * (1 + 4 * Stages + 3 * (QBuffers - 1));
  // Q full, then per stage K full, K empty, V full, V empty (8 bytes each); with two Q buffers
  // then the second's full and both empties.
  u32 bars;

  __device__ __forceinline__ u32 q_full(int b = 0) const {
    return b == 0 ? bars : bars + 8 * (1 + 4 * Stages);
  }
  __device__ __forceinline__ u32 q_empty(int b) const { return bars + 8 * (2 + 4 * Stages + b); }
  __device__ __forceinline__ u32 k_full(int s) const { return bars + 8 * (1 + 4 * s); }
  __device__ __forceinline__ u32 k_empty(int s) const { return bars + 8 * (2 + 4 * s); }
  __device__ __forceinline__ u32 v_full(int s) const { return bars + 8 * (3 + 4 * s); }
  __device__ __forceinline__ u32 v_empty(int s) const { return bars + 8 * (4 + 4 * s); }
  // Block j lives in buffer j % Stages; its n-th use of the buffer is phase n, parity n % 2.
  __device__ __forceinline__ static u32 parity(int j) { return static_cast<u32>((j / Stages) & 1); }

  // By one thread, before a CTA barrier. `q_loaders`: the producer threads whose cp.async
  // arrivals fill Q in this launch (fewer where persistent tiles are walked).
  __device__ __forceinline__ void init(int q_loaders = Producers) const {
    mbarrier_init(q_full(), q_loaders);
    if constexpr (QBuffers == 2) {
      mbarrier_init(q_full(1), q_loaders);
      mbarrier_init(q_empty(0), ConsumerWarps);
      mbarrier_init(q_empty(1), ConsumerWarps);
    }
    for (int s = 0; s < Stages; ++s) {
      mbarrier_init(k_full(s), FullArrivals);
      mbarrier_init(v_full(s), FullArrivals);
      mbarrier_init(k_empty(s), ConsumerWarps);  // one arrival per consumer warp
      mbarrier_init(v_empty(s), ConsumerWarps);
    }
  }

  // Producer: wait until block j's buffer is free (blocks j - Stages released), issue its copies,
  // then arrive (each of the Producers threads; with TMA, expect the copies' bytes instead).
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

// `Groups` consumer warpgroups take turns in order: warpgroup `group` waits on named barrier
// FirstId + group (its 128 threads and the 128 of the warpgroup before it), and passes the turn
// by arriving on the next one's. Warpgroup 0 takes the first turn (the last warpgroup arrives on
// its barrier at start), the last warpgroup keeps the token after its last turn.
template <int FirstId, int Groups>
struct TurnToken {
  static constexpr int kThreads = 256;
  int group;
  __device__ __forceinline__ void start() const {
    if (group == Groups - 1) named_barrier_arrive(FirstId, kThreads);
  }
  __device__ __forceinline__ void wait() const { named_barrier_sync(FirstId + group, kThreads); }
  __device__ __forceinline__ void pass(bool last) const {
    if constexpr (Groups == 2) {
      if (group == 0 || !last) named_barrier_arrive(FirstId + 1 - group, kThreads);
    } else if (group != Groups - 1 || !last) {
      named_barrier_arrive(FirstId + (group == Groups - 1 ? 0 : group + 1), kThreads);
    }
  }
};

}  // namespace ftattn::sm90
