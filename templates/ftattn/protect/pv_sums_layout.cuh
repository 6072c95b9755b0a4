// Layout of Flash-ABFT's per-key V row sums where the warp-specialised Hopper kernel forms the
// checksum on the CUDA cores (protect/pv_checksum_sm90.cuh): the prologue writes them, per key
// block, into the workspace's V region in this order, and the producer copies each block's
// floats as they are into the area after the V tile. Plain C++: host tests check it.
//
// In floats: key k = 8 nt + 2 t + c of the block at thread group t's slot
// t * group_stride + 2 nt + c, so each thread of a quad reads the sums of its own keys in GEMM
// II's order (n8 tile nt, column c) as consecutive floats, 16 bytes at a time. The stride pads
// each group by 4 floats, so the four groups' loads fall on different banks.
#pragma once

namespace ftattn::protect {

inline constexpr int pv_sums_group_stride(int block_n) { return block_n / 4 + 4; }
inline constexpr int pv_sum_slot(int key, int block_n) {
  return ((key % 8) / 2) * pv_sums_group_stride(block_n) + (key / 8) * 2 + key % 2;
}
// Floats per key block (workspace and shared memory alike).
inline constexpr int pv_sums_floats(int block_n) { return 4 * pv_sums_group_stride(block_n); }
// The area's bytes per V stage, kept to a whole swizzle period.
inline constexpr int kPvSumsBytes = 1024;
static_assert(4 * pv_sums_floats(128) <= kPvSumsBytes, "128 keys' sums in the area");
// The workspace's V region holds 16 bytes per key (checksum_workspace, one V atom): room for a
// block's floats.
static_assert(4 * pv_sums_floats(64) <= 16 * 64 && 4 * pv_sums_floats(128) <= 16 * 128);

}  // namespace ftattn::protect
