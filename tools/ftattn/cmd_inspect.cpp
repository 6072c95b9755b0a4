// ftattn inspect: compile one config (no GPU needed) and show what came out.
#include <fmt/format.h>

#include <memory>

#include "ftattn/codegen.hpp"
#include "ftattn/errors.hpp"
#include "runtime/llvm_route.hpp"
#include "tools/ftattn/commands.hpp"
#include "tools/ftattn/config_flags.hpp"
#include "tools/ftattn/kernel_report.hpp"
#include "tools/ftattn/sass.hpp"

namespace ftattn::cli {
namespace {

struct InspectOptions {
  ConfigFlags config;
  bool source = false, ptx = false, sass = false, sass_digest = false, resources = false,
       ir = false;
};

int run_inspect(const InspectOptions& o, const GlobalOptions& global) {
  const KernelConfig wanted = config_from_flags(o.config);
  Runtime runtime(global.runtime_options());
  if (o.ir) {
    // The IR exists only while compiling: run the route again rather than ask the cache.
    if (wanted.backend != Backend::llvm)
      throw ConfigError("--ir shows the LLVM route's IR: add --backend llvm");
    const auto route =
        runtime::compile_with_llvm(codegen::generate(resolve_for_compile(runtime, wanted)), true);
    fmt::print("; IR before the passes\n{}\n; IR after the passes\n{}\nstatistics\n{}",
               route.ir_before, route.ir_after, route.statistics);
    return 0;
  }
  const auto kernel = runtime.compile(resolve_for_compile(runtime, wanted));

  print_kernel_header(*kernel);
  // With no section asked for, resources are the most useful default.
  const bool any = o.source || o.ptx || o.sass || o.sass_digest || o.resources;
  if (o.resources || !any) print_resources(kernel->resources);
  if (o.source) fmt::print("source\n{}", kernel->source);
  if (o.ptx) fmt::print("ptx\n{}", kernel->ptx);
  // A missing digest must not read as "no difference" to a script comparing two builds.
  bool shown = true;
  if (o.sass) shown = print_sass(kernel->cubin) && shown;
  if (o.sass_digest) shown = print_sass_digest(kernel->cubin) && shown;
  if (!shown)
    throw Error(
        "the SASS asked for was not shown (see above): it needs the CUDA toolkit's cuobjdump or "
        "nvdisasm, in the toolkit's bin folder or on PATH");
  return 0;
}

}  // namespace

Command add_inspect_command(CLI::App& parent, const GlobalOptions& global) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "inspect", "Compile a kernel (no GPU needed) and show its source, PTX, SASS or resources");
  add_config_flags(*cmd, o->config, Positional::one);
  cmd->add_flag("--source", o->source, "print the generated CUDA unit");
  cmd->add_flag("--ptx", o->ptx, "print the PTX");
  cmd->add_flag("--sass", o->sass, "print the SASS (needs cuobjdump or nvdisasm)");
  cmd->add_flag("--sass-digest", o->sass_digest,
                "per function of the cubin: instruction count and a hash of the SASS without "
                "addresses and encodings (compare two builds; needs cuobjdump or nvdisasm)");
  cmd->add_flag("--resources", o->resources, "print registers, spills and shared memory");
  cmd->add_flag("--ir", o->ir,
                "with --backend llvm: print the IR before and after the passes, and statistics");
  return {cmd, [o, &global] { return run_inspect(*o, global); }};
}

}  // namespace ftattn::cli
