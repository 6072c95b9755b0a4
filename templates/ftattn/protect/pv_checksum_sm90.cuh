// Flash-ABFT's checksum on the CUDA cores in the warp-specialised Hopper kernel
// (kernel/fwd_ws_sm90.cuh), with no checksum tile in GEMM II: each consumer thread accumulates
// sum_j P_ij vsum_j over its own keys, P as packed for GEMM II (the 16-bit values the tensor
// cores multiply; FP32 P's rounding alone would exceed the output threshold), vsum_j in FP32 from
// the prologue (protect/checksum.cuh), rescaled with O; the quad's shares meet once, at the
// end-of-row check. The m64n{head_dim + 8} GEMM II the tile needed cost the prepared kernel about
// 4% at head dim 128 on an H100 (bench/results/nvidia-h100/flash_abft_prepared_cost_split_ab.csv).
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm80/shared.cuh"
#include "ftattn/common/faults.cuh"
#include "ftattn/common/types.cuh"
#include "ftattn/protect/pv_sums_layout.cuh"

namespace ftattn::protect {

// Producer threads: block `src`'s sums (pv_sums_layout.cuh) into the area at `dst`, by cp.async.
template <int BlockN, int Threads>
__device__ __forceinline__ void load_pv_sums(u32 dst, const unsigned char* src, int thread) {
  constexpr int kChunks = pv_sums_floats(BlockN) / 4;
  for (int c = thread; c < kChunks; c += Threads)
    sm80::cp_async_16(dst + c * 16, src + c * 16, true);
}

// Consumer thread of quad column t: c[r] += sum over its keys of P16(row half r) * vsum, from pa
// (GEMM II's A fragments: pa[kc] = row 0 and 1 of n8 tile 2 kc, then of tile 2 kc + 1).
template <int BlockN, bool Bf16>
__device__ __forceinline__ void pv_checksum(const u32 (&pa)[BlockN / 16][4], u32 area, int t,
                                            float (&c)[2]) {
  const u32 mine = area + 4 * pv_sum_slot(2 * t, BlockN);  // key 2 t: n8 tile 0, column 0
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
}

}  // namespace ftattn::protect
