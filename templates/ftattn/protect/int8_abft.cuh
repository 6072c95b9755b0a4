// Protection policy flash_abft for int8 (kernel/fwd_q8_sm80.cuh): Flash-ABFT with checksums exact
// in INT32.
//
// V^T gets 8 more channel rows: rows 0 .. digits-1 hold, for each stored key position, the
// balanced base-128 digits of that key's channel sum c = sum_d v_d (|c| <= 127 head_dim: two
// digits up to head dim 128, three above; the host model and its tests are in
// ftattn/protect_model.hpp), the other rows are 0. GEMM II's m16n8k32 IMMAs then give, for each
// query row and key block, both sides of
//     sum_d (P V)_d == sum_i 128^i (P digit_i)
// exactly; the kernel compares them in INT32 modulo 2^32 (its accumulators start at a bias and
// may wrap), with zero tolerance. The FP32 accumulation of O (rescale, add) is checked at the end
// against an FP32 checksum carried beside it, per thread, with the usual relative threshold.
#pragma once

#include "ftattn/common/types.cuh"
#include "ftattn/protect/none.cuh"
#include "ftattn/quantize_params.cuh"

namespace ftattn::protect {

struct Int8Abft : None {
  static constexpr bool enabled = true;
  static constexpr bool row_check = true;
  static constexpr int digit_rows = 8;  // one n8 tile of V^T rows
};

// Base-128 digits of the channel sum of head_dim int8 values.
template <int HeadDim>
inline constexpr int int8_digit_count = HeadDim <= 128 ? 2 : 3;

// The digit rows of one head's V^T: one stored key position per thread. V^T is head_dim rows of
// keys_padded bytes (the quantised layout); the digits go to 8 rows of keys_padded bytes at
// `out`. Grid (key chunks of 128, kv heads, batch).
template <int HeadDim>
__device__ __forceinline__ void int8_v_digits(const Int8DigitsParams& p) {
  const int pos = blockIdx.x * blockDim.x + threadIdx.x;
  if (pos >= p.keys_padded) return;
  const long long head = static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y;
  const signed char* vt = static_cast<const signed char*>(p.vt) +
                          head * HeadDim * static_cast<long long>(p.keys_padded);
  int c = 0;
  for (int d = 0; d < HeadDim; ++d) c += vt[static_cast<long long>(d) * p.keys_padded + pos];
  signed char* out =
      static_cast<signed char*>(p.out) + head * 8 * static_cast<long long>(p.keys_padded) + pos;
  constexpr int count = int8_digit_count<HeadDim>;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    int digit = 0;
    if (i < count - 1) {
      digit = ((c % 128) + 128) % 128;
      if (digit >= 64) digit -= 128;  // balanced: [-64, 63]
      c = (c - digit) / 128;
    } else if (i == count - 1) {
      digit = c;  // the top digit: within [-127, 127] for head_dim <= 256
    }
    out[static_cast<long long>(i) * p.keys_padded] = static_cast<signed char>(digit);
  }
}

}  // namespace ftattn::protect
