// Forward skeleton for f16 and bf16 on Hopper (sm_90a), unprotected or with Flash-ABFT: the
// FlashAttention-2 loop
// of fwd_sm80.cuh with warpgroup MMAs, on the loads and pipeline of the 8-bit Hopper skeleton
// (fwd_q8_sm90.cuh). mma.sync reaches about two thirds of Hopper's 16-bit tensor rate; wgmma
// reads its B operand (and GEMM I's A) from shared memory, so no ldmatrix fragments take
// registers, and runs asynchronously beside the softmax of the SM's other CTAs.
//
// Each warpgroup (4 warps) owns 64 query rows. GEMM I, S = Q K^T, reads Q and K K-major from
// shared memory; GEMM II, O += P V, takes P from registers (the S accumulators packed in place:
// the m16n8 accumulator layout is the m16n8k16 A fragment) and V N-major from shared memory, as
// it is stored (keys x channels, imm-trans-b), so V needs no transposing pass. Q, K and V rows
// are stored in 128-byte swizzle atoms at 1024-byte boundaries (sm90::tile_offset) by cp.async,
// one group per key block, and handed to the tensor cores by a fence.proxy.async.
//
// Flash-ABFT (protect::Checksum<flash_abft>): each key's V row gets one more 128-byte atom whose
// first 16 bytes are the key's checksum chunk from the prologue (rowsum(V) as hi, lo in every
// thread group's pair of columns), so GEMM II is m64n{head_dim + 8}k16 and its last 8-wide tile
// accumulates P . rowsum(V) through the same MMAs and rescales as O; the end-of-row check, fault
// log and recompute are the sm80 skeleton's.
//
// EFTA (efta_detect, efta_correct): the K tile gets its block's 8 (efta_correct: 16) checksum
// rows below the keys, so GEMM I is m64n{block_n + 8}k16 and its last 8-wide tile holds, per
// thread, the checksum of exactly the scores the thread holds (the strided sums of
// protect/checksum.cuh); V's atom carries the GEMM II checksum chunks (efta_correct: two, GEMM II
// m64n{head_dim + 16}k16). The product check, SNVR and the row-sum check are the sm80 skeleton's
// (protect/efta_rows.cuh). efta_correct's weighted S checksum is a dot product of the thread's
// two Q rows with the weighted checksum rows in shared memory, computed only when a check failed.
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm90/pipeline.cuh"
#include "ftattn/arch/sm90/tile_load.cuh"
#include "ftattn/arch/sm90/tma.cuh"
#include "ftattn/arch/sm90/wgmma.cuh"
#include "ftattn/common/math.cuh"
#include "ftattn/common/types.cuh"
#include "ftattn/kernel/fwd_common.cuh"
#include "ftattn/kernel/fwd_sm80.cuh"
#include "ftattn/params.cuh"
#include "ftattn/protect/efta_rows.cuh"
#include "ftattn/protect/none.cuh"
#include "ftattn/protect/workspace.cuh"

namespace ftattn {

// The parameters of FwdTraits (fwd_sm80.cuh), so that one generator serves both skeletons.
template <int HeadDim, int BlockM, int BlockN, int NumWarps, int NumStages, class PrecisionT,
          class ProtectT, bool Causal, bool BlockSparse = false, bool Inject = false>
struct FwdWgmmaTraits : TileKnobs<HeadDim, BlockM, BlockN, NumWarps, NumStages, PrecisionT,
                                  ProtectT, Causal, BlockSparse, Inject> {
  static constexpr int row_bytes = HeadDim * 2;
  // The tiles' swizzle atoms (sm90::tile_offset): 128 bytes, or 64 at head dims 32 and 96, whose
  // 64- and 192-byte rows are one and three of them.
  static constexpr int atom_bytes = sm90::atom_bytes<row_bytes>;
  // The epilogue (detail::store_output of the sm80 skeleton) stages O in padded rows.
  static constexpr int row_stride = HeadDim + 8;
  static constexpr int chunks_per_row = HeadDim / 8;

  // Shared memory in bytes: swizzled tiles start at 1024-byte boundaries (the swizzle pattern's
  // period), and the dynamic base is aligned up at run time (1024 bytes of slack).
  static constexpr int align(int bytes) { return (bytes + 1023) / 1024 * 1024; }
  static constexpr int q_bytes = align(BlockM * row_bytes);
  // EFTA: 8 checksum rows per K atom below the keys; GEMM I's N takes the plain ones (one more
  // 8-wide score tile), efta_correct's weighted ones are read only after a failed check.
  // f16_pasa (kernel/fwd_pasa_sm90.cuh): the shift rows r_j of recovery_blocks consecutive
  // blocks below the keys, an n8 B operand whose FP32 tile holds q . r_j of block j in column
  // j % 8: one recovery MMA serves eight key blocks (loaded and run on every eighth block).
  static constexpr int recovery_blocks = 8;
  static constexpr int shift_row = BlockN + 8 * ProtectT::k_atoms;
  static constexpr int k_rows = shift_row + (PrecisionT::pasa ? recovery_blocks : 0);
  // GEMM I's checksum tile: beside the scores in GEMM I's wgmma, or for f16_pasa (FP16 scores) an
  // m64n8 wgmma of its own with FP32 accumulators.
  static constexpr int score_checksum_tiles = ProtectT::k_atoms > 0 ? 1 : 0;
  static constexpr int k_tile_bytes = align(k_rows * row_bytes);
  static constexpr int kv_tile_bytes = align(BlockN * row_bytes);
  // The V tile's checksum atom: 16 (efta_correct: 32) of each key's 128 bytes are read, but the
  // swizzle wants whole atoms. GEMM II's N takes 8 columns per V checksum atom.
  // Unprotected f16_pasa on three consumers at head dims up to 96 (codegen's pasa_ones_tile
  // decides alike): an atom of ones, written once, whose n8 tile beside O in GEMM II gives l, so
  // the softmax drops its f16 pair sums (Flash-ABFT's kernel, with that tile, ran 4-6% faster
  // than the unprotected one there: nvidia-h200/pasa_abft_ws_ab.csv).
  static constexpr bool ones_tile =
      PrecisionT::pasa && !ProtectT::enabled && NumWarps == 12 && HeadDim <= 96;
  static constexpr int checksum_tiles = ProtectT::v_atoms > 0 ? ProtectT::v_atoms : ones_tile;
  static constexpr int v_tile_bytes =
      kv_tile_bytes + (checksum_tiles > 0 ? BlockN * atom_bytes : 0);
  // Two or three consumer warpgroups of 16-bit tiles run warp-specialised
  // (kernel/fwd_ws_sm90.cuh): a producer warpgroup loads, the consumers take turns on the tensor
  // cores. Its mbarriers sit after the tiles.
  static constexpr bool warp_specialized =
      NumWarps == 8 || NumWarps == 12;  // two or three consumers
  // Persistent tiles (fwd_ws_sm90.cuh; codegen's persistent_tiles decides alike): unprotected
  // f16 and bf16 warp-specialised kernels at head dims 64 and 128 (causal: two consumers, whose
  // walk ran 1.10-1.16x, three 0.96-0.98x, nvidia-h200/causal_walk_pairs_ab.csv) whose second Q
  // buffer fits beside the stages, the mbarriers and the alignment slack (227 KB, sm_90's opt-in
  // limit). The epilogue stages O unpadded, its 16-byte chunks swizzled, over the tile's own Q
  // buffer.
  static constexpr int one_q_loop_bytes = q_bytes + NumStages * (k_tile_bytes + v_tile_bytes);
  static constexpr bool persistent = warp_specialized && !PrecisionT::pasa && !ProtectT::enabled &&
                                     !Inject && !(Causal && NumWarps == 12) &&
                                     (HeadDim == 64 || HeadDim == 128) &&
                                     one_q_loop_bytes + q_bytes + 256 + 1024 <= 227 * 1024;
  static constexpr int q_buffers = persistent ? 2 : 1;
  static constexpr int loop_bytes = one_q_loop_bytes + (q_buffers - 1) * q_bytes;
  static constexpr int out_bytes = persistent ? 0 : BlockM * row_stride * 2;
  static constexpr int launch_threads = NumWarps * 32 + (warp_specialized ? 128 : 0);
  static constexpr int tiles_bytes = loop_bytes > out_bytes ? loop_bytes : out_bytes;
  // CTAs per SM that `bytes` of shared memory each allow (1 KB of an SM's 228 KB reserved per
  // CTA).
  static constexpr int ctas_for(int bytes) { return 228 * 1024 / (bytes + 1024); }
  // K and V come by TMA (KvTensorMaps) in the warp-specialised kernel, and in the one-warpgroup
  // one where it is unprotected and its stage mbarriers cost no CTA per SM (codegen's
  // kv_tensor_maps decides alike; checksum rows and chunks keep cp.async). With up to two
  // stages they take the allocation's last 16 bytes, which the tiles never reach (aligning a
  // 16-byte aligned base up to 1024 bytes moves it by at most 1008 of the 1024 bytes of slack);
  // with three, 64 bytes after the tiles.
  static constexpr bool stage_barriers_at_end = NumStages <= 2;
  static constexpr bool kv_tma =
      warp_specialized || (ProtectT::k_atoms == 0 && ProtectT::v_atoms == 0 && !Inject &&
                           (stage_barriers_at_end ||
                            ctas_for(tiles_bytes + 1024 + 64) == ctas_for(tiles_bytes + 1024)));
  static constexpr int barrier_bytes = warp_specialized                   ? 256
                                       : kv_tma && !stage_barriers_at_end ? 64
                                                                          : 0;
  static constexpr int smem_bytes = tiles_bytes + barrier_bytes + 1024;
  // As many CTAs per SM as their shared memory allows, up to 384 threads in all: ptxas then fits
  // the registers to them, 168 or more per thread (at 128, with two CTAs of two warpgroups, it
  // spilled and serialised the wgmmas, C7512).
  static constexpr int ctas_by_smem = ctas_for(smem_bytes);
  static constexpr int ctas_by_threads = 384 / launch_threads;
  static constexpr int min_ctas_raw =
      ctas_by_smem < ctas_by_threads ? ctas_by_smem : ctas_by_threads;
  static constexpr int min_ctas = min_ctas_raw < 1 ? 1 : min_ctas_raw;

  static_assert(HeadDim == 32 || HeadDim == 64 || HeadDim == 96 || HeadDim == 128 ||
                    HeadDim == 192 || HeadDim == 256,
                "wgmma tiles: 128-byte rows, 2, 3 or 4 128-byte atoms, or 1 or 3 64-byte atoms "
                "side by side");
  // Head dims 192 and 256: O takes 96 or 128 registers, so only the warp-specialised kernel's
  // consumers hold it beside a 64-key block's scores, and two stages of 128-key blocks would not
  // fit shared memory. GEMM II at 256 is m64n256, the widest wgmma, with no room for a checksum
  // tile (the checksum schemes keep the sm80 skeleton there); at 192 it takes one or two
  // (m64n200, m64n208).
  static_assert(HeadDim <= 128 ||
                    (warp_specialized && NumWarps == 8 && BlockN == 64 &&
                     (HeadDim == 192 || (ProtectT::k_atoms == 0 && ProtectT::v_atoms == 0))),
                "head_dims 192 and 256: 128 x 64, two consumer warpgroups; 256 unprotected");
  static_assert(BlockN == 64 || BlockN == 128, "GEMM I's N: 64 or 128 keys");
  static_assert(NumWarps % 4 == 0 && BlockM == 16 * NumWarps, "64 rows per warpgroup");
  static_assert(NumStages >= 2, "the wgmma skeleton prefetches at least one block");
  static_assert(!BlockSparse, "block-sparse masks run the sm80 skeleton");
  static_assert(ProtectT::k_atoms <= 2 && ProtectT::v_atoms <= 2,
                "protection none, Flash-ABFT or EFTA");
};

namespace detail {

// FlashAttention-4's slack (base-2 logits) where the Hopper 16-bit kernels take it: the
// warp-specialised ones without EFTA, and f16_pasa's one-warpgroup kernel. The f16/bf16
// one-warpgroup kernel keeps rescaling every block: there it ran level unprotected and
// 0.96-1.00x with Flash-ABFT at head dim 64 (wgmma_lazy_rescale_d64_ab.csv).
inline constexpr int kLazyRescaleSlack = 8;

// The online softmax of this warp's key block (one 16-row tile: row halves r = 0, 1) in place:
// s becomes P (FP32, masked keys 0), row_max the new running max (raw scores), rescale the factor
// of the old O and l, and block_sum this thread's share of the block's l.
//
// With kSlack > 0 (FlashAttention-4's lazy rescale) a row keeps its running max until a block's
// max passes it by more than kSlack in base-2 logits: P then stays below 2^kSlack (256 at 8,
// exact in f16 and bf16 as any P is), and rescale is exactly 1 for most blocks, so the caller may
// skip O's multiplies for a warp none of whose rows moved. The max is only a reference: O / l
// and LSE = max + log l do not depend on which one was used.
// kSum = false leaves block_sum alone: the caller takes l from the tensor cores (a ones column).
template <int kST, int kSlack = 0, bool kSum = true>
__device__ __forceinline__ void softmax_block(float (&s)[kST][4], float scale_log2,
                                              float (&row_max)[2], float (&rescale)[2],
                                              float (&block_sum)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float block_max = neg_inf();
#pragma unroll
    for (int nt = 0; nt < kST; ++nt)
      block_max = fmaxf(block_max, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
    float mx = fmaxf(row_max[r], quad_max(block_max));
    // A row that saw a finite score keeps its max while the block stays within the slack (-inf
    // plus the slack is still -inf, so the first finite block always moves it).
    if constexpr (kSlack > 0)
      if (mx * scale_log2 <= row_max[r] * scale_log2 + kSlack) mx = row_max[r];
    const float shift = mx == neg_inf() ? 0.f : mx * scale_log2;  // nothing seen yet: P stays 0
    rescale[r] = fast_exp2(row_max[r] * scale_log2 - shift);
    row_max[r] = mx;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < kST; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float& x = s[nt][2 * r + c];
        x = fast_exp2(fmaf(x, scale_log2, -shift));
        if constexpr (kSum) sum += x;
      }
    if constexpr (kSum) block_sum[r] = sum;
  }
}

// efta_correct's weighted S checksum of this thread's scores in row `q_row` of the Q tile: q
// times the thread's pair of weighted checksum rows (hi + lo, rows block_n + 8 + 2 quad_t and up
// of the K tile at sKs), in FP32 from shared memory. Not unrolled: the rare path after a failed
// check stays out of the hot loop's registers.
template <class T, bool Bf16>
__device__ __forceinline__ float weighted_score_checksum(u32 sQ, u32 sKs, int q_row, int quad_t) {
  const int hi = T::block_n + 8 + 2 * quad_t;
  float sum = 0.f;
#pragma unroll 1
  for (int c = 0; c < T::chunks_per_row; ++c) {
    const uint4_ q =
        sm80::ld_shared_u128(sQ + sm90::tile_offset<T::row_bytes>(T::block_m, q_row, c));
    const uint4_ h = sm80::ld_shared_u128(sKs + sm90::tile_offset<T::row_bytes>(T::k_rows, hi, c));
    const uint4_ l =
        sm80::ld_shared_u128(sKs + sm90::tile_offset<T::row_bytes>(T::k_rows, hi + 1, c));
    const u32 qw[4] = {q.x, q.y, q.z, q.w}, hw[4] = {h.x, h.y, h.z, h.w},
              lw[4] = {l.x, l.y, l.z, l.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float q0, q1, h0, h1, l0, l1;
      unpack2<Bf16>(qw[i], q0, q1);
      unpack2<Bf16>(hw[i], h0, h1);
      unpack2<Bf16>(lw[i], l0, l1);
      sum = fmaf(q0, h0 + l0, fmaf(q1, h1 + l1, sum));
    }
  }
  return sum;
}

// Copies (cp.async, 16-byte chunks) by `Threads` threads, `thread` the caller's index among them;
// the caller commits the group or arrives on its barrier. f16_pasa: the shift rows r_j of the
// T::recovery_blocks blocks from `first` below the keys of the K tile at `dk`
// (FwdWgmmaTraits::shift_row), from this KV head's `shift` rows; past its last block they read
// the next head's rows or the workspace's slack (runtime::PasaLayout), whose recoveries are never
// used. Checksum schemes: each key's checksum chunks `src` in the atom after its head_dim ones in
// the V tile at `dv`.
template <class T, int Threads>
__device__ __forceinline__ void load_shift_rows(u32 dk, const u16* shift, int first, int thread) {
  constexpr int chunks = T::recovery_blocks * T::chunks_per_row;
  const u16* src = shift + first * T::head_dim;
  for (int c = thread; c < chunks; c += Threads)
    sm80::cp_async_16(
        dk + sm90::tile_offset<T::row_bytes>(T::k_rows, T::shift_row + c / T::chunks_per_row,
                                             c % T::chunks_per_row),
        src + c * 8, true);
}
template <class T, int Threads>
__device__ __forceinline__ void load_v_checksum_chunks(u32 dv, const unsigned char* src,
                                                       int thread) {
  constexpr int kCT = T::checksum_tiles;
  for (int c = thread; c < T::block_n * kCT; c += Threads)
    sm80::cp_async_16(
        dv + T::kv_tile_bytes + sm90::swizzled_offset<T::atom_bytes>(c / kCT, c % kCT),
        src + c * 16, true);
}

// EFTA: each block's 8 (efta_correct: 16) checksum rows `src` below the keys of the K tile at
// `dk`, by cp.async like load_shift_rows.
template <class T, int Threads>
__device__ __forceinline__ void load_k_checksum_rows(u32 dk, const unsigned char* src, int thread) {
  constexpr int chunks = 8 * T::Protect::k_atoms * T::chunks_per_row;
  for (int c = thread; c < chunks; c += Threads)
    sm80::cp_async_16(
        dk + sm90::tile_offset<T::row_bytes>(T::k_rows, T::block_n + c / T::chunks_per_row,
                                             c % T::chunks_per_row),
        src + c * 16, true);
}

// TMA copies of key block `key0` (FwdWgmmaTraits::kv_tma), by one thread, each box one swizzle
// atom column (64 channels, or 32 in 64-byte atoms) completing its bytes on `bar`: its K rows into
// the K tile at dk (atom columns T::k_rows rows apart), its V rows into the V tile at dv, and
// f16_pasa's shift rows `shift_row` .. + 7 of the workspace (runtime::PasaLayout) below the keys.
// The caller expects the bytes (kv_tma_bytes, shift_tma_bytes) on the barrier first. The
// one-warpgroup kernels' mbarrier of a stage: stage_barrier (fwd_common.cuh).
template <class T>
inline constexpr u32 kv_tma_bytes = u32{T::block_n * T::row_bytes};  // one K or V tile
template <class T>
inline constexpr u32 shift_tma_bytes = u32{T::recovery_blocks * T::row_bytes};
// A key block's rows of `map` (K or V) into the tile at dst, whose atom columns are TileRows
// rows apart (K: T::k_rows, V: T::block_n).
template <class T, int TileRows>
__device__ __forceinline__ void tma_load_rows(u32 dst, const TensorMap& map, int key0, int head_kv,
                                              int batch, u32 bar) {
  constexpr int atom = T::atom_bytes;
#pragma unroll
  for (int a = 0; a < T::row_bytes / atom; ++a)
    sm90::tma_load(dst + a * TileRows * atom, map, a * atom / 2, key0, head_kv, batch, bar);
}
template <class T>
__device__ __forceinline__ void tma_load_shift_rows(u32 dk, const KvTensorMaps& maps, int shift_row,
                                                    u32 bar) {
  constexpr int atom = T::atom_bytes;
#pragma unroll
  for (int a = 0; a < T::row_bytes / atom; ++a)
    sm90::tma_load(dk + (a * T::k_rows + T::shift_row) * atom, maps.shift, a * atom / 2, shift_row,
                   bar);
}

// EFTA: |q| of this thread's two rows of the tile at `q` (its row 0 is global row `row0`), the
// larger of the two: the S thresholds are relative to it. From global memory, each lane of a quad
// summing a quarter of a row.
template <class T>
__device__ __forceinline__ float efta_q_norm(const AttentionParams& p, const u16* q, int row0,
                                             int warp_row, int lane) {
  constexpr int span = T::head_dim / 4;
  float q_norm = 0.f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp_row + lane / 4 + r * 8;
    float sq = 0.f;
    if (row0 + row < p.seqlen_q) {
      const uint4_* src =
          reinterpret_cast<const uint4_*>(q + row * p.q_seq_stride + (lane % 4) * span);
#pragma unroll
      for (int i = 0; i < span / 8; ++i) {
        const uint4_ c = src[i];
        const u32 words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float x0, x1;
          unpack2<protect::IsBf16<typename T::Precision>::value>(words[j], x0, x1);
          sq += x0 * x0 + x1 * x1;
        }
      }
    }
    q_norm = fmaxf(q_norm, sqrtf(quad_sum(sq)));
  }
  return q_norm;
}

// What EFTA's softmax of one key block leaves for GEMM II and the reports after it.
template <int kST>
struct EftaBlock {
  u32 p_packed[kST][2];                    // P as GEMM II's A operand
  float rescale[2];                        // of the old O and l
  unsigned alarms = 0;                     // rows whose product check failed (bit r)
  float alarm_dev = 0.f, alarm_tol = 0.f;  // the last one's deviation and bound
};

// EFTA's softmax of this warp's key block `n_block` (one 16-row tile, row halves r = 0, 1) from
// GEMM I's scores s and checksum tile sc: efta_correct first checks GEMM I on the raw scores and
// rebuilds a single faulty element (its weighted checksum from Q at sQ and the K tile at sKs);
// then the mask, the new running max, SNVR's lower bound and the probabilities with the product
// check fused in (efta_probs_row). `rows` is the tile's first row in the CTA's Q tile, `row0` the
// CTA's first global row. `inject(site, it, values, n)` is the rescale's injection point.
template <class T, bool kMasked, int kST, class Inject>
__device__ __forceinline__ void efta_softmax(const AttentionParams& p, float (&s)[kST][4],
                                             const float (&sc)[4], EftaBlock<kST>& out, u32 sQ,
                                             u32 sKs, int row0, int rows, int n_block, int it,
                                             int lane, int diag, float q_norm, float k_norm,
                                             float (&row_max)[2], float (&row_sum)[2],
                                             float (&lower_bound)[2], int batch, int head,
                                             Inject&& inject) {
  using Protect = typename T::Protect;
  const int quad_t = lane % 4;
  auto global_row = [&](int r) { return row0 + rows + lane / 4 + r * 8; };
  // efta_correct: the raw scores' sums per group of tiles, for the GEMM I check and then the
  // product check's exponent sums (unmasked blocks).
  ScoreGroupSums<kST, Protect::correct> raw_groups[2];
  if constexpr (Protect::correct) {
    const float walk_tol =
        protect::score_walk_tol<T::head_dim>(p.tol_scores, p.tol_floor, q_norm * k_norm);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float ref = sc[2 * r] + sc[2 * r + 1];
      const float e1 = ref - sum_score_groups(s, r, raw_groups[r]);
      float tol;
      if (!protect::scores_within(
              p.tol_scores, e1, ref, walk_tol, [&] { return thread_row_sum<true>(s, r); }, tol)) {
        const float sw = weighted_score_checksum<T, protect::IsBf16<typename T::Precision>::value>(
            sQ, sKs, rows + lane / 4 + r * 8, quad_t);
        const int bad = protect::correct_row(s, r, e1, ref, sw);
        sum_score_groups(s, r, raw_groups[r]);  // with the rebuilt score
        record_fault(p.fault_log, batch, head, global_row(r),
                     bad >= 0 ? n_block * T::block_n + protect::row_group_column(bad, quad_t) : -1,
                     fault_stage_scores, bad >= 0, fabsf(e1), tol);
      }
    }
  }
  // Masking; the product check needs, per row, the masked raw scores (they are in the checksum
  // but not in P) and how many elements stay.
  float masked_sum[2] = {0.f, 0.f};
  int n_valid[2] = {2 * kST, 2 * kST};
  if (kMasked)
    for_each_masked<1, kST, T::causal>(row0 + rows, n_block * T::block_n, lane, p.seqlen_k, diag,
                                       [&](int, int nt, int i) {
                                         masked_sum[i / 2] += s[nt][i];
                                         --n_valid[i / 2];
                                         s[nt][i] = neg_inf();
                                       });
  float block_max[2], shift[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float bm = neg_inf();
#pragma unroll
    for (int nt = 0; nt < kST; ++nt) bm = fmaxf(bm, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
    block_max[r] = quad_max(bm);
    const float mx = fmaxf(row_max[r], block_max[r]);
    shift[r] = mx == neg_inf() ? 0.f : mx * p.scale_log2;  // nothing seen yet: P stays 0
    out.rescale[r] = fast_exp2(row_max[r] * p.scale_log2 - shift[r]);
    row_max[r] = mx;
  }
  inject(fault_site_rescale, it, out.rescale, 2);  // before l, O and SNVR's bound take it
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lower_bound[r] =
        snvr_lower_bound(lower_bound[r], out.rescale[r], block_max[r], p.scale_log2, shift[r]);
    efta_probs_row<T, kMasked>(
        p, s, out.p_packed, r, row_max[r], shift[r], sc[2 * r] + sc[2 * r + 1] - masked_sum[r],
        n_valid[r], q_norm, k_norm, raw_groups[r], row_sum[r], out.rescale[r], out.alarms, 1u << r,
        out.alarm_dev, out.alarm_tol,
        [&](int nt, int c, float& x) {
          if constexpr (T::inject)
            inject_value_at(p.fault, fault_site_probs, it, nt * 4 + 2 * r + c, kST * 4, x);
        },
        [&](int j, float x) {
          record_fault(p.fault_log, batch, head, global_row(r),
                       n_block * T::block_n + protect::row_group_column(j, quad_t),
                       fault_stage_probs, Protect::correct, x, 0.f);
        });
  }
}

// The product check's reports of a key block (EftaBlock::alarms), issued while GEMM II runs.
template <int kST>
__device__ __forceinline__ void efta_report_alarms(const AttentionParams& p,
                                                   const EftaBlock<kST>& b, int global_row0,
                                                   int batch, int head) {
  if (b.alarms != 0)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if ((b.alarms >> r) & 1u)
        record_fault(p.fault_log, batch, head, global_row0 + r * 8, -1, fault_stage_probs, false,
                     b.alarm_dev, b.alarm_tol);
}

// Row half r's sum of the 16-bit P that GEMM II multiplied into O: the ones column of its checksum
// tile `oc` (protect/checksum.cuh), in every lane.
template <class T, int kCT>
__device__ __forceinline__ float ones_column(const float (&oc)[kCT][4], int r, int lane,
                                             bool second = false) {
  // Shuffled from a copy: a shuffle of the accumulator register itself made ptxas serialise
  // every wgmma of the kernel (C7511).
  float even = oc[0][2 * r];
  asm volatile("" : "+f"(even));
  using Pr = typename T::Protect;
  return __shfl_sync(0xffffffffu, even, second ? Pr::second_ones_lane(lane) : Pr::ones_lane(lane));
}

// The row-sum fault site where l is the ones column (Flash-ABFT's injection builds): the flip of
// l as this lane reads it (ones_column), added to the accumulator of the lane it reads from.
// GEMM II of the blocks before `it` is done.
template <class T, int kMT, int kCT>
__device__ __forceinline__ void inject_ones_row_sum(const FaultPlanParams& f, int it,
                                                    float (&oc)[kMT][kCT][4], int lane) {
  float seen[kMT * 2], flipped[kMT * 2];
#pragma unroll
  for (int i = 0; i < kMT * 2; ++i) seen[i] = flipped[i] = ones_column<T>(oc[i / 2], i % 2, lane);
  inject_values(f, fault_site_row_sum, it, flipped, kMT * 2);
#pragma unroll
  for (int i = 0; i < kMT * 2; ++i) {
    float moved = flipped[i] == seen[i] ? 0.f : flipped[i] - seen[i];
    // The quad's one flip to the lane it reads l from (Checksum::ones_lane).
    moved += __shfl_xor_sync(0xffffffffu, moved, 1);
    moved += __shfl_xor_sync(0xffffffffu, moved, 2);
    if (lane == T::Protect::ones_lane(lane)) oc[i / 2][0][2 * (i % 2)] += moved;
  }
}

// Flash-ABFT's l where it is the ones column (fwd_ws_sm90.cuh): l is common to O and its checksum,
// so the output check cannot see it. But the tile holds the column twice (Checksum, t = 1 and
// t = 3): the same MMA of the same P against the same ones, rescaled alike, so the copies agree
// bit for bit when clean (2^-20 of slack). A fault in either copy's accumulator or its lane's
// rescale sets them apart. And a clean row keeps l in a range: the key that set the running max
// gave P = 1 (its f16 or bf16 rounding no lower), and no P exceeds 2^kSlack (FlashAttention-4's
// lazy rescale; 1 without it) by more than a 16-bit ulp. So l in [0.5, keys 2^kSlack (1 +
// 1.6e-2)]: a sign flip, a NaN and most exponent flips fall outside, whichever copy they hit.
template <class T, int kSlack>
__device__ __forceinline__ void check_ones_row_sum(const AttentionParams& p, float l, float copy,
                                                   int row, float row_max, int lane, int batch,
                                                   int head) {
  if (row >= p.seqlen_q || row_max == neg_inf()) return;  // no row, or no key: l = 0
  const int diag = p.seqlen_k - p.seqlen_q;
  const int keys = T::causal ? max(0, min(p.seqlen_k, row + diag + 1)) : p.seqlen_k;
  const float most = keys * static_cast<float>(1 << kSlack) * (1.f + 1.6e-2f);
  const float apart = fabsf(l - copy), slack = 1e-6f * fabsf(l);
  if (!(l >= 0.5f && l <= most && apart <= slack) && lane % 4 == 0)
    record_fault(p.fault_log, batch, head, row, -1, fault_stage_row_sum, false,
                 apart <= slack ? l : apart, apart <= slack ? most : slack);
}

// The epilogue's l of row half r under EFTA: this thread's share of the FP32 sum `row_sum`
// against the ones column of GEMM II's checksum tile `oc`, checked by efta_row_sum.
template <class T, int kCT>
__device__ __forceinline__ float efta_checked_row_sum(const AttentionParams& p,
                                                      const float (&oc)[kCT][4], int r,
                                                      float row_sum, float lower_bound, int row,
                                                      float row_max, int lane, int batch,
                                                      int head) {
  return efta_row_sum<T>(p, quad_sum(row_sum), ones_column<T>(oc, r, lane), lower_bound, row,
                         row_max, lane, batch, head);
}

// The epilogue's l of row halves 0 and 1 from a warp's accumulators `acc` (O's kOT tiles, then
// the checksum tiles): under EFTA the ones column checked against the FP32 sum `row_sum` and
// SNVR's `lower_bound`; where l is the ones column (kOnesRowSum: Flash-ABFT) that column, its
// range checked with the lazy rescale's slack kSlack; otherwise (f16_pasa's EFTA too, whose l the
// second evaluation checks) the quad's sum of `row_sum`.
template <class T, bool kOnesRowSum, int kSlack, int kOT, int kNT, class GlobalRow>
__device__ __forceinline__ void epilogue_row_sums(
    const AttentionParams& p, const float (&acc)[kNT][4], const float (&row_sum)[2],
    const float (&lower_bound)[2], const float (&row_max)[2], float (&l)[2], GlobalRow&& global_row,
    int lane, int batch, int head) {
  constexpr int kCT = kNT - kOT;
  [[maybe_unused]] auto& checksums =
      reinterpret_cast<const float(&)[kCT > 0 ? kCT : 1][4]>(acc[kOT]);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if constexpr (T::Protect::k_atoms > 0 && !T::Precision::pasa) {
      l[r] = efta_checked_row_sum<T>(p, checksums, r, row_sum[r], lower_bound[r], global_row(r),
                                     row_max[r], lane, batch, head);
    } else if constexpr (kOnesRowSum) {
      l[r] = ones_column<T>(checksums, r, lane);
      if constexpr (T::Protect::enabled)  // not unprotected f16_pasa's tile of ones
        check_ones_row_sum<T, kSlack>(p, l[r], ones_column<T>(checksums, r, lane, true),
                                      global_row(r), row_max[r], lane, batch, head);
    } else {
      l[r] = quad_sum(row_sum[r]);
    }
  }
}

}  // namespace detail

template <class T>
__device__ __forceinline__ void attention_fwd_sm90(const AttentionParams& p,
                                                   const KvTensorMaps& maps = {}) {
  using P = typename T::Precision;
  constexpr bool kBf16 = protect::IsBf16<P>::value;
  using Protect = typename T::Protect;
  constexpr int kST = T::s_tiles;
  constexpr int kOT = T::o_tiles;
  constexpr int kCT = T::checksum_tiles;
  constexpr int kSC = T::score_checksum_tiles;
  constexpr bool kEfta = Protect::k_atoms > 0;
  constexpr int kStages = T::num_stages;
  constexpr int kRowBytes = T::row_bytes;
  constexpr bool kOneGroup = T::num_warps == 4;  // one warpgroup per CTA
  // Flash-ABFT: l is the ones column of GEMM II's checksum tile, as in fwd_ws_sm90.cuh.
  constexpr bool kOnesRowSum = kCT > 0 && !kEfta;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const u32 sQ = (sm80::smem_addr(smem_raw) + 1023u) & ~1023u;
  const u32 sK = sQ + T::q_bytes;
  const u32 sV = sK + kStages * T::k_tile_bytes;

  int m_block, head, batch;
  detail::tile_coords<T>(p, m_block, head, batch);
  const int head_kv = head / p.group_size;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warp_row = warp * 16;  // this warp's 16 rows of the CTA's tile
  const int quad_t = lane % 4;     // this thread's column group in every 8-wide tile
  const int group_row = sm90::warpgroup_index() * 64;  // its warpgroup's 64 rows

  const int row0 = m_block * T::block_m;
  const int diag = p.seqlen_k - p.seqlen_q;  // bottom-right causal alignment
  const int n_blocks = detail::key_blocks<T>(p, row0, diag);

  const detail::HeadOperands in = detail::head_operands(p, batch, head, head_kv, row0);
  const u16 *q = in.q, *k = in.k, *v = in.v;

  // Protection: this KV head's checksums (protect/workspace.cuh).
  const ChecksumWorkspace cs = checksum_workspace(p.batch, p.heads_kv, p.seqlen_k, T::head_dim,
                                                  T::block_n, Protect::k_atoms, Protect::v_atoms);
  const long long cs_head = static_cast<long long>(batch) * p.heads_kv + head_kv;
  const unsigned char* cs_base = static_cast<const unsigned char*>(p.checksums);

  // One cp.async group per key block: its K rows (and EFTA's checksum rows below them), then its
  // V rows (and their checksum chunks, chunks 0.. of each key's extra atom); rows past the
  // sequence are zeros (their scores are masked, their P is 0), as are their checksums.
  // Unprotected (T::kv_tma): thread 0's TMA copies of both onto the stage's mbarrier instead.
  constexpr bool kTma = T::kv_tma;
  auto full = [&](int stage) {
    return detail::stage_barrier<T>(sm80::smem_addr(smem_raw), sQ, stage);
  };
  auto load_kv = [&](int stage, int n_block) {
    const int key0 = n_block * T::block_n;
    const u32 dk = sK + stage * T::k_tile_bytes;
    const u32 dv = sV + stage * T::v_tile_bytes;
    if constexpr (kTma) {
      if (threadIdx.x == 0) {
        sm90::mbarrier_expect_tx(full(stage), 2 * detail::kv_tma_bytes<T>);
        detail::tma_load_rows<T, T::k_rows>(dk, maps.k, key0, head_kv, batch, full(stage));
        detail::tma_load_rows<T, T::block_n>(dv, maps.v, key0, head_kv, batch, full(stage));
      }
      return;
    }
    sm90::load_rows_swizzled<T::threads, T::block_n, kRowBytes, T::k_rows>(
        dk, k + key0 * p.k_seq_stride, p.k_seq_stride * 2, p.seqlen_k - key0, kRowBytes);
    if constexpr (kEfta)
      detail::load_k_checksum_rows<T, T::threads>(
          dk,
          cs_base + cs.k_offset + cs_head * cs.k_per_head +
              static_cast<long long>(n_block) * 8 * Protect::k_atoms * T::chunks_per_row * 16,
          threadIdx.x);
    sm90::load_rows_swizzled<T::threads, T::block_n, kRowBytes>(
        dv, v + key0 * p.v_seq_stride, p.v_seq_stride * 2, p.seqlen_k - key0, kRowBytes);
    if constexpr (kCT > 0) {
      detail::load_v_checksum_chunks<T, T::threads>(
          dv, cs_base + cs_head * cs.v_per_head + key0 * 16ll * kCT, threadIdx.x);
    }
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
  if constexpr (kTma) {
    // Q for the tensor cores (the cp.async pipeline waits for Q's group with the first
    // block's).
    sm80::cp_async_wait<0>();
    sm90::fence_async_shared();
    __syncthreads();
  }

  // O, then (Flash-ABFT) its checksum tile: one accumulator array for GEMM II's wgmma.
  float acc[1][kOT + kCT][4];
  float row_max[1][2];  // raw scores
  float row_sum[1][2];  // this thread's share; the quad is summed at the end
  detail::clear_accumulators(acc, row_max, row_sum);
  auto& o = reinterpret_cast<float(&)[1][kOT][4]>(acc);
  auto inject = [&](int site, int it, float* values, int n) {
    if constexpr (T::inject) inject_values(p.fault, site, it, values, n);
  };
  auto global_row = [&](int r) { return row0 + warp_row + lane / 4 + r * 8; };

  // EFTA: |q| of this thread's rows, the larger of the two (the S thresholds are relative to it),
  // from global memory: each lane of a quad sums a quarter of a row. SNVR's lower bound of l per
  // row; the sum of |k| over this thread's keys of each block (checksum workspace).
  float lower_bound[2] = {0.f, 0.f};
  const float* k_norms =
      reinterpret_cast<const float*>(cs_base + cs.knorm_offset + cs_head * cs.knorm_per_head);
  float q_norm = 0.f;
  if constexpr (kEfta) q_norm = detail::efta_q_norm<T>(p, q, row0, warp_row, lane);

  auto step = [&](const int it, const int n_block, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const int stage = it % kStages;
    const float k_norm = kEfta ? k_norms[n_block * 4 + quad_t] : 0.f;
    if constexpr (kTma)
      pipeline.begin_step(it, full);
    else
      pipeline.begin_step(it, load_kv);

    // GEMM I: this warpgroup's 64 rows of S = Q K^T (EFTA: and its checksum tile, sc).
    const u32 sKs = sK + stage * T::k_tile_bytes;
    float s_all[kST + kSC][4];
    auto& s = reinterpret_cast<float(&)[kST][4]>(s_all);
    float(&sc)[4] = s_all[kST + kSC - 1];
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < T::head_dim / 16; ++ks)
      sm90::wgmma_16bit_ss<kBf16>(reinterpret_cast<float(&)[(kST + kSC) * 4]>(s_all),
                                  sm90::k_step_descriptor<kRowBytes>(sQ, T::block_m, group_row, ks),
                                  sm90::k_step_descriptor<kRowBytes>(sKs, T::k_rows, 0, ks),
                                  ks > 0);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();  // GEMM I, and the previous GEMM II (O is rescaled below)
    pipeline.after_gemm1(it, load_kv);
    inject(fault_site_scores, it, &s[0][0], kST * 4);
    // The checksum site is the concatenation [S checksums, O checksums]: S's are hit here.
    constexpr int n_sc = kSC * 4, n_oc = kCT * 4;
    if constexpr (T::inject && n_sc > 0)
      if (p.fault.element % (n_sc + n_oc) < n_sc) inject(fault_site_checksum, it, sc, n_sc);

    float rescale[2];
    // EFTA: P packed for GEMM II, the rescale and the product check's alarms.
    [[maybe_unused]] detail::EftaBlock<kEfta ? kST : 1> efta;
    if constexpr (kEfta) {
      detail::efta_softmax<T, kMasked>(p, s, sc, efta, sQ, sKs, row0, warp_row, n_block, it, lane,
                                       diag, q_norm, k_norm, row_max[0], row_sum[0], lower_bound,
                                       batch, head, inject);
      rescale[0] = efta.rescale[0];
      rescale[1] = efta.rescale[1];
    } else {
      if (kMasked)
        detail::for_each_masked<1, kST, T::causal>(
            row0 + warp_row, n_block * T::block_n, lane, p.seqlen_k, diag,
            [&](int, int nt, int i) { s[nt][i] = neg_inf(); });
      float block_sum[2];
      detail::softmax_block<kST, 0, !kOnesRowSum>(s, p.scale_log2, row_max[0], rescale, block_sum);
      if constexpr (T::inject) {  // the sm80 skeleton's points: rescale before l and O take it
        inject(fault_site_probs, it, &s[0][0], kST * 4);
        inject(fault_site_rescale, it, rescale, 2);
      }
      if constexpr (!kOnesRowSum)
#pragma unroll
        for (int r = 0; r < 2; ++r) row_sum[0][r] = row_sum[0][r] * rescale[r] + block_sum[r];
    }
    if constexpr (T::inject) {
      inject(fault_site_row_max, it, row_max[0], 2);
      if constexpr (kOnesRowSum)
        detail::inject_ones_row_sum<T>(p.fault, it,
                                       reinterpret_cast<float(&)[1][kCT][4]>(acc[0][kOT]), lane);
      else
        inject(fault_site_row_sum, it, row_sum[0], 2);
    }
#pragma unroll
    for (int nt = 0; nt < kOT + kCT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[0][nt][i] *= rescale[i / 2];

    // GEMM II: O += P V, P packed from the S accumulators (keys 16 kc .. 16 kc + 15).
    const u32 sVs = sV + stage * T::v_tile_bytes;
    u32 pa[kST / 2][4];
#pragma unroll
    for (int kc = 0; kc < kST / 2; ++kc) {
      if constexpr (kEfta) {
        pa[kc][0] = efta.p_packed[2 * kc][0];
        pa[kc][1] = efta.p_packed[2 * kc][1];
        pa[kc][2] = efta.p_packed[2 * kc + 1][0];
        pa[kc][3] = efta.p_packed[2 * kc + 1][1];
      } else {
        pa[kc][0] = P::pack(s[2 * kc][0], s[2 * kc][1]);
        pa[kc][1] = P::pack(s[2 * kc][2], s[2 * kc][3]);
        pa[kc][2] = P::pack(s[2 * kc + 1][0], s[2 * kc + 1][1]);
        pa[kc][3] = P::pack(s[2 * kc + 1][2], s[2 * kc + 1][3]);
      }
    }
    sm90::wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < kST / 2; ++kc)
      sm90::wgmma_16bit_rs<kBf16>(
          reinterpret_cast<float(&)[(kOT + kCT) * 4]>(acc[0]), pa[kc],
          sm90::n_major_k_step_descriptor<T::atom_bytes>(sVs, T::block_n, kc));
    sm90::wgmma_commit();
    // The product check's reports, while GEMM II runs.
    if constexpr (kEfta) detail::efta_report_alarms(p, efta, global_row(0), batch, head);
    if constexpr (!kOneGroup || T::inject) sm90::wgmma_wait<0>();
    if constexpr (T::inject) {
      inject(fault_site_output, it, &o[0][0][0], kOT * 4);
      if constexpr (kCT > 0) detail::inject_output_checksums<n_sc, n_oc>(p.fault, it, acc[0][kOT]);
    }
  };

  detail::walk_key_blocks<T>(
      p.seqlen_k, row0, diag, n_blocks, [](int b) { return b; }, step);
  sm90::wgmma_wait<0>();
  sm80::cp_async_wait<0>();
  __syncthreads();

  // Row sums, checked under EFTA (detail::efta_row_sum against the ones column: efta_detect's
  // odd column groups, efta_correct's second atom).
  float l[1][2];
  detail::epilogue_row_sums<T, kOnesRowSum, 0, kOT>(p, acc[0], row_sum[0], lower_bound, row_max[0],
                                                    l[0], global_row, lane, batch, head);
  if constexpr (kCT > 0)
    detail::check_output<T>(p, o, reinterpret_cast<const float(&)[1][kCT][4]>(acc[0][kOT]), l,
                            reinterpret_cast<const float*>(cs_base + cs.vmax_offset +
                                                           cs_head * cs.vmax_per_head)[quad_t],
                            n_blocks, batch, head, lane, [&](int, int r) { return global_row(r); });
  detail::store_output<T>(p, o, l, row_max, p.scale_log2, batch, head, row0, warp_row, lane, sQ);
}

}  // namespace ftattn
