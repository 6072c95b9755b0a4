// IR-level campaigns (FaultSite::ir): single bit flips on dynamic instances of the instruction
// class a kernel was instrumented for (KernelConfig::ir_inject, the LLVM route), drawn uniformly
// over the instances the kernel actually executes on the campaign's problem.
//
// The kernel tells how many instances a thread runs: a plan with iteration < 0 makes the planned
// thread add its count to FaultReport::detected instead of flipping anything. A campaign counts
// some threads of every CTA that way (IrCount), assumes the rest, then draws (CTA, thread,
// instance) triples with the same trial loop, tolerance and tables as the source-level sites.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "ftattn/campaign.hpp"

namespace ftattn::campaign {

// Which threads of each CTA get a counting launch. The uncounted ones are assumed to run as many
// instances as the counted thread they share a warp (warp) or CTA (cta) with. SIMT code of one
// warp mostly runs in step, so `warp` is exact unless lanes take data-dependent branches of
// different lengths; where an assumed count is too high, the instances past the real end never
// flip (read as masked), where too low, the last ones are never drawn. `thread` counts every
// thread (exact, CTAs x threads launches).
enum class IrCount { cta, warp, thread };
std::string_view to_string(IrCount c);
IrCount parse_ir_count(std::string_view text);  // "cta", "warp", "thread"; ConfigError otherwise

// Dynamic instances that thread `thread` of CTA `cta` (linear, as FaultPlan counts them) executes.
using InstanceCounter = std::function<long long(int cta, int thread)>;

// Counts through a backend: one launch of FaultPlan{site = ir, cta, thread, iteration = -1} each,
// minus `baseline_detected`, the detections of a fault-free run (a protection scheme's or DMR's
// false alarms, which land in the same counter).
InstanceCounter counting_launches(TrialBackend& backend, uint64_t baseline_detected);

// The space of an IR-level campaign. plan_trial draws from `draw`: one "thread" per CTA and as
// many iterations as all threads of the CTA run together, so a draw is uniform over every
// instance of the launch; locate() turns it into the real (CTA, thread, instance).
struct IrSpace {
  InjectionSpace draw;
  int threads = 0;                   // per CTA
  std::vector<long long> instances;  // per CTA and thread (CTA-major), as counted or assumed
  long long launches = 0;            // counting launches it took
  long long total() const { return draw.total_iterations(); }
  FaultPlan locate(const FaultPlan& drawn) const;
};

// The fused kernel's grid (batch x heads_q x query blocks CTAs, 32 x num_warps threads) counted
// with `count`. ConfigError when the config has no IR instrumentation, runs separate kernels
// (decoupled), or the instrumented class never runs on this problem.
IrSpace ir_injection_space(const KernelConfig& config, const Problem& problem,
                           const InstanceCounter& count, IrCount mode = IrCount::warp);

// A backend that locates the plans drawn from `space.draw` before `inner` runs them. Both must
// outlive it.
std::unique_ptr<TrialBackend> locating_backend(TrialBackend& inner, const IrSpace& space);

}  // namespace ftattn::campaign
