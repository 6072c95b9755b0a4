// ftattn bench: time kernels over a grid of shapes with CUDA events (warm-up, median of timed
// launches), each run checked against the reference first; CSV and JSON out.
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/prepared_kv.hpp"
#include "tools/ftattn/commands.hpp"
#include "tools/ftattn/config_flags.hpp"
#include "tools/ftattn/device_run.hpp"
#include "tools/ftattn/number_checks.hpp"
#include "tools/ftattn/output_file.hpp"
#include "tools/ftattn/shapes.hpp"

namespace ftattn::cli {
namespace {

// "128x64w4s2": block_m x block_n, warps, stages.
KernelConfig apply_tile(KernelConfig c, const std::string& tile) {
  char extra = 0;
  if (std::sscanf(tile.c_str(), "%dx%dw%ds%d%c", &c.block_m, &c.block_n, &c.num_warps,
                  &c.num_stages, &extra) != 4)
    throw ConfigError(
        fmt::format("bad tile '{}': write <block_m>x<block_n>w<warps>s<stages>, "
                    "e.g. 128x64w4s2",
                    tile));
  return c;
}

struct BenchOptions {
  ConfigFlags config;
  std::string shapes, precisions = "f16,bf16", masks = "none,causal", tiles, csv, json;
  DeviceRunOptions device{.lse = false, .check_rows = 32, .warmup = 5, .iters = 20, .seed = 1};
  bool interleave = false;
  bool prepare_kv = false;
  CLI::Option* precisions_opt = nullptr;  // given on the command line, not the default
  CLI::Option* masks_opt = nullptr;
};

// What bench sweeps (precisions, masks, schemes, shapes) and the kernel it sweeps from. The
// single-kernel flags and a --config name pick the sweep where its own list flag is left out;
// a list flag beside its single flag is a conflict, and beside a name's field it wins, noted.
struct Sweep {
  KernelConfig base;
  std::vector<Precision> precisions;
  std::vector<Mask> masks;
  std::vector<Protection> protections;
  std::vector<Shape> shapes;
};

Sweep sweep_of(const BenchOptions& o, std::ostream& log) {
  const ConfigFlags& f = o.config;
  ConfigFlags one_protection = f;  // --protection is a list here, parsed below
  one_protection.protection.clear();
  Sweep w{.base = config_from_flags(one_protection)};
  const bool named = !f.config.empty();
  const auto pick = [&](const std::string& flag, const std::string& single, CLI::Option* list_opt,
                        const std::string& list, std::string_view from_name) -> std::string {
    if (list_opt->count() > 0) {
      if (!single.empty())
        throw ConfigError(fmt::format(
            "--{0} and --{0}s both given: bench sweeps --{0}s; give one of them", flag));
      if (named)
        log << fmt::format("note: --{}s {} replaces the --config name's {}\n", flag, list,
                           from_name);
      return list;
    }
    return !single.empty() ? single : named ? std::string(from_name) : list;
  };
  const std::string precisions =
      pick("precision", f.precision, o.precisions_opt, o.precisions, to_string(w.base.precision));
  for (const auto& p : split_list(precisions, ',', "--precisions"))
    w.precisions.push_back(parse_precision(p));
  const std::string masks = pick("mask", f.mask, o.masks_opt, o.masks, to_string(w.base.mask));
  for (const auto& m : split_list(masks, ',', "--masks")) {
    w.masks.push_back(parse_mask(m));
    if (is_block_sparse(w.masks.back()))
      throw ConfigError(fmt::format(
          "bench times dense masks (none, causal), not {}: time a block-sparse mask with "
          "ftattn run --mask {} --sparse-block 128x128",
          m, m));
  }
  // --protection may list several schemes: each is timed on the same inputs, and its overhead
  // against `none` of the same shape and tile is reported when `none` is in the list.
  for (const auto& p : split_list(f.protection, ',', "--protection"))
    w.protections.push_back(parse_protection(p));
  if (w.protections.empty()) w.protections.push_back(named ? w.base.protection : Protection::none);

  // Head dims come with the shapes; --head-dim or a name's head dim picks from them.
  const bool from_flag = f.head_dim_opt->count() > 0;
  const int head_dim = from_flag ? f.head_dim : named ? w.base.head_dim : 0;
  const std::vector<Shape> all = o.shapes.empty() ? standard_grid() : parse_shapes(o.shapes);
  for (const Shape& s : all) {
    if (head_dim == 0 || s.head_dim == head_dim) {
      w.shapes.push_back(s);
    } else if (!o.shapes.empty()) {
      if (from_flag)
        throw ConfigError(fmt::format(
            "--head-dim {} and the shape {},{},{},{} disagree: bench takes head dims from "
            "--shapes (head_dim,heads,seqlen,batch); leave --head-dim out",
            head_dim, s.head_dim, s.heads, s.seqlen, s.batch));
      log << fmt::format("note: the shape {},{},{},{} replaces the --config name's head dim {}\n",
                         s.head_dim, s.heads, s.seqlen, s.batch, head_dim);
      w.shapes.push_back(s);
    }
  }
  if (w.shapes.empty())
    throw ConfigError(fmt::format(
        "the standard grid has no shape at head dim {} (it has 64, 128 and 256): give --shapes "
        "head_dim,heads,seqlen,batch;...",
        head_dim));
  if (w.precisions.empty() || w.masks.empty())
    throw ConfigError(
        "bench needs at least one precision and one mask: give --precisions and "
        "--masks, or leave them at their defaults");
  return w;
}

// One kernel of a shape and mask: its precision, tile and scheme (with its work on K and V done
// per launch, or prepared once), and its result.
struct Entry {
  Precision precision;
  std::size_t tile;
  Protection protection;
  bool prepared = false;
  DeviceRunResult result;
};

// Times checked kernels launch by launch in turn (A B C A B C ...), each launch its own CUDA
// events, so clock and temperature drift (long runs lose clock to the power limit) fall on every
// kernel alike instead of on whichever ran last.
void time_interleaved(std::vector<PreparedRun>& runs, const Problem& problem,
                      const DeviceRunOptions& opt) {
  for (int i = 0; i < opt.warmup; ++i)
    for (auto& r : runs) r.launch();
  std::vector<std::vector<double>> ms(runs.size());
  runtime::EventTimer timer;
  for (int i = 0; i < opt.iters; ++i)
    for (std::size_t k = 0; k < runs.size(); ++k) ms[k].push_back(time_once(timer, runs[k].launch));
  for (std::size_t k = 0; k < runs.size(); ++k) record_times(runs[k].result, problem, ms[k]);
  // 8-bit kernels' split into quantisation and attention, in turn as well.
  std::vector<std::vector<double>> quantize_ms(runs.size()), attention_ms(runs.size());
  for (int i = 0; i < opt.iters; ++i)
    for (std::size_t k = 0; k < runs.size(); ++k) {
      if (!runs[k].quantize) continue;
      quantize_ms[k].push_back(time_once(timer, runs[k].quantize));  // then its attention
      attention_ms[k].push_back(time_once(timer, runs[k].attention));
    }
  for (std::size_t k = 0; k < runs.size(); ++k)
    if (runs[k].quantize) {
      runs[k].result.quantize_ms = median_of(quantize_ms[k]);
      runs[k].result.attention_ms = median_of(attention_ms[k]);
    }
}

int run_bench(const BenchOptions& o, const GlobalOptions& global) {
  if (o.csv == "-" && o.json == "-")
    throw ConfigError("--csv and --json both write to standard output: give one of them a file");
  // With a table on standard output, the log goes to standard error.
  std::ostream& log = o.csv == "-" || o.json == "-" ? std::cerr : std::cout;
  const Sweep sweep = sweep_of(o, log);
  const std::vector<std::string> tiles = split_list(o.tiles, ',', "--tiles");
  const KernelConfig& base = sweep.base;
  const std::vector<Precision>& precisions = sweep.precisions;
  const std::vector<Protection>& protections = sweep.protections;

  // Opened before any work, so a path that cannot be written fails at once.
  OutputFile csv("--csv", o.csv), json("--json", o.json);

  const std::string device = describe_device();
  Runtime runtime(global.runtime_options());
  log << "device " << device << "\n";

  nlohmann::json rows = nlohmann::json::array();
  int failures = 0, skipped = 0;
  for (const Shape& s : sweep.shapes) {
    const Problem problem = problem_of(s);
    // Made once per shape and precision, shared by every kernel timed on it.
    std::vector<std::unique_ptr<DeviceInputs>> inputs;
    try {
      for (Precision p : precisions) inputs.push_back(make_inputs(problem, p, o.device.seed));
    } catch (const std::bad_alloc&) {  // the shapes after it may fit
      log << fmt::format("skip  d{} h{} s{} b{}: its inputs do not fit in host memory\n",
                         s.head_dim, s.heads, s.seqlen, s.batch);
      ++failures;
      continue;
    } catch (const DriverError& err) {  // device memory, most often
      log << fmt::format("skip  d{} h{} s{} b{}: {}\n", s.head_dim, s.heads, s.seqlen, s.batch,
                         err.what());
      ++failures;
      continue;
    }
    for (Mask m : sweep.masks) {
      std::vector<Entry> entries;
      std::vector<PreparedRun> prepared;  // --interleave: checked, timed below all together
      for (std::size_t pi = 0; pi < precisions.size(); ++pi)
        for (size_t t = 0; t < std::max<size_t>(1, tiles.size()); ++t)
          for (Protection prot : protections)
            for (bool prepare : {false, true}) {
              if (prepare && !o.prepare_kv) continue;
              KernelConfig c = base;
              c.head_dim = s.head_dim;
              c.precision = precisions[pi];
              c.mask = m;
              c.protection = prot;
              if (!tiles.empty()) c = apply_tile(c, tiles[t]);
              if (prepare && !runtime::unpreparable_reason(c).empty()) continue;
              Entry e{precisions[pi], t, prot, prepare, {}};
              DeviceRunOptions options = o.device;
              options.prepare_kv = prepare;
              try {
                if (o.interleave) {
                  DeviceRunOptions check_only = options;
                  check_only.iters = 0;
                  PreparedRun run = prepare_on_device(runtime, c, problem, *inputs[pi], check_only);
                  e.result = run.result;
                  if (run.result.check.passed) prepared.push_back(std::move(run));
                } else {
                  e.result = run_on_device(runtime, c, problem, *inputs[pi], options);
                }
              } catch (const ConfigError& err) {  // a tile (or a scheme) that does not fit: skip it
                log << fmt::format("skip  d{} s{} {} {}: {}\n", s.head_dim, s.seqlen,
                                   tiles.empty() ? "" : tiles[t], to_string(prot), err.what());
                ++skipped;
                continue;
              }
              entries.push_back(std::move(e));
            }
      if (o.interleave && !prepared.empty()) {
        time_interleaved(prepared, problem, o.device);
        std::size_t next = 0;  // the prepared runs are the entries that passed, in order
        for (Entry& e : entries)
          if (e.result.check.passed) e.result = prepared[next++].result;
      }

      for (const Entry& e : entries) {
        const DeviceRunResult& r = e.result;
        // This shape, precision and tile without protection, when timed.
        double none_ms = 0.0;
        for (const Entry& n : entries)
          if (n.precision == e.precision && n.tile == e.tile && n.protection == Protection::none &&
              n.result.timed)
            none_ms = n.result.median_ms;
        failures += !r.check.passed;
        const double overhead = none_ms > 0 && r.timed && e.protection != Protection::none
                                    ? r.median_ms / none_ms - 1
                                    : 0.0;
        log << fmt::format(
            "d{:<3} h{:<2} s{:<5} b{:<2} {:<4} {:<6} {:>8.4f} ms {:>6.1f} TFLOP/s {:>8}  "
            "{}{}{}\n",
            s.head_dim, s.heads, s.seqlen, s.batch, to_string(e.precision), to_string(m),
            r.median_ms, r.tflops,
            e.protection == Protection::none || none_ms <= 0
                ? std::string()
                : fmt::format("{:+.1f}%", 100 * overhead),
            r.config.name(), e.prepared ? " (K and V prepared)" : "",
            r.check.passed ? "" : "  CHECK FAILED: " + r.check.summary());
        rows.push_back({{"head_dim", s.head_dim},
                        {"seqlen", s.seqlen},
                        {"batch", s.batch},
                        {"heads", s.heads},
                        {"causal", is_causal(m) ? 1 : 0},
                        {"dtype", std::string(to_string(e.precision))},
                        {"config", r.config.name()},
                        {"ms", r.median_ms},
                        {"min_ms", r.min_ms},
                        {"tflops", r.tflops},
                        {"rel_l2_error", r.check.rel_l2_error},
                        {"passed", r.check.passed},
                        {"protection", std::string(to_string(e.protection))},
                        {"overhead_vs_none", overhead},
                        {"attention_ms", r.attention_ms},
                        {"quantize_ms", r.quantize_ms},
                        {"prepared_kv", e.prepared}});
      }
    }
  }

  if (csv.is_open()) {
    std::ostream& out = csv.stream();
    out << "head_dim,seqlen,batch,heads,causal,dtype,config,ms,min_ms,tflops,rel_l2_error,passed,"
           "protection,overhead_vs_none,attention_ms,quantize_ms,prepared_kv\n";
    for (const auto& r : rows)
      out << fmt::format(
          "{},{},{},{},{},{},{},{:.5f},{:.5f},{:.2f},{:.3e},{},{},{:.4f},{:.5f},{:.5f},{}\n",
          int(r["head_dim"]), int(r["seqlen"]), int(r["batch"]), int(r["heads"]), int(r["causal"]),
          std::string(r["dtype"]), std::string(r["config"]), double(r["ms"]), double(r["min_ms"]),
          double(r["tflops"]), double(r["rel_l2_error"]), bool(r["passed"]) ? 1 : 0,
          std::string(r["protection"]), double(r["overhead_vs_none"]), double(r["attention_ms"]),
          double(r["quantize_ms"]), bool(r["prepared_kv"]) ? 1 : 0);
    csv.commit();
  }
  if (json.is_open()) {
    json.stream() << nlohmann::json{{"device", device}, {"runs", rows}}.dump(2);
    json.commit();
  }
  if (failures > 0) {
    std::cerr << fmt::format("ftattn: {} run(s) failed the reference check or were skipped\n",
                             failures);
    return 1;
  }
  if (rows.empty()) {  // every kernel was skipped: nothing was measured
    std::cerr << fmt::format(
        "ftattn: nothing was timed: all {} kernel(s) were skipped (see the skip lines)\n", skipped);
    return 1;
  }
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& parent, const GlobalOptions& global) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "bench", "Time kernels over a grid of shapes (checked first), CSV/JSON out");
  add_config_flags(*cmd, o->config, Positional::none);
  cmd->add_option(
      "--shapes", o->shapes,
      "shapes as head_dim,heads,seqlen,batch;... (default: the standard 16k-token grid)");
  o->precisions_opt =
      cmd->add_option("--precisions", o->precisions,
                      "comma-separated precisions (default f16,bf16, or --precision's, or the "
                      "--config name's)");
  o->masks_opt = cmd->add_option("--masks", o->masks,
                                 "comma-separated masks: none, causal (default none,causal, or "
                                 "--mask's, or the --config name's)");
  cmd->add_option("--tiles", o->tiles,
                  "comma-separated tiles to compare, e.g. 128x64w4s2,128x32w4s2 (default: the "
                  "config's knobs or the defaults)");
  cmd->add_option("--csv", o->csv, "write CSV to this file ('-': standard output)");
  cmd->add_option("--json", o->json, "write JSON to this file ('-': standard output)");
  cmd->add_option("--warmup", o->device.warmup, "untimed launches first")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--iters", o->device.iters, "timed launches (median; at least 20)")
      ->check(at_least(20))
      ->capture_default_str();
  cmd->add_option("--check-rows", o->device.check_rows, "rows checked per run (0: all)")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_flag("--prepare-kv", o->prepare_kv,
                "also time each kernel with work on K and V alone (checksum prologues, f16_pasa's "
                "shift) prepared once and used by every launch (Kernel::prepare_kv: a KV cache "
                "between calls), beside the same kernel doing it per launch");
  cmd->add_flag("--interleave", o->interleave,
                "time a shape's kernels launch by launch in turn (A B A B ...) instead of one "
                "after the other, so clock drift falls on all alike");
  return {cmd, [o, &global] { return run_bench(*o, global); }};
}

}  // namespace ftattn::cli
