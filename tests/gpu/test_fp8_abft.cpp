// GPU tests of Flash-ABFT on fp8_e4m3 (protect/fp8_checksums.cuh): clean runs match the reference
// and report nothing, the output check is live, and a flip in O or in the checksum is seen.
#include <catch2/catch.hpp>

#include "ftattn/runtime.hpp"
#include "tests/gpu/attention_case.hpp"

using namespace ftattn;

namespace {

Runtime& fp8_runtime() {
  static Runtime rt;
  return rt;
}

KernelConfig fp8_config(int head_dim, Mask m, bool inject = false) {
  KernelConfig c;
  c.head_dim = head_dim;
  c.precision = Precision::fp8_e4m3;
  c.mask = m;
  c.protection = Protection::flash_abft;
  c.fault_injection = inject;
  return c;
}

}  // namespace

TEST_CASE("fp8 with flash_abft: right answers, no false alarm, a live check, recompute",
          "[gpu][q8][protect][fp8_abft]") {
  Runtime& rt = fp8_runtime();
  REQUIRE(rt.has_device());
  if (rt.device_arch().sm < 89) {
    WARN("fp8_e4m3 needs sm_89 or newer: not run");
    return;
  }
  for (int d : {64, 128, 256})
    for (Mask m : {Mask::none, Mask::causal}) {
      // Odd lengths (a short tail block, padded keys), GQA, LSE.
      const Problem pr = Problem::bhsd(2, 4, 2, 203, 517, d);
      gpu_test::check_clean_protected(rt, fp8_config(d, m), pr, 5100 + d);
      gpu_test::check_live_output(rt, fp8_config(d, m), pr, 5100 + d);
    }
}

TEST_CASE("fp8 flash_abft sees a flip in O and in its checksum; recompute repairs the output",
          "[gpu][q8][protect][fp8_abft]") {
  Runtime& rt = fp8_runtime();
  if (rt.device_arch().sm < 89) {
    WARN("fp8_e4m3 needs sm_89 or newer: not run");
    return;
  }
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 512, 128);
  for (Mask m : {Mask::none, Mask::causal})
    for (FaultSite site : {FaultSite::output, FaultSite::checksum})
      for (int bit : {22, 29, 31}) {
        // Thread 4 is quad thread 0 of its row: its element 0 is O's first column there, or the
        // checksum's hi column (columns 3-7 of the checksum tile hold zeros and are not read).
        ProtectOptions o;
        o.inject = FaultPlan{site, 0, 4, 1, 0, bit};
        o.on_fault = OnFault::recompute;
        FaultReport fault;
        const gpu_test::CaseResult r = gpu_test::run_case(rt, fp8_config(128, m, true), pr, false,
                                                          0, 13, false, nullptr, &o, &fault);
        INFO(to_string(m) << " " << to_string(site) << " bit " << bit << ": " << r.report.summary()
                          << "; " << fault.summary());
        CHECK(fault.detected >= 1);
        CHECK(fault.recomputed_tiles >= 1);
        CHECK(r.report.passed);
      }
}
