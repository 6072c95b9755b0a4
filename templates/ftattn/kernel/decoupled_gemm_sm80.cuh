// The decoupled baseline's checked GEMMs (EFTA's "ABFT-GEMM" kernels), sm_80 and later:
//   scores: S = scale * Q K^T, FP32 out, causal and sequence masks applied at the store
//   output: O = P V, 16-bit out
// Each warp owns 32 rows x WarpN columns (2 x WarpN/8 m16n8k16 atoms). Its B tile carries EFTA's
// tensor checksums: for each k, the strided sums over the warp's columns t, t+8, t+16, ...
//   c1 = sum_l B[k][t+8l]          (fed to the MMA as a hi and a lo 16-bit part: the checksum
//                                   then carries no 16-bit rounding of its own)
//   c2 = sum_l (l+1) B[k][t+8l]    (locates the column; hi + lo as well)
//   ca = sum_l |B[k][t+8l]|        (with |A|: the sum of absolute contributions, the scale of
//                                   the check's threshold)
// encoded in registers from the B fragments each lane already holds (lane 4g+t holds column g of
// every atom), so encoding, checking and correcting need no shuffle. After the K loop each thread
// checks its (row, residue) pairs: d1 = c1 - sum_l C[r][t+8l] beyond tol * ca + floor is a fault;
// the column is t + 8 (round(d2/d1) - 1) with d2 = c2 - sum_l (l+1) C[r][t+8l]; the value is
// rebuilt as c1 minus the other terms, kept only if c2 agrees with it.
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm80/ldmatrix.cuh"
#include "ftattn/kernel/decoupled_common.cuh"

namespace ftattn::decoupled {

// Rows x Cols 16-bit tile -> shared (rows Stride elements apart); rows at or past valid_rows
// are zero-filled. One cp.async per 16 bytes; the caller commits.
template <int Threads, int Rows, int Cols, int Stride>
__device__ __forceinline__ void load_tile(u32 smem, const u16* g, i64 ld, int valid_rows) {
  constexpr int cpr = Cols / 8;
  constexpr int chunks = Rows * cpr;
#pragma unroll
  for (int i = 0; i < (chunks + Threads - 1) / Threads; ++i) {
    const int c = threadIdx.x + i * Threads;
    if (chunks % Threads == 0 || c < chunks) {
      const int r = c / cpr;
      const int col = (c % cpr) * 8;
      const bool valid = r < valid_rows;
      sm80::cp_async_16(smem + (r * Stride + col) * 2, valid ? g + r * ld + col : g, valid);
    }
  }
}

// B stored n-major (K rows, k contiguous: Bn x K) when !KMajorB, k-major (V rows, n contiguous:
// K x Bn) when KMajorB.
template <class P, bool Bf16, int WarpsM, int WarpsN, int WarpN, bool KMajorB>
struct CheckedGemm {
  static constexpr int threads = WarpsM * WarpsN * 32;
  static constexpr int m_atoms = 2;  // 32 rows per warp
  static constexpr int n_atoms = WarpN / 8;
  static constexpr int block_m = WarpsM * 32;
  static constexpr int block_n = WarpsN * WarpN;
  static constexpr int k_step = 32;
  static constexpr int stages = 3;
  // Rows padded by 16 bytes: 8 consecutive rows start in 8 different bank groups (ldmatrix
  // without conflicts).
  static constexpr int a_stride = k_step + 8;
  static constexpr int b_stride = KMajorB ? block_n + 8 : k_step + 8;
  static constexpr int a_elems = block_m * a_stride;
  static constexpr int b_elems = KMajorB ? k_step * b_stride : block_n * b_stride;
  static constexpr int stage_bytes = (a_elems + b_elems) * 2;
  static constexpr int smem_bytes = stages * stage_bytes;
  static_assert(WarpN % 16 == 0, "a warp's columns come in pairs of n8 atoms");

  struct Acc {
    float d[m_atoms][n_atoms][4];
    float c1[m_atoms][4];
    float c2[m_atoms][4];
    float ca[m_atoms][4];
  };

  __device__ __forceinline__ static void zero(Acc& acc) {
#pragma unroll
    for (int ma = 0; ma < m_atoms; ++ma)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int l = 0; l < n_atoms; ++l) acc.d[ma][l][i] = 0.f;
        acc.c1[ma][i] = acc.c2[ma][i] = acc.ca[ma][i] = 0.f;
      }
  }

  // Flips bit `bit` of value `element` of the data (site 0) or c1 (site 1) accumulators.
  __device__ __forceinline__ static void flip(Acc& acc, bool checksum, int element, int bit) {
    if (checksum) {
      const int e = element % (m_atoms * 4);
#pragma unroll
      for (int ma = 0; ma < m_atoms; ++ma)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (ma * 4 + i == e) acc.c1[ma][i] = flip_bit(acc.c1[ma][i], bit);
    } else {
      const int e = element % (m_atoms * n_atoms * 4);
#pragma unroll
      for (int ma = 0; ma < m_atoms; ++ma)
#pragma unroll
        for (int l = 0; l < n_atoms; ++l)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if ((ma * n_atoms + l) * 4 + i == e) acc.d[ma][l][i] = flip_bit(acc.d[ma][l][i], bit);
    }
  }

  // C (+ checksums) = A B over k_steps steps of 32. A: block_m rows from `a` (ld lda), rows at
  // or past a_rows are zero. B: from `b` (ld ldb); rows at or past b_rows (n for !KMajorB, k for
  // KMajorB) are zero. `inject`: flip after step `plan.iteration` (0: none, 1: data, 2: c1).
  __device__ __forceinline__ static void run(Acc& acc, u32 smem, const u16* a, i64 lda, int a_rows,
                                             const u16* b, i64 ldb, int b_rows, int k_steps,
                                             int inject, const FaultPlanParams& plan) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_m = warp / WarpsN, warp_n = warp % WarpsN;
    const int a_row = lane % 16, a_col = (lane / 16) * 8;                        // A, no trans
    const int k_row = (lane / 16) * 8 + lane % 8, k_col = ((lane / 8) % 2) * 8;  // B n-major
    const int v_row = ((lane / 8) % 2) * 8 + lane % 8, v_col = (lane / 16) * 8;  // B k-major

    auto load = [&](int stage, int step) {
      const u32 sa = smem + stage * stage_bytes;
      const u32 sb = sa + a_elems * 2;
      load_tile<threads, block_m, k_step, a_stride>(sa, a + step * k_step, lda, a_rows);
      if constexpr (KMajorB)
        load_tile<threads, k_step, block_n, b_stride>(sb, b + step * k_step * ldb, ldb,
                                                      b_rows - step * k_step);
      else
        load_tile<threads, block_n, k_step, b_stride>(sb, b + step * k_step, ldb, b_rows);
    };

#pragma unroll
    for (int s = 0; s < stages - 1; ++s) {
      if (s < k_steps) load(s, s);
      sm80::cp_async_commit();
    }
    for (int step = 0; step < k_steps; ++step) {
      sm80::cp_async_wait<stages - 2>();
      // Past this barrier every warp is done with step - 1, whose buffer is refilled now.
      __syncthreads();
      if (step + stages - 1 < k_steps) load((step + stages - 1) % stages, step + stages - 1);
      sm80::cp_async_commit();

      const u32 sa = smem + (step % stages) * stage_bytes;
      const u32 sb = sa + a_elems * 2;
#pragma unroll
      for (int ks = 0; ks < k_step / 16; ++ks) {
        u32 af[m_atoms][4], aa[m_atoms][4];
#pragma unroll
        for (int ma = 0; ma < m_atoms; ++ma) {
          sm80::ldmatrix_x4(
              af[ma], sa + ((warp_m * 32 + ma * 16 + a_row) * a_stride + ks * 16 + a_col) * 2);
#pragma unroll
          for (int r = 0; r < 4; ++r) aa[ma][r] = af[ma][r] & 0x7fff7fffu;  // |A|: sign bits off
        }
        // This lane's column of the checksum atoms: k = 2t, 2t+1, 2t+8, 2t+9 of residue g.
        float e1[4] = {0.f, 0.f, 0.f, 0.f}, e2[4] = {0.f, 0.f, 0.f, 0.f};
        float ea[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int np = 0; np < n_atoms / 2; ++np) {
          u32 bf[4];
          if constexpr (KMajorB)
            sm80::ldmatrix_x4_trans(
                bf, sb + ((ks * 16 + v_row) * b_stride + warp_n * WarpN + np * 16 + v_col) * 2);
          else
            sm80::ldmatrix_x4(
                bf, sb + ((warp_n * WarpN + np * 16 + k_row) * b_stride + ks * 16 + k_col) * 2);
#pragma unroll
          for (int ma = 0; ma < m_atoms; ++ma) {
            P::mma(acc.d[ma][2 * np], af[ma], bf[0], bf[1]);
            P::mma(acc.d[ma][2 * np + 1], af[ma], bf[2], bf[3]);
          }
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const float w = static_cast<float>(2 * np + j + 1);
            float x[4];
            unpack2<Bf16>(bf[2 * j], x[0], x[1]);
            unpack2<Bf16>(bf[2 * j + 1], x[2], x[3]);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              e1[r] += x[r];
              e2[r] = fmaf(w, x[r], e2[r]);
              ea[r] += fabsf(x[r]);
            }
          }
        }
        // Checksums go into the MMA as hi + lo 16-bit parts, so they carry no 16-bit rounding of
        // their own (c2 too: rounded, the location ratio and the rebuilt value's c2 check failed
        // for all but huge errors, and located faults went uncorrected).
        auto split = [](const float(&e)[4], u32(&hi)[2], u32(&lo)[2]) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            hi[j] = P::pack(e[2 * j], e[2 * j + 1]);
            float h0, h1;
            unpack2<Bf16>(hi[j], h0, h1);
            lo[j] = P::pack(e[2 * j] - h0, e[2 * j + 1] - h1);
          }
        };
        u32 c1_hi[2], c1_lo[2], c2_hi[2], c2_lo[2];
        split(e1, c1_hi, c1_lo);
        split(e2, c2_hi, c2_lo);
        const u32 s0 = P::pack(ea[0], ea[1]), s1 = P::pack(ea[2], ea[3]);
#pragma unroll
        for (int ma = 0; ma < m_atoms; ++ma) {
          P::mma(acc.c1[ma], af[ma], c1_hi[0], c1_hi[1]);
          P::mma(acc.c1[ma], af[ma], c1_lo[0], c1_lo[1]);
          P::mma(acc.c2[ma], af[ma], c2_hi[0], c2_hi[1]);
          P::mma(acc.c2[ma], af[ma], c2_lo[0], c2_lo[1]);
          P::mma(acc.ca[ma], aa[ma], s0, s1);
        }
      }
      if (inject != 0 && step == plan.iteration) flip(acc, inject == 2, plan.element, plan.bit);
    }
    sm80::cp_async_wait<0>();
  }

  // Checks every (row, residue) pair of this thread; corrects what it can locate. `report(ma,
  // atom, i, corrected, magnitude, threshold)` is called per failed check (atom -1: not located).
  template <class Report>
  __device__ __forceinline__ static void verify(Acc& acc, float tol, float floor, Report&& report) {
#pragma unroll
    for (int ma = 0; ma < m_atoms; ++ma)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float sum1 = 0.f, sum2 = 0.f;
        int bad = 0, bad_at = -1;
#pragma unroll
        for (int l = 0; l < n_atoms; ++l) {
          const float x = acc.d[ma][l][i];
          sum1 += x;
          sum2 = fmaf(static_cast<float>(l + 1), x, sum2);
          if (!finite(x)) {
            ++bad;
            bad_at = l;
          }
        }
        const float d1 = acc.c1[ma][i] - sum1;
        const float threshold = tol * acc.ca[ma][i] + floor;
        if (fabsf(d1) <= threshold) continue;  // NaN and Inf fail here

        int at = -1;
        if (bad == 1) {
          at = bad_at;
        } else if (bad == 0) {
          const float ratio = (acc.c2[ma][i] - sum2) / d1;  // = column group + 1
          const float j = rintf(ratio);
          if (fabsf(ratio - j) <= 0.1f && j >= 1.f && j <= static_cast<float>(n_atoms))
            at = static_cast<int>(j) - 1;
        }
        bool corrected = false;
        if (at >= 0 && finite(acc.c1[ma][i]) && finite(acc.c2[ma][i])) {
          float others = 0.f, others2 = 0.f;
#pragma unroll
          for (int l = 0; l < n_atoms; ++l)
            if (l != at) {
              others += acc.d[ma][l][i];
              others2 = fmaf(static_cast<float>(l + 1), acc.d[ma][l][i], others2);
            }
          const float value = acc.c1[ma][i] - others;
          const float d2 = acc.c2[ma][i] - fmaf(static_cast<float>(at + 1), value, others2);
          // c2 must agree with the rebuilt value; otherwise the location was a guess: leave it.
          if (fabsf(d2) <= n_atoms * threshold) {
#pragma unroll
            for (int l = 0; l < n_atoms; ++l)
              if (l == at) acc.d[ma][l][i] = value;
            corrected = true;
          }
        }
        report(ma, at, i, corrected, fabsf(d1), threshold);
      }
  }
};

struct __align__(8) Float2 {
  float x, y;
};

__device__ __forceinline__ int valid_keys(const AttentionParams& p, bool causal, int row) {
  return causal ? max(0, min(p.seqlen_k, row + 1 + p.seqlen_k - p.seqlen_q)) : p.seqlen_k;
}

// Kernel 1. Grid (ceil(seqlen_k / 128), ceil(seqlen_q / 128), batch * heads_q).
template <class P, bool Bf16, int HeadDim, bool Causal, bool Inject>
__device__ __forceinline__ void scores_kernel(const DecoupledParams& dp) {
  using G = CheckedGemm<P, Bf16, 4, 2, 64, false>;
  const AttentionParams& p = dp.attn;
  const int n0 = blockIdx.x * G::block_n, m0 = blockIdx.y * G::block_m;
  const int bh = blockIdx.z, batch = bh / p.heads_q, head = bh % p.heads_q;
  const int last_row = min(m0 + G::block_m, p.seqlen_q) - 1;
  if (n0 >= valid_keys(p, Causal, last_row)) return;  // above every row's diagonal

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const u32 smem = sm80::smem_addr(smem_raw);
  const u16* q = static_cast<const u16*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride +
                 m0 * p.q_seq_stride;
  const u16* k = static_cast<const u16*>(p.k) + batch * p.k_batch_stride +
                 (head / p.group_size) * p.k_head_stride + n0 * p.k_seq_stride;
  int inject = 0;
  if constexpr (Inject) {
    if (plan_hits(p.fault, fault_site_scores)) inject = 1;
    if (plan_hits(p.fault, fault_site_checksum)) inject = 2;
  }
  typename G::Acc acc;
  G::zero(acc);
  G::run(acc, smem, q, p.q_seq_stride, p.seqlen_q - m0, k, p.k_seq_stride, p.seqlen_k - n0,
         HeadDim / G::k_step, inject, p.fault);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row_base = m0 + (warp / 2) * 32 + lane / 4;
  const int col_base = n0 + (warp % 2) * 64 + (lane % 4) * 2;
  G::verify(acc, dp.tol_scores, dp.tol_floor,
            [&](int ma, int at, int i, bool corrected, float magnitude, float threshold) {
              record_fault(p.fault_log, batch, head, row_base + ma * 16 + (i / 2) * 8,
                           at < 0 ? -1 : col_base + at * 8 + (i % 2), fault_stage_scores, corrected,
                           magnitude, threshold);
            });

  // Store scale * S; only what the softmax reads (keys below each row's bound).
#pragma unroll
  for (int ma = 0; ma < G::m_atoms; ++ma)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row_base + ma * 16 + r * 8;
      if (row >= p.seqlen_q) continue;
      const int valid = valid_keys(p, Causal, row);
      float* out = dp.s + (static_cast<i64>(bh) * p.seqlen_q + row) * dp.row_elements;
#pragma unroll
      for (int l = 0; l < G::n_atoms; ++l) {
        const int col = col_base + l * 8;
        const float x0 = acc.d[ma][l][2 * r] * p.scale, x1 = acc.d[ma][l][2 * r + 1] * p.scale;
        if (col + 1 < valid) {
          *reinterpret_cast<Float2*>(out + col) = Float2{x0, x1};
        } else if (col < valid) {
          out[col] = x0;
        }
      }
    }
}

// Kernel 3. Grid (ceil(seqlen_q / block_m), heads_q, batch); a CTA holds all HeadDim columns.
template <class P, bool Bf16, int HeadDim, int WarpsM, int WarpsN, int WarpN, bool Causal,
          bool Inject>
__device__ __forceinline__ void output_kernel(const DecoupledParams& dp) {
  using G = CheckedGemm<P, Bf16, WarpsM, WarpsN, WarpN, true>;
  static_assert(G::block_n == HeadDim, "the output GEMM covers head_dim in one CTA");
  const AttentionParams& p = dp.attn;
  const int m0 = blockIdx.x * G::block_m, head = blockIdx.y, batch = blockIdx.z;
  const int bh = batch * p.heads_q + head;
  const int last_row = min(m0 + G::block_m, p.seqlen_q) - 1;
  // Keys this block reads; the softmax wrote zeros up to here past each row's own bound.
  const int valid = valid_keys(p, Causal, last_row);
  const int k_end =
      min(static_cast<int>(dp.row_elements), (valid + G::k_step - 1) / G::k_step * G::k_step);

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const u32 smem = sm80::smem_addr(smem_raw);
  const u16* prob =
      static_cast<const u16*>(dp.p) + (static_cast<i64>(bh) * p.seqlen_q + m0) * dp.row_elements;
  const u16* v = static_cast<const u16*>(p.v) + batch * p.v_batch_stride +
                 (head / p.group_size) * p.v_head_stride;
  int inject = 0;
  if constexpr (Inject) {
    if (plan_hits(p.fault, fault_site_output)) inject = 1;
  }
  typename G::Acc acc;
  G::zero(acc);
  G::run(acc, smem, prob, dp.row_elements, p.seqlen_q - m0, v, p.v_seq_stride, p.seqlen_k,
         k_end / G::k_step, inject, p.fault);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row_base = m0 + (warp / WarpsN) * 32 + lane / 4;
  const int col_base = (warp % WarpsN) * WarpN + (lane % 4) * 2;
  G::verify(acc, dp.tol_output, dp.tol_floor,
            [&](int ma, int at, int i, bool corrected, float magnitude, float threshold) {
              record_fault(p.fault_log, batch, head, row_base + ma * 16 + (i / 2) * 8,
                           at < 0 ? -1 : col_base + at * 8 + (i % 2), fault_stage_output, corrected,
                           magnitude, threshold);
            });

  u16* o = static_cast<u16*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
#pragma unroll
  for (int ma = 0; ma < G::m_atoms; ++ma)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row_base + ma * 16 + r * 8;
      if (row >= p.seqlen_q) continue;
#pragma unroll
      for (int l = 0; l < G::n_atoms; ++l)
        *reinterpret_cast<u32*>(o + row * p.o_seq_stride + col_base + l * 8) =
            P::pack(acc.d[ma][l][2 * r], acc.d[ma][l][2 * r + 1]);
    }
}

}  // namespace ftattn::decoupled
