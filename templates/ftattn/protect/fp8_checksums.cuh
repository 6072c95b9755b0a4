// Protection policy flash_abft of the 8-bit skeleton (kernel/fwd_q8_sm80.cuh) for fp8_e4m3.
//
// E4M3 cannot carry a checksum of E4M3 values (3 mantissa bits), so V^T gets 8 rows of f16
// instead, multiplied by the same P through f16 MMAs (m16n8k16, FP32 accumulators): each E4M3 P
// register (4 consecutive keys of a row, the m16n8k32 A fragment) converts exactly into two
// f16x2 registers, and the f16 fragment then sees keys 4t + {0, 1} at k = 2t, 2t + 1 and keys
// 4t + {2, 3} at k = 8 + 2t, 9 + 2t. The B fragment wants the same keys of column g = lane / 4:
// 4 consecutive stored positions, so the rows need no permutation of their own. Rows:
//   0, 1  the channel sum c = sum_d v_d of the quantised values, times 2^-4 (|c| <= 448 * 256
//         stays inside f16's range), as hi + lo (relative error about 2^-22)
//   2     sum_d |v_d| times 2^-4: the magnitude the check's threshold is relative to
//   3-7   zero
// The accumulator tile is rescaled with O; at the end each row's sum over channels of O must
// equal (col 0 + col 1) * 2^4 within tol_output * magnitude * (key blocks + 16).
#pragma once

#include "ftattn/common/types.cuh"
#include "ftattn/protect/none.cuh"
#include "ftattn/quantize_params.cuh"

namespace ftattn::protect {

struct Fp8Abft : None {
  static constexpr bool enabled = true;
  static constexpr bool row_check = true;
  static constexpr int f16_rows = 8;
  static constexpr float checksum_scale = 0.0625f;  // 2^-4
};

// Two E4M3 bytes (the low 16 bits of `two`) as f16x2, the lower byte in the lower half.
__device__ __forceinline__ u32 e4m3x2_to_f16x2(u32 two) {
  u32 r;
  asm("{\n .reg .b16 l;\n mov.b32 {l, _}, %1;\n cvt.rn.f16x2.e4m3x2 %0, l;\n}"
      : "=r"(r)
      : "r"(two));
  return r;
}

// One f16 value's bits from a float (round to nearest).
__device__ __forceinline__ unsigned short f16_bits(float x) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}
__device__ __forceinline__ float f16_value(unsigned short h) {
  float x;
  asm("cvt.f32.f16 %0, %1;" : "=f"(x) : "h"(h));
  return x;
}

// The f16 rows of one head's V^T, one stored key position per thread (every position: P is 0 for
// the padding keys). Grid (key chunks of 128, kv heads, batch).
template <int HeadDim>
__device__ __forceinline__ void fp8_v_rows(const Q8ChecksumParams& p) {
  const int pos = blockIdx.x * blockDim.x + threadIdx.x;
  if (pos >= p.keys_padded) return;
  const long long head = static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y;
  const unsigned char* vt = static_cast<const unsigned char*>(p.vt) +
                            head * HeadDim * static_cast<long long>(p.keys_padded);
  float c = 0.f, a = 0.f;
  for (int d = 0; d < HeadDim; d += 2) {
    const long long at = static_cast<long long>(d) * p.keys_padded + pos;
    const u32 two = vt[at] | (static_cast<u32>(vt[at + p.keys_padded]) << 8);
    const u32 h2 = e4m3x2_to_f16x2(two);
    const float v0 = f16_value(static_cast<unsigned short>(h2 & 0xffffu));
    const float v1 = f16_value(static_cast<unsigned short>(h2 >> 16));
    c += v0 + v1;
    a += fabsf(v0) + fabsf(v1);
  }
  c *= Fp8Abft::checksum_scale;
  a *= Fp8Abft::checksum_scale;
  const unsigned short hi = f16_bits(c);
  unsigned short* out = static_cast<unsigned short*>(p.out) +
                        head * Fp8Abft::f16_rows * static_cast<long long>(p.keys_padded) + pos;
  const unsigned short rows[8] = {hi, f16_bits(c - f16_value(hi)), f16_bits(a), 0, 0, 0, 0, 0};
#pragma unroll
  for (int r = 0; r < 8; ++r) out[static_cast<long long>(r) * p.keys_padded] = rows[r];
}

}  // namespace ftattn::protect
