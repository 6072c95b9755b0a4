// The options that describe a kernel config, shared by every command that takes one: knob flags
// (--head-dim ... --arch), --config <canonical name>, and positional canonical names.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "ftattn/config.hpp"
#include "ftattn/runtime.hpp"

namespace ftattn::cli {

struct ConfigFlags {
  int head_dim = 0, block_m = 0, block_n = 0, warps = 0, stages = 0;
  std::string precision, protection, mask, arch;
  std::string backend, ir_inject, ir_harden;  // the LLVM route (--backend llvm)
  std::string config;                         // --config
  std::vector<std::string> names;             // positional canonical names

  // Set by add_config_flags so that only flags the user gave override a parsed name.
  CLI::Option* head_dim_opt = nullptr;
  CLI::Option* block_m_opt = nullptr;
  CLI::Option* block_n_opt = nullptr;
  CLI::Option* warps_opt = nullptr;
  CLI::Option* stages_opt = nullptr;
};

// Refuses an empty value ("--precision ''"), which would read as "not given" and leave the
// default in place; the message asks for `what`.
CLI::Validator non_empty(const char* what);

enum class Positional { none, one, many };

// Registers the knob flags and --config on `cmd`, plus the positional name(s) if asked.
void add_config_flags(CLI::App& cmd, ConfigFlags& flags, Positional positional);

// Every config the user named: each name (positional or --config) with the knob flags applied
// on top, or the flags alone when no name was given. Enum and arch spellings are parsed here, so
// bad values throw the library's ConfigError. Knobs left out stay open (0 / auto).
std::vector<KernelConfig> configs_from_flags(const ConfigFlags& flags);

// The single config of a command that takes one; ConfigError when more than one was named.
KernelConfig config_from_flags(const ConfigFlags& flags);

// Completes a config for compiling (no problem, GPU optional): head_dim must be known; with no
// arch and no GPU, sm_90a is assumed (noted once on stderr); the rest gets the runtime's defaults.
KernelConfig resolve_for_compile(const Runtime& runtime, KernelConfig config);

}  // namespace ftattn::cli
