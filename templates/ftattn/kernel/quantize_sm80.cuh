// Quantisation kernels: f16/bf16 Q, K, V -> the 8-bit operands and scales of the int8 and
// fp8_e4m3 kernels (layout: params.cuh). Symmetric, scale = max |x| / range (a zero row or
// channel gets scale 0 and zeros), round to nearest even.
//   quantize_rows:  Q and K, a scale per token. One row per group of head_dim / 8 lanes.
//   quantize_key_blocks: K of fp8_e4m3, one scale per 64 keys (written for each of its keys), so
//                   that the Hopper skeleton dequantises a score in the exponent's FMA.
//   v_channel_max:  V, max |x| / range per channel, combined across CTAs with an atomic max.
//   pack_v:         V quantised with those scales, written transposed with the key permutation
//                   of fwd_q8_sm80.cuh, keys past the end as 0.
#pragma once

#include "ftattn/arch/sm80/global.cuh"
#include "ftattn/common/types.cuh"
#include "ftattn/quantize_params.cuh"

namespace ftattn {

namespace quant {

// 16-bit inputs -> float.
struct F16In {
  __device__ __forceinline__ static float to_float(u32 bits16) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(bits16)));
    return f;
  }
};
struct BF16In {
  __device__ __forceinline__ static float to_float(u32 bits16) {
    return __int_as_float(static_cast<int>(bits16 << 16));
  }
};

template <class In>
__device__ __forceinline__ void unpack8(const uint4_& v, float (&x)[8]) {
  const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = In::to_float(w[i] & 0xffffu);
    x[2 * i + 1] = In::to_float(w[i] >> 16);
  }
}

// Eight values times `inv` (range / max |x|) as 8-bit operands, two registers, x[0] lowest.
template <class Q8>
__device__ __forceinline__ void pack8(const float (&x)[8], float inv, u32 (&w)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i)
    w[i] = Q8::pack4(x[4 * i] * inv, x[4 * i + 1] * inv, x[4 * i + 2] * inv, x[4 * i + 3] * inv);
}

// Non-negative floats order like their bit patterns, so max can run on unsigned ints.
__device__ __forceinline__ void atomic_max_shared(u32 addr, float v) {
  asm volatile("atom.shared.max.u32 _, [%0], %1;" ::"r"(addr), "r"(__float_as_uint(v)));
}
__device__ __forceinline__ void atomic_max_global(float* p, float v) {
  asm volatile("red.global.max.u32 [%0], %1;" ::"l"(p), "r"(__float_as_uint(v)));
}

__device__ __forceinline__ const uint4_* row_of(const QuantizeParams& p, int b, int h, int s) {
  return reinterpret_cast<const uint4_*>(static_cast<const u16*>(p.in) + b * p.in_batch_stride +
                                         h * p.in_head_stride + s * p.in_seq_stride);
}

// V's channel maxima. Each thread's running maxima of its chunk of 8 channels (the chunk
// threadIdx.x % chunks, so every lane with that index has the same one) into amax (shared, the
// floats' bits): lanes of a chunk combine by shuffles, one of them takes the shared atomic.
template <int chunks>
__device__ __forceinline__ void fold_chunk_max(float (&run)[8], u32* amax) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int off = chunks; off < 32; off *= 2)
      run[i] = fmaxf(run[i], __shfl_xor_sync(0xffffffffu, run[i], off));
    if (lane < chunks)
      atomic_max_shared(
          static_cast<u32>(__cvta_generic_to_shared(&amax[(threadIdx.x % chunks) * 8 + i])),
          run[i]);
  }
}
// Then, once the CTA has synced, its maxima into the head's scales (max / range, a global atomic
// max: p.scale starts at 0) by `Threads` threads.
template <class Q8, int HeadDim, int Threads>
__device__ __forceinline__ void fold_head_scales(const u32* amax, float* scale) {
  for (int i = threadIdx.x; i < HeadDim; i += Threads)
    atomic_max_global(&scale[i], __uint_as_float(amax[i]) / Q8::range);
}

// Byte position of key `k` (0..15) within its group of 16 in a V^T row.
__device__ __forceinline__ int permuted_key(int k) {
  return 4 * ((k % 8) / 2) + 2 * (k / 8) + (k % 2);
}

}  // namespace quant

// Grid: (ceil(scale_seq / rows per CTA), heads, batch); 128 threads. The head and batch come from
// the grid: a flat row index split by runtime divisions took two integer divisions per thread
// (their conversions on the special-function pipe), which with the rounding's conversions made
// the pass pipe-bound rather than memory-bound (ncu, H200: 70 us, 57% of DRAM at 8 x 32 x 2k).
template <class In, class Q8, int HeadDim>
__device__ __forceinline__ void quantize_rows(const QuantizeParams& p) {
  constexpr int chunks = HeadDim / 8;  // 8 elements (16 bytes) per lane
  constexpr int group = chunks <= 4 ? 4 : chunks <= 8 ? 8 : chunks <= 16 ? 16 : 32;
  constexpr int rows_per_cta = 128 / group;
  const int c = threadIdx.x % group;
  const int s = static_cast<int>(blockIdx.x) * rows_per_cta + static_cast<int>(threadIdx.x) / group;
  const int h = blockIdx.y, b = blockIdx.z;
  const i64 bh = static_cast<i64>(b) * p.heads + h;
  const bool active = s < p.seqlen && c < chunks;
  float x[8] = {};
  float amax = 0.f;
  if (active) {
    quant::unpack8<In>(quant::row_of(p, b, h, s)[c], x);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(x[i]));
  }
#pragma unroll
  for (int off = group / 2; off > 0; off /= 2)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  if (s >= p.scale_seq) return;
  const float inv = amax > 0.f ? Q8::range / amax : 0.f;
  if (active) {
    u32 w[2];
    quant::pack8<Q8>(x, inv, w);
    sm80::st_global_u64(static_cast<char*>(p.out) + (bh * p.seqlen + s) * HeadDim + c * 8, w[0],
                        w[1]);
  }
  if (c == 0) p.scale[bh * p.scale_seq + s] = amax / Q8::range;
}

// Grid: (ceil(scale_seq / 64), heads, batch); 128 threads. One scale per 64 keys: max |x| over
// the block (E4M3 keeps 3 mantissa bits from 2^-6 of its range down, so a token far below the
// block's largest loses nothing that per-token scales would keep, unlike int8).
template <class In, class Q8, int HeadDim>
__device__ __forceinline__ void quantize_key_blocks(const QuantizeParams& p) {
  constexpr int chunks = HeadDim / 8;
  constexpr int per_thread = (64 * chunks + 127) / 128;  // 16-byte chunks, kept in registers
  __shared__ u32 block_max;
  if (threadIdx.x == 0) block_max = 0u;
  __syncthreads();
  const int b = blockIdx.z, h = blockIdx.y, key0 = blockIdx.x * 64;
  uint4_ raw[per_thread];
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < per_thread; ++j) {
    const int idx = threadIdx.x + 128 * j;
    const int key = key0 + idx / chunks;
    raw[j] = uint4_{0u, 0u, 0u, 0u};
    if (idx < 64 * chunks && key < p.seqlen) raw[j] = quant::row_of(p, b, h, key)[idx % chunks];
    float x[8];
    quant::unpack8<In>(raw[j], x);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(x[i]));
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  if (threadIdx.x % 32 == 0)
    quant::atomic_max_shared(static_cast<u32>(__cvta_generic_to_shared(&block_max)), amax);
  __syncthreads();
  amax = __uint_as_float(block_max);
  const float inv = amax > 0.f ? Q8::range / amax : 0.f;
  const i64 bh = static_cast<i64>(b) * p.heads + h;
#pragma unroll
  for (int j = 0; j < per_thread; ++j) {
    const int idx = threadIdx.x + 128 * j;
    const int key = key0 + idx / chunks, c = idx % chunks;
    if (idx < 64 * chunks && key < p.seqlen) {
      float x[8];
      quant::unpack8<In>(raw[j], x);
      u32 w[2];
      quant::pack8<Q8>(x, inv, w);
      sm80::st_global_u64(static_cast<char*>(p.out) + (bh * p.seqlen + key) * HeadDim + c * 8, w[0],
                          w[1]);
    }
  }
  for (int key = key0 + threadIdx.x; key < min(key0 + 64, p.scale_seq); key += 128)
    p.scale[bh * p.scale_seq + key] = amax / Q8::range;
}

// Grid: (ceil(seqlen / 64), heads, batch); 128 threads. p.scale must be zeroed first. Where
// 128 is a multiple of head_dim / 8, a thread keeps one chunk of 8 channels for all its keys: a
// running max in registers, then lanes with the same chunk combine by shuffles and one of them
// takes the shared atomic (an atomic per element made this kernel bank-conflict bound).
template <class In, class Q8, int HeadDim>
__device__ __forceinline__ void v_channel_max(const QuantizeParams& p) {
  constexpr int chunks = HeadDim / 8;
  constexpr bool fixed_chunk = 128 % chunks == 0;
  __shared__ u32 amax[HeadDim];
  for (int i = threadIdx.x; i < HeadDim; i += 128) amax[i] = 0u;
  __syncthreads();
  const int b = blockIdx.z, h = blockIdx.y, key0 = blockIdx.x * 64;
  auto shared_max = [&](int channel, float v) {
    quant::atomic_max_shared(static_cast<u32>(__cvta_generic_to_shared(&amax[channel])), v);
  };
  float run[8] = {};
  for (int idx = threadIdx.x; idx < 64 * chunks; idx += 128) {
    const int key = key0 + idx / chunks, c = idx % chunks;
    if (key < p.seqlen) {
      float x[8];
      quant::unpack8<In>(quant::row_of(p, b, h, key)[c], x);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if constexpr (fixed_chunk)
          run[i] = fmaxf(run[i], fabsf(x[i]));
        else
          shared_max(c * 8 + i, fabsf(x[i]));
      }
    }
  }
  if constexpr (fixed_chunk) quant::fold_chunk_max<chunks>(run, amax);
  __syncthreads();
  quant::fold_head_scales<Q8, HeadDim, 128>(
      amax, p.scale + (static_cast<i64>(b) * p.heads + h) * HeadDim);
}

// Grid: (keys_padded / 64 rounded up, heads, batch); 128 threads. A work item is one chunk of 8
// channels for the four keys whose bytes are adjacent in V^T (keys 2t, 2t + 1, 2t + 8, 2t + 9 of
// a group of 16 sit at bytes 4t..4t + 3): it reads four 16-byte chunks and writes a 32-bit word
// per channel. Items run quads fastest, so a warp writes 64 contiguous bytes of a V^T row and
// reads whole 32-byte sectors. The channels' reciprocals are taken once per CTA, into shared
// memory, instead of eight IEEE divisions per item (a reciprocal, its refinement and a
// slow-path check each): 4-6% off the pass on an H200.
template <class In, class Q8, int HeadDim>
__device__ __forceinline__ void pack_v(const QuantizeParams& p) {
  constexpr int chunks = HeadDim / 8;
  const int b = blockIdx.z, h = blockIdx.y, key0 = blockIdx.x * 64;
  const float* scale = p.scale + (static_cast<i64>(b) * p.heads + h) * HeadDim;
  __shared__ float inverse[HeadDim];  // 1 / scale per channel, 0 for a zero channel
  for (int i = threadIdx.x; i < HeadDim; i += 128) {
    const float s = scale[i];
    inverse[i] = s > 0.f ? 1.f / s : 0.f;
  }
  __syncthreads();
  char* out =
      static_cast<char*>(p.out) + (static_cast<i64>(b) * p.heads + h) * HeadDim * p.keys_padded;
  for (int item = threadIdx.x; item < 16 * chunks; item += 128) {
    const int quad = item % 16, c = item / 16;
    const int group0 = key0 + (quad / 4) * 16, t = quad % 4;
    if (group0 >= p.keys_padded) continue;
    const int keys[4] = {group0 + 2 * t, group0 + 2 * t + 1, group0 + 2 * t + 8,
                         group0 + 2 * t + 9};
    float x[4][8] = {};
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (keys[k] < p.seqlen) quant::unpack8<In>(quant::row_of(p, b, h, keys[k])[c], x[k]);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float inv = inverse[c * 8 + i];
      *reinterpret_cast<u32*>(out + static_cast<i64>(c * 8 + i) * p.keys_padded + group0 + 4 * t) =
          Q8::pack4(x[0][i] * inv, x[1][i] * inv, x[2][i] * inv, x[3][i] * inv);
    }
  }
}

}  // namespace ftattn
