// Flash-ABFT's checksum in the warp-specialised Hopper kernel (kernel/fwd_ws_sm90.cuh), with no
// prologue and no checksum tile in GEMM II:
//   producer   once a V tile has landed, its 128 threads sum each key's row in FP32 (and its
//              sum |v|, the threshold's bound) into a small area after the tile;
//   consumers  each thread accumulates sum_j P_ij vsum_j over its own keys on the CUDA cores, P
//              as packed for GEMM II (the 16-bit values the tensor cores multiply, not FP32 P,
//              whose rounding alone would exceed the output threshold), in its softmax once P is
//              packed, rescaled with O; the quad's partial sums meet once, at the end-of-row
//              check. (Read while GEMM II's wgmmas run, or just before their turn, the A
//              registers made ptxas spill and serialise the wgmmas at three consumers, C7512.)
// Before, the prologue read all of V once more per call (~4% at 2k keys on an H100) and GEMM II
// carried an n8 checksum tile (1/16 of its tensor time at head dim 128). The area's layout:
// protect/v_sums_layout.cuh.
#pragma once

#include "ftattn/arch/sm80/shared.cuh"
#include "ftattn/common/faults.cuh"
#include "ftattn/common/types.cuh"
#include "ftattn/protect/v_sums_layout.cuh"

namespace ftattn::protect {

// Producer thread t (0..127) of a landed V tile at dv (TileRows rows of RowBytes, in 128-byte
// swizzle atoms of TileRows rows each: sm90::tile_offset), its area at dv + area.
template <int BlockN, int RowBytes, bool Bf16>
__device__ __forceinline__ void sum_v_tile(u32 dv, u32 area, int t) {
  constexpr int kThreadsPerKey = 128 / BlockN;             // 1 or 2
  constexpr int kChunks = RowBytes / 16 / kThreadsPerKey;  // 16-byte chunks per thread
  static_assert(BlockN * kThreadsPerKey == 128 && kChunks >= 4, "64 or 128 keys, d64 or d128");
  const int key = t / kThreadsPerKey, part = t % kThreadsPerKey, lane = t % 32;
  // The swizzle leaves a row's chunks in its own 128 bytes, permuted; a sum needs no order, so
  // chunks are read where they lie. A quarter warp's eight loads start at different chunks, on
  // different banks.
  const int rot = kChunks >= 8 ? lane % 8 : key;
  float sum[2] = {0.f, 0.f}, mag[2] = {0.f, 0.f};
#pragma unroll 2
  for (int i = 0; i < kChunks; ++i) {
    const int q = part * kChunks + ((i + rot) & (kChunks - 1));
    const uint4_ c = sm80::ld_shared_u128(dv + (q / 8) * BlockN * 128 + key * 128 + (q % 8) * 16);
    const u32 words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      float x0, x1;
      unpack2<Bf16>(words[w], x0, x1);
      sum[w % 2] += x0 + x1;
      mag[w % 2] += fabsf(x0) + fabsf(x1);
    }
  }
  float total = sum[0] + sum[1], bound = mag[0] + mag[1];
  if constexpr (kThreadsPerKey == 2) {
    total += __shfl_xor_sync(0xffffffffu, total, 1);
    bound += __shfl_xor_sync(0xffffffffu, bound, 1);
  }
  if (part == 0) sm80::st_shared_u32(area + 4 * v_sum_slot(key, BlockN), __float_as_uint(total));
#pragma unroll
  for (int off = 16; off > 0; off /= 2)
    bound = fmaxf(bound, __shfl_xor_sync(0xffffffffu, bound, off));
  if (lane == 0)
    sm80::st_shared_u32(area + 4 * v_bound_slot(BlockN, t / 32), __float_as_uint(bound));
}

// Consumer thread of quad column t: c[r] += sum over its keys of P16(row half r) * vsum, from pa
// (GEMM II's A fragments: pa[kc] = row 0 and 1 of n8 tile 2 kc, then of tile 2 kc + 1), and the
// largest sum |v| of the tile into v_bound.
template <int BlockN, bool Bf16>
__device__ __forceinline__ void checksum_pv(const u32 (&pa)[BlockN / 16][4], u32 area, int t,
                                            float (&c)[2], float& v_bound) {
  const u32 mine = area + 4 * v_sum_slot(2 * t, BlockN);  // key 2 t, n8 tile 0
#pragma unroll
  for (int kc = 0; kc < BlockN / 16; ++kc) {
    const uint4_ w = sm80::ld_shared_u128(mine + 16 * kc);
    const float v[4] = {__uint_as_float(w.x), __uint_as_float(w.y), __uint_as_float(w.z),
                        __uint_as_float(w.w)};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float p0, p1, p2, p3;
      unpack2<Bf16>(pa[kc][r], p0, p1);
      unpack2<Bf16>(pa[kc][2 + r], p2, p3);
      c[r] = fmaf(p0, v[0], fmaf(p1, v[1], fmaf(p2, v[2], fmaf(p3, v[3], c[r]))));
    }
  }
  const uint4_ m = sm80::ld_shared_u128(area + 4 * v_bound_slot(BlockN, 0));
  v_bound = fmaxf(fmaxf(v_bound, fmaxf(__uint_as_float(m.x), __uint_as_float(m.y))),
                  fmaxf(__uint_as_float(m.z), __uint_as_float(m.w)));
}

}  // namespace ftattn::protect
