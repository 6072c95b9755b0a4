#include "tools/ftattn/device_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <vector>

#include "runtime/driver.hpp"

namespace ftattn::cli {
namespace {

constexpr std::size_t kElementBytes = 2;  // f16 and bf16, the precisions that are built

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

DeviceRunResult run_on_device(Runtime& rt, const KernelConfig& wanted, const Problem& problem,
                              const DeviceRunOptions& opt) {
  runtime::ensure_context();  // NoDeviceError before any host work
  DeviceRunResult result;
  result.config = rt.resolve(wanted, &problem);
  validate(problem, result.config);  // before allocating anything
  const KernelConfig& c = result.config;
  const auto kernel = rt.kernel(c);
  result.from_cache = kernel->compiled().from_disk_cache;
  result.compile_seconds = kernel->compiled().compile_seconds;

  std::mt19937_64 rng(opt.seed);
  const reference::Tensor16 q = reference::random_tensor(
      rng, c.precision, problem.q, problem.batch, problem.heads_q, problem.seqlen_q, c.head_dim);
  const reference::Tensor16 k = reference::random_tensor(
      rng, c.precision, problem.k, problem.batch, problem.heads_kv, problem.seqlen_k, c.head_dim);
  const reference::Tensor16 v = reference::random_tensor(
      rng, c.precision, problem.v, problem.batch, problem.heads_kv, problem.seqlen_k, c.head_dim);
  reference::Tensor16 o;
  o.strides = problem.o;
  o.data.resize(reference::span_elements(problem.o, problem.batch, problem.heads_q,
                                         problem.seqlen_q, c.head_dim));
  std::vector<float> lse(
      opt.lse ? static_cast<std::size_t>(problem.batch) * problem.heads_q * problem.seqlen_q : 0);

  auto upload = [](const reference::Tensor16& t) {
    runtime::DeviceBuffer buffer(t.data.size() * kElementBytes);
    buffer.upload(t.data.data(), buffer.bytes());
    return buffer;
  };
  runtime::DeviceBuffer dq = upload(q), dk = upload(k), dv = upload(v);
  runtime::DeviceBuffer d_o(o.data.size() * kElementBytes);
  runtime::DeviceBuffer d_lse;
  if (opt.lse) d_lse = runtime::DeviceBuffer(lse.size() * sizeof(float));
  // 0xFF bytes are NaNs in f16, bf16 and float: any element the kernel fails to write shows.
  d_o.fill_bytes(0xFF);
  float* lse_ptr = opt.lse ? static_cast<float*>(d_lse.data()) : nullptr;
  if (opt.lse) d_lse.fill_bytes(0xFF);

  auto launch = [&] {
    kernel->launch(problem, dq.data(), dk.data(), dv.data(), d_o.data(), lse_ptr, nullptr);
  };
  launch();
  d_o.download(o.data.data(), d_o.bytes());  // synchronous: waits for the launch
  if (opt.lse) d_lse.download(lse.data(), d_lse.bytes());
  result.check = reference::check(problem, c.precision, c.mask, q, k, v, o,
                                  opt.lse ? &lse : nullptr, opt.check_rows, opt.seed);
  if (!result.check.passed || opt.iters <= 0) return result;

  for (int i = 0; i < opt.warmup; ++i) launch();
  runtime::EventTimer timer;
  std::vector<double> ms;
  for (int i = 0; i < opt.iters; ++i) {
    timer.start(nullptr);
    launch();
    timer.stop(nullptr);
    ms.push_back(timer.elapsed_ms());
  }
  result.timed = true;
  result.median_ms = median(ms);
  result.min_ms = *std::min_element(ms.begin(), ms.end());
  result.tflops = problem.flops(c.mask) / (result.median_ms * 1e-3) / 1e12;
  return result;
}

std::string describe_problem(const Problem& p) {
  return fmt::format("batch {}, heads {} (kv {}), seqlen {} (k {}), head_dim {}", p.batch,
                     p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim);
}

std::string describe_device() {
  const runtime::DeviceInfo info = runtime::device_info(0);
  return fmt::format("{} ({}, {} SMs, {:.0f} GiB, driver {}.{})", info.name,
                     runtime::native_arch(info).to_string(), info.sm_count,
                     static_cast<double>(info.total_memory) / (1024.0 * 1024 * 1024),
                     info.driver_version / 1000, info.driver_version % 1000 / 10);
}

void print_result(const DeviceRunResult& r, const DeviceRunOptions& opt) {
  fmt::print("kernel    {} ({})\n", r.config.name(),
             r.from_cache ? "from cache" : fmt::format("compiled in {:.2f} s", r.compile_seconds));
  fmt::print("check     {}\n", r.check.summary());
  if (r.timed) {
    fmt::print(
        "time      median {:.4f} ms, min {:.4f} ms over {} launches ({} warm-up): "
        "{:.1f} TFLOP/s\n",
        r.median_ms, r.min_ms, opt.iters, opt.warmup, r.tflops);
  } else if (!r.check.passed) {
    fmt::print("time      not timed: the check failed\n");
  }
}

}  // namespace ftattn::cli
