// The content key a compiled kernel is cached under.
#pragma once

#include <string>

#include "ftattn/codegen.hpp"

namespace ftattn::runtime {

// Hash of everything that can change the binary: the generated unit, every embedded template,
// the NVRTC version and library file (nvrtc_identity()), the options (arch included) and the
// ftattn version. Any edit to any of them gives a new key, so a stale binary is never found.
// LLVM-route keys hold what this build fixes (its LLVM version, the passes' hash, the toolkit,
// the pass list) but not the clang loaded at run time, which a machine without LLVM cannot know
// and must still find the entry: entries record that, and build_kernel checks it on a hit.
std::string cache_key(const codegen::KernelSource& source);

// The same with the NVRTC identity given, for tests; the LLVM route ignores it.
std::string cache_key(const codegen::KernelSource& source, const std::string& nvrtc);

}  // namespace ftattn::runtime
