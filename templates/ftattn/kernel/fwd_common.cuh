// Pieces every forward skeleton shares (16-bit, PASA, 8-bit).
#pragma once

#include "ftattn/common/math.cuh"
#include "ftattn/common/types.cuh"
#include "ftattn/params.cuh"

namespace ftattn {

// The knobs every forward skeleton's traits start from: the config's tile, stages, mask, element
// type and protection policy, and whether fault-injection points are compiled in (the plan comes
// at launch); with the per-warp tile counts they imply (n8 tiles of S and O per 16-row tile).
template <int HeadDim, int BlockM, int BlockN, int NumWarps, int NumStages, class PrecisionT,
          class ProtectT, bool Causal, bool BlockSparse, bool Inject>
struct TileKnobs {
  static constexpr int head_dim = HeadDim;
  static constexpr int block_m = BlockM;
  static constexpr int block_n = BlockN;
  static constexpr int num_warps = NumWarps;
  static constexpr int num_stages = NumStages;
  static constexpr bool causal = Causal;
  static constexpr bool block_sparse = BlockSparse;  // skip key blocks the launch's mask drops
  static constexpr bool inject = Inject;
  using Precision = PrecisionT;
  using Protect = ProtectT;

  static constexpr int threads = NumWarps * 32;
  static constexpr int m_tiles = BlockM / (16 * NumWarps);  // 16-row MMA tiles per warp
  static constexpr int s_tiles = BlockN / 8;
  static constexpr int o_tiles = HeadDim / 8;
};

}  // namespace ftattn

namespace ftattn::detail {

// This CTA's (query block, head, batch): from the grid (causal grids run longest-first: the last
// query blocks see the most keys), or, for a recompute launch, from its list of tiles. Only
// protected kernels are relaunched; the others keep the grid's indices (registers they can
// rematerialise).
template <class T>
__device__ __forceinline__ void tile_coords(const AttentionParams& p, int& m_block, int& head,
                                            int& batch) {
  m_block = T::causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  head = blockIdx.y;
  batch = blockIdx.z;
  if (T::Protect::enabled && p.tile_count > 0) {
    const int* tile = p.tile_list + 3 * blockIdx.x;
    m_block = tile[0];
    head = tile[1];
    batch = tile[2];
  }
}

// The key blocks the CTA whose first query row is row0 visits: all of them, or for causal masks
// (bottom-right aligned by diag = seqlen_k - seqlen_q: row i sees keys j <= i + diag) those up to
// the last key any of its rows may see (none when even its last row sees no key).
template <class T>
__device__ __forceinline__ int key_blocks(const AttentionParams& p, int row0, int diag) {
  int n_blocks = (p.seqlen_k + T::block_n - 1) / T::block_n;
  if (T::causal) {
    const int last_key = row0 + T::block_m - 1 + diag;
    n_blocks = last_key < 0 ? 0 : min(n_blocks, last_key / T::block_n + 1);
  }
  return n_blocks;
}

// The mbarrier of stage `stage` of a one-warpgroup Hopper kernel that copies by TMA (the 16- and
// 8-bit ones). With up to two stages (T::stage_barriers_at_end) they take the allocation's last
// 16 bytes, which the tiles never reach: aligning a 16-byte aligned base up to 1024 bytes moves
// it by at most 1008 of the 1024 bytes of slack. With more, they follow the tiles (T::tiles_bytes,
// whose T::barrier_bytes hold them).
template <class T>
__device__ __forceinline__ u32 stage_barrier(u32 smem_base, u32 sQ, int stage) {
  if constexpr (T::stage_barriers_at_end)
    return smem_base + T::smem_bytes - 16 + 8 * stage;
  else
    return sQ + T::tiles_bytes + 8 * stage;
}

// This CTA's 16-bit operands: Q from its first row on, and its KV head's K and V.
struct HeadOperands {
  const u16* q;
  const u16* k;
  const u16* v;
};
__device__ __forceinline__ HeadOperands head_operands(const AttentionParams& p, int batch, int head,
                                                      int head_kv, int row0) {
  return {static_cast<const u16*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride +
              row0 * p.q_seq_stride,
          static_cast<const u16*>(p.k) + batch * p.k_batch_stride + head_kv * p.k_head_stride,
          static_cast<const u16*>(p.v) + batch * p.v_batch_stride + head_kv * p.v_head_stride};
}

// A warp's 16 rows of O (and any checksum tiles beside it, in the same registers) times the
// softmax's factors of row halves 0 and 1. kLazy (FlashAttention-4's lazy rescale): skipped when
// no row of the warp moved its max, each factor then exactly 1 (one vote).
template <bool kLazy, int kNT>
__device__ __forceinline__ void rescale_output(float (&o)[kNT][4], const float (&rescale)[2]) {
  if (!kLazy || __any_sync(0xffffffffu, rescale[0] != 1.f || rescale[1] != 1.f))
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[nt][i] *= rescale[i / 2];
}

// O = 0, running max = -inf, row sums = 0.
template <int kMT, int kOT>
__device__ __forceinline__ void clear_accumulators(float (&o)[kMT][kOT][4],
                                                   float (&row_max)[kMT][2],
                                                   float (&row_sum)[kMT][2]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[mt][r] = neg_inf();
      row_sum[mt][r] = 0.f;
    }
#pragma unroll
    for (int nt = 0; nt < kOT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mt][nt][i] = 0.f;
  }
}

// The elements of a key block's score tiles (m16n8 accumulator layout) that a mask removes: keys
// at or past seqlen_k and, for causal, past the row's diagonal (bottom-right aligned by `diag`).
// Calls masked(mt, nt, i) for each.
template <int kMT, int kST, bool Causal, class Masked>
__device__ __forceinline__ void for_each_masked(int first_row, int key0, int lane, int seqlen_k,
                                                int diag, Masked&& masked) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kST; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = first_row + mt * 16 + lane / 4 + (i / 2) * 8;
        const int key = key0 + nt * 8 + (lane % 4) * 2 + (i % 2);
        if (key >= seqlen_k || (Causal && key > row + diag)) masked(mt, nt, i);
      }
}

// A compile-time flag for a step or turn lambda (masked or not, which MMAs it issues).
template <bool B>
struct Bool {
  static constexpr bool value = B;
};

// A hook that does nothing: the default of a kernel part's optional callback.
struct Nothing {
  template <class... Args>
  __device__ __forceinline__ void operator()(Args&&...) const {}
};
// Whether an optional argument was left out (its type Nothing).
template <class X>
inline constexpr bool is_nothing = false;
template <>
inline constexpr bool is_nothing<Nothing> = true;

// The main loop's walk over key blocks: blocks that need no mask come first (keys below every
// row's diagonal and inside the sequence); only the last few, at the diagonal or the sequence
// end, pay for masking. Block-sparse masks visit only active blocks (`next_active(b)`: the first
// active block at or after b) and number the iterations they run. `step(iteration, block,
// Bool<masked>)` runs one block.
template <class T, class NextActive, class Step>
__device__ __forceinline__ void walk_key_blocks(int seqlen_k, int row0, int diag, int n_blocks,
                                                NextActive&& next_active, Step&& step) {
  int n_unmasked = seqlen_k / T::block_n;
  if (T::causal) n_unmasked = min(n_unmasked, max(0, (row0 + diag + 1) / T::block_n));
  n_unmasked = min(n_unmasked, n_blocks);
  if constexpr (!T::block_sparse) {
    for (int n_block = 0; n_block < n_unmasked; ++n_block) step(n_block, n_block, Bool<false>{});
    for (int n_block = n_unmasked; n_block < n_blocks; ++n_block)
      step(n_block, n_block, Bool<true>{});
  } else {
    int it = 0;
    for (int n_block = next_active(0); n_block < n_blocks; n_block = next_active(n_block + 1)) {
      if (n_block < n_unmasked)
        step(it++, n_block, Bool<false>{});
      else
        step(it++, n_block, Bool<true>{});
    }
  }
}

}  // namespace ftattn::detail
