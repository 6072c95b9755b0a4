// GPU tests of Flash-ABFT and EFTA detect on fp8_e4m3 (protect/fp8_checksums.cuh): clean runs
// match the reference and report nothing, the output check is live, and planted flips are seen
// where each scheme looks.
#include <catch2/catch.hpp>
#include <utility>
#include <vector>

#include "ftattn/runtime.hpp"
#include "tests/gpu/attention_case.hpp"

using namespace ftattn;

namespace {

Runtime& fp8_runtime() {
  static Runtime rt;
  return rt;
}

KernelConfig fp8_config(int head_dim, Mask m, bool inject = false,
                        Protection prot = Protection::flash_abft) {
  KernelConfig c;
  c.head_dim = head_dim;
  c.precision = Precision::fp8_e4m3;
  c.mask = m;
  c.protection = prot;
  c.fault_injection = inject;
  return c;
}

// fp8_e4m3 needs sm_89 or newer; on older GPUs a case says so and checks nothing.
bool fp8_runs(Runtime& rt) {
  if (rt.device_arch().sm >= 89) return true;
  WARN("fp8_e4m3 needs sm_89 or newer: not run");
  return false;
}

// Seed of the fault-plan runs (gpu_test::run_planted).
constexpr uint64_t kPlantedSeed = 17;

}  // namespace

TEST_CASE("fp8 with each checksum scheme: right answers, no false alarm, a live check",
          "[gpu][q8][protect][fp8_abft]") {
  Runtime& rt = fp8_runtime();
  REQUIRE(rt.has_device());
  if (!fp8_runs(rt)) return;
  for (Protection prot :
       {Protection::flash_abft, Protection::efta_detect, Protection::efta_correct})
    for (int d : {64, 128, 256})
      for (Mask m : {Mask::none, Mask::causal}) {
        // Odd lengths (a short tail block, padded keys), GQA, LSE.
        const Problem pr = Problem::bhsd(2, 4, 2, 203, 517, d);
        gpu_test::check_clean_protected(rt, fp8_config(d, m, false, prot), pr, 5100 + d);
        gpu_test::check_live_output(rt, fp8_config(d, m, false, prot), pr, 5100 + d);
      }
}

TEST_CASE("fp8 efta_correct rebuilds a flipped score or O element",
          "[gpu][q8][protect][fp8_abft]") {
  Runtime& rt = fp8_runtime();
  if (!fp8_runs(rt)) return;
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 512, 128);
  for (Mask m : {Mask::none, Mask::causal})
    for (FaultSite site : {FaultSite::scores, FaultSite::output})
      for (int bit : {22, 29, 30, 31}) {
        // Thread 4, element 0: the top mantissa bit, exponent bits and the sign of a raw score
        // or of an FP32 O value, all far past the checks' thresholds.
        ProtectOptions o;
        o.inject = FaultPlan{site, 0, 4, 1, 0, bit};
        const gpu_test::Planted r = gpu_test::run_planted(
            rt, fp8_config(128, m, true, Protection::efta_correct), pr, o, kPlantedSeed);
        INFO(to_string(m) << " " << to_string(site) << " bit " << bit << ": "
                          << r.result.report.summary() << "; " << r.fault.summary());
        CHECK(r.fault.detected >= 1);
        CHECK(r.fault.corrected == r.fault.detected);
        CHECK(r.result.report.passed);
      }
}

TEST_CASE("fp8 efta_detect sees a flip at every site, recompute repairs the output",
          "[gpu][q8][protect][fp8_abft]") {
  Runtime& rt = fp8_runtime();
  if (!fp8_runs(rt)) return;
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 512, 128);
  for (FaultSite site :
       {FaultSite::scores, FaultSite::checksum, FaultSite::probs, FaultSite::row_max,
        FaultSite::row_sum, FaultSite::rescale, FaultSite::output, FaultSite::scale}) {
    // Thread 4 (quad thread 0), element 0, bit 29: a large change of a float (the score, the
    // checksum's hi column, O, the max, l, the rescale, a row's softmax factor) or of a P
    // byte's exponent.
    ProtectOptions o;
    o.inject = FaultPlan{site, 0, 4, 1, 0, 29};
    const KernelConfig c = fp8_config(128, Mask::causal, true, Protection::efta_detect);
    const gpu_test::Planted seen = gpu_test::run_planted(rt, c, pr, o, kPlantedSeed);
    INFO(to_string(site) << ": " << seen.result.report.summary() << "; " << seen.fault.summary());
    CHECK(seen.fault.detected >= 1);
    o.on_fault = OnFault::recompute;
    const gpu_test::Planted fixed = gpu_test::run_planted(rt, c, pr, o, kPlantedSeed);
    INFO("recompute: " << fixed.result.report.summary() << "; " << fixed.fault.summary());
    CHECK(fixed.result.report.passed);
    CHECK(fixed.fault.recomputed_tiles >= 1);
  }
}

TEST_CASE("fp8 flash_abft sees a flip in O and in its checksum, recompute repairs the output",
          "[gpu][q8][protect][fp8_abft]") {
  Runtime& rt = fp8_runtime();
  if (!fp8_runs(rt)) return;
  for (int d : {64, 128})
    for (Mask m : {Mask::none, Mask::causal}) {
      const Problem pr = Problem::bhsd(1, 2, 2, 256, 512, d);
      const KernelConfig c = fp8_config(d, m, true);
      // On sm_90a the wgmma kernel (kernel/fwd_q8_sm90.cuh): O is held to its folded block sums
      // in FP32, any bit; the checksum columns and a block's P V tile (site pv) to the E4M3
      // wgmma's bound, 2^-12 of the magnitude, which a sign or mantissa flip of a checksum that
      // cancels over the keys, or bit 30 of a value above 2 (it drops to about 0), may stay
      // under: bit 29 (values far above 1 grow by 2^64) must be seen, bit 30 must leave a right
      // answer either way.
      const bool wgmma = uses_wgmma(rt.resolve(c, &pr));
      if (!wgmma && d == 64) continue;
      std::vector<std::pair<FaultSite, int>> plants;
      for (int bit : {22, 29, 31}) plants.emplace_back(FaultSite::output, bit);
      for (int bit : wgmma ? std::vector<int>{29, 30} : std::vector<int>{22, 29, 31})
        plants.emplace_back(FaultSite::checksum, bit);
      if (wgmma)
        for (int bit : {29, 30}) plants.emplace_back(FaultSite::pv, bit);
      for (const auto& [site, bit] : plants) {
        // Thread 4 is quad thread 0 of its row: its element 0 is O's first column there, or the
        // checksum's hi column (columns 3-7 of the checksum tile hold zeros and are not read;
        // on the wgmma kernel its first digit column).
        ProtectOptions o;
        o.inject = FaultPlan{site, 0, 4, 1, 0, bit};
        o.on_fault = OnFault::recompute;
        const gpu_test::Planted r = gpu_test::run_planted(rt, c, pr, o, kPlantedSeed);
        INFO(r.result.config_name << " " << to_string(site) << " bit " << bit << ": "
                                  << r.result.report.summary() << "; " << r.fault.summary());
        CHECK(r.result.report.passed);
        if (wgmma && site != FaultSite::output && bit == 30) continue;
        CHECK(r.fault.detected >= 1);
        CHECK(r.fault.recomputed_tiles >= 1);
      }
    }
}
