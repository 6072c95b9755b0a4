#include "runtime/fault_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "ftattn/campaign.hpp"
#include "ftattn/errors.hpp"
#include "runtime/decoupled_launch.hpp"

namespace ftattn::runtime {
namespace {

int m_blocks_of(const KernelConfig& c, const Problem& pr) {
  return (pr.seqlen_q + c.block_m - 1) / c.block_m;
}

// The launch a plan's site lands in, for the bounds and their messages.
struct SiteLaunch {
  std::string grid;       // the launch
  std::string order;      // how its CTAs are numbered
  std::string iteration;  // what an iteration is there
  long long ctas = 0;
};

SiteLaunch site_launch(const KernelConfig& c, const Problem& pr, FaultSite site) {
  if (c.protection == Protection::decoupled) {
    const DecoupledSiteKernel k = decoupled_site_kernel(c, site);
    return {fmt::format("decoupled's {} kernel", k.name), k.order, k.iteration,
            decoupled_site_ctas(c, pr, site)};
  }
  return {fmt::format("the grid of {} query blocks x {} heads x {} batch", m_blocks_of(c, pr),
                      pr.heads_q, pr.batch),
          "query block fastest, then head, then batch",
          fmt::format("key block of {} keys", c.block_n), fused_ctas(c, pr)};
}

}  // namespace

long long fused_ctas(const KernelConfig& c, const Problem& pr) {
  return static_cast<long long>(m_blocks_of(c, pr)) * pr.heads_q * pr.batch;
}

int fused_key_blocks(const KernelConfig& c, const Problem& pr, long long cta) {
  const int m_blocks = m_blocks_of(c, pr);
  const int x = static_cast<int>(cta % m_blocks);
  int n_blocks = (pr.seqlen_k + c.block_n - 1) / c.block_n;
  if (!is_causal(c.mask)) return n_blocks;
  // As the kernels' key_blocks (kernel/fwd_common.cuh): up to the tile's last row's diagonal.
  const int m_block = m_blocks - 1 - x;
  const int last_key =
      query_tile_row0(c, pr.seqlen_q, m_block) + c.block_m - 1 + pr.seqlen_k - pr.seqlen_q;
  return last_key < 0 ? 0 : std::min(n_blocks, last_key / c.block_n + 1);
}

void check_plan_fields(const KernelConfig& config, const FaultPlan& f) {
  (void)to_string(f.site);  // a value outside the enum throws
  // Source-level sites need the source hooks; FaultSite::ir needs the IR instrumentation.
  if (f.site == FaultSite::ir && config.ir_inject == IrClass::none)
    throw ConfigError(fmt::format(
        "{} has no IR-level injection points: FaultSite::ir needs KernelConfig::ir_inject "
        "(CLI: --backend llvm --ir-inject <class>)",
        config.name()));
  if (f.site != FaultSite::ir && !config.fault_injection)
    throw ConfigError(fmt::format(
        "{} has no source-level injection points: set KernelConfig::fault_injection (CLI: "
        "--inject) to run a fault plan at site {}{}",
        config.name(), to_string(f.site),
        config.ir_inject == IrClass::none ? "" : ", or plan FaultSite::ir for its IR-level ones"));
  if (f.bit < 0 || f.bit > 31)
    throw ConfigError(
        fmt::format("FaultPlan::bit {} is outside 0..31: pick a bit of the 32-bit "
                    "value (0 the lowest, 31 the sign)",
                    f.bit));
  // A site this kernel has no hook for, or a thread it does not launch, flips nothing: the
  // trial would read as a masked fault.
  if (f.site != FaultSite::ir) {
    const std::vector<FaultSite> sites = campaign::sites_of(config);
    if (std::find(sites.begin(), sites.end(), f.site) == sites.end()) {
      std::string names;
      for (FaultSite s : sites)
        names += fmt::format("{}{}", names.empty() ? "" : ", ", to_string(s));
      throw ConfigError(fmt::format("{} has no fault site {}: its sites are {}", config.name(),
                                    to_string(f.site), names));
    }
  }
  // decoupled's three kernels have CTAs of their own sizes: the site's kernel's. A
  // warp-specialised CTA's producer warpgroup (the threads past the consumers') only copies:
  // it has no injection point.
  const bool decoupled = config.protection == Protection::decoupled;
  const bool producers = !decoupled && warp_specialized(config);
  const int threads = decoupled   ? decoupled_site_kernel(config, f.site).threads
                      : producers ? 32 * config.num_warps
                                  : launch_threads(config);
  if (f.thread < 0 || f.thread >= threads)
    throw ConfigError(
        producers
            ? fmt::format("FaultPlan::thread {} is outside {}'s {} consumer threads: its producer "
                          "warpgroup (threads {}..{}) only copies and carries no injection points",
                          f.thread, config.name(), threads, threads, launch_threads(config) - 1)
            : fmt::format("FaultPlan::thread {} is outside {}'s CTA of {} threads", f.thread,
                          config.name(), threads));
  // A plan no thread matches would flip nothing and read as a masked fault. (Site ir's
  // counting launches plan a negative iteration: count the instances, flip none.)
  const std::pair<const char*, int> counts[] = {
      {"cta", f.cta},
      {"iteration", f.site == FaultSite::ir ? 0 : f.iteration},
      {"element", f.element}};
  for (const auto& [field, value] : counts)
    if (value < 0)
      throw ConfigError(fmt::format(
          "FaultPlan::{} {} is negative: it counts from 0, and no {} matches a negative one", field,
          value, field));
}

void check_fault_plan(const KernelConfig& config, const Problem& problem, const FaultPlan& f) {
  check_plan_fields(config, f);
  const SiteLaunch launch = site_launch(config, problem, f.site);
  if (f.cta >= launch.ctas)
    throw ConfigError(fmt::format(
        "FaultPlan::cta {} is outside this problem's launch: {} has {} CTAs, so pick cta in "
        "0..{} ({}), or a larger problem",
        f.cta, launch.grid, launch.ctas, launch.ctas - 1, launch.order));
  if (f.site == FaultSite::ir) return;  // dynamic instances: counted by launches, not bounded
  const int runs = config.protection == Protection::decoupled
                       ? decoupled_site_iterations(config, problem, f.site, f.cta, f.thread)
                       : fused_key_blocks(config, problem, f.cta);
  if (f.iteration >= runs) {
    const std::string what =
        config.protection == Protection::decoupled
            ? fmt::format("thread {} of CTA {} of {}", f.thread, f.cta, launch.grid)
            : fmt::format("CTA {} ({} keys{})", f.cta, problem.seqlen_k,
                          is_causal(config.mask) ? ", causal: up to its tile's last row" : "");
    throw ConfigError(
        runs == 0 ? fmt::format("FaultPlan::iteration {}: {} runs no {} on this problem, so "
                                "nothing would flip: pick another cta{}",
                                f.iteration, what, launch.iteration,
                                config.protection == Protection::decoupled ? " or thread" : "")
                  : fmt::format("FaultPlan::iteration {} is past the last iteration: {} runs {} "
                                "(one per {}), so pick iteration in 0..{}",
                                f.iteration, what, runs, launch.iteration, runs - 1));
  }
}

}  // namespace ftattn::runtime
