// Flash-ABFT's V checksums computed by the attention kernel itself (kernel/fwd_ws_sm90.cuh), so
// no prologue kernel reads V before it: the prologue cost 57 us at 8 x 32 x 2k keys, 5-10% of
// the kernel, while the attention CTA waits at its start for Q and K to land anyway.
//
// Every CTA of a KV head needs every key block's checksums; each block's are computed by one CTA
// and shared through the workspace, one flag per (batch, KV head, key block) (protect/
// workspace.cuh; zeroed before each call):
//   0  not computed,  1  claimed by a CTA that needs it and sums it,  2  published (the atoms and
//   maximum are in the workspace, stored before the flag behind a GPU-scope fence).
// The CTA launched r-th among its KV head's CTAs owns block r and sums it with all its warps
// while its Q and first K tile are in flight: blocks are needed in order and CTAs start in order,
// so a block is usually published before a CTA needs it (the runtime asks for at least as many
// CTAs per KV head as key blocks). A CTA that finds a block still unclaimed after a few tries
// (its owner is not running yet, or there is none) claims and sums it itself, so no CTA waits on
// one that is not running: a claimed block is summed by a running CTA that waits for nothing
// until it publishes. An owner and a claimer may both sum a block; they store the same values.
#pragma once

#include "ftattn/common/types.cuh"
#include "ftattn/params.cuh"
#include "ftattn/protect/checks.cuh"

namespace ftattn::protect {

enum : u32 { block_unclaimed = 0, block_claimed = 1, block_ready = 2 };

// Four flags at once (flag 16-byte aligned), acquire: an LDG and an L1 invalidate, where a
// relaxed load and fence.acq_rel would wait for this thread's copies in flight (MEMBAR.ALL).
__device__ __forceinline__ uint4_ load_acquire4(const u32* flag) {
  uint4_ v;
  asm volatile("ld.acquire.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(flag)
               : "memory");
  return v;
}
// True when this call moved the flag from unclaimed to claimed.
__device__ __forceinline__ bool claim(u32* flag) {
  u32 old;
  asm volatile("atom.relaxed.gpu.global.cas.b32 %0, [%1], %2, %3;\n"
               : "=r"(old)
               : "l"(flag), "r"(block_unclaimed), "r"(block_claimed)
               : "memory");
  return old == block_unclaimed;
}
// By one thread after a barrier with the block's writers: their atoms and maximum, then the flag
// (the fence is cumulative over the writes the barrier ordered before it).
__device__ __forceinline__ void publish(u32* flag) {
  asm volatile(
      "fence.acq_rel.gpu;\n"
      "st.relaxed.gpu.global.u32 [%0], %1;\n" ::"l"(flag),
      "r"(static_cast<u32>(block_ready))
      : "memory");
}
// A read that skips L1, which may hold a line from before another CTA's atomics.
__device__ __forceinline__ float load_l2(const float* x) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(x) : "memory");
  return v;
}
// Backs off while a block is not ready.
__device__ __forceinline__ void pause() { asm volatile("nanosleep.u32 256;\n" ::: "memory"); }
// x as the compiler cannot know it: what derives from x is recomputed after this point rather
// than kept in registers across it.
__device__ __forceinline__ void opaque(int& x) { asm volatile("" : "+r"(x)); }

// The key block this CTA owns: its rank in launch order among its KV head's CTAs (x fastest,
// then the query heads of the group), or -1 (no block of that number; recompute lists).
__device__ __forceinline__ int owned_block(const AttentionParams& p, int head, int n_blocks) {
  if (p.tile_count > 0) return -1;
  const int rank = (head % p.group_size) * static_cast<int>(gridDim.x) + blockIdx.x;
  return rank < n_blocks ? rank : -1;
}

// By one thread of a CTA that needs block j's checksums: the end of the run of published blocks
// from j (at most to the end of j's aligned four; past the last block it reads padding, which no
// block asks for), or j itself when j is not ready (after a pause: ask again), or -1 when this
// call claimed j: the caller sums and publishes it. An unclaimed block is claimed only once
// `waited` rounds have passed: its owner is usually about to publish it.
__device__ __forceinline__ int blocks_ready_from(u32* flags, int j, int waited) {
  const uint4_ four = load_acquire4(flags + (j & ~3));
  const u32 state[4] = {four.x, four.y, four.z, four.w};
  int upto = j;
  u32 mine = state[0];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (i == (j & 3)) mine = state[i];
    upto += i >= (j & 3) && upto == (j & ~3) + i && state[i] == block_ready;
  }
  if (upto > j) return upto;
  if (mine == block_unclaimed && waited >= 4 && claim(flags + j)) return -1;
  pause();
  return j;
}

// Flash-ABFT's checksums of key block `block` of one KV head by `Warps` warps (this one `warp`):
// per key, rowsum(V) as a hi + lo pair in each of its atom's four words (what the prologue,
// checksum.cuh, writes), and max over keys of sum |v| into the head's V maxima (atomicMax on the
// bits: sums of |v| are >= 0 and order as ints, a NaN above every number, so it alarms later).
// Each warp takes 16 keys at a time: m16n8k16 MMAs against a ones matrix sum each key's row in
// FP32 with exact products (a row's sum does not depend on which k position holds which column,
// so each lane feeds the MMA the pieces it loaded: pieces t, t + 4, ... of keys g and g + 8), and
// the same MMAs over |V| (sign bits cleared) give sum |v|. All warps at a CTA's start load every
// 16-byte piece of a key at once; the producer warpgroup's fallback (56 registers beside its copy
// loop) one 8-byte piece at a time (Lean).
template <int Bytes>
struct __align__(Bytes) VPiece {
  u32 w[Bytes / 4];
};
template <class T, int Warps, bool Lean>
__device__ __forceinline__ void v_block_checksums(const AttentionParams& p, const u16* v,
                                                  u32* atoms, float* vmax, int block, int warp,
                                                  int lane) {
  using P = typename T::Precision;
  constexpr int D = T::head_dim, N = T::block_n;
  static_assert(T::Protect::v_atoms == 1 && T::Protect::row_check, "Flash-ABFT's one atom");
  static_assert(D % 32 == 0 && N % 16 == 0, "four lanes per key, 16 keys per warp");
  constexpr int kBytes = Lean ? 8 : 16;
  constexpr int kPieces = D * 2 / kBytes / 4;  // pieces of a key per lane
  if (warp >= N / 16) return;                  // more warps than groups of 16 keys
  const int g = lane / 4, t = lane % 4;
  const u32 ones = P::pack(1.f, 1.f);
  int largest = 0;  // max sum |v| of this lane's keys, as int bits
#pragma unroll 1
  for (int group = warp; group < N / 16; group += Warps) {
    const int key[2] = {block * N + group * 16 + g, block * N + group * 16 + g + 8};
    float sum[4] = {0.f, 0.f, 0.f, 0.f}, magnitude[4] = {0.f, 0.f, 0.f, 0.f};
    constexpr int kBatch = Lean ? 1 : kPieces;  // pieces in registers at a time
#pragma unroll(Lean ? 1 : kPieces)
    for (int c0 = 0; c0 < kPieces; c0 += kBatch) {
      VPiece<kBytes> row[2][kBatch];
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
          row[r][i] = {};
          if (key[r] < p.seqlen_k)
            row[r][i] = *reinterpret_cast<const VPiece<kBytes>*>(v + key[r] * p.v_seq_stride +
                                                                 kBytes / 2 * (t + 4 * (c0 + i)));
        }
#pragma unroll
      for (int i = 0; i < kBatch; ++i)
#pragma unroll
        for (int h = 0; h < kBytes / 8; ++h) {  // A: rows g, g + 8, g, g + 8
          u32 a[4] = {row[0][i].w[2 * h], row[1][i].w[2 * h], row[0][i].w[2 * h + 1],
                      row[1][i].w[2 * h + 1]};
          P::mma(sum, a, ones, ones);
#pragma unroll
          for (int x = 0; x < 4; ++x) a[x] &= 0x7fff7fffu;  // |v|
          P::mma(magnitude, a, ones, ones);
        }
    }
    // Every column of the n8 tile is the same sum: row g in sum[0], row g + 8 in sum[2].
    if (t == 0)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const u32 pair = split_hi_lo<P>(sum[2 * r]);
        *reinterpret_cast<uint4_*>(atoms + key[r] * 4) = uint4_{pair, pair, pair, pair};
      }
    largest = max(largest, max(__float_as_int(magnitude[0]), __float_as_int(magnitude[2])));
  }
#pragma unroll
  for (int off = 16; off >= 4; off /= 2) largest = max(largest, __shfl_xor_sync(~0u, largest, off));
  if (lane < 4) atomicMax(reinterpret_cast<int*>(vmax) + lane, largest);
}

}  // namespace ftattn::protect
