// Plain global-memory stores.
#pragma once

#include "ftattn/arch/sm80/shared.cuh"
#include "ftattn/common/types.cuh"

namespace ftattn::sm80 {

// 16 bytes to a 16-byte aligned address in one store. Assigning a uint4_ through a pointer
// became four 32-bit st.global (the struct is copied member by member), four times the store
// instructions of every epilogue.
__device__ __forceinline__ void st_global_u128(void* ptr, const uint4_& v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(ptr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w));
}

// 8 bytes to an 8-byte aligned address in one store.
__device__ __forceinline__ void st_global_u64(void* ptr, u32 lo, u32 hi) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(ptr), "r"(lo), "r"(hi));
}

// Writes Rows rows staged in shared memory from `staged` (SrcRowBytes apart, ChunksPerRow 16-byte
// chunks each) to global rows first_row.. of `out` (`row_stride` elements apart), when a warp's
// lanes cover whole rows (32 % ChunksPerRow == 0): each lane walks one column down a running
// pointer, its shared addresses differ by constants, and a full tile (valid_rows >= Rows) checks
// no row. A per-chunk row product and bounds check was 8% of an H100's stall samples at d128.
// `Swizzled`: staged row s (counted from `staged`, a multiple of 8 rows in) keeps chunk c at
// c ^ (s % 8) (fwd_sm80.cuh's store_output).
template <int ChunksPerRow, int Rows, u32 SrcRowBytes, bool Swizzled = false>
__device__ __forceinline__ void store_rows(u16* out, i64 row_stride, int first_row, u32 staged,
                                           int valid_rows, int lane) {
  constexpr int rows_per_pass = 32 / ChunksPerRow;
  static_assert(32 % ChunksPerRow == 0 && Rows % rows_per_pass == 0, "lanes must cover whole rows");
  const int r = lane / ChunksPerRow, chunk = lane % ChunksPerRow, col = chunk * 8;
  u16* dst = out + (first_row + r) * row_stride + col;
  const i64 step = rows_per_pass * row_stride;
  const u32 src = staged + r * SrcRowBytes + (Swizzled ? 0 : col * 2);
  constexpr u32 src_step = rows_per_pass * SrcRowBytes;
  auto at = [&](int i) {
    if constexpr (Swizzled)
      return src + i * src_step + (chunk ^ ((r + i * rows_per_pass) % 8)) * 16;
    else
      return src + i * src_step;
  };
  if (valid_rows >= Rows) {
#pragma unroll
    for (int i = 0; i < Rows / rows_per_pass; ++i, dst += step)
      st_global_u128(dst, ld_shared_u128(at(i)));
  } else {
#pragma unroll
    for (int i = 0; i < Rows / rows_per_pass; ++i, dst += step)
      if (r + i * rows_per_pass < valid_rows) st_global_u128(dst, ld_shared_u128(at(i)));
  }
}

}  // namespace ftattn::sm80
