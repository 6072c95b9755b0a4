// The candidates of a kernel family and the rules that drop some before and after compiling.
#include <fmt/format.h>

#include <algorithm>

#include "ftattn/errors.hpp"
#include "ftattn/tuner.hpp"

namespace ftattn::tuner {

Pruned enumerate(const Family& family, const Knobs& knobs) {
  Pruned out;
  // The 16-bit precisions also run three consumer warpgroups on sm_90a (192 rows, 12 warps; the
  // default at head dim 128, and f16_pasa's at 64 too), so their spaces hold them: unprotected or
  // with Flash-ABFT, and f16 and bf16 with EFTA at head dims up to 64 (validate() drops the rest).
  std::vector<std::pair<int, int>> rows_warps;
  for (int m : knobs.block_m)
    for (int w : knobs.num_warps) rows_warps.emplace_back(m, w);
  const bool sixteen_bit = family.precision == Precision::f16_pasa ||
                           family.precision == Precision::f16 ||
                           family.precision == Precision::bf16;
  if (sixteen_bit && family.arch.sm == 90 && family.arch.arch_specific)
    rows_warps.emplace_back(192, 12);
  for (auto [m, w] : rows_warps)
    for (int n : knobs.block_n)
      for (int s : knobs.num_stages) {
        KernelConfig c = family.open_config();
        c.block_m = m;
        c.block_n = n;
        c.num_warps = w;
        c.num_stages = s;
        // validate() holds every rule a kernel must obey (tiling, accumulator budget, the
        // arch's shared memory); its message is the reason.
        try {
          validate(c);
          out.kept.push_back(c);
        } catch (const ConfigError& e) {
          out.rejected.push_back({c, e.what()});
        }
      }
  return out;
}

int ctas_per_sm(const CompiledFacts& f, const SmLimits& limits) {
  if (f.threads <= 0) return 0;
  // Registers are allocated per warp in units of 256 (8 per thread, rounded up).
  const int regs_per_thread = (std::max(f.registers, 1) + 7) / 8 * 8;
  const int by_regs = limits.registers / (regs_per_thread * f.threads);
  const int by_threads = limits.max_threads / f.threads;
  const int by_smem = f.shared_bytes > 0 ? limits.shared_bytes / f.shared_bytes : by_threads;
  return std::max(0, std::min({by_regs, by_threads, by_smem}));
}

Pruned prune_compiled(const std::vector<std::pair<KernelConfig, CompiledFacts>>& compiled,
                      const SmLimits& limits, int max_spill_bytes, int min_ctas) {
  Pruned out;
  for (const auto& [config, facts] : compiled) {
    const int ctas = ctas_per_sm(facts, limits);
    if (facts.spill_bytes > max_spill_bytes) {
      out.rejected.push_back(
          {config, fmt::format("spills {} bytes (limit {})", facts.spill_bytes, max_spill_bytes)});
    } else if (ctas < min_ctas) {
      out.rejected.push_back(
          {config,
           fmt::format("{} CTAs per SM ({} registers x {} threads, {} bytes shared): "
                       "needs {}",
                       ctas, facts.registers, facts.threads, facts.shared_bytes, min_ctas)});
    } else {
      out.kept.push_back(config);
    }
  }
  return out;
}

}  // namespace ftattn::tuner
