// The checksum tiles each protection scheme appends in the fused 16-bit kernels
// (protect/checksum.cuh): 8 rows per K atom on every K tile, 8 columns per V atom on every V row.
// One table for the shared-memory size, the checksum workspace and the launch.
#pragma once

#include "ftattn/config.hpp"

namespace ftattn::codegen {

struct ChecksumAtoms {
  int k = 0, v = 0;
};
ChecksumAtoms checksum_atoms(Protection p);

}  // namespace ftattn::codegen
