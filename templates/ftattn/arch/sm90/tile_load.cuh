// Global -> shared copies of K-major tiles in the wgmma swizzle (cp.async, 16-byte chunks).
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm90/wgmma.cuh"
#include "ftattn/common/types.cuh"

namespace ftattn::sm90 {

// Copies `Rows` rows of `RowBytes` bytes from `gmem` (rows `gmem_stride` bytes apart) into the
// first rows of the swizzled tile of `TileRows` rows at `smem` (1024-byte aligned;
// sm90::tile_offset's layout) with `Threads` threads. A chunk whose row is at or past
// `valid_rows`, or whose first byte is at or past `valid_bytes`, is zero-filled, not read. Issues
// copies only; the caller commits the group. `thread` is the caller's index among the Threads
// (a producer warpgroup's counts from its own first thread; unsigned, as threadIdx.x, so the
// divisions below stay shifts).
template <int Threads, int Rows, int RowBytes, int TileRows = Rows>
__device__ __forceinline__ void load_rows_swizzled(u32 smem, const void* gmem, i64 gmem_stride,
                                                   int valid_rows, int valid_bytes,
                                                   unsigned thread) {
  constexpr int cpr = RowBytes / 16;
  static_assert((Rows * cpr) % Threads == 0, "whole passes of the tile");
  const char* base = static_cast<const char*>(gmem);
  if constexpr (Threads % cpr == 0) {
    // Each thread keeps one chunk column and walks down the rows with one running pointer.
    constexpr int rows_per_pass = Threads / cpr;
    const int r0 = thread / cpr;
    const int chunk = thread % cpr;
    const char* src = base + r0 * gmem_stride + chunk * 16;
    const bool col_valid = chunk * 16 < valid_bytes;
#pragma unroll
    for (int i = 0; i < Rows / rows_per_pass; ++i, src += rows_per_pass * gmem_stride) {
      const int r = r0 + i * rows_per_pass;
      const bool valid = col_valid && r < valid_rows;
      sm80::cp_async_16(smem + tile_offset<RowBytes>(TileRows, r, chunk), valid ? src : base,
                        valid);
    }
  } else {
    // Rows of 3 atoms (head dim 192): a pass covers no whole number of rows, so each chunk
    // finds its own row (Q's tile, copied once per CTA).
#pragma unroll
    for (int i = 0; i < Rows * cpr / Threads; ++i) {
      const int c = i * Threads + thread;
      const int r = c / cpr, chunk = c % cpr;
      const bool valid = chunk * 16 < valid_bytes && r < valid_rows;
      const char* src = base + r * gmem_stride + chunk * 16;
      sm80::cp_async_16(smem + tile_offset<RowBytes>(TileRows, r, chunk), valid ? src : base,
                        valid);
    }
  }
}
// The same with every thread of the CTA among the Threads.
template <int Threads, int Rows, int RowBytes, int TileRows = Rows>
__device__ __forceinline__ void load_rows_swizzled(u32 smem, const void* gmem, i64 gmem_stride,
                                                   int valid_rows, int valid_bytes) {
  load_rows_swizzled<Threads, Rows, RowBytes, TileRows>(smem, gmem, gmem_stride, valid_rows,
                                                        valid_bytes, threadIdx.x);
}

}  // namespace ftattn::sm90
