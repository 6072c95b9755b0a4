// Where a FaultPlan can land: the CTAs of the launch that takes its site and the iterations each
// of them runs. A plan outside them flips nothing, and a campaign would count the trial as a
// masked fault, so every launch path refuses it (ProtectedLauncher::prepare) before GPU work.
#pragma once

#include "ftattn/config.hpp"
#include "ftattn/fault.hpp"

namespace ftattn::runtime {

// The fused kernels' grid (m_blocks, heads_q, batch): its CTAs, counted as FaultPlan::cta counts
// them. Persistent tiles walk a grid of their own size, but never with a plan: their kernels have
// no injection points (persistent_tiles), and the LLVM route builds no warp-specialised kernel.
long long fused_ctas(const KernelConfig& config, const Problem& problem);
// The key blocks CTA `cta` of that grid runs: ceil(seqlen_k / block_n), fewer on causal tiles
// (the grid runs them longest first). A block-sparse mask skips the blocks it leaves out, which
// only the mask on the device knows: for those masks this is an upper bound.
int fused_key_blocks(const KernelConfig& config, const Problem& problem, long long cta);

// The plan's fields against what `config` alone decides: a site the kernel has, a thread of its
// CTA, a bit of 0..31, no negative CTA, iteration or element. check_protect_options' part.
void check_plan_fields(const KernelConfig& config, const FaultPlan& plan);

// Every field of `plan` for a launch of `config` on `problem`: check_plan_fields, then a CTA of
// the grid that takes the site and an iteration that CTA (a decoupled softmax: that thread's row)
// runs. Site ir counts dynamic instances, known only from counting launches (campaign_ir), so
// its iteration has no bound here. ConfigError naming the field, its bound and what to change.
void check_fault_plan(const KernelConfig& config, const Problem& problem, const FaultPlan& plan);

}  // namespace ftattn::runtime
