// GPU tests of the LLVM route: its kernels match the NVRTC route's output; IR-level injection
// flips values at run time as the plan says; DMR hardening reports the flips through the fault
// log and stays quiet on clean runs.
//
// The kernels are named in full (tiles fixed), so that a GPU machine without LLVM can run these
// tests from a cache filled elsewhere: bench/llvm_route.sh prefill compiles exactly these names.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "ftattn/reference.hpp"
#include "ftattn/runtime.hpp"
#include "runtime/driver.hpp"
#include "runtime/loaded_kernel.hpp"
#include "tests/gpu/attention_case.hpp"

using namespace ftattn;

namespace {

Runtime& llvm_runtime() {
  static Runtime rt;
  return rt;
}

// Inputs on the device, launched with hand-made params so that the fault plan and the fault log
// can be set (the runtime's protection API fills them for the source-level route).
struct Launcher {
  Problem problem;
  Precision precision;
  runtime::DeviceBuffer q, k, v, o, log;
  std::vector<uint16_t> out;

  Launcher(const Problem& p, Precision prec, uint64_t seed) : problem(p), precision(prec) {
    std::mt19937_64 rng(seed);
    const int d = p.head_dim;
    auto hq = reference::random_tensor(rng, prec, p.q, p.batch, p.heads_q, p.seqlen_q, d);
    auto hk = reference::random_tensor(rng, prec, p.k, p.batch, p.heads_kv, p.seqlen_k, d);
    auto hv = reference::random_tensor(rng, prec, p.v, p.batch, p.heads_kv, p.seqlen_k, d);
    q = runtime::DeviceBuffer(hq.data.size() * 2);
    k = runtime::DeviceBuffer(hk.data.size() * 2);
    v = runtime::DeviceBuffer(hv.data.size() * 2);
    q.upload(hq.data.data(), q.bytes());
    k.upload(hk.data.data(), k.bytes());
    v.upload(hv.data.data(), v.bytes());
    out.resize(reference::span_elements(p.o, p.batch, p.heads_q, p.seqlen_q, d));
    o = runtime::DeviceBuffer(out.size() * 2);
    log = runtime::DeviceBuffer(sizeof(FaultLog));
  }

  // Output as floats, and the fault log's `detected` counter.
  std::vector<float> run(Runtime& rt, const KernelConfig& config, const FaultPlanParams& plan,
                         unsigned long long& detected) {
    auto kernel = rt.compile(config);
    runtime::Module module(kernel->cubin);
    CUfunction f = module.function(kernel->symbol);
    AttentionParams params =
        runtime::make_params(problem, config, q.data(), k.data(), v.data(), o.data(), nullptr);
    params.fault = plan;
    params.fault_log = static_cast<FaultLog*>(log.data());
    log.fill_bytes(0);
    o.fill_bytes(0xFF);
    void* args[] = {&params};
    const unsigned m_blocks = (problem.seqlen_q + config.block_m - 1) / config.block_m;
    runtime::launch(f,
                    runtime::Dim3{m_blocks, static_cast<unsigned>(problem.heads_q),
                                  static_cast<unsigned>(problem.batch)},
                    runtime::Dim3{static_cast<unsigned>(32 * config.num_warps), 1, 1},
                    static_cast<unsigned>(config.shared_memory_bytes()), nullptr, args);
    runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    o.download(out.data(), o.bytes());
    FaultLog header{};
    log.download(&header, sizeof(header));
    detected = header.detected;
    std::vector<float> values(out.size());
    for (size_t i = 0; i < out.size(); ++i) values[i] = reference::from_bits(out[i], precision);
    return values;
  }
};

FaultPlanParams no_fault() { return FaultPlanParams{fault_site_none, 0, 0, 0, 0, 0}; }

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (!std::isnan(a[i])) worst = std::max(worst, double(std::fabs(a[i] - b[i])));
  }
  return worst;
}

// "f16_d64_m128n64_w4s2_none_none_llvm" on this GPU's arch.
KernelConfig named(Runtime& rt, const std::string& rest) {
  const Arch a = rt.device_arch();
  return KernelConfig::parse("ftattn_fwd_sm" + std::to_string(a.sm) +
                             (a.arch_specific ? "a_" : "_") + rest);
}

bool have_llvm_route() {
  if (llvm_route_built()) return true;
  WARN("this ftattn was built without the LLVM route: nothing to test");
  return false;
}

}  // namespace

TEST_CASE("LLVM-route kernels match the reference and the NVRTC route's output", "[gpu][llvm]") {
  if (!have_llvm_route()) return;
  Runtime& rt = llvm_runtime();
  REQUIRE(rt.has_device());
  for (int d : {64, 128})
    for (Precision p : {Precision::f16, Precision::bf16})
      for (Mask m : {Mask::none, Mask::causal}) {
        const Problem pr = Problem::bhsd(2, 3, 3, 300, 300, d);
        KernelConfig nvrtc = named(rt, std::string(to_string(p)) + "_d" + std::to_string(d) +
                                           "_m128n64_w4s2_" + std::string(to_string(m)) + "_none");
        KernelConfig llvm = nvrtc;
        llvm.backend = Backend::llvm;
        INFO(llvm.name());
        const auto checked = gpu_test::run_case(rt, llvm, pr, true, 0, 7 + d);
        INFO(checked.report.summary());
        CHECK(checked.report.passed);

        Launcher inputs(pr, p, 100 + d);
        unsigned long long detected = 0;
        const auto a = inputs.run(rt, nvrtc, no_fault(), detected);
        const auto b = inputs.run(rt, llvm, no_fault(), detected);
        // Same algorithm, other instruction selection and FMA contraction: a few 16-bit ulps.
        CHECK(max_difference(a, b) <= (p == Precision::bf16 ? 2e-2 : 4e-3));
      }
}

TEST_CASE("IR-level injection flips one dynamic instance as planned", "[gpu][llvm]") {
  if (!have_llvm_route()) return;
  Runtime& rt = llvm_runtime();
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 256, 64);
  KernelConfig c = named(rt, "f16_d64_m128n64_w4s2_none_none_llvm");
  Launcher inputs(pr, Precision::f16, 5);
  unsigned long long detected = 0;
  KernelConfig plain = c;
  const auto clean = inputs.run(rt, plain, no_fault(), detected);

  for (IrClass cls : {IrClass::fp_arith, IrClass::exp_max, IrClass::mma}) {
    INFO(to_string(cls));
    c.ir_inject = cls;
    // Unplanned: the instrumented kernel computes what the plain one does.
    CHECK(max_difference(clean, inputs.run(rt, c, no_fault(), detected)) == 0.0);
    // Counting mode: thread 0 of CTA 0 reports how many instances it ran.
    unsigned long long instances = 0;
    inputs.run(rt, c, FaultPlanParams{fault_site_ir, 0, 0, -1, 0, 0}, instances);
    REQUIRE(instances > 10);
    // Flips of the top exponent bit and of the sign of a few instances. One flip may be masked
    // legitimately (a corrupted row max is max-reduced with the other lanes' maxima), so at least
    // one of them, not each, must change the output.
    int changed = 0;
    for (int instance : {int(instances / 2), int(instances) - 1, 1})
      for (int bit : {30, 31}) {
        const auto faulty =
            inputs.run(rt, c, FaultPlanParams{fault_site_ir, 0, 0, instance, 0, bit}, detected);
        const bool differs = max_difference(clean, faulty) > 0.0;
        UNSCOPED_INFO("instance " << instance << " bit " << bit << (differs ? "" : ": masked"));
        changed += differs;
      }
    CHECK(changed > 0);
    // The same plan aimed at another site leaves the output alone.
    CHECK(max_difference(
              clean,
              inputs.run(rt, c, FaultPlanParams{fault_site_scores, 0, 0, int(instances / 2), 0, 30},
                         detected)) == 0.0);
  }
}

TEST_CASE("DMR hardening is quiet on clean runs and reports injected flips", "[gpu][llvm]") {
  if (!have_llvm_route()) return;
  Runtime& rt = llvm_runtime();
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 256, 64);
  const KernelConfig nvrtc = named(rt, "f16_d64_m128n64_w4s2_causal_none");
  KernelConfig c = nvrtc;
  c.backend = Backend::llvm;
  Launcher inputs(pr, Precision::f16, 9);
  unsigned long long detected = 0;
  const auto reference_out = inputs.run(rt, nvrtc, no_fault(), detected);
  for (IrClass cls : {IrClass::fp_arith, IrClass::exp_max, IrClass::mma}) {
    INFO(to_string(cls));
    c.ir_harden = cls;
    c.ir_inject = cls;
    const auto out = inputs.run(rt, c, no_fault(), detected);
    CHECK(detected == 0);
    CHECK(max_difference(reference_out, out) <= 4e-3);
    unsigned long long instances = 0;
    inputs.run(rt, c, FaultPlanParams{fault_site_ir, 0, 0, -1, 0, 0}, instances);
    REQUIRE(instances > 0);
    inputs.run(rt, c, FaultPlanParams{fault_site_ir, 0, 0, int(instances / 3), 0, 30}, detected);
    CHECK(detected == 1);  // thread 0 of CTA 0 saw its copy disagree
  }
}
