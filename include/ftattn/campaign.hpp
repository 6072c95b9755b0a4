// Fault-injection campaigns: plan single-bit flips, run them, classify each trial against the
// fault-free output, and count false alarms on clean inputs.
//
// The classification and planning are pure functions (no GPU). Running trials goes through a
// TrialBackend, so other injection mechanisms (IR-level, FaultSite::ir) reuse the same loop,
// tolerance and tables.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "ftattn/config.hpp"
#include "ftattn/fault.hpp"
#include "ftattn/reference.hpp"
#include "ftattn/runtime.hpp"

namespace ftattn::campaign {

// What one injected fault did.
enum class Outcome {
  masked,          // no detection, output within tolerance
  corrected,       // detected, fixed by the kernel (or by recompute), output within tolerance
  detected,        // detected, output beyond tolerance (the caller was told)
  sdc,             // silent data corruption: no detection, output beyond tolerance
  false_positive,  // detected, nothing corrected, output within tolerance anyway
  // Output beyond tolerance, yet the report says all was fixed: every detection reported
  // corrected (no tile recomputed), or a recompute that left none unresolved. The caller is
  // misled. Apart from `detected`, where a detection left uncorrected tells the caller.
  miscorrected,
};
inline constexpr std::array kOutcomes = {Outcome::masked,         Outcome::corrected,
                                         Outcome::detected,       Outcome::sdc,
                                         Outcome::false_positive, Outcome::miscorrected};
std::string_view to_string(Outcome o);

// Site names as the command line spells them ("scores", "row_sum", ...); parse_site throws
// ConfigError listing them.
std::string_view site_name(FaultSite s);
FaultSite parse_site(std::string_view text);
// Every source-level site the kernel of `config` can take (`--site all`): decoupled's six, the
// fused kernels' scores, probs, row_max, row_sum, rescale and output, their checksums where a
// scheme carries any, and the mma.sync int8 kernel's per-block INT32 P V (the wgmma one
// accumulates P V onto O). `config` resolved: its tile decides the skeleton.
std::vector<FaultSite> sites_of(const KernelConfig& config);

// What the harness saw after one trial.
struct Observation {
  uint64_t detected = 0;         // FaultReport::detected
  uint64_t corrected = 0;        // FaultReport::corrected
  int recomputed_tiles = 0;      // FaultReport::recomputed_tiles
  bool within_tolerance = true;  // the output and the LSE
  uint64_t unresolved = 0;       // FaultReport::unresolved: what a recompute left uncorrected
};
Outcome classify(const Observation& seen);

// Per-element tolerance of a faulty output against the fault-free one:
//   |faulty - clean| <= max(|clean - ref|, ulp(ref))
// i.e. a fault is harmless when it moves no element further than the kernel's own error against
// the FP64 reference, or than one unit in the last place of the output type at that magnitude
// (the storage granularity: a tiny perturbation of an FP32 accumulator may flip the final
// rounding by one ulp). Then |faulty - ref| <= 2 max(|clean - ref|, ulp): no worse than twice
// what the unprotected kernel itself delivers, element by element.
float ulp(double magnitude, Precision p);  // spacing of 16-bit values at |magnitude|
//
// Unless `strict`, every element also tolerates accuracy_bar(p, problem) * rms(ref): the
// relative L2 error reference::check accepts from a fault-free kernel of that precision (2e-3
// f16, 1e-2 bf16, 5e-3 f16_pasa, 5e-2 int8, 1e-1 fp8_e4m3), spread over the elements. A fault
// inside it leaves an output that would pass the same accuracy check. The strict form counts a
// two-ulp change of one element as corruption.
std::vector<float> element_tolerance(const std::vector<float>& clean,
                                     const std::vector<double>& ref, Precision p,
                                     const Problem& problem, bool strict = false);
double accuracy_bar(Precision p, const Problem& problem);  // reference::tolerance(p, ...).rel_l2

struct Deviation {
  // Elements beyond their tolerance. An element equal to its fault-free value (an infinite one
  // included) never is; a NaN always is, and so is a finite one that turned non-finite.
  long long over = 0;
  double max_abs = 0.0;  // largest |faulty - clean| (inf when an element turned non-finite)
  bool within() const { return over == 0; }
};
Deviation deviation(const float* faulty, const float* clean, const float* tolerance, size_t n);

// "lo:hi" with 0 <= lo <= hi <= 31, or one bit "b". ConfigError otherwise.
struct BitRange {
  int lo = 0, hi = 31;
  static BitRange parse(std::string_view text);
};

// Where a site's faults can land in one kernel launch: its CTAs (linear index, as FaultPlan
// counts them) and how many iterations of the site each CTA runs. A fault lands on a (CTA,
// iteration) pair drawn uniformly, so CTAs weigh by the work they do; CTAs with no iteration are
// never picked. `elements` is the number of values of the class a thread holds; 0: unknown (the
// kernel reduces the plan's element modulo its own count).
struct InjectionSpace {
  std::vector<int> iterations;  // per CTA
  int threads = 0;
  int elements = 0;
  long long total_iterations() const;
};

// The space of `site` for the source-level injection of `config` on `problem`: the fused kernel's
// grid for the fused schemes, the three kernels of the decoupled baseline for `decoupled`.
// ConfigError when the site does not exist there or no CTA runs it.
InjectionSpace injection_space(const KernelConfig& config, const Problem& problem, FaultSite site);

// Trial `index` of a campaign, reproducible from (seed, index) alone: trials can be replayed one
// by one.
FaultPlan plan_trial(const InjectionSpace& space, FaultSite site, BitRange bits, uint64_t seed,
                     uint64_t index);

// Counts per outcome, with an exact one-sided 95% upper bound on each rate (for an outcome never
// seen, this is what "0 of N" actually supports).
struct Tally {
  std::array<long long, kOutcomes.size()> counts{};
  long long trials = 0;
  void add(Outcome o);
  long long count(Outcome o) const;
  double share(Outcome o) const;
};
// Clopper-Pearson: the largest rate p with P(X <= hits | n, p) >= 5%, which covers the true rate
// at least 95% of the time (Wilson's falls ~10% short at 0 of n): 0 of n gives 1 - 0.05^(1/n),
// about 3/n.
double clopper_pearson_upper_95(long long hits, long long n);

// Input distributions of the false-alarm mode: standard normal, and the uniform and hybrid
// (normal plus rare large outliers) generators of PASA, unbiased and biased (nonzero mean).
enum class Distribution { normal, uniform, uniform_biased, hybrid, hybrid_biased };
inline constexpr std::array kDistributions = {Distribution::normal, Distribution::uniform,
                                              Distribution::uniform_biased, Distribution::hybrid,
                                              Distribution::hybrid_biased};
std::string_view to_string(Distribution d);  // with its parameters, e.g. "uniform(x0=20,Am=0.5)"
reference::Tensor16 random_tensor(Distribution d, std::mt19937_64& rng, Precision p,
                                  const Strides& strides, int batch, int heads, int seqlen,
                                  int head_dim);
// PASA's generators with any bias and amplitude (the biased distributions above are x0 = 20;
// PASA's overflow cases are uniform(30, 0.5) and hybrid(30, 10)): uniform U(x0 - Am, x0 + Am),
// hybrid N(x0, 1) + N(0, Am^2) * Bernoulli(0.001).
reference::Tensor16 pasa_tensor(bool uniform, double x0, double am, std::mt19937_64& rng,
                                Precision p, const Strides& strides, int batch, int heads,
                                int seqlen, int head_dim);

// FP64 reference of the whole output, dense batch x heads_q x seqlen_q x head_dim (threads over
// rows).
std::vector<double> reference_output(const Problem& problem, Precision p, Mask mask,
                                     const reference::Tensor16& q, const reference::Tensor16& k,
                                     const reference::Tensor16& v);
// A kernel output in the problem's strides -> dense floats in the same order.
std::vector<float> dense_output(const Problem& problem, Precision p, const reference::Tensor16& o);

// One way of running the kernel under test with or without a fault.
class TrialBackend {
 public:
  virtual ~TrialBackend() = default;
  // Runs once (no plan: fault-free), returns the kernel's report, the output as dense floats
  // (batch x heads_q x seqlen_q x head_dim) and the log-sum-exp (batch x heads_q x seqlen_q):
  // a fault may move the LSE alone (a row max in a CTA's last key block).
  virtual FaultReport run(const std::optional<FaultPlan>& plan, std::vector<float>& output,
                          std::vector<float>& lse) = 0;
  // The same for a caller that does not look at the LSE.
  FaultReport run(const std::optional<FaultPlan>& plan, std::vector<float>& output);
};

// The source-level backend: Runtime::attention on inputs uploaded once, the plan passed as
// ProtectOptions::inject (the config must have fault_injection, or ir_inject for FaultSite::ir:
// see campaign_ir.hpp), a readback of the output and the LSE (both NaN-filled before each
// launch) per trial. `config` is complete. A config
// without injection points (the production kernel) runs clean trials only: a plan is refused.
std::unique_ptr<TrialBackend> source_backend(Runtime& runtime, const KernelConfig& config,
                                             const Problem& problem, const reference::Tensor16& q,
                                             const reference::Tensor16& k,
                                             const reference::Tensor16& v, OnFault on_fault,
                                             const Thresholds& thresholds = {});

// False alarms: `runs` clean launches of `config` (no injection), cycling through the
// distributions with fresh inputs each run, counting the runs the kernel flagged.
struct FalseAlarms {
  Distribution distribution = Distribution::normal;
  int runs = 0;
  int flagged = 0;  // runs with at least one detection
  long long detected = 0, corrected = 0;
};
std::vector<FalseAlarms> count_false_alarms(Runtime& runtime, const KernelConfig& config,
                                            const Problem& problem, int runs, uint64_t seed,
                                            const Thresholds& thresholds = {});

// The thresholds a protected kernel of `config` runs with: `given`, 0 fields at the defaults
// (the decoupled baseline: 0 fields at its own derived tolerance, reported as 0).
Thresholds thresholds_in_use(const KernelConfig& config, const Thresholds& given);

// Threshold calibration on clean inputs: per distribution, the smallest value of each check's
// threshold that `runs` clean launches of `config` pass without an alarm (the largest residual
// seen, in the threshold's own units). The linear checks (scores, row_sum, output) in one launch
// per input, set far below any residual with every record kept: each record's magnitude /
// threshold gives the value that input needs. The product check (probs), whose tolerance is an
// exp2 of its threshold, by bisection per input with the other checks out of the way. 0 for a
// check the kernel does not have or that never fired, inf for one that fires at any useful value
// (1e-1); `truncated` when the log overflowed.
struct Calibration {
  Distribution distribution = Distribution::normal;
  int runs = 0;
  Thresholds needed;  // max over runs of the smallest alarm-free value, per check
  long long records = 0;
  bool truncated = false;
};
std::vector<Calibration> calibrate_thresholds(Runtime& runtime, const KernelConfig& config,
                                              const Problem& problem, int runs, uint64_t seed);

// The fault-free run trials are classified against.
struct Baseline {
  FaultReport report;              // its detections are false alarms at these thresholds
  std::vector<float> output, lse;  // as TrialBackend::run gives them
  std::vector<float> tolerance;    // per output element (element_tolerance)
  // Per LSE row: reference::tolerance(p, problem).lse on |lse - clean lse|. A -inf row (it sees
  // no key) must stay -inf.
  std::vector<float> lse_tolerance;
  reference::CheckReport check;  // the output and LSE against the FP64 reference
  bool deterministic = true;     // a second fault-free run gave the same output and LSE
};

// Runs `backend` fault-free twice and builds the tolerances on the FP64 reference of the inputs
// it runs. Error when the fault-free output or LSE fails reference::check (on up to 1024 rows,
// every element and LSE entry scanned for values no row can have): a tolerance built on a wrong
// output would judge faults against the wrong answer.
Baseline make_baseline(TrialBackend& backend, const Problem& problem, Precision p, Mask mask,
                       const reference::Tensor16& q, const reference::Tensor16& k,
                       const reference::Tensor16& v, bool strict = false);

struct TrialResult {
  uint64_t index = 0;
  FaultPlan plan;
  Outcome outcome = Outcome::masked;
  FaultReport report;
  Deviation deviation;      // of the output
  Deviation lse_deviation;  // of the LSE
};

struct CampaignOptions {
  FaultSite site = FaultSite::scores;
  long long trials = 1000;
  BitRange bits;
  uint64_t seed = 1;
  // A fault-free run with detections is refused (every trial would inherit them: masked read as
  // false_positive, sdc as detected). Set, trials are classified by what they report beyond the
  // fault-free run: its detections, corrections, recomputed tiles and unresolved detections
  // subtracted.
  bool allow_clean_alarms = false;
};

// ConfigError naming the fault-free run's detections unless they are none or `allowed`.
void check_clean_alarms(const FaultReport& clean, bool allowed);

struct CampaignResult {
  Tally tally;
  std::vector<TrialResult> trials;
  double seconds = 0.0;
};

// Runs the trials on `backend` against the fault-free run `baseline`: a trial is within
// tolerance when its output and its LSE are. `progress` (may be empty) is called after each
// trial.
CampaignResult run_campaign(TrialBackend& backend, const InjectionSpace& space,
                            const Baseline& baseline, const CampaignOptions& options,
                            const std::function<void(const TrialResult&)>& progress = {});

// Table and CSV forms of a campaign.
std::string summary_table(const Tally& tally);
std::string trials_csv_header();
std::string trials_csv_row(const TrialResult& t);
// The summary CSV's columns after the caller's own (config, ..., site, bits): trials, the counts,
// sdc_upper95, seconds, then miscorrected and silent_upper95 (sdc + miscorrected), then the
// settings that change the counts; each addition last, so that readers of the older columns, by
// name or position, keep working. Rows appended to a file an older build began keep its layout:
// before_miscorrected counts miscorrected trials as detected, as it did there.
enum class SummaryLayout { before_miscorrected, before_settings, current };
SummaryLayout summary_csv_layout(std::string_view header);  // from a summary CSV's first line

// What a row was run with, beyond its config and site. Empty or unset fields (clean-input rows)
// read "-".
struct SummarySettings {
  std::string on_fault;  // report or recompute
  std::optional<bool> strict;
  std::optional<Thresholds> thresholds;  // in use (thresholds_in_use)
  uint64_t seed = 0;
  int heads_kv = 0;
  std::string ir_count;                       // site ir's counting mode
  std::optional<uint64_t> baseline_detected;  // the fault-free run's detections
};
std::string summary_csv_counts_header(SummaryLayout layout = SummaryLayout::current);
std::string summary_csv_counts(const Tally& tally, double seconds, const SummarySettings& settings,
                               SummaryLayout layout = SummaryLayout::current);

}  // namespace ftattn::campaign
