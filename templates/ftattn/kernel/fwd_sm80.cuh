// FlashAttention-2 forward skeleton for sm_80 and later (runs on Hopper too).
//
// One CTA owns block_m query rows of one (batch, head); each warp owns 16 * m_tiles of those
// rows. The CTA walks the key blocks: S = Q K^T with m16n8k16 tensor-core MMAs, an online
// softmax in FP32 registers (base 2, scale folded in), P converted in registers to the A operand
// of O += P V. K and V arrive through a num_stages-deep cp.async pipeline. Precision and
// protection are policies; their hooks sit at fixed points of the loop.
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm80/global.cuh"
#include "ftattn/arch/sm80/ldmatrix.cuh"
#include "ftattn/arch/sm80/shared.cuh"
#include "ftattn/common/faults.cuh"
#include "ftattn/common/math.cuh"
#include "ftattn/common/types.cuh"
#include "ftattn/kernel/fwd_common.cuh"
#include "ftattn/params.cuh"
#include "ftattn/protect/checks.cuh"
#include "ftattn/protect/efta_rows.cuh"
#include "ftattn/protect/workspace.cuh"

namespace ftattn {

template <int HeadDim, int BlockM, int BlockN, int NumWarps, int NumStages, class PrecisionT,
          class ProtectT, bool Causal, bool BlockSparse = false, bool Inject = false>
struct FwdTraits : TileKnobs<HeadDim, BlockM, BlockN, NumWarps, NumStages, PrecisionT, ProtectT,
                             Causal, BlockSparse, Inject> {
  // Rows padded by 16 bytes: 8 consecutive rows then start in 8 different 16-byte bank groups,
  // so ldmatrix and cp.async are free of bank conflicts without a swizzle. One V checksum tile
  // lives in that padding; two take 16 more columns, and + 24 is again conflict-free.
  static constexpr int row_stride = HeadDim + (ProtectT::v_atoms <= 1 ? 8 : 24);
  static constexpr int k_rows = BlockN + 8 * ProtectT::k_atoms;  // K tile + checksum rows
  static constexpr int smem_bytes =
      (BlockM + NumStages * (k_rows + BlockN)) * row_stride * PrecisionT::element_bytes;
  static constexpr int chunks_per_row = HeadDim / 8;  // 16-byte chunks
  // Skip O's rescale when no row of a warp has a new max. Measured on an H200: it helps at head
  // dims 96-128; at 64 and 256 the branch costs registers (spills) and ~5-9% of speed. Not in
  // unprotected one-stage kernels (H100, d128): the branch keeps the exponentials apart from
  // GEMM II's MMAs, and without it ptxas interleaves them: +1-2% (non-causal), PASA +3-10%.
  static constexpr bool lazy_rescale =
      (HeadDim == 96 || HeadDim == 128) && (NumStages > 1 || ProtectT::enabled);

  static_assert(HeadDim % 16 == 0, "head_dim must be a multiple of 16");
  static_assert(BlockN % 16 == 0, "block_n must be a multiple of 16");
  static_assert(BlockM % (16 * NumWarps) == 0, "block_m must be a multiple of 16 * num_warps");
  static_assert(NumStages >= 1, "num_stages must be at least 1");
};

namespace detail {

// Shared memory of the 16-bit skeletons (fwd_sm80, fwd_pasa_sm80): the Q tile, num_stages K
// stages of T::k_rows rows (the K tile and whatever rows the skeleton appends), then num_stages V
// stages; byte addresses in the shared window.
template <class T>
struct SmemTiles {
  u32 q, k, v;
  __device__ __forceinline__ explicit SmemTiles(u32 base)
      : q(base),
        k(base + T::block_m * T::row_stride * 2),
        v(base + (T::block_m + T::num_stages * T::k_rows) * T::row_stride * 2) {}
  __device__ __forceinline__ u32 k_stage(int stage) const {
    return k + stage * (T::k_rows * T::row_stride * 2);
  }
  __device__ __forceinline__ u32 v_stage(int stage) const {
    return v + stage * (T::block_n * T::row_stride * 2);
  }
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

// The pipeline's prologue: the first num_stages - 1 active key blocks (with one buffer, the
// first K only). Returns the next block to prefetch.
template <class T, class NextActive, class LoadK, class LoadKV, class SkipKV>
__device__ __forceinline__ int prefetch_key_blocks(int n_blocks, NextActive&& next_active,
                                                   LoadK&& load_k, LoadKV&& load_kv,
                                                   SkipKV&& skip_kv) {
  int ahead = next_active(0);
  if constexpr (T::num_stages == 1) {
    if (ahead < n_blocks) {
      load_k(0, ahead);
      ahead = next_active(ahead + 1);
    }
  }
#pragma unroll
  for (int s = 0; s < T::num_stages - 1; ++s) {
    if (ahead < n_blocks) {
      load_kv(s, ahead);
      ahead = next_active(ahead + 1);
    } else {
      skip_kv();
    }
  }
  return ahead;
}

// Where this lane's ldmatrix rows of the mma.m16n8k16 fragments sit in the shared tiles: Q (A
// operand) at q_offset + ((warp_row + a_row) * row_stride + a_col) * 2 bytes of the Q tile, K (B,
// not transposed) at k_offset + (k_row * row_stride + k_col) * 2 of a K stage, V (B, transposed)
// at v_offset + (v_row * row_stride + v_col) * 2 of a V stage. Unprotected kernels carry it all
// in the three byte offsets (the indices are 0), so the loops add only constants; protected
// kernels keep the indices (offsets 0). Measured on an H100: with the offsets, unprotected
// kernels ran 1-5% faster (d64, d128), while ptxas allocated the protected kernels' main loop
// differently and causal Flash-ABFT ran 5% slower.
template <class T, bool Offsets = !T::Protect::enabled>
struct LaneAddressing {
  int warp_row, a_row, a_col, k_row, k_col, v_row, v_col;
  u32 q_offset = 0, k_offset = 0, v_offset = 0;
  __device__ __forceinline__ LaneAddressing(int warp_row_, int lane)
      : warp_row(warp_row_),
        a_row(lane % 16),
        a_col((lane / 16) * 8),
        k_row((lane / 16) * 8 + lane % 8),
        k_col(((lane / 8) % 2) * 8),
        v_row(((lane / 8) % 2) * 8 + lane % 8),
        v_col((lane / 16) * 8) {
    if constexpr (Offsets) {
      q_offset = ((warp_row + a_row) * T::row_stride + a_col) * 2;
      k_offset = (k_row * T::row_stride + k_col) * 2;
      v_offset = (v_row * T::row_stride + v_col) * 2;
      warp_row = a_row = a_col = k_row = k_col = v_row = v_col = 0;
    }
  }
};

// This lane's ldmatrix address of the A (Q) fragment of MMA row tile mt at k-step ks.
template <class T>
__device__ __forceinline__ u32 q_fragment(u32 sQ, int warp_row, int a_row, int a_col, int mt,
                                          int ks) {
  return sQ + ((warp_row + mt * 16 + a_row) * T::row_stride + ks * 16 + a_col) * 2;
}

// GEMM I in 16-wide steps over head_dim: this warp's Q fragments, loaded from the Q tile, times
// the block's K tile into `s` through `mma(acc, a, b0, b1)`; `extra(a, ks)` then multiplies the
// same fragments into tiles of its own (checksum rows, PASA's shift row).
template <class T, int kMT, int kST, class Acc, class Mma, class Extra>
__device__ __forceinline__ void gemm_qk(Acc (&s)[kMT][kST], u32 sQ, u32 sKs, int warp_row,
                                        int a_row, int a_col, int k_row, int k_col, Mma&& mma,
                                        Extra&& extra) {
#pragma unroll
  for (int ks = 0; ks < T::head_dim / 16; ++ks) {
    u32 a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
      sm80::ldmatrix_x4(a[mt], q_fragment<T>(sQ, warp_row, a_row, a_col, mt, ks));
#pragma unroll
    for (int np = 0; np < kST / 2; ++np) {
      u32 b[4];
      sm80::ldmatrix_x4(b, sKs + ((np * 16 + k_row) * T::row_stride + ks * 16 + k_col) * 2);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma(s[mt][2 * np], a[mt], b[0], b[1]);
        mma(s[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
    extra(a, ks);
  }
}

// One V tile, keys key0 .. key0 + block_n of `v`, as one cp.async group; under Flash-ABFT or
// EFTA its GEMM II checksum columns (Protect::v_atoms 16-byte chunks per key, from KV head
// cs_head's part of the checksum workspace) ride in the tile's padding beside the head_dim
// columns. Shared by the f16/bf16 and PASA skeletons.
template <class T>
__device__ __forceinline__ void load_v_tile(u32 dst, const u16* v, const AttentionParams& p,
                                            int key0, const unsigned char* cs_base,
                                            long long cs_head, long long v_per_head) {
  load_tile<T, T::block_n>(dst, v + key0 * p.v_seq_stride, p.v_seq_stride, p.seqlen_k - key0);
  constexpr int atoms = T::Protect::v_atoms;
  if constexpr (atoms > 0) {
    const unsigned char* src =
        cs_base + cs_head * v_per_head + static_cast<long long>(key0) * 16 * atoms;
    constexpr int chunks = T::block_n * atoms;
    for (int c = threadIdx.x; c < chunks; c += T::threads)
      sm80::cp_async_16(dst + ((c / atoms) * T::row_stride + T::head_dim + (c % atoms) * 8) * 2,
                        src + c * 16, true);
  }
  sm80::cp_async_commit();
}

// GEMM II for one 16-key step kp: P (this warp's A fragments) times the V tile at sVs (this
// lane's rows per `at`, whose v_offset sVs already holds) into O, then times the
// Protect::v_atoms checksum columns beside the tile into oc. Shared by the f16/bf16 and PASA
// skeletons.
template <class T, int kMT, int kOT, int kAtoms, class At, class Mma>
__device__ __forceinline__ void gemm_pv_step(float (&o)[kMT][kOT][4], float (&oc)[kMT][kAtoms][4],
                                             const u32 (&a)[kMT][4], u32 sVs, const At& at, int kp,
                                             Mma&& mma) {
#pragma unroll
  for (int dp = 0; dp < kOT / 2; ++dp) {
    u32 b[4];
    sm80::ldmatrix_x4_trans(b,
                            sVs + ((kp * 16 + at.v_row) * T::row_stride + dp * 16 + at.v_col) * 2);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      mma(o[mt][2 * dp], a[mt], b[0], b[1]);
      mma(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
    }
  }
  const u32 cs = sVs + ((kp * 16 + at.v_row) * T::row_stride + T::head_dim + at.v_col) * 2;
  if constexpr (T::Protect::v_atoms == 1) {
    u32 b[2];
    sm80::ldmatrix_x2_trans(b, cs);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) mma(oc[mt][0], a[mt], b[0], b[1]);
  } else if constexpr (T::Protect::v_atoms == 2) {
    u32 b[4];
    sm80::ldmatrix_x4_trans(b, cs);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      mma(oc[mt][0], a[mt], b[0], b[1]);
      mma(oc[mt][1], a[mt], b[2], b[3]);
    }
  }
}

// O and its Protect::v_atoms checksum columns rescaled alike, by row.
template <class Protect, int kMT, int kOT, int kAtoms>
__device__ __forceinline__ void rescale_output(float (&o)[kMT][kOT][4], float (&oc)[kMT][kAtoms][4],
                                               const float (&rescale)[kMT][2]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kOT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mt][nt][i] *= rescale[mt][i / 2];
#pragma unroll
    for (int g = 0; g < Protect::v_atoms; ++g)
#pragma unroll
      for (int i = 0; i < 4; ++i) oc[mt][g][i] *= rescale[mt][i / 2];
  }
}

// A K tile's 8 * Protect::k_atoms EFTA checksum rows (block n_block's, from KV head cs_head's
// part of the checksum workspace) into rows block_n.. of the K stage at dst, in the K tile's
// cp.async group. Shared by the f16/bf16 and PASA skeletons.
template <class T>
__device__ __forceinline__ void load_k_checksum_rows(u32 dst, const unsigned char* cs_base,
                                                     const ChecksumWorkspace& cs, long long cs_head,
                                                     int n_block) {
  constexpr int chunks = 8 * T::Protect::k_atoms * T::chunks_per_row;
  const unsigned char* src = cs_base + cs.k_offset + cs_head * cs.k_per_head +
                             static_cast<long long>(n_block) * chunks * 16;
  for (int c = threadIdx.x; c < chunks; c += T::threads)
    sm80::cp_async_16(
        dst + ((T::block_n + c / T::chunks_per_row) * T::row_stride + (c % T::chunks_per_row) * 8) *
                  2,
        src + c * 16, true);
}

// efta_correct's weighted S checksums, for the rare path after a failed GEMM I check: this
// warp's Q fragments (reloaded from the Q tile) times checksum atom 1 below the K tile
// (`checksum_rows(1, ks)`, its B operand at k-step ks), with FP32 accumulators. Not unrolled: it
// stays out of the hot loop's registers. Shared by the f16/bf16 and PASA skeletons.
template <class T, int kMT, class At, class ChecksumRows>
__device__ __forceinline__ void weighted_score_checksums(float (&sw)[kMT][4], u32 sQ, const At& at,
                                                         ChecksumRows&& checksum_rows) {
  using P = typename T::Precision;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) sw[mt][i] = 0.f;
#pragma unroll 1
  for (int ks = 0; ks < T::head_dim / 16; ++ks) {
    u32 b[2];
    sm80::ldmatrix_x2(b, checksum_rows(1, ks));
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      u32 a[4];
      sm80::ldmatrix_x4(a,
                        q_fragment<T>(sQ + at.q_offset, at.warp_row, at.a_row, at.a_col, mt, ks));
      P::mma(sw[mt], a, b[0], b[1]);
    }
  }
}

// Injection builds: the checksum site is the concatenation [S checksums, O checksums] (n_sc +
// n_oc values of this thread); a plan past the S part flips O checksum `values[e - n_sc]`.
// Shared by the f16/bf16 and PASA skeletons.
template <int n_sc, int n_oc>
__device__ __forceinline__ void inject_output_checksums(const FaultPlanParams& f, int it,
                                                        float* values) {
  if constexpr (n_oc > 0)
    if (f.element % (n_sc + n_oc) >= n_sc) {
      if (plan_hits(f, fault_site_checksum) && f.iteration == it) {
        const int e = (f.element % (n_sc + n_oc)) - n_sc;
        for (int i = 0; i < n_oc; ++i)
          if (i == e) values[i] = flip_bit(values[i], f.bit);
      }
    }
}

// The largest |q|_2 among this thread's rows of the landed Q tile (each lane of a quad sums a
// quarter of a row): EFTA's S thresholds are relative to it.
template <class T, int kMT, bool Bf16>
__device__ __forceinline__ float q_rows_norm(u32 sQ, int warp_row, int lane) {
  float q_norm = 0.f;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int tile_row = warp_row + mt * 16 + lane / 4 + r * 8;
      float sq = 0.f;
#pragma unroll
      for (int i = 0; i < T::head_dim / 8; ++i) {
        float x0, x1;
        unpack2<Bf16>(
            sm80::ld_shared_u32(
                sQ + (tile_row * T::row_stride + (lane % 4) * (T::head_dim / 4) + 2 * i) * 2),
            x0, x1);
        sq += x0 * x0 + x1 * x1;
      }
      q_norm = fmaxf(q_norm, sqrtf(quad_sum(sq)));
    }
  return q_norm;
}

// GEMM II check: each row of O against its checksum column (protect/checksum.cuh); efta_correct
// locates a single faulty element by the row's weighted checksum and rebuilds it.
//
// The rounding the check must tolerate is FP32 accumulation, about 2^-23 of the running sums per
// MMA step, and the hi + lo split of the checksum operand, 2^-22 (f16) of each key's term. Their
// bound is B = l * max_j sum|v_j| (the thread's columns), which bounds both the elements' sum of
// magnitudes and the checksum. A threshold of B times the key blocks let flips of an O element
// of 2^-9 of its value through on normal inputs, where O is a weighted average whose terms cancel
// and sits far below B: the running sums, whose rounding the check sees, are as small as O. So
// the threshold follows the values, growing with the key blocks, plus B once for the split:
//   tol = tol_output * ((blocks + 16) * min(sum |o| + |checksum|, 2 B) + B) + floor.
// Where nothing cancels (PASA's biased inputs) sum |o| and |checksum| reach B and this is the old
// bound. Locating needs the weighted discrepancy to be clean to 1/(2 head_dim) of e1, so
// correction waits for a discrepancy over the threshold with the values at their bound (2 B);
// between the two, the fault is detected and reported (recompute fixes it). A CPU model of the
// check (test_protect_model.cpp) locates every flip it corrects there.
// `row_of(mt, r)` is the global query row of this thread's row half r of tile mt. `kLazy`: sum |o|
// only where a row of the warp fails against |checksum| (below).
template <class T, bool kLazy = false, int kMT, int kOT, int kAtoms, class RowOf>
__device__ __forceinline__ void check_output(const AttentionParams& p, float (&o)[kMT][kOT][4],
                                             const float (&oc)[kMT][kAtoms][4],
                                             const float (&l)[kMT][2], float v_bound, int n_blocks,
                                             int batch, int head, int lane, RowOf&& row_of) {
  using Protect = typename T::Protect;
  const int quad_t = lane % 4;
  // The growth term counts 128-key steps, not this tile's blocks: the defaults were calibrated at
  // 128-key blocks, and 64-key ones would double it (EFTA's output site then let more flips
  // through silently at 128 x 64: campaign_tiles.csv).
  const float growth = n_blocks * T::block_n / 128.f + 16;
  // The threshold for `values` (sum |o| + |checksum|, capped at 2 bound) under `bound`.
  auto tol_at = [&](float values, float bound) {
    return p.tol_output * (growth * values + bound) + p.tol_floor;
  };
  // sum |o| costs an add per element. |checksum| alone bounds the values from below for nothing,
  // so the lazy check tries every row against that first and sums |o| only when a row of the warp
  // fails there (faults, or rows near their threshold), as GEMM I's check does
  // (protect::scores_within). The warp-specialised kernels take it: with one CTA per SM nothing
  // hides their epilogue. Elsewhere it cost the mma.sync f16_pasa kernel with Flash-ABFT 32 bytes
  // of spills in its causal loop.
  float e1[kMT][2], ref[kMT][2], row_l[kMT][2];
  [[maybe_unused]] float weighted_ref[kMT][2], squared_ref[kMT][2];
  bool clean = true;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // efta_correct's repair shuffles across the quad, so every value its branches test must be
      // the quad's: l from one lane too (a fault in one lane's rescale or max can leave that
      // lane's l, checked against its own SNVR bound, apart from the others').
      row_l[mt][r] = l[mt][r];
      if constexpr (Protect::correct)
        row_l[mt][r] = __shfl_sync(0xffffffffu, row_l[mt][r], lane & ~3);
      const float sum = quad_sum(thread_row_sum(o[mt], r));
      // This lane's column group of the checksum tile as one value (hi + lo), and the quad's
      // plain and weighted checksums from the lanes that hold them (protect/checksum.cuh). Under
      // efta_correct one lane's plain checksum serves the whole quad: the quad decides on the
      // repair together.
      const float group = oc[mt][0][2 * r] + oc[mt][0][2 * r + 1];
      ref[mt][r] = __shfl_sync(0xffffffffu, group, Protect::plain_lane(lane));
      if constexpr (Protect::correct) {
        weighted_ref[mt][r] = __shfl_sync(0xffffffffu, group, Protect::weighted_lane(lane));
        squared_ref[mt][r] = __shfl_sync(0xffffffffu, group, Protect::squared_lane(lane));
      }
      const float bound = fabsf(row_l[mt][r]) * v_bound;
      e1[mt][r] = ref[mt][r] - sum;
      const float least = fminf(fabsf(ref[mt][r]), 2 * bound);
      clean &= fabsf(e1[mt][r]) <= tol_at(least, bound);
    }
  if constexpr (kLazy)
    if (__all_sync(0xffffffffu, clean)) return;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float bound = fabsf(row_l[mt][r]) * v_bound;
      const float magnitude = quad_sum(thread_row_sum<true>(o[mt], r));
      // Capped at the bound they cannot exceed, so that a non-finite element still alarms.
      const float values = fminf(magnitude + fabsf(ref[mt][r]), 2 * bound);
      const float tol = tol_at(values, bound);
      const int row = row_of(mt, r);
      if (!(fabsf(e1[mt][r]) <= tol) && row < p.seqlen_q) {
        int column = -1;
        if constexpr (Protect::correct)
          if (!(fabsf(e1[mt][r]) <= p.tol_output * (2 * growth + 1) * bound + p.tol_floor))
            column = protect::correct_output_row(
                o[mt], r, e1[mt][r], {ref[mt][r], weighted_ref[mt][r], squared_ref[mt][r]},
                bound * (1.f + 1e-2f), lane);
        if (quad_t == 0)
          record_fault(p.fault_log, batch, head, row, column, fault_stage_output, column >= 0,
                       fabsf(e1[mt][r]), tol);
      }
    }
}

// Epilogue: O / l, converted, staged in this warp's own rows of the Q tile (no other warp reads
// them), then written out in coalesced 16-byte rows. LSE = (row_max * max_scale + log2 l) * ln 2,
// with max_scale taking row_max to base-2 logits. Rows that see no key get O = 0 and LSE = -inf.
// Rows at or past `end` (the sequence end, -1; or where the next tile's rows begin) are not
// written. `kRows`: the lanes store whole rows (store_rows), which protected one-warpgroup and
// mma.sync kernels leave out (below); the warp-specialised ones, with registers to spare after
// their loop, take it.
// `kSwizzled` (persistent tiles, fwd_ws_sm90.cuh): rows staged unpadded, head_dim * 2 bytes
// apart, row r's 16-byte chunk c at c ^ (r % 8), so that O fits the Q tile it replaces and the
// quads' stores and the row reads stay free of bank conflicts.
template <class T, bool kRows = !T::Protect::enabled, bool kSwizzled = false, int kMT, int kOT>
__device__ __forceinline__ void store_output(const AttentionParams& p,
                                             const float (&o)[kMT][kOT][4],
                                             const float (&l)[kMT][2],
                                             const float (&row_max)[kMT][2], float max_scale,
                                             int batch, int head, int row0, int warp_row, int lane,
                                             u32 sQ, int end = -1) {
  using P = typename T::Precision;
  // p.seqlen_q read where it is used, as before `end` existed (the skeletons' SASS unchanged).
  auto row_end = [&] { return end < 0 ? p.seqlen_q : end; };
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float inv = l[mt][r] > 0.f ? 1.f / l[mt][r] : 0.f;
      const int tile_row = warp_row + mt * 16 + lane / 4 + r * 8;
      constexpr int kStride = kSwizzled ? T::head_dim : T::row_stride;
      const u32 dst = sQ + (tile_row * kStride + (lane % 4) * 2) * 2;
#pragma unroll
      for (int nt = 0; nt < kOT; ++nt)
        sm80::st_shared_u32(dst + (kSwizzled ? nt ^ (tile_row % 8) : nt) * 16,
                            P::pack(o[mt][nt][2 * r] * inv, o[mt][nt][2 * r + 1] * inv));
      const int row = row0 + tile_row;
      if (p.lse != nullptr && lane % 4 == 0 && row < row_end())
        p.lse[(static_cast<i64>(batch) * p.heads_q + head) * p.seqlen_q + row] =
            l[mt][r] > 0.f
                ? (row_max[mt][r] * max_scale + fast_log2(l[mt][r])) * 0.6931471805599453f
                : neg_inf();
    }
  __syncwarp();
  u16* out = static_cast<u16*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
  // Lanes covering whole rows: ncu put 8% of an H100's stall samples in the loop below at d128,
  // seqlen 512 (a 64-bit row product and a bounds check per chunk). Protected one-warpgroup and
  // mma.sync kernels keep the loop: on store_rows Flash-ABFT once spilled 96 bytes instead of 16
  // and ran 5% slower causal; with 16-byte stores it no longer spills more, and ran 0.975-1.009x
  // (every scheme, H100). The warp-specialised ones take store_rows (kRows).
  if constexpr (kSwizzled) {
    static_assert(kRows && 32 % T::chunks_per_row == 0 && T::chunks_per_row % 8 == 0,
                  "swizzled staging: lanes cover whole rows of 8-chunk groups");
    sm80::store_rows<T::chunks_per_row, kMT * 16, T::head_dim * 2, true>(
        out, p.o_seq_stride, row0 + warp_row, sQ + warp_row * T::head_dim * 2,
        row_end() - row0 - warp_row, lane);
  } else if constexpr (kRows && 32 % T::chunks_per_row == 0) {
    sm80::store_rows<T::chunks_per_row, kMT * 16, T::row_stride * 2>(
        out, p.o_seq_stride, row0 + warp_row, sQ + warp_row * T::row_stride * 2,
        row_end() - row0 - warp_row, lane);
  } else {
    constexpr int warp_chunks = kMT * 16 * T::chunks_per_row;
#pragma unroll
    for (int c = lane; c < warp_chunks; c += 32) {
      const int tile_row = warp_row + c / T::chunks_per_row;
      const int col = (c % T::chunks_per_row) * 8;
      const int row = row0 + tile_row;
      if (row < row_end()) {
        const uint4_ v = sm80::ld_shared_u128(sQ + (tile_row * T::row_stride + col) * 2);
        sm80::st_global_u128(out + row * p.o_seq_stride + col, v);
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
  const detail::SmemTiles<T> smem(sm80::smem_addr(smem_raw));
  const u32 sQ = smem.q;

  int m_block, head, batch;
  detail::tile_coords<T>(p, m_block, head, batch);
  const int head_kv = head / p.group_size;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;

  const int row0 = m_block * T::block_m;  // first query row of this CTA
  // Bottom-right causal alignment (FlashAttention-2): row i sees keys j <= i + diag.
  const int diag = p.seqlen_k - p.seqlen_q;
  const int n_blocks = detail::key_blocks<T>(p, row0, diag);

  const detail::HeadOperands in = detail::head_operands(p, batch, head, head_kv, row0);
  const u16 *q = in.q, *k = in.k, *v = in.v;

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

  // Protection: this KV head's checksums (protect/workspace.cuh).
  const ChecksumWorkspace cs = checksum_workspace(p.batch, p.heads_kv, p.seqlen_k, T::head_dim,
                                                  T::block_n, Protect::k_atoms, Protect::v_atoms);
  const long long cs_head = static_cast<long long>(batch) * p.heads_kv + head_kv;
  const unsigned char* cs_base = static_cast<const unsigned char*>(p.checksums);

  // Each load is one cp.async group; a K tile brings its checksum rows, a V tile its checksum
  // columns.
  auto load_k = [&](int stage, int n_block) {
    const int key0 = n_block * T::block_n;
    const u32 dst = smem.k_stage(stage);
    detail::load_tile<T, T::block_n>(dst, k + key0 * p.k_seq_stride, p.k_seq_stride,
                                     p.seqlen_k - key0);
    if constexpr (Protect::k_atoms > 0)
      detail::load_k_checksum_rows<T>(dst, cs_base, cs, cs_head, n_block);
    sm80::cp_async_commit();
  };
  auto load_v = [&](int stage, int n_block) {
    detail::load_v_tile<T>(smem.v_stage(stage), v, p, n_block * T::block_n, cs_base, cs_head,
                           cs.v_per_head);
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
  int ahead = detail::prefetch_key_blocks<T>(n_blocks, next_active, load_k, load_kv, skip_kv);

  float o[kMT][kOT][4];
  float row_max[kMT][2];
  float row_sum[kMT][2];  // this thread's partial sums; the quad is summed once, at the end
  detail::clear_accumulators(o, row_max, row_sum);
  // Protection state: GEMM II checksum accumulators (rescaled like O), |q| of this thread's rows
  // (SNVR's lower bound of l lives in shared memory, below).
  float oc[kMT][Protect::v_atoms > 0 ? Protect::v_atoms : 1][4];
  // The largest |q| among this thread's rows bounds each of them: one register instead of
  // 2 * kMT, where the two-tile EFTA kernels have none to spare.
  float q_norm = 0.f;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int g = 0; g < (Protect::v_atoms > 0 ? Protect::v_atoms : 1); ++g) {
        oc[mt][g][2 * r] = 0.f;
        oc[mt][g][2 * r + 1] = 0.f;
      }
    }
  const int quad_t = lane % 4;  // this thread's column group within every 8-wide tile
  auto global_row = [&](int mt, int r) {
    return row0 + warp * kMT * 16 + mt * 16 + lane / 4 + r * 8;
  };
  // Fault injection: flip the planned bit of one of `n` values of a class (injection builds only).
  // One value of a class, by its index among the class's n values of this thread.
  auto inject_at = [&](int site, int it, int index, int n, float& value) {
    if constexpr (T::inject) inject_value_at(p.fault, site, it, index, n, value);
  };
  auto inject = [&](int site, int it, float* values, int n) {
    if constexpr (T::inject) inject_values(p.fault, site, it, values, n);
  };

  const int warp_row = warp * kMT * 16;  // first row of this warp within the CTA
  // SNVR's lower bound of l per row, in the Q tile's padding columns (the Q load and the
  // epilogue touch head_dim columns only), a float per lane of the quad: registers are what the
  // two-tile EFTA kernels lack, and a row's bound is read and written once per key block.
  static_assert(T::row_stride - T::head_dim >= 8, "four floats of padding per row");
  auto lower_bound_at = [&](int mt, int r) {
    return sQ + ((warp_row + mt * 16 + lane / 4 + r * 8) * T::row_stride + T::head_dim) * 2 +
           quad_t * 4;
  };
  if constexpr (Protect::k_atoms > 0)
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) sm80::st_shared_u32(lower_bound_at(mt, r), 0u);
  const detail::LaneAddressing<T> at(warp_row, lane);

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
      // Wait for K and V of this block (issued a step or more ago); later blocks may still fly.
      // One barrier per block: past it every warp has finished the previous block, so its stage
      // is free for the block num_stages - 1 ahead (loaded after GEMM I, below). Waiting for V
      // separately, with a second barrier before GEMM II, measured 1-3% slower at short
      // non-causal sequences.
      sm80::cp_async_wait<2 * kStages - 4>();
      __syncthreads();
    }

    float k_norm = 0.f;  // sum of |k| over this thread's keys of the block
    if constexpr (Protect::k_atoms > 0)
      k_norm = reinterpret_cast<const float*>(cs_base + cs.knorm_offset +
                                              cs_head * cs.knorm_per_head)[n_block * 4 + quad_t];

    // GEMM I: S = Q K^T for this warp's rows and the block's keys.
    float s[kMT][kST][4];
    // S's plain checksum columns (efta_correct's weighted ones are made only when a check fails).
    float sc[kMT][1][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) sc[mt][0][i] = 0.f;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kST; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[mt][nt][i] = 0.f;

    const u32 sKs = smem.k_stage(stage);
    // Checksum atom g: 8 rows below the K tile, as an mma B operand at k-step ks.
    auto checksum_rows = [&](int g, int ks) {
      return sKs + at.k_offset +
             ((T::block_n + 8 * g + at.k_row) * T::row_stride + ks * 16 + at.k_col) * 2;
    };
    detail::gemm_qk<T>(
        s, sQ + at.q_offset, sKs + at.k_offset, at.warp_row, at.a_row, at.a_col, at.k_row, at.k_col,
        [](float(&acc)[4], const u32(&a)[4], u32 b0, u32 b1) { P::mma(acc, a, b0, b1); },
        [&](const u32(&a)[kMT][4], int ks) {
          // The plain checksum rows below the K tile: one more 8-wide MMA tile.
          if constexpr (Protect::k_atoms > 0) {
            u32 b[2];
            sm80::ldmatrix_x2(b, checksum_rows(0, ks));
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) P::mma(sc[mt][0], a[mt], b[0], b[1]);
          }
        });
    inject(fault_site_scores, it, &s[0][0][0], kMT * kST * 4);
    // The checksum site is the concatenation [S checksums, O checksums]: S's are hit here.
    constexpr int n_sc = (Protect::k_atoms > 0 ? kMT * 4 : 0), n_oc = Protect::v_atoms * kMT * 4;
    if constexpr (T::inject && n_sc > 0)
      if (p.fault.element % (n_sc + n_oc) < n_sc)
        inject(fault_site_checksum, it, &sc[0][0][0], n_sc);

    // efta_correct: check GEMM I on the raw scores and rebuild a single faulty element from the
    // checksum before the softmax consumes it.
    if constexpr (Protect::correct) {
      float e1[kMT][2];
      bool failed = false;
      const float walk_tol =
          protect::score_walk_tol<T::head_dim>(p.tol_scores, p.tol_floor, q_norm * k_norm);
      auto within = [&](int mt, int r, float ref, float& tol) {
        return protect::scores_within(
            p.tol_scores, e1[mt][r], ref, walk_tol, [&] { return thread_row_sum<true>(s[mt], r); },
            tol);
      };
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float ref = sc[mt][0][2 * r] + sc[mt][0][2 * r + 1];
          e1[mt][r] = ref - thread_row_sum(s[mt], r);
          float tol;
          failed |= !within(mt, r, ref, tol);
        }
      // The weighted checksum locates a faulty element; faults are rare, so its MMAs run only
      // when a check of the warp failed (Q and the K checksum rows are still in shared memory),
      // which spares GEMM I an MMA tile and eight registers.
      if (__any_sync(0xffffffffu, failed)) {
        float sw[kMT][4];
        detail::weighted_score_checksums<T>(sw, sQ, at, checksum_rows);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const float ref = sc[mt][0][2 * r] + sc[mt][0][2 * r + 1];
            float tol;
            if (within(mt, r, ref, tol)) continue;
            const int bad =
                protect::correct_row(s[mt], r, e1[mt][r], ref, sw[mt][2 * r] + sw[mt][2 * r + 1]);
            record_fault(
                p.fault_log, batch, head, global_row(mt, r),
                bad >= 0 ? n_block * T::block_n + protect::row_group_column(bad, quad_t) : -1,
                fault_stage_scores, bad >= 0, fabsf(e1[mt][r]), tol);
          }
      }
    }
    if constexpr (kStages == 1) {
      sm80::cp_async_wait<0>();
      __syncthreads();  // V landed, and every warp is done with K: load the next block's K
      if (ahead < n_blocks) {
        load_k(0, ahead);
        ahead = next_active(ahead + 1);
      }
    } else if (ahead < n_blocks) {
      // The block num_stages - 1 ahead, issued after GEMM I rather than at the barrier: its
      // address arithmetic then stays out of GEMM I's registers and issue slots (H100, d128
      // 128 x 64 s2: +2-8%, load_issue_point.csv).
      load_kv((it + kStages - 1) % kStages, ahead);
      ahead = next_active(ahead + 1);
    } else {
      skip_kv();
    }

    // Mask keys past the sequence end and, for causal, past each row's diagonal. Only blocks
    // that straddle a boundary pay for it.
    // The product check needs, per row, the masked raw scores (they are in the checksum but
    // not in P) and how many elements stay.
    float masked_sum[kMT][2];
    int n_valid[kMT][2];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        masked_sum[mt][r] = 0.f;
        n_valid[mt][r] = 2 * kST;
      }
    if (kMasked) {
      detail::for_each_masked<kMT, kST, T::causal>(row0 + warp_row, n_block * T::block_n, lane,
                                                   p.seqlen_k, diag, [&](int mt, int nt, int i) {
                                                     if constexpr (Protect::k_atoms > 0) {
                                                       masked_sum[mt][i / 2] += s[mt][nt][i];
                                                       --n_valid[mt][i / 2];
                                                     }
                                                     s[mt][nt][i] = neg_inf();
                                                   });
    }

    // Online softmax: new running max, rescale of the old state, P = 2^(S*scale - max).
    float rescale[kMT][2];
    u32 p_packed[kMT][Protect::k_atoms > 0 ? kST : 1][2];  // EFTA: P as GEMM II's A fragments
    // EFTA: rows whose product check failed (bit 2 mt + r), the last one's deviation and bound.
    unsigned alarms = 0;
    float alarm_dev = 0.f, alarm_tol = 0.f;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float block_max = neg_inf();
#pragma unroll
        for (int nt = 0; nt < kST; ++nt)
          block_max = fmaxf(block_max, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
        block_max = quad_max(block_max);
        const float mx = fmaxf(row_max[mt][r], block_max);
        // A fully masked row keeps max -inf; shifting by 0 then keeps its P at exactly 0.
        const float shift = mx == neg_inf() ? 0.f : mx * p.scale_log2;
        rescale[mt][r] = fast_exp2(row_max[mt][r] * p.scale_log2 - shift);
        if constexpr (T::inject) inject(fault_site_rescale, it, &rescale[mt][r], 1);
        row_max[mt][r] = mx;
        if constexpr (Protect::k_atoms > 0) {
          const u32 lb = lower_bound_at(mt, r);
          sm80::st_shared_u32(lb, __float_as_uint(detail::snvr_lower_bound(
                                      __uint_as_float(sm80::ld_shared_u32(lb)), rescale[mt][r],
                                      block_max, p.scale_log2, shift)));
          detail::efta_probs_row<T, kMasked>(
              p, s[mt], p_packed[mt], r, mx, shift,
              sc[mt][0][2 * r] + sc[mt][0][2 * r + 1] - masked_sum[mt][r], n_valid[mt][r], q_norm,
              k_norm, detail::ScoreGroupSums<kST, false>{}, row_sum[mt][r], rescale[mt][r], alarms,
              1u << (2 * mt + r), alarm_dev, alarm_tol,
              [&](int nt, int c, float& x) {
                inject_at(fault_site_probs, it, (mt * kST + nt) * 4 + 2 * r + c, kMT * kST * 4, x);
              },
              [&](int j, float x) {
                record_fault(p.fault_log, batch, head, global_row(mt, r),
                             n_block * T::block_n + protect::row_group_column(j, quad_t),
                             fault_stage_probs, Protect::correct, x, 0.f);
              });
        } else {
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < kST; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              float& x = s[mt][nt][2 * r + c];
              x = fast_exp2(fmaf(x, p.scale_log2, -shift));
              inject_at(fault_site_probs, it, (mt * kST + nt) * 4 + 2 * r + c, kMT * kST * 4, x);
              sum += x;
            }
          row_sum[mt][r] = row_sum[mt][r] * rescale[mt][r] + sum;
        }
      }
    if constexpr (T::inject) {
      inject(fault_site_row_max, it, &row_max[0][0], kMT * 2);
      inject(fault_site_row_sum, it, &row_sum[0][0], kMT * 2);
    }

    // Rescale O only when some row of the warp has a new max: once the running max settles (most
    // blocks of a long row) every factor is exactly 1 and the multiplies would change nothing.
    bool new_max = !T::lazy_rescale;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) new_max |= rescale[mt][0] != 1.f || rescale[mt][1] != 1.f;
    if (!T::lazy_rescale || __any_sync(0xffffffffu, new_max))
      detail::rescale_output<Protect>(o, oc, rescale);

    // GEMM II: O += P V, P taken straight from the S accumulators (C layout == A layout).
    const u32 sVs = smem.v_stage(stage) + at.v_offset;
#pragma unroll
    for (int kp = 0; kp < kST / 2; ++kp) {
      u32 a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if constexpr (Protect::k_atoms > 0) {
          a[mt][0] = p_packed[mt][2 * kp][0];
          a[mt][1] = p_packed[mt][2 * kp][1];
          a[mt][2] = p_packed[mt][2 * kp + 1][0];
          a[mt][3] = p_packed[mt][2 * kp + 1][1];
        } else {
          a[mt][0] = P::pack(s[mt][2 * kp][0], s[mt][2 * kp][1]);
          a[mt][1] = P::pack(s[mt][2 * kp][2], s[mt][2 * kp][3]);
          a[mt][2] = P::pack(s[mt][2 * kp + 1][0], s[mt][2 * kp + 1][1]);
          a[mt][3] = P::pack(s[mt][2 * kp + 1][2], s[mt][2 * kp + 1][3]);
        }
      }
      detail::gemm_pv_step<T>(
          o, oc, a, sVs, at, kp,
          [](float(&acc)[4], const u32(&x)[4], u32 b0, u32 b1) { P::mma(acc, x, b0, b1); });
    }
    if constexpr (Protect::k_atoms > 0)
      if (alarms != 0)
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r)
            if ((alarms >> (2 * mt + r)) & 1u)
              record_fault(p.fault_log, batch, head, global_row(mt, r), -1, fault_stage_probs,
                           false, alarm_dev, alarm_tol);
    if constexpr (T::inject) {
      inject(fault_site_output, it, &o[0][0][0], kMT * kOT * 4);
      detail::inject_output_checksums<n_sc, n_oc>(p.fault, it, &oc[0][0][0]);
    }
  };

  // |q| of this thread's rows (for the S thresholds), once Q has landed: each lane of a quad sums
  // a quarter of a row. Waiting for every prefetch here costs protected kernels one stall.
  if constexpr (Protect::k_atoms > 0) {
    sm80::cp_async_wait<0>();
    __syncthreads();
    q_norm = detail::q_rows_norm<T, kMT, protect::IsBf16<P>::value>(sQ, warp_row, lane);
  }

  detail::walk_key_blocks<T>(p.seqlen_k, row0, diag, n_blocks, next_active, step);
  // Every thread's copies have landed before the epilogue reuses the Q tile: a CTA whose key
  // blocks were all skipped (causal rows past the keys, an empty block-sparse row) has had no
  // barrier since issuing its share of the Q load.
  sm80::cp_async_wait<0>();
  __syncthreads();

  // Row sums, checked under EFTA (detail::efta_row_sum).
  float l_final[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(row_sum[mt][r]);
      float l = sum;
      if constexpr (Protect::k_atoms > 0) {
        const float ones = __shfl_sync(0xffffffffu, oc[mt][0][2 * r], Protect::ones_lane(lane));
        l = detail::efta_row_sum<T>(p, sum, ones,
                                    __uint_as_float(sm80::ld_shared_u32(lower_bound_at(mt, r))),
                                    global_row(mt, r), row_max[mt][r], lane, batch, head);
      }
      l_final[mt][r] = l;
    }

  if constexpr (Protect::v_atoms > 0)
    detail::check_output<T>(p, o, oc, l_final,
                            reinterpret_cast<const float*>(cs_base + cs.vmax_offset +
                                                           cs_head * cs.vmax_per_head)[quad_t],
                            n_blocks, batch, head, lane, global_row);

  detail::store_output<T>(p, o, l_final, row_max, p.scale_log2, batch, head, row0, warp_row, lane,
                          sQ);
}

}  // namespace ftattn
