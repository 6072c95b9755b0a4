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

// The 8-bit skeleton's checksum rows: rows of head_dim bytes (int8 digits,
// protect/int8_checksums.cuh) or f16 values (fp8, protect/fp8_checksums.cuh) appended to every K
// block, rows of block_n bytes or f16 values appended to every V^T tile.
struct Q8ChecksumRows {
  int k = 0, v = 0, v16 = 0, k16 = 0;  // byte rows and f16 rows, of K blocks and of V^T
  // Bytes of V^T checksum rows per KV head: the byte rows, then the f16 rows.
  long long v_bytes(int keys_padded) const { return (v + 2LL * v16) * keys_padded; }
  // Bytes of K checksum rows per KV head and key block.
  long long k_bytes(int head_dim) const { return (k + 2LL * k16) * head_dim; }
};
// The 8-bit mma.sync skeleton's (kernel/fwd_q8_sm80.cuh).
Q8ChecksumRows q8_checksum_rows(Precision precision, Protection p);
// The rows `config`'s kernel reads: fp8 Flash-ABFT on the wgmma skeleton takes four E4M3 byte
// rows instead of f16 ones (protect/fp8_checksums.cuh, fp8_v_digit_rows), int8 efta_correct
// there 8 V^T rows of its own (int8_v_wgmma_rows) and efta_detect's K rows; the rest as above.
Q8ChecksumRows q8_checksum_rows(const KernelConfig& config);

}  // namespace ftattn::codegen
