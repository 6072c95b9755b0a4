// Digests of disassembled SASS (cuobjdump -sass or nvdisasm output), per function: the
// instructions with their addresses, encodings, comments and spacing stripped, counted and
// hashed, so that two builds' kernels can be compared for identical machine code (`ftattn
// inspect --sass-digest`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ftattn {

struct SassFunction {
  std::string name;
  int instructions = 0;
  std::string hash;  // 32 hex digits over the normalised instructions, in order
};

// Functions in the order the text lists them; instructions outside any function are ignored.
std::vector<SassFunction> digest_sass(std::string_view text);

}  // namespace ftattn
