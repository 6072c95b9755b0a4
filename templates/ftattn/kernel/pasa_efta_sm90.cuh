// EFTA's GEMM I check on f16_pasa's warp-specialised kernel (fwd_ws_sm90.cuh), whose scores S''
// are FP16 wgmma accumulators: the sm80 kernel's check (fwd_pasa_sm80.cuh) on Hopper's tiles.
//
//   checksum  GEMM I's checksum tile: Q against the 8 checksum rows below the keys (K''s strided
//             sums, hi + lo, from the prologue run on the shifted keys) by an m64n8 wgmma with
//             FP32 accumulators of its own, beside GEMM I's FP16 one.
//   own sums  each thread's FP16 scores of a row summed in FP32 on the CUDA cores (own_score_sums
//             says why not on the tensor cores, as the sm80 kernel sums them).
//   check     checksum and sum agree within the FP16 accumulation's rounding (pasa::scores_tol);
//             the threshold's sum |S''| is tried first at its least, |sum|, and summed on the
//             CUDA cores only for a row that fails there. efta_correct rebuilds a single faulty
//             element from the weighted checksum rows.
#pragma once

#include "ftattn/kernel/fwd_pasa_sm80.cuh"
#include "ftattn/kernel/fwd_sm90.cuh"

namespace ftattn::pasa {

// This thread's FP32 sums of its S'' values of row halves 0 and 1, on the CUDA cores (two
// chains per row half). As mma.sync against a B fragment of ones (the sm80 kernel's), the MMAs
// queued behind the other warpgroup's wgmmas: the kernel ran 2.1x its unprotected self, the
// tensor pipe busy 38% of the time against 75% (ncu). As an m64n8 wgmma against ones in shared
// memory, ptxas serialised every wgmma (C7511) in some of the builds.
template <int kST>
__device__ __forceinline__ void own_score_sums(const u32 (&s)[kST][2], float (&sum)[2]) {
  using P = precision::F16Pasa;
  float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
  for (int nt = 0; nt < kST; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r) acc[r][nt % 2] += P::lo(s[nt][r]) + P::hi(s[nt][r]);
#pragma unroll
  for (int r = 0; r < 2; ++r) sum[r] = acc[r][0] + acc[r][1];
}

// GEMM I's check of key block n_block: `ref[r]` the checksum of row half r (global row
// `rows + 8 r`, row `q_row + 8 r` of the Q tile at sQ), `sum[r]` own_score_sums', `walk`
// |q| sum |k'| / sqrt(head_dim) over the thread's keys. Failed checks are recorded; efta_correct
// rebuilds the element first. The slow path runs under one branch per warp.
template <class T, int kST>
__device__ __forceinline__ void check_scores(const AttentionParams& p, u32 (&s)[kST][2],
                                             const float (&ref)[2], const float (&sum)[2],
                                             float walk, u32 sQ, u32 sKs, int q_row, int quad_t,
                                             int n_block, int rows, int batch, int head) {
  bool clean = true;
#pragma unroll
  for (int r = 0; r < 2; ++r)
    clean &= protect::scores_ok(ref[r] - sum[r], scores_tol<T>(p, fabsf(sum[r]), walk));
  if (__all_sync(0xffffffffu, clean)) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float own, abs_sum;
    own_sums(s, r, own, abs_sum);
    const float e1 = ref[r] - own, tol = scores_tol<T>(p, abs_sum, walk);
    if (protect::scores_ok(e1, tol)) continue;
    int bad = -1;
    if constexpr (T::Protect::correct)
      bad = correct_scores(
          s, r, ref[r], detail::weighted_score_checksum<T, false>(sQ, sKs, q_row + 8 * r, quad_t));
    record_fault(p.fault_log, batch, head, rows + 8 * r,
                 bad >= 0 ? n_block * T::block_n + protect::row_group_column(bad, quad_t) : -1,
                 fault_stage_scores, bad >= 0, fabsf(e1), tol);
  }
}

}  // namespace ftattn::pasa
