// A generated, compiled kernel: everything there is to inspect, with or without a GPU.
#pragma once

#include <string>
#include <vector>

#include "ftattn/config.hpp"

namespace ftattn {

// What ptxas reports for the kernel (parsed from NVRTC's -Xptxas -v log).
struct ResourceUsage {
  int registers = 0;
  int spill_stores = 0;          // bytes
  int spill_loads = 0;           // bytes
  int stack_frame = 0;           // bytes
  int static_shared_bytes = 0;   // declared __shared__ arrays
  int dynamic_shared_bytes = 0;  // asked for at launch (KernelConfig::shared_memory_bytes)
  int threads_per_block = 0;     // 32 * num_warps
  // ptxas's "Potential Performance Loss" notes on this kernel, e.g. "(C7512) ... wgmma.mma_async
  // instructions are serialized due to insufficient register resources".
  std::vector<std::string> performance_notes;
};

struct CompiledKernel {
  KernelConfig config;               // complete
  std::string name;                  // canonical name
  std::string symbol;                // entry point in the cubin
  std::string source;                // the generated instantiation unit
  std::vector<std::string> options;  // NVRTC options
  std::string ptx;
  std::string cubin;        // bytes of the ELF image
  std::string compile_log;  // NVRTC log (ptxas -v output included)
  ResourceUsage resources;
  std::string cache_key;         // content hash the disk cache stores it under
  double compile_seconds = 0.0;  // NVRTC time when it was built
  bool from_disk_cache = false;  // this process loaded it rather than compiling it
};

}  // namespace ftattn
