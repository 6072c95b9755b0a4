#include "runtime/protected_launch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>

#include "ftattn/protect/workspace.cuh"
#include "runtime/fault_plan.hpp"
#include "runtime/prepared_kv.hpp"

namespace ftattn::runtime {

// Relative to the bounds the kernel forms (|q| sum|k| for S, but efta_correct's 16-bit check
// below; for the 16-bit kernels' O check,
// (blocks + 16) * (sum |o| + |checksum|) + l * max sum |v|, the running values' magnitudes grown
// per 128-key block plus the bound once: fwd_sm80.cuh's check_output). Derived from the rounding
// of what each check compares: FP32 tensor-core accumulation (about 2^-23 per step over
// head_dim / 16 MMAs) and the hi + lo split of the 16-bit checksum operands (2^-22 of the
// checksum for f16, 2^-16 for bf16), then calibrated: the O defaults sit 2.6x (f16, f16_pasa)
// and 3.4x (bf16) over the largest value clean runs needed on the H100 (head dims 64-256, both
// masks, 1k-16k keys, five distributions: bench/results/nvidia-h100/output_calibration.csv). The
// row sum (EFTA) compares the ones column, a sum of 16-bit P, with the FP32 sum of the unrounded
// P: half an ulp per term (2^-11 for f16, 2^-8 for bf16) plus 1e-4 of FP32 accumulation.
// efta_correct's GEMM I check is relative to sum |s| + |q| sum |k| / sqrt(head_dim)
// (protect/checks.cuh, scores_within): clean runs needed at most 4.3e-7 (f16) and 3.0e-6
// (bf16) on the H100 (head dims 64-256, both masks, 1k-8k keys, block_n 64 and 128, five
// distributions: bench/results/nvidia-h100/calibration_scores.csv), so the defaults sit 4.6x
// and 4.9x above. bf16's is larger because its checksum's hi + lo split keeps 16 bits, and that
// error follows |q| |sum of k|, which the bound does not carry; measured against |q| sum |k| (the
// bound before), bf16's default is about what it was, f16's about six times tighter.
Thresholds default_thresholds(Precision precision) {
  if (precision == Precision::bf16) return {1.5e-5f, 1e-4f, 5e-7f, 0x1p-8f + 1e-4f};
  // fp8's l check compares the unrounded P with the E4M3 P: half an ulp, 2^-4, per term.
  if (precision == Precision::fp8_e4m3) return {2e-6f, 2e-5f, 2e-7f, 0x1p-4f + 1e-4f};
  // f16_pasa: the tensor cores accumulate S'' = Q K'^T in FP16, rounding each running sum to f16
  // (half an ulp: 2^-11 of it) once per 16-wide k-step, while its checksum is Q times the K'
  // checksum rows with FP32 accumulation. The kernel bounds the check by tol_scores *
  // (head_dim / 16 + 2) * (sum |S''| + |q| sum |k'| / sqrt(head_dim)) + floor: the running sums
  // grow like the scores where q and k' line up, like a random walk where they cancel. One f16
  // rounding (2^-11) is the worst case; clean runs need at most 6.8e-5 (H100, d64-d128, both
  // masks, 1000-4096 keys with tail blocks, five distributions, 50 runs:
  // bench/results/nvidia-h100/pasa_calibration.csv), so the default is 2e-4, 3x above that.
  // Score flips below it move a score by less than about 0.1 (base 2) and are left to the
  // output tolerance. probs and row_sum are unused: PASA's FP16 softmax and l are evaluated
  // twice and compared bit for bit. O is checked by the V checksums as for f16.
  if (precision == Precision::f16_pasa) return {2e-4f, 2e-5f, 1.5e-7f, 0x1p-11f + 1e-4f};
  return {2e-6f, 2e-5f, 1.5e-7f, 0x1p-11f + 1e-4f};
}

Thresholds effective_thresholds(Precision precision, Protection protection,
                                const Thresholds& given) {
  for (float x : {given.scores, given.probs, given.output, given.row_sum})
    if (!(x >= 0.0f && x < 1e30f))
      throw ConfigError(fmt::format(
          "threshold {} is not usable: give a positive, finite value (0 takes the default)", x));
  if (protection == Protection::decoupled) return given;
  Thresholds t = default_thresholds(precision);
  if (given.scores > 0) t.scores = given.scores;
  if (given.probs > 0) t.probs = given.probs;
  if (given.output > 0) t.output = given.output;
  if (given.row_sum > 0) t.row_sum = given.row_sum;
  return t;
}

void check_protect_options(const KernelConfig& config, const ProtectOptions& options) {
  // Enum values from outside their lists (an on_fault would act as recompute) throw here.
  (void)to_string(options.on_fault);
  // The log is on the device: a million records is 32 MB, past any use of the first few.
  constexpr int kMaxEvents = 1 << 20;
  if (options.max_events < 0 || options.max_events > kMaxEvents)
    throw ConfigError(fmt::format(
        "ProtectOptions::max_events {} is outside 0..{}: the counts cover every detection, the "
        "records only the first few",
        options.max_events, kMaxEvents));
  // No checks (and no DMR counting into the log): a policy or thresholds would act on nothing,
  // and the empty report would read clean.
  const Thresholds& t = options.thresholds;
  const bool thresholds =
      t.scores != 0.0f || t.probs != 0.0f || t.output != 0.0f || t.row_sum != 0.0f;
  if (config.protection == Protection::none && config.ir_harden == IrClass::none &&
      (options.on_fault != OnFault::report || thresholds))
    throw ConfigError(fmt::format(
        "{} has protection none: nothing is checked, so on_fault {} and thresholds have nothing "
        "to act on; set KernelConfig::protection (flash_abft, efta_detect, efta_correct, "
        "decoupled) or leave them at their defaults",
        config.name(), to_string(options.on_fault)));
  // Thresholds out of range (negative, NaN) are refused here too, before any GPU work.
  (void)effective_thresholds(config.precision, config.protection, options.thresholds);
  if (options.inject) check_plan_fields(config, *options.inject);
}

void ProtectedLauncher::prepare(CUfunction prologue, const KernelConfig& config,
                                const Problem& problem, AttentionParams& params, CUstream stream,
                                const ProtectOptions& options, const PreparedKv::State* prepared,
                                bool reset_log) {
  const DriverApi& api = driver();
  check_protect_options(config, options);
  // Every launch path (fused, decoupled, 8-bit) comes here with its plan and problem.
  if (options.inject) check_fault_plan(config, problem, *options.inject);
  // The log: counters reset on the stream; capacity written once per size.
  const unsigned capacity = static_cast<unsigned>(options.max_events);
  const std::size_t log_bytes = sizeof(FaultLog) + capacity * sizeof(FaultRecord);
  if (log_.bytes() < log_bytes || capacity_ != capacity) {
    log_ = DeviceBuffer(log_bytes);
    FaultLog header{0, 0, 0, capacity};
    log_.upload(&header, sizeof header);
    capacity_ = capacity;
  }
  // Kernel::launch reads no log, so it leaves the counters as they are: the reset is a memset on
  // the stream before every kernel, and without it Flash-ABFT's overhead at 2k-4k keys fell by
  // 0.2-0.5 points (H100, abft_no_log_reset_ab.csv). run() resets, then reads.
  if (reset_log)
    check(api.cuMemsetD8Async(log_.ptr(), 0, offsetof(FaultLog, capacity), stream),  // counters
          "cuMemsetD8Async");
  params.fault_log = static_cast<FaultLog*>(log_.data());

  const Thresholds t =
      effective_thresholds(config.precision, config.protection, options.thresholds);
  params.tol_scores = t.scores;
  params.tol_probs = t.probs;
  params.tol_output = t.output;
  params.tol_row_sum = t.row_sum;
  params.tol_floor = 1e-6f;

  if (options.inject) {
    const FaultPlan& f = *options.inject;
    params.fault =
        FaultPlanParams{static_cast<int>(f.site), f.cta, f.thread, f.iteration, f.element, f.bit};
  } else {
    params.fault = FaultPlanParams{};
  }

  // Checksums prepared earlier for this K and V: no prologue.
  if (prepared != nullptr && prepared->checksums.bytes() > 0) {
    params.checksums = prepared->checksums.data();
    return;
  }
  // No prologue: the kernel's checksums come from elsewhere (int8's digit rows, built by the
  // quantised kernel object), or there are none.
  if (prologue == nullptr) return;
  const ChecksumWorkspace w = workspace_layout(config, problem);
  if (w.bytes == 0) return;
  if (workspace_.bytes() < static_cast<std::size_t>(w.bytes))
    workspace_ = DeviceBuffer(static_cast<std::size_t>(w.bytes));
  params.checksums = workspace_.data();
  enqueue_prologue(prologue, config, problem, params, w, stream);
}

ChecksumWorkspace ProtectedLauncher::workspace_layout(const KernelConfig& config,
                                                      const Problem& problem) {
  const ChecksumAtoms atoms = checksum_atoms(config.protection);
  return checksum_workspace(problem.batch, problem.heads_kv, problem.seqlen_k, config.head_dim,
                            config.block_n, atoms.k, atoms.v);
}

void ProtectedLauncher::enqueue_prologue(CUfunction prologue, const KernelConfig& config,
                                         const Problem& problem, const AttentionParams& params,
                                         const ChecksumWorkspace& w, CUstream stream) {
  // The V maxima are built with atomicMax from zero.
  const CUdeviceptr base = reinterpret_cast<CUdeviceptr>(params.checksums);
  check(driver().cuMemsetD8Async(base + w.vmax_offset, 0,
                                 static_cast<std::size_t>(w.bytes - w.vmax_offset), stream),
        "cuMemsetD8Async");
  // The plan is the attention kernel's: the prologue has no source-level sites, and IR-level
  // instance counts are the attention kernel's alone (else a plan would flip in both kernels).
  AttentionParams prologue_params = params;
  prologue_params.fault = FaultPlanParams{};
  void* args[] = {&prologue_params};
  launch(prologue,
         Dim3{static_cast<unsigned>(w.n_blocks), static_cast<unsigned>(problem.heads_kv),
              static_cast<unsigned>(problem.batch)},
         // The prologue's CTA is num_warps warps (Traits::threads), also where the attention
         // kernel's has a producer warpgroup on top.
         Dim3{static_cast<unsigned>(32 * config.num_warps), 1, 1}, 0, stream, args);
}

void ProtectedLauncher::encode_checksums(CUfunction prologue, const KernelConfig& config,
                                         const Problem& problem, const AttentionParams& params,
                                         DeviceBuffer& into, CUstream stream) {
  const ChecksumWorkspace w = workspace_layout(config, problem);
  if (prologue == nullptr || w.bytes == 0) return;
  into = DeviceBuffer(static_cast<std::size_t>(w.bytes));
  AttentionParams p = params;
  p.checksums = into.data();
  enqueue_prologue(prologue, config, problem, p, w, stream);
}

void ProtectedLauncher::set_tiles(AttentionParams& params, const std::vector<int>& tiles) {
  const std::size_t bytes = tiles.size() * sizeof(int);
  if (tiles_.bytes() < bytes) tiles_ = DeviceBuffer(bytes);
  tiles_.upload(tiles.data(), bytes);
  params.tile_list = static_cast<const int*>(tiles_.data());
  params.tile_count = static_cast<int>(tiles.size() / 3);
}

FaultReport ProtectedLauncher::settle(FaultReport report, OnFault on_fault,
                                      const KernelConfig& config, const Problem& problem,
                                      AttentionParams& params, CUstream stream,
                                      const std::function<void(AttentionParams&)>& relaunch) {
  const bool uncorrected = report.detected > report.corrected;
  if (!uncorrected || on_fault == OnFault::report) return report;
  if (on_fault == OnFault::raise) throw FaultError(config.name() + ": " + report.summary());

  // Recompute: every tile with an uncorrected detection; all tiles when the log overflowed
  // and some detections went unrecorded.
  std::vector<int> tiles;
  if (report.events.size() >= report.detected) {
    for (const FaultEvent& e : report.events) {
      if (e.corrected) continue;
      const int tile[3] = {query_tile_of_row(config, problem.seqlen_q, e.row), e.head, e.batch};
      bool seen = false;
      for (size_t i = 0; i < tiles.size() && !seen; i += 3)
        seen = std::equal(tile, tile + 3, tiles.begin() + i);
      if (!seen) tiles.insert(tiles.end(), tile, tile + 3);
    }
  } else {  // the log overflowed: some detections are unlocated, so every tile
    const int m_blocks = (problem.seqlen_q + config.block_m - 1) / config.block_m;
    for (int b = 0; b < problem.batch; ++b)
      for (int h = 0; h < problem.heads_q; ++h)
        for (int m = 0; m < m_blocks; ++m) tiles.insert(tiles.end(), {m, h, b});
  }
  set_tiles(params, tiles);
  relaunch(params);
  FaultReport again = collect(stream);
  // Decoupled's three kernels recompute the whole problem whatever the list says.
  report.recomputed_tiles = config.protection == Protection::decoupled
                                ? problem.batch * problem.heads_q *
                                      ((problem.seqlen_q + config.block_m - 1) / config.block_m)
                                : static_cast<int>(tiles.size() / 3);
  report.unresolved = again.detected > again.corrected ? again.detected - again.corrected : 0;
  // What the relaunch itself detected stays visible.
  report.detected += again.detected;
  report.corrected += again.corrected;
  report.events.insert(report.events.end(), again.events.begin(), again.events.end());
  return report;
}

FaultReport ProtectedLauncher::collect(CUstream stream) const {
  const DriverApi& api = driver();
  check(api.cuStreamSynchronize(stream), "cuStreamSynchronize");
  FaultLog header{};
  log_.download(&header, sizeof header);
  FaultReport report;
  report.detected = header.detected;
  report.corrected = header.corrected;
  const unsigned n = std::min(header.recorded, capacity_);
  if (n > 0) {
    std::vector<unsigned char> raw(sizeof(FaultLog) + n * sizeof(FaultRecord));
    log_.download(raw.data(), raw.size());
    const auto* records = reinterpret_cast<const FaultRecord*>(raw.data() + sizeof(FaultLog));
    // The kernels' stage ids (params.cuh) are the host's FaultStage values.
    static_assert(static_cast<int>(FaultStage::scores) == fault_stage_scores &&
                  static_cast<int>(FaultStage::probs) == fault_stage_probs &&
                  static_cast<int>(FaultStage::row_sum) == fault_stage_row_sum &&
                  static_cast<int>(FaultStage::output) == fault_stage_output &&
                  static_cast<int>(FaultStage::row_max) == fault_stage_row_max);
    for (unsigned i = 0; i < n; ++i) {
      const FaultRecord& r = records[i];
      report.events.push_back(FaultEvent{r.batch, r.head, r.row, r.col,
                                         static_cast<FaultStage>(r.stage), r.corrected != 0,
                                         r.magnitude, r.threshold});
    }
  }
  return report;
}

}  // namespace ftattn::runtime
