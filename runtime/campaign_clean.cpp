// Clean runs of a protected kernel: false alarms counted over the input distributions, and the
// thresholds calibrated from the residuals clean launches record.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ftattn/campaign.hpp"
#include "runtime/driver.hpp"
#include "runtime/protected_launch.hpp"

namespace ftattn::campaign {

namespace {

// Fresh clean inputs of one distribution per run, uploaded into buffers kept across runs.
struct CleanInputs {
  runtime::DeviceBuffer q, k, v, o;
  CleanInputs(const Problem& pr)
      : o(reference::span_elements(pr.o, pr.batch, pr.heads_q, pr.seqlen_q, pr.head_dim) *
          sizeof(uint16_t)) {}
  void draw(Distribution d, std::mt19937_64& rng, Precision p, const Problem& pr) {
    auto upload = [&](runtime::DeviceBuffer& buffer, const Strides& strides, int heads,
                      int seqlen) {
      const reference::Tensor16 t =
          random_tensor(d, rng, p, strides, pr.batch, heads, seqlen, pr.head_dim);
      if (buffer.bytes() < t.data.size() * sizeof(uint16_t))
        buffer = runtime::DeviceBuffer(t.data.size() * sizeof(uint16_t));
      buffer.upload(t.data.data(), t.data.size() * sizeof(uint16_t));
    };
    upload(q, pr.q, pr.heads_q, pr.seqlen_q);
    upload(k, pr.k, pr.heads_kv, pr.seqlen_k);
    upload(v, pr.v, pr.heads_kv, pr.seqlen_k);
  }
  FaultReport run(Runtime& rt, const Problem& pr, const KernelConfig& config,
                  const ProtectOptions& protect) {
    const FaultReport r = rt.attention(pr, q.data(), k.data(), v.data(), o.data(), nullptr, config,
                                       nullptr, nullptr, protect);
    runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    return r;
  }
};

}  // namespace

std::vector<FalseAlarms> count_false_alarms(Runtime& rt, const KernelConfig& config,
                                            const Problem& pr, int runs, uint64_t seed,
                                            const Thresholds& thresholds) {
  std::vector<FalseAlarms> rows;
  for (Distribution d : kDistributions) rows.push_back({d});
  CleanInputs inputs(pr);
  ProtectOptions protect;
  protect.thresholds = thresholds;
  for (int i = 0; i < runs; ++i) {
    FalseAlarms& row = rows[static_cast<size_t>(i) % rows.size()];
    std::mt19937_64 rng(seed + static_cast<uint64_t>(i));
    inputs.draw(row.distribution, rng, config.precision, pr);
    const FaultReport r = inputs.run(rt, pr, config, protect);
    ++row.runs;
    row.flagged += r.detected > 0;
    row.detected += r.detected;
    row.corrected += r.corrected;
  }
  return rows;
}

Thresholds thresholds_in_use(const KernelConfig& config, const Thresholds& given) {
  return runtime::effective_thresholds(config.precision, config.protection, given);
}

std::vector<Calibration> calibrate_thresholds(Runtime& rt, const KernelConfig& config,
                                              const Problem& pr, int runs, uint64_t seed) {
  if (config.protection == Protection::none || config.protection == Protection::decoupled)
    throw ConfigError(fmt::format(
        "{}: threshold calibration is for the fused protected kernels (flash_abft, efta_detect, "
        "efta_correct)",
        config.name()));
  if (runs <= 0) throw ConfigError("calibration needs at least one clean run per distribution");
  // The launcher adds this absolute floor to every linear check's tolerance.
  constexpr double kFloor = 1e-6;
  constexpr float kTight = 1e-9f, kLoose = 1e20f;
  // Enough records for every check of every row and key block of the problem to fire at once.
  const long long rows = static_cast<long long>(pr.batch) * pr.heads_q * pr.seqlen_q;
  const int max_events =
      static_cast<int>(std::min<long long>(1 << 24, rows * 16 * (pr.seqlen_k / 16 + 4)));

  ProtectOptions linear;  // scores, row_sum and output tight; the product check out of the way
  linear.max_events = max_events;
  linear.thresholds = {kTight, kLoose, kTight, kTight};
  // The product check's tolerance is not linear in its threshold (an exp2 of it): bisect, in
  // log space, the smallest value this input passes with the other checks out of the way.
  ProtectOptions product;
  product.max_events = 64;
  product.thresholds = {kLoose, 0.0f, kLoose, kLoose};
  constexpr double kLow = 1e-10, kHigh = 1e-1;

  std::vector<Calibration> out;
  CleanInputs inputs(pr);
  auto alarms_at = [&](double t) {
    product.thresholds.probs = static_cast<float>(t);
    // Only the product check's records: the row-sum range check (SNVR) has no threshold.
    const FaultReport r = inputs.run(rt, pr, config, product);
    return std::any_of(r.events.begin(), r.events.end(),
                       [](const FaultEvent& e) { return e.stage == FaultStage::probs; });
  };
  for (Distribution d : kDistributions) {
    Calibration c;
    c.distribution = d;
    for (int i = 0; i < runs; ++i) {
      std::mt19937_64 rng(seed + 7919ull * static_cast<uint64_t>(d) + static_cast<uint64_t>(i));
      inputs.draw(d, rng, config.precision, pr);
      const FaultReport r = inputs.run(rt, pr, config, linear);
      c.truncated = c.truncated || r.detected > r.events.size();
      c.records += static_cast<long long>(r.events.size());
      for (const FaultEvent& e : r.events) {
        // threshold = t * bound + floor, so the value this record needs is t * (mag - floor) /
        // (threshold - floor).
        const double mag = e.magnitude, thr = e.threshold;
        if (thr <= kFloor) continue;
        const float need = static_cast<float>(kTight * (mag - kFloor) / (thr - kFloor));
        if (e.stage == FaultStage::scores) c.needed.scores = std::max(c.needed.scores, need);
        if (e.stage == FaultStage::output) c.needed.output = std::max(c.needed.output, need);
        if (e.stage == FaultStage::row_sum) c.needed.row_sum = std::max(c.needed.row_sum, need);
      }
      if (config.protection != Protection::flash_abft) {
        float need = 0.0f;  // the check never fires, even at kLow
        if (alarms_at(kHigh)) {
          need = std::numeric_limits<float>::infinity();  // beyond any useful value
        } else if (alarms_at(kLow)) {
          double lo = std::log(kLow), hi = std::log(kHigh);  // alarms at lo, none at hi
          for (int step = 0; step < 16; ++step) {
            const double mid = 0.5 * (lo + hi);
            (alarms_at(std::exp(mid)) ? lo : hi) = mid;
          }
          need = static_cast<float>(std::exp(hi));
        }
        c.needed.probs = std::max(c.needed.probs, need);
      }
      ++c.runs;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace ftattn::campaign
