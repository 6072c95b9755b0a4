// The decoupled baseline (Protection::decoupled): EFTA's three-kernel pipeline, launched one
// kernel after the other on the caller's stream, with S and P in a global workspace.
//   1. scores:  S = scale * Q K^T, a checked GEMM (tensor checksums on K^T), masked, FP32 out
//   2. softmax: P = softmax(S) row by row with DMR (computed twice, compared, recomputed)
//   3. output:  O = P V, a checked GEMM (tensor checksums on V)
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "codegen/decoupled_source.hpp"
#include "ftattn/campaign.hpp"
#include "ftattn/config.hpp"
#include "ftattn/runtime.hpp"
#include "runtime/driver.hpp"

namespace ftattn {
struct AttentionParams;  // ftattn/params.cuh (templates/)
}  // namespace ftattn

namespace ftattn::runtime {

// Default checksum threshold of a checked GEMM over k terms, relative to the sum of absolute
// contributions (used when AttentionParams leaves tol_scores / tol_output at 0).
float decoupled_tolerance(Precision p, int k);

// The workspace of one problem: S (FP32) and P (16-bit), batch x heads_q x seqlen_q rows of
// `row_elements` each.
struct DecoupledWorkspace {
  int64_t row_elements = 0;  // seqlen_k rounded up to DecoupledTiles::row_pad
  std::size_t s_bytes = 0, p_bytes = 0;
  std::size_t bytes() const { return s_bytes + p_bytes; }
};
// Throws ConfigError when the sizes overflow.
DecoupledWorkspace decoupled_workspace(const Problem& problem);

// Where each FaultSite lands in the decoupled kernels: scores and checksum in the scores GEMM
// (its S and c1 accumulators, iteration = k step), row_max, row_sum and probs in the softmax
// (the first of the two redundant copies, iteration = 128-key chunk), output in the output GEMM
// (its O accumulator, iteration = k step). ConfigError for rescale and ir.
campaign::InjectionSpace decoupled_injection_space(const KernelConfig& config,
                                                   const Problem& problem, FaultSite site);

// The kernel that takes `site`'s faults, as a plan addresses it: its name, how its CTAs are
// numbered and what an iteration is there (for messages), and its CTA's threads. ConfigError for
// a site the three do not have.
struct DecoupledSiteKernel {
  const char* name = "";
  const char* order = "";
  const char* iteration = "";
  int threads = 0;
};
DecoupledSiteKernel decoupled_site_kernel(const KernelConfig& config, FaultSite site);
// Its CTAs on `problem`, linear as FaultPlan::cta counts them.
long long decoupled_site_ctas(const KernelConfig& config, const Problem& problem, FaultSite site);
// The iterations of `site` thread `thread` of CTA `cta` runs: 0 for a GEMM tile above every row's
// diagonal, or a softmax warp past the last row.
int decoupled_site_iterations(const KernelConfig& config, const Problem& problem, FaultSite site,
                              long long cta, int thread);

// Launches the three kernels of a loaded decoupled module. Keeps one workspace, grown on demand:
// launches of one kernel object must not overlap in time (the baseline is for benchmarks and
// tests; give each stream its own Runtime to run them concurrently).
class DecoupledLauncher {
 public:
  void launch(const Module& module, const std::string& symbol, const KernelConfig& config,
              const Problem& problem, const AttentionParams& params, CUstream stream) const;

 private:
  mutable std::mutex mutex_;
  mutable DeviceBuffer workspace_;
};

}  // namespace ftattn::runtime
