// Inspecting a generated kernel: source, resources and PTX, with no GPU needed.
//   ./example_inspect_kernel
#include <cstdio>
#include <string>

#include "ftattn/ftattn.hpp"

int main() try {
  ftattn::KernelConfig config;
  config.head_dim = 128;
  config.precision = ftattn::Precision::f16;
  config.mask = ftattn::Mask::causal;
  config.arch = ftattn::Arch::parse("sm_90a");  // compile for a GPU this machine need not have

  ftattn::Runtime rt;
  const auto kernel = rt.compile(config);  // open knobs get defaults; cached on disk
  const ftattn::ResourceUsage& r = kernel->resources;
  std::printf("kernel     %s\n", kernel->name.c_str());
  std::printf("cache key  %s (%s)\n", kernel->cache_key.c_str(),
              kernel->from_disk_cache ? "from disk cache" : "compiled now");
  std::printf("registers  %d, spills %d/%d bytes, shared memory %d bytes, %d threads\n",
              r.registers, r.spill_stores, r.spill_loads, r.dynamic_shared_bytes,
              r.threads_per_block);
  std::printf("--- generated source ---\n%s", kernel->source.c_str());
  // Hopper's kernels issue warpgroup MMAs (wgmma), the others warp MMAs (mma.sync).
  auto count = [&](const char* what) {
    size_t n = 0;
    for (size_t at = kernel->ptx.find(what); at != std::string::npos;
         at = kernel->ptx.find(what, at + 1))
      ++n;
    return n;
  };
  std::printf("--- PTX: %zu bytes, %zu wgmma.mma_async and %zu mma.sync instructions ---\n",
              kernel->ptx.size(), count("wgmma.mma_async"), count("mma.sync"));
  return 0;
} catch (const ftattn::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}
