// GPU tests of EFTA on int8 (protect/int8_checksums.cuh): clean runs match the reference and
// report nothing; a flip planted at every site is detected, and efta_correct rebuilds flipped
// scores exactly, whatever the bit, and P V (mma.sync) or O (wgmma, INT32: exactly) elements.
#include <catch2/catch.hpp>

#include "ftattn/campaign.hpp"
#include "ftattn/runtime.hpp"
#include "tests/gpu/attention_case.hpp"

using namespace ftattn;

namespace {

Runtime& int8_runtime() {
  static Runtime rt;
  return rt;
}

KernelConfig int8_config(int head_dim, Mask m, Protection prot, bool inject = false) {
  KernelConfig c;
  c.head_dim = head_dim;
  c.precision = Precision::int8;
  c.mask = m;
  c.protection = prot;
  c.fault_injection = inject;
  return c;
}

// EFTA on the one-warpgroup wgmma tile 64 x block_n w4s2 (sm_90a, head dims 64 and 128).
KernelConfig wgmma_efta_config(int head_dim, int block_n, Mask m, bool inject = false,
                               Protection prot = Protection::efta_detect) {
  KernelConfig c = int8_config(head_dim, m, prot, inject);
  c.block_m = 64;
  c.num_warps = 4;
  c.block_n = block_n;
  c.num_stages = 2;
  return c;
}

// f(head_dim, block_n, mask, scheme) on every wgmma tile int8 EFTA takes, when the GPU is sm_90a.
template <class F>
void for_each_wgmma_tile(Runtime& rt, F&& f) {
  if (!gpu_test::hopper_device(rt, "int8 EFTA on the wgmma kernel")) return;
  for (Protection prot : {Protection::efta_detect, Protection::efta_correct})
    for (int d : {64, 128})
      for (int n : {64, 128})
        for (Mask m : {Mask::none, Mask::causal}) f(d, n, m, prot);
}

// The mma.sync skeleton's config (sm_90 without "a").
KernelConfig on_mma_sync(KernelConfig c) {
  c.arch = Arch{90, false};
  return c;
}

// The value an every-site case plants at `site`: element 3, but a row's factor (element 0) at
// site scale, where a key's scale may leave every P as it was.
int every_site_element(FaultSite site) { return site == FaultSite::scale ? 0 : 3; }

// Seed of the fault-plan runs. Their plants (gpu_test::plant) hit key-block iteration 1 of 8 at
// 512 keys and the default 64-key blocks.
constexpr uint64_t kPlantedSeed = 11;

}  // namespace

TEST_CASE("int8 EFTA: right answers, no false alarm, a live output check, recompute",
          "[gpu][q8][protect][int8_efta]") {
  Runtime& rt = int8_runtime();
  REQUIRE(rt.has_device());
  for (Protection prot : {Protection::efta_detect, Protection::efta_correct})
    for (int d : {64, 128, 256})
      for (Mask m : {Mask::none, Mask::causal}) {
        // Odd lengths (a short tail block, padded keys), GQA. The integer checks are exact and
        // the softmax's second evaluation is bitwise: a clean run must report nothing.
        const Problem pr = Problem::bhsd(2, 4, 2, 203, 517, d);
        gpu_test::check_clean_protected(rt, int8_config(d, m, prot), pr, 4100 + d);
        // The FP32 output check's threshold is live. The wgmma kernel (efta_detect on sm_90a at
        // head dims 64 and 128) checks its INT32 O exactly instead: its planted flips below.
        if (uses_wgmma(rt.resolve(int8_config(d, m, prot), &pr))) continue;
        const FaultReport tripped =
            gpu_test::check_live_output(rt, int8_config(d, m, prot), pr, 4100 + d);
        CHECK(tripped.events.at(0).threshold > 0.f);  // the FP32 check, not an exact one
      }
}

TEST_CASE(
    "int8 efta_correct on mma.sync rebuilds a flipped score or P V exactly, any bit, and a flipped "
    "O element",
    "[gpu][q8][protect][int8_efta]") {
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 512, 128);
  for (Mask m : {Mask::none, Mask::causal})
    for (FaultSite site : {FaultSite::scores, FaultSite::pv, FaultSite::output})
      for (int bit : {0, 9, 22, 30, 31}) {
        // INT32 scores and P V: every bit is seen. The FP32 O: low mantissa bits stay within the
        // check's rounding tolerance (and the output's), so only the top mantissa bit, the
        // exponent's and the sign are planted.
        if (site == FaultSite::output && bit < 22) continue;
        const gpu_test::Planted s = gpu_test::run_planted(
            int8_runtime(), on_mma_sync(int8_config(128, m, Protection::efta_correct, true)), pr,
            gpu_test::plant(site, bit), kPlantedSeed);
        INFO(to_string(m) << " " << to_string(site) << " bit " << bit << ": "
                          << s.result.report.summary() << "; " << s.fault.summary());
        // Score and P V flips are repaired in INT32 before use. An O flip lands in the FP32
        // accumulator (site output) and is rebuilt from its weighted FP32 checksum at the end.
        CHECK(s.fault.detected >= 1);
        CHECK(s.fault.corrected == s.fault.detected);
        CHECK(s.result.report.passed);
        CHECK(s.fault.recomputed_tiles == 0);
      }
}

TEST_CASE(
    "int8 efta_correct on the wgmma kernel rebuilds a flipped score or O element exactly, any "
    "bit, before a fold or at the end",
    "[gpu][q8][protect][int8_efta]") {
  Runtime& rt = int8_runtime();
  if (!gpu_test::hopper_device(rt, "int8 efta_correct on the wgmma kernel")) return;
  for (int d : {64, 128})
    for (int n : {64, 128})
      for (Mask m : {Mask::none, Mask::causal}) {
        const Problem pr = Problem::bhsd(1, 2, 2, 256, 512, d);
        const KernelConfig c = wgmma_efta_config(d, n, m, true, Protection::efta_correct);
        REQUIRE(uses_wgmma(rt.resolve(c, &pr)));
        const gpu_test::Planted clean = gpu_test::run_planted(rt, c, pr, {}, kPlantedSeed);
        REQUIRE(clean.fault.detected == 0);
        // Key block 1 leaves folds to come (O is checked before each), the last block none.
        for (int iteration : {1, 512 / n - 1})
          for (FaultSite site : {FaultSite::scores, FaultSite::output})
            for (int bit : {0, 9, 22, 30, 31})
              for (int element : {0, 3}) {
                ProtectOptions o = gpu_test::plant(site, bit, element);
                o.inject->iteration = iteration;
                const gpu_test::Planted s = gpu_test::run_planted(rt, c, pr, o, kPlantedSeed);
                INFO(rt.resolve(c, &pr).name()
                     << " " << to_string(site) << " bit " << bit << " element " << element
                     << " block " << iteration << ": " << s.result.report.summary() << "; "
                     << s.fault.summary());
                // INT32 scores and O: every bit is seen and rebuilt exactly, so the output is
                // the clean run's, bit for bit.
                CHECK(s.fault.detected >= 1);
                CHECK(s.fault.corrected == s.fault.detected);
                CHECK(s.result.report.max_abs_error == clean.result.report.max_abs_error);
                CHECK(s.fault.recomputed_tiles == 0);
              }
        // The checksum columns: C0 and C1 (elements 8 and 9, quad lane 0's) are rebuilt, W0 and
        // W1 (elements 10 and 11 in lane 1; thread 5 is lane 1 of its quad) leave O as it is.
        for (int element : {8, 9, 10, 11}) {
          ProtectOptions o = gpu_test::plant(FaultSite::checksum, 13, element);
          o.inject->thread = element < 10 ? 4 : 5;
          const gpu_test::Planted s = gpu_test::run_planted(rt, c, pr, o, kPlantedSeed);
          INFO(rt.resolve(c, &pr).name() << " checksum element " << element << ": "
                                         << s.result.report.summary() << "; " << s.fault.summary());
          CHECK(s.fault.corrected == s.fault.detected);
          CHECK(s.result.report.max_abs_error == clean.result.report.max_abs_error);
          if (element < 10) CHECK(s.fault.detected >= 1);
        }
      }
}

TEST_CASE("int8 flash_abft sees a flipped P V accumulator exactly, any bit",
          "[gpu][q8][protect][int8_efta]") {
  // The mma.sync kernel's per-block INT32 P V (on Hopper sm_90 without "a": the wgmma kernel
  // accumulates P V onto O, whose flips its own cases plant).
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 512, 128);
  KernelConfig c = int8_config(128, Mask::none, Protection::flash_abft, true);
  c.arch = Arch{int8_runtime().device_arch().sm, false};
  for (int bit : {0, 13, 31}) {
    const gpu_test::Planted s = gpu_test::run_planted(
        int8_runtime(), c, pr, gpu_test::plant(FaultSite::pv, bit, 3, OnFault::recompute),
        kPlantedSeed);
    INFO("bit " << bit << ": " << s.result.report.summary() << "; " << s.fault.summary());
    CHECK(s.fault.detected >= 1);
    CHECK(s.fault.recomputed_tiles >= 1);
    CHECK(s.result.report.passed);
  }
}

TEST_CASE("int8 EFTA detects a flip at every site, recompute repairs the output",
          "[gpu][q8][protect][int8_efta]") {
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 512, 128);
  for (Protection prot : {Protection::efta_detect, Protection::efta_correct}) {
    const KernelConfig c = int8_config(128, Mask::causal, prot, true);
    // Every site the kernel has: pv is a key block's own INT32 P V, which the wgmma kernel
    // (efta_detect on sm_90a) does not keep.
    for (FaultSite site : campaign::sites_of(int8_runtime().resolve(c, &pr))) {
      // Bit 29: a large change of a float, P's top bit in byte 3 of a packed word, 2^29 in an
      // INT32 accumulator.
      const int element = every_site_element(site);
      const gpu_test::Planted seen = gpu_test::run_planted(
          int8_runtime(), c, pr, gpu_test::plant(site, 29, element), kPlantedSeed);
      INFO(to_string(prot) << " " << to_string(site) << ": " << seen.result.report.summary() << "; "
                           << seen.fault.summary());
      CHECK(seen.fault.detected >= 1);
      const gpu_test::Planted fixed = gpu_test::run_planted(
          int8_runtime(), c, pr, gpu_test::plant(site, 29, element, OnFault::recompute),
          kPlantedSeed);
      INFO("recompute: " << fixed.result.report.summary() << "; " << fixed.fault.summary());
      CHECK(fixed.result.report.passed);
      if (fixed.fault.detected > fixed.fault.corrected) CHECK(fixed.fault.recomputed_tiles >= 1);
    }
  }
}

TEST_CASE("int8 EFTA on the wgmma kernel: clean beside mma.sync on every head dim and tile",
          "[gpu][q8][protect][int8_efta]") {
  Runtime& rt = int8_runtime();
  for_each_wgmma_tile(rt, [&](int d, int n, Mask m, Protection prot) {
    const KernelConfig c = wgmma_efta_config(d, n, m, false, prot);
    REQUIRE(uses_wgmma(rt.resolve(c)));
    gpu_test::check_beside_mma_sync(rt, c, on_mma_sync(int8_config(d, m, prot)), 1, 7500);
  });
}

TEST_CASE("int8 EFTA on the wgmma kernel sees a flip at every site, every tile",
          "[gpu][q8][protect][int8_efta]") {
  Runtime& rt = int8_runtime();
  for_each_wgmma_tile(rt, [&](int d, int n, Mask m, Protection prot) {
    const Problem pr = Problem::bhsd(1, 2, 2, 256, 512, d);
    const KernelConfig c = wgmma_efta_config(d, n, m, true, prot);
    REQUIRE(uses_wgmma(rt.resolve(c, &pr)));
    // Bit 29 at every site (element 3 of the checksum site is a GEMM I digit value), and a
    // score's and P's lowest bit (the scores' check is exact, P compared bit for bit).
    struct Plant {
      FaultSite site;
      int bit, element;
    };
    std::vector<Plant> plants{{FaultSite::scores, 0, 3}, {FaultSite::probs, 0, 3}};
    for (FaultSite site : campaign::sites_of(rt.resolve(c, &pr)))
      plants.push_back({site, 29, every_site_element(site)});
    for (const Plant& plant : plants) {
      const gpu_test::Planted seen = gpu_test::run_planted(
          rt, c, pr, gpu_test::plant(plant.site, plant.bit, plant.element), kPlantedSeed);
      INFO("d" << d << " n" << n << " " << to_string(m) << " " << to_string(plant.site) << " bit "
               << plant.bit << " element " << plant.element << ": " << seen.result.report.summary()
               << "; " << seen.fault.summary());
      CHECK(seen.fault.detected >= 1);
      const gpu_test::Planted fixed = gpu_test::run_planted(
          rt, c, pr, gpu_test::plant(plant.site, plant.bit, plant.element, OnFault::recompute),
          kPlantedSeed);
      INFO("recompute: " << fixed.result.report.summary() << "; " << fixed.fault.summary());
      CHECK(fixed.result.report.passed);
      // efta_correct rebuilds scores, O and C0 / C1 in place; the rest is relaunched.
      if (fixed.fault.detected > fixed.fault.corrected)
        CHECK(fixed.fault.recomputed_tiles >= 1);
      else
        CHECK(prot == Protection::efta_correct);
    }
  });
}

TEST_CASE("int8 EFTA sees a flipped row factor, and no key scale flip stays silent",
          "[gpu][q8][protect][int8_efta]") {
  // Site scale: element 0 is a row's softmax factor (s_Q x softmax scale), wrong from the planted
  // block on; element 3 a key's scale as the lane loaded it, for that block. EFTA's second
  // evaluation reads both from memory by loads of its own: with the first's registers (as ptxas
  // had it) such a flip reached both evaluations and went silent. A key scale flip may leave
  // every P as it was (a key far below the row's max keeps P = 0): then O is right.
  Runtime& rt = int8_runtime();
  std::vector<KernelConfig> configs;
  for (Protection prot : {Protection::efta_detect, Protection::efta_correct}) {
    configs.push_back(on_mma_sync(int8_config(128, Mask::causal, prot, true)));
  }
  if (gpu_test::hopper_device(rt, "int8 EFTA's wgmma kernel: scale flips"))
    for (Protection prot : {Protection::efta_detect, Protection::efta_correct})
      for (int d : {64, 128})
        for (Mask m : {Mask::none, Mask::causal})
          configs.push_back(wgmma_efta_config(d, d == 128 ? 128 : 64, m, true, prot));
  for (const KernelConfig& c : configs) {
    const Problem problem = Problem::bhsd(1, 2, 2, 256, 512, c.head_dim);
    const std::string name = rt.resolve(c, &problem).name();
    // Silent: no report, and O further from the reference than twice the clean run's error.
    const gpu_test::Planted clean = gpu_test::run_planted(rt, c, problem, {}, kPlantedSeed);
    REQUIRE(clean.fault.detected == 0);
    const double bound = 2 * clean.result.report.max_abs_error + 1e-3;
    int key_flips_seen = 0;
    for (int element : {0, 3})
      for (int bit : {0, 12, 22, 23, 26, 29, 30, 31}) {
        const gpu_test::Planted seen = gpu_test::run_planted(
            rt, c, problem, gpu_test::plant(FaultSite::scale, bit, element), kPlantedSeed);
        INFO(name << " element " << element << " bit " << bit << ": "
                  << seen.result.report.summary() << "; " << seen.fault.summary());
        CHECK_FALSE((seen.fault.detected == 0 && seen.result.report.max_abs_error > bound));
        if (element == 0 && bit >= 23) CHECK(seen.fault.detected >= 1);  // x 2^k, or the sign
        if (element == 3 && seen.fault.detected >= 1) ++key_flips_seen;
        if (seen.fault.detected == 0) continue;
        const gpu_test::Planted fixed = gpu_test::run_planted(
            rt, c, problem, gpu_test::plant(FaultSite::scale, bit, element, OnFault::recompute),
            kPlantedSeed);
        INFO("recompute: " << fixed.result.report.summary() << "; " << fixed.fault.summary());
        CHECK(fixed.result.report.passed);
        CHECK(fixed.fault.recomputed_tiles >= 1);
      }
    INFO(name);
    CHECK(key_flips_seen >= 3);  // the planted key is live: its exponent flips change its P
  }
}
