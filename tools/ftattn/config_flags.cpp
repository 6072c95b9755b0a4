#include "tools/ftattn/config_flags.hpp"

#include <fmt/format.h>

#include <iostream>

#include "ftattn/errors.hpp"
#include "tools/ftattn/number_checks.hpp"

namespace ftattn::cli {

CLI::Validator non_empty(const char* what) {
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        return text.empty() ? std::string("empty value: give ") + what : std::string();
      },
      "");
}

namespace {

void apply_flags(KernelConfig& c, const ConfigFlags& f) {
  // Only what the user gave overrides: a parsed name's knobs stay otherwise.
  if (f.head_dim_opt->count() > 0) c.head_dim = f.head_dim;
  if (f.block_m_opt->count() > 0) c.block_m = f.block_m;
  if (f.block_n_opt->count() > 0) c.block_n = f.block_n;
  if (f.warps_opt->count() > 0) c.num_warps = f.warps;
  if (f.stages_opt->count() > 0) c.num_stages = f.stages;
  if (!f.precision.empty()) c.precision = parse_precision(f.precision);
  if (!f.protection.empty()) c.protection = parse_protection(f.protection);
  if (!f.mask.empty()) c.mask = parse_mask(f.mask);
  if (!f.arch.empty()) c.arch = Arch::parse(f.arch);
  if (!f.backend.empty()) c.backend = parse_backend(f.backend);
  if (!f.ir_inject.empty()) c.ir_inject = parse_ir_class(f.ir_inject);
  if (!f.ir_harden.empty()) c.ir_harden = parse_ir_class(f.ir_harden);
}

}  // namespace

void add_config_flags(CLI::App& cmd, ConfigFlags& f, Positional positional) {
  // Decimal only: CLI11 alone reads "0100" as octal and "0x40" as hex.
  f.head_dim_opt =
      cmd.add_option("--head-dim", f.head_dim, "head dimension: 32, 64, 96, 128, 192, 256")
          ->check(at_least(1));
  f.block_m_opt =
      cmd.add_option("--block-m", f.block_m, "query rows per CTA (0: default)")->check(at_least(0));
  f.block_n_opt = cmd.add_option("--block-n", f.block_n, "key rows per main-loop step (0: default)")
                      ->check(at_least(0));
  f.warps_opt = cmd.add_option("--warps", f.warps,
                               "warps per CTA: 1, 2, 4, 8, or 12 for 16-bit on sm_90a, unprotected "
                               "or flash_abft (EFTA too at head dims 32 and 64) (0: default)")
                    ->check(at_least(0));
  f.stages_opt =
      cmd.add_option("--stages", f.stages, "K/V shared-memory stages: 1, 2, 3 (0: default)")
          ->check(at_least(0));
  cmd.add_option("--precision", f.precision, "f16, bf16, int8, f16_pasa, fp8_e4m3 (default f16)")
      ->check(non_empty("a precision: f16, bf16, int8, f16_pasa or fp8_e4m3"));
  cmd.add_option("--protection", f.protection,
                 "none, flash_abft, efta_detect, efta_correct, decoupled (default none)")
      ->check(non_empty("a scheme: none, flash_abft, efta_detect, efta_correct or decoupled"));
  cmd.add_option("--mask", f.mask,
                 "none, causal, block_sparse or block_sparse_causal (default none)")
      ->check(non_empty("a mask: none, causal, block_sparse or block_sparse_causal"));
  cmd.add_option("--arch", f.arch, "sm_80, sm_86, sm_89, sm_90a, ... (default: the GPU's)")
      ->check(non_empty("an arch such as sm_80 or sm_90a, or leave --arch out"));
  cmd.add_option("--backend", f.backend,
                 "nvrtc, or llvm: clang + the project's IR passes + NVPTX (default nvrtc)")
      ->check(non_empty("nvrtc or llvm"));
  cmd.add_option("--ir-inject", f.ir_inject,
                 "LLVM route: instrument fp_arith, load, int_arith, exp_max or mma for IR-level "
                 "fault injection")
      ->check(non_empty("fp_arith, load, int_arith, exp_max or mma"));
  cmd.add_option("--ir-harden", f.ir_harden,
                 "LLVM route: duplicate and compare fp_arith, int_arith, exp_max or mma (DMR)")
      ->check(non_empty("fp_arith, int_arith, exp_max or mma"));
  cmd.add_option("--config", f.config,
                 "canonical kernel name, e.g. ftattn_fwd_sm90a_f16_d128_m128n64_w4s2_none_none; "
                 "knob flags override its fields")
      ->check(non_empty("a canonical kernel name"));
  switch (positional) {
    case Positional::none:
      break;
    case Positional::one:
      cmd.add_option("name", f.names, "canonical kernel name (like --config)")->expected(1);
      break;
    case Positional::many:
      cmd.add_option("names", f.names, "canonical kernel names (like --config)");
      break;
  }
}

std::vector<KernelConfig> configs_from_flags(const ConfigFlags& f) {
  std::vector<std::string> names = f.names;
  if (!f.config.empty()) names.push_back(f.config);
  std::vector<KernelConfig> configs;
  if (names.empty()) {
    KernelConfig c;
    apply_flags(c, f);
    configs.push_back(c);
  }
  for (const std::string& name : names) {
    KernelConfig c = KernelConfig::parse(name);
    apply_flags(c, f);
    configs.push_back(c);
  }
  return configs;
}

KernelConfig config_from_flags(const ConfigFlags& f) {
  std::vector<KernelConfig> configs = configs_from_flags(f);
  if (configs.size() != 1) {
    throw ConfigError(
        fmt::format("{} kernel names given: this command takes one (a positional name or --config)",
                    configs.size()));
  }
  return configs.front();
}

KernelConfig resolve_for_compile(const Runtime& runtime, KernelConfig c) {
  // with_defaults' own message speaks of the C++ API; say what to type instead.
  if (c.head_dim == 0) {
    throw ConfigError(
        "head_dim is required: give --head-dim (32, 64, 96, 128, 192 or 256) or a kernel name");
  }
  if (c.arch.is_auto() && !runtime.has_device()) {
    static bool noted = false;
    if (!noted) {
      std::cerr << "ftattn: note: no GPU found, so sm_90a was assumed (give --arch to choose)\n";
      noted = true;
    }
    c.arch = Arch::parse("sm_90a");
  }
  return runtime.resolve(c);
}

}  // namespace ftattn::cli
