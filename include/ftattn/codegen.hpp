// Code generation: a complete KernelConfig -> a small, readable CUDA instantiation unit over the
// embedded templates. Same config, byte-identical source.
#pragma once

#include <string>
#include <vector>

#include "ftattn/config.hpp"

namespace ftattn::codegen {

struct KernelSource {
  std::string name;                  // canonical kernel name
  std::string symbol;                // extern "C" entry point
  std::string text;                  // the generated unit (includes the templates)
  std::vector<std::string> options;  // NVRTC options, arch included
};

// Validates `config` (ConfigError on failure) and emits its source.
KernelSource generate(const KernelConfig& config);

// NVRTC's name for an arch: "sm_90a".
std::string nvrtc_arch(Arch arch);

}  // namespace ftattn::codegen
