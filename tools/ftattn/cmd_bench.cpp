// ftattn bench: time kernels over a grid of shapes with CUDA events (warm-up, median of timed
// launches), each run checked against the reference first; CSV and JSON out.
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tools/ftattn/commands.hpp"
#include "tools/ftattn/config_flags.hpp"
#include "tools/ftattn/device_run.hpp"
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
};

int run_bench(const BenchOptions& o, const GlobalOptions& global) {
  if (o.device.iters < 20)
    throw ConfigError("bench reports a median of at least 20 timed launches: raise --iters");
  const std::vector<Shape> shapes = o.shapes.empty() ? standard_grid() : parse_shapes(o.shapes);
  std::vector<Precision> precisions;
  for (const auto& p : split(o.precisions, ',')) precisions.push_back(parse_precision(p));
  std::vector<Mask> masks;
  for (const auto& m : split(o.masks, ',')) masks.push_back(parse_mask(m));
  const std::vector<std::string> tiles = split(o.tiles, ',');
  // --protection may list several schemes: each is timed on the same inputs, and its overhead
  // against `none` of the same shape and tile is reported when `none` is in the list.
  std::vector<Protection> protections;
  for (const auto& p : split(o.config.protection, ',')) protections.push_back(parse_protection(p));
  if (protections.empty()) protections.push_back(Protection::none);
  ConfigFlags one_protection = o.config;
  one_protection.protection.clear();
  const KernelConfig base = config_from_flags(one_protection);

  const std::string device = describe_device();
  Runtime runtime(global.runtime_options());
  std::ostream& log = o.csv == "-" ? std::cerr : std::cout;
  log << "device " << device << "\n";

  nlohmann::json rows = nlohmann::json::array();
  int failures = 0;
  for (const Shape& s : shapes)
    for (Precision p : precisions) {
      const Problem problem =
          Problem::bhsd(s.batch, s.heads, s.heads, s.seqlen, s.seqlen, s.head_dim);
      auto inputs = make_inputs(problem, p, o.device.seed);
      for (Mask m : masks)
        for (size_t t = 0; t < std::max<size_t>(1, tiles.size()); ++t) {
          double none_ms = 0.0;  // this shape and tile without protection, when timed
          for (Protection prot : protections) {
            KernelConfig c = base;
            c.head_dim = s.head_dim;
            c.precision = p;
            c.mask = m;
            c.protection = prot;
            if (!tiles.empty()) c = apply_tile(c, tiles[t]);
            DeviceRunResult r;
            try {
              r = run_on_device(runtime, c, problem, *inputs, o.device);
            } catch (const ConfigError& e) {  // a tile (or a scheme) that does not fit: skip it
              log << fmt::format("skip  d{} s{} {} {}: {}\n", s.head_dim, s.seqlen,
                                 tiles.empty() ? "" : tiles[t], to_string(prot), e.what());
              continue;
            }
            failures += !r.check.passed;
            if (prot == Protection::none && r.timed) none_ms = r.median_ms;
            const double overhead = none_ms > 0 && r.timed && prot != Protection::none
                                        ? r.median_ms / none_ms - 1
                                        : 0.0;
            log << fmt::format(
                "d{:<3} h{:<2} s{:<5} b{:<2} {:<4} {:<6} {:>8.4f} ms {:>6.1f} TFLOP/s {:>8}  "
                "{}{}\n",
                s.head_dim, s.heads, s.seqlen, s.batch, to_string(p), to_string(m), r.median_ms,
                r.tflops,
                prot == Protection::none || none_ms <= 0 ? std::string()
                                                         : fmt::format("{:+.1f}%", 100 * overhead),
                r.config.name(), r.check.passed ? "" : "  CHECK FAILED: " + r.check.summary());
            rows.push_back({{"head_dim", s.head_dim},
                            {"seqlen", s.seqlen},
                            {"batch", s.batch},
                            {"heads", s.heads},
                            {"causal", is_causal(m) ? 1 : 0},
                            {"dtype", std::string(to_string(p))},
                            {"config", r.config.name()},
                            {"ms", r.median_ms},
                            {"min_ms", r.min_ms},
                            {"tflops", r.tflops},
                            {"rel_l2_error", r.check.rel_l2_error},
                            {"passed", r.check.passed},
                            {"protection", std::string(to_string(prot))},
                            {"overhead_vs_none", overhead},
                            {"attention_ms", r.attention_ms},
                            {"quantize_ms", r.quantize_ms}});
          }
        }
    }

  if (!o.csv.empty()) {
    std::ofstream file;
    if (o.csv != "-") file.open(o.csv);
    std::ostream& out = o.csv == "-" ? std::cout : file;
    out << "head_dim,seqlen,batch,heads,causal,dtype,config,ms,min_ms,tflops,rel_l2_error,passed,"
           "protection,overhead_vs_none,attention_ms,quantize_ms\n";
    for (const auto& r : rows)
      out << fmt::format(
          "{},{},{},{},{},{},{},{:.5f},{:.5f},{:.2f},{:.3e},{},{},{:.4f},{:.5f},{:.5f}\n",
          int(r["head_dim"]), int(r["seqlen"]), int(r["batch"]), int(r["heads"]), int(r["causal"]),
          std::string(r["dtype"]), std::string(r["config"]), double(r["ms"]), double(r["min_ms"]),
          double(r["tflops"]), double(r["rel_l2_error"]), bool(r["passed"]) ? 1 : 0,
          std::string(r["protection"]), double(r["overhead_vs_none"]), double(r["attention_ms"]),
          double(r["quantize_ms"]));
  }
  if (!o.json.empty())
    std::ofstream(o.json) << nlohmann::json{{"device", device}, {"runs", rows}}.dump(2);
  if (failures > 0) {
    std::cerr << fmt::format("ftattn: {} run(s) failed the reference check\n", failures);
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
  cmd->add_option("--precisions", o->precisions, "comma-separated precisions")
      ->capture_default_str();
  cmd->add_option("--masks", o->masks, "comma-separated masks")->capture_default_str();
  cmd->add_option("--tiles", o->tiles,
                  "comma-separated tiles to compare, e.g. 128x64w4s2,128x32w4s2 (default: the "
                  "config's knobs or the defaults)");
  cmd->add_option("--csv", o->csv, "write CSV to this file ('-': standard output)");
  cmd->add_option("--json", o->json, "write JSON to this file");
  cmd->add_option("--warmup", o->device.warmup, "untimed launches first")->capture_default_str();
  cmd->add_option("--iters", o->device.iters, "timed launches (median; at least 20)")
      ->capture_default_str();
  cmd->add_option("--check-rows", o->device.check_rows, "rows checked per run")
      ->capture_default_str();
  return {cmd, [o, &global] { return run_bench(*o, global); }};
}

}  // namespace ftattn::cli
