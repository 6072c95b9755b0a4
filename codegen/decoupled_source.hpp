// Source of the decoupled baseline (Protection::decoupled): one unit with its three kernels,
// "<symbol>" (scores GEMM), "decoupled_softmax_<symbol>" and "decoupled_output_<symbol>" (output
// GEMM; prefixed, not suffixed, so that ptxas log lookups by symbol find the scores GEMM only).
#pragma once

#include <string>

#include "ftattn/config.hpp"

namespace ftattn::codegen {

// Tiles of the three kernels; the code generator and the launcher read the same numbers.
struct DecoupledTiles {
  // scores GEMM: 128 x 128 tiles of S, 8 warps as 4 (rows) x 2 (keys), 32 rows x 64 keys each.
  static constexpr int scores_m = 128, scores_n = 128, scores_threads = 256;
  static constexpr int k_step = 32;       // both GEMMs
  static constexpr int stages = 3;        // cp.async buffers of both GEMMs
  static constexpr int softmax_rows = 4;  // rows per softmax CTA, one warp each
  static constexpr int row_pad = 64;      // S and P rows are padded to a multiple of this
  // output GEMM: a CTA holds all head_dim columns of its rows, so P is read once. Warps of 32
  // rows x output_warp_n columns (the checksum group: output_warp_n / 8 strided terms).
  int output_warp_n = 64;
  int output_warps_n = 2;
  int output_warps_m = 4;
  int output_m() const { return output_warps_m * 32; }
  int output_threads() const { return output_warps_m * output_warps_n * 32; }
  // Dynamic shared memory of the two GEMMs (3 stages of A and B tiles, rows padded by 8).
  int scores_smem_bytes() const;
  int output_smem_bytes(int head_dim) const;
};
DecoupledTiles decoupled_tiles(int head_dim);

// The unit for a validated decoupled `config`.
std::string decoupled_source(const KernelConfig& config, const std::string& name,
                             const std::string& symbol);

}  // namespace ftattn::codegen
