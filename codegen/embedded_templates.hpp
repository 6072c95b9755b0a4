// The device templates, embedded at build time (see embed_templates.cmake).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ftattn::codegen {

struct EmbeddedFile {
  std::string_view path;  // relative to templates/, e.g. "ftattn/kernel/fwd_sm80.cuh"
  std::string_view text;
};

// Sorted by path.
const std::vector<EmbeddedFile>& embedded_templates();

}  // namespace ftattn::codegen
