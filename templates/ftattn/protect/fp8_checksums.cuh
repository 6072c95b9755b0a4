// Protection policies flash_abft and efta_detect of the 8-bit skeleton (kernel/fwd_q8_sm80.cuh)
// for fp8_e4m3.
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
//   3     efta_detect: ones (the sum of the E4M3 P that GEMM II used), else zero
//   4-7   zero
// The accumulator tile is rescaled with O; at the end each row's sum over channels of O must
// equal (col 0 + col 1) * 2^4 within tol_output * magnitude * (key blocks + 16).
//
// efta_detect also checks GEMM I the same way: every K block gets 24 f16 rows, per checksum key
// e = 0..7 the strided sums sum_nt K[8 nt + e] as hi + lo and sum_nt |K[8 nt + e]|, and the E4M3 Q
// fragments (|Q|: sign bits cleared) multiply them through f16 MMAs, so each thread checks its
// raw scores of keys 8 nt + e against hi + lo within tol_scores * (|Q| . sum |K|), a bound on the
// sum of absolute contributions. The softmax is evaluated twice and compared bit for bit, as for
// int8 (protect/int8_checksums.cuh); l is checked at the end against the ones column within
// E4M3's rounding of P (half an ulp, 2^-4, per normal term; 2^-10 absolute per subnormal one).
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

struct Fp8Efta : Fp8Abft {
  static constexpr bool efta = true;
  static constexpr int k16_rows = 24;
  static constexpr int ones_column = 3;
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
template <int HeadDim, class Protect>
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
  const unsigned short one = Protect::efta ? f16_bits(1.f) : 0;
  const unsigned short rows[8] = {hi, f16_bits(c - f16_value(hi)), f16_bits(a), one, 0, 0, 0, 0};
#pragma unroll
  for (int r = 0; r < 8; ++r) out[static_cast<long long>(r) * p.keys_padded] = rows[r];
}

// efta_detect's K rows of one key block, f16: row e holds hi, row 8 + e lo of sum_nt K[key0 +
// 8 nt + e], row 16 + e sum_nt |K[key0 + 8 nt + e]| (|sum| <= 448 block_n / 8: inside f16's
// range); keys past seqlen_k are 0, as the kernel's zero-filled K tile. Grid (key blocks, kv
// heads, batch), 128 threads.
template <int HeadDim, int BlockN>
__device__ __forceinline__ void fp8_k_rows(const Q8ChecksumParams& p) {
  const int n_blocks = gridDim.x;
  const long long head = static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y;
  const unsigned char* k =
      static_cast<const unsigned char*>(p.k) + head * static_cast<long long>(p.seqlen_k) * HeadDim;
  unsigned short* out = reinterpret_cast<unsigned short*>(static_cast<char*>(p.k_out)) +
                        (head * n_blocks + blockIdx.x) * Fp8Efta::k16_rows * HeadDim;
  const int key0 = blockIdx.x * BlockN;
  for (int job = threadIdx.x; job < 8 * HeadDim; job += blockDim.x) {
    const int e = job / HeadDim, d = job % HeadDim;
    float plain = 0.f, magnitude = 0.f;
    for (int nt = 0; nt < BlockN / 8; ++nt) {
      const int key = key0 + 8 * nt + e;
      const u32 byte = key < p.seqlen_k ? k[static_cast<long long>(key) * HeadDim + d] : 0u;
      const float x = f16_value(static_cast<unsigned short>(e4m3x2_to_f16x2(byte) & 0xffffu));
      plain += x;
      magnitude += fabsf(x);
    }
    const unsigned short hi = f16_bits(plain);
    out[e * HeadDim + d] = hi;
    out[(8 + e) * HeadDim + d] = f16_bits(plain - f16_value(hi));
    out[(16 + e) * HeadDim + d] = f16_bits(magnitude);
  }
}

}  // namespace ftattn::protect
