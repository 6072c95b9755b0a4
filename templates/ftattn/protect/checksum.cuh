// Protection policies with checksums carried through the fused kernel's tensor-core MMAs.
//
//   flash_abft    Flash-ABFT: V gets one more column, rowsum(V) (split hi + lo so the 16-bit
//                 operand loses nothing), so O's extra column accumulates P . rowsum(V) through
//                 the same MMAs and rescales as O; at the end it must equal the row sum of O.
//                 Detects faults on the P V path only (scores, exp, max and l are common-mode).
//   efta_detect   EFTA: K tiles get 8 checksum rows (strided sums over the block's keys, stride
//                 8, so each thread's checksum covers exactly the S elements it holds); the
//                 "unified" product check then verifies GEMM I, the max subtraction and exp:
//                 prod P over a thread's elements == 2^(checksum * scale - n * max). V gets the
//                 matching strided checksum columns (checked against O at the end) plus a column
//                 of ones, whose accumulator is the row sum of the f16 P: it checks l, and SNVR's
//                 range check LB <= l <= n (LB from per-block maxima) backs it up.
//   efta_correct  Also weighted checksums (weights (j + 1) / n over the thread's j-th element):
//                 a failed check locates the element from the ratio of the two discrepancies
//                 and rebuilds it from the checksum, for S (before the softmax) and for O.
//
// The checksums of a KV head are computed once per call by checksum_prologue() (EFTA's
// "checksum generation", hoisted out of every CTA) into the workspace of protect/workspace.cuh.
// Thresholds are relative to a bound on the sum of absolute contributions (|q| sum|k| for S,
// l * max sum|v| for O); see params.cuh and the README for their derivation and defaults.
#pragma once

#include "ftattn/common/faults.cuh"
#include "ftattn/common/math.cuh"
#include "ftattn/protect/checks.cuh"
#include "ftattn/protect/workspace.cuh"

namespace ftattn::protect {

enum class Scheme { flash_abft, efta_detect, efta_correct };

template <Scheme S>
struct Checksum {
  static constexpr bool enabled = true;
  static constexpr bool row_check = S == Scheme::flash_abft;  // one check per row, detect only
  static constexpr bool correct = S == Scheme::efta_correct;
  static constexpr int k_atoms = S == Scheme::flash_abft ? 0 : (correct ? 2 : 1);
  static constexpr int v_atoms = S == Scheme::flash_abft ? 1 : 2;
};

// Grid (key blocks, kv heads, batch), T::threads threads: the checksums of one key block.
template <class T>
__device__ __forceinline__ void checksum_prologue(const AttentionParams& p) {
  using P = typename T::Precision;
  using Pr = typename T::Protect;
  constexpr int D = T::head_dim, N = T::block_n;
  constexpr bool bf16 = IsBf16<P>::value;
  const ChecksumWorkspace w =
      checksum_workspace(p.batch, p.heads_kv, p.seqlen_k, D, N, Pr::k_atoms, Pr::v_atoms);
  const int n_block = blockIdx.x, head_kv = blockIdx.y, batch = blockIdx.z;
  const long long head_index = static_cast<long long>(batch) * p.heads_kv + head_kv;
  unsigned char* base = static_cast<unsigned char*>(const_cast<void*>(p.checksums));
  const u16* k =
      static_cast<const u16*>(p.k) + batch * p.k_batch_stride + head_kv * p.k_head_stride;
  const u16* v =
      static_cast<const u16*>(p.v) + batch * p.v_batch_stride + head_kv * p.v_head_stride;
  const int key0 = n_block * N;

  // V: a group of lanes per key, each lane one 16-byte chunk (8 columns) of the key's row, so a
  // warp's loads are whole rows. Columns of thread group t: 8 * nt + 2t + c, its element j =
  // 2 nt + c; every chunk holds two columns of each group. The group's partial sums meet by
  // shuffles (groups are padded to a power of two lanes: head dims 96 and 192 have 12 and 24
  // chunks), and max sum|v| per column group meets in shared memory first: one global atomic per
  // group and CTA.
  constexpr int chunks = D / 8;
  constexpr int lanes = chunks <= 4 ? 4 : chunks <= 8 ? 8 : chunks <= 16 ? 16 : 32;
  constexpr int keys_per_pass = T::threads / lanes;
  u32* vc = reinterpret_cast<u32*>(base + head_index * w.v_per_head) +
            static_cast<long long>(key0) * 4 * Pr::v_atoms;
  float* vmax = reinterpret_cast<float*>(base + w.vmax_offset + head_index * w.vmax_per_head);
  __shared__ int cta_max[4];  // sums of |v| are >= 0: their bits order as ints
  if (threadIdx.x < 4) cta_max[threadIdx.x] = 0;
  __syncthreads();
  const int chunk = threadIdx.x % lanes;
  for (int first = 0; first < N; first += keys_per_pass) {  // the same trip count in every lane
    const int kk = first + static_cast<int>(threadIdx.x) / lanes;
    const int key = key0 + kk;
    float g1[4] = {0.f, 0.f, 0.f, 0.f}, g2[4] = {0.f, 0.f, 0.f, 0.f}, ga[4] = {0.f, 0.f, 0.f, 0.f};
    if (kk < N && chunk < chunks && key < p.seqlen_k) {
      const uint4_ c = *reinterpret_cast<const uint4_*>(v + key * p.v_seq_stride + chunk * 8);
      const u32 words[4] = {c.x, c.y, c.z, c.w};
      const float w0 = (2 * chunk + 1) / float(2 * chunks),
                  w1 = (2 * chunk + 2) / float(2 * chunks);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        float x0, x1;
        unpack2<bf16>(words[t], x0, x1);
        g1[t] = x0 + x1;
        g2[t] = w0 * x0 + w1 * x1;
        ga[t] = fabsf(x0) + fabsf(x1);
      }
    }
#pragma unroll
    for (int off = 1; off < lanes; off *= 2)
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        g1[t] += __shfl_xor_sync(0xffffffffu, g1[t], off);
        g2[t] += __shfl_xor_sync(0xffffffffu, g2[t], off);
        ga[t] += __shfl_xor_sync(0xffffffffu, ga[t], off);
      }
    if (kk < N && chunk == 0) {
      u32* out = vc + kk * 4 * Pr::v_atoms;
      if constexpr (Pr::row_check) {
        const u32 total = split_hi_lo<P>(g1[0] + g1[1] + g1[2] + g1[3]);
        const float a = ga[0] + ga[1] + ga[2] + ga[3];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          out[t] = total;
          atomicMax(&cta_max[t], __float_as_int(a));
        }
      } else {
        const float one = key < p.seqlen_k ? 1.f : 0.f;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          out[t] = split_hi_lo<P>(g1[t]);
          out[4 + t] = P::pack(Pr::correct ? g2[t] : 0.f, one);
          atomicMax(&cta_max[t], __float_as_int(ga[t]));
        }
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < 4) atomicMax(reinterpret_cast<int*>(vmax) + threadIdx.x, cta_max[threadIdx.x]);

  if constexpr (Pr::k_atoms > 0) {
    // K: one (thread group t, dim) per item. Keys of group t: 8 l + 2t + c, element j = 2 l + c.
    u16* kc = reinterpret_cast<u16*>(base + w.k_offset + head_index * w.k_per_head) +
              static_cast<long long>(n_block) * 8 * Pr::k_atoms * D;
    for (int item = threadIdx.x; item < 4 * D; item += T::threads) {
      const int t = item / D, dim = item % D;
      float c1 = 0.f, c2 = 0.f;
      for (int l = 0; l < N / 8; ++l)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int key = key0 + 8 * l + 2 * t + c;
          if (key < p.seqlen_k) {
            float x, unused;
            unpack2<bf16>(k[key * p.k_seq_stride + dim], x, unused);
            c1 += x;
            c2 += (2 * l + c + 1) / float(2 * (N / 8)) * x;
          }
        }
      const u32 h1 = split_hi_lo<P>(c1);
      kc[(2 * t) * D + dim] = static_cast<u16>(h1);
      kc[(2 * t + 1) * D + dim] = static_cast<u16>(h1 >> 16);
      if constexpr (Pr::correct) {
        const u32 h2 = split_hi_lo<P>(c2);
        kc[(8 + 2 * t) * D + dim] = static_cast<u16>(h2);
        kc[(8 + 2 * t + 1) * D + dim] = static_cast<u16>(h2 >> 16);
      }
    }
    // Norms: sum over each group's keys of |k|_2 (bounds |q . k| for the S threshold).
    __shared__ float norms[4];
    if (threadIdx.x < 4) norms[threadIdx.x] = 0.f;
    __syncthreads();
    for (int kk = threadIdx.x; kk < N; kk += T::threads) {
      const int key = key0 + kk;
      float sq = 0.f;
      if (key < p.seqlen_k) {
        const u32* row = reinterpret_cast<const u32*>(k + key * p.k_seq_stride);
        for (int i = 0; i < D / 2; ++i) {
          float x0, x1;
          unpack2<bf16>(row[i], x0, x1);
          sq += x0 * x0 + x1 * x1;
        }
      }
      atomicAdd(&norms[(kk % 8) / 2], sqrtf(sq));
    }
    __syncthreads();
    float* knorm = reinterpret_cast<float*>(base + w.knorm_offset + head_index * w.knorm_per_head);
    if (threadIdx.x < 4) knorm[n_block * 4 + threadIdx.x] = norms[threadIdx.x];
  }
}

}  // namespace ftattn::protect
