// Forward skeleton for 8-bit operands (int8, fp8_e4m3) on sm_80 and later: the FlashAttention-2
// loop of fwd_sm80.cuh with m16n8k32 MMAs, dequantisation folded into the online softmax and P
// quantised in registers.
//
// Operands come from the quantisation kernels (kernel/quantize_sm80.cuh) in the layout params.cuh
// documents: Q and K row-major with a scale per token (fp8 K: the same for each 64 keys), V
// transposed (head_dim rows of keys) with a scale per channel and its keys permuted within groups
// of 16. The permutation is what lets P go from the S accumulators to the A operand of P·V without
// shuffles: in the m16n8k32 A fragment a thread holds 4 consecutive k of a row, but the S
// accumulators give it keys 2t, 2t+1 of each n8 tile; reading byte 4t + i of a 16-key group as key
// {2t, 2t+1, 2t+8, 2t+9}[i] makes the two agree.
//
// ldmatrix (b16) on 8-bit rows hands each lane the 4-byte word (lane % 4) of row (lane / 4) of
// each 8x16-byte matrix: exactly the m16n8k32 A and B fragments. Byte offsets then equal those of
// the 16-bit skeleton, with k steps of 32 elements.
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm80/global.cuh"
#include "ftattn/arch/sm80/ldmatrix.cuh"
#include "ftattn/arch/sm80/shared.cuh"
#include "ftattn/arch/sm80/tile_load.cuh"
#include "ftattn/common/faults.cuh"
#include "ftattn/common/math.cuh"
#include "ftattn/common/types.cuh"
#include "ftattn/kernel/fwd_common.cuh"
#include "ftattn/params.cuh"
#include "ftattn/precision/bf16.cuh"
#include "ftattn/precision/f16.cuh"
#include "ftattn/protect/checks.cuh"
#include "ftattn/protect/fp8_checksums.cuh"
#include "ftattn/protect/int8_checksums.cuh"

namespace ftattn {

template <int HeadDim, int BlockM, int BlockN, int NumWarps, int NumStages, class PrecisionT,
          class ProtectT, bool Causal, bool Inject = false>
struct Q8Traits : TileKnobs<HeadDim, BlockM, BlockN, NumWarps, NumStages, PrecisionT, ProtectT,
                            Causal, /*BlockSparse=*/false, Inject> {
  // Shared memory, in bytes. Rows padded by 16 bytes: 8 consecutive rows start in 8 different
  // 16-byte bank groups for every head_dim and block_n allowed, so ldmatrix is conflict-free.
  static constexpr int qk_stride = HeadDim + 16;  // a Q or K row
  static constexpr int vt_stride = BlockN + 16;   // a V^T row: one channel, block_n keys
  static constexpr int q_bytes = BlockM * qk_stride;
  // K rows, the key scales, then the protection's checksum rows (EFTA: int8 digit rows of
  // head_dim bytes, or fp8's f16 rows of head_dim values).
  static constexpr int k_scale_offset = BlockN * qk_stride;
  static constexpr int k_check_offset = k_scale_offset + BlockN * 4;
  static constexpr int k16_stride = 2 * HeadDim + 16;
  static constexpr int k_stage_bytes =
      k_check_offset + ProtectT::k_rows * qk_stride + ProtectT::k16_rows * k16_stride;
  // V^T rows: head_dim channels, then the protection's checksum rows (protect/int8_checksums.cuh).
  static constexpr int v_rows = HeadDim + ProtectT::digit_rows;
  // fp8 Flash-ABFT's f16 rows (protect/fp8_checksums.cuh) follow, block_n values each.
  static constexpr int v16_stride = 2 * BlockN + 16;
  static constexpr int v_stage_bytes = v_rows * vt_stride + ProtectT::f16_rows * v16_stride;
  static constexpr int o_stride = HeadDim * 2 + 16;  // the epilogue stages 16-bit O rows
  static constexpr int loop_bytes = q_bytes + NumStages * (k_stage_bytes + v_stage_bytes);
  static constexpr int smem_bytes = loop_bytes > BlockM* o_stride ? loop_bytes : BlockM* o_stride;
  static constexpr float p_log2_range = PrecisionT::p_log2_range;  // P = 2^(t + p_log2_range)
  // Site scale's values per thread: its rows' softmax factors, then a key block's scales as its
  // lane loads them.
  static constexpr int scale_values = 2 * (BlockM / (16 * NumWarps)) + 2 * (BlockN / 8);

  static_assert(HeadDim % 32 == 0, "8-bit MMAs step head_dim by 32");
  static_assert(BlockN % 32 == 0, "8-bit MMAs step block_n by 32");
  static_assert(BlockM % (16 * NumWarps) == 0, "block_m must be a multiple of 16 * num_warps");
  static_assert(NumStages >= 1, "num_stages must be at least 1");
};

namespace q8 {
// A detection at `row`; rows past the end report nothing (their checks ran on padding). A plain
// function, not a lambda over the kernel's locals: such a closure is materialised in local
// memory inside the main loop (int8 Flash-ABFT at head dim 128: 3x the local loads and stores).
__device__ __forceinline__ void report_row(const AttentionParams& p, int batch, int head, int row,
                                           int col, int stage, bool corrected, float magnitude,
                                           float threshold) {
  if (row < p.seqlen_q)
    record_fault(p.fault_log, batch, head, row, col, stage, corrected, magnitude, threshold);
}

// Two floats from shared memory at `at` (two keys' scales, or two rows' softmax factors). EFTA's
// second evaluation reads its inputs with kAgain: ptxas merges plain loads of one address, so a
// fault in the merged register would reach both evaluations alike and pass their comparison; a
// volatile load is issued again.
template <bool kAgain = false>
__device__ __forceinline__ void shared_float2(u32 at, float (&out)[2]) {
  if constexpr (kAgain)
    asm volatile("ld.volatile.shared.v2.f32 {%0, %1}, [%2];\n"
                 : "=f"(out[0]), "=f"(out[1])
                 : "r"(at));
  else
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(out[0]), "=f"(out[1]) : "r"(at));
}

// An exact INT32 accumulator without its starting bias, widened for 64-bit checksum arithmetic.
template <class P>
__device__ __forceinline__ long long debiased(int acc) {
  return static_cast<int>(static_cast<u32>(acc) - static_cast<u32>(P::acc_zero));
}

// int8 EFTA's strided identity for a thread's tile x (biased INT32) against the two digit
// accumulators of its checksum tile: per row tile and column, sum_j x_j - digit 0 - 128 digit 1,
// modulo 2^32 (N biases on the left, 129 on the right). True if any column failed.
template <class P, int MT, int N, int K>
__device__ __forceinline__ bool strided_diff(const int (&x)[MT][N][4],
                                             const int (&digits)[MT][K][4], u32 (&diff)[MT][4]) {
  bool failed = false;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      u32 sum = static_cast<u32>(P::acc_zero) * (129u - N);
#pragma unroll
      for (int j = 0; j < N; ++j) sum += static_cast<u32>(x[mt][j][i]);
      diff[mt][i] =
          sum - static_cast<u32>(digits[mt][0][i]) - 128u * static_cast<u32>(digits[mt][1][i]);
      failed |= diff[mt][i] != 0u;
    }
  return failed;
}

// After a failed strided check, with the 3 weighted digit accumulators: each failed column's
// exact single-error repair (ftattn/protect_model.hpp, int8_strided_repair). In 64 bits on the
// de-biased values a single wrong x_j leaves e1 = delta and e2 = (j + 1) delta, so x_j is rebuilt
// bit for bit; q8::report_row(p, batch, head, global_row(mt, i), j) is called with the located j,
// or -1.
template <class P, int MT, int N, int K, class Report>
__device__ __forceinline__ void strided_repair(int (&x)[MT][N][4], const int (&digits)[MT][K][4],
                                               const int (&weighted)[MT][3][4],
                                               const u32 (&diff)[MT][4], Report&& report) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (diff[mt][i] == 0u) continue;
      long long e1 = -(debiased<P>(digits[mt][0][i]) + 128 * debiased<P>(digits[mt][1][i]));
      long long e2 = -(debiased<P>(weighted[mt][0][i]) + 128 * debiased<P>(weighted[mt][1][i]) +
                       16384 * debiased<P>(weighted[mt][2][i]));
      for (int j = 0; j < N; ++j) {
        e1 += debiased<P>(x[mt][j][i]);
        e2 += (j + 1) * debiased<P>(x[mt][j][i]);
      }
      const int bad = protect::exact_index(e1, e2, N);
      for (int j = 0; j < N; ++j)
        if (j == bad)
          x[mt][j][i] = static_cast<int>(static_cast<u32>(x[mt][j][i]) - static_cast<u32>(e1));
      report(mt, i, bad);
    }
}
template <bool B>
struct Masked {  // step()'s compile-time flag: does this key block need the mask?
  static constexpr bool value = B;
};
// fp8's f16 checksum rows as B operands of one m16n8k16 step: N groups of 8 rows, `stride`
// bytes from row to row, this lane's 4 values of its row at column `col` (`row` holds the lane's
// row and its 8 * quad_t byte offset); the A operand is half of an m16n8k32 fragment
// (protect::e4m3_half_to_f16).
template <int N>
__device__ __forceinline__ void f16_row_operands(u32 row, int stride, int col, u32 (&b)[N][2]) {
#pragma unroll
  for (int t = 0; t < N; ++t) sm80::ld_shared_u64(row + 8 * t * stride + col * 2, b[t]);
}

// This CTA's 8-bit operands (strides in bytes): its Q rows from row0, its KV head's K rows, V^T
// rows (v_seq_stride is the padded key count of a V^T row, which is also the per-head length of
// the key scales) and key scales. Shared by the sm80 and sm90 8-bit skeletons.
struct Operands {
  const char* q;
  const char* k;
  const char* vt;
  int keys_padded;
  const float* k_scale;
};
template <class T>
__device__ __forceinline__ Operands operands(const AttentionParams& p, int batch, int head,
                                             int head_kv, int row0) {
  Operands o;
  o.q = static_cast<const char*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride +
        row0 * p.q_seq_stride;
  o.k = static_cast<const char*>(p.k) + batch * p.k_batch_stride + head_kv * p.k_head_stride;
  o.vt = static_cast<const char*>(p.v) + batch * p.v_batch_stride + head_kv * p.v_head_stride;
  o.keys_padded = static_cast<int>(p.v_seq_stride);
  o.k_scale = p.k_scale + static_cast<i64>(batch * p.heads_kv + head_kv) * o.keys_padded;
  return o;
}

// Row `row`'s dequantisation s_Q * softmax scale * log2(e), so that S lands in base-2 logits; it
// is applied after the row max (a positive factor commutes with max) inside the exp's FMA.
// Scales are max |x| / range, so never negative; zero rows (and rows past the end) get a tiny
// positive one, which keeps masked -inf * scale from becoming NaN.
__device__ __forceinline__ float row_scale(const AttentionParams& p, int batch, int head, int row) {
  const float qs =
      row < p.seqlen_q
          ? p.q_scale[static_cast<i64>(batch * p.heads_q + head) * p.seqlen_q + row] * p.scale_log2
          : 0.f;
  return fmaxf(qs, 1e-30f);
}

// The block's max of row half r times qs, rounded up (>= every x qs of the row), over the
// row's quad.
template <int kST>
__device__ __forceinline__ float block_row_max(const float (&x)[kST][4], int r, float qs) {
  float mx = neg_inf();
#pragma unroll
  for (int nt = 0; nt < kST; ++nt) mx = fmaxf(mx, fmaxf(x[nt][2 * r], x[nt][2 * r + 1]));
  return __fmul_ru(quad_max(mx), qs);
}

// Row half r's P from exponents x qs + offset into the A fragments pa[kc][2 h + r], one register
// per 4 keys, in the key order V^T is stored in: word(t0, t1, t2, t3) packs four (the
// precision's p_word, adding to the caller's sum).
template <int kST, class Word>
__device__ __forceinline__ void p_words(const float (&x)[kST][4], int r, float qs, float offset,
                                        u32 (&pa)[kST / 4][4], Word&& word) {
#pragma unroll
  for (int kc = 0; kc < kST / 4; ++kc)
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // keys 0-15, then 16-31 of the chunk
      const float(&t0)[4] = x[4 * kc + 2 * h];
      const float(&t1)[4] = x[4 * kc + 2 * h + 1];
      pa[kc][2 * h + r] = word(fmaf(t0[2 * r], qs, offset), fmaf(t0[2 * r + 1], qs, offset),
                               fmaf(t1[2 * r], qs, offset), fmaf(t1[2 * r + 1], qs, offset));
    }
}

// The online softmax of row half r of a 16-row tile (x: its dequantised-by-key scores, masked
// -inf): the new running max, rounded up so that t = x s_Q - max <= 0; P = 2^(t + p_log2_range)
// into the A fragments pa (p_words); this thread's share of the block's l is added to `sum`, the
// rescale of the old state goes to `rescale`.
template <class P, int kST>
__device__ __forceinline__ void softmax_row(const float (&x)[kST][4], int r, float qs,
                                            float& row_max, u32 (&pa)[kST / 4][4],
                                            typename P::PSum& sum, float& rescale) {
  const float mx = fmaxf(row_max, block_row_max(x, r, qs));
  const float shift = mx == neg_inf() ? 0.f : mx;  // fully masked so far: P stays 0
  rescale = fast_exp2(row_max - shift);
  row_max = mx;
  p_words(x, r, qs, P::p_offset(shift), pa,
          [&](float t0, float t1, float t2, float t3) { return P::p_word(t0, t1, t2, t3, sum); });
}

// softmax_row for scores not yet dequantised by key, whose key scales are constant over kGroups
// groups of columns (ks[g], > 0): the max takes one multiply per group, and each P's exponent one
// FMA with its group's qs * ks[g], where softmax_row needs a multiply per score first.
template <class P, int kST, int kGroups>
__device__ __forceinline__ void softmax_row_grouped(const float (&s)[kST][4], int r, float qs,
                                                    const float (&ks)[kGroups], float& row_max,
                                                    u32 (&pa)[kST / 4][4], typename P::PSum& sum,
                                                    float& rescale) {
  constexpr int kPer = kST / kGroups;
  float mx = neg_inf();
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    float mg = neg_inf();
#pragma unroll
    for (int nt = g * kPer; nt < (g + 1) * kPer; ++nt)
      mg = fmaxf(mg, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
    mx = fmaxf(mx, mg * ks[g]);
  }
  mx = fmaxf(row_max, __fmul_ru(quad_max(mx), qs));
  const float shift = mx == neg_inf() ? 0.f : mx;  // fully masked so far: P stays 0
  rescale = fast_exp2(row_max - shift);
  row_max = mx;
  const float offset = P::p_offset(shift);
  float c[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) c[g] = qs * ks[g];
#pragma unroll
  for (int kc = 0; kc < kST / 4; ++kc)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int nt0 = 4 * kc + 2 * h, nt1 = nt0 + 1;
      const float(&t0)[4] = s[nt0];
      const float(&t1)[4] = s[nt1];
      const float c0 = c[nt0 / kPer], c1 = c[nt1 / kPer];
      pa[kc][2 * h + r] =
          P::p_word(fmaf(t0[2 * r], c0, offset), fmaf(t0[2 * r + 1], c0, offset),
                    fmaf(t1[2 * r], c1, offset), fmaf(t1[2 * r + 1], c1, offset), sum);
    }
}

// The epilogue: O * s_V[channel] / l as f16 or bf16, staged in shared memory at sQ (every warp's
// rows, T::o_stride bytes apart), written in 16-byte rows; LSE = max + log2(l) - T::p_log2_range,
// in natural-log units. Shared by the sm80 and sm90 8-bit skeletons (accumulators in the m16n8
// layout: kMT tiles of 16 rows from warp_row).
template <class T, int kMT, int kOT>
__device__ __forceinline__ void store_output(const AttentionParams& p,
                                             const float (&o)[kMT][kOT][4],
                                             const float (&row_sum)[kMT][2],
                                             const float (&row_max)[kMT][2], u32 sQ, int row0,
                                             int warp_row, int lane, int batch, int head,
                                             int head_kv) {
  const float* v_scale = p.v_scale + static_cast<i64>(batch * p.heads_kv + head_kv) * T::head_dim;
  float vs[kOT][2];
#pragma unroll
  for (int nt = 0; nt < kOT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) vs[nt][c] = v_scale[nt * 8 + (lane % 4) * 2 + c];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = quad_sum(row_sum[mt][r]);
      const float inv = l > 0.f ? 1.f / l : 0.f;  // rows that see no key give 0
      const int tile_row = warp_row + mt * 16 + lane / 4 + r * 8;
      const u32 dst = sQ + tile_row * T::o_stride + (lane % 4) * 4;
#pragma unroll
      for (int nt = 0; nt < kOT; ++nt) {
        const float lo = o[mt][nt][2 * r] * inv * vs[nt][0];
        const float hi = o[mt][nt][2 * r + 1] * inv * vs[nt][1];
        sm80::st_shared_u32(dst + nt * 16, p.o_is_bf16 ? precision::BF16::pack(lo, hi)
                                                       : precision::F16::pack(lo, hi));
      }
      const int row = row0 + tile_row;
      if (p.lse != nullptr && lane % 4 == 0 && row < p.seqlen_q) {
        const float lse =
            l > 0.f ? (row_max[mt][r] + fast_log2(l) - T::p_log2_range) * 0.6931471805599453f
                    : neg_inf();
        p.lse[(static_cast<i64>(batch) * p.heads_q + head) * p.seqlen_q + row] = lse;
      }
    }
  __syncwarp();
  u16* out = static_cast<u16*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
  constexpr int chunks_per_row = T::head_dim / 8;
  constexpr int warp_chunks = kMT * 16 * chunks_per_row;
  // Not sm80::store_rows, as the 16-bit epilogue: with it ptxas scheduled the int8 wgmma kernel's
  // main loop differently and ran it 2% slower at 16k keys (H100); this loop leaves the loop's
  // SASS as it was.
#pragma unroll
  for (int c = lane; c < warp_chunks; c += 32) {
    const int tile_row = warp_row + c / chunks_per_row;
    const int col = (c % chunks_per_row) * 8;
    const int row = row0 + tile_row;
    if (row < p.seqlen_q)
      sm80::st_global_u128(out + row * p.o_seq_stride + col,
                           sm80::ld_shared_u128(sQ + tile_row * T::o_stride + col * 2));
  }
}

}  // namespace q8

template <class T>
__device__ __forceinline__ void attention_fwd_q8_sm80(const AttentionParams& p) {
  using P = typename T::Precision;
  using Acc = typename P::Acc;
  using Protect = typename T::Protect;
  constexpr int kMT = T::m_tiles;
  constexpr int kST = T::s_tiles;
  constexpr int kOT = T::o_tiles;
  constexpr int kStages = T::num_stages;
  // int8 folds O's rescale into the FMA that adds each block's INT32 P V (one op per O element
  // instead of two). At head dims 96, 192 and 256 that schedule spills (ptxas -v on sm_80 to
  // sm_90a), so they rescale first, as fp8 does.
  constexpr bool kFusedRescale =
      !P::float_accumulators && T::head_dim % 64 == 0 && T::head_dim <= 128;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const u32 sQ = sm80::smem_addr(smem_raw);
  const u32 sK = sQ + T::q_bytes;
  const u32 sV = sK + kStages * T::k_stage_bytes;

  int m_block, head, batch;
  detail::tile_coords<T>(p, m_block, head, batch);
  const int head_kv = head / p.group_size;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;

  const int row0 = m_block * T::block_m;
  const int diag = p.seqlen_k - p.seqlen_q;  // bottom-right causal alignment
  int n_blocks = (p.seqlen_k + T::block_n - 1) / T::block_n;
  if (T::causal) {
    const int last_key = row0 + T::block_m - 1 + diag;
    n_blocks = last_key < 0 ? 0 : min(n_blocks, last_key / T::block_n + 1);
  }

  const q8::Operands in = q8::operands<T>(p, batch, head, head_kv, row0);
  const char *q = in.q, *k = in.k, *vt = in.vt;
  const int keys_padded = in.keys_padded;
  const float* k_scale = in.k_scale;

  // Checksum rows (protect/int8_checksums.cuh): this KV head's V^T rows (digit_rows rows of
  // keys_padded bytes), and EFTA's K rows (k_rows rows of head_dim bytes per key block).
  const i64 head_index = static_cast<i64>(batch) * p.heads_kv + head_kv;
  constexpr int kKCheckBytes = (Protect::k_rows + 2 * Protect::k16_rows) * T::head_dim;
  const i64 v_check_bytes = (Protect::digit_rows + 2LL * Protect::f16_rows) * keys_padded;
  const char* digits = static_cast<const char*>(p.checksums) + head_index * v_check_bytes;
  const char* v_f16_rows = digits + static_cast<i64>(Protect::digit_rows) * keys_padded;
  const char* k_check = static_cast<const char*>(p.checksums) +
                        q8_k_rows_offset(p.batch, p.heads_kv, v_check_bytes) +
                        head_index * ((p.seqlen_k + T::block_n - 1) / T::block_n) * kKCheckBytes;
  auto load_k = [&](int stage, int n_block) {
    const int key0 = n_block * T::block_n;
    const u32 dst = sK + stage * T::k_stage_bytes;
    sm80::load_rows<T::threads, T::block_n, T::head_dim, T::qk_stride>(
        dst, k + key0 * p.k_seq_stride, p.k_seq_stride, p.seqlen_k - key0, T::head_dim);
    sm80::load_rows<T::threads, 1, T::block_n * 4, 0>(dst + T::k_scale_offset, k_scale + key0, 0, 1,
                                                      (keys_padded - key0) * 4);
    if constexpr (Protect::k_rows > 0)
      sm80::load_rows<T::threads, Protect::k_rows, T::head_dim, T::qk_stride>(
          dst + T::k_check_offset, k_check + static_cast<i64>(n_block) * kKCheckBytes, T::head_dim,
          Protect::k_rows, T::head_dim);
    if constexpr (Protect::k16_rows > 0)
      sm80::load_rows<T::threads, Protect::k16_rows, 2 * T::head_dim, T::k16_stride>(
          dst + T::k_check_offset, k_check + static_cast<i64>(n_block) * kKCheckBytes,
          2 * T::head_dim, Protect::k16_rows, 2 * T::head_dim);
    sm80::cp_async_commit();
  };
  auto load_v = [&](int stage, int n_block) {
    const int key0 = n_block * T::block_n;
    const u32 dst = sV + stage * T::v_stage_bytes;
    sm80::load_rows<T::threads, T::head_dim, T::block_n, T::vt_stride>(
        dst, vt + key0, p.v_seq_stride, T::head_dim, keys_padded - key0);
    if constexpr (Protect::digit_rows > 0)
      sm80::load_rows<T::threads, Protect::digit_rows, T::block_n, T::vt_stride>(
          dst + T::head_dim * T::vt_stride, digits + key0, keys_padded, Protect::digit_rows,
          keys_padded - key0);
    if constexpr (Protect::f16_rows > 0)
      sm80::load_rows<T::threads, Protect::f16_rows, 2 * T::block_n, T::v16_stride>(
          dst + T::v_rows * T::vt_stride, v_f16_rows + 2 * key0, 2 * keys_padded, Protect::f16_rows,
          2 * (keys_padded - key0));
    sm80::cp_async_commit();
  };

  // Prologue: Q, then the first num_stages - 1 key blocks (one buffer: the first K only).
  sm80::load_rows<T::threads, T::block_m, T::head_dim, T::qk_stride>(
      sQ, q, p.q_seq_stride, p.seqlen_q - row0, T::head_dim);
  sm80::cp_async_commit();
  int ahead = 0;  // next block to prefetch
  if constexpr (kStages == 1) {
    if (ahead < n_blocks) load_k(0, ahead++);
  }
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (ahead < n_blocks) {
      load_k(s, ahead);
      load_v(s, ahead++);
    } else {
      sm80::cp_async_commit();
      sm80::cp_async_commit();
    }
  }

  const int warp_row = warp * kMT * 16;
  // The global query row of this thread's row half r of tile mt.
  auto global_row = [&](int mt, int r) { return row0 + warp_row + mt * 16 + lane / 4 + r * 8; };
  float q_scale[kMT][2];  // per row, q8::row_scale
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) q_scale[mt][r] = q8::row_scale(p, batch, head, global_row(mt, r));
  // EFTA: each row's factor once more, in its Q row's padding, for the second evaluation to read
  // each block: the registers above, live all through the loop, would otherwise feed both.
  auto q_scale_at = [&](int mt, int r) {
    return sQ + (warp_row + mt * 16 + lane / 4 + r * 8) * T::qk_stride + T::head_dim;
  };
  if constexpr (Protect::efta)
    if (lane % 4 == 0)
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(q_scale_at(mt, r)), "f"(q_scale[mt][r]));

  float o[kMT][kOT][4];
  float row_max[kMT][2];  // base-2 logits
  float row_sum[kMT][2];  // this thread's share, in units of 2^p_log2_range
  detail::clear_accumulators(o, row_max, row_sum);
  typename Protect::State protect_state;
  // Checksums of the FP32 O, per thread and row half, carried through the same rescales as O:
  // plain (every 8-bit scheme with digit rows) and weighted by (j + 1) / n over the thread's j-th
  // element (int8 EFTA correct, to locate a wrong element at the end).
  float oc[kMT][2], ocw[kMT][2];
  // int8 EFTA's second evaluation of the softmax: its own running max and l.
  float row_max2[kMT][2], row_sum2[kMT][2];
  // fp8 Flash-ABFT: P times the f16 checksum rows, FP32, rescaled with O (fp8_checksums.cuh).
  constexpr int kV16 = Protect::f16_rows / 8;  // f16 checksum tiles of V^T
  [[maybe_unused]] float cacc[kMT][kV16 > 0 ? kV16 : 1][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      oc[mt][r] = ocw[mt][r] = row_sum2[mt][r] = 0.f;
      row_max2[mt][r] = neg_inf();
    }
#pragma unroll
    for (int i = 0; i < 4 * (kV16 > 0 ? kV16 : 1); ++i) cacc[mt][i / 4][i % 4] = 0.f;
  }
  // 0 at run time, unknown to the compilers: the second evaluation starts from s + zero, so
  // neither NVVM nor ptxas can merge it with the first.
  const int zero = min(p.seqlen_k, 0);
  const int quad_t = lane % 4;

  // ldmatrix lane addressing in bytes: A (Q) and B (K rows, V^T rows) of m16n8k32.
  const int a_row = lane % 16, a_col = (lane / 16) * 16;
  const int b_row = (lane / 16) * 8 + lane % 8, b_col = ((lane / 8) % 2) * 16;
  const int b2_row = lane % 8;  // ldmatrix_x2: one n8 tile

  // Fault injection (injection builds only): flip the planned bit of value `index` of a class of
  // `n` values this thread holds, as raw bits.
  auto inject = [&](int site, int it, auto* values, int n) {
    if constexpr (T::inject) inject_values(p.fault, site, it, values, n);
  };
  auto step = [&](const int n_block, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const int stage = n_block % kStages;
    if constexpr (kStages == 1) {  // FlashAttention-2's single-buffer schedule, as in fwd_sm80
      sm80::cp_async_wait<0>();
      __syncthreads();
      load_v(0, n_block);
    } else {
      sm80::cp_async_wait<2 * kStages - 4>();  // K and V of this block: one barrier per block
      __syncthreads();
      if (ahead < n_blocks) {
        load_k((n_block + kStages - 1) % kStages, ahead);
        load_v((n_block + kStages - 1) % kStages, ahead++);
      } else {
        sm80::cp_async_commit();
        sm80::cp_async_commit();
      }
    }

    // GEMM I: S = Q K^T, exact in the accumulator type. int8 EFTA: also Q times the K checksum
    // rows' two digit tiles, whose column e = 2 quad_t + c checks this thread's scores of keys
    // 8 nt + e.
    // fp8 EFTA: Q (and |Q|) times the K block's f16 rows through f16 MMAs, FP32: hi, lo and the
    // magnitude of each thread's checksum column e (protect/fp8_checksums.cuh).
    Acc s[kMT][kST][4];
    [[maybe_unused]] Acc cs[kMT][2][4];
    [[maybe_unused]] float cf[kMT][3][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kST; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[mt][nt][i] = P::acc_zero;
      if constexpr (Protect::k_rows > 0)
#pragma unroll
        for (int i = 0; i < 8; ++i) cs[mt][i / 4][i % 4] = P::acc_zero;
      if constexpr (Protect::k16_rows > 0)
#pragma unroll
        for (int i = 0; i < 12; ++i) cf[mt][i / 4][i % 4] = 0.f;
    }
    const u32 sKs = sK + stage * T::k_stage_bytes;
    [[maybe_unused]] const u32 sKc = sKs + T::k_check_offset;
    auto q_frag = [&](u32(&a)[kMT][4], int ks) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
        sm80::ldmatrix_x4(a[mt],
                          sQ + (warp_row + mt * 16 + a_row) * T::qk_stride + ks * 32 + a_col);
    };
#pragma unroll
    for (int ks = 0; ks < T::head_dim / 32; ++ks) {
      u32 a[kMT][4];
      q_frag(a, ks);
#pragma unroll
      for (int np = 0; np < kST / 2; ++np) {
        u32 b[4];
        sm80::ldmatrix_x4(b, sKs + (np * 16 + b_row) * T::qk_stride + ks * 32 + b_col);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          P::mma(s[mt][2 * np], a[mt], b[0], b[1]);
          P::mma(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
      if constexpr (Protect::k16_rows > 0) {
        // Each E4M3 Q register (4 consecutive channels of a row) as two f16x2: one f16 MMA per
        // 16 channels; lane (g, t) reads channels 4t .. 4t + 3 of checksum key g's rows.
        const u32 row = sKc + (lane / 4) * T::k16_stride + 8 * quad_t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          u32 b[3][2];
          q8::f16_row_operands(row, T::k16_stride, ks * 32 + h * 16, b);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            u32 q16[4];
            protect::e4m3_half_to_f16(a[mt], h, q16);
            constexpr u32 magnitude = 0x7fff7fffu;  // f16x2 without its sign bits
            const u32 q_abs[4] = {q16[0] & magnitude, q16[1] & magnitude, q16[2] & magnitude,
                                  q16[3] & magnitude};
            precision::F16::mma(cf[mt][0], q16, b[0][0], b[0][1]);
            precision::F16::mma(cf[mt][1], q16, b[1][0], b[1][1]);
            precision::F16::mma(cf[mt][2], q_abs, b[2][0], b[2][1]);
          }
        }
      }
      if constexpr (Protect::k_rows > 0) {
        u32 b[4];
        sm80::ldmatrix_x4(b, sKc + b_row * T::qk_stride + ks * 32 + b_col);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          P::mma(cs[mt][0], a[mt], b[0], b[1]);
          P::mma(cs[mt][1], a[mt], b[2], b[3]);
        }
      }
    }
    inject(fault_site_scores, n_block, &s[0][0][0], kMT * kST * 4);
    // Raw scores before dequantisation: INT32 for int8 (offset by P::acc_zero), so checksums
    // over them are exact.
    Protect::after_scores(protect_state, s, n_block);

    if constexpr (Protect::k16_rows > 0) {
      // fp8: the raw scores of keys 8 nt + e against hi + lo, relative to |Q| . sum |K|.
      inject(fault_site_checksum, n_block, &cf[0][0][0], kMT * 4);
      float e1[kMT][4];
      bool failed = false;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < kST; ++nt) sum += s[mt][nt][i];
          e1[mt][i] = (cf[mt][0][i] + cf[mt][1][i]) - sum;
          const float tol = p.tol_scores * cf[mt][2][i] + p.tol_floor;
          if (fabsf(e1[mt][i]) <= tol) {
            e1[mt][i] = 0.f;  // passed
          } else {
            failed = true;
            if constexpr (!Protect::correct)
              q8::report_row(p, batch, head, global_row(mt, i / 2), -1, fault_stage_scores, false,
                             fabsf(e1[mt][i]), tol);
          }
        }
      if constexpr (Protect::correct) {
        // Rare: Q times the weighted rows, then each failed column located and rebuilt (e1 holds
        // the failed columns' discrepancies, 0 elsewhere).
        if (__any_sync(0xffffffffu, failed)) {
          float cw[kMT][4];
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) cw[mt][i] = 0.f;
          const u32 row = sKc + (24 + lane / 4) * T::k16_stride + 8 * quad_t;
#pragma unroll 1
          for (int ks = 0; ks < T::head_dim / 32; ++ks) {
            u32 a[kMT][4];
            q_frag(a, ks);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              u32 b[2][2];  // the weighted sums' hi and lo rows
              q8::f16_row_operands(row, T::k16_stride, ks * 32 + h * 16, b);
#pragma unroll
              for (int mt = 0; mt < kMT; ++mt) {
                u32 q16[4];
                protect::e4m3_half_to_f16(a[mt], h, q16);
                precision::F16::mma(cw[mt], q16, b[0][0], b[0][1]);
                precision::F16::mma(cw[mt], q16, b[1][0], b[1][1]);
              }
            }
          }
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              if (e1[mt][i] == 0.f) continue;
              float g[kST];
              float wsum = 0.f;
#pragma unroll
              for (int nt = 0; nt < kST; ++nt) {
                g[nt] = s[mt][nt][i];
                wsum += (nt + 1) / float(kST) * g[nt];
              }
              const int bad = protect::locate<kST>(g, e1[mt][i], cw[mt][i] - wsum);
              if (bad >= 0) {
                protect::rebuild<kST>(g, bad, cf[mt][0][i] + cf[mt][1][i]);
#pragma unroll
                for (int nt = 0; nt < kST; ++nt) s[mt][nt][i] = g[nt];
              }
              q8::report_row(p, batch, head, global_row(mt, i / 2),
                             bad >= 0 ? n_block * T::block_n + 8 * bad + 2 * quad_t + i % 2 : -1,
                             fault_stage_scores, bad >= 0, fabsf(e1[mt][i]), 0.f);
            }
        }
      }
    }
    if constexpr (Protect::k_rows > 0) {
      static_assert(sizeof(Acc) == 4 && Acc(-1) < Acc(0), "int8 EFTA checks INT32 scores");
      inject(fault_site_checksum, n_block, &cs[0][0][0], kMT * 8);
      // The GEMM I identity per thread and column e: its scores of keys 8 nt + e.
      u32 diff[kMT][4];
      const bool failed = q8::strided_diff<P>(s, cs, diff);
      if constexpr (Protect::correct) {
        // Rare: Q times the weighted rows (3 digit tiles), then each failed column repaired.
        if (__any_sync(0xffffffffu, failed)) {
          Acc cw[kMT][3][4];
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int i = 0; i < 12; ++i) cw[mt][i / 4][i % 4] = P::acc_zero;
#pragma unroll 1
          for (int ks = 0; ks < T::head_dim / 32; ++ks) {
            u32 a[kMT][4], b[4], b2[2];
            q_frag(a, ks);
            sm80::ldmatrix_x4(b, sKc + (16 + b_row) * T::qk_stride + ks * 32 + b_col);
            sm80::ldmatrix_x2(b2, sKc + (32 + b2_row) * T::qk_stride + ks * 32 + b_col);
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
              P::mma(cw[mt][0], a[mt], b[0], b[1]);
              P::mma(cw[mt][1], a[mt], b[2], b[3]);
              P::mma(cw[mt][2], a[mt], b2[0], b2[1]);
            }
          }
          q8::strided_repair<P>(s, cs, cw, diff, [&](int mt, int i, int j) {
            q8::report_row(p, batch, head, global_row(mt, i / 2),
                           j >= 0 ? n_block * T::block_n + 8 * j + 2 * quad_t + i % 2 : -1,
                           fault_stage_scores, j >= 0,
                           static_cast<float>(static_cast<int>(diff[mt][i])), 0.f);
          });
        }
      } else if (failed) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if (diff[mt][i] != 0u)
              q8::report_row(p, batch, head, global_row(mt, i / 2), -1, fault_stage_scores, false,
                             static_cast<float>(static_cast<int>(diff[mt][i])), 0.f);
      }
    }

    // Dequantise by key: S * s_K[key]; the row's s_Q * scale * log2(e) follows in the softmax.
    // The key scales live in the K buffer: with one stage, the next K is fetched only once every
    // warp has read them (below, with P in registers).
    const u32 sKscale = sKs + T::k_scale_offset;
    float x[kMT][kST][4];
#pragma unroll
    for (int nt = 0; nt < kST; ++nt) {
      float ks2[2];
      q8::shared_float2(sKscale + (nt * 8 + quad_t * 2) * 4, ks2);
      if constexpr (T::inject)
#pragma unroll
        for (int c = 0; c < 2; ++c)
          inject_value_at(p.fault, fault_site_scale, n_block, 2 * kMT + 2 * nt + c, T::scale_values,
                          ks2[c]);
      const float bias[2] = {P::dequant_bias(ks2[0]), P::dequant_bias(ks2[1])};
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          x[mt][nt][i] = fmaf(P::acc_as_float(s[mt][nt][i]), ks2[i % 2], bias[i % 2]);
    }

    if (kMasked) {  // keys past the end and, for causal, past each row's diagonal
      detail::for_each_masked<kMT, kST, T::causal>(
          row0 + warp_row, n_block * T::block_n, lane, p.seqlen_k, diag,
          [&](int mt, int nt, int i) { x[mt][nt][i] = neg_inf(); });
    }

    // Online softmax. The max is rounded up, so t = x s_Q - max <= 0 for every element; P =
    // 2^(t + p_log2_range) goes straight into the A operand of P V, one register per 4 keys of a
    // row, in the key order V^T is stored in.
    float rescale[kMT][2];
    u32 pa[kMT][kST / 4][4];
    // EFTA: this thread's share of the block's l.
    [[maybe_unused]] typename P::PSum block_l[kMT][2];
    [[maybe_unused]] float rescale2[kMT][2];  // EFTA: compared after its last use
    // fp8 EFTA compares the second evaluation's P after GEMM II has used the first's: its l check
    // against the E4M3 P is too loose to see a wrong P (int8's is exact), so the P registers
    // themselves are compared after their last use.
    constexpr bool kLateP = Protect::efta && Protect::f16_rows > 0;
    [[maybe_unused]] u32 pa2[kLateP ? kMT : 1][kLateP ? kST / 4 : 1][4];
    // Site scale: a row's factor, wrong from this block on.
    if constexpr (T::inject)
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          inject_value_at(p.fault, fault_site_scale, n_block, 2 * mt + r, T::scale_values,
                          q_scale[mt][r]);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float qs = q_scale[mt][r];
        typename P::PSum sum = 0;
        q8::softmax_row<P>(x[mt], r, qs, row_max[mt][r], pa[mt], sum, rescale[mt][r]);
        row_sum[mt][r] = row_sum[mt][r] * rescale[mt][r] + P::p_sum(sum);
        if constexpr (Protect::efta) {
          block_l[mt][r] = sum;
          // The second evaluation, from the verified integers: its own dequantisation (key
          // scales and the row's factor read again), mask, max, rescale and P, compared bit for
          // bit with the first.
          const int row = global_row(mt, r);
          float qs2;
          asm volatile("ld.volatile.shared.f32 %0, [%1];\n" : "=f"(qs2) : "r"(q_scale_at(mt, r)));
          float x2[kST][2];
          float mx2 = neg_inf();
#pragma unroll
          for (int nt = 0; nt < kST; ++nt) {
            float ks2[2];
            q8::shared_float2<true>(sKscale + (nt * 8 + quad_t * 2) * 4, ks2);
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int key = n_block * T::block_n + nt * 8 + quad_t * 2 + c;
              x2[nt][c] = fmaf(P::acc_as_float(s[mt][nt][2 * r + c] + zero), ks2[c],
                               P::dequant_bias(ks2[c]));
              if (kMasked && (key >= p.seqlen_k || (T::causal && key > row + diag)))
                x2[nt][c] = neg_inf();
              mx2 = fmaxf(mx2, x2[nt][c]);
            }
          }
          mx2 = fmaxf(row_max2[mt][r], __fmul_ru(quad_max(mx2), qs2));
          const float shift2 = mx2 == neg_inf() ? 0.f : mx2;
          rescale2[mt][r] = fast_exp2(row_max2[mt][r] - shift2);
          row_max2[mt][r] = mx2;
          const float offset2 = P::p_offset(shift2);
          u32 mismatch = 0u;
          typename P::PSum sum2 = 0;  // the second evaluation's l share (fp8 uses it)
#pragma unroll
          for (int kc = 0; kc < kST / 4; ++kc)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float(&t0)[2] = x2[4 * kc + 2 * h];
              const float(&t1)[2] = x2[4 * kc + 2 * h + 1];
              const u32 w2 = P::p_word(fmaf(t0[0], qs2, offset2), fmaf(t0[1], qs2, offset2),
                                       fmaf(t1[0], qs2, offset2), fmaf(t1[1], qs2, offset2), sum2);
              if constexpr (kLateP)
                pa2[mt][kc][2 * h + r] = w2;
              else
                mismatch |= pa[mt][kc][2 * h + r] ^ w2;
            }
          // int8's block l is checked exactly against the ones column, so l2 may take it; fp8's
          // FP32 sum is only checked within E4M3's rounding there, so l2 takes its own.
          row_sum2[mt][r] = row_sum2[mt][r] * rescale2[mt][r] + P::p_sum(kLateP ? sum2 : sum);
          if (mismatch != 0u)
            q8::report_row(p, batch, head, global_row(mt, r), -1, fault_stage_probs, false, 1.f,
                           0.f);
        }
        if constexpr (!kFusedRescale) {
#pragma unroll
          for (int nt = 0; nt < kOT; ++nt) {
            o[mt][nt][2 * r] *= rescale[mt][r];
            o[mt][nt][2 * r + 1] *= rescale[mt][r];
          }
          if constexpr (Protect::f16_rows > 0) {
#pragma unroll
            for (int v = 0; v < kV16; ++v) {
              cacc[mt][v][2 * r] *= rescale[mt][r];
              cacc[mt][v][2 * r + 1] *= rescale[mt][r];
            }
          }
        }
      }
    if constexpr (T::inject) {
      inject(fault_site_probs, n_block, &pa[0][0][0], kMT * kST);
      inject(fault_site_row_max, n_block, &row_max[0][0], kMT * 2);
      inject(fault_site_row_sum, n_block, &row_sum[0][0], kMT * 2);
      inject(fault_site_rescale, n_block, &rescale[0][0], kMT * 2);
    }

    if constexpr (kStages == 1) {
      sm80::cp_async_wait<0>();
      __syncthreads();  // V landed and every warp is done with K and its scales: fetch the next K
      if (ahead < n_blocks) load_k(0, ahead++);
    }

    // GEMM II: O += P V, 16 channels at a time. int8 sums a block in INT32 (exact), then adds it
    // to O (with the rescale, kFusedRescale); fp8 sums a block from zero in FP32 and adds it to
    // the rescaled O. Not into O itself: the E4M3 MMA's accumulator keeps 22 bits on Ada and
    // Hopper (SageAttention2's measurement; kernel/fwd_q8_sm90.cuh saw O lose 28% at 16k
    // same-signed keys on the H100's wgmma), so each block's share of a large O would be cut.
    const u32 sVs = sV + stage * T::v_stage_bytes;
    const u32 sVc = sVs + T::head_dim * T::vt_stride;  // the checksum rows
    // Checksum tiles times P, exact INT32 (modulo 2^32): Flash-ABFT and EFTA detect, one tile
    // (the digits of the row's channel sums, EFTA's ones row); EFTA correct, three (the digits of
    // the strided channel sums, a tile of ones).
    // int8 EFTA correct's GEMM II checks (strided digits, the block's INT32 P V kept whole).
    constexpr bool kInt8Correct = Protect::correct && Protect::digit_rows > 0;
    constexpr int kVc = kInt8Correct ? 3 : 1;
    [[maybe_unused]] Acc dacc[kMT][kVc][4];
    [[maybe_unused]] u32 isum[kMT][2];
    if constexpr (Protect::digit_rows > 0) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int i = 0; i < 4 * kVc; ++i) dacc[mt][i / 4][i % 4] = P::acc_zero;
        isum[mt][0] = isum[mt][1] = 0u;
      }
#pragma unroll
      for (int kc = 0; kc < kST / 4; ++kc) {
        if constexpr (kInt8Correct) {
          u32 b[4];
          sm80::ldmatrix_x4(b, sVc + b_row * T::vt_stride + kc * 32 + b_col);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            P::mma(dacc[mt][0], pa[mt][kc], b[0], b[1]);
            P::mma(dacc[mt][1], pa[mt][kc], b[2], b[3]);
          }
        }
        u32 b[2];
        sm80::ldmatrix_x2(
            b, sVc + (kInt8Correct ? Protect::ones_row + b2_row : b2_row) * T::vt_stride + kc * 32 +
                   b_col);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) P::mma(dacc[mt][kVc - 1], pa[mt][kc], b[0], b[1]);
      }
    }
    // int8 EFTA correct keeps the block's whole INT32 P V to check and repair it before adding.
    [[maybe_unused]] Acc pv[kInt8Correct ? kMT : 1][kInt8Correct ? kOT : 1][4];
#pragma unroll
    for (int dp = 0; dp < kOT / 2; ++dp) {
      Acc acc[kMT][2][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[mt][i / 4][i % 4] = P::acc_zero;
      // Site pv's element e: channel tile e / 4 % kOT of row tile e / (4 kOT), as site output's.
      const auto inject_pv = [&]() {
        if constexpr (T::inject && !P::float_accumulators) {
          if (plan_hits(p.fault, fault_site_pv) && p.fault.iteration == n_block) {
            const int e = p.fault.element % (kMT * kOT * 4);
            const int mt = e / (4 * kOT), nt = e / 4 % kOT;
#pragma unroll
            for (int m = 0; m < kMT; ++m)
#pragma unroll
              for (int i = 0; i < 8; ++i)
                if (m == mt && 2 * dp + i / 4 == nt && i % 4 == e % 4)
                  acc[m][i / 4][i % 4] = flip_bit(acc[m][i / 4][i % 4], p.fault.bit);
          }
        }
      };
#pragma unroll
      for (int kc = 0; kc < kST / 4; ++kc) {
        u32 b[4];
        sm80::ldmatrix_x4(b, sVs + (dp * 16 + b_row) * T::vt_stride + kc * 32 + b_col);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          P::mma(acc[mt][0], pa[mt][kc], b[0], b[1]);
          P::mma(acc[mt][1], pa[mt][kc], b[2], b[3]);
        }
      }
      inject_pv();
      if constexpr (kInt8Correct) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int i = 0; i < 8; ++i) pv[mt][2 * dp + i / 4][i % 4] = acc[mt][i / 4][i % 4];
      } else {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            float& out = o[mt][2 * dp + i / 4][i % 4];
            const float pvf = P::to_float(acc[mt][i / 4][i % 4]);
            out = kFusedRescale ? fmaf(out, rescale[mt][(i % 4) / 2], pvf) : out + pvf;
            if constexpr (Protect::digit_rows > 0)
              isum[mt][(i % 4) / 2] += static_cast<u32>(acc[mt][i / 4][i % 4] - P::acc_zero);
          }
      }
    }
    if constexpr (Protect::f16_rows > 0) {
      // fp8 Flash-ABFT: each E4M3 P register becomes two f16x2 (fp8_checksums.cuh), 16 keys per
      // f16 MMA; lane (g, t) reads the 4 keys 4t .. 4t + 3 of row g.
      const u32 sVh = sVs + T::v_rows * T::vt_stride + (lane / 4) * T::v16_stride + 8 * quad_t;
#pragma unroll
      for (int kc = 0; kc < kST / 4; ++kc)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          u32 b[kV16][2];
          q8::f16_row_operands(sVh, T::v16_stride, kc * 32 + h * 16, b);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            u32 a[4];
            protect::e4m3_half_to_f16(pa[mt][kc], h, a);
#pragma unroll
            for (int v = 0; v < kV16; ++v) precision::F16::mma(cacc[mt][v], a, b[v][0], b[v][1]);
          }
        }
      inject(fault_site_checksum, n_block, &cacc[0][0][0], kMT * 4);
    }
    if constexpr (Protect::efta && Protect::digit_rows > 0) {
      // int8's l: the ones column (what GEMM II's P summed to) against the quad's dp4a sums of
      // the P the softmax wrote, exactly; the ones sit in column 7 (detect: quad thread 3) or every
      // column (correct).
      constexpr int ones_i = kInt8Correct ? 0 : 1;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          u32 l = block_l[mt][r];
          l += __shfl_xor_sync(0xffffffffu, l, 1);
          l += __shfl_xor_sync(0xffffffffu, l, 2);
          const u32 ones = static_cast<u32>(dacc[mt][kVc - 1][2 * r + ones_i] - P::acc_zero);
          if ((kInt8Correct || quad_t == 3) && ones != l)
            q8::report_row(p, batch, head, global_row(mt, r), -1, fault_stage_row_sum, false,
                           static_cast<float>(static_cast<int>(ones - l)), 0.f);
        }
    }
    if constexpr (kInt8Correct) {
      // Per thread and column e = 2 quad_t + c: its channels 8 nt + e of the block's P V, exactly;
      // a failure takes P times the weighted rows (rare) and repairs the element it locates.
      u32 diff[kMT][4];
      const bool failed = q8::strided_diff<P>(pv, dacc, diff);
      if (__any_sync(0xffffffffu, failed)) {
        Acc vw[kMT][3][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int i = 0; i < 12; ++i) vw[mt][i / 4][i % 4] = P::acc_zero;
#pragma unroll
        for (int kc = 0; kc < kST / 4; ++kc) {
          u32 b[4], b2[2];
          sm80::ldmatrix_x4(b, sVc + (24 + b_row) * T::vt_stride + kc * 32 + b_col);
          sm80::ldmatrix_x2(b2, sVc + (40 + b2_row) * T::vt_stride + kc * 32 + b_col);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            P::mma(vw[mt][0], pa[mt][kc], b[0], b[1]);
            P::mma(vw[mt][1], pa[mt][kc], b[2], b[3]);
            P::mma(vw[mt][2], pa[mt][kc], b2[0], b2[1]);
          }
        }
        q8::strided_repair<P>(pv, dacc, vw, diff, [&](int mt, int i, int j) {
          q8::report_row(p, batch, head, global_row(mt, i / 2),
                         j >= 0 ? 8 * j + 2 * quad_t + i % 2 : -1, fault_stage_output, j >= 0,
                         static_cast<float>(static_cast<int>(diff[mt][i])), 0.f);
        });
      }
      // The verified block into O and its two FP32 checksums.
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float wsum = 0.f;
#pragma unroll
          for (int nt = 0; nt < kOT; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int j = 2 * nt + c;
              const float pvf = P::to_float(pv[mt][nt][2 * r + c]);
              float& out = o[mt][nt][2 * r + c];
              out = kFusedRescale ? fmaf(out, rescale[mt][r], pvf) : out + pvf;
              isum[mt][r] += static_cast<u32>(pv[mt][nt][2 * r + c] - P::acc_zero);
              wsum = fmaf((j + 1) / float(2 * kOT), pvf, wsum);
            }
          const float block = static_cast<float>(static_cast<int>(isum[mt][r]));
          oc[mt][r] = kFusedRescale ? fmaf(oc[mt][r], rescale[mt][r], block)
                                    : oc[mt][r] * rescale[mt][r] + block;
          ocw[mt][r] = kFusedRescale ? fmaf(ocw[mt][r], rescale[mt][r], wsum)
                                     : ocw[mt][r] * rescale[mt][r] + wsum;
        }
    } else if constexpr (Protect::digit_rows > 0) {
      // The block identity, per row: the quad's channel sums against the digits (thread t holds
      // digit columns 2t and 2t + 1, weights 128^column), exact modulo 2^32.
      constexpr int kDigits = protect::int8_digit_count<T::head_dim>;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          u32 digit_part = 0u;
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int column = 2 * quad_t + c;
            const u32 weight = column < kDigits ? (1u << (7 * column)) : 0u;
            digit_part += weight * static_cast<u32>(dacc[mt][0][2 * r + c] - P::acc_zero);
          }
          u32 diff = isum[mt][r] - digit_part;
          diff += __shfl_xor_sync(0xffffffffu, diff, 1);
          diff += __shfl_xor_sync(0xffffffffu, diff, 2);
          // One condition for the record, the row's bound included: written as a call on a
          // nested branch, ptxas spilled 3x as often across the main loop of int8 Flash-ABFT at
          // head dim 128 (39 against 12 local loads and stores).
          const int row = global_row(mt, r);
          if (diff != 0u && quad_t == 0 && row < p.seqlen_q)
            record_fault(p.fault_log, batch, head, row, -1, fault_stage_output, false,
                         static_cast<float>(static_cast<int>(diff)), 0.f);
          // The FP32 checksum follows O: the same rescale, plus a verified sum. The neighbour's
          // (lane ^ 1), rescaled by this lane's factor: so a fault in one lane's factor, which
          // scales its O and its own checksum alike, sets its O apart from the checksum that
          // checks it (the epilogue compares each lane's O with its neighbour's checksum). With
          // its own sum, 29-44% of int8 Flash-ABFT's rescale flips were silent (H200).
          const float block =
              static_cast<float>(static_cast<int>(__shfl_xor_sync(0xffffffffu, isum[mt][r], 1)));
          oc[mt][r] = kFusedRescale ? fmaf(oc[mt][r], rescale[mt][r], block)
                                    : oc[mt][r] * rescale[mt][r] + block;
        }
    }
    if constexpr (Protect::efta) {
      // The rescale of O, its checksums and l, against the second evaluation's, after its use;
      // fp8's P likewise.
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          u32 mismatch = __float_as_uint(rescale[mt][r]) ^ __float_as_uint(rescale2[mt][r]);
          if constexpr (kLateP)
#pragma unroll
            for (int kc = 0; kc < kST / 4; ++kc)
#pragma unroll
              for (int h = 0; h < 2; ++h)
                mismatch |= pa[mt][kc][2 * h + r] ^ pa2[mt][kc][2 * h + r];
          if (mismatch != 0u)
            q8::report_row(p, batch, head, global_row(mt, r), -1, fault_stage_probs, false, 1.f,
                           0.f);
        }
    }
    inject(fault_site_output, n_block, &o[0][0][0], kMT * kOT * 4);
    Protect::after_pv(protect_state, o, n_block);
  };

  // Unmasked blocks first; only blocks at the diagonal or the sequence end pay for the mask.
  int n_unmasked = p.seqlen_k / T::block_n;
  if (T::causal) n_unmasked = min(n_unmasked, max(0, (row0 + diag + 1) / T::block_n));
  n_unmasked = min(n_unmasked, n_blocks);
  for (int n_block = 0; n_block < n_unmasked; ++n_block) step(n_block, q8::Masked<false>{});
  for (int n_block = n_unmasked; n_block < n_blocks; ++n_block) step(n_block, q8::Masked<true>{});
  // Every copy has landed and every warp is done with K and V: the epilogue reuses all of it.
  sm80::cp_async_wait<0>();
  __syncthreads();

  Protect::finish(protect_state, o, row_sum);
  if constexpr (Protect::digit_rows > 0) {
    // The FP32 path (dequantised adds and rescales) against its checksum, per thread (Flash-ABFT
    // and EFTA detect: the neighbour lane's, above): both sum the same verified integers,
    // rounding apart by a few ulps of sum |o| per key block. EFTA correct locates a single wrong
    // element from the weighted checksum and rebuilds it.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float sum = 0.f, mag = 0.f;
#pragma unroll
        for (int nt = 0; nt < kOT; ++nt) {
          sum += o[mt][nt][2 * r] + o[mt][nt][2 * r + 1];
          mag += fabsf(o[mt][nt][2 * r]) + fabsf(o[mt][nt][2 * r + 1]);
        }
        if constexpr (!Protect::correct) {  // the neighbour's O against this lane's checksum
          sum = __shfl_xor_sync(0xffffffffu, sum, 1);
          mag = __shfl_xor_sync(0xffffffffu, mag, 1);
        }
        const float tol = p.tol_output * mag * (n_blocks + 16) + p.tol_floor;
        const float e = oc[mt][r] - sum;
        if (!(fabsf(e) <= tol)) {
          int bad = -1;
          if constexpr (Protect::correct)
            bad = protect::correct_row(o[mt], r, e, oc[mt][r], ocw[mt][r]);
          q8::report_row(p, batch, head, global_row(mt, r),
                         bad >= 0 ? protect::row_group_column(bad, quad_t) : -1, fault_stage_output,
                         bad >= 0, fabsf(e), tol);
        }
      }
  }
  if constexpr (Protect::f16_rows > 0 && Protect::correct) {
    // fp8 EFTA correct, per thread and column e = 2 quad_t + c: its O values of channels 8 nt + e
    // against the strided checksum (tiles 0 + 1), relative to the magnitude (tile 2); a failure
    // is located from the weighted checksum (tiles 3 + 4) and the element rebuilt.
    constexpr float unscale = 1.f / Protect::checksum_scale;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float g[kOT];
        float sum = 0.f, wsum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kOT; ++nt) {
          g[nt] = o[mt][nt][i];
          sum += g[nt];
          wsum += (nt + 1) / float(kOT) * g[nt];
        }
        const float ref = (cacc[mt][0][i] + cacc[mt][1][i]) * unscale;
        const float tol = p.tol_output * cacc[mt][2][i] * unscale * (n_blocks + 16) + p.tol_floor;
        const float e1 = ref - sum;
        if (!(fabsf(e1) <= tol)) {
          const float weighted_ref = (cacc[mt][3][i] + cacc[mt][4][i]) * unscale;
          const int bad = protect::locate<kOT>(g, e1, weighted_ref - wsum);
          if (bad >= 0) {
            protect::rebuild<kOT>(g, bad, ref);
#pragma unroll
            for (int nt = 0; nt < kOT; ++nt) o[mt][nt][i] = g[nt];
          }
          q8::report_row(p, batch, head, global_row(mt, i / 2),
                         bad >= 0 ? 8 * bad + 2 * quad_t + i % 2 : -1, fault_stage_output, bad >= 0,
                         fabsf(e1), tol);
        }
      }
  } else if constexpr (Protect::f16_rows > 0) {
    // fp8 Flash-ABFT, per row: the quad's sum of O over channels against the checksum (columns 0
    // and 1, quad thread 0). The threshold follows the values, as the 16-bit kernels' does
    // (fwd_sm80.cuh's check_output): sum |o| + |checksum|, capped at twice the magnitude B = P
    // sum |v| (column 2, quad thread 1), grown per key block, plus B once. Relative to B alone,
    // which is far above the values where they cancel over the keys, 0.2-0.6% of O flips passed
    // silently (H200).
    constexpr float unscale = 1.f / Protect::checksum_scale;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float sum = 0.f, values = 0.f;
#pragma unroll
        for (int nt = 0; nt < kOT; ++nt) {
          sum += o[mt][nt][2 * r] + o[mt][nt][2 * r + 1];
          values += fabsf(o[mt][nt][2 * r]) + fabsf(o[mt][nt][2 * r + 1]);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        values += __shfl_xor_sync(0xffffffffu, values, 1);
        values += __shfl_xor_sync(0xffffffffu, values, 2);
        const float ref =
            __shfl_sync(0xffffffffu, cacc[mt][0][2 * r] + cacc[mt][0][2 * r + 1], lane & ~3) *
            unscale;
        const float mag = __shfl_sync(0xffffffffu, cacc[mt][0][2 * r], (lane & ~3) + 1) * unscale;
        // Capped at the bound, so that a non-finite element still alarms.
        values = fminf(values + fabsf(ref), 2 * mag);
        const float tol = p.tol_output * ((n_blocks + 16) * values + mag) + p.tol_floor;
        const float e = fabsf(sum - ref);
        if (!(e <= tol) && quad_t == 0)
          q8::report_row(p, batch, head, global_row(mt, r), -1, fault_stage_output, false, e, tol);
        if constexpr (Protect::efta) {
          // l (the FP32 sum of the unrounded P) against the ones column (the E4M3 P GEMM II
          // used): E4M3 rounds each normal term by at most 2^-4 of it (tol_row_sum's default
          // adds 1e-4 of FP32 accumulation) and each subnormal one by at most 2^-10.
          static_assert(Protect::ones_column == 3, "quad thread 1's second column");
          float l = row_sum[mt][r];
          l += __shfl_xor_sync(0xffffffffu, l, 1);
          l += __shfl_xor_sync(0xffffffffu, l, 2);
          const float ones = __shfl_sync(0xffffffffu, cacc[mt][0][2 * r + 1], (lane & ~3) + 1);
          const float tol_l =
              p.tol_row_sum * l + 0x1p-10f * float(n_blocks * T::block_n) + p.tol_floor;
          const float el = fabsf(ones - l);
          if (!(el <= tol_l) && quad_t == 0)
            q8::report_row(p, batch, head, global_row(mt, r), -1, fault_stage_row_sum, false, el,
                           tol_l);
        }
      }
  }
  if constexpr (Protect::efta) {
    // The FP32 l against its second running sum: the same operations on the same verified
    // integers and rescales, so equal bit for bit.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (__float_as_uint(row_sum[mt][r]) != __float_as_uint(row_sum2[mt][r]))
          q8::report_row(p, batch, head, global_row(mt, r), -1, fault_stage_row_sum, false,
                         fabsf(row_sum[mt][r] - row_sum2[mt][r]), 0.f);
        // The final max (the LSE's) against the second evaluation's: earlier ones are checked
        // through the next block's rescale and P.
        if (__float_as_uint(row_max[mt][r]) != __float_as_uint(row_max2[mt][r]))
          q8::report_row(p, batch, head, global_row(mt, r), -1, fault_stage_probs, false,
                         fabsf(row_max[mt][r] - row_max2[mt][r]), 0.f);
      }
  }

  q8::store_output<T>(p, o, row_sum, row_max, sQ, row0, warp_row, lane, batch, head, head_kv);
}

}  // namespace ftattn
