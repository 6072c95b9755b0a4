// ftattn inject: fault-injection campaigns. One compile, inputs and the fault-free output made
// once, then one launch and one output readback per trial; each trial classified against the
// fault-free output (campaign.hpp says how). Also counts false alarms on clean inputs.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "ftattn/campaign.hpp"
#include "ftattn/campaign_ir.hpp"
#include "ftattn/errors.hpp"
#include "tools/ftattn/commands.hpp"
#include "tools/ftattn/config_flags.hpp"
#include "tools/ftattn/device_run.hpp"
#include "tools/ftattn/number_checks.hpp"
#include "tools/ftattn/output_file.hpp"
#include "tools/ftattn/shapes.hpp"

namespace ftattn::cli {
namespace {

struct InjectOptions {
  ConfigFlags config;
  std::string sites, bits = "0:31", shape = "1,4,1024", csv, summary_csv, on_fault = "report";
  bool strict = false, allow_clean_alarms = false;
  long long trials = 1000;
  int false_alarms = 0, calibrate = 0;
  std::string thresholds, calibration_csv;
  uint64_t seed = 1;
  std::string ir_count = "warp";
};

// "batch,heads,seqlen" or "batch,heads,seqlen,heads_kv".
Problem parse_shape(const std::string& text, int head_dim) {
  std::vector<int> v;
  bool ok = true;
  for (const std::string& part : split_list(text, ',', "--shape")) {
    const int x = positive_int(part);
    ok = ok && x > 0 && x <= (1 << 24);
    v.push_back(x);
  }
  if (!ok || (v.size() != 3 && v.size() != 4))
    throw ConfigError(fmt::format(
        "bad --shape '{}': write batch,heads,seqlen (or batch,heads,seqlen,heads_kv) with "
        "whole numbers from 1 to {} (2^24), e.g. 1,8,1024",
        text, 1 << 24));
  return Problem::bhsd(v[0], v[1], v.size() == 4 ? v[3] : v[1], v[2], v[2], head_dim);
}

// "scores=2e-5,output=1e-7": the checks named, the rest at their defaults.
Thresholds parse_thresholds(const std::string& text) {
  Thresholds t;
  for (const std::string& part : split_list(text, ',', "--thresholds")) {
    const auto eq = part.find('=');
    const std::string name = part.substr(0, eq);
    char* end = nullptr;
    const double x = eq == std::string::npos ? -1.0 : std::strtod(part.c_str() + eq + 1, &end);
    float* field = name == "scores"    ? &t.scores
                   : name == "probs"   ? &t.probs
                   : name == "output"  ? &t.output
                   : name == "row_sum" ? &t.row_sum
                                       : nullptr;
    if (field == nullptr || eq == std::string::npos || *end != '\0' || !(x > 0 && x < 1e30))
      throw ConfigError(fmt::format(
          "bad --thresholds part '{}': write check=value with a positive value, checks scores, "
          "probs, output, row_sum (e.g. output=1e-7,row_sum=2e-4)",
          part));
    *field = static_cast<float>(x);
  }
  return t;
}

// Campaigns run on: report (count and classify) or recompute (the runtime relaunches tiles).
OnFault parse_campaign_on_fault(const std::string& text) {
  if (text == "report") return OnFault::report;
  if (text == "recompute") return OnFault::recompute;
  throw ConfigError(fmt::format(
      "bad --on-fault '{}' for a campaign: use report or recompute (throw would end it at the "
      "first detection)",
      text));
}

std::string shape_text(const Problem& p) {
  return fmt::format("{}x{}x{}x{} (kv heads {})", p.batch, p.heads_q, p.seqlen_q, p.head_dim,
                     p.heads_kv);
}

// One row per site (and per false-alarm distribution), appended; the header when the file is new.
// The counts' and settings' columns are campaign.hpp's (each addition last).
class SummaryCsv {
 public:
  explicit SummaryCsv(const std::string& path)
      : out_("--summary-csv", path, OutputFile::Mode::append) {
    if (!out_.is_open() || out_.fresh()) return;  // a new file gets its header with its first row
    // A file an older build began keeps its layout rather than mixing row lengths.
    std::ifstream existing(path);
    std::string header;
    std::getline(existing, header);
    layout_ = campaign::summary_csv_layout(header);
    if (layout_ == campaign::SummaryLayout::before_miscorrected)
      std::cerr << fmt::format(
          "ftattn: warning: {} has no miscorrected column (an older build's file): its new rows "
          "count miscorrected trials as detected and leave out the settings; give a new file to "
          "keep them apart\n",
          path);
    else if (layout_ == campaign::SummaryLayout::before_settings)
      std::cerr << fmt::format(
          "ftattn: warning: {} has no settings columns (an older build's file): its new rows "
          "leave out silent_upper95, the settings and baseline_detected; give a new file to "
          "keep them\n",
          path);
  }
  void add(const KernelConfig& c, const Problem& p, const std::string& site,
           const std::string& bits, const campaign::Tally& t, double seconds,
           const campaign::SummarySettings& settings) {
    if (!out_.is_open()) return;
    if (out_.fresh() && !header_written_) {
      out_.stream() << "config,protection,precision,head_dim,mask,shape,site,bits,"
                    << campaign::summary_csv_counts_header() << "\n";
      header_written_ = true;
    }
    out_.stream() << fmt::format("{},{},{},{},{},{}x{}x{},{},{},{}\n", c.name(),
                                 to_string(c.protection), to_string(c.precision), c.head_dim,
                                 to_string(c.mask), p.batch, p.heads_q, p.seqlen_q, site, bits,
                                 campaign::summary_csv_counts(t, seconds, settings, layout_));
  }
  void commit() { out_.commit(); }

 private:
  OutputFile out_;
  campaign::SummaryLayout layout_ = campaign::SummaryLayout::current;  // the file's own
  bool header_written_ = false;
};

int run_inject(const InjectOptions& o, const GlobalOptions& global) {
  KernelConfig wanted = config_from_flags(o.config);
  if (wanted.head_dim == 0)
    throw ConfigError("inject needs a head_dim: give --head-dim or a kernel name");
  if (o.sites.empty() && o.false_alarms == 0 && o.calibrate == 0)
    throw ConfigError(
        "give --site (a campaign), --false-alarms N (clean runs) or --calibrate N (thresholds "
        "from clean runs)");
  const Thresholds thresholds = parse_thresholds(o.thresholds);
  const campaign::BitRange bits = campaign::BitRange::parse(o.bits);
  std::vector<FaultSite> sites;
  auto add_site = [&](FaultSite site) {  // once each, in the order given
    if (std::find(sites.begin(), sites.end(), site) == sites.end()) sites.push_back(site);
  };
  // "all": every site of the kernel the runtime resolves (which skeleton runs decides), below.
  bool all_sites = false;
  for (const std::string& s : split_list(o.sites, ',', "--site")) {
    if (s == "all")
      all_sites = true;
    else
      add_site(campaign::parse_site(s));
  }
  // IR-level (site ir) and source-level sites need differently built kernels: one kind per run.
  const bool ir = std::find(sites.begin(), sites.end(), FaultSite::ir) != sites.end();
  if (ir && (sites.size() > 1 || all_sites))
    throw ConfigError(
        "--site ir runs alone: IR-level and source-level sites need differently built kernels, "
        "so run them as two commands");
  if (ir && wanted.ir_inject == IrClass::none)
    throw ConfigError(
        "--site ir needs a kernel with IR-level injection points: add --backend llvm --ir-inject "
        "<class> (fp_arith, load, int_arith, exp_max or mma)");
  if ((!sites.empty() || all_sites) && !ir && wanted.ir_inject != IrClass::none)
    throw ConfigError(fmt::format(
        "--ir-inject instruments the kernel for site ir, not for --site {}: use --site ir, or drop "
        "--ir-inject for source-level sites",
        o.sites));
  const campaign::IrCount ir_count = campaign::parse_ir_count(o.ir_count);
  const OnFault on_fault = parse_campaign_on_fault(o.on_fault);
  const Problem problem = parse_shape(o.shape, wanted.head_dim);
  // Before the GPU check, as bench and tune do: a bad head dim or shape is the user's to fix.
  validate_head_dim(wanted.head_dim);
  validate_shape(problem);
  // Opened before any work, so a path that cannot be written fails at once.
  SummaryCsv summary(o.summary_csv);
  OutputFile trials_csv("--csv", o.csv);
  OutputFile calibration_csv("--calibration-csv", o.calibration_csv, OutputFile::Mode::append);
  // With the trials on standard output, the log goes to standard error (as bench does).
  std::ostream& log = o.csv == "-" ? std::cerr : std::cout;

  const std::string device = describe_device();  // "no GPU" before any other work
  Runtime rt(global.runtime_options());
  const KernelConfig clean_config = rt.resolve(wanted, &problem);
  KernelConfig config = clean_config;
  // Source sites need the source hooks; site ir runs the IR instrumentation alone.
  config.fault_injection = !ir;
  validate(problem, config);
  if (all_sites)
    for (FaultSite site : campaign::sites_of(config)) add_site(site);
  log << fmt::format("device    {}\nkernel    {}\nproblem   {}, {}\n", device, config.name(),
                     shape_text(problem), to_string(config.mask));
  int exit_code = 0;

  if (!sites.empty()) {
    // Inputs, FP64 reference and the fault-free output, once.
    std::mt19937_64 rng(o.seed);
    const Precision p = config.precision;
    auto q = reference::random_tensor(rng, p, problem.q, problem.batch, problem.heads_q,
                                      problem.seqlen_q, problem.head_dim);
    auto k = reference::random_tensor(rng, p, problem.k, problem.batch, problem.heads_kv,
                                      problem.seqlen_k, problem.head_dim);
    auto v = reference::random_tensor(rng, p, problem.v, problem.batch, problem.heads_kv,
                                      problem.seqlen_k, problem.head_dim);
    auto backend = campaign::source_backend(rt, config, problem, q, k, v, on_fault, thresholds);
    const campaign::Baseline baseline =
        campaign::make_baseline(*backend, problem, p, config.mask, q, k, v, o.strict);
    const FaultReport& first = baseline.report;
    // Before any trial (or site ir's counting launches): refused unless --allow-clean-alarms.
    campaign::check_clean_alarms(first, o.allow_clean_alarms);
    if (!first.clean())
      std::cerr << fmt::format(
          "ftattn: warning: the fault-free run reported detections ({}): trials are classified "
          "by what they report beyond it (--allow-clean-alarms)\n",
          first.summary());
    if (!baseline.deterministic)
      std::cerr << "ftattn: warning: two fault-free runs differ: the kernel is not "
                   "deterministic, so some masked faults may read as corruption\n";
    log << fmt::format("clean     {}\n", baseline.check.summary());
    if (o.strict)
      log << "tolerance |faulty - clean| <= max(|clean - fp64 reference|, 1 ulp), per element";
    else
      log << fmt::format(
          "tolerance |faulty - clean| <= max(|clean - fp64 reference|, 1 ulp, {:g} x "
          "rms(reference)), per element",
          campaign::accuracy_bar(p, problem));
    log << fmt::format("; |lse - clean lse| <= {:g} per row\n",
                       reference::tolerance(p, problem).lse);
    campaign::SummarySettings settings;
    settings.on_fault = o.on_fault;
    settings.strict = o.strict;
    settings.thresholds = campaign::thresholds_in_use(config, thresholds);
    settings.seed = o.seed;
    settings.heads_kv = problem.heads_kv;
    settings.baseline_detected = first.detected;

    if (trials_csv.is_open()) trials_csv.stream() << campaign::trials_csv_header() << "\n";
    for (FaultSite site : sites) {
      // Site ir: count the dynamic instances first, then draw over them.
      std::optional<campaign::IrSpace> ir_space;
      std::unique_ptr<campaign::TrialBackend> located;
      if (site == FaultSite::ir) {
        const auto start = std::chrono::steady_clock::now();
        ir_space = campaign::ir_injection_space(
            config, problem, campaign::counting_launches(*backend, first.detected), ir_count);
        located = campaign::locating_backend(*backend, *ir_space);
        log << fmt::format(
            "ir space  {} instances of {} over {} CTAs x {} threads ({} counting launches, one "
            "per {}, {:.1f} s)\n",
            ir_space->total(), to_string(config.ir_inject), ir_space->draw.iterations.size(),
            ir_space->threads, ir_space->launches, campaign::to_string(ir_count),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      const campaign::InjectionSpace space =
          ir_space ? ir_space->draw : campaign::injection_space(config, problem, site);
      campaign::TrialBackend& runner = located ? *located : *backend;
      campaign::CampaignOptions co;
      co.site = site;
      co.trials = o.trials;
      co.bits = bits;
      co.seed = o.seed + static_cast<uint64_t>(site) * 0x9e3779b97f4a7c15ull;
      co.allow_clean_alarms = o.allow_clean_alarms;
      long long done = 0;
      const campaign::CampaignResult r =
          campaign::run_campaign(runner, space, baseline, co, [&](const campaign::TrialResult&) {
            if (++done % std::max<long long>(1, o.trials / 10) == 0)
              std::cerr << fmt::format("  {}: {}/{}\n", campaign::site_name(site), done, o.trials);
          });
      log << fmt::format(
          "\ncampaign  {}, site {}, bits {}:{}, {} trials over {} CTAs ({:.1f} s, {:.2f} "
          "ms/trial), on_fault {}\n{}",
          to_string(config.protection), campaign::site_name(site), bits.lo, bits.hi, o.trials,
          space.iterations.size(), r.seconds, 1e3 * r.seconds / o.trials, o.on_fault,
          campaign::summary_table(r.tally));
      for (campaign::TrialResult t : r.trials) {
        if (ir_space) t.plan = ir_space->locate(t.plan);  // the thread and instance that flipped
        if (trials_csv.is_open()) trials_csv.stream() << campaign::trials_csv_row(t) << "\n";
      }
      const std::string site_label = ir_space ? fmt::format("ir:{}", to_string(config.ir_inject))
                                              : std::string(campaign::site_name(site));
      campaign::SummarySettings site_settings = settings;
      if (ir_space) site_settings.ir_count = campaign::to_string(ir_count);
      summary.add(config, problem, site_label, fmt::format("{}:{}", bits.lo, bits.hi), r.tally,
                  r.seconds, site_settings);
    }
  }

  if (o.false_alarms > 0) {
    const auto rows = campaign::count_false_alarms(rt, clean_config, problem, o.false_alarms,
                                                   o.seed + 1000003, thresholds);
    log << fmt::format("\nfalse alarms  {} clean runs of {}\n{:<24} {:>6} {:>8} {:>10} {:>10}\n",
                       o.false_alarms, clean_config.name(), "distribution", "runs", "flagged",
                       "detections", "corrected");
    campaign::SummarySettings clean_settings;  // clean inputs: no plan, policy or tolerance
    clean_settings.thresholds = campaign::thresholds_in_use(clean_config, thresholds);
    clean_settings.seed = o.seed;
    clean_settings.heads_kv = problem.heads_kv;
    int flagged = 0;
    for (const campaign::FalseAlarms& r : rows) {
      log << fmt::format("{:<24} {:>6} {:>8} {:>10} {:>10}\n", campaign::to_string(r.distribution),
                         r.runs, r.flagged, r.detected, r.corrected);
      flagged += r.flagged;
      campaign::Tally t;
      for (int i = 0; i < r.runs; ++i)
        t.add(i < r.flagged ? campaign::Outcome::false_positive : campaign::Outcome::masked);
      summary.add(clean_config, problem,
                  fmt::format("\"clean:{}\"", campaign::to_string(r.distribution)), "-", t, 0.0,
                  clean_settings);
    }
    if (flagged > 0) exit_code = 1;  // a false alarm at the default thresholds is a failure
  }

  if (o.calibrate > 0) {
    const auto rows =
        campaign::calibrate_thresholds(rt, clean_config, problem, o.calibrate, o.seed + 2000003);
    const Thresholds d = campaign::thresholds_in_use(clean_config, thresholds);
    log << fmt::format(
        "\ncalibration  {} clean runs per distribution of {}: the smallest threshold each check "
        "passes without an alarm (0: the check never fired or the kernel has none)\n{:<24} {:>5} "
        "{:>11} {:>11} {:>11} {:>11} {:>9}\n",
        o.calibrate, clean_config.name(), "distribution", "runs", "scores", "probs", "output",
        "row_sum", "records");
    // Appended, header first when the file is new (several kernels go into one table).
    if (calibration_csv.is_open() && calibration_csv.fresh())
      calibration_csv.stream() << "config,protection,precision,head_dim,mask,shape,distribution,"
                                  "runs,scores,probs,output,row_sum,truncated\n";
    Thresholds worst;
    for (const campaign::Calibration& c : rows) {
      log << fmt::format("{:<24} {:>5} {:>11.3e} {:>11.3e} {:>11.3e} {:>11.3e} {:>9}{}\n",
                         campaign::to_string(c.distribution), c.runs, c.needed.scores,
                         c.needed.probs, c.needed.output, c.needed.row_sum, c.records,
                         c.truncated ? "  (log overflowed: a lower bound)" : "");
      worst.scores = std::max(worst.scores, c.needed.scores);
      worst.probs = std::max(worst.probs, c.needed.probs);
      worst.output = std::max(worst.output, c.needed.output);
      worst.row_sum = std::max(worst.row_sum, c.needed.row_sum);
      if (calibration_csv.is_open())
        calibration_csv.stream() << fmt::format(
            "{},{},{},{},{},{}x{}x{},\"{}\",{},{:.4e},{:.4e},{:.4e},{:.4e},{}\n",
            clean_config.name(), to_string(clean_config.protection),
            to_string(clean_config.precision), clean_config.head_dim, to_string(clean_config.mask),
            problem.batch, problem.heads_q, problem.seqlen_q, campaign::to_string(c.distribution),
            c.runs, c.needed.scores, c.needed.probs, c.needed.output, c.needed.row_sum,
            c.truncated ? 1 : 0);
    }
    auto margin = [](float def, float need) {
      return need > 0 ? fmt::format("{:>10.1f}x", def / need) : fmt::format("{:>11}", "-");
    };
    log << fmt::format("{:<24} {:>5} {:>11.3e} {:>11.3e} {:>11.3e} {:>11.3e}\n",
                       "thresholds in use", "", d.scores, d.probs, d.output, d.row_sum);
    log << fmt::format("{:<24} {:>5} {} {} {} {}\n", "margin (in use / worst)", "",
                       margin(d.scores, worst.scores), margin(d.probs, worst.probs),
                       margin(d.output, worst.output), margin(d.row_sum, worst.row_sum));
  }
  summary.commit();
  trials_csv.commit();
  calibration_csv.commit();
  return exit_code;
}

}  // namespace

Command add_inject_command(CLI::App& parent, const GlobalOptions& global) {
  auto o = std::make_shared<InjectOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "inject",
      "Fault-injection campaigns: single bit flips, classified against the fault-free "
      "output; false alarms on clean inputs");
  add_config_flags(*cmd, o->config, Positional::none);
  CLI::Option* site =
      cmd->add_option("--site", o->sites,
                      "value class(es) to flip, comma-separated: scores, probs, row_max, row_sum, "
                      "rescale, output, checksum, pv (int8's INT32 P V), scale (8-bit "
                      "dequantisation factors), or all (every one the kernel has); or ir (alone, "
                      "with --backend llvm --ir-inject)");
  // Each trial is a launch and a result kept in memory: a million take hours already.
  cmd->add_option("--trials", o->trials, "trials per site")
      ->check(at_least(1, 1'000'000))
      ->capture_default_str()
      ->needs(site);
  cmd->add_option(
         "--bits", o->bits,
         "bit range lo:hi of the site's 32-bit word (FP32: 0 mantissa LSB, 31 sign; INT32, "
         "packed 8-bit and f16x2 words: README, Fault-injection campaigns)")
      ->capture_default_str()
      ->needs(site);
  cmd->add_option("--seed", o->seed, "seed of the inputs and of the trial plans")
      ->check(seed_number())
      ->capture_default_str();
  cmd->add_option("--shape", o->shape, "batch,heads,seqlen[,heads_kv]")->capture_default_str();
  cmd->add_option("--on-fault", o->on_fault, "report or recompute")
      ->capture_default_str()
      ->needs(site);
  cmd->add_flag("--strict", o->strict,
                "masked only within max(own error, 1 ulp) per element, without the accuracy bar")
      ->needs(site);
  cmd->add_flag("--allow-clean-alarms", o->allow_clean_alarms,
                "run a campaign whose fault-free run reports detections, classifying each trial "
                "by what it reports beyond them (refused without this flag)")
      ->needs(site);
  cmd->add_option("--ir-count", o->ir_count,
                  "site ir: which threads a counting launch measures, cta (thread 0 stands for "
                  "its CTA), warp (lane 0 for its warp) or thread (all)")
      ->capture_default_str()
      ->needs(site);
  cmd->add_option("--csv", o->csv, "write every trial (plan, outcome, report) to this CSV")
      ->needs(site);
  cmd->add_option("--summary-csv", o->summary_csv,
                  "append one row per site (and per false-alarm distribution) to this CSV");
  cmd->add_option("--false-alarms", o->false_alarms,
                  "also run N clean inputs (normal, uniform and PASA's biased distributions) and "
                  "count detections; exit 1 if any")
      ->check(at_least(0));
  CLI::Option* calibrate =
      cmd->add_option(
             "--calibrate", o->calibrate,
             "measure on N clean inputs per distribution the smallest threshold of each check "
             "that raises no alarm, against the thresholds in use")
          ->check(at_least(0));
  cmd->add_option("--calibration-csv", o->calibration_csv,
                  "append the calibration (one row per distribution) to this CSV")
      ->needs(calibrate);
  cmd->add_option("--thresholds", o->thresholds,
                  "override check thresholds for campaigns, false alarms and calibration, e.g. "
                  "output=1e-7,row_sum=2e-4 (checks: scores, probs, output, row_sum)");
  return {cmd, [o, &global] {
            try {
              return run_inject(*o, global);
            } catch (const NoDeviceError& e) {
              // Not a bad flag (exit 2): the command was good, the machine has no GPU.
              std::cout.flush();
              std::cerr << fmt::format(
                  "ftattn: {}\nftattn: inject needs a GPU: no trials were run\n", e.what());
              return kNotLaunched;
            }
          }};
}

}  // namespace ftattn::cli
