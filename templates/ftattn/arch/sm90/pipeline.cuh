// The key-block pipelines of the one-warpgroup Hopper skeletons (kernel/fwd_sm90.cuh,
// kernel/fwd_q8_sm90.cuh): one cp.async group per key block into num_stages buffers, handed to
// the tensor cores by a fence.proxy.async, or TMA copies completing on an mbarrier per buffer;
// and where the next block's copies go out.
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm90/barriers.cuh"
#include "ftattn/arch/sm90/wgmma.cuh"

namespace ftattn::sm90 {

// EmptyGroups: commit an empty cp.async group for each block past the last (TMA copies have no
// groups to keep uniform).
template <int Stages, bool OneWarpgroup, bool EmptyGroups = true>
struct KeyBlockPipeline {
  int n_blocks;
  int ahead = 0;  // the next block to prefetch

  // Blocks 0 .. Stages - 2, each load_kv(stage, block) one group; empty groups past the last
  // block keep the wait counts uniform.
  template <class LoadKV>
  __device__ __forceinline__ void start(LoadKV&& load_kv) {
#pragma unroll
    for (int s = 0; s < Stages - 1; ++s) {
      if (ahead < n_blocks)
        load_kv(s, ahead++);
      else if constexpr (EmptyGroups)
        sm80::cp_async_commit();
    }
  }

  // The top of step `it`: its block's group has landed (later ones may still fly) and is fenced
  // for the tensor cores; past the barrier every warpgroup has waited for its previous GEMM II
  // (with several), so the block Stages - 1 ahead may go into that stage.
  template <class LoadKV>
  __device__ __forceinline__ void begin_step(int it, LoadKV&& load_kv) {
    sm80::cp_async_wait<Stages - 2>();
    fence_async_shared();
    __syncthreads();
    if constexpr (!OneWarpgroup) prefetch(it, load_kv);
  }

  // After GEMM I's wait: with one warpgroup the previous GEMM II ran on through the barrier and
  // GEMM I's issue and is done now, so the copies go out here.
  template <class LoadKV>
  __device__ __forceinline__ void after_gemm1(int it, LoadKV&& load_kv) {
    if constexpr (OneWarpgroup) prefetch(it, load_kv);
  }

 private:
  template <class LoadKV>
  __device__ __forceinline__ void prefetch(int it, LoadKV&& load_kv) {
    if (ahead < n_blocks)
      load_kv((it + Stages - 1) % Stages, ahead++);
    else if constexpr (EmptyGroups)
      sm80::cp_async_commit();
  }
};

// The same pipeline with TMA copies (one warpgroup per CTA): block b goes into stage b %
// Stages, and load_kv(stage, block) has one thread issue its copies onto that stage's mbarrier
// (`bar(stage)`, expecting their bytes), so a step waits on the mbarrier's phase instead of a
// cp.async group (start and after_gemm1 as above, without empty groups). The CTA barrier stays:
// past it every warp has read the previous block's K scales and waited for its GEMM II, so that
// stage may be refilled after GEMM I.
template <int Stages>
struct TmaKeyBlockPipeline
    : KeyBlockPipeline<Stages, /*OneWarpgroup=*/true, /*EmptyGroups=*/false> {
  template <class Bar>
  __device__ __forceinline__ void begin_step(int it, Bar&& bar) {
    mbarrier_wait(bar(it % Stages), static_cast<u32>((it / Stages) & 1));
    __syncthreads();
  }
};

// The one-warpgroup 16-bit skeleton's pipeline: TMA copies where it takes them (Tma), else
// cp.async groups.
template <bool Tma, int Stages, bool OneWarpgroup>
struct KeyBlockPipelineFor {
  using type = KeyBlockPipeline<Stages, OneWarpgroup>;
};
template <int Stages, bool OneWarpgroup>
struct KeyBlockPipelineFor<true, Stages, OneWarpgroup> {
  using type = TmaKeyBlockPipeline<Stages>;
};

}  // namespace ftattn::sm90
