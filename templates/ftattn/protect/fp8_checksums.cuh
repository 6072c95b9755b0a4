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
// equal (col 0 + col 1) * 2^4 within tol_output * ((key blocks + 16) * min(sum |o| + |checksum|,
// 2 magnitude) + magnitude).
//
// efta_detect also checks GEMM I the same way: every K block gets 24 f16 rows, per checksum key
// e = 0..7 the strided sums sum_nt K[8 nt + e] as hi + lo and sum_nt |K[8 nt + e]|, and the E4M3 Q
// fragments (|Q|: sign bits cleared) multiply them through f16 MMAs, so each thread checks its
// raw scores of keys 8 nt + e against hi + lo within tol_scores * (|Q| . sum |K|), a bound on the
// sum of absolute contributions. The softmax is evaluated twice and compared bit for bit, as for
// int8 (protect/int8_checksums.cuh); l is checked at the end against the ones column within
// E4M3's rounding of P (half an ulp, 2^-4, per normal term; 2^-10 absolute per subnormal one).
//
// efta_correct adds 16 K rows, sum_nt (nt + 1) / n K[8 nt + e] as hi + lo, multiplied after a
// failed check, and a wrong score is located (protect::locate) and rebuilt
// before the softmax. Its V^T rows are strided too, per checksum column e: hi and lo of
// sum_nt v[8 nt + e], the magnitude, and the weighted sum as hi and lo (40 rows), so each thread
// checks its own O values at the end and rebuilds a single wrong one, as the 16-bit kernels do.
#pragma once

#include "ftattn/common/types.cuh"
#include "ftattn/precision/f16_pasa.cuh"
#include "ftattn/protect/none.cuh"
#include "ftattn/protect/v_rows_thread.cuh"
#include "ftattn/quantize_params.cuh"

namespace ftattn::protect {

struct Fp8Abft : None {
  static constexpr bool enabled = true;
  static constexpr int f16_rows = 8;
  static constexpr float checksum_scale = 0.0625f;  // 2^-4
};

template <bool Correct>
struct Fp8Efta : Fp8Abft {
  static constexpr bool efta = true;
  static constexpr bool correct = Correct;
  // K: hi, lo, magnitude (+ correct: weighted hi and lo) tiles of the strided sums. The weighted
  // sum needs its lo half: at hi only, its rounding (2^-11 of |Q| . sum |K|) moved the located
  // index by whole units for faults the check sees (a CPU simulation mislocated 235 of 2,585).
  static constexpr int k16_rows = Correct ? 40 : 24;
  // V^T: detect, Flash-ABFT's rows with the ones row; correct, strided channel sums per column
  // e: hi, lo, magnitude, weighted hi and weighted lo tiles (locating an O element needs the
  // weighted sum to about 2^-20: the O sums are large).
  static constexpr int f16_rows = Correct ? 40 : 8;
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

// Half h of an E4M3 m16n8k32 A fragment (registers: row g, k 4t..4t+3; row g + 8; the same at
// k + 16) as the A fragment of an f16 m16n8k16 MMA over those 16 k: its k 2t, 2t + 1 are k
// 16h + 4t + {0, 1}, its k 8 + 2t, 9 + 2t are 16h + 4t + {2, 3}, so the f16 B operand takes 4
// consecutive k of its column.
__device__ __forceinline__ void e4m3_half_to_f16(const u32 (&a)[4], int h, u32 (&out)[4]) {
  const u32 lo = a[2 * h], hi = a[2 * h + 1];
  out[0] = e4m3x2_to_f16x2(lo);
  out[1] = e4m3x2_to_f16x2(hi);
  out[2] = e4m3x2_to_f16x2(lo >> 16);
  out[3] = e4m3x2_to_f16x2(hi >> 16);
}

using Half = precision::F16Pasa;  // its f16 conversions: to_half, lo, hi

// What one f16 of x misses: the lo row of a hi + lo pair.
__device__ __forceinline__ float f16_rest(float x) { return x - Half::lo(Half::to_half(x)); }

// The f16 rows of one head's V^T, one stored key position per thread (every position: P is 0 for
// the padding keys). Grid (key chunks of 128, kv heads, batch).
template <int HeadDim, class Protect>
__device__ __forceinline__ void fp8_v_rows(const Q8ChecksumParams& p) {
  const VtRowsThread<unsigned short> t(p, HeadDim, Protect::f16_rows);
  const int pos = t.pos;
  if (pos >= p.keys_padded) return;
  const unsigned char* vt = t.vt;
  unsigned short* out = t.out;
  auto put = [&](int row, float x) {
    out[static_cast<long long>(row) * p.keys_padded] = Half::to_half(x);
  };
  if constexpr (Protect::correct) {
    // Strided over channels 8 nt + e, the checksum column e of GEMM II's accumulator tile; the
    // weights (nt + 1) / n of protect::locate.
    constexpr int n = HeadDim / 8;
    float plain[8] = {}, weighted[8] = {}, magnitude[8] = {};
    for (int d = 0; d < HeadDim; ++d) {
      const u32 h2 = e4m3x2_to_f16x2(vt[static_cast<long long>(d) * p.keys_padded + pos]);
      const float v = Half::lo(h2);
      plain[d % 8] += v;
      weighted[d % 8] += (d / 8 + 1) / float(n) * v;
      magnitude[d % 8] += fabsf(v);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float c = plain[e] * Protect::checksum_scale;
      put(e, c);
      put(8 + e, f16_rest(c));
      const float w = weighted[e] * Protect::checksum_scale;
      put(16 + e, magnitude[e] * Protect::checksum_scale);
      put(24 + e, w);
      put(32 + e, f16_rest(w));
    }
    return;
  }
  float c = 0.f, a = 0.f;
  for (int d = 0; d < HeadDim; d += 2) {
    const long long at = static_cast<long long>(d) * p.keys_padded + pos;
    const u32 two = vt[at] | (static_cast<u32>(vt[at + p.keys_padded]) << 8);
    const u32 h2 = e4m3x2_to_f16x2(two);
    const float v0 = Half::lo(h2);
    const float v1 = Half::hi(h2);
    c += v0 + v1;
    a += fabsf(v0) + fabsf(v1);
  }
  c *= Fp8Abft::checksum_scale;
  a *= Fp8Abft::checksum_scale;
  const float rows[8] = {c, f16_rest(c), a, Protect::efta ? 1.f : 0.f, 0, 0, 0, 0};
#pragma unroll
  for (int r = 0; r < 8; ++r) put(r, rows[r]);
}

// Flash-ABFT on the fp8 wgmma kernel (kernel/fwd_q8_sm90.cuh), whose GEMM II is E4M3 only: four
// E4M3 rows per key below V^T's, riding in its last piece as columns head_dim + 0 .. 3:
//   0-2  the channel sum c = sum_d v_d of the quantised values, times s = 1 / (2 head_dim) (|c s|
//        <= 224, inside E4M3's 448), as three digits, each E4M3's rounding of what the ones
//        before left, the second times 2^4 and the third times 2^8 (so that neither falls into
//        E4M3's subnormals): c s = d0 + d1 / 16 + d2 / 256 within 2^-12 |c s| (plus 2^-18 where
//        a remainder goes subnormal);
//   3    sum_d |v_d| times s, at least 4 (the threshold's magnitude: the digits' error is then
//        below 2^-11 of it however small the key's values).
// Each column's FP32 accumulator is separate, so the kernel weighs them after the sums. Host
// model and tests: fp8_wgmma_digits in ftattn/protect_model.hpp.
template <int HeadDim>
inline constexpr float fp8_digit_scale = 0.5f / HeadDim;
inline constexpr float fp8_digit_weight[3] = {1.f, 0x1p-4f, 0x1p-8f};
inline constexpr float fp8_min_magnitude = 4.f;

// E4M3's rounding of x (to nearest, saturating at 448): its byte and its value.
__device__ __forceinline__ float e4m3_round(float x, u32& byte) {
  unsigned short two;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(two) : "f"(0.f), "f"(x));
  byte = two & 0xffu;
  return Half::lo(e4m3x2_to_f16x2(byte));
}

// The four E4M3 rows of one head's V^T (above), one stored key position per thread, into rows of
// keys_padded bytes. Grid (key chunks of 128, kv heads, batch).
template <int HeadDim>
__device__ __forceinline__ void fp8_v_digit_rows(const Q8ChecksumParams& p) {
  const VtRowsThread<unsigned char> t(p, HeadDim, 4);
  const int pos = t.pos;
  if (pos >= p.keys_padded) return;
  const unsigned char* vt = t.vt;
  unsigned char* out = t.out;
  float c = 0.f, a = 0.f;  // exact: E4M3 values of head_dim <= 128 channels
  for (int d = 0; d < HeadDim; d += 2) {
    const long long at = static_cast<long long>(d) * p.keys_padded + pos;
    const u32 h2 = e4m3x2_to_f16x2(vt[at] | (static_cast<u32>(vt[at + p.keys_padded]) << 8));
    c += Half::lo(h2) + Half::hi(h2);
    a += fabsf(Half::lo(h2)) + fabsf(Half::hi(h2));
  }
  float rest = c * fp8_digit_scale<HeadDim>;
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    u32 byte;
    const float digit = e4m3_round(rest / fp8_digit_weight[i], byte);
    out[static_cast<long long>(i) * p.keys_padded] = static_cast<unsigned char>(byte);
    rest -= digit * fp8_digit_weight[i];  // exact: the digit is rest's nearest E4M3
  }
  u32 byte;
  e4m3_round(fmaxf(a * fp8_digit_scale<HeadDim>, fp8_min_magnitude), byte);
  out[3LL * p.keys_padded] = static_cast<unsigned char>(byte);
}

// efta_detect's K rows of one key block, f16: row e holds hi, row 8 + e lo of sum_nt K[key0 +
// 8 nt + e], row 16 + e sum_nt |K[key0 + 8 nt + e]| (|sum| <= 448 block_n / 8: inside f16's
// range); keys past seqlen_k are 0, as the kernel's zero-filled K tile. Grid (key blocks, kv
// heads, batch), 128 threads.
template <int HeadDim, int BlockN, class Protect>
__device__ __forceinline__ void fp8_k_rows(const Q8ChecksumParams& p) {
  const int n_blocks = gridDim.x;
  const long long head = static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y;
  const unsigned char* k =
      static_cast<const unsigned char*>(p.k) + head * static_cast<long long>(p.seqlen_k) * HeadDim;
  unsigned short* out = reinterpret_cast<unsigned short*>(static_cast<char*>(p.k_out)) +
                        (head * n_blocks + blockIdx.x) * Protect::k16_rows * HeadDim;
  const int key0 = blockIdx.x * BlockN;
  for (int job = threadIdx.x; job < 8 * HeadDim; job += blockDim.x) {
    const int e = job / HeadDim, d = job % HeadDim;
    float plain = 0.f, magnitude = 0.f, weighted = 0.f;
    for (int nt = 0; nt < BlockN / 8; ++nt) {
      const int key = key0 + 8 * nt + e;
      const u32 byte = key < p.seqlen_k ? k[static_cast<long long>(key) * HeadDim + d] : 0u;
      const float x = Half::lo(e4m3x2_to_f16x2(byte));
      plain += x;
      magnitude += fabsf(x);
      weighted += (nt + 1) / float(BlockN / 8) * x;  // protect::locate's weights
    }
    out[e * HeadDim + d] = Half::to_half(plain);
    out[(8 + e) * HeadDim + d] = Half::to_half(f16_rest(plain));
    out[(16 + e) * HeadDim + d] = Half::to_half(magnitude);
    if constexpr (Protect::correct) {
      out[(24 + e) * HeadDim + d] = Half::to_half(weighted);
      out[(32 + e) * HeadDim + d] = Half::to_half(f16_rest(weighted));
    }
  }
}

}  // namespace ftattn::protect
