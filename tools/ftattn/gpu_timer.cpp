#include "tools/ftattn/gpu_timer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "ftattn/errors.hpp"
#include "runtime/driver.hpp"

namespace ftattn::cli {

GpuTimer::GpuTimer(Runtime& runtime, int warmup, int iters, int check_rows)
    : runtime_(runtime), warmup_(warmup), iters_(iters), check_rows_(check_rows) {
  // No timed launch leaves no median to take (measure would read before its list's start).
  if (iters < 1 || warmup < 0) {
    throw ConfigError(fmt::format(
        "timing needs at least one timed launch and no negative warm-up (got iters {}, warmup "
        "{}): raise --iters to 1 or more, --warmup to 0 or more",
        iters, warmup));
  }
  runtime::ensure_context();
  int l2 = 0;
  runtime::check(runtime::driver().cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 0),
                 "cuDeviceGetAttribute(L2_CACHE_SIZE)");
  l2_flush_ = runtime::DeviceBuffer(std::max<size_t>(2 * static_cast<size_t>(l2), 1 << 20));
}

DeviceInputs& GpuTimer::inputs_for(const Problem& p, Precision precision) {
  const auto key = std::make_tuple(p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k,
                                   p.head_dim, precision);
  if (!inputs_ || key != inputs_key_) {
    inputs_.reset();  // free the last problem's buffers first
    inputs_ = make_inputs(p, precision, /*seed=*/7);
    inputs_key_ = key;
  }
  return *inputs_;
}

tuner::Measurement GpuTimer::measure(const KernelConfig& config, const Problem& problem) {
  tuner::Measurement m;
  m.config = config;
  try {
    DeviceInputs& in = inputs_for(problem, config.precision);
    // The reference check of run_on_device, without its timing: this timer times by itself.
    DeviceRunOptions check{.lse = false, .check_rows = check_rows_, .warmup = 0, .iters = 0};
    const DeviceRunResult r = run_on_device(runtime_, config, problem, in, check);
    if (!r.check.passed) {
      m.error = r.check.summary();
      return m;
    }
    auto kernel = runtime_.kernel(config);
    auto launch = [&] {
      kernel->launch(problem, in.dq.data(), in.dk.data(), in.dv.data(), in.d_o.data(), nullptr,
                     nullptr);
    };
    for (int i = 0; i < warmup_; ++i) launch();
    runtime::EventTimer timer;
    std::vector<double> ms;
    for (int i = 0; i < iters_; ++i) {
      l2_flush_.fill_bytes(static_cast<unsigned char>(i));
      timer.start(nullptr);
      launch();
      timer.stop(nullptr);
      ms.push_back(timer.elapsed_ms());
    }
    std::sort(ms.begin(), ms.end());
    m.ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
    m.passed = true;
  } catch (const Error& e) {
    m.error = e.what();
  }
  return m;
}

}  // namespace ftattn::cli
