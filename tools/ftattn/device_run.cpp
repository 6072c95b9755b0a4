#include "tools/ftattn/device_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <vector>

#include "ftattn/quantize.hpp"
#include "runtime/driver.hpp"
#include "runtime/quantized_kernel.hpp"

namespace ftattn::cli {
namespace {

constexpr std::size_t kElementBytes = 2;  // f16 and bf16, the precisions that are built

}  // namespace

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double time_once(runtime::EventTimer& timer, const std::function<void()>& work) {
  timer.start(nullptr);
  work();
  timer.stop(nullptr);
  return timer.elapsed_ms();
}

void record_times(DeviceRunResult& r, const Problem& problem, std::vector<double> ms) {
  r.timed = true;
  r.min_ms = *std::min_element(ms.begin(), ms.end());
  r.median_ms = median_of(std::move(ms));
  r.tflops = problem.flops(r.config.mask) / (r.median_ms * 1e-3) / 1e12;
}

std::unique_ptr<DeviceInputs> make_inputs(const Problem& problem, Precision precision,
                                          uint64_t seed) {
  runtime::ensure_context();  // NoDeviceError before any host work
  auto in = std::make_unique<DeviceInputs>();
  in->precision = precision;
  std::mt19937_64 rng(seed);
  const int d = problem.head_dim;
  in->q = reference::random_tensor(rng, precision, problem.q, problem.batch, problem.heads_q,
                                   problem.seqlen_q, d);
  in->k = reference::random_tensor(rng, precision, problem.k, problem.batch, problem.heads_kv,
                                   problem.seqlen_k, d);
  in->v = reference::random_tensor(rng, precision, problem.v, problem.batch, problem.heads_kv,
                                   problem.seqlen_k, d);
  auto upload = [](const reference::Tensor16& t) {
    runtime::DeviceBuffer buffer(t.data.size() * kElementBytes);
    buffer.upload(t.data.data(), buffer.bytes());
    return buffer;
  };
  in->dq = upload(in->q);
  in->dk = upload(in->k);
  in->dv = upload(in->v);
  in->d_o = runtime::DeviceBuffer(
      reference::span_elements(problem.o, problem.batch, problem.heads_q, problem.seqlen_q, d) *
      kElementBytes);
  in->d_lse = runtime::DeviceBuffer(static_cast<std::size_t>(problem.batch) * problem.heads_q *
                                    problem.seqlen_q * sizeof(float));
  return in;
}

DeviceRunResult run_on_device(Runtime& rt, const KernelConfig& wanted, const Problem& problem,
                              const DeviceRunOptions& opt) {
  runtime::ensure_context();  // NoDeviceError before any host work
  const KernelConfig c = rt.resolve(wanted, &problem);
  validate(problem, c);  // before allocating anything
  auto inputs = make_inputs(problem, c.precision, opt.seed);
  return run_on_device(rt, c, problem, *inputs, opt);
}

PreparedRun prepare_on_device(Runtime& rt, const KernelConfig& wanted, const Problem& problem,
                              DeviceInputs& in, const DeviceRunOptions& opt) {
  PreparedRun run;
  DeviceRunResult& result = run.result;
  result.config = rt.resolve(wanted, &problem);
  const KernelConfig& c = result.config;
  if (c.precision != in.precision)
    throw ConfigError("the inputs were made for another precision than the config's");
  validate(problem, c);
  const std::shared_ptr<const Kernel> kernel = rt.kernel(c);
  result.from_cache = kernel->compiled().from_disk_cache;
  result.compile_seconds = kernel->compiled().compile_seconds;

  // Block-sparse kernels get a random mask of the asked density over the problem's blocks.
  std::vector<uint8_t> block_mask;
  auto d_mask = std::make_shared<runtime::DeviceBuffer>();
  if (is_block_sparse(c.mask)) {
    std::mt19937_64 rng(opt.seed + 1);
    std::bernoulli_distribution keep(opt.density);
    block_mask.resize(problem.block_mask_bytes());
    for (auto& b : block_mask) b = keep(rng) ? 1 : 0;
    *d_mask = runtime::DeviceBuffer(block_mask.size());
    d_mask->upload(block_mask.data(), block_mask.size());
  }
  const auto* mask_ptr =
      is_block_sparse(c.mask) ? static_cast<const unsigned char*>(d_mask->data()) : nullptr;

  reference::Tensor16 o;
  o.strides = problem.o;
  o.data.resize(in.d_o.bytes() / kElementBytes);
  std::vector<float> lse(opt.lse ? in.d_lse.bytes() / sizeof(float) : 0);
  // 0xFF bytes are NaNs in f16, bf16 and float: any element the kernel fails to write shows.
  in.d_o.fill_bytes(0xFF);
  float* lse_ptr = opt.lse ? static_cast<float*>(in.d_lse.data()) : nullptr;
  if (opt.lse) in.d_lse.fill_bytes(0xFF);

  DeviceInputs* inputs = &in;
  std::shared_ptr<const PreparedKv> prepared;
  if (opt.prepare_kv)
    prepared = std::make_shared<const PreparedKv>(
        kernel->prepare_kv(problem, in.dk.data(), in.dv.data(), nullptr));
  run.launch = [kernel, problem, inputs, lse_ptr, mask_ptr, d_mask, prepared] {
    ProtectOptions protect;
    protect.prepared_kv = prepared.get();
    kernel->launch(problem, inputs->dq.data(), inputs->dk.data(), inputs->dv.data(),
                   inputs->d_o.data(), lse_ptr, nullptr, mask_ptr, protect);
  };
  run.launch();
  in.d_o.download(o.data.data(), in.d_o.bytes());  // synchronous: waits for the launch
  if (opt.lse) in.d_lse.download(lse.data(), in.d_lse.bytes());
  result.check =
      reference::check(problem, c.precision, c.mask, in.q, in.k, in.v, o, opt.lse ? &lse : nullptr,
                       opt.check_rows, opt.seed, block_mask.empty() ? nullptr : block_mask.data());

  if (runtime::is_quantized(c.precision)) {
    struct Quantized {
      runtime::DeviceBuffer workspace;  // allocated on first use: a check alone needs none
      QuantizedInputs operands;
    };
    auto q = std::make_shared<Quantized>();
    run.quantize = [kernel, problem, inputs, q] {
      if (q->workspace.bytes() == 0)
        q->workspace = runtime::DeviceBuffer(QuantizedLayout::of(problem).bytes);
      q->operands = quantize(*kernel, problem, inputs->dq.data(), inputs->dk.data(),
                             inputs->dv.data(), Precision::f16, q->workspace.data(), nullptr);
    };
    run.attention = [kernel, problem, inputs, q, lse_ptr] {
      launch_quantized(*kernel, problem, q->operands, inputs->d_o.data(), Precision::f16, lse_ptr,
                       nullptr);
    };
  }
  return run;
}

DeviceRunResult run_on_device(Runtime& rt, const KernelConfig& wanted, const Problem& problem,
                              DeviceInputs& in, const DeviceRunOptions& opt) {
  PreparedRun run = prepare_on_device(rt, wanted, problem, in, opt);
  DeviceRunResult& result = run.result;
  if (!result.check.passed || opt.iters <= 0) return result;

  for (int i = 0; i < opt.warmup; ++i) run.launch();
  runtime::EventTimer timer;
  auto time = [&](const std::function<void()>& work) {
    std::vector<double> ms;
    for (int i = 0; i < opt.iters; ++i) ms.push_back(time_once(timer, work));
    return ms;
  };
  record_times(result, problem, time(run.launch));
  if (run.quantize) {
    result.quantize_ms = median_of(time(run.quantize));  // leaves the operands attention reads
    result.attention_ms = median_of(time(run.attention));
  }
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
  if (opt.prepare_kv)
    fmt::print("prepared  K and V once (Kernel::prepare_kv): the launches below skip that work\n");
  fmt::print("check     {}\n", r.check.summary());
  if (r.timed) {
    fmt::print(
        "time      median {:.4f} ms, min {:.4f} ms over {} launches ({} warm-up): "
        "{:.1f} TFLOP/s\n",
        r.median_ms, r.min_ms, opt.iters, opt.warmup, r.tflops);
    if (r.attention_ms > 0)
      fmt::print("          of which: attention {:.4f} ms, quantisation {:.4f} ms (medians)\n",
                 r.attention_ms, r.quantize_ms);
  } else if (!r.check.passed) {
    fmt::print("time      not timed: the check failed\n");
  }
}

}  // namespace ftattn::cli
