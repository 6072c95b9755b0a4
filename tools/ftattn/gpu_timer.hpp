// The tuner's timer on the GPU: each candidate is checked against the host reference once per
// problem, then timed with CUDA events (warm-up, median), the L2 flushed before every launch.
#pragma once

#include <map>
#include <memory>
#include <tuple>

#include "tools/ftattn/device_run.hpp"
#include "tuner/tune.hpp"

namespace ftattn::cli {

class GpuTimer : public tuner::Timer {
 public:
  GpuTimer(Runtime& runtime, int warmup, int iters, int check_rows);
  tuner::Measurement measure(const KernelConfig& config, const Problem& problem) override;

 private:
  DeviceInputs& inputs_for(const Problem& problem, Precision precision);

  Runtime& runtime_;
  int warmup_, iters_, check_rows_;
  runtime::DeviceBuffer l2_flush_;  // written between launches so no run starts with a warm L2
  std::tuple<int, int, int, int, int, int, Precision> inputs_key_{};
  std::unique_ptr<DeviceInputs> inputs_;  // one problem's inputs at a time
};

}  // namespace ftattn::cli
