// Protection policies of the 8-bit skeleton (kernel/fwd_q8_sm80.cuh) for int8: checksums that
// are exact in INT32, carried through the m16n8k32 IMMAs as extra operand rows.
//
// A checksum of int8 values needs more than 8 bits, so it rides as balanced base-128 digits, one
// operand row per digit: c = sum_i 128^i digit_i, every digit an int8 (the low ones in
// [-64, 63], the top one wider). The MMAs give each digit's product exactly, and the kernel
// compares both sides in INT32 modulo 2^32 (its accumulators start at a bias and may wrap) with
// zero tolerance. Host model and tests: ftattn/protect_model.hpp.
//
//   Int8Abft       Flash-ABFT: 8 rows appended to V^T; rows 0 .. digits-1 hold, per key, the
//                  digits of its channel sum sum_d v_d, so per query row and key block
//                      sum_d (P V)_d == sum_i 128^i (P digit_i).
//                  The FP32 accumulation of O (rescale, add) is checked at the end against an
//                  FP32 checksum carried beside it, per thread, with a relative threshold.
//   Int8Efta<false> EFTA detect: the same V rows with a ones row (row 7: the block's l, from the
//                  P that GEMM II really used), and 16 rows appended to every K block: the digits
//                  of the strided sums sum_nt K[8 nt + e], e = 0..7, so each thread's checksum
//                  column e = 2 (lane % 4) + c covers exactly the scores it holds and GEMM I is
//                  checked per thread, without shuffles. The softmax (dequantisation, max, exp,
//                  rounding P to 7 bits) is verified by a second evaluation compared bit for bit
//                  (the product identity of the 16-bit kernels does not survive per-token key
//                  scales and 7-bit P), the FP32 l by a second running sum.
//   Int8Efta<true> EFTA correct: the K rows also carry the weighted sums sum_nt (nt + 1) K[8 nt +
//                  e] (3 digits), V^T the strided channel sums, a ones tile and their weighted
//                  sums, so a single wrong score or P V element is located (the ratio of the two
//                  discrepancies, an exact integer) and rebuilt exactly before it is used; the
//                  FP32 O gets a weighted FP32 checksum too and is repaired at the end.
#pragma once

#include "ftattn/common/types.cuh"
#include "ftattn/protect/none.cuh"
#include "ftattn/protect/v_rows_thread.cuh"
#include "ftattn/quantize_params.cuh"

namespace ftattn::protect {

struct Int8Abft : None {
  static constexpr bool enabled = true;
  static constexpr int digit_rows = 8;  // one n8 tile of V^T rows
};

template <bool Correct>
struct Int8Efta : None {
  static constexpr bool enabled = true;
  static constexpr bool efta = true;
  static constexpr bool correct = Correct;
  // K rows per key block: 2 digit tiles of the strided sums (+ 3 of the weighted ones).
  static constexpr int k_rows = Correct ? 40 : 16;
  // V^T rows: detect, Int8Abft's tile with a ones row; correct, 2 digit tiles of the strided
  // channel sums, a tile of ones, 3 digit tiles of the weighted sums.
  static constexpr int digit_rows = Correct ? 48 : 8;
  static constexpr int ones_row = Correct ? 16 : 7;
};

// Base-128 digits of the channel sum of head_dim int8 values.
template <int HeadDim>
inline constexpr int int8_digit_count = HeadDim <= 128 ? 2 : 3;

// Digit i of c written as `count` balanced base-128 digits (ftattn/protect_model.hpp).
__device__ __forceinline__ int balanced_digit(int c, int count, int i) {
  for (int k = 0; k < count - 1; ++k) {
    int digit = ((c % 128) + 128) % 128;
    if (digit >= 64) digit -= 128;
    if (k == i) return digit;
    c = (c - digit) / 128;
  }
  return i == count - 1 ? c : 0;
}

// The checksum rows of one head's V^T, one stored key position per thread. V^T is head_dim rows
// of keys_padded bytes (the quantised layout); Protect::digit_rows rows of keys_padded bytes go
// to `out`. The ones cover every stored position: keys are permuted within groups of 16, so a
// position past seqlen_k may hold a real key, and P is 0 for the padding keys anyway. Grid (key
// chunks of 128, kv heads, batch).
template <int HeadDim, class Protect>
__device__ __forceinline__ void int8_v_rows(const Q8ChecksumParams& p) {
  const VtRowsThread<signed char, signed char> t(p, HeadDim, Protect::digit_rows);
  const int pos = t.pos;
  if (pos >= p.keys_padded) return;
  const signed char* vt = t.vt;
  signed char* out = t.out;
  auto put = [&](int row, int value) {
    out[static_cast<long long>(row) * p.keys_padded] = static_cast<signed char>(value);
  };
  if constexpr (Protect::correct) {
    // Strided over channels 8 nt + e: the checksum column e of GEMM II's accumulator tile.
    int plain[8] = {}, weighted[8] = {};
    for (int d = 0; d < HeadDim; ++d) {
      const int v = vt[static_cast<long long>(d) * p.keys_padded + pos];
      plain[d % 8] += v;
      weighted[d % 8] += (d / 8 + 1) * v;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      put(e, balanced_digit(plain[e], 2, 0));
      put(8 + e, balanced_digit(plain[e], 2, 1));
      put(Protect::ones_row + e, 1);
#pragma unroll
      for (int i = 0; i < 3; ++i) put(24 + 8 * i + e, balanced_digit(weighted[e], 3, i));
    }
  } else {
    int c = 0;
    for (int d = 0; d < HeadDim; ++d) c += vt[static_cast<long long>(d) * p.keys_padded + pos];
    constexpr int count = int8_digit_count<HeadDim>;
#pragma unroll
    for (int i = 0; i < 8; ++i) put(i, i < count ? balanced_digit(c, count, i) : 0);
    if constexpr (Protect::efta) put(Protect::ones_row, 1);
  }
}

// int8 efta_correct on the Hopper wgmma kernel (kernel/fwd_q8_sm90.cuh): 8 rows of keys_padded
// bytes per KV head, the V^T rows of GEMM II's second checksum tile: the two digits of each key's
// channel sum sum_d v_d (columns C0, C1: quad lane 0's), the three of its weighted sum
// sum_d (d + 1) v_d (W0, W1: lane 1's; W2: lane 2's; |sum| <= 127 x 8,256, so the top digit stays
// within int8), then zeros. Grid as int8_v_rows.
template <int HeadDim>
__device__ __forceinline__ void int8_v_wgmma_rows(const Q8ChecksumParams& p) {
  static_assert(HeadDim <= 128, "two digits of the channel sum, three of the weighted one");
  const VtRowsThread<signed char, signed char> t(p, HeadDim, 8);
  if (t.pos >= p.keys_padded) return;
  int plain = 0, weighted = 0;
  for (int d = 0; d < HeadDim; ++d) {
    const int v = t.vt[static_cast<long long>(d) * p.keys_padded + t.pos];
    plain += v;
    weighted += (d + 1) * v;
  }
  const int rows[8] = {balanced_digit(plain, 2, 0),
                       balanced_digit(plain, 2, 1),
                       balanced_digit(weighted, 3, 0),
                       balanced_digit(weighted, 3, 1),
                       balanced_digit(weighted, 3, 2),
                       0,
                       0,
                       0};
#pragma unroll
  for (int r = 0; r < 8; ++r)
    t.out[static_cast<long long>(r) * p.keys_padded] = static_cast<signed char>(rows[r]);
}

// EFTA's K rows of one key block: row a * 8 + e is digit a of sum_nt K[key0 + 8 nt + e] (a = 0,
// 1) or, for correct, digit a - 2 of sum_nt (nt + 1) K[key0 + 8 nt + e]; keys past seqlen_k are
// 0, as the kernel's zero-filled K tile. Grid (key blocks, kv heads, batch), 128 threads.
template <int HeadDim, int BlockN, class Protect>
__device__ __forceinline__ void int8_k_rows(const Q8ChecksumParams& p) {
  const int n_blocks = gridDim.x;
  const long long head = static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y;
  const signed char* k =
      static_cast<const signed char*>(p.k) + head * static_cast<long long>(p.seqlen_k) * HeadDim;
  signed char* out = static_cast<signed char*>(p.k_out) +
                     (head * n_blocks + blockIdx.x) * Protect::k_rows * HeadDim;
  const int key0 = blockIdx.x * BlockN;
  for (int job = threadIdx.x; job < 8 * HeadDim; job += blockDim.x) {
    const int e = job / HeadDim, d = job % HeadDim;
    int plain = 0, weighted = 0;
#pragma unroll 4
    for (int nt = 0; nt < BlockN / 8; ++nt) {
      const int key = key0 + 8 * nt + e;
      const int x = key < p.seqlen_k ? k[static_cast<long long>(key) * HeadDim + d] : 0;
      plain += x;
      weighted += (nt + 1) * x;
    }
#pragma unroll
    for (int a = 0; a < Protect::k_rows / 8; ++a)
      out[(a * 8 + e) * HeadDim + d] = static_cast<signed char>(
          a < 2 ? balanced_digit(plain, 2, a) : balanced_digit(weighted, 3, a - 2));
  }
}

}  // namespace ftattn::protect
