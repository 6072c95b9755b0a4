// Config -> CompiledKernel through the disk cache: a hit never calls NVRTC; a miss compiles and
// publishes the entry; a damaged or stale entry is reported, removed and rebuilt.
#pragma once

#include <memory>
#include <string>

#include "ftattn/kernel.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/llvm_route.hpp"

namespace ftattn::runtime {

struct BuildOutcome {
  std::shared_ptr<const CompiledKernel> kernel;
  bool compiled = false;       // NVRTC ran
  bool disk_hit = false;       // read from the disk cache
  bool corrupt_entry = false;  // a damaged entry was found and replaced
  bool stale_entry = false;    // an LLVM-route entry another compiler built was found and redone
  bool stored = false;         // compiled and now in the disk cache (ours or an equal entry)
  std::string store_error;     // compiled with a disk cache but not stored: why
};

// What build_kernel does when the kernel compiled but could not be stored: `warn` on stderr
// and carry on (the library: the kernel is good), or only `report` it in store_error for a
// caller that makes it an error (ftattn compile, whose whole point is the stored entry).
enum class StoreFailure { warn, report };

// `disk` may be null (no disk cache). Throws ConfigError or CompileError; a cache that cannot be
// read, locked or written only costs the caching. An LLVM-route hit is served only if it
// records this machine's llvm_compiler(), or if nothing here can compile it (no plugin: then it
// is the only binary there is); otherwise it is compiled again and replaces the entry.
BuildOutcome build_kernel(const KernelConfig& config, DiskCache* disk,
                          StoreFailure on_store_failure = StoreFailure::warn);

// The same with the LLVM route's compiler given, for tests; the NVRTC route ignores it.
BuildOutcome build_kernel(const KernelConfig& config, DiskCache* disk,
                          StoreFailure on_store_failure, const LlvmCompiler& llvm);

}  // namespace ftattn::runtime
