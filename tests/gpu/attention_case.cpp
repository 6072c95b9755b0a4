#include "tests/gpu/attention_case.hpp"

#include <catch2/catch.hpp>

#include "runtime/driver.hpp"

namespace ftattn::gpu_test {

std::optional<Arch> hopper_device(Runtime& rt, const char* what) {
  const Arch device = rt.device_arch();
  if (device.sm == 90 && device.arch_specific) return device;
  WARN(what << " needs sm_90a, not " << device.to_string() << ": not run");
  return std::nullopt;
}

DeviceIo::DeviceIo(const reference::Tensor16& q_host, const reference::Tensor16& k_host,
                   const reference::Tensor16& v_host)
    : q(q_host.data.size() * 2),
      k(k_host.data.size() * 2),
      v(v_host.data.size() * 2),
      o(q_host.data.size() * 2) {
  q.upload(q_host.data.data(), q.bytes());
  k.upload(k_host.data.data(), k.bytes());
  v.upload(v_host.data.data(), v.bytes());
  o.fill_bytes(0xFF);
}

reference::Tensor16 DeviceIo::output(const Problem& problem) const {
  reference::Tensor16 out;
  out.strides = problem.o;
  out.data.resize(o.bytes() / 2);
  o.download(out.data.data(), o.bytes());
  return out;
}

CaseResult run_case(Runtime& rt, const KernelConfig& config, const Problem& problem, bool with_lse,
                    int rows, uint64_t seed, bool via_attention,
                    const std::vector<uint8_t>* block_mask, const ProtectOptions* protect,
                    FaultReport* fault) {
  const KernelConfig full = rt.resolve(config, &problem);
  const Precision p = full.precision;
  std::mt19937_64 rng(seed);
  const int d = problem.head_dim;
  auto q = reference::random_tensor(rng, p, problem.q, problem.batch, problem.heads_q,
                                    problem.seqlen_q, d);
  auto k = reference::random_tensor(rng, p, problem.k, problem.batch, problem.heads_kv,
                                    problem.seqlen_k, d);
  auto v = reference::random_tensor(rng, p, problem.v, problem.batch, problem.heads_kv,
                                    problem.seqlen_k, d);
  reference::Tensor16 o;
  o.strides = problem.o;
  o.data.resize(
      reference::span_elements(problem.o, problem.batch, problem.heads_q, problem.seqlen_q, d));

  runtime::DeviceBuffer dq(q.data.size() * 2), dk(k.data.size() * 2), dv(v.data.size() * 2),
      dout(o.data.size() * 2);
  dq.upload(q.data.data(), dq.bytes());
  dk.upload(k.data.data(), dk.bytes());
  dv.upload(v.data.data(), dv.bytes());
  dout.fill_bytes(0xFF);  // NaN everywhere: an element the kernel does not write fails the check
  const size_t lse_count = static_cast<size_t>(problem.batch) * problem.heads_q * problem.seqlen_q;
  runtime::DeviceBuffer dlse(with_lse ? lse_count * sizeof(float) : 0);
  if (with_lse) dlse.fill_bytes(0xFF);

  runtime::DeviceBuffer dmask(block_mask ? block_mask->size() : 0);
  if (block_mask) dmask.upload(block_mask->data(), dmask.bytes());
  const auto* mask_ptr = block_mask ? static_cast<const unsigned char*>(dmask.data()) : nullptr;

  float* lse_ptr = with_lse ? static_cast<float*>(dlse.data()) : nullptr;
  if (protect != nullptr) {
    FaultReport r = rt.kernel(full)->run(problem, dq.data(), dk.data(), dv.data(), dout.data(),
                                         lse_ptr, nullptr, mask_ptr, *protect);
    if (fault != nullptr) *fault = std::move(r);
  } else if (via_attention)
    rt.attention(problem, dq.data(), dk.data(), dv.data(), dout.data(), nullptr, config, lse_ptr,
                 mask_ptr);
  else
    rt.kernel(full)->launch(problem, dq.data(), dk.data(), dv.data(), dout.data(), lse_ptr, nullptr,
                            mask_ptr);
  runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
  dout.download(o.data.data(), dout.bytes());
  std::vector<float> lse(with_lse ? lse_count : 0);
  if (with_lse) dlse.download(lse.data(), dlse.bytes());

  CaseResult r;
  r.config_name = full.name();
  r.report = reference::check(problem, p, full.mask, q, k, v, o, with_lse ? &lse : nullptr, rows,
                              seed + 17, block_mask ? block_mask->data() : nullptr);
  return r;
}

void check_clean_protected(Runtime& rt, const KernelConfig& config, const Problem& problem,
                           uint64_t seed) {
  FaultReport fault;
  const ProtectOptions report;
  const CaseResult r =
      run_case(rt, config, problem, true, 256, seed, false, nullptr, &report, &fault);
  INFO(r.config_name << ": " << r.report.summary() << "; " << fault.summary());
  CHECK(r.report.passed);
  CHECK(fault.clean());
}

Planted run_planted(Runtime& rt, const KernelConfig& config, const Problem& problem,
                    const ProtectOptions& options, uint64_t seed) {
  Planted out;
  out.result = run_case(rt, config, problem, false, 0, seed, false, nullptr, &options, &out.fault);
  return out;
}

ProtectOptions plant(FaultSite site, int bit, int element, OnFault on_fault) {
  ProtectOptions o;
  o.inject = FaultPlan{site, 0, 5, 1, element, bit};
  o.on_fault = on_fault;
  return o;
}

FaultReport check_live_output(Runtime& rt, const KernelConfig& config, const Problem& problem,
                              uint64_t seed) {
  ProtectOptions tight;
  tight.thresholds.output = 1e-30f;
  tight.on_fault = OnFault::recompute;
  FaultReport tripped;
  const CaseResult t =
      run_case(rt, config, problem, false, 0, seed, false, nullptr, &tight, &tripped);
  INFO(t.config_name << " tight: " << t.report.summary() << "; " << tripped.summary());
  CHECK(tripped.detected > 0);
  REQUIRE_FALSE(tripped.events.empty());
  CHECK(tripped.events.at(0).stage == FaultStage::output);
  CHECK(tripped.recomputed_tiles >= 1);
  CHECK(t.report.passed);
  return tripped;
}

void check_beside_mma_sync(Runtime& rt, const KernelConfig& c, const KernelConfig& sync,
                           int long_batch, uint64_t seed0) {
  const int d = c.head_dim;
  for (const Problem& pr :
       {Problem::bhsd(2, 4, 2, 203, 517, d), Problem::bhsd(long_batch, 16, 8, 2048, 2048, d)}) {
    const uint64_t seed = seed0 + d + pr.seqlen_q;
    const int rows = pr.seqlen_q > 1000 ? 128 : 0;
    FaultReport fa, fb;
    const ProtectOptions report;
    const auto a = run_case(rt, c, pr, true, rows, seed, false, nullptr, &report, &fa);
    const auto b = run_case(rt, sync, pr, true, rows, seed, false, nullptr, &report, &fb);
    INFO(a.config_name << " s" << pr.seqlen_q << ": " << a.report.summary() << "; " << fa.summary()
                       << " | mma.sync: " << b.report.summary());
    CHECK(a.report.passed);
    CHECK(fa.clean());
    CHECK(fb.clean());
    CHECK(a.report.rel_l2_error <= 1.5 * b.report.rel_l2_error + 1e-4);
    CHECK(a.report.max_lse_error <= 2 * b.report.max_lse_error + 1e-4);
  }
}

}  // namespace ftattn::gpu_test
