// The checksum tiles each protection scheme appends in the fused 16-bit kernels
// (protect/checksum.cuh): 8 rows per K atom on every K tile, 8 columns per V atom on every V row.
// One table for the shared-memory size, the checksum workspace and the launch; the int8 rows
// below likewise.
#pragma once

#include "ftattn/config.hpp"

namespace ftattn::codegen {

struct ChecksumAtoms {
  int k = 0, v = 0;
};
ChecksumAtoms checksum_atoms(Protection p);

// The int8 skeleton's checksum rows (protect/int8_checksums.cuh): rows of head_dim bytes appended
// to every K block, rows of block_n bytes appended to every V^T tile.
struct Int8ChecksumRows {
  int k = 0, v = 0;
};
Int8ChecksumRows int8_checksum_rows(Protection p);

}  // namespace ftattn::codegen
