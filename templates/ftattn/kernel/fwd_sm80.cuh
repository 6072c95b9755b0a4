// FlashAttention-2 forward skeleton for sm_80 and later (runs on Hopper too).
//
// One CTA owns block_m query rows of one (batch, head); each warp owns 16 * m_tiles of those
// rows. The CTA walks the key blocks: S = Q K^T with m16n8k16 tensor-core MMAs, an online
// softmax in FP32 registers (base 2, scale folded in), P converted in registers to the A operand
// of O += P V. K and V arrive through a num_stages-deep cp.async pipeline. Precision and
// protection are policies; their hooks sit at fixed points of the loop.
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm80/ldmatrix.cuh"
#include "ftattn/arch/sm80/shared.cuh"
#include "ftattn/common/math.cuh"
#include "ftattn/common/types.cuh"
#include "ftattn/params.cuh"

namespace ftattn {

template <int HeadDim, int BlockM, int BlockN, int NumWarps, int NumStages, class PrecisionT,
          class ProtectT, bool Causal, bool BlockSparse = false>
struct FwdTraits {
  static constexpr int head_dim = HeadDim;
  static constexpr int block_m = BlockM;
  static constexpr int block_n = BlockN;
  static constexpr int num_warps = NumWarps;
  static constexpr int num_stages = NumStages;
  static constexpr bool causal = Causal;
  static constexpr bool block_sparse = BlockSparse;  // skip key blocks the launch's mask drops
  using Precision = PrecisionT;
  using Protect = ProtectT;

  static constexpr int threads = NumWarps * 32;
  static constexpr int m_tiles = BlockM / (16 * NumWarps);  // 16-row MMA tiles per warp
  static constexpr int s_tiles = BlockN / 8;                // n8 tiles of S per row tile
  static constexpr int o_tiles = HeadDim / 8;               // n8 tiles of O per row tile
  // Rows padded by 16 bytes: 8 consecutive rows then start in 8 different 16-byte bank groups,
  // so ldmatrix and cp.async are free of bank conflicts without a swizzle.
  static constexpr int row_stride = HeadDim + 8;
  static constexpr int chunks_per_row = HeadDim / 8;  // 16-byte chunks
  // Skip O's rescale when no row of a warp has a new max. Measured on an H200: it helps at head
  // dims 96-128; at 64 and 256 the branch costs registers (spills) and ~5-9% of speed.
  static constexpr bool lazy_rescale = HeadDim == 96 || HeadDim == 128;

  static_assert(HeadDim % 16 == 0, "head_dim must be a multiple of 16");
  static_assert(BlockN % 16 == 0, "block_n must be a multiple of 16");
  static_assert(BlockM % (16 * NumWarps) == 0, "block_m must be a multiple of 16 * num_warps");
  static_assert(NumStages >= 1, "num_stages must be at least 1");
};

namespace detail {

template <bool B>
struct Bool {
  static constexpr bool value = B;
};

// Copies `Rows` rows (head_dim elements each) from global memory into a padded shared tile;
// rows at or past `valid_rows` are zero-filled. Fully unrolled: when the CTA's threads cover
// whole rows, each thread keeps one column and steps down by a constant number of rows.
template <class T, int Rows>
__device__ __forceinline__ void load_tile(u32 smem, const u16* gmem, i64 row_stride_g,
                                          int valid_rows) {
  constexpr int cpr = T::chunks_per_row;
  constexpr int chunks = Rows * cpr;
  if constexpr (T::threads % cpr == 0) {
    constexpr int rows_per_pass = T::threads / cpr;
    constexpr int passes = (chunks + T::threads - 1) / T::threads;
    const int r0 = threadIdx.x / cpr;
    const int col = (threadIdx.x % cpr) * 8;
    const u16* src = gmem + r0 * row_stride_g + col;
    const i64 src_step = rows_per_pass * row_stride_g;  // one running pointer, not one per pass
    const u32 dst = smem + (r0 * T::row_stride + col) * 2;
    constexpr u32 dst_step = rows_per_pass * T::row_stride * 2;
    if (valid_rows >= Rows) {  // a whole tile: no bounds to check
#pragma unroll
      for (int i = 0; i < passes; ++i, src += src_step)
        if (chunks % T::threads == 0 || r0 + i * rows_per_pass < Rows)
          sm80::cp_async_16(dst + i * dst_step, src, true);
    } else {
#pragma unroll
      for (int i = 0; i < passes; ++i, src += src_step) {
        const int r = r0 + i * rows_per_pass;
        if (chunks % T::threads == 0 || r < Rows)
          sm80::cp_async_16(dst + i * dst_step, r < valid_rows ? src : gmem, r < valid_rows);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < (chunks + T::threads - 1) / T::threads; ++i) {
      const int c = threadIdx.x + i * T::threads;
      if (chunks % T::threads == 0 || c < chunks) {
        const int r = c / cpr;
        const int col = (c % cpr) * 8;
        const bool valid = r < valid_rows;
        sm80::cp_async_16(smem + (r * T::row_stride + col) * 2,
                          valid ? gmem + r * row_stride_g + col : gmem, valid);
      }
    }
  }
}

}  // namespace detail

template <class T>
__device__ __forceinline__ void attention_fwd_sm80(const AttentionParams& p) {
  using P = typename T::Precision;
  using Protect = typename T::Protect;
  constexpr int kMT = T::m_tiles;
  constexpr int kST = T::s_tiles;
  constexpr int kOT = T::o_tiles;
  constexpr int kStages = T::num_stages;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const u32 sQ = sm80::smem_addr(smem_raw);
  const u32 sK = sQ + T::block_m * T::row_stride * 2;
  const u32 sV = sK + kStages * T::block_n * T::row_stride * 2;
  constexpr u32 kv_stage_bytes = T::block_n * T::row_stride * 2;

  // Causal grids run longest-first: the last query blocks see the most keys.
  const int m_block = T::causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int head_kv = head / p.group_size;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;

  const int row0 = m_block * T::block_m;  // first query row of this CTA
  // Bottom-right causal alignment (FlashAttention-2): row i sees keys j <= i + diag.
  const int diag = p.seqlen_k - p.seqlen_q;
  int n_blocks = (p.seqlen_k + T::block_n - 1) / T::block_n;
  if (T::causal) {
    const int last_key = row0 + T::block_m - 1 + diag;  // last key any row here may see
    n_blocks = last_key < 0 ? 0 : min(n_blocks, last_key / T::block_n + 1);
  }

  const u16* q = static_cast<const u16*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride +
                 row0 * p.q_seq_stride;
  const u16* k =
      static_cast<const u16*>(p.k) + batch * p.k_batch_stride + head_kv * p.k_head_stride;
  const u16* v =
      static_cast<const u16*>(p.v) + batch * p.v_batch_stride + head_kv * p.v_head_stride;

  // Block-sparse: this CTA's row of the per-head block mask. Skipped blocks are never loaded.
  const unsigned char* mask_row =
      T::block_sparse ? p.block_mask + head * p.block_mask_head_stride +
                            static_cast<i64>(row0 / p.sparse_block_m) * p.block_mask_k_blocks
                      : nullptr;
  auto active = [&](int n_block) {
    return !T::block_sparse || mask_row[n_block * T::block_n / p.sparse_block_n] != 0;
  };
  // The first active key block at or after n_block (n_blocks when none is left).
  auto next_active = [&](int n_block) {
    while (n_block < n_blocks && !active(n_block)) ++n_block;
    return n_block;
  };

  // Each load is one cp.async group.
  auto load_k = [&](int stage, int n_block) {
    const int key0 = n_block * T::block_n;
    detail::load_tile<T, T::block_n>(sK + stage * kv_stage_bytes, k + key0 * p.k_seq_stride,
                                     p.k_seq_stride, p.seqlen_k - key0);
    sm80::cp_async_commit();
  };
  auto load_v = [&](int stage, int n_block) {
    const int key0 = n_block * T::block_n;
    detail::load_tile<T, T::block_n>(sV + stage * kv_stage_bytes, v + key0 * p.v_seq_stride,
                                     p.v_seq_stride, p.seqlen_k - key0);
    sm80::cp_async_commit();
  };
  auto load_kv = [&](int stage, int n_block) {
    load_k(stage, n_block);
    load_v(stage, n_block);
  };
  auto skip_kv = [] {  // empty groups keep the wait counts uniform near the end
    sm80::cp_async_commit();
    sm80::cp_async_commit();
  };

  // Prologue: Q, then the first num_stages - 1 active key blocks (one buffer: the first K).
  // `ahead` is the next block to prefetch.
  detail::load_tile<T, T::block_m>(sQ, q, p.q_seq_stride, p.seqlen_q - row0);
  sm80::cp_async_commit();
  int ahead = next_active(0);
  if constexpr (kStages == 1) {
    if (ahead < n_blocks) {
      load_k(0, ahead);
      ahead = next_active(ahead + 1);
    }
  }
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (ahead < n_blocks) {
      load_kv(s, ahead);
      ahead = next_active(ahead + 1);
    } else {
      skip_kv();
    }
  }

  float o[kMT][kOT][4];
  float row_max[kMT][2];
  float row_sum[kMT][2];  // this thread's partial sums; the quad is summed once, at the end
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
  typename Protect::State protect_state;

  const int warp_row = warp * kMT * 16;  // first row of this warp within the CTA
  // ldmatrix lane addressing (see the fragment layouts of mma.m16n8k16).
  const int a_row = lane % 16, a_col = (lane / 16) * 8;                        // Q (A operand)
  const int k_row = (lane / 16) * 8 + lane % 8, k_col = ((lane / 8) % 2) * 8;  // K (B, no trans)
  const int v_row = ((lane / 8) % 2) * 8 + lane % 8, v_col = (lane / 16) * 8;  // V (B, trans)

  // One key block, the it-th one computed. Masked == false is the hot path: no index
  // arithmetic, fewer registers.
  auto step = [&](const int it, const int n_block, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const int stage = it % kStages;
    if constexpr (kStages == 1) {
      // One buffer each for K and V (FlashAttention-2's schedule): K of this block was loaded
      // during the previous block's softmax and GEMM II; V loads during GEMM I.
      sm80::cp_async_wait<0>();
      __syncthreads();  // K landed, and every warp is done with the previous V
      load_v(0, n_block);
    } else {
      // Wait for K of this block; V and the blocks after it may still fly.
      sm80::cp_async_wait<2 * kStages - 3>();
      // Past this barrier every warp has finished the previous block, so its stage is free
      // for the block num_stages - 1 ahead: no barrier is needed at the end of the step.
      __syncthreads();
      if (ahead < n_blocks) {
        load_kv((it + kStages - 1) % kStages, ahead);
        ahead = next_active(ahead + 1);
      } else {
        skip_kv();
      }
    }

    // GEMM I: S = Q K^T for this warp's rows and the block's keys.
    float s[kMT][kST][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kST; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[mt][nt][i] = 0.f;

    const u32 sKs = sK + stage * kv_stage_bytes;
#pragma unroll
    for (int ks = 0; ks < T::head_dim / 16; ++ks) {
      u32 a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
        sm80::ldmatrix_x4(
            a[mt], sQ + ((warp_row + mt * 16 + a_row) * T::row_stride + ks * 16 + a_col) * 2);
#pragma unroll
      for (int np = 0; np < kST / 2; ++np) {
        u32 b[4];
        sm80::ldmatrix_x4(b, sKs + ((np * 16 + k_row) * T::row_stride + ks * 16 + k_col) * 2);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          P::mma(s[mt][2 * np], a[mt], b[0], b[1]);
          P::mma(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
    Protect::after_scores(protect_state, s, n_block);
    if constexpr (kStages == 1) {
      sm80::cp_async_wait<0>();
      __syncthreads();  // V landed, and every warp is done with K: load the next block's K
      if (ahead < n_blocks) {
        load_k(0, ahead);
        ahead = next_active(ahead + 1);
      }
    }

    // Mask keys past the sequence end and, for causal, past each row's diagonal. Only blocks
    // that straddle a boundary pay for it.
    if (kMasked) {
      const int key0 = n_block * T::block_n;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kST; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int row = row0 + warp_row + mt * 16 + lane / 4 + (i / 2) * 8;
            const int key = key0 + nt * 8 + (lane % 4) * 2 + (i % 2);
            const bool masked = key >= p.seqlen_k || (T::causal && key > row + diag);
            if (masked) s[mt][nt][i] = neg_inf();
          }
    }

    // Online softmax: new running max, rescale of the old state, P = 2^(S*scale - max).
    float rescale[kMT][2];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[mt][r];
#pragma unroll
        for (int nt = 0; nt < kST; ++nt)
          mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
        mx = quad_max(mx);
        // A fully masked row keeps max -inf; shifting by 0 then keeps its P at exactly 0.
        const float shift = mx == neg_inf() ? 0.f : mx * p.scale_log2;
        rescale[mt][r] = fast_exp2(row_max[mt][r] * p.scale_log2 - shift);
        row_max[mt][r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kST; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& x = s[mt][nt][2 * r + c];
            x = fast_exp2(fmaf(x, p.scale_log2, -shift));
            sum += x;
          }
        row_sum[mt][r] = row_sum[mt][r] * rescale[mt][r] + sum;
      }
    // Rescale O only when some row of the warp has a new max: once the running max settles (most
    // blocks of a long row) every factor is exactly 1 and the multiplies would change nothing.
    bool new_max = !T::lazy_rescale;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) new_max |= rescale[mt][0] != 1.f || rescale[mt][1] != 1.f;
    if (!T::lazy_rescale || __any_sync(0xffffffffu, new_max)) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kOT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) o[mt][nt][i] *= rescale[mt][i / 2];
    }
    Protect::after_probs(protect_state, s, rescale);

    if constexpr (kStages > 1) {  // wait for V of this block
      sm80::cp_async_wait<2 * kStages - 2>();
      __syncthreads();
    }

    // GEMM II: O += P V, P taken straight from the S accumulators (C layout == A layout).
    const u32 sVs = sV + stage * kv_stage_bytes;
#pragma unroll
    for (int kp = 0; kp < kST / 2; ++kp) {
      u32 a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        a[mt][0] = P::pack(s[mt][2 * kp][0], s[mt][2 * kp][1]);
        a[mt][1] = P::pack(s[mt][2 * kp][2], s[mt][2 * kp][3]);
        a[mt][2] = P::pack(s[mt][2 * kp + 1][0], s[mt][2 * kp + 1][1]);
        a[mt][3] = P::pack(s[mt][2 * kp + 1][2], s[mt][2 * kp + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kOT / 2; ++dp) {
        u32 b[4];
        sm80::ldmatrix_x4_trans(b, sVs + ((kp * 16 + v_row) * T::row_stride + dp * 16 + v_col) * 2);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          P::mma(o[mt][2 * dp], a[mt], b[0], b[1]);
          P::mma(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
        }
      }
    }
    Protect::after_pv(protect_state, o, n_block);
  };

  // Blocks that need no mask come first (keys below every row's diagonal and inside the
  // sequence); only the last few, at the diagonal or the sequence end, pay for masking.
  int n_unmasked = p.seqlen_k / T::block_n;
  if (T::causal) n_unmasked = min(n_unmasked, max(0, (row0 + diag + 1) / T::block_n));
  n_unmasked = min(n_unmasked, n_blocks);
  if constexpr (!T::block_sparse) {
    for (int n_block = 0; n_block < n_unmasked; ++n_block)
      step(n_block, n_block, detail::Bool<false>{});
    for (int n_block = n_unmasked; n_block < n_blocks; ++n_block)
      step(n_block, n_block, detail::Bool<true>{});
  } else {
    int it = 0;
    for (int n_block = next_active(0); n_block < n_blocks; n_block = next_active(n_block + 1)) {
      if (n_block < n_unmasked)
        step(it++, n_block, detail::Bool<false>{});
      else
        step(it++, n_block, detail::Bool<true>{});
    }
  }
  // Every thread's copies have landed before the epilogue reuses the Q tile: a CTA whose key
  // blocks were all skipped (causal rows past the keys, an empty block-sparse row) has had no
  // barrier since issuing its share of the Q load.
  sm80::cp_async_wait<0>();
  __syncthreads();

  Protect::finish(protect_state, o, row_sum);

  // Epilogue: O / l, converted, staged in this warp's own rows of the Q tile (no other warp
  // reads them), then written out in coalesced 16-byte rows. LSE = (max * scale) + ln(l).
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = quad_sum(row_sum[mt][r]);
      const float inv = l > 0.f ? 1.f / l : 0.f;  // rows that see no key give 0
      const int tile_row = warp_row + mt * 16 + lane / 4 + r * 8;
      const u32 dst = sQ + (tile_row * T::row_stride + (lane % 4) * 2) * 2;
#pragma unroll
      for (int nt = 0; nt < kOT; ++nt)
        sm80::st_shared_u32(dst + nt * 16,
                            P::pack(o[mt][nt][2 * r] * inv, o[mt][nt][2 * r + 1] * inv));
      const int row = row0 + tile_row;
      if (p.lse != nullptr && lane % 4 == 0 && row < p.seqlen_q) {
        const float lse = l > 0.f
                              ? (row_max[mt][r] * p.scale_log2 + fast_log2(l)) * 0.6931471805599453f
                              : neg_inf();
        p.lse[(static_cast<i64>(batch) * p.heads_q + head) * p.seqlen_q + row] = lse;
      }
    }
  __syncwarp();
  u16* out = static_cast<u16*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
  constexpr int warp_chunks = kMT * 16 * T::chunks_per_row;
#pragma unroll
  for (int c = lane; c < warp_chunks; c += 32) {
    const int tile_row = warp_row + c / T::chunks_per_row;
    const int col = (c % T::chunks_per_row) * 8;
    const int row = row0 + tile_row;
    if (row < p.seqlen_q) {
      const uint4_ v = sm80::ld_shared_u128(sQ + (tile_row * T::row_stride + col) * 2);
      *reinterpret_cast<uint4_*>(out + row * p.o_seq_stride + col) = v;
    }
  }
}

}  // namespace ftattn
