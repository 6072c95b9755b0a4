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
//                 row sum of V as a checksum column (checked against each row of O at the end)
//                 plus a column of ones, whose accumulator is the row sum of the f16 P: it checks
//                 l, and SNVR's range check LB <= l <= n (LB from per-block maxima) backs it up.
//   efta_correct  Also weighted checksums: for S the strided ones with weights (j + 1) / n over
//                 the thread's j-th element, for O two per row, with weights w_c = (c + 1) /
//                 head_dim over column c and with w_c^2. A failed check locates the element from
//                 the ratio of the discrepancies (for O, both ratios must agree on it) and
//                 rebuilds it from the checksum, for S (before the softmax) and for O (at the
//                 end).
//
// The checksums of a KV head are computed once per call by checksum_prologue() (EFTA's
// "checksum generation", hoisted out of every CTA) into the workspace of protect/workspace.cuh.
// Thresholds are relative to a bound on the sum of absolute contributions (|q| sum|k| for S,
// but efta_correct's 16-bit check follows the scores: protect/checks.cuh, scores_within;
// for O, the values' magnitudes per key block plus B = l * max sum|v| once, fwd_sm80.cuh's
// check_output); see params.cuh and the README for their derivation and defaults.
#pragma once

#include "ftattn/arch/sm80/global.cuh"
#include "ftattn/common/faults.cuh"
#include "ftattn/common/math.cuh"
#include "ftattn/protect/checks.cuh"
#include "ftattn/protect/workspace.cuh"

namespace ftattn::protect {

enum class Scheme { flash_abft, efta_detect, efta_correct };

template <Scheme S>
struct Checksum {
  static constexpr bool enabled = true;
  static constexpr bool correct = S == Scheme::efta_correct;
  static constexpr int k_atoms = S == Scheme::flash_abft ? 0 : (correct ? 2 : 1);
  // One V atom, one 8-wide MMA tile per 16 keys, its column groups (thread group t of a quad
  // holds columns 2t and 2t + 1):
  //   t = 0      rowsum(V) as (hi, lo);
  //   t = 1      the ones column (1, 0);
  //   t = 2      rowsum(V) again, or efta_correct's row sum weighted by the squares,
  //              sum_c w_c^2 V[c] with w_c = (c + 1) / head_dim, as (hi, lo);
  //   t = 3      the ones column again, or efta_correct's weighted row sum sum_c w_c V[c] as
  //              (hi, lo).
  // So each lane reads what it lacks from its quad with one shuffle at the end. efta_correct had
  // per-thread checksums in two atoms, with the weighted one in f16 alone: its rounding (2^-11)
  // moved the located element for flips the check saw, which were then reported corrected and
  // left two elements wrong. Flash-ABFT's wgmma kernels take l from the ones column
  // (fwd_ws_sm90.cuh); on mma.sync, where it changed ptxas's spills at 255 registers and ran
  // 0.96-0.98x causal, l stays the FP32 sum.
  static constexpr int v_atoms = 1;
  // The lanes of this lane's quad that hold the plain checksum, the ones column and the weighted
  // checksums. Every lane of a quad divides by the same copy of l, the one lane 0 checks and
  // reports on: where lanes 2 and 3 took the second copy (t = 3), its faults moved half the row
  // unreported (2% of efta_detect's checksum flips silent on the H200). Flash-ABFT also holds the
  // first copy to the second (detail::check_ones_row_sum).
  __device__ static int plain_lane(int lane) { return correct ? lane & ~3 : lane & ~1; }
  __device__ static int ones_lane(int lane) { return (lane & ~3) | 1; }
  __device__ static int second_ones_lane(int lane) { return (lane & ~3) | 3; }
  __device__ static int squared_lane(int lane) { return (lane & ~3) | 2; }
  __device__ static int weighted_lane(int lane) { return lane | 3; }
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

  // V: four lanes per key, lane i the 16-byte chunks (8 columns each) i, i + 4, ... of the key's
  // row, so a warp's loads are 64-byte runs of eight rows. Columns of thread group t:
  // 8 * nt + 2t + c, its element j = 2 nt + c; every chunk holds two columns of each group. Each
  // lane sums its chunks first and the four lanes' sums meet by two shuffles: with a lane per
  // chunk (16 at head dim 128) efta_correct's twelve sums took four levels of shuffles per key,
  // and its prologue issued in 68% of cycles at 48% of DRAM bandwidth (ncu, H200). max sum|v|
  // per column group meets in registers across a thread's keys, then in shared memory: one
  // shared and one global atomic per group and CTA.
  constexpr int chunks = D / 8;
  constexpr int lanes = 4;
  static_assert(chunks % lanes == 0, "whole chunks per lane at every head dim");
  constexpr int per_lane = chunks / lanes;
  constexpr int keys_per_pass = T::threads / lanes;
  u32* vc = reinterpret_cast<u32*>(base + head_index * w.v_per_head) +
            static_cast<long long>(key0) * 4 * Pr::v_atoms;
  float* vmax = reinterpret_cast<float*>(base + w.vmax_offset + head_index * w.vmax_per_head);
  __shared__ int cta_max[4];  // sums of |v| are >= 0: their bits order as ints
  if (threadIdx.x < 4) cta_max[threadIdx.x] = 0;
  __syncthreads();
  const int lane_in_key = threadIdx.x % lanes;
  // Every pass's chunks are loaded before the first is reduced: the shuffles of one pass do not
  // wait on the next pass's loads (Flash-ABFT's prologue, V alone, ran at 72% of DRAM bandwidth).
  constexpr int passes = (N + keys_per_pass - 1) / keys_per_pass;
  uint4_ loaded[passes][per_lane];
#pragma unroll
  for (int pass = 0; pass < passes; ++pass) {
    const int kk = pass * keys_per_pass + static_cast<int>(threadIdx.x) / lanes;
    const int key = key0 + kk;
    const bool live = kk < N && key < p.seqlen_k;
#pragma unroll
    for (int j = 0; j < per_lane; ++j)
      loaded[pass][j] = live ? *reinterpret_cast<const uint4_*>(v + key * p.v_seq_stride +
                                                                (j * lanes + lane_in_key) * 8)
                             : uint4_{0u, 0u, 0u, 0u};
  }
  float abs_max[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int pass = 0; pass < passes; ++pass) {  // the same trip count in every lane
    const int kk = pass * keys_per_pass + static_cast<int>(threadIdx.x) / lanes;
    const int key = key0 + kk;
    // The key's row sums: plain, weighted by column and by its square (efta_correct) and of
    // magnitudes. A lane sums its chunks, then the four lanes meet by shuffles.
    float g1 = 0.f, g2 = 0.f, g3 = 0.f, ga = 0.f;
    // Chunks past the keys were loaded as zeros: they add nothing.
#pragma unroll
    for (int j = 0; j < per_lane; ++j) {
      const int chunk = j * lanes + lane_in_key;
      const uint4_ c = loaded[pass][j];
      const u32 words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        float x0, x1;
        unpack2<bf16>(words[t], x0, x1);
        g1 += x0 + x1;
        if constexpr (Pr::correct) {
          const int column = chunk * 8 + 2 * t;  // protect::output_weight's
          const float w0 = output_weight(column, D), w1 = output_weight(column + 1, D);
          g2 += w0 * x0 + w1 * x1;
          g3 += w0 * w0 * x0 + w1 * w1 * x1;
        }
        ga += fabsf(x0) + fabsf(x1);
      }
    }
#pragma unroll
    for (int off = 1; off < lanes; off *= 2) {
      g1 += __shfl_xor_sync(0xffffffffu, g1, off);
      if constexpr (Pr::correct) {
        g2 += __shfl_xor_sync(0xffffffffu, g2, off);
        g3 += __shfl_xor_sync(0xffffffffu, g3, off);
      }
      ga += __shfl_xor_sync(0xffffffffu, ga, off);
    }
    if (kk < N && lane_in_key == 0) {
      u32* out = vc + kk * 4 * Pr::v_atoms;
      const u32 total = split_hi_lo<P>(g1), ones = P::pack(key < p.seqlen_k ? 1.f : 0.f, 0.f);
      out[0] = total;
      out[1] = ones;
      out[2] = Pr::correct ? split_hi_lo<P>(g3) : total;
      out[3] = Pr::correct ? split_hi_lo<P>(g2) : ones;
#pragma unroll
      for (int t = 0; t < 4; ++t) abs_max[t] = fmaxf(abs_max[t], ga);
    }
  }
  if (lane_in_key == 0)
#pragma unroll
    for (int t = 0; t < 4; ++t) atomicMax(&cta_max[t], __float_as_int(abs_max[t]));
  __syncthreads();
  if (threadIdx.x < 4) atomicMax(reinterpret_cast<int*>(vmax) + threadIdx.x, cta_max[threadIdx.x]);

  if constexpr (Pr::k_atoms > 0) {
    // K: one item per (thread group t, 16-byte chunk of a key row), the group's `k_lanes` items
    // side by side (padded to a power of two: head dims 96 and 192 have 12 and 24 chunks), so a
    // warp's loads are whole rows. Keys of group t: 8 l + 2t + c, element j = 2 l + c. The same
    // pass sums each key's |k|^2 (its chunks meet by shuffles) for the norms: the sum over group
    // t's keys of |k|_2 bounds |q . k| for the S threshold.
    u16* kc = reinterpret_cast<u16*>(base + w.k_offset + head_index * w.k_per_head) +
              static_cast<long long>(n_block) * 8 * Pr::k_atoms * D;
    float* knorm = reinterpret_cast<float*>(base + w.knorm_offset + head_index * w.knorm_per_head);
    constexpr int k_lanes = chunks <= 4 ? 4 : chunks <= 8 ? 8 : chunks <= 16 ? 16 : 32;
    constexpr int items = 4 * k_lanes;
    // Where the CTA has more threads than items, the block's N / 8 key rows l are split into
    // `parts` slices, one per set of `items` threads, and the partial sums meet in shared memory:
    // one item per thread walked all 2 N / 8 of its keys in turn, a quarter of the threads busy
    // at head dim 128 (the prologue then took longer than its read of K and V).
    constexpr int by_threads = T::threads / items;
    constexpr int parts_wanted = by_threads >= 4 ? 4 : by_threads >= 2 ? 2 : 1;
    constexpr int parts = (N / 8) % parts_wanted == 0 ? parts_wanted : 1;
    constexpr int slice = (N / 8) / parts;
    constexpr int partial_floats = parts > 1 ? (parts - 1) * items * 17 : 1;
    __shared__ float partials[partial_floats];  // per later part and item: c1[8], c2[8], norm
    for (int first = 0; first < items * parts; first += T::threads) {  // the same trip count
      const int slot = first + static_cast<int>(threadIdx.x);
      const int item = slot % items, part = slot / items;
      const int t = item / k_lanes, chunk = item % k_lanes;
      const bool live = part < parts && chunk < chunks;
      float c1[8], c2[8], norm = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) c1[i] = c2[i] = 0.f;
      // A batch of the thread's keys is loaded before any is summed, keys past the end as zeros
      // (they add nothing): under a branch per key each load waited for the one before, eight
      // round trips to memory in turn at head dim 128.
      // Eight keys a batch, or the most that divides a ragged block's share (48, 80, 112 keys).
      constexpr int keys = 2 * slice, batch = keys < 8        ? keys
                                              : keys % 8 == 0 ? 8
                                              : keys % 4 == 0 ? 4
                                                              : 2;
      static_assert(keys % batch == 0, "whole batches of keys");
#pragma unroll
      for (int b0 = 0; b0 < keys; b0 += batch) {
        uint4_ rows[batch];
#pragma unroll
        for (int b = 0; b < batch; ++b) {
          const int l = part * slice + (b0 + b) / 2;
          const int key = key0 + 8 * l + 2 * t + (b0 + b) % 2;
          rows[b] = live && key < p.seqlen_k
                        ? *reinterpret_cast<const uint4_*>(k + key * p.k_seq_stride + chunk * 8)
                        : uint4_{0u, 0u, 0u, 0u};
        }
#pragma unroll
        for (int b = 0; b < batch; ++b) {
          const int l = part * slice + (b0 + b) / 2, c = (b0 + b) % 2;
          const u32 words[4] = {rows[b].x, rows[b].y, rows[b].z, rows[b].w};
          const float weight = (2 * l + c + 1) / float(2 * (N / 8));
          float sq = 0.f;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            float x0, x1;
            unpack2<bf16>(words[i], x0, x1);
            c1[2 * i] += x0;
            c1[2 * i + 1] += x1;
            c2[2 * i] += weight * x0;
            c2[2 * i + 1] += weight * x1;
            sq += x0 * x0 + x1 * x1;
          }
#pragma unroll
          for (int off = 1; off < k_lanes; off *= 2) sq += __shfl_xor_sync(0xffffffffu, sq, off);
          norm += sqrtf(sq);
        }
      }
      if constexpr (parts > 1) {
        float* mine = partials + ((part - 1) * items + item) * 17;
        if (part > 0 && part < parts) {
#pragma unroll
          for (int i = 0; i < 8; ++i) mine[i] = c1[i], mine[8 + i] = c2[i];
          mine[16] = norm;
        }
        __syncthreads();
        if (part == 0)
#pragma unroll 1
          for (int q = 1; q < parts; ++q) {
            const float* other = partials + ((q - 1) * items + item) * 17;
#pragma unroll
            for (int i = 0; i < 8; ++i) c1[i] += other[i], c2[i] += other[8 + i];
            norm += other[16];
          }
      }
      if (live && part == 0) {
        // Rows 2t and 2t + 1 (hi and lo) of each checksum, 8 dims as one 16-byte store each.
        auto store = [&](const float(&x)[8], int row) {
          u32 hi[4], lo[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const u32 a = split_hi_lo<P>(x[2 * i]), b = split_hi_lo<P>(x[2 * i + 1]);
            hi[i] = (a & 0xffffu) | (b << 16);
            lo[i] = (a >> 16) | (b & 0xffff0000u);
          }
          sm80::st_global_u128(kc + row * D + chunk * 8, uint4_{hi[0], hi[1], hi[2], hi[3]});
          sm80::st_global_u128(kc + (row + 1) * D + chunk * 8, uint4_{lo[0], lo[1], lo[2], lo[3]});
        };
        store(c1, 2 * t);
        if constexpr (Pr::correct) store(c2, 8 + 2 * t);
      }
      if (part == 0 && item < items && chunk == 0) knorm[n_block * 4 + t] = norm;
    }
  }
}

}  // namespace ftattn::protect
