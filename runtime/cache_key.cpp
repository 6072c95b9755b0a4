#include "runtime/cache_key.hpp"

#include "codegen/embedded_templates.hpp"
#include "runtime/hash.hpp"
#include "runtime/llvm_route.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace ftattn::runtime {

std::string cache_key(const codegen::KernelSource& source) {
  return source.backend == Backend::llvm ? cache_key(source, std::string())
                                         : cache_key(source, nvrtc_identity());
}

std::string cache_key(const codegen::KernelSource& source, const std::string& nvrtc) {
  Hasher h;
  h.update_field("ftattn", FTATTN_VERSION);
  if (source.backend == Backend::llvm) {
    // clang, our passes and nvJitLink build these; NVRTC plays no part.
    h.update_field("llvm", llvm_version());
    h.update_field("llvm-route", llvm_route_hash());
    h.update_field("nvjitlink", llvm_route_toolkit_version());
    for (const auto& pass : source.passes) h.update_field("pass", pass);
  } else {
    // Not just nvrtc_version(): that is major.minor only, and a patch update changes the code.
    h.update_field("nvrtc", nvrtc);
  }
  h.update_field("symbol", source.symbol);
  h.update_field("source", source.text);
  for (const auto& option : source.options) h.update_field("option", option);
  for (const auto& file : codegen::embedded_templates()) h.update_field(file.path, file.text);
  return h.hex_digest();
}

}  // namespace ftattn::runtime
