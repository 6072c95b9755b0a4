// The content key a compiled kernel is cached under.
#pragma once

#include <string>

#include "ftattn/codegen.hpp"

namespace ftattn::runtime {

// Hash of everything that can change the binary: the generated unit, every embedded template,
// the NVRTC version, the options (arch included) and the ftattn version. Any edit to any of them
// gives a new key, so a stale binary is never found.
std::string cache_key(const codegen::KernelSource& source);

}  // namespace ftattn::runtime
