#include "codegen/checksum_atoms.hpp"

namespace ftattn::codegen {

ChecksumAtoms checksum_atoms(Protection p) {
  switch (p) {
    case Protection::flash_abft:
      return {0, 1};
    case Protection::efta_detect:  // its ones column shares the one V atom
      return {1, 1};
    case Protection::efta_correct:  // and its weighted row checksum
      return {2, 1};
    default:
      return {};
  }
}

Q8ChecksumRows q8_checksum_rows(Precision precision, Protection p) {
  if (precision == Precision::fp8_e4m3) {
    if (p == Protection::flash_abft) return {0, 0, 8, 0};
    if (p == Protection::efta_detect) return {0, 0, 8, 24};
    if (p == Protection::efta_correct) return {0, 0, 40, 40};
    return {};
  }
  switch (p) {
    case Protection::flash_abft:
      return {0, 8};
    case Protection::efta_detect:
      return {16, 8};
    case Protection::efta_correct:
      return {40, 48};
    default:
      return {};
  }
}

Q8ChecksumRows q8_checksum_rows(const KernelConfig& config) {
  if (config.precision == Precision::fp8_e4m3 && config.protection == Protection::flash_abft &&
      uses_wgmma(config))
    return {0, 4, 0, 0};
  // int8 efta_correct on the wgmma skeleton: 8 rows of V^T (its channel sums' and weighted sums'
  // digits, protect/int8_checksums.cuh, int8_v_wgmma_rows) and efta_detect's 16 K rows (a failed
  // score column is computed again, not located from weighted rows).
  if (config.precision == Precision::int8 && config.protection == Protection::efta_correct &&
      uses_wgmma(config))
    return {16, 8, 0, 0};
  return q8_checksum_rows(config.precision, config.protection);
}

}  // namespace ftattn::codegen
