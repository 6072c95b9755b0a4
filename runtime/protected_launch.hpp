// What a protected launch adds around the attention kernel: the checksum workspace and its
// prologue kernel, the device fault log, thresholds, the injection plan, and reading the log
// back into a FaultReport.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "codegen/checksum_atoms.hpp"
#include "ftattn/config.hpp"
#include "ftattn/fault.hpp"
#include "ftattn/params.cuh"
#include "ftattn/protect/workspace.cuh"
#include "runtime/driver.hpp"
#include "runtime/prepared_kv.hpp"

namespace ftattn::runtime {

// ProtectOptions that cannot act on `config` are a ConfigError: values outside their enum or
// range, and, on a kernel with no checks, a fault policy or thresholds (nothing would be checked,
// and the empty report would read clean). A plan's CTA and iteration depend on the problem too:
// check_fault_plan (runtime/fault_plan.hpp), which prepare() runs.
void check_protect_options(const KernelConfig& config, const ProtectOptions& options);

using codegen::checksum_atoms;
using codegen::ChecksumAtoms;

// The fused schemes' calibrated defaults (README, "Protection").
Thresholds default_thresholds(Precision precision);
// The thresholds a kernel runs with: for the fused schemes the defaults, a nonzero field of
// `given` overriding; the decoupled baseline takes `given` as it is (a 0 field: its own derived
// tolerance, decoupled_tolerance), the fused defaults being 2-50x tighter than its rounding.
// ConfigError for a negative or non-finite field.
Thresholds effective_thresholds(Precision precision, Protection protection,
                                const Thresholds& given);

class ProtectedLauncher {
 public:
  // Fills the protection fields of `params` and enqueues on `stream` what must run before the
  // attention kernel: the log reset (`reset_log`: for a call that reads the log afterwards) and,
  // for checksum schemes, the prologue. `prologue` is the module's checksum kernel (null for
  // schemes without one). `prepared`: work on K and V that options.prepared_kv hands in, already
  // checked to serve this call (prepared_for); its checksums replace the prologue.
  void prepare(CUfunction prologue, const KernelConfig& config, const Problem& problem,
               AttentionParams& params, CUstream stream, const ProtectOptions& options,
               const PreparedKv::State* prepared = nullptr, bool reset_log = true);
  // Kernel::prepare_kv: the prologue alone, on `params`' K and V, into `into` (allocated here);
  // nothing for schemes without one.
  static void encode_checksums(CUfunction prologue, const KernelConfig& config,
                               const Problem& problem, const AttentionParams& params,
                               DeviceBuffer& into, CUstream stream);
  // Uploads a recompute list of (query block, head, batch) triples and points `params` at it.
  void set_tiles(AttentionParams& params, const std::vector<int>& tiles);
  // Waits for `stream`, then reads the log.
  FaultReport collect(CUstream stream) const;
  // Acts on `report` as `on_fault` says: OnFault::raise throws FaultError; OnFault::recompute
  // points `params` at the tiles with an uncorrected detection (every tile when the log
  // overflowed) and calls `relaunch(params)`, which enqueues the kernel again without a fault
  // plan; what that run reports is merged in.
  FaultReport settle(FaultReport report, OnFault on_fault, const KernelConfig& config,
                     const Problem& problem, AttentionParams& params, CUstream stream,
                     const std::function<void(AttentionParams&)>& relaunch);

 private:
  // The checksum workspace of `config` on `problem` (0 bytes: no checksums).
  static ChecksumWorkspace workspace_layout(const KernelConfig& config, const Problem& problem);
  // The prologue into params.checksums, its V maxima zeroed first.
  static void enqueue_prologue(CUfunction prologue, const KernelConfig& config,
                               const Problem& problem, const AttentionParams& params,
                               const ChecksumWorkspace& w, CUstream stream);

  DeviceBuffer workspace_, log_, tiles_;
  unsigned capacity_ = 0;
};

}  // namespace ftattn::runtime
