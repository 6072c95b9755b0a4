#include "tools/ftattn/tune_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

namespace ftattn::cli {
namespace {

std::string shape_label(const tuner::ShapeResult& r) {
  const Problem& p = r.problem;
  return fmt::format("d{} h{} s{} b{} {}", p.head_dim, p.heads_q, p.seqlen_q, p.batch,
                     to_string(r.family.mask));
}

// Says that `m` failed, if it did; true then.
bool report_failure(const tuner::Measurement& m, const std::string& where, bool is_default,
                    std::ostream& err) {
  if (m.passed) return false;
  err << fmt::format("ftattn: check failed: {}: {}{}: {}\n", where, m.config.name(),
                     is_default ? " (the heuristic default)" : "",
                     m.error.empty() ? "no reason given" : m.error);
  return true;
}

}  // namespace

TuneSummary report_tune(const std::vector<tuner::ShapeResult>& results, Precision precision,
                        tuner::Timer* verify, std::ostream& out, std::ostream& err,
                        std::ostream* csv) {
  TuneSummary summary;
  int default_failed = 0;  // shapes whose heuristic default failed
  for (const tuner::ShapeResult& r : results) {
    const std::string label = shape_label(r);
    bool default_measured = false;
    for (const tuner::Measurement& m : r.measured) {
      const bool is_default = m.config == r.heuristic.config;
      default_measured |= is_default;
      if (report_failure(m, label, is_default, err)) {
        ++summary.failed_checks;
        default_failed += is_default;
      }
    }
    // The default pruned from the candidates was measured on its own.
    if (!default_measured && report_failure(r.heuristic, label, true, err)) {
      ++summary.failed_checks;
      ++default_failed;
    }
    if (!r.found) {
      ++summary.without_winner;
      err << fmt::format(
          "ftattn: {}: no candidate passed its check: no DB entry for bucket {}, where the "
          "heuristic decides\n",
          label, r.bucket.to_string());
    }
  }

  out << fmt::format("\n{:<34} {:<52} {:>9} {:>9} {:>7}\n", "shape", "best config", "TFLOP/s",
                     "default", "gain");
  if (csv) {
    *csv << "head_dim,seqlen,batch,heads,causal,dtype,best,best_tflops,default,default_tflops,"
            "gain,verified_best,verified_best_tflops,tuned_over_verified\n";
  }
  double worst_verified = 0;
  int verified_shapes = 0;
  for (const tuner::ShapeResult& r : results) {
    const Problem& p = r.problem;
    const std::string best_name = r.found ? r.best.config.name() : "-";
    // A default that failed its check has no speed to compare with.
    const double best = r.tflops(r.best.ms),
                 dflt = r.heuristic.passed ? r.tflops(r.heuristic.ms) : 0.0;
    out << fmt::format(
        "d{:<3} h{:<2} s{:<5} b{:<2} {:<6} {:<7} {:<52} {:>9.1f} {:>9.1f} {:>6.1f}%\n", p.head_dim,
        p.heads_q, p.seqlen_q, p.batch, to_string(r.family.mask), r.found ? "" : "(none)",
        best_name, best, dflt, dflt > 0 ? (best / dflt - 1) * 100 : 0.0);
    std::string verified_name;
    double verified = 0, ratio = 0;
    if (verify && r.found) {
      // Same run, second pass: every valid config of the family (pruned ones included) timed
      // once, the tuned choice among them; its share of the fastest in this pass.
      const std::string label = "verify " + shape_label(r);
      double tuned_ms = 0, best_ms = 0;
      bool tuned_seen = false;
      auto time = [&](const KernelConfig& c) {
        const tuner::Measurement m = verify->measure(c, p);
        summary.failed_checks += report_failure(m, label, c == r.heuristic.config, err);
        return m;
      };
      for (const KernelConfig& c : tuner::enumerate(r.family).kept) {
        const tuner::Measurement m = time(c);
        tuned_seen |= c == r.best.config;
        if (!m.passed) continue;
        if (c == r.best.config) tuned_ms = m.ms;
        if (best_ms == 0 || m.ms < best_ms) {
          best_ms = m.ms;
          verified_name = c.name();
        }
      }
      if (!tuned_seen) {  // the default, pruned
        const tuner::Measurement m = time(r.best.config);
        if (m.passed) tuned_ms = m.ms;
      }
      verified = r.tflops(best_ms);
      ratio = tuned_ms > 0 ? best_ms / tuned_ms : 0.0;
      worst_verified = verified_shapes == 0 ? ratio : std::min(worst_verified, ratio);
      ++verified_shapes;
      out << fmt::format("   exhaustive best {} {:.1f} TFLOP/s: tuned choice at {:.1f}% of it\n",
                         verified_name.empty() ? "-" : verified_name, verified, ratio * 100);
    }
    if (csv) {
      *csv << fmt::format("{},{},{},{},{},{},{},{:.2f},{},{:.2f},{:.4f},{},{:.2f},{:.4f}\n",
                          p.head_dim, p.seqlen_q, p.batch, p.heads_q,
                          is_causal(r.family.mask) ? 1 : 0, to_string(precision), best_name, best,
                          r.heuristic.config.name(), dflt, dflt > 0 ? best / dflt : 0.0,
                          verified_name, verified, ratio);
    }
  }
  if (verify) {
    if (verified_shapes > 0)
      out << fmt::format("worst tuned / exhaustive-best ratio: {:.3f}\n", worst_verified);
    else
      out << "nothing was verified: no shape has a tuned choice\n";
  }
  if (summary.failed_checks > 0) {
    out.flush();
    err << fmt::format("ftattn: {} check{} failed (listed above)", summary.failed_checks,
                       summary.failed_checks == 1 ? "" : "s");
    if (default_failed > 0)
      err << fmt::format(", the heuristic default's at {} shape{}", default_failed,
                         default_failed == 1 ? "" : "s");
    if (summary.without_winner > 0)
      err << fmt::format("; {} shape{} without a winner, so without a DB entry",
                         summary.without_winner, summary.without_winner == 1 ? "" : "s");
    err << "\n";
  }
  return summary;
}

}  // namespace ftattn::cli
