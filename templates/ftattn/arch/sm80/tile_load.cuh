// Global -> shared tile copies in 16-byte cp.async chunks, for tiles described in bytes (any
// element width). Shared rows are padded by the caller's stride against bank conflicts.
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/common/types.cuh"

namespace ftattn::sm80 {

// Copies `Rows` rows of `RowBytes` bytes (a multiple of 16) from `gmem` (rows `gmem_stride`
// bytes apart) to `smem` (rows `SmemStride` bytes apart) with `Threads` threads. A chunk is
// zero-filled, not read, when its row is at or past `valid_rows` or its first byte is at or past
// `valid_bytes` of the row. Issues copies only; the caller commits the group.
// `thread` is the caller's index among the Threads (a producer warpgroup's counts from its own
// first thread); the overload below passes threadIdx.x.
template <int Threads, int Rows, int RowBytes, int SmemStride>
__device__ __forceinline__ void load_rows(u32 smem, const void* gmem, i64 gmem_stride,
                                          int valid_rows, int valid_bytes, unsigned thread) {
  static_assert(RowBytes % 16 == 0, "rows must be whole 16-byte chunks");
  constexpr int cpr = RowBytes / 16;
  constexpr int chunks = Rows * cpr;
  const char* base = static_cast<const char*>(gmem);
  if constexpr (Threads % cpr == 0) {
    // Each thread keeps one column and walks down the rows: one running pointer, so the
    // compiler has no per-chunk 64-bit addresses to keep live across the main loop.
    constexpr int rows_per_pass = Threads / cpr;
    const int r0 = thread / cpr;
    const int col = (thread % cpr) * 16;
    const char* src = base + r0 * gmem_stride + col;
    const i64 src_step = rows_per_pass * gmem_stride;
    const bool col_valid = col < valid_bytes;
#pragma unroll
    for (int i = 0; i < (chunks + Threads - 1) / Threads; ++i, src += src_step) {
      const int r = r0 + i * rows_per_pass;
      if (chunks % Threads == 0 || r < Rows) {
        const bool valid = col_valid && r < valid_rows;
        cp_async_16(smem + r * SmemStride + col, valid ? src : base, valid);
      }
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < (chunks + Threads - 1) / Threads; ++i) {
    const int c = thread + i * Threads;
    if (chunks % Threads == 0 || c < chunks) {
      const int r = c / cpr;
      const int col = (c % cpr) * 16;
      const bool valid = r < valid_rows && col < valid_bytes;
      cp_async_16(smem + r * SmemStride + col, valid ? base + r * gmem_stride + col : base, valid);
    }
  }
}
// The same with every thread of the CTA among the Threads.
template <int Threads, int Rows, int RowBytes, int SmemStride>
__device__ __forceinline__ void load_rows(u32 smem, const void* gmem, i64 gmem_stride,
                                          int valid_rows, int valid_bytes) {
  load_rows<Threads, Rows, RowBytes, SmemStride>(smem, gmem, gmem_stride, valid_rows, valid_bytes,
                                                 threadIdx.x);
}

}  // namespace ftattn::sm80
