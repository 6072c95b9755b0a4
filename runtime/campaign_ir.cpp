// IR-level campaigns: the space of dynamic instances, counted through launches, and the backend
// that turns a draw into a real (CTA, thread, instance).
#include "ftattn/campaign_ir.hpp"

#include <fmt/format.h>

#include <limits>

#include "ftattn/errors.hpp"
#include "runtime/fault_plan.hpp"

namespace ftattn::campaign {
namespace {

class LocatingBackend final : public TrialBackend {
 public:
  LocatingBackend(TrialBackend& inner, const IrSpace& space) : inner_(inner), space_(space) {}
  FaultReport run(const std::optional<FaultPlan>& plan, std::vector<float>& output,
                  std::vector<float>& lse) override {
    if (!plan) return inner_.run(plan, output, lse);
    return inner_.run(space_.locate(*plan), output, lse);
  }

 private:
  TrialBackend& inner_;
  const IrSpace& space_;
};

}  // namespace

std::string_view to_string(IrCount c) {
  switch (c) {
    case IrCount::cta:
      return "cta";
    case IrCount::warp:
      return "warp";
    case IrCount::thread:
      return "thread";
  }
  throw ConfigError(fmt::format("invalid IrCount value {}", static_cast<int>(c)));
}

IrCount parse_ir_count(std::string_view text) {
  for (IrCount c : {IrCount::cta, IrCount::warp, IrCount::thread})
    if (to_string(c) == text) return c;
  throw ConfigError(fmt::format(
      "bad --ir-count '{}': use cta (thread 0 of each CTA stands for all its threads), warp "
      "(lane 0 of each warp for its lanes) or thread (every thread counted)",
      text));
}

InstanceCounter counting_launches(TrialBackend& backend, uint64_t baseline_detected) {
  return [&backend, baseline_detected](int cta, int thread) {
    FaultPlan plan;
    plan.site = FaultSite::ir;
    plan.cta = cta;
    plan.thread = thread;
    plan.iteration = -1;
    std::vector<float> ignored;
    const FaultReport r = backend.run(plan, ignored);
    return r.detected > baseline_detected ? static_cast<long long>(r.detected - baseline_detected)
                                          : 0LL;
  };
}

FaultPlan IrSpace::locate(const FaultPlan& drawn) const {
  const int ctas = static_cast<int>(draw.iterations.size());
  if (drawn.cta < 0 || drawn.cta >= ctas || threads <= 0)
    throw Error(fmt::format("IrSpace::locate: CTA {} outside the space's {}", drawn.cta, ctas));
  long long pick = drawn.iteration;
  const long long* counts = instances.data() + static_cast<size_t>(drawn.cta) * threads;
  for (int t = 0; t < threads; ++t) {
    if (pick < counts[t]) {
      FaultPlan plan = drawn;
      plan.thread = t;
      plan.iteration = static_cast<int>(pick);
      return plan;
    }
    pick -= counts[t];
  }
  throw Error(fmt::format("IrSpace::locate: instance {} outside CTA {}'s {}", drawn.iteration,
                          drawn.cta, draw.iterations[drawn.cta]));
}

IrSpace ir_injection_space(const KernelConfig& c, const Problem& pr, const InstanceCounter& count,
                           IrCount mode) {
  validate(pr, c);
  if (c.ir_inject == IrClass::none)
    throw ConfigError(fmt::format(
        "{} has no IR-level injection points: --site ir needs --backend llvm --ir-inject <class>",
        c.name()));
  if (c.protection == Protection::decoupled)
    throw ConfigError("IR-level campaigns run the fused kernel: protection decoupled has none");
  IrSpace s;
  s.threads = 32 * c.num_warps;
  s.draw.threads = 1;   // locate() picks the thread
  s.draw.elements = 0;  // aggregates (MMA results): the kernel takes the element modulo its size
  // The fused grid (m_blocks, heads_q, batch), as check_fault_plan bounds FaultPlan::cta.
  const int ctas = static_cast<int>(runtime::fused_ctas(c, pr));
  const int step = mode == IrCount::thread ? 1 : mode == IrCount::warp ? 32 : s.threads;
  s.instances.resize(static_cast<size_t>(ctas) * s.threads);
  for (int cta = 0; cta < ctas; ++cta) {
    long long cta_total = 0;
    for (int t0 = 0; t0 < s.threads; t0 += step) {
      const long long n = count(cta, t0);
      ++s.launches;
      if (n < 0)
        throw Error(fmt::format("counting CTA {} thread {} gave {} instances", cta, t0, n));
      for (int t = t0; t < t0 + step; ++t)
        s.instances[static_cast<size_t>(cta) * s.threads + t] = n;
      cta_total += n * step;
    }
    if (cta_total > std::numeric_limits<int>::max())
      throw ConfigError(fmt::format(
          "CTA {} runs {} instances of {}, more than a plan can address: give a smaller shape", cta,
          cta_total, to_string(c.ir_inject)));
    s.draw.iterations.push_back(static_cast<int>(cta_total));
  }
  if (s.total() == 0)
    throw ConfigError(fmt::format(
        "no thread of {} runs an instance of {} on this problem (or the kernel was built without "
        "the IR instrumentation)",
        c.name(), to_string(c.ir_inject)));
  return s;
}

std::unique_ptr<TrialBackend> locating_backend(TrialBackend& inner, const IrSpace& space) {
  return std::make_unique<LocatingBackend>(inner, space);
}

}  // namespace ftattn::campaign
