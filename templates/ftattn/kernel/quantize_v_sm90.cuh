// V's quantisation in one pass on Hopper (sm_90+): v_channel_max and pack_v of quantize_sm80.cuh
// fused, so V is read once instead of twice. A cluster of kQuantizeVCtas CTAs takes one KV head
// (quantize_params.cuh): each keeps its slice of keys in shared memory, folds its channel maxima
// into the head's scales (global atomic max, as v_channel_max), and after a cluster barrier
// (release / acquire: every CTA's maxima are in) packs its slice with the head's scales, as
// pack_v does. The runtime uses it where a slice fits (quantize_v_shared_bytes).
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/kernel/quantize_sm80.cuh"

namespace ftattn {

// Grid: (kQuantizeVCtas, heads, batch), clusters of kQuantizeVCtas along x; kQuantizeVThreads
// threads; quantize_v_shared_bytes(keys_padded, HeadDim) bytes of dynamic shared memory.
// p.scale must be zeroed first.
template <class In, class Q8, int HeadDim>
__device__ __forceinline__ void quantize_v(const QuantizeParams& p) {
  constexpr int kVThreads = kQuantizeVThreads;
  constexpr int chunks = HeadDim / 8;
  static_assert(kVThreads % chunks == 0, "a thread keeps one chunk of 8 channels");
  constexpr int row_bytes = HeadDim * 2 + 16;
  extern __shared__ __align__(16) unsigned char slice[];
  __shared__ u32 amax[HeadDim];
  __shared__ float inv[HeadDim];  // 1 / the head's scale per channel (0 for a zero channel)
  for (int i = threadIdx.x; i < HeadDim; i += kVThreads) amax[i] = 0u;
  __syncthreads();

  const int b = blockIdx.z, h = blockIdx.y;
  const int slice_keys = quantize_v_slice_keys(p.keys_padded);
  const int key0 = blockIdx.x * slice_keys;
  const int keys = max(0, min(slice_keys, p.keys_padded - key0));  // this CTA's, 0 past the end
  const u32 base = static_cast<u32>(__cvta_generic_to_shared(slice));

  // Load: the slice's 16-byte chunks by cp.async, all in flight at once (zeros past seqlen), then
  // each thread's running max over its chunk of channels.
  const int c = threadIdx.x % chunks;
  for (int idx = threadIdx.x; idx < keys * chunks; idx += kVThreads) {
    const int k = idx / chunks, key = key0 + k;
    const uint4_* src = quant::row_of(p, b, h, key < p.seqlen ? key : 0) + idx % chunks;
    sm80::cp_async_16(base + k * row_bytes + (idx % chunks) * 16, src, key < p.seqlen);
  }
  sm80::cp_async_commit();
  sm80::cp_async_wait<0>();
  __syncthreads();
  float run[8] = {};
  for (int k = threadIdx.x / chunks; k < keys; k += kVThreads / chunks) {
    uint4_ v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(base + k * row_bytes + c * 16));
    float x[8];
    quant::unpack8<In>(v, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) run[i] = fmaxf(run[i], fabsf(x[i]));
  }
  // The CTA's maxima, then the head's, as v_channel_max.
  quant::fold_chunk_max<chunks>(run, amax);
  __syncthreads();
  float* scale = p.scale + (static_cast<i64>(b) * p.heads + h) * HeadDim;
  quant::fold_head_scales<Q8, HeadDim, kVThreads>(amax, scale);
  // Every CTA of the cluster has folded in its maxima (release), and sees all of them (acquire).
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
  for (int i = threadIdx.x; i < HeadDim; i += kVThreads) {
    float s;
    asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];\n" : "=f"(s) : "l"(&scale[i]));
    inv[i] = s > 0.f ? 1.f / s : 0.f;
  }
  __syncthreads();

  // Pack, as pack_v: a work item is one chunk of 8 channels for the four keys whose bytes are
  // adjacent in V^T, read from the slice; quads run fastest, so a warp writes 64 contiguous bytes
  // of a V^T row. (16 keys per item and one 16-byte store per channel ran the kernel 7% faster at
  // 4k keys but left most threads idle on short heads: 2% slower end to end at 1k.)
  char* out =
      static_cast<char*>(p.out) + (static_cast<i64>(b) * p.heads + h) * HeadDim * p.keys_padded;
  for (int item = threadIdx.x; item < (keys + 63) / 64 * 16 * chunks; item += kVThreads) {
    const int quad = item % 16, ch = item / 16 % chunks, group64 = item / (16 * chunks);
    const int g0 = group64 * 64 + (quad / 4) * 16, t = quad % 4;  // within the slice
    if (g0 >= keys) continue;
    const int ks[4] = {g0 + 2 * t, g0 + 2 * t + 1, g0 + 2 * t + 8, g0 + 2 * t + 9};
    float x[4][8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint4_ v;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(base + ks[k] * row_bytes + ch * 16));
      quant::unpack8<In>(v, x[k]);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float f = inv[ch * 8 + i];
      *reinterpret_cast<u32*>(out + static_cast<i64>(ch * 8 + i) * p.keys_padded + key0 + g0 +
                              4 * t) =
          Q8::pack4(x[0][i] * f, x[1][i] * f, x[2][i] * f, x[3][i] * f);
    }
  }
}

}  // namespace ftattn
