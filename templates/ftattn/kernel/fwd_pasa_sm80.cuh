// PASA forward (Cheng et al., "Online Pseudo-Average Shifting Attention") on the sm80 skeleton:
// the FlashAttention-2 loop of fwd_sm80.cuh with S accumulated in FP16 by the tensor cores
// (m16n8k16 with f16 accumulators: half the S registers) and P = 2^(S - b) on the f16x2
// special-function path; m, l and O stay in FP32.
//
// FP16 scores overflow when Q and K carry a large bias along the sequence (PASA section 2.1:
// with mean 30 and d = 128, every Q K^T element is ~115,200 > 65,504). PASA shifts each key block
// by beta times its mean before GEMM I and recovers the removed bias in the online softmax:
//
//   shift kernel (once per call, per KV head and key block j of block_n keys; the paper's
//   K'^T = K^T M, done as its own pass, section B.6 item 6 of the digest):
//     r_j = fl16(beta * mean of the block's n_j real keys)           (tail block: n_j < block_n)
//     K'_t = fl16(c * (K_t - r_j)),  c = softmax scale * log2(e)     (scale folded in FP32, then
//                                                                     one rounding: no 1/alpha in
//                                                                     M)
//   main loop, block j:  S'' = Q K'^T (FP16 accumulators),  rec = c * (q . r_j) (FP32, below)
//     the true base-2 logit is S''[t] + rec: PASA's recovery, beta/(1-beta) * rowmean(S'_j),
//     equals q . r_j exactly in exact arithmetic. It is evaluated here as one extra MMA with FP32
//     accumulators against r_j itself (every lane of the ldmatrix points at the one shift row,
//     so all 8 columns of that n8 tile hold q . r_j) instead of from the FP16 S' tile, whose
//     rounding the paper's form amplifies by beta/(1-beta) = 63.5.
//     m   = max(m, rowmax(S'') + rec)                     FP32, absolute: no running-mean frame
//     b   = m - rec, split into f16 b_hi + b_lo          so that P = 2^((S'' - b_hi) - b_lo)
//     P   = ex2.approx.f16x2(S'' - b_hi - b_lo)           in (0, 1], masked keys -inf -> 0
//     l   = l * 2^(m_old - m) + sum(P)                   (P summed pairwise in f16, then FP32)
//     O   = O * 2^(m_old - m) + P V                      FP32 accumulators
// The first block needs no special case (m starts at -inf in FP32, unlike the paper's m_0 = 0),
// and the recovery uses the same r_j that was subtracted, so it is exact for any n_j and beta.
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm80/ldmatrix.cuh"
#include "ftattn/arch/sm80/shared.cuh"
#include "ftattn/common/math.cuh"
#include "ftattn/common/types.cuh"
#include "ftattn/kernel/fwd_sm80.cuh"
#include "ftattn/params.cuh"
#include "ftattn/precision/f16_pasa.cuh"
#include "ftattn/protect/none.cuh"
#include "ftattn/protect/workspace.cuh"

namespace ftattn {

template <int HeadDim, int BlockM, int BlockN, int NumWarps, int NumStages, bool Causal,
          bool BlockSparse, class ProtectT = protect::None>
struct PasaTraits : FwdTraits<HeadDim, BlockM, BlockN, NumWarps, NumStages, precision::F16Pasa,
                              ProtectT, Causal, BlockSparse, false> {
  using Base = FwdTraits<HeadDim, BlockM, BlockN, NumWarps, NumStages, precision::F16Pasa, ProtectT,
                         Causal, BlockSparse, false>;
  // Protection on the P V path only (Flash-ABFT): EFTA's score checksums and product check are
  // derived for FP32 scores, not PASA's shifted FP16 ones.
  static_assert(ProtectT::k_atoms == 0, "PASA supports protection none or flash_abft");
  // Each K stage carries one more row: the block's shift vector r_j.
  static constexpr int k_rows = BlockN + 1;
  static constexpr int smem_bytes = (BlockM + NumStages * (k_rows + BlockN)) * Base::row_stride * 2;
  static constexpr int shift_threads = 128;  // the shift kernel's CTA
};

// The shift kernel: one CTA per (key block, KV head, batch). Column sums of the block's real
// keys in FP32, r_j = fl16(beta * mean), then K' = fl16(scale_log2 * (K - r_j)).
template <class T>
__device__ __forceinline__ void pasa_shift_sm80(const PasaShiftParams& p, float beta) {
  using P = precision::F16Pasa;
  constexpr int kThreads = T::shift_threads;
  constexpr int cpr = T::head_dim / 8;  // 16-byte chunks per row
  constexpr int rows_per_pass = kThreads / cpr;
  constexpr int passes = (T::block_n + rows_per_pass - 1) / rows_per_pass;
  __shared__ float partial[rows_per_pass][T::head_dim];
  __shared__ u16 shift_h[T::head_dim];

  const int n_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const int key0 = n_block * T::block_n;
  const int n = min(T::block_n, p.seqlen_k - key0);  // the tail block's real keys
  const int tid = threadIdx.x;
  const bool active = tid < rows_per_pass * cpr;
  const int r0 = tid / cpr, col = (tid % cpr) * 8;
  const u16* k = static_cast<const u16*>(p.k) + batch * p.k_batch_stride + head * p.k_head_stride +
                 key0 * p.k_seq_stride;

  float sum[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) sum[j] = 0.f;
  if (active) {
#pragma unroll
    for (int i = 0; i < passes; ++i) {
      const int r = r0 + i * rows_per_pass;
      if (r < n) {
        const uint4_ v = *reinterpret_cast<const uint4_*>(k + r * p.k_seq_stride + col);
        const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          sum[2 * j] += P::lo(w[j]);
          sum[2 * j + 1] += P::hi(w[j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) partial[r0][col + j] = sum[j];
  }
  __syncthreads();

  const i64 n_blocks = (p.seqlen_k + T::block_n - 1) / T::block_n;
  u16* shift = static_cast<u16*>(p.shift) +
               ((static_cast<i64>(batch) * p.heads_kv + head) * n_blocks + n_block) * T::head_dim;
  for (int c = tid; c < T::head_dim; c += kThreads) {
    float s = 0.f;
#pragma unroll
    for (int r = 0; r < rows_per_pass; ++r) s += partial[r][c];
    const u16 h = P::to_half(beta * (s / n));
    shift_h[c] = h;
    shift[c] = h;
  }
  __syncthreads();

  if (active) {
    float r[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) r[j] = P::lo(shift_h[col + j]);
    u16* out = static_cast<u16*>(p.k_shifted) +
               ((static_cast<i64>(batch) * p.heads_kv + head) * p.seqlen_k + key0) * T::head_dim;
#pragma unroll
    for (int i = 0; i < passes; ++i) {
      const int row = r0 + i * rows_per_pass;
      if (row < n) {
        const uint4_ v = *reinterpret_cast<const uint4_*>(k + row * p.k_seq_stride + col);
        const u32 w[4] = {v.x, v.y, v.z, v.w};
        u32 o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
          o[j] = P::pack(p.scale_log2 * (P::lo(w[j]) - r[2 * j]),
                         p.scale_log2 * (P::hi(w[j]) - r[2 * j + 1]));
        *reinterpret_cast<uint4_*>(out + row * T::head_dim + col) = uint4_{o[0], o[1], o[2], o[3]};
      }
    }
  }
}

template <class T>
__device__ __forceinline__ void attention_fwd_pasa_sm80(const AttentionParams& p) {
  using P = precision::F16Pasa;
  using Protect = typename T::Protect;
  constexpr int kMT = T::m_tiles;
  constexpr int kST = T::s_tiles;
  constexpr int kOT = T::o_tiles;
  constexpr int kStages = T::num_stages;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const detail::SmemTiles<T> smem(sm80::smem_addr(smem_raw));
  const u32 sQ = smem.q;

  int m_block, head, batch;
  detail::tile_coords<T>(p, m_block, head, batch);
  const int head_kv = head / p.group_size;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;

  const int row0 = m_block * T::block_m;
  const int diag = p.seqlen_k - p.seqlen_q;  // bottom-right causal alignment
  const int n_blocks_all = (p.seqlen_k + T::block_n - 1) / T::block_n;
  int n_blocks = n_blocks_all;
  if (T::causal) {
    const int last_key = row0 + T::block_m - 1 + diag;
    n_blocks = last_key < 0 ? 0 : min(n_blocks, last_key / T::block_n + 1);
  }

  const u16* q = static_cast<const u16*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride +
                 row0 * p.q_seq_stride;
  const u16* k =
      static_cast<const u16*>(p.k) + batch * p.k_batch_stride + head_kv * p.k_head_stride;
  const u16* v =
      static_cast<const u16*>(p.v) + batch * p.v_batch_stride + head_kv * p.v_head_stride;
  const u16* shift = static_cast<const u16*>(p.k_shift) +
                     (static_cast<i64>(batch) * p.heads_kv + head_kv) * n_blocks_all * T::head_dim;

  const unsigned char* mask_row =
      T::block_sparse ? p.block_mask + head * p.block_mask_head_stride +
                            static_cast<i64>(row0 / p.sparse_block_m) * p.block_mask_k_blocks
                      : nullptr;
  auto active = [&](int n_block) {
    return !T::block_sparse || mask_row[n_block * T::block_n / p.sparse_block_n] != 0;
  };
  auto next_active = [&](int n_block) {
    while (n_block < n_blocks && !active(n_block)) ++n_block;
    return n_block;
  };

  // A K tile brings its shift row r_j; each load is one cp.async group.
  auto load_k = [&](int stage, int n_block) {
    const int key0 = n_block * T::block_n;
    const u32 dst = smem.k_stage(stage);
    detail::load_tile<T, T::block_n>(dst, k + key0 * p.k_seq_stride, p.k_seq_stride,
                                     p.seqlen_k - key0);
    if (tid < T::chunks_per_row)
      sm80::cp_async_16(dst + (T::block_n * T::row_stride + tid * 8) * 2,
                        shift + n_block * T::head_dim + tid * 8, true);
    sm80::cp_async_commit();
  };
  // Flash-ABFT: this KV head's V checksum columns (protect/workspace.cuh) ride with V tiles.
  const ChecksumWorkspace cs = checksum_workspace(p.batch, p.heads_kv, p.seqlen_k, T::head_dim,
                                                  T::block_n, 0, Protect::v_atoms);
  const long long cs_head = static_cast<long long>(batch) * p.heads_kv + head_kv;
  const unsigned char* cs_base = static_cast<const unsigned char*>(p.checksums);
  auto load_v = [&](int stage, int n_block) {
    detail::load_v_tile<T>(smem.v_stage(stage), v, p, n_block * T::block_n, cs_base, cs_head,
                           cs.v_per_head);
  };
  auto skip_kv = [] {
    sm80::cp_async_commit();
    sm80::cp_async_commit();
  };

  detail::load_tile<T, T::block_m>(sQ, q, p.q_seq_stride, p.seqlen_q - row0);
  sm80::cp_async_commit();
  auto load_kv = [&](int stage, int n_block) {
    load_k(stage, n_block);
    load_v(stage, n_block);
  };
  int ahead = detail::prefetch_key_blocks<T>(n_blocks, next_active, load_k, load_kv, skip_kv);

  float o[kMT][kOT][4];
  float row_max[kMT][2];  // base 2, absolute (the recovered logits)
  float row_sum[kMT][2];  // this thread's partial sums; the quad is summed at the end
  detail::clear_accumulators(o, row_max, row_sum);
  constexpr int kAtoms = Protect::v_atoms > 0 ? Protect::v_atoms : 1;
  float oc[kMT][kAtoms][4];  // GEMM II checksum accumulators, rescaled like O
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int g = 0; g < kAtoms; ++g)
#pragma unroll
      for (int i = 0; i < 4; ++i) oc[mt][g][i] = 0.f;

  const int warp_row = warp * kMT * 16;
  const detail::LaneAddressing<T> at(warp_row, lane);
  const int shift_col = ((lane / 8) % 2) * 8;  // the shift row as 8 equal keys

  auto step = [&](const int it, const int n_block, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const int stage = it % kStages;
    if constexpr (kStages == 1) {
      sm80::cp_async_wait<0>();
      __syncthreads();
      load_v(0, n_block);
    } else {
      sm80::cp_async_wait<2 * kStages - 4>();  // K and V of this block: one barrier per block
      __syncthreads();
      if (ahead < n_blocks) {
        load_kv((it + kStages - 1) % kStages, ahead);
        ahead = next_active(ahead + 1);
      } else {
        skip_kv();
      }
    }

    // GEMM I with FP16 accumulators, and the recovery q . r_j with FP32 ones.
    u32 s[kMT][kST][2];
    float rc[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kST; ++nt) s[mt][nt][0] = s[mt][nt][1] = 0u;
#pragma unroll
      for (int i = 0; i < 4; ++i) rc[mt][i] = 0.f;
    }
    const u32 sKs = smem.k_stage(stage);
    detail::gemm_qk<T>(
        s, sQ + at.q_offset, sKs + at.k_offset, at.warp_row, at.a_row, at.a_col, at.k_row, at.k_col,
        [](u32(&acc)[2], const u32(&a)[4], u32 b0, u32 b1) { P::mma_f16(acc, a, b0, b1); },
        [&](const u32(&a)[kMT][4], int ks) {  // the shift row: q . r_j in FP32
          u32 br[2];
          sm80::ldmatrix_x2(br, sKs + (T::block_n * T::row_stride + ks * 16 + shift_col) * 2);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) P::mma(rc[mt], a[mt], br[0], br[1]);
        });
    if constexpr (kStages == 1) {
      sm80::cp_async_wait<0>();
      __syncthreads();  // V landed, and every warp is done with K: load the next block's K
      if (ahead < n_blocks) {
        load_k(0, ahead);
        ahead = next_active(ahead + 1);
      }
    }

    // Keys past the sequence end and, for causal, past each row's diagonal: -inf.
    if constexpr (kMasked) {
      detail::for_each_masked<kMT, kST, T::causal>(
          row0 + warp_row, n_block * T::block_n, lane, p.seqlen_k, diag,
          [&](int mt, int nt, int i) {
            u32& x = s[mt][nt][i / 2];
            x = i % 2 == 0 ? (x & 0xffff0000u) | P::neg_inf_half
                           : (x & 0x0000ffffu) | (u32(P::neg_inf_half) << 16);
          });
    }

    // Online softmax with the recovered bias.
    float rescale[kMT][2];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      u32 m0 = s[mt][0][0], m1 = s[mt][0][1];
#pragma unroll
      for (int nt = 1; nt < kST; ++nt) {
        m0 = P::hmax2(m0, s[mt][nt][0]);
        m1 = P::hmax2(m1, s[mt][nt][1]);
      }
      u32 mm = P::hmax2(P::lows(m0, m1), P::highs(m0, m1));  // (row g, row g + 8)
      mm = P::hmax2(mm, __shfl_xor_sync(0xffffffffu, mm, 1));
      mm = P::hmax2(mm, __shfl_xor_sync(0xffffffffu, mm, 2));
      u32 neg_b_hi[2], neg_b_lo[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float rec = rc[mt][2 * r] * p.scale_log2;
        const float block_max = (r == 0 ? P::lo(mm) : P::hi(mm)) + rec;
        const float mx = fmaxf(row_max[mt][r], block_max);
        const float mref = mx == neg_inf() ? 0.f : mx;  // nothing seen yet: P stays 0
        rescale[mt][r] = fast_exp2(row_max[mt][r] - mref);
        row_max[mt][r] = mx;
        // Finite in f16 whatever the scores: a +-inf b would turn masked -inf into NaN.
        const float b = fminf(fmaxf(mref - rec, -65504.f), 65504.f);
        const unsigned short bh = P::to_half(b);
        const unsigned short bl = P::to_half(b - P::lo(bh));
        neg_b_hi[r] = P::splat(bh ^ 0x8000);
        neg_b_lo[r] = P::splat(bl ^ 0x8000);
      }
      u32 sum[2][kST];
#pragma unroll
      for (int nt = 0; nt < kST; ++nt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          u32& x = s[mt][nt][r];
          x = P::hexp2(P::hadd2(P::hadd2(x, neg_b_hi[r]), neg_b_lo[r]));
          sum[r][nt] = x;
        }
        // Pairwise sums of P in f16 (each half at most kST / 2 ... kST terms of at most 1).
#pragma unroll
      for (int w = 1; w < kST; w *= 2)
#pragma unroll
        for (int nt = 0; nt + w < kST; nt += 2 * w)
#pragma unroll
          for (int r = 0; r < 2; ++r) sum[r][nt] = P::hadd2(sum[r][nt], sum[r][nt + w]);
#pragma unroll
      for (int r = 0; r < 2; ++r)
        row_sum[mt][r] = row_sum[mt][r] * rescale[mt][r] + (P::lo(sum[r][0]) + P::hi(sum[r][0]));
    }

    bool new_max = !T::lazy_rescale;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) new_max |= rescale[mt][0] != 1.f || rescale[mt][1] != 1.f;
    if (!T::lazy_rescale || __any_sync(0xffffffffu, new_max))
      detail::rescale_output<Protect>(o, oc, rescale);

    // GEMM II: O += P V, P straight from the FP16 S accumulators (C layout == A layout).
    const u32 sVs = smem.v_stage(stage) + at.v_offset;
#pragma unroll
    for (int kp = 0; kp < kST / 2; ++kp) {
      u32 a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        a[mt][0] = s[mt][2 * kp][0];
        a[mt][1] = s[mt][2 * kp][1];
        a[mt][2] = s[mt][2 * kp + 1][0];
        a[mt][3] = s[mt][2 * kp + 1][1];
      }
      detail::gemm_pv_step<T>(
          o, oc, a, sVs, at, kp,
          [](float(&acc)[4], const u32(&x)[4], u32 b0, u32 b1) { P::mma(acc, x, b0, b1); });
    }
  };

  detail::walk_key_blocks<T>(p.seqlen_k, row0, diag, n_blocks, next_active, step);
  sm80::cp_async_wait<0>();
  __syncthreads();

  // Epilogue: max is already the base-2 logit.
  float l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) l[mt][r] = quad_sum(row_sum[mt][r]);
  if constexpr (Protect::v_atoms > 0)
    detail::check_output<T>(p, o, oc, l,
                            reinterpret_cast<const float*>(cs_base + cs.vmax_offset +
                                                           cs_head * cs.vmax_per_head)[lane % 4],
                            n_blocks, batch, head, lane, [&](int mt, int r) {
                              return row0 + warp_row + mt * 16 + lane / 4 + r * 8;
                            });
  detail::store_output<T>(p, o, l, row_max, 1.f, batch, head, row0, warp_row, lane, sQ);
}

}  // namespace ftattn
