// The width of the wgmma swizzle atoms a Hopper 16-bit tile is stored in, for the host's side of
// its layout (shared-memory size, TMA boxes); sm90::atom_bytes (templates/ftattn/arch/sm90/
// wgmma.cuh) is the kernels' side.
#pragma once

namespace ftattn::codegen {

// 128 bytes where a row is a multiple of 128 bytes, else 64: rows of 192 bytes (head dim 96 in
// 16 bits) are three 64-byte atoms side by side.
constexpr int swizzle_atom_bytes(int row_bytes) { return row_bytes % 128 == 0 ? 128 : 64; }

}  // namespace ftattn::codegen
