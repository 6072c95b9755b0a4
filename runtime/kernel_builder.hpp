// Config -> CompiledKernel through the disk cache: a hit never calls NVRTC; a miss compiles and
// publishes the entry; a damaged entry is reported, removed and rebuilt.
#pragma once

#include <memory>

#include "ftattn/kernel.hpp"
#include "runtime/disk_cache.hpp"

namespace ftattn::runtime {

struct BuildOutcome {
  std::shared_ptr<const CompiledKernel> kernel;
  bool compiled = false;       // NVRTC ran
  bool disk_hit = false;       // read from the disk cache
  bool corrupt_entry = false;  // a damaged entry was found and replaced
};

// `disk` may be null (no disk cache). Throws ConfigError or CompileError.
BuildOutcome build_kernel(const KernelConfig& config, DiskCache* disk);

}  // namespace ftattn::runtime
