// Pieces every forward skeleton shares (16-bit, PASA, 8-bit).
#pragma once

#include "ftattn/common/math.cuh"

namespace ftattn::detail {

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

}  // namespace ftattn::detail
