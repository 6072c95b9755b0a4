// Config -> CompiledKernel through the disk cache: a hit never calls NVRTC; a miss compiles and
// publishes the entry; a damaged entry is reported, removed and rebuilt.
#pragma once

#include <memory>
#include <string>

#include "ftattn/kernel.hpp"
#include "runtime/disk_cache.hpp"

namespace ftattn::runtime {

struct BuildOutcome {
  std::shared_ptr<const CompiledKernel> kernel;
  bool compiled = false;       // NVRTC ran
  bool disk_hit = false;       // read from the disk cache
  bool corrupt_entry = false;  // a damaged entry was found and replaced
  bool stored = false;         // compiled and now in the disk cache (ours or an equal entry)
  std::string store_error;     // compiled with a disk cache but not stored: why
};

// What build_kernel does when the kernel compiled but could not be stored: `warn` on stderr
// and carry on (the library: the kernel is good), or only `report` it in store_error for a
// caller that makes it an error (ftattn compile, whose whole point is the stored entry).
enum class StoreFailure { warn, report };

// `disk` may be null (no disk cache). Throws ConfigError or CompileError; a cache that cannot be
// read, locked or written only costs the caching.
BuildOutcome build_kernel(const KernelConfig& config, DiskCache* disk,
                          StoreFailure on_store_failure = StoreFailure::warn);

}  // namespace ftattn::runtime
