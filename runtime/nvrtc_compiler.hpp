// NVRTC: generated source + embedded templates -> PTX and cubin for one arch.
#pragma once

#include <string>

#include "ftattn/codegen.hpp"
#include "ftattn/kernel.hpp"

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

// Registers, spills, stack and static shared memory of `symbol` from a ptxas -v log.
ResourceUsage parse_ptxas_log(const std::string& log, const std::string& symbol);

}  // namespace ftattn::runtime
