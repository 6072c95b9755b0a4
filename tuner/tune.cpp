#include "tuner/tune.hpp"

#include <atomic>
#include <mutex>
#include <thread>

#include "ftattn/errors.hpp"

namespace ftattn::tuner {

ShapeResult tune_shape(const Family& family, const Problem& problem,
                       const std::vector<KernelConfig>& candidates, const KernelConfig& heuristic,
                       Timer& timer, const std::function<void()>& tick) {
  ShapeResult r;
  r.family = family;
  r.problem = problem;
  r.bucket = Bucket::of(problem, family.mask);
  r.flops = problem.flops(family.mask);
  bool heuristic_seen = false;
  for (const KernelConfig& c : candidates) {
    r.measured.push_back(timer.measure(c, problem));
    const Measurement& m = r.measured.back();
    if (c == heuristic) {
      r.heuristic = m;
      heuristic_seen = true;
    }
    if (m.passed && (!r.found || m.ms < r.best.ms)) {
      r.best = m;
      r.found = true;
    }
    if (tick) tick();
  }
  // The default may have been pruned from the candidates; it is still the baseline to beat.
  if (!heuristic_seen) r.heuristic = timer.measure(heuristic, problem);
  if (r.heuristic.passed && (!r.found || r.heuristic.ms < r.best.ms)) {
    r.best = r.heuristic;
    r.found = true;
  }
  return r;
}

Pruned compile_and_prune(Runtime& runtime, const std::vector<KernelConfig>& candidates,
                         const SmLimits& limits, int threads, int max_spill_bytes) {
  std::vector<std::pair<KernelConfig, CompiledFacts>> compiled;
  Pruned failed;
  std::mutex mu;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < candidates.size(); i = next++) {
      try {
        auto k = runtime.compile(candidates[i]);
        const ResourceUsage& r = k->resources;
        std::lock_guard lock(mu);
        compiled.push_back({candidates[i],
                            {r.registers, r.spill_stores + r.spill_loads, r.threads_per_block,
                             r.dynamic_shared_bytes + r.static_shared_bytes}});
      } catch (const Error& e) {
        const std::string what = e.what();
        std::lock_guard lock(mu);
        failed.rejected.push_back({candidates[i], what.substr(0, what.find('\n'))});
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  // Back to the candidates' order, so results do not depend on thread timing.
  std::vector<std::pair<KernelConfig, CompiledFacts>> ordered;
  for (const KernelConfig& c : candidates)
    for (const auto& entry : compiled)
      if (entry.first == c) ordered.push_back(entry);
  Pruned out = prune_compiled(ordered, limits, max_spill_bytes);
  out.rejected.insert(out.rejected.end(), failed.rejected.begin(), failed.rejected.end());
  return out;
}

Entry to_entry(const ShapeResult& r, const DeviceKey& device) {
  Entry e;
  e.device = device;
  e.family = r.family;
  e.bucket = r.bucket;
  e.best = r.best.config;
  e.best_tflops = r.tflops(r.best.ms);
  e.default_tflops = r.heuristic.passed ? r.tflops(r.heuristic.ms) : 0.0;
  e.default_config = bucket_default(r.family, r.bucket);
  return e;
}

}  // namespace ftattn::tuner
