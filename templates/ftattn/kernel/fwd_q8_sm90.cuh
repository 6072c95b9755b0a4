// Forward skeleton for fp8_e4m3 and int8 on Hopper (sm_90a), unprotected or with Flash-ABFT (int8
// also EFTA, detect and correct): the 8-bit skeleton's loop (kernel/fwd_q8_sm80.cuh) with warpgroup
// MMAs. On sm_90 ptxas emulates mma.sync e4m3 with f16 MMAs, so only wgmma reaches Hopper's FP8
// rate; int8's s8 wgmma outruns mma.sync s8 too.
//
// Each warpgroup (4 warps) owns 64 query rows. GEMM I, S = Q K^T, reads Q and K from shared
// memory; GEMM II, O += P V, takes P from registers and V^T from shared memory. wgmma needs
// 8-bit operands K-major: Q and K rows are head_dim bytes of a token, V^T rows block_n keys of a
// channel (the quantisation kernels already write V transposed, keys permuted within groups of
// 16 so that the S accumulators are P's A fragments as they stand; the wgmma A fragment is the
// m16n8k32 one per warp). Tiles are stored in the wgmma swizzle of their row width (64 or 128
// bytes; 256-byte rows as two 128-byte atoms side by side). K, its scales and V^T arrive through
// a num_stages-deep pipeline of TMA copies, which one thread issues per key block onto the stage's
// mbarrier (the tensor maps: params.cuh's Q8TensorMaps). int8 keeps O in INT32 and rescales
// it only when a row's max outgrows its reference (q8::lazy_softmax); fp8 computes each block's
// P V from zero and adds it to its FP32 O on the CUDA cores (q8::fold_output).
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm90/pipeline.cuh"
#include "ftattn/arch/sm90/tile_load.cuh"
#include "ftattn/arch/sm90/tma.cuh"
#include "ftattn/arch/sm90/wgmma.cuh"
#include "ftattn/common/math.cuh"
#include "ftattn/common/types.cuh"
#include "ftattn/kernel/fwd_common.cuh"
#include "ftattn/kernel/fwd_q8_sm80.cuh"
#include "ftattn/kernel/quantize_sm80.cuh"
#include "ftattn/params.cuh"
#include "ftattn/protect/fp8_checksums.cuh"
#include "ftattn/protect/none.cuh"

namespace ftattn {

template <int HeadDim, int BlockM, int BlockN, int NumWarps, int NumStages, class PrecisionT,
          class ProtectT, bool Causal, bool Inject>
struct Q8WgmmaTraits : TileKnobs<HeadDim, BlockM, BlockN, NumWarps, NumStages, PrecisionT, ProtectT,
                                 Causal, /*BlockSparse=*/false, Inject> {
  // Shared memory in bytes: swizzled tiles start at 1024-byte boundaries (the swizzle pattern's
  // period), and the dynamic base is aligned up at run time (1024 bytes of slack).
  static constexpr int align(int bytes) { return (bytes + 1023) / 1024 * 1024; }
  static constexpr int q_bytes = align(BlockM * HeadDim);
  // A stage holds a key block: its V^T rows (head_dim rows of block_n bytes), one more swizzle
  // atom of such rows (the tail), then its K rows. Being the atom after V^T's rows, the tail
  // rides in GEMM II as columns head_dim + 0 .. 7 of its accumulators. Its eight rows:
  //   int8  0-1 Flash-ABFT's digit rows of V^T (protect/int8_checksums.cuh, by TMA with V^T),
  //         2-5 the keys' scales (a float per key, by TMA with K), 6 unused, 7 64s (written
  //         once: 64 l, whose low 6 bits keep l's fractions through the folds);
  //   fp8   0-3 Flash-ABFT's E4M3 rows (protect/fp8_checksums.cuh: the channel sum's three
  //         digits and the magnitude, by TMA with V^T), 4-7 the keys' scales; unprotected, the
  //         scales in rows 2-5 as int8's.
  // int8 efta_correct moves the digit rows to the atom after the tail (its own rows: below).
  static constexpr bool checksum = ProtectT::enabled;
  static constexpr bool fp8_checksum = checksum && PrecisionT::float_accumulators;
  static constexpr bool efta = ProtectT::efta;
  static constexpr bool correct = efta && ProtectT::correct;
  static constexpr int digit_rows = !checksum ? 0 : fp8_checksum ? 4 : correct ? 8 : 2;
  static constexpr int tail_offset = HeadDim * BlockN;
  static constexpr int tail_row = BlockN;  // bytes of a V^T row
  // int8 efta_correct: 8 V^T rows of their own in the atom after the tail, which GEMM II's second
  // checksum tile reads (protect/int8_checksums.cuh, int8_v_wgmma_rows): per key the digits of
  // its channel sum (columns C0 and C1, quad lane 0's) and of sum_d (d + 1) v_d (W0 and W1 lane
  // 1's, W2 lane 2's), so that a single wrong O element is located and rebuilt
  // (q8::repair_output). The tail's rows 0-1 are unused there; 64 l stays in row 7.
  static constexpr int digits_offset = tail_offset + (correct ? 8 * tail_row : 0);
  static constexpr int sums_tile = correct ? 1 : 0;  // the checksum tile holding C0 and C1
  static constexpr int scale_offset = tail_offset + (fp8_checksum ? 4 : 2) * tail_row;
  static constexpr int l_row_offset = tail_offset + 7 * tail_row;
  static constexpr int k_offset = align(tail_offset + (correct ? 16 : 8) * tail_row);
  // int8 EFTA: 16 K rows below the block's keys, the two base-128 digit tiles of the strided
  // sums sum_nt K[8 nt + e] (protect/int8_checksums.cuh, by TMA with K), so that GEMM I (m64n80
  // or m64n144) gives each thread's checksum columns beside its scores. efta_correct takes no
  // weighted rows here: a failed column is computed again (q8::repair_scores).
  static constexpr int k_check_rows = efta ? 16 : 0;
  static constexpr int gemm1_n = BlockN + k_check_rows;
  static constexpr int stage_bytes = align(k_offset + gemm1_n * HeadDim);
  // Flash-ABFT's checksum columns. int8: the digits of each key's channel sum, and 64 l; s32
  // wgmmas take n in steps of 16 past 64, so two n8 tiles ride in GEMM II; the second reads the
  // rows after the tail (the stage's K rows), which no check looks at. fp8: one n8 tile more in
  // every piece of GEMM II (n72), FP32; the last piece's holds the checksum columns, folded as
  // O is (q8::fold_piece).
  static constexpr int checksum_tiles = !checksum ? 0 : fp8_checksum ? 1 : 2;
  // The bytes of a key block's TMA copies (q8::load_k_block, load_vt_block).
  static constexpr int k_tma_bytes = gemm1_n * HeadDim + BlockN * 4;
  static constexpr int v_tma_bytes = HeadDim * BlockN + digit_rows * BlockN;
  static constexpr int o_stride = HeadDim * 2 + 16;  // the epilogue stages 16-bit O rows
  static constexpr int loop_bytes = q_bytes + NumStages * stage_bytes;
  static constexpr int out_bytes = BlockM * o_stride;
  // P = 2^(t + p_log2_range): int8's P here is unsigned (q8::lazy_softmax), fp8's as on sm80.
  static constexpr float p_log2_range = [] {
    if constexpr (PrecisionT::float_accumulators)
      return PrecisionT::p_log2_range;
    else
      return PrecisionT::lazy_p_log2_range;
  }();
  // Two consumer warpgroups run warp-specialised (kernel/fwd_q8_ws_sm90.cuh): a producer
  // warpgroup loads, the consumers take turns on the tensor cores. Its mbarriers sit after the
  // tiles.
  static constexpr bool warp_specialized = NumWarps == 8;
  static constexpr int launch_threads = NumWarps * 32 + (warp_specialized ? 128 : 0);
  static constexpr int tiles_bytes = loop_bytes > out_bytes ? loop_bytes : out_bytes;
  // The one-warpgroup kernel's stage mbarriers (detail::stage_barrier): two in the alignment
  // slack, more in 64 bytes after the tiles.
  static constexpr bool stage_barriers_at_end = NumStages <= 2;
  static constexpr int barrier_bytes = warp_specialized ? 256 : stage_barriers_at_end ? 0 : 64;
  // int8 EFTA: the rows' softmax factors (q_scale) once more, after the tiles, for the second
  // evaluation to read each block: the registers the first holds all through the loop would
  // otherwise feed both (q8::second_softmax).
  static constexpr int q_scale_offset = tiles_bytes + barrier_bytes;
  static constexpr int q_scale_bytes = efta ? BlockM * 4 : 0;
  static constexpr int smem_bytes = tiles_bytes + barrier_bytes + q_scale_bytes + 1024;

  // fp8 keeps each key block's P V in an FP32 tile of its own, which q8::fold_output adds to O
  // (Hopper's E4M3 wgmma drops low bits when it adds into a large accumulator). At head_dims 192
  // and 256 that tile would not fit beside O, so GEMM II runs in three or four pieces of 64
  // channels, each added to O before the next is computed. One warpgroup at head_dim 128 takes
  // two pieces too: O and a whole tile took 249 registers (two CTAs per SM), with half a tile
  // three CTAs fit 168 registers without spills (H200: 1.04-1.23x as attention alone,
  // bench/results/nvidia-h200/fp8_pv_halves_ab.csv). Leaving the second piece in flight into
  // the next GEMM I, as one piece does, spilled 648 bytes there.
  static constexpr int pv_pieces = !PrecisionT::float_accumulators   ? 1
                                   : HeadDim > 128                   ? HeadDim / 64
                                   : HeadDim == 128 && NumWarps == 4 ? 2
                                                                     : 1;
  // One piece stays in flight into the next GEMM I, where O takes it; with Flash-ABFT's sums
  // beside it that spilled 24-48 bytes at head_dim 64, so the block waits for it and folds it
  // at once, as with more pieces.
  static constexpr bool pv_in_flight =
      PrecisionT::float_accumulators && pv_pieces == 1 && !ProtectT::enabled;
  // One warpgroup per CTA: ask ptxas for three CTAs per SM (168 registers) where their shared
  // memory fits an SM's 228 KB, 1 KB of it reserved per CTA (H100: 1-2% faster than two CTAs with
  // 198 registers; with three stages, which fit two CTAs only, the cap cost 4-8%,
  // bench/results/nvidia-h100/fp8_min_ctas_ab.csv); fp8 at head_dim 128 too, with its P V in two
  // pieces (above; a whole tile under the three-CTA cap spilled 604 bytes). int8, and fp8 with
  // 64-key blocks, ask for four where their shared memory allows: int8's 64 x 128 at head_dim 64
  // and 64 x 64 at 128 then fit 128 registers without spills (160 under the three-CTA cap) and
  // ran 1.05-1.10x and 1.10-1.13x as attention (H200, bench/results/nvidia-h200/
  // int8_d64_four_ctas_ab.csv, int8_n64_four_ctas_ab.csv); fp8's 64 x 128 at head_dim 64
  // spilled 176 bytes there. int8 Flash-ABFT's checksum tiles take 8 registers more: at head_dim
  // 64 under the four-CTA cap that spilled 804 bytes and serialised the wgmmas, so it asks for
  // three (no spills at 64 and 128).
  static constexpr int ctas_by_smem = 228 * 1024 / (smem_bytes + 1024);
  static constexpr bool four_ctas =
      (!PrecisionT::float_accumulators || BlockN == 64) && !ProtectT::enabled;
  static constexpr int min_ctas = NumWarps != 4                    ? 1
                                  : four_ctas && ctas_by_smem >= 4 ? 4
                                  : ctas_by_smem >= 3              ? 3
                                                                   : 1;

  // Site scale's values per thread: its two rows' softmax factors, then a key block's scales as
  // its lane loads them (int8: a pair per 8 keys; fp8: one per 64).
  static constexpr int scale_values =
      2 + (PrecisionT::float_accumulators ? BlockN / 64 : BlockN / 4);

  static_assert(HeadDim == 64 || HeadDim == 128 || HeadDim == 192 || HeadDim == 256,
                "wgmma tiles: 64-, 128-, 3 x 64- or 2 x 128-byte Q and K rows");
  static_assert(BlockN == 64 || BlockN == 128, "wgmma tiles: 64- or 128-byte V^T rows");
  static_assert(NumWarps % 4 == 0 && BlockM == 16 * NumWarps, "64 rows per warpgroup");
  static_assert(NumStages >= 2, "the wgmma skeleton prefetches at least one block");
  static_assert(!ProtectT::enabled || (NumWarps == 4 && (HeadDim == 64 || HeadDim == 128) &&
                                       (!efta || !PrecisionT::float_accumulators)),
                "checksums: Flash-ABFT, or int8 EFTA, one warpgroup, head_dim 64 or 128 "
                "(codegen's uses_wgmma)");
  static_assert(!Inject || ProtectT::enabled, "injection builds carry a checksum scheme");
};

// This warp's 16 rows of Q quantised from the caller's 16-bit Q into the swizzled tile at sQ,
// two lanes per row (each half of its 16-byte chunks), and the rows' softmax factors into
// q_scale (the rows this lane's accumulators hold). The scale is max |x| / range and the bytes
// round x * (range / max |x|), as quantize_rows computes them, so the operands equal the
// separate pass's and only its read and write of Q are saved.
template <class T, class In>
__device__ __forceinline__ void quantise_q_rows(const AttentionParams& p, u32 sQ, int batch,
                                                int head, int row0, int warp_row, int lane,
                                                float (&q_scale)[2]) {
  using Q8 = typename T::Precision;
  constexpr int chunks = T::head_dim / 8;  // 16-byte chunks of 8 elements
  constexpr int per_lane = chunks / 2;
  const int r = lane / 2, c0 = (lane % 2) * per_lane;
  const int row = row0 + warp_row + r;
  const uint4_* src = reinterpret_cast<const uint4_*>(
      static_cast<const u16*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride +
      static_cast<i64>(row < p.seqlen_q ? row : 0) * p.q_seq_stride);
  uint4_ raw[per_lane];
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < per_lane; ++j) {
    raw[j] = row < p.seqlen_q ? src[c0 + j] : uint4_{0u, 0u, 0u, 0u};
    float x[8];
    quant::unpack8<In>(raw[j], x);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(x[i]));
  }
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  const float inv = amax > 0.f ? Q8::range / amax : 0.f;
#pragma unroll
  for (int j = 0; j < per_lane; ++j) {
    float x[8];
    quant::unpack8<In>(raw[j], x);
    u32 w[2];
    quant::pack8<Q8>(x, inv, w);
    const int c = c0 + j;  // 8 bytes: half of the 8-bit row's 16-byte chunk c / 2
    const u32 dst =
        sQ + sm90::tile_offset<T::head_dim>(T::block_m, warp_row + r, c / 2) + (c % 2) * 8;
    asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(dst), "r"(w[0]), "r"(w[1]));
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int rr = lane / 4 + 8 * h;  // a row of this lane's accumulators, within the warp's 16
    const float a = __shfl_sync(0xffffffffu, amax, 2 * rr);
    const bool real = row0 + warp_row + rr < p.seqlen_q;
    q_scale[h] = fmaxf(real ? a / Q8::range * p.scale_log2 : 0.f, 1e-30f);
  }
}

namespace q8 {

// Key block key0 into the stage at `stage` (Q8WgmmaTraits' layout): its K rows (swizzle atoms
// side by side, sm90::tile_offset) and their scales, and its V^T rows (with Flash-ABFT's digit
// rows below them): TMA copies from the tensor maps of KV head `kv` (batch * heads_kv + head),
// completing on `bar` (which expects T::k_tma_bytes and T::v_tma_bytes). Issued by one thread.
template <class T>
__device__ __forceinline__ void load_k_block(u32 stage, const Q8TensorMaps& maps, int key0, int kv,
                                             u32 bar) {
  constexpr int atom = sm90::atom_bytes<T::head_dim>;
#pragma unroll
  for (int a = 0; a < T::head_dim / atom; ++a)
    sm90::tma_load(stage + T::k_offset + a * T::block_n * atom, maps.k, a * atom, key0, kv, bar);
  sm90::tma_load(stage + T::scale_offset, maps.k_scale, key0, kv, bar);
  if constexpr (T::efta)  // one atom wide (head_dim 64 or 128): the rows below the keys
    sm90::tma_load(stage + T::k_offset + T::block_n * T::head_dim, maps.k_check, 0,
                   key0 / T::block_n * T::k_check_rows, kv, bar);
}
template <class T>
__device__ __forceinline__ void load_vt_block(u32 stage, const Q8TensorMaps& maps, int key0, int kv,
                                              u32 bar) {
  sm90::tma_load(stage, maps.vt, key0, 0, kv, bar);
  if constexpr (T::checksum)
    sm90::tma_load(stage + T::digits_offset, maps.vt_check, key0, 0, kv, bar);
}
// Flash-ABFT's l row of every stage's tail (its 64 l column in GEMM II), written once before the
// first copy; whole rows of 64s, so the swizzle leaves them as they are.
template <class T>
__device__ __forceinline__ void write_l_rows(u32 sStages) {
  if constexpr (T::checksum) {
    constexpr int words = T::block_n / 4;
    for (int i = threadIdx.x; i < T::num_stages * words; i += T::threads)
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(sStages + (i / words) * T::stage_bytes +
                                                     T::l_row_offset + (i % words) * 4),
                   "r"(0x40404040u));
  }
}

// GEMM I's MMAs: this warpgroup's 64 rows (from group_row of the Q tile at sQ) of S = Q K^T with
// the K tile at sKs (fp8: FP32, overwriting s; int8: INT32 onto the bias s holds). Issue only:
// the caller fences, commits and waits.
template <class T, class Acc, int kST>
__device__ __forceinline__ void gemm1(Acc (&s)[kST][4], u32 sQ, u32 sKs, int group_row) {
#pragma unroll
  for (int ks = 0; ks < T::head_dim / 32; ++ks) {
    const u64 a = sm90::k_step_descriptor<T::head_dim>(sQ, T::block_m, group_row, ks);
    const u64 b = sm90::k_step_descriptor<T::head_dim>(sKs, T::block_n, 0, ks);
    if constexpr (!T::Precision::float_accumulators)
      sm90::wgmma_s8_ss(reinterpret_cast<int(&)[kST * 4]>(s), a, b);
    else
      sm90::wgmma_e4m3_ss(reinterpret_cast<float(&)[kST * 4]>(s), a, b, ks > 0);
  }
}

// GEMM II's MMAs: P V^T-as-B, P from registers (pa, the softmax's fragments), V^T at sVs. fp8:
// into d from zero, the block's own FP32 tile (fold_output adds it to O); int8: onto O's INT32
// accumulators, P unsigned. With Flash-ABFT the last piece also covers the checksum tiles after
// O's (the tail's rows). Issue only.
template <class T, class Acc, int kOT, int kKC>
__device__ __forceinline__ void gemm2(Acc (&d)[kOT][4], const u32 (&pa)[kKC][4], u32 sVs) {
  static_assert((kOT - T::checksum_tiles) * 8 * T::pv_pieces == T::head_dim,
                "a piece of O's channels, and the checksum tiles");
#pragma unroll
  for (int kc = 0; kc < kKC; ++kc) {
    if constexpr (!T::Precision::float_accumulators)
      sm90::wgmma_u8s8_rs(reinterpret_cast<int(&)[kOT * 4]>(d), pa[kc],
                          sm90::descriptor<T::block_n>(sVs, kc * 32));
    else
      sm90::wgmma_e4m3_rs(reinterpret_cast<float(&)[kOT * 4]>(d), pa[kc],
                          sm90::descriptor<T::block_n>(sVs, kc * 32), kc > 0);
  }
}

// GEMM I's scores of key block key0 (rows from first_row), dequantised by key into x (the row's
// factor follows in the exp's FMA), then masked when Masked. int8: S * s_K from the bias in one
// FMA. fp8: K scales are constant over each 64 keys, so the scores stay raw and each group's
// scale goes to kg, to ride in the FMA. The K scales are read from the tail of the stage at
// `stage` (quad_t: lane % 4).
template <class T, bool Masked, class Acc, int kST, int kGroups>
__device__ __forceinline__ void block_scores(const AttentionParams& p, const Acc (&s)[kST][4],
                                             u32 stage, int first_row, int key0, int lane,
                                             int quad_t, int diag, float (&x)[kST][4],
                                             float (&kg)[kGroups]) {
  using P = typename T::Precision;
  const u32 sKscale = stage + T::scale_offset;
  if constexpr (!P::float_accumulators) {
#pragma unroll
    for (int nt = 0; nt < kST; ++nt) {
      float ks2[2];
      shared_float2(sKscale + (nt * 8 + quad_t * 2) * 4, ks2);
      if constexpr (T::inject)
#pragma unroll
        for (int c = 0; c < 2; ++c)
          inject_value_at(p.fault, fault_site_scale, key0 / T::block_n, 2 + 2 * nt + c,
                          T::scale_values, ks2[c]);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        x[nt][i] = fmaf(P::acc_as_float(s[nt][i]), ks2[i % 2], P::dequant_bias(ks2[i % 2]));
    }
  } else {
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(kg[g]) : "r"(sKscale + g * 64 * 4));
      if constexpr (T::inject)
        inject_value_at(p.fault, fault_site_scale, key0 / T::block_n, 2 + g, T::scale_values,
                        kg[g]);
      kg[g] = fmaxf(kg[g], 1e-30f);  // a zero block: its raw scores are 0, the masked -inf
    }
#pragma unroll
    for (int nt = 0; nt < kST; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) x[nt][i] = P::acc_as_float(s[nt][i]);
  }
  if (Masked) {
    detail::for_each_masked<1, kST, T::causal>(first_row, key0, lane, p.seqlen_k, diag,
                                               [&](int, int nt, int i) { x[nt][i] = neg_inf(); });
  }
}

// fp8's online softmax of a warp's 16 rows (softmax_row_grouped on kg): P lands in GEMM II's A
// fragments pa, row_max and row_sum move on, and alpha gets the old state's factor, by which
// fold_output rescales O when it adds this block's P V.
template <class T, int kST, int kGroups>
__device__ __forceinline__ void online_softmax(const float (&x)[kST][4], const float (&kg)[kGroups],
                                               const float (&q_scale)[2], float (&row_max)[2],
                                               float (&row_sum)[2], float (&alpha)[2],
                                               u32 (&pa)[kST / 4][4]) {
  using P = typename T::Precision;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    typename P::PSum sum = 0;
    softmax_row_grouped<P>(x, r, q_scale[r], kg, row_max[r], pa, sum, alpha[r]);
    row_sum[r] = row_sum[r] * alpha[r] + P::p_sum(sum);
  }
}

// fp8 Flash-ABFT's running sums, this lane's, folded through the blocks as O is: per row half
// the O side's sum over its channels of each block's P V (summed from the very values O takes),
// and the checksum tile (protect/fp8_checksums.cuh: columns d0 and d1 quad lane 0's, d2 and
// the magnitude lane 1's). q8::check_fp8_output compares them at the end.
struct Fp8RowSums {
  float folded[2] = {0.f, 0.f};
  float block[2] = {0.f, 0.f};  // the block's partial sums over the pieces so far
  float checksum[4] = {0.f, 0.f, 0.f, 0.f};
};

// fp8: O = O alpha + the last block's P V tile, in FP32 on the CUDA cores (one FMA per element,
// where a rescale took a multiply). Hopper's E4M3 wgmma keeps only about 14 bits when it adds
// into its accumulators, aligned to the largest addend, so an O accumulated over many key blocks
// inside the MMA drops more of each new block as it grows: with positive V (U(0, 1) inputs) rel
// L2 reached 7% at 4k keys and 28% at 16k. A block's tile starts from zero instead. With
// Flash-ABFT the piece's sums over channels and (last piece) its checksum tile fold into `sums`.
template <class T, int kOT, int kPT>
__device__ __forceinline__ void fold_piece(float (&o)[kOT][4], Fp8RowSums& sums,
                                           const float (&pv)[kPT][4], const float (&alpha)[2],
                                           int piece) {
  if constexpr (T::Precision::float_accumulators) {
    constexpr int tiles = kPT - T::checksum_tiles;  // O's channels in a piece
    float part[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < tiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float& x = o[piece * tiles + nt][i];
        x = fmaf(x, alpha[i / 2], pv[nt][i]);
        if constexpr (T::fp8_checksum) part[i / 2] += pv[nt][i];
      }
    if constexpr (T::fp8_checksum) {
      const bool last = piece == T::pv_pieces - 1;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float b = (piece == 0 ? 0.f : sums.block[r]) + part[r];
        // The sums take quad lane 0's rescale factor, O each lane's own: a wrong factor in any
        // one lane then parts O from the sums (q8::check_fp8_output's FP32 check).
        const float lane0_alpha = __shfl_sync(0xffffffffu, alpha[r], threadIdx.x & ~3u);
        if (last)
          sums.folded[r] = fmaf(sums.folded[r], lane0_alpha, b);
        else
          sums.block[r] = b;
      }
      // The checksum tile rides in the last piece.
      if (last)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          sums.checksum[i] = fmaf(sums.checksum[i], alpha[i / 2], pv[tiles][i]);
    }
  }
}
// The whole block: GEMM II left piece 0 (the first channels) in pv, done; with T::pv_pieces > 1
// each further piece is computed from the same P (pa) and V^T (sVs, still held) once the
// previous one is in O, and waited for. With Flash-ABFT every piece is n72: those before the
// last read 8 channels of the next piece into the checksum tile's place, which nothing folds
// (an n64 wgmma beside the n72 on the same registers made ptxas serialise them all, C7511).
template <class T, int kOT, int kPT, int kKC>
__device__ __forceinline__ void fold_output(float (&o)[kOT][4], Fp8RowSums& sums,
                                            float (&pv)[kPT][4], const float (&alpha)[2],
                                            const u32 (&pa)[kKC][4], u32 sVs) {
  if constexpr (T::Precision::float_accumulators) {
    constexpr int tiles = kPT - T::checksum_tiles;
    static_assert(tiles * T::pv_pieces == kOT, "O in pv_pieces pieces");
#pragma unroll
    for (int piece = 0; piece < T::pv_pieces; ++piece) {
      if (piece > 0) {
        sm90::wgmma_fence();
        gemm2<T>(pv, pa, sVs + piece * tiles * 8 * T::block_n);
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
      }
      fold_piece<T>(o, sums, pv, alpha, piece);
    }
  }
}

// Blocks between lazy_softmax's checks of l: each adds at most 255 block_n / 4 to a thread's
// share, 255 block_n to the row's l, so 64 of them add at most 2^21 (block_n <= 128). A check
// halves the rows whose l exceeds kLazyHalveAbove.
inline constexpr int kLazySumCheck = 64;
inline constexpr float kLazyHalveAbove = 0x1p22f;
__device__ __forceinline__ bool lazy_sum_check(int it) {
  return it % kLazySumCheck == kLazySumCheck - 1;
}

// int8's softmax keeps O in INT32 (GEMM II accumulates onto it) and rescales it only when it
// must. P = round(255 2^(x s_Q - ref)), unsigned, against a per-row reference `ref` that is a
// whole number (base-2 logits): while a block's rounded-up max stays at or below ref nothing is
// rescaled, and P keeps 7 to 8 bits. A block whose max exceeds it moves ref up to that max's
// ceiling, and O and l are rescaled by 2^-(the step): an arithmetic shift of O's integers, with
// rounding, no conversion. Such a fold runs for a whole warp when any of its rows needs one
// (rows that do not shift by 0). Overflow: |O| <= 127 L, L the row's sum of P, and every
// `check_sum` block (at most 2^21 P per row apart) halves a row whose L exceeds 2^22, so
// |O| + 2^29 (the rounding) stays below 2^31. l: this thread's share, FP32 (exact integers
// below 2^24). The warp's quad lanes agree on every decision: their max and sum are butterflies.
// With Flash-ABFT O's tiles end in its checksum tiles, which shift alike, and the row's check
// (q8::check_output) is kept exact through the folds' rounding: D = O's channel sum minus the
// digit columns' C0 + 128 C1, which GEMM II leaves as it is, moves by the quad's sum of
// (x' - x) over those values (modulo 2^32, as D), and C0 takes that move too, so that D stays 0.
// A fault in O or the columns stays in D; a lane that shifts by other than the quad's lane 0
// adds 2^30 to C0 (at most three lanes: never 0 modulo 2^32). `fault(r, shift)` may flip a bit
// of row half r's shift (injection builds: site rescale).
struct NoShiftFault {
  __device__ __forceinline__ void operator()(int, int&) const {}
};
// lazy_softmax's reference step, shared with int8 EFTA's second evaluation: from the block's
// rounded-up row maxima, the rows whose maxima outgrow their reference (need) and the rows to
// halve, each row's new reference and the shift O and l take (0 where the warp does not fold).
// Returns whether the warp folds. EFTA builds (kClamp) clamp the step to [0, 30]: it is never below
// 0, but a wrong ref (a fault) may make it so, or NaN, and the conversion and shifts must stay
// defined while the checks see the fault. `on_shift(r, shift)` runs on each row half's shift before
// its reference moves (lazy_softmax: the injection hook and l's rescale).
template <bool kClamp = false, class OnShift = detail::Nothing>
__device__ __forceinline__ bool lazy_reference_step(const float (&block_max)[2],
                                                    const bool (&need)[2], const bool (&halve)[2],
                                                    float (&ref)[2], int (&shift)[2],
                                                    OnShift&& on_shift = {}) {
  const bool fold = __any_sync(0xffffffffu, need[0] || need[1] || halve[0] || halve[1]);
  shift[0] = shift[1] = 0;
  if (fold) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float to = need[r] ? ceilf(block_max[r]) : ref[r];
      if (halve[r]) to = fmaxf(to, ref[r] + 1.f);
      // Nothing seen yet (ref -inf): O and l are 0, any shift leaves them so. A step above 30
      // shifts by 30: what stays of the old O is then at most 2 (|O| < 2^31), against a new
      // block whose largest P is at least 128.
      const float step = kClamp ? fmaxf(to - ref[r], 0.f) : to - ref[r];
      shift[r] = ref[r] == neg_inf() ? 30 : static_cast<int>(fminf(step, 30.f));
      on_shift(r, shift[r]);
      ref[r] = to;
    }
  }
  return fold;
}
// int8 EFTA's second evaluation's scores: GEMM I's integers s (kCT tiles: the keys', then the
// digits'), dequantised and masked where they are used, so that no float tile is held beside s.
// Bit for bit the values block_scores gives. The maxima and P as block_row_max and p_words take
// them from a tile. The key scales are loaded where used, by volatile loads of their own in each
// pass, so that no compiler merges a pass's products with the first evaluation's or keeps them
// from the one pass to the other. (Before those loads an integer 0 the compilers could not see
// was added to s, + z in one pass and - z in the other, for the same ends: 128 adds per block at
// head dim 128, which the loads make redundant.)
template <class T, bool Masked, int kCT>
struct IntScores {
  static constexpr int kST = T::s_tiles;
  const AttentionParams& p;
  const int (&s)[kCT][4];
  u32 scales_at;
  int first_row, key0, lane, diag;
  __device__ __forceinline__ void scales(int nt, float (&ks2)[2]) const {
    shared_float2</*kAgain=*/true>(scales_at + (nt * 8 + (lane % 4) * 2) * 4, ks2);
  }
  __device__ __forceinline__ float score(int nt, int i, const float (&ks2)[2]) const {
    using P = typename T::Precision;
    float x = fmaf(P::acc_as_float(s[nt][i]), ks2[i % 2], P::dequant_bias(ks2[i % 2]));
    if constexpr (Masked) {
      const int row = first_row + lane / 4 + (i / 2) * 8;
      const int key = key0 + nt * 8 + (lane % 4) * 2 + i % 2;
      if (key >= p.seqlen_k || (T::causal && key > row + diag)) x = neg_inf();
    }
    return x;
  }
  // Both row halves in one pass, so that each pair of key scales is read once per pass.
  __device__ __forceinline__ void row_max(const float (&qs)[2], float (&out)[2]) const {
    float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int nt = 0; nt < kST; ++nt) {
      float ks2[2];
      scales(nt, ks2);
#pragma unroll
      for (int r = 0; r < 2; ++r)
        mx[r] = fmaxf(mx[r], fmaxf(score(nt, 2 * r, ks2), score(nt, 2 * r + 1, ks2)));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) out[r] = __fmul_ru(quad_max(mx[r]), qs[r]);
  }
  // p_words' order: keys 0-15, then 16-31 of each chunk of 32.
  template <class Word>
  __device__ __forceinline__ void words(const float (&qs)[2], const float (&offset)[2],
                                        u32 (&pa)[kST / 4][4], Word&& word) const {
#pragma unroll
    for (int kc = 0; kc < kST / 4; ++kc)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int nt0 = 4 * kc + 2 * h, nt1 = nt0 + 1;
        float k0[2], k1[2];
        scales(nt0, k0);
        scales(nt1, k1);
#pragma unroll
        for (int r = 0; r < 2; ++r)
          pa[kc][2 * h + r] = word(fmaf(score(nt0, 2 * r, k0), qs[r], offset[r]),
                                   fmaf(score(nt0, 2 * r + 1, k0), qs[r], offset[r]),
                                   fmaf(score(nt1, 2 * r, k1), qs[r], offset[r]),
                                   fmaf(score(nt1, 2 * r + 1, k1), qs[r], offset[r]));
      }
  }
};

// D of row half r of the int8 O (with its checksum tiles, oi): the quad's sum of O's INT32
// channels minus the digit columns C0 + 128 C1 of T::sums_tile (quad lane 0's), modulo 2^32.
template <class T, int kIT>
__device__ __forceinline__ u32 row_apart(const int (&oi)[kIT][4], int r, int q) {
  constexpr int kOT = kIT - T::checksum_tiles;
  constexpr int kS = kOT + T::sums_tile;
  u32 apart = 0u;
#pragma unroll
  for (int nt = 0; nt < kOT; ++nt)
    apart += static_cast<u32>(oi[nt][2 * r]) + static_cast<u32>(oi[nt][2 * r + 1]);
  if (q == 0) apart -= static_cast<u32>(oi[kS][2 * r]) + 128u * static_cast<u32>(oi[kS][2 * r + 1]);
  apart += __shfl_xor_sync(0xffffffffu, apart, 1);
  apart += __shfl_xor_sync(0xffffffffu, apart, 2);
  return apart;
}

// int8 efta_correct on this kernel: row half r of O (with its checksum tiles, oi) against the
// columns of T::sums_tile: C0 and C1 (quad lane 0's), W0 and W1 (lane 1's), W2 (lane 2's). D =
// sum_d O_d - C0 - 128 C1 (modulo 2^32) is 0 while clean and lazy_softmax keeps it so through the
// folds; E = sum_d (d + 1) O_d - W0 - 128 W1 - 16384 W2 likewise. Run before every fold that
// shifts the row half and at the end, so that between two runs O takes only GEMM II's exact adds:
// a single wrong element then leaves D = delta and E = (d + 1) delta exactly (in 64 bits), and it
// is rebuilt bit for bit (protect::exact_index). A wrong C0 or C1 (E = 0: O is right) is rebuilt
// in the checksum. Anything else (two elements, a lane's wrong shift) is reported uncorrected, and
// C0 rebased so that it is reported once.
template <class T, int kIT>
__device__ __forceinline__ void repair_output(const AttentionParams& p, int (&oi)[kIT][4], int r,
                                              int batch, int head, int first_row, int lane) {
  constexpr int kOT = kIT - T::checksum_tiles;
  constexpr int kS = kOT + T::sums_tile;
  const int q = lane % 4;
  const u32 apart = row_apart<T>(oi, r, q);
  if (!__any_sync(0xffffffffu, apart != 0u)) return;
  // Rare: both discrepancies in 64 bits.
  long long e0 = 0, e1 = 0;
#pragma unroll
  for (int nt = 0; nt < kOT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const long long x = oi[nt][2 * r + c];
      e0 += x;
      e1 += (8 * nt + 2 * q + c + 1) * x;
    }
  const long long lo = oi[kS][2 * r], hi = oi[kS][2 * r + 1];
  if (q == 0) e0 -= lo + 128 * hi;
  if (q == 1) e1 -= lo + 128 * hi;
  if (q == 2) e1 -= 16384 * lo;
  e0 += __shfl_xor_sync(0xffffffffu, e0, 1);
  e0 += __shfl_xor_sync(0xffffffffu, e0, 2);
  e1 += __shfl_xor_sync(0xffffffffu, e1, 1);
  e1 += __shfl_xor_sync(0xffffffffu, e1, 2);
  if (apart == 0u) return;
  const int j = protect::exact_index(e0, e1, T::head_dim);
  const bool sums_hit = e1 == 0;
#pragma unroll
  for (int nt = 0; nt < kOT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c)
      if (8 * nt + 2 * q + c == j)
        oi[nt][2 * r + c] = static_cast<int>(static_cast<u32>(oi[nt][2 * r + c]) - apart);
  if (j < 0 && q == 0) oi[kS][2 * r] = static_cast<int>(static_cast<u32>(oi[kS][2 * r]) + apart);
  if (q == 0)
    report_row(p, batch, head, first_row + lane / 4 + 8 * r, j, fault_stage_output,
               j >= 0 || sums_hit, static_cast<float>(e0), 0.f);
}

// No check before a fold (every build but int8 efta_correct's).
struct NoFoldCheck {
  template <int kOT>
  __device__ __forceinline__ void operator()(int, int (&)[kOT][4]) const {}
};

// One block of the lazy softmax on the dequantised, masked scores x; `shift` gets each row half's
// fold, and `before_fold(r, o)` runs before row half r shifts (efta_correct: repair_output).
template <class T, int kST, int kOT, class ShiftFault = NoShiftFault,
          class BeforeFold = NoFoldCheck>
__device__ __forceinline__ void lazy_softmax(const float (&x)[kST][4], const float (&q_scale)[2],
                                             float (&ref)[2], float (&row_sum)[2], int (&o)[kOT][4],
                                             u32 (&pa)[kST / 4][4], bool check_sum,
                                             const ShiftFault& fault, int (&shift)[2],
                                             const BeforeFold& before_fold = {}) {
  using P = typename T::Precision;
  float block_max[2];
  bool need[2], halve[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    block_max[r] = block_row_max(x, r, q_scale[r]);
    need[r] = block_max[r] > ref[r];
    halve[r] = check_sum && quad_sum(row_sum[r]) > kLazyHalveAbove;
  }
  // The fold: the new references and l's rescale first, O's shift after P is written, when the
  // scores' registers are free (Flash-ABFT's checksum tiles need room there).
  const bool fold =
      lazy_reference_step<T::efta>(block_max, need, halve, ref, shift, [&](int r, int& step) {
        fault(r, step);
        row_sum[r] *= __int_as_float((127 - step) << 23);  // 2^-step, exactly
      });
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float offset = ref[r] == neg_inf() ? 0.f : -ref[r];  // no key yet: x is -inf, P 0
    unsigned sum = 0;
    p_words(x, r, q_scale[r], offset, pa, [&](float t0, float t1, float t2, float t3) {
      return P::template p_word<255>(t0, t1, t2, t3, sum);
    });
    row_sum[r] += P::p_sum(sum);
  }
  // Per row half, only where one of the warp's rows shifts: a fold's rows often all lie in one
  // half (at 2k keys, random inputs, 1.4 halves per fold; 9 folds per 16 blocks and warp).
  if (fold)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!__any_sync(0xffffffffu, shift[r] != 0)) continue;
      before_fold(r, o);
      const int half = static_cast<int>((1u << shift[r]) >> 1);
      const int q = threadIdx.x % 4;
      // Flash-ABFT: this lane's share of D's move (above); efta_correct: of E's too.
      u32 moved = 0u, moved_w = 0u;
      constexpr int kSums = kOT - T::checksum_tiles + T::sums_tile;
      // efta_correct reads both checksum tiles; the others never look at the second (the K rows
      // GEMM II reads past the tail).
      constexpr int kShifted = T::correct ? kOT : kOT - (T::checksum_tiles > 1 ? 1 : 0);
#pragma unroll
      for (int nt = 0; nt < kShifted; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int before = o[nt][2 * r + c];
          o[nt][2 * r + c] = (before + half) >> shift[r];
          if constexpr (T::checksum) {
            // O's channels count once (in E, d + 1 times), the digit columns -1, -128 (and -16384).
            const u32 step = static_cast<u32>(o[nt][2 * r + c] - before);
            if (nt < kOT - T::checksum_tiles) {
              moved += step;
              if constexpr (T::correct) moved_w += static_cast<u32>(8 * nt + 2 * q + c + 1) * step;
            } else if (nt == kSums) {
              if (q == 0) moved -= c == 0 ? step : 128u * step;
              if (T::correct && q == 1) moved_w -= c == 0 ? step : 128u * step;
              if (T::correct && q == 2 && c == 0) moved_w -= 16384u * step;
            }
          }
        }
      if constexpr (T::checksum) {
        // A lane whose shift is not the quad's: the moves account for its values as they moved,
        // so D and E take a mark instead, in a ratio (3 / 2) that locates no element.
        if (shift[r] != __shfl_sync(0xffffffffu, shift[r], threadIdx.x & ~3u)) {
          moved += 1u << 30;
          if constexpr (T::correct) moved_w += 3u << 29;
        }
        moved += __shfl_xor_sync(0xffffffffu, moved, 1);
        moved += __shfl_xor_sync(0xffffffffu, moved, 2);
        if (q == 0) o[kSums][2 * r] = static_cast<int>(static_cast<u32>(o[kSums][2 * r]) + moved);
        if constexpr (T::correct) {
          moved_w += __shfl_xor_sync(0xffffffffu, moved_w, 1);
          moved_w += __shfl_xor_sync(0xffffffffu, moved_w, 2);
          if (q == 1)
            o[kSums][2 * r] = static_cast<int>(static_cast<u32>(o[kSums][2 * r]) + moved_w);
        }
      }
    }
}

// int8: INT32 accumulators set to the bias (P::acc_zero) by asm volatile moves, which stay
// where they are written: plain stores were sunk past wgmma_fence next to the wgmma reading
// them, and ptxas injected warpgroup waits there (C7517, C7519) in the warp-specialised kernel.
template <class T, int N>
__device__ __forceinline__ void set_bias(int (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N * 4; ++i)
    asm volatile("mov.b32 %0, %1;\n" : "=r"(a[i / 4][i % 4]) : "n"(T::Precision::acc_zero));
}

// The per-block steps of both 8-bit skeletons on whichever O the precision keeps: fp8's in
// FP32 (o), int8's in INT32 (oi, lazy_softmax; o then holds it only for the epilogue), so the
// kernels do not branch on it.
// int8's O starts at 0 (fp8's is cleared with the row state).
template <class T, int kIT>
__device__ __forceinline__ void clear_int_output(int (&oi)[kIT][4]) {
  if constexpr (!T::Precision::float_accumulators)
#pragma unroll
    for (int i = 0; i < kIT * 4; ++i) oi[i / 4][i % 4] = 0;
}
// One key block's softmax; `it` counts the CTA's blocks (int8 checks l every kLazySumCheck).
// int8: `shift` gets each row half's fold (lazy_softmax), `fault` is its injection hook and
// `before_fold` its check before a fold.
template <class T, int kST, int kGroups, int kIT, class ShiftFault = NoShiftFault,
          class BeforeFold = NoFoldCheck>
__device__ __forceinline__ void block_softmax(const float (&x)[kST][4], const float (&kg)[kGroups],
                                              const float (&q_scale)[2], float (&row_max)[2],
                                              float (&row_sum)[2], float (&alpha)[2],
                                              int (&oi)[kIT][4], u32 (&pa)[kST / 4][4], int it,
                                              int (&shift)[2], const ShiftFault& fault = {},
                                              const BeforeFold& before_fold = {}) {
  if constexpr (T::Precision::float_accumulators)
    online_softmax<T>(x, kg, q_scale, row_max, row_sum, alpha, pa);
  else
    lazy_softmax<T>(x, q_scale, row_max, row_sum, oi, pa, lazy_sum_check(it), fault, shift,
                    before_fold);
}
// GEMM II: fp8's into the block's tile pv (its first piece), int8's onto O. Issue only.
template <class T, int kOT, int kIT, int kKC>
__device__ __forceinline__ void gemm2_onto_output(float (&pv)[kOT][4], int (&oi)[kIT][4],
                                                  const u32 (&pa)[kKC][4], u32 sVs) {
  if constexpr (T::Precision::float_accumulators)
    gemm2<T>(pv, pa, sVs);
  else
    gemm2<T>(oi, pa, sVs);
}
// The epilogue's O: int8's INT32 accumulators as floats (fp8's is there already).
template <class T, int kOT, int kIT>
__device__ __forceinline__ void finish_output(const int (&oi)[kIT][4], float (&o)[kOT][4]) {
  if constexpr (!T::Precision::float_accumulators)
#pragma unroll
    for (int i = 0; i < kOT * 4; ++i) o[i / 4][i % 4] = static_cast<float>(oi[i / 4][i % 4]);
}

// int8 Flash-ABFT at the end of the loop, per row: the quad's sum of O's INT32 channels minus
// the digit columns (head_dim + 0 and + 1, quad lane 0's: sum_d O_d - C0 - 128 C1 modulo 2^32)
// is 0 exactly (lazy_softmax keeps it so through the folds); and l's FP32 shares against the
// column of 64s (head_dim + 7, quad lane 3's): each fold rounds 64 l by less than half a step,
// so they stay less than 2^-6 apart (plus l's FP32 rounding, 2^-24 of it per add, and 64 l's
// conversion). With a column of ones, 1 apart, flips of l's middle mantissa bits in rows with
// few keys passed silently (0.14% of 10,000 causal row_sum flips, H200). efta_correct checks O
// by repair_output instead, which rebuilds a single wrong element.
template <class T, int kIT>
__device__ __forceinline__ void check_output(const AttentionParams& p, int (&oi)[kIT][4],
                                             const float (&row_sum)[2], int n_blocks, int batch,
                                             int head, int first_row, int lane) {
  constexpr int kOT = kIT - T::checksum_tiles;
  const int quad_t = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    u32 apart = 0u;  // efta_correct: repair_output reports what it sees
    if constexpr (T::correct)
      repair_output<T>(p, oi, r, batch, head, first_row, lane);
    else
      apart = row_apart<T>(oi, r, quad_t);
    const float l = quad_sum(row_sum[r]);
    const float l64 =
        static_cast<float>(__shfl_sync(0xffffffffu, oi[kOT][2 * r + 1], (lane & ~3) + 3)) * 0x1p-6f;
    const float tol_l = 0x1p-6f + 0x1p-24f * float(n_blocks + 8) * l;
    const int row = first_row + lane / 4 + 8 * r;
    const int e = static_cast<int>(apart);
    if (quad_t == 0 && row < p.seqlen_q) {
      if (e != 0)
        record_fault(p.fault_log, batch, head, row, -1, fault_stage_output, false,
                     static_cast<float>(e), 0.f);
      if (!(fabsf(l64 - l) <= tol_l))
        record_fault(p.fault_log, batch, head, row, -1, fault_stage_row_sum, false, fabsf(l64 - l),
                     tol_l);
    }
  }
}

// The GEMM II check's threshold, relative to the folded magnitude sum_k P_k sum_d |v_kd|: this
// many times tol_output, 8.2e-4 at its default, 3.6x above the most clean runs needed (H200,
// head dims 64 and 128, both masks, 2k and 8k keys, five distributions: bench/results/
// nvidia-h200/calibration_fp8_abft_wgmma.csv).
inline constexpr float kFp8ChecksumTolerance = 4096.f;

// fp8 Flash-ABFT at the end of the loop, per row, two checks:
//  - O: the quad's sum of O over channels against the quad's folded O-side sums. Both are FP32
//    sums of the same P V values, so the threshold is FP32 rounding's, following the values as
//    the sm80 kernel's (fwd_q8_sm80.cuh): sum |o| + |the sum|, grown per key block. It sees a
//    flip of O (or of a folded sum) however small its effect on the output.
//  - GEMM II: the folded O-side sums against the checksum columns. The E4M3 wgmma aligns each
//    k-step's products to the largest and keeps about 14 bits, in O's columns and the checksum's
//    alike, so their sums part by up to about 2^-10 of a block's magnitude (hybrid inputs
//    with outliers, head dim 64), 2.3e-4 of the row's (docs/protection.md): a wrong P V shows
//    here when it moves the row's sum by more than that. (One lane's wrong rescale factor
//    shows in the first check: the sums take lane 0's.)
// A non-finite O alarms.
template <class T, int kOT>
__device__ __forceinline__ void check_fp8_output(const AttentionParams& p, const float (&o)[kOT][4],
                                                 const Fp8RowSums& sums, int n_blocks, int batch,
                                                 int head, int first_row, int lane) {
  constexpr float unscale = 1.f / protect::fp8_digit_scale<T::head_dim>;
  constexpr const float* w = protect::fp8_digit_weight;
  const int q = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = 0.f, values = 0.f;
#pragma unroll
    for (int nt = 0; nt < kOT; ++nt) {
      sum += o[nt][2 * r] + o[nt][2 * r + 1];
      values += fabsf(o[nt][2 * r]) + fabsf(o[nt][2 * r + 1]);
    }
    float folded = sums.folded[r];
    const float* c = sums.checksum;
    float checksum = q == 0 ? fmaf(c[2 * r + 1], w[1], c[2 * r]) : q == 1 ? c[2 * r] * w[2] : 0.f;
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    values += __shfl_xor_sync(0xffffffffu, values, 1);
    values += __shfl_xor_sync(0xffffffffu, values, 2);
    folded += __shfl_xor_sync(0xffffffffu, folded, 1);
    folded += __shfl_xor_sync(0xffffffffu, folded, 2);
    checksum += __shfl_xor_sync(0xffffffffu, checksum, 1);
    checksum *= unscale;
    const float mag = __shfl_sync(0xffffffffu, c[2 * r + 1], (lane & ~3) + 1) * unscale;
    const float tol = p.tol_output * (n_blocks + 16) * (values + fabsf(folded)) + p.tol_floor;
    const float e = fabsf(sum - folded);
    const float tol_gemm = p.tol_output * kFp8ChecksumTolerance * mag + p.tol_floor;
    const float e_gemm = fabsf(folded - checksum);
    const int row = first_row + lane / 4 + 8 * r;
    if (q == 0 && row < p.seqlen_q) {
      if (!(e <= tol) || !finite(values))
        record_fault(p.fault_log, batch, head, row, -1, fault_stage_output, false, e, tol);
      else if (!(e_gemm <= tol_gemm))
        record_fault(p.fault_log, batch, head, row, -1, fault_stage_output, false, e_gemm,
                     tol_gemm);
    }
  }
}

// int8 EFTA (detect) on this kernel. GEMM I's identity per thread, exactly in INT32: the scores
// it holds of keys 8 nt + e against its checksum column e (the two digit tiles GEMM I leaves
// after the keys' tiles, q8::strided_diff as on mma.sync); a failed column reports its row.
template <class T, int kCT>
__device__ __forceinline__ void check_scores(const AttentionParams& p, const int (&s)[kCT][4],
                                             int batch, int head, int first_row, int lane) {
  constexpr int kST = T::s_tiles;
  static_assert(kCT == kST + 2, "the scores' tiles, then two digit tiles");
  u32 diff[1][4];
  if (strided_diff<typename T::Precision>(reinterpret_cast<const int(&)[1][kST][4]>(s),
                                          reinterpret_cast<const int(&)[1][2][4]>(s[kST]), diff))
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (diff[0][i] != 0u)
        report_row(p, batch, head, first_row + lane / 4 + 8 * (i / 2), -1, fault_stage_scores,
                   false, static_cast<float>(static_cast<int>(diff[0][i])), 0.f);
}

// int8 efta_correct on this kernel: check_scores' identity, and in a lane whose check fails each
// failed column's scores computed again on the CUDA cores (its Q row against the column's K rows,
// by dp4a from the swizzled tiles at sQ and sKs) and those that differ rebuilt, before either
// evaluation reads them. Exact integers: the rebuilt score is the one GEMM I should have given.
// The mma.sync kernel locates the score from 24 weighted K rows instead; here their dp4a path
// (Q times three rows per failed column, then the 64-bit ratio) cost a 288-byte stack frame and
// made ptxas serialise every wgmma (C7514), and recomputing the column needs no rows at all.
// A failed column whose scores all agree had a wrong checksum digit: nothing to rebuild.
template <class T, int kCT>
__device__ __forceinline__ void repair_scores(const AttentionParams& p, int (&s)[kCT][4], u32 sQ,
                                              u32 sKs, int key0, int batch, int head, int warp_row,
                                              int first_row, int lane) {
  using P = typename T::Precision;
  constexpr int kST = T::s_tiles;
  static_assert(kCT == kST + 2, "the scores' tiles, then two digit tiles");
  u32 diff[1][4];
  if (!strided_diff<P>(reinterpret_cast<const int(&)[1][kST][4]>(s),
                       reinterpret_cast<const int(&)[1][2][4]>(s[kST]), diff))
    return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (diff[0][i] == 0u) continue;
    const int row = warp_row + lane / 4 + 8 * (i / 2), e = 2 * (lane % 4) + i % 2;
    int at = -1;
#pragma unroll 1
    for (int nt = 0; nt < kST; ++nt) {
      int acc = P::acc_zero;
#pragma unroll 1
      for (int chunk = 0; chunk < T::head_dim / 16; ++chunk) {
        const uint4_ qv =
            sm80::ld_shared_u128(sQ + sm90::tile_offset<T::head_dim>(T::block_m, row, chunk));
        const uint4_ kv = sm80::ld_shared_u128(
            sKs + sm90::tile_offset<T::head_dim>(T::block_n, 8 * nt + e, chunk));
        auto dot = [&](u32 qw, u32 kw) {
          asm("dp4a.s32.s32 %0, %1, %2, %0;" : "+r"(acc) : "r"(qw), "r"(kw));
        };
        dot(qv.x, kv.x);
        dot(qv.y, kv.y);
        dot(qv.z, kv.z);
        dot(qv.w, kv.w);
      }
#pragma unroll
      for (int t = 0; t < kST; ++t)
        if (t == nt && s[t][i] != acc) {
          s[t][i] = acc;
          at = nt;  // reported: the last rebuilt (one, in the fault model)
        }
    }
    report_row(p, batch, head, first_row + lane / 4 + 8 * (i / 2),
               at >= 0 ? key0 + 8 * at + 2 * (lane % 4) + i % 2 : -1, fault_stage_scores, true,
               static_cast<float>(static_cast<int>(diff[0][i])), 0.f);
  }
}

// int8 EFTA's second evaluation of lazy_softmax on x (IntScores of s), run before the
// first so that s is free once the first has its float tile: its own block maxima, reference
// step (ref2, its own running reference) and P, into pa2 and shift2, with the rows' factors read
// at q_scale_at. l is the first's (Flash-ABFT's 64 l column checks it).
template <class T, bool Masked, int kCT, int kKC>
__device__ __forceinline__ void second_softmax(const IntScores<T, Masked, kCT>& x, u32 q_scale_at,
                                               const bool (&halve)[2], float (&ref2)[2],
                                               u32 (&pa2)[kKC][4], int (&shift2)[2]) {
  using P = typename T::Precision;
  float q_scale[2];  // the rows' factors from their copy (Q8WgmmaTraits::q_scale_offset)
  shared_float2</*kAgain=*/true>(q_scale_at, q_scale);
  float block_max[2], offset[2];
  bool need[2];
  x.row_max(q_scale, block_max);
#pragma unroll
  for (int r = 0; r < 2; ++r) need[r] = block_max[r] > ref2[r];
  lazy_reference_step<true>(block_max, need, halve, ref2, shift2);
#pragma unroll
  for (int r = 0; r < 2; ++r) offset[r] = ref2[r] == neg_inf() ? 0.f : -ref2[r];
  unsigned sum = 0;  // unused: l is the first's
  x.words(q_scale, offset, pa2, [&](float t0, float t1, float t2, float t3) {
    return P::template p_word<255>(t0, t1, t2, t3, sum);
  });
}

// The two evaluations compared: P bit for bit and each row half's fold; a row half that differs
// reports at the probs stage.
template <int kKC>
__device__ __forceinline__ void compare_softmax(const AttentionParams& p, const u32 (&pa)[kKC][4],
                                                const u32 (&pa2)[kKC][4], const int (&shift)[2],
                                                const int (&shift2)[2], int batch, int head,
                                                int first_row, int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    u32 apart = static_cast<u32>(shift[r] ^ shift2[r]);
#pragma unroll
    for (int kc = 0; kc < kKC; ++kc)
#pragma unroll
      for (int h = 0; h < 2; ++h) apart |= pa[kc][2 * h + r] ^ pa2[kc][2 * h + r];
    if (apart != 0u)
      report_row(p, batch, head, first_row + lane / 4 + 8 * r, -1, fault_stage_probs, false, 1.f,
                 0.f);
  }
}

}  // namespace q8

template <class T>
__device__ __forceinline__ void attention_fwd_q8_sm90(const AttentionParams& p,
                                                      const Q8TensorMaps& maps) {
  using P = typename T::Precision;
  constexpr int kST = T::s_tiles;
  constexpr int kOT = T::o_tiles;
  constexpr int kStages = T::num_stages;
  static_assert(T::num_warps == 4, "one warpgroup; two run warp-specialised (fwd_q8_ws_sm90.cuh)");
  using Acc = typename P::Acc;
  constexpr bool kInt = !P::float_accumulators;  // int8: INT32 accumulators, O too (lazy_softmax)
  constexpr int kCT = T::gemm1_n / 8;            // GEMM I's tiles: the keys', EFTA's digits

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const u32 sQ = (sm80::smem_addr(smem_raw) + 1023u) & ~1023u;
  const u32 sStages = sQ + T::q_bytes;
  auto stage_at = [&](int stage) { return sStages + stage * T::stage_bytes; };

  int m_block, head, batch;
  detail::tile_coords<T>(p, m_block, head, batch);
  const int head_kv = head / p.group_size;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int quad_t = lane % 4;
  const int warp_row = warp * 16;                      // this warp's 16 rows of the CTA's tile
  const int group_row = sm90::warpgroup_index() * 64;  // its warpgroup's 64 rows

  const int row0 = m_block * T::block_m;
  const int diag = p.seqlen_k - p.seqlen_q;  // bottom-right causal alignment
  const int n_blocks = detail::key_blocks<T>(p, row0, diag);

  const q8::Operands in = q8::operands<T>(p, batch, head, head_kv, row0);

  // A key block's K rows, their scales and V^T rows: thread 0's TMA copies onto the stage's
  // mbarrier.
  auto full = [&](int stage) {
    return detail::stage_barrier<T>(sm80::smem_addr(smem_raw), sQ, stage);
  };
  const int kv = batch * p.heads_kv + head_kv;
  auto load_kv = [&](int stage, int n_block) {
    if (threadIdx.x != 0) return;
    const int key0 = n_block * T::block_n;
    const u32 bar = full(stage);
    sm90::mbarrier_expect_tx(bar, T::k_tma_bytes + T::v_tma_bytes);
    q8::load_k_block<T>(stage_at(stage), maps, key0, kv, bar);
    q8::load_vt_block<T>(stage_at(stage), maps, key0, kv, bar);
  };
  q8::write_l_rows<T>(sStages);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) sm90::mbarrier_init(full(s), 1);
    sm90::fence_barrier_init();
  }
  // The initialised mbarriers, to every thread before the first copy lands on them (as in
  // fwd_sm90.cuh; without it racecheck flags the initialisation against the first expect_tx).
  __syncthreads();
  sm90::TmaKeyBlockPipeline<kStages> pipeline{{n_blocks}};
  pipeline.start(load_kv);

  float q_scale[2];  // per row of this lane's accumulators: s_Q * softmax scale * log2(e)
  if (p.q_16bit == 0) {
    sm90::load_rows_swizzled<T::threads, T::block_m, T::head_dim>(sQ, in.q, p.q_seq_stride,
                                                                  p.seqlen_q - row0, T::head_dim);
#pragma unroll
    for (int r = 0; r < 2; ++r)
      q_scale[r] = q8::row_scale(p, batch, head, row0 + warp_row + lane / 4 + r * 8);
  } else {
    quantise_q_rows<T, quant::F16In>(p, sQ, batch, head, row0, warp_row, lane, q_scale);
  }
  // int8 EFTA: the factors' copy for the second evaluation, a pair per lane quad.
  [[maybe_unused]] const u32 sQscale = sQ + T::q_scale_offset + (warp * 8 + lane / 4) * 8;
  if constexpr (T::efta)
    if (quad_t == 0)
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(sQscale), "f"(q_scale[0]),
                   "f"(q_scale[1]));
  // Q (cp.async or st.shared) for the tensor cores, and the mbarriers' initialisation, to every
  // thread.
  sm80::cp_async_commit();
  sm80::cp_async_wait<0>();
  sm90::fence_async_shared();
  __syncthreads();

  float o[1][kOT][4];   // fp8's O; int8's at the end
  float row_max[1][2];  // base-2 logits (int8: lazy_softmax's reference)
  float row_sum[1][2];  // this thread's share, in units of 2^p_log2_range
  // int8's O, and Flash-ABFT's checksum tiles after it (the digits' and 64 l's columns).
  [[maybe_unused]] int oi[kInt ? kOT + T::checksum_tiles : 1][4];
  detail::clear_accumulators(o, row_max, row_sum);
  q8::clear_int_output<T>(oi);
  // fp8: the last block's P V (with Flash-ABFT its last piece's checksum tile after O's) and
  // the factor O takes before it is added (nothing yet); Flash-ABFT's row sums.
  float pv[kInt ? 1 : kOT / T::pv_pieces + T::checksum_tiles][4] = {};
  [[maybe_unused]] q8::Fp8RowSums sums;
  float alpha[2] = {1.f, 1.f};
  // int8 EFTA: the second evaluation's running reference.
  [[maybe_unused]] float row_max2[2] = {neg_inf(), neg_inf()};
  // Fault injection (injection builds only): flip the planned bit of value `index` of a class of
  // `n` values this thread holds, as raw bits.
  auto inject = [&](int site, int n_block, auto* values, int n) {
    if constexpr (T::inject) inject_values(p.fault, site, n_block, values, n);
  };

  auto step = [&](const int it, const int n_block, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const u32 sStage = stage_at(it % kStages);
    pipeline.begin_step(it, full);

    // GEMM I: this warpgroup's 64 rows of S = Q K^T (fp8: FP32; int8: INT32 from its bias),
    // with int8 EFTA's two digit tiles after the keys'.
    Acc s[kCT][4];
    if constexpr (kInt)
#pragma unroll
      for (int i = 0; i < kCT * 4; ++i) s[i / 4][i % 4] = P::acc_zero;
    sm90::wgmma_fence();
    q8::gemm1<T>(s, sQ, sStage + T::k_offset, group_row);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();  // GEMM I, and the previous GEMM II
    pipeline.after_gemm1(it, load_kv);
    // fp8: the previous block's P V into O (pv is 0 before the first block).
    if constexpr (T::pv_in_flight) q8::fold_piece<T>(o[0], sums, pv, alpha, 0);

    // Site scale: a row's factor, wrong from this block on, before either evaluation reads it
    // (the key scales: block_scores).
    if constexpr (T::inject)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        inject_value_at(p.fault, fault_site_scale, n_block, r, T::scale_values, q_scale[r]);
    u32 pa[kST / 4][4];  // P, GEMM II's A fragments
    int shift[2];        // int8: each row half's fold
    const auto shift_fault = [&](int r, int& shift) {
      if constexpr (T::inject) inject_value_at(p.fault, fault_site_rescale, n_block, r, 2, shift);
    };
    // int8 EFTA: the scores checked against their digit columns, the lazy softmax run a second
    // time on them as they stand (IntScores: no float tile of its own), before the first takes
    // its float tile from them; P and the folds compared below. Site scores is the INT32
    // accumulators here, site checksum GEMM I's 8 digit values or GEMM II's 4.
    [[maybe_unused]] u32 pa2[T::efta ? kST / 4 : 1][4];
    [[maybe_unused]] int shift2[2];
    if constexpr (T::efta) {
      inject(fault_site_scores, n_block, &s[0][0], kST * 4);
      if constexpr (T::inject)
#pragma unroll
        for (int j = 0; j < 8; ++j)
          inject_value_at(p.fault, fault_site_checksum, n_block, j, 12, s[kST + j / 4][j % 4]);
      if constexpr (T::correct)
        q8::repair_scores<T>(p, s, sQ, sStage + T::k_offset, n_block * T::block_n, batch, head,
                             warp_row, row0 + warp_row, lane);
      else
        q8::check_scores<T>(p, s, batch, head, row0 + warp_row, lane);
      // The rows the first evaluation halves (lazy_softmax's rule).
      bool halve[2];
#pragma unroll
      for (int r = 0; r < 2; ++r)
        halve[r] = q8::lazy_sum_check(it) && quad_sum(row_sum[0][r]) > q8::kLazyHalveAbove;
      const q8::IntScores<T, kMasked, kCT> again{
          p, s, sStage + T::scale_offset, row0 + warp_row, n_block * T::block_n, lane, diag};
      q8::second_softmax<T>(again, sQscale, halve, row_max2, pa2, shift2);
    }

    // Dequantise by key, mask, and the online softmax: P lands in GEMM II's A fragments.
    float x[kST][4];
    float kg[T::block_n / 64];
    q8::block_scores<T, kMasked>(p, reinterpret_cast<const Acc(&)[kST][4]>(s), sStage,
                                 row0 + warp_row, n_block * T::block_n, lane, quad_t, diag, x, kg);
    if constexpr (!T::efta) inject(fault_site_scores, n_block, &x[0][0], kST * 4);
    const auto output_repair = [&](int r, auto& o) {
      if constexpr (T::correct) q8::repair_output<T>(p, o, r, batch, head, row0 + warp_row, lane);
    };
    q8::block_softmax<T>(x, kg, q_scale, row_max[0], row_sum[0], alpha, oi, pa, it, shift,
                         shift_fault, output_repair);
    inject(fault_site_probs, n_block, &pa[0][0], kST);
    inject(fault_site_row_max, n_block, &row_max[0][0], 2);
    inject(fault_site_row_sum, n_block, &row_sum[0][0], 2);
    if constexpr (!kInt) inject(fault_site_rescale, n_block, &alpha[0], 2);
    if constexpr (T::efta)
      q8::compare_softmax(p, pa, pa2, shift, shift2, batch, head, row0 + warp_row, lane);

    // GEMM II: P V^T-as-B, P from registers.
    sm90::wgmma_fence();
    q8::gemm2_onto_output<T>(pv, oi, pa, sStage);
    sm90::wgmma_commit();
    // One warpgroup: fp8 leaves GEMM II in flight into the next GEMM I (T::pv_in_flight),
    // unless it runs in pieces or carries checksums (pa and this V stage are gone by then). int8
    // waits: with P's registers live across GEMM I beside its INT32 O and S, 168 registers
    // serialise the wgmmas (C7512) at head_dim 128.
    if constexpr (!T::pv_in_flight) sm90::wgmma_wait<0>();
    if constexpr (!kInt && !T::pv_in_flight) {
      if constexpr (T::checksum) inject(fault_site_pv, n_block, &pv[0][0], kOT / T::pv_pieces * 4);
      q8::fold_output<T>(o[0], sums, pv, alpha, pa, sStage);
    }
    if constexpr (T::checksum && kInt) {
      inject(fault_site_output, n_block, &oi[0][0], kOT * 4);
      if constexpr (T::efta && T::inject)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          inject_value_at(p.fault, fault_site_checksum, n_block, 8 + j, 12,
                          oi[kOT + T::sums_tile][j]);
      else
        inject(fault_site_checksum, n_block, &oi[kOT][0], 4);
    } else if constexpr (T::checksum) {
      inject(fault_site_output, n_block, &o[0][0][0], kOT * 4);
      inject(fault_site_checksum, n_block, &sums.checksum[0], 4);
    }
  };

  detail::walk_key_blocks<T>(
      p.seqlen_k, row0, diag, n_blocks, [](int b) { return b; }, step);
  sm90::wgmma_wait<0>();
  if constexpr (T::pv_in_flight) q8::fold_piece<T>(o[0], sums, pv, alpha, 0);  // the last P V
  // int8 EFTA: the last block's reference (the LSE's) against the second evaluation's. Here,
  // before the CTA barrier: reported in the epilogue, after Flash-ABFT's checks, a mismatch hung
  // the kernel on the H200 (every row_max flip that a later fold did not heal).
  if constexpr (T::efta)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (__float_as_uint(row_max[0][r]) != __float_as_uint(row_max2[r]))
        q8::report_row(p, batch, head, row0 + warp_row + lane / 4 + 8 * r, -1, fault_stage_row_max,
                       false, fabsf(row_max[0][r] - row_max2[r]), 0.f);
  // Every copy has landed (each was waited for): the mbarriers end before the epilogue's
  // staging may write over them.
  __syncthreads();
  if (threadIdx.x == 0)
#pragma unroll
    for (int s = 0; s < kStages; ++s) sm90::mbarrier_inval(full(s));
  __syncthreads();

  if constexpr (T::checksum && kInt)
    q8::check_output<T>(p, oi, row_sum[0], n_blocks, batch, head, row0 + warp_row, lane);
  else if constexpr (T::checksum)
    q8::check_fp8_output<T>(p, o[0], sums, n_blocks, batch, head, row0 + warp_row, lane);
  q8::finish_output<T>(oi, o[0]);
  q8::store_output<T>(p, o, row_sum, row_max, sQ, row0, warp_row, lane, batch, head, head_kv);
}

}  // namespace ftattn
