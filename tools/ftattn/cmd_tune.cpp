// ftattn tune: tune this GPU for a grid of shapes. For each kernel family (head dim x mask) the
// search space is enumerated and pruned, the survivors compiled in parallel and pruned again,
// then every survivor is checked and timed on every shape of the family; the winners go to the
// tuning DB that Runtime::attention reads.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "runtime/driver.hpp"
#include "tools/ftattn/commands.hpp"
#include "tools/ftattn/config_flags.hpp"
#include "tools/ftattn/device_run.hpp"
#include "tools/ftattn/gpu_timer.hpp"
#include "tools/ftattn/number_checks.hpp"
#include "tools/ftattn/output_file.hpp"
#include "tools/ftattn/shapes.hpp"
#include "tools/ftattn/tune_report.hpp"
#include "tuner/tune.hpp"

namespace ftattn::cli {
namespace {

struct TuneOptions {
  std::string shapes, precision = "f16", protection = "none", masks = "none,causal", db, csv;
  int warmup = 3, iters = 10, jobs = 0, check_rows = 16;
  bool verify = false, dry_run = false;
};

std::string duration(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  return s >= 60 ? fmt::format("{}m{:02d}s", s / 60, s % 60) : fmt::format("{}s", s);
}

// One line on stderr, redrawn in place: bar, count, ETA from the average so far.
class ProgressBar {
 public:
  explicit ProgressBar(int total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  void tick(const std::string& what) {
    ++done_;
    const double spent =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double eta = done_ > 0 ? spent / done_ * (total_ - done_) : 0.0;
    const int width = 30, filled = total_ > 0 ? width * done_ / total_ : width;
    std::fprintf(stderr, "\r[%s%s] %d/%d  %s elapsed, ETA %s  %-40.40s",
                 std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), done_,
                 total_, duration(spent).c_str(), duration(eta).c_str(), what.c_str());
    if (done_ == total_) std::fputc('\n', stderr);
  }

 private:
  int total_, done_ = 0;
  std::chrono::steady_clock::time_point start_;
};

// The masks to tune, each once. Dense ones only: Runtime::attention never reads the DB for a
// block-sparse mask, so its entries would go unused.
std::vector<Mask> tune_masks(const std::string& text) {
  std::vector<Mask> masks;
  for (const auto& name : split_list(text, ',', "--masks")) {
    const Mask m = parse_mask(name);
    if (is_block_sparse(m))
      throw ConfigError(
          fmt::format("--masks: {}: the tuner and its DB serve dense masks only (none, causal); a "
                      "block-sparse mask takes the heuristic's tiles",
                      name));
    if (std::find(masks.begin(), masks.end(), m) != masks.end())
      throw ConfigError(fmt::format("--masks: '{}' names {} twice", text, name));
    masks.push_back(m);
  }
  if (masks.empty()) throw ConfigError("tune needs at least one mask: give --masks none,causal");
  return masks;
}

// The DB keeps one entry per kernel family and bucket, so of two shapes in one bucket only the
// last one's winner would stay: such a list is refused before any work.
void refuse_shared_buckets(const std::vector<Shape>& shapes, Mask mask) {
  auto text = [](const Shape& s) {
    return fmt::format("{},{},{},{}", s.head_dim, s.heads, s.seqlen, s.batch);
  };
  for (size_t i = 0; i < shapes.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      const tuner::Bucket bucket = tuner::Bucket::of(problem_of(shapes[i]), mask);
      if (shapes[i].head_dim == shapes[j].head_dim &&
          bucket == tuner::Bucket::of(problem_of(shapes[j]), mask))
        throw ConfigError(fmt::format(
            "--shapes: {} and {} fall in one tuning bucket ({}), and the DB keeps one entry per "
            "bucket: give one shape per bucket (seqlen and batch x heads rounded up to powers of "
            "two)",
            text(shapes[j]), text(shapes[i]), bucket.to_string()));
    }
}

int run_tune(const TuneOptions& o, const GlobalOptions& global) {
  const auto started = std::chrono::steady_clock::now();
  const std::vector<Shape> shapes = o.shapes.empty() ? standard_grid() : parse_shapes(o.shapes);
  const Precision precision = parse_precision(o.precision);
  const Protection protection = parse_protection(o.protection);
  const std::vector<Mask> masks = tune_masks(o.masks);
  refuse_shared_buckets(shapes, masks.front());

  // Opened before any work, so a path that cannot be written fails at once.
  OutputFile csv("--csv", o.csv);

  const std::string device_line = describe_device();
  const runtime::DeviceInfo info = runtime::device_info(0);
  Runtime runtime(global.runtime_options());
  const Arch arch = runtime.device_arch();
  const tuner::DeviceKey device{info.name, info.sm, info.driver_version};
  const std::filesystem::path db_path =
      o.db.empty() ? tuner::user_database_path(runtime.cache_dir()) : std::filesystem::path(o.db);
  // Read and written back before any work: a DB that cannot be read or written fails now, not
  // after the tuning (entries this ftattn cannot read are written back as they were).
  if (o.dry_run) {
    tuner::Database::load(db_path);
  } else {
    tuner::Database::update(db_path, tuner::Database{});
  }
  const tuner::SmLimits limits{65536, info.max_shared_per_block_optin + 1024, 2048};
  const int jobs = o.jobs > 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency());
  std::printf("device    %s\ntuning    %zu shapes x %zu masks, %s, protection %s -> %s\n",
              device_line.c_str(), shapes.size(), masks.size(), o.precision.c_str(),
              o.protection.c_str(), db_path.string().c_str());

  // Families and their candidates, compiled and pruned up front so the bar knows its total.
  struct Plan {
    tuner::Family family;
    std::vector<Shape> shapes;
    std::vector<KernelConfig> candidates;
  };
  std::vector<Plan> plans;
  std::map<std::pair<int, int>, size_t> plan_of;  // (head_dim, mask) -> index
  for (const Shape& s : shapes)
    for (Mask m : masks) {
      const auto key = std::make_pair(s.head_dim, static_cast<int>(m));
      if (!plan_of.count(key)) {
        plan_of[key] = plans.size();
        plans.push_back({tuner::Family{arch, precision, protection, s.head_dim, m}, {}, {}});
      }
      plans[plan_of[key]].shapes.push_back(s);
    }
  // Every shape and mask checked against the heuristic's config before any tuning, so that a
  // shape this GPU cannot run stops the command now rather than half way.
  for (const Plan& plan : plans)
    for (const Shape& s : plan.shapes) {
      const Problem problem = problem_of(s);
      validate(problem, tuner::heuristic_default(plan.family, problem));
    }
  int total = 0;
  for (Plan& plan : plans) {
    const tuner::Pruned space = tuner::enumerate(plan.family);
    const tuner::Pruned built = tuner::compile_and_prune(runtime, space.kept, limits, jobs);
    plan.candidates = built.kept;
    std::fprintf(stderr, "family d%d %s: %zu candidates, %zu pruned before compiling, %zu after\n",
                 plan.family.head_dim, std::string(to_string(plan.family.mask)).c_str(),
                 built.kept.size(), space.rejected.size(), built.rejected.size());
    for (const auto& r : built.rejected)
      std::fprintf(stderr, "  pruned %s: %s\n", r.config.name().c_str(), r.reason.c_str());
    total += static_cast<int>(plan.candidates.size() * plan.shapes.size());
  }
  const double compile_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::fprintf(stderr, "compiled and pruned in %s on %d threads\n", duration(compile_s).c_str(),
               jobs);
  if (o.dry_run) return 0;

  GpuTimer timer(runtime, o.warmup, o.iters, o.check_rows);
  ProgressBar bar(total);
  std::vector<tuner::ShapeResult> results;
  for (const Plan& plan : plans) {
    tuner::Database tuned;  // this family's winners, saved as soon as it is done
    for (const Shape& s : plan.shapes) {
      const Problem problem = problem_of(s);
      // The heuristic alone, not the DB: the baseline the tuner must beat.
      const KernelConfig heuristic = tuner::heuristic_default(plan.family, problem);
      const std::string label =
          fmt::format("d{} s{} {}", s.head_dim, s.seqlen, to_string(plan.family.mask));
      results.push_back(tuner::tune_shape(plan.family, problem, plan.candidates, heuristic, timer,
                                          [&] { bar.tick(label); }));
      const tuner::ShapeResult& r = results.back();
      if (r.found) tuned.put(tuner::to_entry(r, device));
    }
    tuner::Database::update(db_path, tuned);
  }
  const double tune_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  const TuneSummary summary =
      report_tune(results, precision, o.verify ? &timer : nullptr, std::cout, std::cerr,
                  csv.is_open() ? &csv.stream() : nullptr);
  csv.commit();
  std::cout << fmt::format("tuning took {} (compile {}); {} of {} shapes tuned, DB written to {}\n",
                           duration(tune_s), duration(compile_s),
                           results.size() - summary.without_winner, results.size(),
                           db_path.string());
  // Like the other commands, a failed check exits 1; the winners that passed are written.
  return summary.failed_checks > 0 ? 1 : 0;
}

}  // namespace

Command add_tune_command(CLI::App& parent, const GlobalOptions& global) {
  auto o = std::make_shared<TuneOptions>();
  CLI::App* cmd = parent.add_subcommand("tune", "Tune this GPU: fastest checked config per shape");
  cmd->add_option("--shapes", o->shapes,
                  "head_dim,heads,seqlen,batch;... (default: the standard 16k-token grid)")
      ->check(non_empty("shapes as head_dim,heads,seqlen,batch;..., or leave --shapes out for "
                        "the standard grid"));
  cmd->add_option("--precision", o->precision, "precision to tune")
      ->check(non_empty("a precision: f16, bf16, int8, f16_pasa or fp8_e4m3"))
      ->capture_default_str();
  cmd->add_option("--protection", o->protection, "protection to tune")
      ->check(non_empty("a scheme: none, flash_abft, efta_detect, efta_correct or decoupled"))
      ->capture_default_str();
  cmd->add_option("--masks", o->masks, "comma-separated dense masks: none, causal")
      ->check(non_empty("masks: none, causal or none,causal"))
      ->capture_default_str();
  cmd->add_option("--db", o->db, "tuning DB to update (default: tuning.json in the cache dir)")
      ->check(non_empty("a file name, or leave --db out for tuning.json in the cache dir"));
  cmd->add_option("--csv", o->csv, "write the results table as CSV")
      ->check(non_empty("a file name"));
  cmd->add_option("--warmup", o->warmup, "untimed launches per candidate")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--iters", o->iters, "timed launches per candidate (median)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--jobs", o->jobs, "compile threads (0: one per core)")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--check-rows", o->check_rows, "reference rows checked per candidate (0: all)")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_flag("--verify", o->verify,
                "after tuning, time every valid config again and compare with the tuned choice");
  cmd->add_flag("--dry-run", o->dry_run, "enumerate, compile and prune only");
  return {cmd, [o, &global] { return run_tune(*o, global); }};
}

}  // namespace ftattn::cli
