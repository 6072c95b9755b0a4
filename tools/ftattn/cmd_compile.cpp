// ftattn compile: fill the disk cache with one or more kernels.
#include <fmt/format.h>

#include <memory>

#include "runtime/disk_cache.hpp"
#include "tools/ftattn/commands.hpp"
#include "tools/ftattn/config_flags.hpp"

namespace ftattn::cli {
namespace {

int run_compile(const ConfigFlags& flags, const GlobalOptions& global) {
  // Parse every config before compiling any, so a typo in the last one costs nothing.
  const std::vector<KernelConfig> wanted = configs_from_flags(flags);
  Runtime runtime(global.runtime_options());
  std::vector<KernelConfig> configs;
  for (const KernelConfig& c : wanted) configs.push_back(resolve_for_compile(runtime, c));

  const runtime::DiskCache cache(runtime.cache_dir());
  for (const KernelConfig& config : configs) {
    const Runtime::Stats before = runtime.stats();
    const auto kernel = runtime.compile(config);
    const Runtime::Stats after = runtime.stats();
    std::string how;
    if (after.compiles > before.compiles) {
      how = fmt::format("compiled in {:.2f} s", kernel->compile_seconds);
    } else if (after.disk_hits > before.disk_hits) {
      how = "cache hit";
    } else {
      how = "cache hit (named twice)";
    }
    fmt::print("{}: {}\n  {}\n", kernel->name, how, cache.entry_dir(kernel->cache_key).string());
  }
  return 0;
}

}  // namespace

Command add_compile_command(CLI::App& parent, const GlobalOptions& global) {
  auto flags = std::make_shared<ConfigFlags>();
  CLI::App* cmd =
      parent.add_subcommand("compile", "Compile kernels into the disk cache (no GPU needed)");
  add_config_flags(*cmd, *flags, Positional::many);
  return {cmd, [flags, &global] { return run_compile(*flags, global); }};
}

}  // namespace ftattn::cli
