// The LLVM route's view of a generated unit: clang options and the IR pass list. Lives in the
// core library (not the plugin) because the cache key needs it on machines without LLVM.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "ftattn/codegen.hpp"

namespace ftattn::codegen {
namespace {

std::string pass_class(IrClass c) {
  std::string text(to_string(c));
  for (char& ch : text) {
    if (ch == '_') ch = '-';
  }
  return text;
}

}  // namespace

std::vector<std::string> llvm_passes(const KernelConfig& config) {
  // Contraction into FMAs is decided in IR for every kernel, before any instrumentation could
  // keep the back end from fusing: plain and instrumented kernels then round alike.
  std::vector<std::string> passes = {"ftattn-inline-all", "default<O3>", "ftattn-contract"};
  // Hardening first, so that injection flips the value the comparison sees.
  if (config.ir_harden != IrClass::none)
    passes.push_back(fmt::format("ftattn-harden<{}>", pass_class(config.ir_harden)));
  if (config.ir_inject != IrClass::none)
    passes.push_back(fmt::format("ftattn-inject<{}>", pass_class(config.ir_inject)));
  passes.push_back("ftattn-stats");
  return passes;
}

void use_llvm_route(const KernelConfig& config, KernelSource& source) {
  // PTX ISA 8.8: what LLVM 22 emits for CUDA 12.9, loadable by drivers of CUDA 12.9 and newer.
  std::vector<std::string> options = {"--cuda-gpu-arch=" + nvrtc_arch(config.arch),
                                      "--cuda-feature=+ptx88", "-std=c++17", "-O3",
                                      "-gline-directives-only"};
  // Defines the generator gave NVRTC mean the same to clang.
  for (const std::string& o : source.options) {
    if (o.starts_with("-D")) options.push_back(o);
  }
  source.options = std::move(options);
  source.backend = Backend::llvm;
  source.passes = llvm_passes(config);
}

}  // namespace ftattn::codegen
