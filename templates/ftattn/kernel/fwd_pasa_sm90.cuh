// PASA forward on Hopper's warpgroup MMAs (sm_90a), unprotected: the PASA algorithm of
// fwd_pasa_sm80.cuh (shift kernel, recovery, f16 softmax; its header comment has the derivation)
// on the loads, pipeline and GEMM II of the 16-bit wgmma skeleton (fwd_sm90.cuh).
//
//   GEMM I   S'' = Q K'^T by m64n{block_n}k16 wgmmas with FP16 accumulators: half the registers
//            of FP32 scores, and register 2 nt + r of a thread is row half r of its n8 tile nt,
//            already packed as GEMM II's A fragment.
//   recovery q . r_j by one m64n8k16 wgmma per k-step with FP32 accumulators (an f16 sum would
//            overflow where PASA's biased inputs need it most) against the shift rows of eight
//            consecutive blocks, loaded below the keys of every eighth block's K stage
//            (FwdWgmmaTraits::recovery_blocks): its tile serves those eight blocks, each taking
//            its column (pasa::block_recovery), where an MMA per block against 8 copies of r_j
//            cost about 8% of the kernel at head dim 128.
//   softmax  pasa::bias and pasa::prob of the sm80 kernel: the max, b = m - rec and
//            P = 2^(S'' - b) on f16x2, l summed pairwise in f16 then FP32.
//   GEMM II  O += P V, m64n{head_dim}k16 with P from registers, FP32 accumulators, as f16's.
// Flash-ABFT, EFTA and the injection builds run the warp-specialised kernel (fwd_ws_sm90.cuh;
// EFTA on two consumer warpgroups; codegen: uses_wgmma).
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm90/pipeline.cuh"
#include "ftattn/arch/sm90/tile_load.cuh"
#include "ftattn/arch/sm90/wgmma.cuh"
#include "ftattn/kernel/fwd_pasa_sm80.cuh"
#include "ftattn/kernel/fwd_sm90.cuh"
#include "ftattn/kernel/fwd_ws_sm90.cuh"

namespace ftattn {

// PasaTraits' parameters, so that one generator serves both PASA skeletons.
template <int HeadDim, int BlockM, int BlockN, int NumWarps, int NumStages, bool Causal,
          bool BlockSparse, class ProtectT = protect::None, bool Inject = false>
struct PasaWgmmaTraits : FwdWgmmaTraits<HeadDim, BlockM, BlockN, NumWarps, NumStages,
                                        precision::F16Pasa, ProtectT, Causal, BlockSparse, Inject> {
  static constexpr int shift_threads = 128;  // the shift kernel's CTA (pasa_shift_sm80)
  // Flash-ABFT and the injection sites ride in the warp-specialised kernel only, EFTA on its two
  // consumer warpgroups up to head dim 128.
  static_assert(
      (!ProtectT::enabled && !Inject) ||
          (NumWarps != 4 && (ProtectT::k_atoms == 0 || (NumWarps == 8 && HeadDim <= 128))),
      "protected PASA runs the warp-specialised kernel (EFTA: two consumers), or the sm80 "
      "one");
  // The recovery tile of blocks 8c ... 8c + 7 is computed on block 8c: every block from the
  // first is visited, in order.
  static_assert(!BlockSparse, "block-sparse PASA runs the sm80 skeleton");
};

template <class T>
__device__ __forceinline__ void attention_fwd_pasa_sm90(const AttentionParams& p,
                                                        const KvTensorMaps& maps = {}) {
  using P = precision::F16Pasa;
  constexpr int kST = T::s_tiles;
  constexpr int kOT = T::o_tiles;
  constexpr int kStages = T::num_stages;
  constexpr int kRowBytes = T::row_bytes;
  constexpr bool kOneGroup = T::num_warps == 4;  // one warpgroup per CTA

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const u32 sQ = (sm80::smem_addr(smem_raw) + 1023u) & ~1023u;
  const u32 sK = sQ + T::q_bytes;
  const u32 sV = sK + kStages * T::k_tile_bytes;

  int m_block, head, batch;
  detail::tile_coords<T>(p, m_block, head, batch);
  const int head_kv = head / p.group_size;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warp_row = warp * 16;                      // this warp's 16 rows of the CTA's tile
  const int group_row = sm90::warpgroup_index() * 64;  // its warpgroup's 64 rows

  const int row0 = m_block * T::block_m;
  const int diag = p.seqlen_k - p.seqlen_q;  // bottom-right causal alignment
  const int n_blocks = detail::key_blocks<T>(p, row0, diag);
  const int n_blocks_all = (p.seqlen_k + T::block_n - 1) / T::block_n;

  // The shifted keys K' (the shift kernel's output) and the shift rows r_j of this KV head.
  const detail::HeadOperands in = detail::head_operands(p, batch, head, head_kv, row0);
  const u16 *q = in.q, *k = in.k, *v = in.v;
  const u16* shift = static_cast<const u16*>(p.k_shift) +
                     (static_cast<i64>(batch) * p.heads_kv + head_kv) * n_blocks_all * T::head_dim;

  // One cp.async group per key block: K' rows, on every eighth block the next eight shift rows
  // below them, then V rows; rows past the sequence are zeros (their scores are masked, their P
  // is 0). Where T::kv_tma: thread 0's TMA copies of the same onto the stage's mbarrier.
  constexpr bool kTma = T::kv_tma;
  auto full = [&](int stage) {
    return detail::stage_barrier<T>(sm80::smem_addr(smem_raw), sQ, stage);
  };
  [[maybe_unused]] const int shift_row0 = (batch * p.heads_kv + head_kv) * n_blocks_all;
  auto load_kv = [&](int stage, int n_block) {
    const int key0 = n_block * T::block_n;
    const u32 dk = sK + stage * T::k_tile_bytes;
    if constexpr (kTma) {
      if (threadIdx.x == 0) {
        const bool shift_rows = n_block % T::recovery_blocks == 0;
        sm90::mbarrier_expect_tx(full(stage), 2 * detail::kv_tma_bytes<T> +
                                                  (shift_rows ? detail::shift_tma_bytes<T> : 0));
        detail::tma_load_rows<T, T::k_rows>(dk, maps.k, key0, head_kv, batch, full(stage));
        if (shift_rows) detail::tma_load_shift_rows<T>(dk, maps, shift_row0 + n_block, full(stage));
        detail::tma_load_rows<T, T::block_n>(sV + stage * T::v_tile_bytes, maps.v, key0, head_kv,
                                             batch, full(stage));
      }
      return;
    }
    sm90::load_rows_swizzled<T::threads, T::block_n, kRowBytes, T::k_rows>(
        dk, k + key0 * p.k_seq_stride, p.k_seq_stride * 2, p.seqlen_k - key0, kRowBytes);
    if (n_block % T::recovery_blocks == 0)
      detail::load_shift_rows<T, T::threads>(dk, shift, n_block, threadIdx.x);
    sm90::load_rows_swizzled<T::threads, T::block_n, kRowBytes>(
        sV + stage * T::v_tile_bytes, v + key0 * p.v_seq_stride, p.v_seq_stride * 2,
        p.seqlen_k - key0, kRowBytes);
    sm80::cp_async_commit();
  };

  if constexpr (kTma) {  // the stage mbarriers, initialised before any thread uses them
    if (threadIdx.x == 0) {
      for (int s = 0; s < kStages; ++s) sm90::mbarrier_init(full(s), 1);
      sm90::fence_barrier_init();
    }
    __syncthreads();
  }
  sm90::load_rows_swizzled<T::threads, T::block_m, kRowBytes>(sQ, q, p.q_seq_stride * 2,
                                                              p.seqlen_q - row0, kRowBytes);
  sm80::cp_async_commit();
  typename sm90::KeyBlockPipelineFor<kTma, kStages, kOneGroup>::type pipeline{{n_blocks}};
  pipeline.start(load_kv);
  if constexpr (kTma) {  // Q for the tensor cores
    sm80::cp_async_wait<0>();
    sm90::fence_async_shared();
    __syncthreads();
  }

  float o[1][kOT][4];
  float row_max[1][2];  // base 2, absolute (the recovered logits)
  float row_sum[1][2];  // this thread's share; the quad is summed at the end
  detail::clear_accumulators(o, row_max, row_sum);
  float rc_table[4] = {0.f, 0.f, 0.f, 0.f};  // q . r_j of the current eight blocks, column j % 8

  auto step = [&](const int it, const int n_block, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const int stage = it % kStages;
    if constexpr (kTma)
      pipeline.begin_step(it, full);
    else
      pipeline.begin_step(it, load_kv);

    // GEMM I in FP16 and, on every eighth block, the recovery in FP32, one commit group. Which
    // MMAs run is fixed at compile time in each branch: a wgmma under a branch can make ptxas
    // serialise them all (C7520).
    const u32 sKs = sK + stage * T::k_tile_bytes;
    u32 s[kST][2];
    auto gemm1 = [&](auto recovery) {
      float rc_tile[4];
      sm90::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < T::head_dim / 16; ++ks) {
        const u64 qd = sm90::k_step_descriptor<kRowBytes>(sQ, T::block_m, group_row, ks);
        sm90::wgmma_f16acc_ss(reinterpret_cast<u32(&)[kST * 2]>(s), qd,
                              sm90::k_step_descriptor<kRowBytes>(sKs, T::k_rows, 0, ks), ks > 0);
        if constexpr (decltype(recovery)::value)
          sm90::wgmma_16bit_ss<false>(
              rc_tile, qd, sm90::k_step_descriptor<kRowBytes>(sKs, T::k_rows, T::shift_row, ks),
              ks > 0);
      }
      sm90::wgmma_commit();
      sm90::wgmma_wait<0>();  // GEMM I, and the previous GEMM II (O is rescaled below)
      if constexpr (decltype(recovery)::value) pasa::keep_recovery_tile(rc_tile, rc_table);
    };
    // The previous GEMM II is waited for before the branch: left in flight through it, ptxas
    // spilled 12-56 bytes at three CTAs per SM, and on the H100 it ran 1-2% slower at 4k keys
    // (pasa_recovery_tile_ab.csv, "nowait").
    sm90::wgmma_wait<0>();
    if (n_block % T::recovery_blocks == 0)
      gemm1(detail::Bool<true>{});
    else
      gemm1(detail::Bool<false>{});
    pipeline.after_gemm1(it, load_kv);
    float rc[4];
    pasa::block_recovery<T::recovery_blocks>(rc_table, n_block, lane, rc);

    // Online softmax with the recovered bias; P replaces S'' and becomes GEMM II's A operand. The
    // lazy rescale as in the warp-specialised kernel: 1.02-1.04x (pasa_one_group_lazy_ab.csv),
    // where the f16 one-warpgroup kernel's gained nothing.
    u32 pa[kST / 2][4];
    pasa::wgmma_softmax<T, kMasked, detail::kLazyRescaleSlack>(p, s, rc, row0 + warp_row,
                                                               n_block * T::block_n, lane, diag,
                                                               row_max[0], row_sum[0], o[0], pa);

    // GEMM II: O += P V, P straight from the FP16 accumulators.
    const u32 sVs = sV + stage * T::v_tile_bytes;
    sm90::wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < kST / 2; ++kc)
      sm90::wgmma_16bit_rs<false>(
          reinterpret_cast<float(&)[kOT * 4]>(o[0]), pa[kc],
          sm90::n_major_k_step_descriptor<T::atom_bytes>(sVs, T::block_n, kc));
    sm90::wgmma_commit();
    if constexpr (!kOneGroup) sm90::wgmma_wait<0>();
  };

  detail::walk_key_blocks<T>(
      p.seqlen_k, row0, diag, n_blocks, [](int b) { return b; }, step);
  sm90::wgmma_wait<0>();
  sm80::cp_async_wait<0>();
  __syncthreads();

  // Epilogue: the max is already the base-2 logit.
  float l[1][2];
#pragma unroll
  for (int r = 0; r < 2; ++r) l[0][r] = quad_sum(row_sum[0][r]);
  detail::store_output<T>(p, o, l, row_max, 1.f, batch, head, row0, warp_row, lane, sQ);
}

}  // namespace ftattn
