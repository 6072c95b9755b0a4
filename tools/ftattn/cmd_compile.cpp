// ftattn compile: fill the disk cache with one or more kernels.
#include <fmt/format.h>

#include <memory>
#include <unordered_map>

#include "ftattn/errors.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/kernel_builder.hpp"
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

  // build_kernel rather than Runtime::compile: only it says whether the entry was stored, and
  // the stored entry is what this command is for.
  runtime::DiskCache cache(runtime.cache_dir());
  std::unordered_map<KernelConfig, std::string> done;  // config -> its line of output
  for (const KernelConfig& config : configs) {
    if (const auto seen = done.find(config); seen != done.end()) {
      fmt::print("{}", seen->second);
      continue;
    }
    const runtime::BuildOutcome out =
        runtime::build_kernel(config, &cache, runtime::StoreFailure::report);
    const CompiledKernel& kernel = *out.kernel;
    if (out.compiled && !out.stored) {
      throw CacheError(
          fmt::format("{} compiled but is not in the cache: {}", kernel.name, out.store_error));
    }
    const std::string how =
        out.compiled ? fmt::format("compiled in {:.2f} s", kernel.compile_seconds) : "cache hit";
    const std::string path = cache.entry_dir(kernel.cache_key).string();
    fmt::print("{}: {}\n  {}\n", kernel.name, how, path);
    done.emplace(config, fmt::format("{}: cache hit (named twice)\n  {}\n", kernel.name, path));
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
