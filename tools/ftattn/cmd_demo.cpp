// ftattn demo: the README's tour. On a GPU, resolve, run and check two shapes; without one,
// show that generating, compiling and inspecting work and say plainly that nothing ran.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <memory>
#include <vector>

#include "tools/ftattn/commands.hpp"
#include "tools/ftattn/device_run.hpp"
#include "tools/ftattn/kernel_report.hpp"

namespace ftattn::cli {
namespace {

struct DemoOptions {
  std::vector<std::string> archs;
};

struct DemoCase {
  const char* title;
  KernelConfig config;  // open knobs: the runtime picks them
  Problem problem;
  const char* layout;
};

int run_on_gpu(Runtime& runtime, const DemoOptions& o) {
  fmt::print("device    {}\n\n", describe_device());
  if (o.archs.size() > 1) {
    throw ConfigError("on a GPU the demo runs one arch: give --arch at most once");
  }
  const Arch arch = o.archs.empty() ? Arch{} : Arch::parse(o.archs.front());

  KernelConfig causal_f16;
  causal_f16.precision = Precision::f16;
  causal_f16.mask = Mask::causal;
  causal_f16.arch = arch;
  KernelConfig full_bf16;
  full_bf16.precision = Precision::bf16;
  full_bf16.mask = Mask::none;
  full_bf16.arch = arch;
  const DemoCase cases[] = {
      {"f16, causal", causal_f16, Problem::bhsd(2, 8, 8, 1024, 1024, 128), "bhsd"},
      {"bf16, no mask, grouped-query heads", full_bf16, Problem::bshd(2, 16, 4, 2048, 2048, 64),
       "bshd"},
  };

  const DeviceRunOptions options;
  int failed = 0;
  for (const DemoCase& c : cases) {
    fmt::print("{}: {}, {}\n", c.title, describe_problem(c.problem), c.layout);
    const DeviceRunResult result = run_on_device(runtime, c.config, c.problem, options);
    print_result(result, options);
    fmt::print("\n");
    failed += result.check.passed ? 0 : 1;
  }
  if (failed > 0) {
    std::fflush(stdout);
    std::cerr << fmt::format("ftattn: demo failed: {} of {} kernels did not match the reference\n",
                             failed, std::size(cases));
    return 1;
  }
  fmt::print("All kernels matched the reference.\n");
  return 0;
}

int run_without_gpu(Runtime& runtime, const DemoOptions& o) {
  const std::vector<std::string> archs =
      o.archs.empty() ? std::vector<std::string>{"sm_90a", "sm_80"} : o.archs;
  for (const std::string& name : archs)
    if (Arch::parse(name).is_auto())
      throw ConfigError(fmt::format(
          "--arch {} takes the GPU's arch, and there is no GPU: give an arch such as sm_80 or "
          "sm_90a, or leave --arch out",
          name));
  fmt::print("No GPU found: generating and compiling for {} without launching anything.\n\n",
             fmt::join(archs, " and "));
  for (const std::string& arch_name : archs) {
    const Arch arch = Arch::parse(arch_name);
    // f16 everywhere; on sm_90a also fp8. There both run a wgmma skeleton.
    std::vector<Precision> precisions = {Precision::f16};
    if (arch.sm == 90 && arch.arch_specific) precisions.push_back(Precision::fp8_e4m3);
    for (Precision precision : precisions) {
      KernelConfig config;
      config.head_dim = 128;
      config.precision = precision;
      config.mask = Mask::causal;
      config.arch = arch;
      const auto kernel = runtime.compile(runtime.resolve(config));

      print_kernel_header(*kernel);
      print_resources(kernel->resources);
      fmt::print("source (first lines)\n{}", first_lines(kernel->source, 16));
      fmt::print("ptx       {} mma.sync and {} wgmma instructions\n\n",
                 count_occurrences(kernel->ptx, "mma.sync"),
                 count_occurrences(kernel->ptx, "wgmma.mma_async"));
    }
  }
  fmt::print(
      "No GPU found: kernels were generated, compiled and inspected, but nothing was "
      "launched.\n");
  return 0;
}

int run_demo(const DemoOptions& o, const GlobalOptions& global) {
  Runtime runtime(global.runtime_options());
  return runtime.has_device() ? run_on_gpu(runtime, o) : run_without_gpu(runtime, o);
}

}  // namespace

Command add_demo_command(CLI::App& parent, const GlobalOptions& global) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "demo", "Generate, compile and (on a GPU) run and check attention kernels");
  cmd->add_option("--arch", o->archs,
                  "arch to build for (repeatable without a GPU; default: the GPU's, or sm_90a "
                  "and sm_80 without one)");
  return {cmd, [o, &global] { return run_demo(*o, global); }};
}

}  // namespace ftattn::cli
