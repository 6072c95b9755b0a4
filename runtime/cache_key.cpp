#include "runtime/cache_key.hpp"

#include "codegen/embedded_templates.hpp"
#include "runtime/hash.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace ftattn::runtime {

std::string cache_key(const codegen::KernelSource& source) {
  Hasher h;
  h.update_field("ftattn", FTATTN_VERSION);
  h.update_field("nvrtc", nvrtc_version());
  h.update_field("symbol", source.symbol);
  h.update_field("source", source.text);
  for (const auto& option : source.options) h.update_field("option", option);
  for (const auto& file : codegen::embedded_templates()) h.update_field(file.path, file.text);
  return h.hex_digest();
}

}  // namespace ftattn::runtime
