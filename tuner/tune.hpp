// Measuring candidates and picking the fastest, independent of how a candidate is timed (the GPU
// timer lives with the CLI; tests use a fake one).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ftattn/runtime.hpp"
#include "ftattn/tuner.hpp"

namespace ftattn::tuner {

struct Measurement {
  KernelConfig config;
  double ms = 0.0;      // median of the timed launches
  bool passed = false;  // matched the reference; only such a candidate may win
  std::string error;    // why it did not run or pass
};

// Times one candidate on one problem.
class Timer {
 public:
  virtual ~Timer() = default;
  virtual Measurement measure(const KernelConfig& config, const Problem& problem) = 0;
};

struct ShapeResult {
  Family family;
  Problem problem;
  Bucket bucket;
  std::vector<Measurement> measured;  // every candidate, in the order given
  Measurement best;                   // the fastest that passed
  Measurement heuristic;              // the heuristic default, measured in the same run
  double flops = 0.0;
  bool found = false;  // some candidate passed
  double tflops(double ms) const { return ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0; }
};

// Measures every candidate (and the heuristic default, once, if it is not among them) and keeps
// the fastest that passed its check. `tick` is called after each measurement.
ShapeResult tune_shape(const Family& family, const Problem& problem,
                       const std::vector<KernelConfig>& candidates, const KernelConfig& heuristic,
                       Timer& timer, const std::function<void()>& tick = {});

// Compiles `candidates` on `threads` threads (NVRTC is thread-safe; the runtime compiles each
// config once), then prunes by spills and occupancy. Compile failures are rejected with the
// compiler's first line.
Pruned compile_and_prune(Runtime& runtime, const std::vector<KernelConfig>& candidates,
                         const SmLimits& limits, int threads, int max_spill_bytes = 1024);

// The DB entry for a tuned shape on `device`, recording the heuristic's choice for its bucket.
Entry to_entry(const ShapeResult& result, const DeviceKey& device);

}  // namespace ftattn::tuner
