// Layout of the row sums area after each V stage in the warp-specialised Hopper kernel
// (protect/v_sums_sm90.cuh). Plain C++: host tests check it, codegen sizes the stage with it.
//
// In floats: key k = 8 nt + 2 t + c of the block at thread group t's slot
// t * (block_n / 4) + 2 nt + c, so each thread of a quad reads the sums of its own keys in GEMM
// II's order (n8 tile nt, column c) as consecutive floats, 16 bytes at a time; then each of the
// four producer warps' largest sum |v|.
#pragma once

namespace ftattn::protect {

inline constexpr int v_sum_slot(int key, int block_n) {
  return ((key % 8) / 2) * (block_n / 4) + (key / 8) * 2 + key % 2;
}
inline constexpr int v_bound_slot(int block_n, int warp) { return block_n + warp; }
// The area's bytes per V stage: up to 128 * 4 + 16, kept to a whole swizzle period.
inline constexpr int kVSumsBytes = 1024;
static_assert(4 * v_bound_slot(128, 3) + 4 <= kVSumsBytes, "128 sums and 4 bounds");

}  // namespace ftattn::protect
