// ftattn run: launch one config on the GPU, check it against the host reference, time it.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "runtime/driver.hpp"
#include "tools/ftattn/commands.hpp"
#include "tools/ftattn/config_flags.hpp"
#include "tools/ftattn/device_run.hpp"
#include "tools/ftattn/number_checks.hpp"

namespace ftattn::cli {
namespace {

struct RunOptions {
  ConfigFlags config;
  int batch = 1, heads = 1, heads_kv = 0, seqlen = 0, seqlen_k = 0;
  std::string layout = "bhsd";
  std::string sparse_block;  // "128x128" for block-sparse masks
  DeviceRunOptions device;
  CLI::Option* density_opt = nullptr;  // given on the command line
};

int run_run(const RunOptions& o, const GlobalOptions& global) {
  const KernelConfig config = config_from_flags(o.config);
  if (config.head_dim == 0) {
    throw ConfigError("run needs a head_dim: give --head-dim or a kernel name");
  }
  // The mask's block flags go with block-sparse masks only; elsewhere they would do nothing.
  if (is_block_sparse(config.mask) && o.sparse_block.empty())
    throw ConfigError(
        fmt::format("mask {} needs its mask block: give --sparse-block <rows>x<cols>, e.g. 128x128",
                    to_string(config.mask)));
  if (!is_block_sparse(config.mask) && (!o.sparse_block.empty() || o.density_opt->count() > 0))
    throw ConfigError(fmt::format(
        "--sparse-block and --density shape a block-sparse mask, and the mask is {}: give "
        "--mask block_sparse or block_sparse_causal, or leave them out",
        to_string(config.mask)));
  // Say "no GPU" before any other work; device_info's message names the reason.
  const std::string device = describe_device();

  const int heads_kv = o.heads_kv > 0 ? o.heads_kv : o.heads;
  const int seqlen_k = o.seqlen_k > 0 ? o.seqlen_k : o.seqlen;
  Problem problem =
      o.layout == "bshd"
          ? Problem::bshd(o.batch, o.heads, heads_kv, o.seqlen, seqlen_k, config.head_dim)
          : Problem::bhsd(o.batch, o.heads, heads_kv, o.seqlen, seqlen_k, config.head_dim);

  if (!o.sparse_block.empty()) {
    char extra = 0;
    if (std::sscanf(o.sparse_block.c_str(), "%dx%d%c", &problem.sparse_block_m,
                    &problem.sparse_block_n, &extra) != 2)
      throw ConfigError(fmt::format(
          "bad --sparse-block '{}': write <rows>x<cols> of one mask block, e.g. 128x128",
          o.sparse_block));
  }

  Runtime runtime(global.runtime_options());
  fmt::print("device    {}\n", device);
  fmt::print("problem   {}, {}{}\n", describe_problem(problem), o.layout,
             o.device.lse ? ", lse" : "");
  const DeviceRunResult result = run_on_device(runtime, config, problem, o.device);
  print_result(result, o.device);
  if (!result.check.passed) {
    std::fflush(stdout);
    std::cerr << "ftattn: check failed: the kernel's output does not match the reference\n";
    return 1;
  }
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& parent, const GlobalOptions& global) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "run", "Launch a kernel on the GPU, check it against the reference and time it");
  add_config_flags(*cmd, o->config, Positional::one);
  cmd->add_option("--batch", o->batch, "batch size")->required()->check(at_least(1));
  cmd->add_option("--heads", o->heads, "query heads")->required()->check(at_least(1));
  cmd->add_option("--heads-kv", o->heads_kv, "key/value heads (default: --heads)")
      ->check(at_least(1));
  cmd->add_option("--seqlen", o->seqlen, "query sequence length")->required()->check(at_least(1));
  cmd->add_option("--seqlen-k", o->seqlen_k, "key sequence length (default: --seqlen)")
      ->check(at_least(1));
  cmd->add_option("--layout", o->layout, "tensor layout: bhsd or bshd")
      ->check(CLI::IsMember({"bhsd", "bshd"}))
      ->capture_default_str();
  cmd->add_flag("--lse", o->device.lse, "also write and check the log-sum-exp");
  cmd->add_option("--check-rows", o->device.check_rows, "rows to check (0: all)")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--warmup", o->device.warmup, "untimed launches before timing")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--iters", o->device.iters, "timed launches (0: check only)")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--seed", o->device.seed, "random seed of the inputs")
      ->check(seed_number())
      ->capture_default_str();
  cmd->add_flag("--prepare-kv", o->device.prepare_kv,
                "do the work on K and V alone (checksum prologue, f16_pasa's shift) once, before "
                "the launches, which then skip it (Kernel::prepare_kv)");
  cmd->add_option("--sparse-block", o->sparse_block,
                  "block-sparse masks: one mask block as <rows>x<cols>, e.g. 128x128");
  o->density_opt = cmd->add_option("--density", o->device.density,
                                   "block-sparse masks: share of blocks kept by the random mask")
                       ->check(finite_number(false))  // CLI::Range alone lets NaN through
                       ->check(CLI::Range(0.0, 1.0))
                       ->capture_default_str();
  return {cmd, [o, &global] { return run_run(*o, global); }};
}

}  // namespace ftattn::cli
