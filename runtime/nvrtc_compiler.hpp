// NVRTC: generated source + embedded templates -> PTX and cubin for one arch.
#pragma once

#include <string>

#include "ftattn/codegen.hpp"
#include "ftattn/kernel.hpp"
#include "runtime/library_file.hpp"

namespace ftattn::runtime {

struct NvrtcOutput {
  std::string ptx;
  std::string cubin;
  std::string log;
  double seconds = 0.0;
};

// Compiles with the embedded templates as in-memory headers, so no CUDA toolkit headers are
// needed at run time. Throws CompileError carrying NVRTC's log verbatim.
NvrtcOutput compile_with_nvrtc(const codegen::KernelSource& source);

// "13.0": part of every cache key.
std::string nvrtc_version();

// The NVRTC library this process loaded: nvrtcVersion() gives only major.minor, and a patch
// update changes the code it emits, so its file is part of every NVRTC cache key too. Looked
// up once per process, so keys stay the same within a run and an installation.
const LibraryFile& nvrtc_library();

// Version and library together, as cache_key() takes them: "13.0 <path> <bytes> <mtime_ns>".
std::string nvrtc_identity();

// Registers, spills, stack and static shared memory of `symbol` from a ptxas -v log.
ResourceUsage parse_ptxas_log(const std::string& log, const std::string& symbol);

}  // namespace ftattn::runtime
