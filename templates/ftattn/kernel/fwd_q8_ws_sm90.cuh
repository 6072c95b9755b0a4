// Warp-specialised forward for fp8_e4m3 and int8 on Hopper (sm_90a), 128-row tiles: the tiles,
// MMAs, softmax and epilogue of fwd_q8_sm90.cuh (its q8:: pieces), scheduled the way
// fwd_ws_sm90.cuh schedules the 16-bit ones (FlashAttention-3's ping-pong).
//
//   producer   warpgroup 2 (threads 256-383, 56 registers each) copies Q by cp.async once when
//              it arrives quantised; then its first thread alone copies every key block's K tile
//              with its scales and its V^T tile by TMA into their own rings of num_stages
//              buffers (sm90::WsPipeline), and the other 127 are done.
//   consumers  warpgroups 0 and 1 (64 query rows each, 224 registers) take turns on the tensor
//              cores (sm90::TurnToken): each turn issues the previous block's GEMM II and this
//              block's GEMM I back to back, while the other warpgroup runs its softmax. When Q
//              arrives in 16 bits each warpgroup quantises its own 64 rows into the Q tile
//              (quantise_q_rows) and syncs only itself before its first GEMM I.
//
// A K buffer is released once the softmax has read the block's K scales (in its stage's tail),
// not when GEMM I is done. GEMM II of fp8 computes the block's P V from zero, which the
// warpgroup adds to its FP32 O after the turn, rescaling O by the factor its softmax found
// (q8::fold_output); int8's accumulates onto its INT32 O, rescaled only when a row's max
// outgrows its reference (q8::lazy_softmax).
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm90/barriers.cuh"
#include "ftattn/arch/sm90/tile_load.cuh"
#include "ftattn/arch/sm90/tma.cuh"
#include "ftattn/arch/sm90/wgmma.cuh"
#include "ftattn/arch/sm90/ws_pipeline.cuh"
#include "ftattn/kernel/fwd_q8_sm90.cuh"

namespace ftattn {

template <class T>
__device__ __forceinline__ void attention_fwd_q8_ws_sm90(const AttentionParams& p,
                                                         const Q8TensorMaps& maps) {
  static_assert(T::warp_specialized && T::num_warps == 8, "two consumer warpgroups");
  static_assert(!T::Protect::enabled && !T::inject, "unprotected (codegen's uses_wgmma)");
  using P = typename T::Precision;
  using Acc = typename P::Acc;
  constexpr bool kInt = !P::float_accumulators;  // int8: INT32 scores and O (q8::lazy_softmax)
  constexpr int kST = T::s_tiles;
  constexpr int kOT = T::o_tiles;
  constexpr int kStages = T::num_stages;
  constexpr int kConsumers = T::threads;  // 256
  constexpr int kProducers = 128;
  constexpr int kConsumersDone = 3;  // named barriers 1 and 2 pass the turn
  constexpr int kQuantised = 4;      // + group: a warpgroup's own Q rows are quantised

  // The set-up is fwd_ws_sm90.cuh's, written out again: one helper for both moved the 16-bit
  // efta_correct kernel's register allocation into a 4-byte spill.
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const u32 sQ = (sm80::smem_addr(smem_raw) + 1023u) & ~1023u;
  const u32 sStages = sQ + T::q_bytes;  // each stage a key block's V^T, tail and K rows
  auto stage_at = [&](int stage) { return sStages + stage * T::stage_bytes; };
  using Pipeline = sm90::WsPipeline<kStages, kProducers, T::num_warps, /*FullArrivals=*/1>;
  static_assert(Pipeline::barrier_bytes <= T::barrier_bytes, "the mbarriers follow the tiles");
  const Pipeline pipe{sQ + T::tiles_bytes};
  if (threadIdx.x == 0) pipe.init();
  __syncthreads();

  int m_block, head, batch;
  detail::tile_coords<T>(p, m_block, head, batch);
  const int row0 = m_block * T::block_m;
  const int diag = p.seqlen_k - p.seqlen_q;  // bottom-right causal alignment
  const int n_blocks = detail::key_blocks<T>(p, row0, diag);

  if (threadIdx.x >= kConsumers) {
    // Producer: only copies, so it hands its registers to the consumers.
    sm90::shrink_registers<sm90::ws_producer_registers<2>>();
    const q8::Operands in = q8::operands<T>(p, batch, head, head / p.group_size, row0);
    const unsigned t = threadIdx.x - kConsumers;
    if (p.q_16bit == 0) {  // Q arrives quantised: copy it (else the consumers quantise theirs)
      sm90::load_rows_swizzled<kProducers, T::block_m, T::head_dim>(
          sQ, in.q, p.q_seq_stride, p.seqlen_q - row0, T::head_dim, t);
      sm90::cp_async_arrive(pipe.q_full());
    }
    if (t == 0) {
      const int kv = batch * p.heads_kv + head / p.group_size;
      for (int j = 0; j < n_blocks; ++j) {
        const int s = j % kStages;
        const int key0 = j * T::block_n;
        pipe.acquire_k(j);
        sm90::mbarrier_expect_tx(pipe.k_full(s), T::k_tma_bytes);
        q8::load_k_block<T>(stage_at(s), maps, key0, kv, pipe.k_full(s));
        pipe.acquire_v(j);
        sm90::mbarrier_expect_tx(pipe.v_full(s), T::v_tma_bytes);
        q8::load_vt_block<T>(stage_at(s), maps, key0, kv, pipe.v_full(s));
      }
    }
    sm80::cp_async_wait<0>();
    return;
  }

  sm90::grow_registers<sm90::ws_consumer_registers<2>>();
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warp_row = warp * 16;
  const int group = sm90::warpgroup_index();
  const int group_row = group * 64;

  float q_scale[2];  // per row of this lane's accumulators: s_Q * softmax scale * log2(e)
  if (p.q_16bit == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
      q_scale[r] = q8::row_scale(p, batch, head, row0 + warp_row + lane / 4 + r * 8);
    // Q has landed: before GEMM I reads it, and before the epilogue stages O over it.
    sm90::mbarrier_wait(pipe.q_full(), 0);
    sm90::fence_async_shared();  // Q came by cp.async: seen by the tensor cores
  } else {
    // This warpgroup's 64 rows, by st.shared: fenced for the tensor cores, then only this
    // warpgroup waits for its four warps.
    quantise_q_rows<T, quant::F16In>(p, sQ, batch, head, row0, warp_row, lane, q_scale);
    sm90::fence_async_shared();
    sm90::named_barrier_sync(kQuantised + group, 128);
  }

  float o[1][kOT][4];                          // fp8's O; int8's at the end
  float row_max[1][2];                         // base-2 logits (int8: lazy_softmax's reference)
  float row_sum[1][2];                         // this thread's share, in units of 2^p_log2_range
  [[maybe_unused]] int oi[kInt ? kOT : 1][4];  // int8's O
  detail::clear_accumulators(o, row_max, row_sum);
  q8::clear_int_output<T>(oi);
  // fp8: the last block's P V and the factor O takes before it is added (q8::fold_output).
  float pv[kInt ? 1 : kOT / T::pv_pieces][4];
  q8::Fp8RowSums sums;  // unprotected: Flash-ABFT's sums only in the one-warpgroup kernel
  float alpha[2];

  if (n_blocks > 0) {
    const sm90::TurnToken<1, 2> token{group};
    token.start();  // warpgroup 0 goes first

    u32 pa[kST / 4][4];  // the previous block's P, GEMM II's A operand
    Acc s[kST][4];       // this block's S
    // One turn on the tensor cores: GEMM II of block j - 1, GEMM I of block j into s; returns
    // once both are done and V's buffer released. Which MMAs run is fixed at compile time: a
    // wgmma under a branch makes ptxas serialise them all.
    auto turn = [&](int j, auto pv_flag, auto qk_flag) {
      constexpr bool kPV = decltype(pv_flag)::value;
      constexpr bool kQK = decltype(qk_flag)::value;
      if (kQK) pipe.wait_k(j);
      if (kPV) pipe.wait_v(j - 1);
      // K and V come by TMA (no fence; Q was fenced once it landed).
      if constexpr (kInt) {  // INT32 scores start from the bias
        if constexpr (kQK) q8::set_bias<T>(s);
      }
      token.wait();
      sm90::wgmma_fence();
      if constexpr (kPV) q8::gemm2_onto_output<T>(pv, oi, pa, stage_at((j - 1) % kStages));
      if constexpr (kQK) q8::gemm1<T>(s, sQ, stage_at(j % kStages) + T::k_offset, group_row);
      sm90::wgmma_commit();
      token.pass(/*last=*/!kQK);  // the last turn has no GEMM I
      sm90::wgmma_wait<0>();
      // fp8: block j - 1's P V into O (the further pieces still read V's buffer).
      if constexpr (kPV) q8::fold_output<T>(o[0], sums, pv, alpha, pa, stage_at((j - 1) % kStages));
      if (kPV && lane == 0) pipe.release_v(j - 1);
    };

    auto step = [&](const int it, const int j, auto masked) {
      if (j == 0)
        turn(j, detail::Bool<false>{}, detail::Bool<true>{});
      else
        turn(j, detail::Bool<true>{}, detail::Bool<true>{});
      float x[kST][4];
      float kg[T::block_n / 64];
      q8::block_scores<T, decltype(masked)::value>(p, s, stage_at(j % kStages), row0 + warp_row,
                                                   j * T::block_n, lane, lane % 4, diag, x, kg);
      __syncwarp();  // every lane has read its K scales: the K buffer may be refilled
      if (lane == 0) pipe.release_k(j);
      int shift[2];  // the fold's, unused here
      q8::block_softmax<T>(x, kg, q_scale, row_max[0], row_sum[0], alpha, oi, pa, it, shift);
    };
    detail::walk_key_blocks<T>(
        p.seqlen_k, row0, diag, n_blocks, [](int b) { return b; }, step);
    turn(n_blocks, detail::Bool<true>{}, detail::Bool<false>{});  // the last block's GEMM II
  }

  // Both warpgroups' MMAs are done before the epilogue stages O over the Q tile (warpgroup 1's
  // rows reach past it into the first K buffer).
  sm90::named_barrier_sync(kConsumersDone, kConsumers);
  q8::finish_output<T>(oi, o[0]);
  // The KV head only now: kept across the loop, int8's registers spilled it.
  q8::store_output<T>(p, o, row_sum, row_max, sQ, row0, warp_row, lane, batch, head,
                      head / p.group_size);
}

}  // namespace ftattn
