#include "codegen/checksum_atoms.hpp"

namespace ftattn::codegen {

ChecksumAtoms checksum_atoms(Protection p) {
  switch (p) {
    case Protection::flash_abft:
      return {0, 1};
    case Protection::efta_detect:  // its ones column shares the one V atom
      return {1, 1};
    case Protection::efta_correct:
      return {2, 2};
    default:
      return {};
  }
}

Int8ChecksumRows int8_checksum_rows(Protection p) {
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

}  // namespace ftattn::codegen
