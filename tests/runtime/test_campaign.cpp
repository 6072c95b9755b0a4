// Campaign logic without a GPU: classification, the tolerance, trial planning, bit ranges,
// tallies, and a whole campaign over a fake backend.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "ftattn/campaign.hpp"
#include "ftattn/errors.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/shell.hpp"
#include "tests/support/temp_dir.hpp"

#ifndef FTATTN_CLI_PATH
#error "FTATTN_CLI_PATH must name the built ftattn executable"
#endif

using namespace ftattn;
using namespace ftattn::campaign;

namespace {

KernelConfig fused(int head_dim, int block_m, int block_n, int warps, Mask mask) {
  KernelConfig c = test::tile_config(head_dim, block_m, block_n, warps, 1, Arch::parse("sm_80"));
  c.mask = mask;
  return c;
}

}  // namespace

TEST_CASE("classification follows detection, correction and the tolerance", "[campaign]") {
  CHECK(classify({0, 0, 0, true}) == Outcome::masked);
  CHECK(classify({0, 0, 0, false}) == Outcome::sdc);
  CHECK(classify({1, 1, 0, true}) == Outcome::corrected);
  CHECK(classify({2, 1, 0, true}) == Outcome::corrected);
  CHECK(classify({1, 0, 3, true}) == Outcome::corrected);  // fixed by recompute
  CHECK(classify({1, 0, 0, true}) == Outcome::false_positive);
  CHECK(classify({1, 0, 0, false}) == Outcome::detected);
  // Every detection reported corrected, yet the output is wrong: the report misleads.
  CHECK(classify({1, 1, 0, false}) == Outcome::miscorrected);
  CHECK(classify({3, 3, 0, false}) == Outcome::miscorrected);
  // An uncorrected detection remains, or a recompute left some unresolved: the caller was told.
  CHECK(classify({2, 1, 0, false}) == Outcome::detected);
  CHECK(classify({1, 1, 2, false, 1}) == Outcome::detected);
  CHECK(classify({1, 0, 3, false, 2}) == Outcome::detected);
  // A recompute that reports nothing unresolved says the output is right: when it is not, the
  // caller is misled as by a false correction.
  CHECK(classify({1, 1, 2, false, 0}) == Outcome::miscorrected);
  CHECK(classify({1, 0, 3, false, 0}) == Outcome::miscorrected);
  CHECK(classify({1, 0, 3, true, 0}) == Outcome::corrected);
  CHECK(classify({1, 0, 3, true, 1}) == Outcome::corrected);
  // A recorded correction of an output nobody can see wrong is not a false positive.
  CHECK(classify({3, 3, 0, true}) != Outcome::false_positive);
  CHECK(to_string(Outcome::miscorrected) == "miscorrected");
  std::set<std::string_view> names;
  for (Outcome o : kOutcomes) names.insert(to_string(o));
  CHECK(names.size() == kOutcomes.size());
  CHECK(names.count("miscorrected") == 1);
}

TEST_CASE("ulp is the 16-bit spacing at the magnitude", "[campaign]") {
  CHECK(ulp(1.0, Precision::f16) == Approx(std::ldexp(1.0, -10)));
  CHECK(ulp(1.5, Precision::f16) == Approx(std::ldexp(1.0, -10)));
  CHECK(ulp(2.0, Precision::f16) == Approx(std::ldexp(1.0, -9)));
  CHECK(ulp(-0.3, Precision::bf16) == Approx(std::ldexp(1.0, -2 - 7)));
  // Below the smallest normal the spacing stops shrinking.
  CHECK(ulp(0.0, Precision::f16) == Approx(std::ldexp(1.0, -24)));
  CHECK(ulp(1e-30, Precision::f16) == Approx(std::ldexp(1.0, -24)));
}

TEST_CASE("the tolerance is the kernel's own error with a one-ulp floor", "[campaign]") {
  const Problem pr = Problem::bhsd(1, 1, 1, 64, 64, 64);
  const std::vector<float> clean = {1.0f, 0.5f, 2.0f, std::numeric_limits<float>::quiet_NaN()};
  const std::vector<double> ref = {1.01, 0.5, 2.0, 1.0};
  const auto tol = element_tolerance(clean, ref, Precision::f16, pr, /*strict=*/true);
  CHECK(tol[0] == Approx(0.01).epsilon(1e-3));    // own error above one ulp
  CHECK(tol[1] == Approx(std::ldexp(1.0, -11)));  // exact: one ulp at 0.5
  CHECK(tol[2] == Approx(std::ldexp(1.0, -9)));   // one ulp at 2
  CHECK(tol[3] == 0.0f);                          // a NaN baseline tolerates nothing
  CHECK_THROWS_AS(element_tolerance(clean, {1.0}, Precision::f16, pr), Error);
  // The default adds the accuracy bar: 2e-3 of the reference's RMS for f16, 1e-2 for bf16.
  const std::vector<double> flat = {1.0, 1.0, 1.0, 1.0};
  const std::vector<float> exact = {1.0f, 1.0f, 1.0f, 1.0f};
  CHECK(element_tolerance(exact, flat, Precision::f16, pr)[0] == Approx(2e-3));
  CHECK(element_tolerance(exact, flat, Precision::bf16, pr)[0] == Approx(1e-2));
  CHECK(element_tolerance(exact, flat, Precision::f16, pr, true)[0] ==
        Approx(std::ldexp(1.0, -10)));

  const std::vector<float> same = {1.0f, 0.5f, 2.0f, 0.0f};
  std::vector<float> base = {1.0f, 0.5f, 2.0f, 0.0f};
  const std::vector<float> t = {0.01f, 0.001f, 0.002f, 0.0f};
  CHECK(deviation(same.data(), base.data(), t.data(), 4).within());
  std::vector<float> moved = {1.009f, 0.5f, 2.0f, 0.0f};
  CHECK(deviation(moved.data(), base.data(), t.data(), 4).within());
  moved[1] = 0.502f;  // 2e-3 > 1e-3
  Deviation d = deviation(moved.data(), base.data(), t.data(), 4);
  CHECK(d.over == 1);
  CHECK(d.max_abs == Approx(0.009).epsilon(0.01));
  moved[3] = std::numeric_limits<float>::quiet_NaN();
  d = deviation(moved.data(), base.data(), t.data(), 4);
  CHECK(d.over == 2);
  CHECK(std::isinf(d.max_abs));
}

TEST_CASE("the accuracy bar is reference::check's for the precision and problem", "[campaign]") {
  // f16_pasa, int8 and fp8 campaigns once took f16's 2e-3 whatever their own bound.
  const Problem pr = Problem::bhsd(1, 1, 1, 64, 64, 64);
  for (Precision p : {Precision::f16, Precision::bf16, Precision::f16_pasa, Precision::int8,
                      Precision::fp8_e4m3}) {
    INFO(to_string(p));
    CHECK(accuracy_bar(p, pr) == reference::tolerance(p, pr).rel_l2);
    const std::vector<double> flat = {1.0, 1.0};
    CHECK(element_tolerance({1.0f, 1.0f}, flat, p, pr)[0] ==
          Approx(reference::tolerance(p, pr).rel_l2));
  }
  CHECK(accuracy_bar(Precision::f16_pasa, pr) == Approx(5e-3));
  CHECK(accuracy_bar(Precision::int8, pr) == Approx(5e-2));
  CHECK(accuracy_bar(Precision::fp8_e4m3, pr) == Approx(1e-1));
  // int8's bound grows past 4k keys, and the bar with it.
  const Problem long_keys = Problem::bhsd(1, 1, 1, 64, 65536, 64);
  CHECK(accuracy_bar(Precision::int8, long_keys) > accuracy_bar(Precision::int8, pr));
}

TEST_CASE("an unchanged infinite element is within tolerance, a NaN or a new one is not",
          "[campaign]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Fault-free Inf and NaN get tolerance 0 (element_tolerance); Inf - Inf is NaN.
  const Problem pr = Problem::bhsd(1, 1, 1, 64, 64, 64);
  const std::vector<float> clean = {inf, -inf, nan, 1.0f};
  const std::vector<double> ref = {1.0, 1.0, 1.0, 1.0};
  const std::vector<float> tol = element_tolerance(clean, ref, Precision::f16, pr);
  CHECK(tol[0] == 0.0f);
  CHECK(tol[2] == 0.0f);
  const std::vector<float> finite_clean = {inf, -inf, 2.0f, 1.0f};
  Deviation d = deviation(finite_clean.data(), finite_clean.data(), tol.data(), 4);
  CHECK(d.within());
  CHECK(d.max_abs == 0.0);
  // A NaN is never within, even where the fault-free run gave one (NaN == NaN passed before).
  d = deviation(clean.data(), clean.data(), tol.data(), 4);
  CHECK(d.over == 1);
  CHECK(std::isinf(d.max_abs));
  const std::vector<float> other_nan = {inf, -inf, -nan, 1.0f};
  CHECK(deviation(other_nan.data(), clean.data(), tol.data(), 4).over == 1);
  // Changed non-finite elements still count.
  std::vector<float> faulty = {-inf, -inf, 2.0f, 1.0f};
  CHECK(deviation(faulty.data(), finite_clean.data(), tol.data(), 4).over == 1);
  faulty = {1.0f, -inf, 2.0f, 1.0f};
  d = deviation(faulty.data(), clean.data(), tol.data(), 4);
  CHECK(d.over == 2);
  CHECK(std::isinf(d.max_abs));
  // A finite value turned non-finite is a deviation even under an infinite tolerance.
  const std::vector<float> finite = {1.0f, 2.0f}, wide = {inf, inf};
  for (float bad : {inf, -inf, nan}) {
    const std::vector<float> turned = {bad, 2.0f};
    CHECK(deviation(turned.data(), finite.data(), wide.data(), 2).over == 1);
  }
}

TEST_CASE("bit ranges parse lo:hi or one bit and reject the rest", "[campaign]") {
  CHECK(BitRange::parse("0:31").lo == 0);
  CHECK(BitRange::parse("0:31").hi == 31);
  CHECK(BitRange::parse("23:30").lo == 23);
  CHECK(BitRange::parse("30").hi == 30);
  CHECK(BitRange::parse("30").lo == 30);
  for (const char* bad : {"", "a:b", "0:32", "-1:3", "5:4", "1:2:3", "3x"})
    CHECK_THROWS_AS(BitRange::parse(bad), ConfigError);
}

TEST_CASE("site names round-trip and typos are refused", "[campaign]") {
  for (FaultSite s : {FaultSite::scores, FaultSite::probs, FaultSite::row_max, FaultSite::row_sum,
                      FaultSite::rescale, FaultSite::output, FaultSite::checksum, FaultSite::ir,
                      FaultSite::pv, FaultSite::scale})
    CHECK(parse_site(site_name(s)) == s);
  CHECK_THROWS_AS(parse_site("none"), ConfigError);
  CHECK_THROWS_AS(parse_site("score"), ConfigError);
}

TEST_CASE("site all names every site the kernel has, each with an injection space", "[campaign]") {
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 256, 64);
  auto has = [](const std::vector<FaultSite>& v, FaultSite s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (Protection prot : {Protection::none, Protection::flash_abft, Protection::efta_detect,
                          Protection::efta_correct, Protection::decoupled})
    for (Precision p : {Precision::f16, Precision::int8}) {
      if (prot == Protection::decoupled && p == Precision::int8) continue;
      KernelConfig c = fused(64, 64, 64, 4, Mask::causal);
      c.protection = prot, c.precision = p;
      const std::vector<FaultSite> sites = sites_of(c);
      INFO(to_string(prot) << " " << to_string(p));
      CHECK(has(sites, FaultSite::scores));
      CHECK(has(sites, FaultSite::output));
      CHECK(!has(sites, FaultSite::ir));
      CHECK(has(sites, FaultSite::checksum) == (prot != Protection::none));
      CHECK(has(sites, FaultSite::pv) == (p == Precision::int8));
      CHECK(has(sites, FaultSite::rescale) == (prot != Protection::decoupled));
      // The dequantisation factors: 8-bit kernels with a checksum scheme (injection builds).
      const bool scale =
          p == Precision::int8 && prot != Protection::none && prot != Protection::decoupled;
      CHECK(has(sites, FaultSite::scale) == scale);
      // Every one is plannable on this problem: no site a campaign would then refuse.
      for (FaultSite s : sites) CHECK_NOTHROW(injection_space(c, pr, s));
      if (!scale && prot != Protection::decoupled) {
        try {
          injection_space(c, pr, FaultSite::scale);
          FAIL("site scale was planned for " << c.name());
        } catch (const ConfigError& e) {
          CHECK(std::string(e.what()).find(p == Precision::int8
                                               ? "pick a checksum scheme"
                                               : "use an int8 or fp8_e4m3") != std::string::npos);
        }
      }
    }
  // int8 Flash-ABFT on Hopper's wgmma kernel accumulates P V onto O: no pv site, which a plan
  // then refuses and says what to use.
  KernelConfig wgmma = test::tile_config(64, 64, 128, 4, 2, Arch::parse("sm_90a"));
  wgmma.precision = Precision::int8;
  wgmma.protection = Protection::flash_abft;
  wgmma.fault_injection = true;
  REQUIRE(uses_wgmma(wgmma));
  const std::vector<FaultSite> sites = sites_of(wgmma);
  CHECK(has(sites, FaultSite::checksum));
  CHECK(has(sites, FaultSite::rescale));
  CHECK(has(sites, FaultSite::scale));
  CHECK_FALSE(has(sites, FaultSite::pv));
  for (FaultSite s : sites) CHECK_NOTHROW(injection_space(wgmma, pr, s));
  try {
    injection_space(wgmma, pr, FaultSite::pv);
    FAIL("site pv was planned for the wgmma kernel");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("use site output") != std::string::npos);
  }
  // fp8 Flash-ABFT on the wgmma kernel keeps each block's FP32 P V tile before O takes it, and
  // checks it: a pv site. On the mma.sync kernel (sm_90 without "a") P V goes into O itself.
  for (bool arch_specific : {true, false}) {
    KernelConfig fp8 = wgmma;
    fp8.precision = Precision::fp8_e4m3;
    fp8.arch = Arch{90, arch_specific};
    INFO(fp8.name());
    REQUIRE(uses_wgmma(fp8) == arch_specific);
    CHECK(has(sites_of(fp8), FaultSite::pv) == arch_specific);
    CHECK(has(sites_of(fp8), FaultSite::scale));
    if (arch_specific) {
      CHECK_NOTHROW(injection_space(fp8, pr, FaultSite::pv));
    } else {
      try {
        injection_space(fp8, pr, FaultSite::pv);
        FAIL("site pv was planned for the mma.sync fp8 kernel");
      } catch (const ConfigError& e) {
        CHECK(std::string(e.what()).find("use site output") != std::string::npos);
      }
    }
  }
}

TEST_CASE("the fused injection space follows the kernel's grid and causal schedule", "[campaign]") {
  const Problem pr = Problem::bhsd(2, 3, 3, 300, 300, 64);
  SECTION("no mask: every CTA sees every key block") {
    const KernelConfig c = fused(64, 128, 64, 4, Mask::none);
    const InjectionSpace s = injection_space(c, pr, FaultSite::scores);
    CHECK(s.iterations.size() == 3u * 3 * 2);  // ceil(300/128) x heads x batch
    for (int n : s.iterations) CHECK(n == 5);  // ceil(300/64)
    CHECK(s.threads == 128);
    CHECK(s.elements == 2 * 8 * 4);  // m_tiles x s_tiles x 4
    CHECK(injection_space(c, pr, FaultSite::output).elements == 2 * 8 * 4);
    CHECK(injection_space(c, pr, FaultSite::row_sum).elements == 4);
  }
  SECTION("f16_pasa: S and P are f16 pairs, one value per packed register") {
    KernelConfig c = fused(64, 128, 64, 4, Mask::none);
    c.precision = Precision::f16_pasa;
    c.protection = Protection::efta_correct;
    c.fault_injection = true;
    CHECK(injection_space(c, pr, FaultSite::scores).elements == 2 * 8 * 2);
    CHECK(injection_space(c, pr, FaultSite::probs).elements == 2 * 8 * 2);
    CHECK(injection_space(c, pr, FaultSite::output).elements == 2 * 8 * 4);  // FP32 O
    CHECK(injection_space(c, pr, FaultSite::scores).iterations.size() == 3u * 3 * 2);
  }
  SECTION("causal: longest first, the triangle's counts") {
    const KernelConfig c = fused(64, 128, 64, 4, Mask::causal);
    const InjectionSpace s = injection_space(c, pr, FaultSite::probs);
    // blockIdx.x 0 runs m_block 2 (rows 256..383: keys up to 299 -> 5 blocks), then rows
    // 128..255 (keys up to 255 -> 4 blocks), then rows 0..127 (2 blocks).
    REQUIRE(s.iterations.size() >= 3);
    CHECK(s.iterations[0] == 5);
    CHECK(s.iterations[1] == 4);
    CHECK(s.iterations[2] == 2);
  }
  SECTION("causal on three consumers: the ragged tile is tile 0") {
    // 400 rows in 192-row tiles: tile 0 is rows 0..15, tile 1 rows 16..207, tile 2 rows
    // 208..399 (kernel/fwd_ws_sm90.cuh). blockIdx.x 0 runs tile 2 (keys up to 399: 4 blocks of
    // 128), then tile 1 (keys up to 207: 2, where row / 192's tiles would give 3), then tile 0.
    KernelConfig c = test::tile_config(128, 192, 128, 12, 2, Arch::parse("sm_90a"), Precision::f16,
                                       Mask::causal, Protection::flash_abft);
    c.fault_injection = true;
    REQUIRE(warp_specialized(c));
    const InjectionSpace s =
        injection_space(c, Problem::bhsd(1, 1, 1, 400, 400, 128), FaultSite::output);
    CHECK(s.iterations == std::vector<int>{4, 2, 2});
  }
  SECTION("causal with more queries than keys leaves the first rows empty") {
    const Problem tall = Problem::bhsd(1, 1, 1, 512, 64, 64);
    const KernelConfig c = fused(64, 128, 64, 4, Mask::causal);
    const InjectionSpace s = injection_space(c, tall, FaultSite::scores);
    // Rows 0..447 see no key: m_blocks 0..2 (x = 3, 2, 1) have nothing to run.
    CHECK(s.iterations == std::vector<int>{1, 0, 0, 0});
  }
  CHECK_THROWS_AS(injection_space(fused(64, 128, 64, 4, Mask::none), pr, FaultSite::ir),
                  ConfigError);
  CHECK_THROWS_AS(injection_space(fused(64, 128, 64, 4, Mask::none), pr, FaultSite::none),
                  ConfigError);
}

TEST_CASE("the decoupled injection space names each site's kernel", "[campaign]") {
  KernelConfig c = fused(128, 128, 64, 4, Mask::none);
  c.protection = Protection::decoupled;
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 256, 128);
  const InjectionSpace scores = injection_space(c, pr, FaultSite::scores);
  CHECK(scores.iterations.size() == 2u * 2 * 2);         // 2 x 2 tiles of 128 per head
  for (int n : scores.iterations) CHECK(n == 128 / 32);  // k steps over head_dim
  CHECK(scores.threads == 256);
  const InjectionSpace probs = injection_space(c, pr, FaultSite::probs);
  CHECK(probs.iterations.size() == 2u * 256 / 4);  // 4 rows per CTA
  for (int n : probs.iterations) CHECK(n == 2);    // 256 keys in chunks of 128
  const InjectionSpace out = injection_space(c, pr, FaultSite::output);
  for (int n : out.iterations) CHECK(n == 256 / 32);
  CHECK_THROWS_AS(injection_space(c, pr, FaultSite::rescale), ConfigError);

  SECTION("causal skips the tiles above the diagonal") {
    c.mask = Mask::causal;
    const InjectionSpace s = injection_space(c, pr, FaultSite::scores);
    int empty = 0;
    for (int n : s.iterations) empty += n == 0;
    CHECK(empty == 2);  // the upper-right tile of each head
    const InjectionSpace p = injection_space(c, pr, FaultSite::probs);
    CHECK(p.iterations.front() == 1);  // rows 0..3: 4 keys at most, one chunk
    CHECK(p.iterations.back() == 2);
  }
}

TEST_CASE("trial plans are reproducible, in range and spread over the space", "[campaign]") {
  InjectionSpace s;
  s.iterations = {0, 3, 1, 0, 4};
  s.threads = 64;
  s.elements = 10;
  const BitRange bits{20, 27};
  std::map<std::pair<int, int>, int> hits;
  std::set<int> bits_seen;
  for (uint64_t i = 0; i < 8000; ++i) {
    const FaultPlan p = plan_trial(s, FaultSite::probs, bits, 42, i);
    REQUIRE(p.site == FaultSite::probs);
    REQUIRE(p.cta >= 0);
    REQUIRE(p.cta < 5);
    REQUIRE(p.iteration < s.iterations[p.cta]);
    REQUIRE(p.thread < 64);
    REQUIRE(p.element < 10);
    REQUIRE(p.bit >= 20);
    REQUIRE(p.bit <= 27);
    ++hits[{p.cta, p.iteration}];
    bits_seen.insert(p.bit);
    const FaultPlan again = plan_trial(s, FaultSite::probs, bits, 42, i);
    REQUIRE((again.cta == p.cta && again.thread == p.thread && again.iteration == p.iteration &&
             again.element == p.element && again.bit == p.bit));
  }
  // 8 (CTA, iteration) pairs, each near 1000 hits: CTAs weigh by their work.
  CHECK(hits.size() == 8u);
  for (const auto& [key, n] : hits) CHECK(std::abs(n - 1000) < 150);
  CHECK(bits_seen.size() == 8u);
  InjectionSpace empty;
  empty.threads = 32;
  empty.iterations = {0, 0};
  CHECK_THROWS_AS(plan_trial(empty, FaultSite::scores, bits, 1, 0), ConfigError);
}

TEST_CASE("tallies count and bound rates", "[campaign]") {
  Tally t;
  for (int i = 0; i < 90; ++i) t.add(Outcome::masked);
  for (int i = 0; i < 10; ++i) t.add(Outcome::corrected);
  CHECK(t.trials == 100);
  CHECK(t.share(Outcome::corrected) == Approx(0.1));
  CHECK(t.count(Outcome::sdc) == 0);
  // Zero of 10,000: the bound is 1 - 0.05^(1/10000) (one-sided 95%), not 0.
  CHECK(clopper_pearson_upper_95(0, 10000) == Approx(2.9953e-4).epsilon(5e-4));
  CHECK(clopper_pearson_upper_95(0, 0) == 1.0);
  const std::string table = summary_table(t);
  CHECK(table.find("corrected") != std::string::npos);
  CHECK(table.find("miscorrected") != std::string::npos);
  CHECK(table.find("10.000%") != std::string::npos);
  CHECK(table.find("2.951%") != std::string::npos);  // 0 of 100: 1 - 0.05^(1/100)
}

TEST_CASE("the 95% upper bound is the exact one-sided Clopper-Pearson bound", "[campaign]") {
  // Reference values from an exact rational binomial sum bisected in Python (fractions), not
  // from this code's lgamma sum.
  struct Case {
    long long k, n;
    double upper;
  };
  for (const Case c :
       {Case{0, 1, 0.95}, Case{0, 8, 0.312344}, Case{0, 10000, 2.99528e-4}, Case{1, 10, 0.394163},
        Case{3, 10, 0.606624}, Case{9, 10, 0.994884}, Case{5, 100, 0.102253},
        Case{50, 100, 0.586378}, Case{1, 1000, 4.73499e-3}, Case{14, 10000, 2.18779e-3}}) {
    INFO(c.k << " of " << c.n);
    CHECK(clopper_pearson_upper_95(c.k, c.n) == Approx(c.upper).epsilon(5e-5));
  }
  CHECK(clopper_pearson_upper_95(10, 10) == 1.0);
  CHECK(clopper_pearson_upper_95(11, 10) == 1.0);
  CHECK(clopper_pearson_upper_95(0, -1) == 1.0);
  // Millions of trials: finite, above the rate, close to it (sigma of 500k of 1M is 5e-4).
  const double big = clopper_pearson_upper_95(500000, 1000000);
  CHECK(big > 0.5);
  CHECK(big == Approx(0.5 + 1.6449 * 5e-4).epsilon(1e-4));
  // Rises with hits, falls with trials.
  CHECK(clopper_pearson_upper_95(2, 1000) > clopper_pearson_upper_95(1, 1000));
  CHECK(clopper_pearson_upper_95(1, 2000) < clopper_pearson_upper_95(1, 1000));
}

TEST_CASE(
    "the summary CSV's counts end with miscorrected and the settings, or keep an old "
    "file's layout",
    "[campaign]") {
  Tally t;
  for (int i = 0; i < 6; ++i) t.add(Outcome::masked);
  t.add(Outcome::detected);
  t.add(Outcome::miscorrected);
  t.add(Outcome::miscorrected);
  t.add(Outcome::sdc);
  SummarySettings settings;
  settings.on_fault = "recompute";
  settings.strict = true;
  settings.thresholds = Thresholds{2e-5f, 1e-4f, 5e-7f, 2e-4f};
  settings.seed = 42;
  settings.heads_kv = 2;
  settings.ir_count = "warp";
  settings.baseline_detected = 3;
  const std::string header = summary_csv_counts_header();
  CHECK(header ==
        "trials,masked,corrected,detected,sdc,false_positive,sdc_upper95,seconds,"
        "miscorrected,silent_upper95,on_fault,strict,thresholds,seed,heads_kv,ir_count,"
        "baseline_detected");
  const std::string row = summary_csv_counts(t, 1.5, settings);
  CHECK(row.rfind("10,6,0,1,1,0,", 0) == 0);
  CHECK(std::count(row.begin(), row.end(), ',') == std::count(header.begin(), header.end(), ','));
  // silent_upper95 bounds sdc and miscorrected together: 3 of 10.
  CHECK(row.find(fmt::format(",1.50,2,{:.3e},recompute,1,", clopper_pearson_upper_95(3, 10))) !=
        std::string::npos);
  CHECK(row.find(",scores=2e-05;probs=0.0001;output=5e-07;row_sum=0.0002,42,2,warp,3") !=
        std::string::npos);
  CHECK(row.substr(row.size() - 2) == ",3");
  // Clean-input rows: no policy, tolerance or fault-free baseline.
  const std::string clean_row = summary_csv_counts(t, 0.0, SummarySettings{});
  CHECK(clean_row.find(",-,-,-,0,0,-,-") != std::string::npos);
  // The build before the settings: up to miscorrected.
  const std::string mid_header = summary_csv_counts_header(SummaryLayout::before_settings);
  CHECK(mid_header ==
        "trials,masked,corrected,detected,sdc,false_positive,sdc_upper95,seconds,miscorrected");
  const std::string mid_row = summary_csv_counts(t, 1.5, settings, SummaryLayout::before_settings);
  CHECK(mid_row.substr(mid_row.size() - 7) == ",1.50,2");
  CHECK(std::count(mid_row.begin(), mid_row.end(), ',') ==
        std::count(mid_header.begin(), mid_header.end(), ','));
  // An older build's file: its columns, detected counting the miscorrected trials.
  const std::string old_header = summary_csv_counts_header(SummaryLayout::before_miscorrected);
  CHECK(old_header == "trials,masked,corrected,detected,sdc,false_positive,sdc_upper95,seconds");
  const std::string old_row =
      summary_csv_counts(t, 1.5, settings, SummaryLayout::before_miscorrected);
  CHECK(old_row.rfind("10,6,0,3,1,0,", 0) == 0);
  CHECK(std::count(old_row.begin(), old_row.end(), ',') ==
        std::count(old_header.begin(), old_header.end(), ','));
  CHECK(summary_csv_layout("config,site," + header + "\r\n") == SummaryLayout::current);
  CHECK(summary_csv_layout("config,site," + mid_header + "\n") == SummaryLayout::before_settings);
  CHECK(summary_csv_layout("miscorrected,trials") == SummaryLayout::before_settings);
  CHECK(summary_csv_layout("config,site," + old_header) == SummaryLayout::before_miscorrected);
  CHECK(summary_csv_layout("config,miscorrected_x") == SummaryLayout::before_miscorrected);
  CHECK(summary_csv_layout("") == SummaryLayout::before_miscorrected);
}

namespace {

// `ftattn inject` on a machine without a GPU: the summary CSV is opened (and a new one gets its
// header) before the device is looked for. Returns stderr.
std::string inject_without_gpu(const test::TempDir& dir, const std::filesystem::path& summary) {
  const test::CliRun r =
      test::run_cli(FTATTN_CLI_PATH, dir.path(),
                    "--cache-dir " + test::shell_quote((dir.path() / "c").string()) +
                        " inject --head-dim 64 --site scores --trials 10 --summary-csv " +
                        test::shell_quote(summary.string()),
                    {.env = {"FTATTN_LIBCUDA=" + (dir.path() / "none.so").string()},
                     .streams = test::Streams::stderr_only});
  UNSCOPED_INFO(test::describe(r));
  CHECK(r.exit_code == 3);  // a good command, no GPU: not the bad-flag code 2
  CHECK(r.err.find("no trials were run") != std::string::npos);
  return r.err;
}

}  // namespace

TEST_CASE("cli inject: a new summary CSV gets miscorrected, an old one keeps its columns",
          "[campaign][cli]") {
  test::TempDir dir;
  const std::filesystem::path fresh = dir.path() / "new.csv", old = dir.path() / "old.csv",
                              mid = dir.path() / "mid.csv";
  std::string err = inject_without_gpu(dir, fresh);
  INFO(err);
  CHECK(err.find("no CUDA driver") != std::string::npos);
  CHECK(err.find("miscorrected") == std::string::npos);
  // A new file gets its header with its first row: a run that stops before one leaves none.
  CHECK_FALSE(std::filesystem::exists(fresh));
  {
    std::ofstream out(fresh);
    out << "config,protection,precision,head_dim,mask,shape,site,bits,"
        << summary_csv_counts_header() << "\n";
  }
  {
    std::ofstream out(old);
    out << "config,protection,precision,head_dim,mask,shape,site,bits,"
        << summary_csv_counts_header(SummaryLayout::before_miscorrected) << "\n";
  }
  {
    std::ofstream out(mid);
    out << "config,protection,precision,head_dim,mask,shape,site,bits,"
        << summary_csv_counts_header(SummaryLayout::before_settings) << "\n";
  }
  err = inject_without_gpu(dir, old);
  INFO(err);
  CHECK(err.find("has no miscorrected column") != std::string::npos);
  CHECK(err.find("no CUDA driver") != std::string::npos);
  err = inject_without_gpu(dir, mid);
  INFO(err);
  CHECK(err.find("has no settings columns") != std::string::npos);
  // An appended file that already has the columns says nothing.
  err = inject_without_gpu(dir, fresh);
  CHECK(err.find("miscorrected") == std::string::npos);
  CHECK(err.find("settings") == std::string::npos);
}

TEST_CASE("the false-alarm distributions have the asked mean and spread", "[campaign]") {
  const Problem pr = Problem::bhsd(1, 1, 1, 64, 64, 64);
  for (Distribution d : kDistributions) {
    std::mt19937_64 rng(7);
    const auto t = random_tensor(d, rng, Precision::f16, pr.q, 1, 1, 64, 64);
    double sum = 0, lo = 1e9, hi = -1e9;
    for (uint16_t bits : t.data) {
      const double x = reference::from_bits(bits, Precision::f16);
      REQUIRE(std::isfinite(x));
      sum += x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    const double mean = sum / static_cast<double>(t.data.size());
    INFO(to_string(d));
    if (d == Distribution::uniform_biased) {
      CHECK(mean == Approx(20).margin(0.05));
      CHECK(lo >= 19.5);
      CHECK(hi <= 20.5);
    } else if (d == Distribution::hybrid_biased) {
      CHECK(mean == Approx(20).margin(0.2));
    } else {
      CHECK(std::abs(mean) < 0.2);
    }
    if (d == Distribution::uniform) {
      CHECK(lo >= -1.0);
      CHECK(hi <= 1.0);
    }
  }
}

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Output and LSE = clean plus a fault effect the plan's bit decides; reports as told, on top of
// `alarms`, which every run reports (false alarms of the fault-free run at these thresholds).
class FakeBackend final : public TrialBackend {
 public:
  std::vector<float> clean{1.0f, 2.0f, 3.0f};
  std::vector<float> clean_lse{0.5f, -kInf};  // the second row sees no key
  FaultReport alarms;
  FaultReport run(const std::optional<FaultPlan>& plan, std::vector<float>& out,
                  std::vector<float>& lse) override {
    out = clean;
    lse = clean_lse;
    FaultReport r = alarms;
    if (!plan) return r;
    ++runs;
    const int b = plan->bit;
    if (b >= 30) {  // big fault, detected and corrected
      ++r.detected, ++r.corrected;
    } else if (b >= 20) {  // big fault nobody sees
      out[1] += 1.0f;
    } else if (b >= 10) {  // detected, left wrong
      ++r.detected;
      out[2] = std::numeric_limits<float>::quiet_NaN();
    } else if (b == 1) {  // "corrected", left wrong
      ++r.detected, ++r.corrected;
      out[0] += 0.5f;
    } else if (b == 0) {  // an alarm about nothing
      ++r.detected;
    } else if (b == 2) {  // a row max in the last key block: the LSE alone moves, silently
      lse[0] += 0.5f;
    } else if (b == 3) {  // the same, detected
      ++r.detected;
      lse[0] -= 0.5f;
    } else if (b == 4) {  // a row that sees no key given an LSE
      lse[1] = 0.0f;
    } else if (b == 5) {  // the LSE within its tolerance
      lse[0] += 1e-3f;
    } else if (b == 6) {  // recomputed, nothing left unresolved, yet wrong
      ++r.detected, ++r.recomputed_tiles;
      out[0] += 0.5f;
    } else if (b == 7) {  // recomputed, the recompute's own detection left unresolved
      r.detected += 2, ++r.recomputed_tiles, ++r.unresolved;
      out[0] += 0.5f;
    } else if (b == 8) {  // recomputed and right
      ++r.detected, ++r.recomputed_tiles;
    }
    return r;
  }
  int runs = 0;
};

// FakeBackend's table: what bit b's trial is.
Outcome expected_outcome(int b) {
  return b >= 30            ? Outcome::corrected
         : b >= 20          ? Outcome::sdc
         : b >= 10          ? Outcome::detected
         : b == 1 || b == 6 ? Outcome::miscorrected
         : b == 0           ? Outcome::false_positive
         : b == 2 || b == 4 ? Outcome::sdc
         : b == 3 || b == 7 ? Outcome::detected
         : b == 8           ? Outcome::corrected
                            : Outcome::masked;
}

// The fake's fault-free run, 1e-3 per element and 1e-2 per LSE row.
Baseline fake_baseline(FakeBackend& backend) {
  Baseline b;
  b.report = backend.run(std::nullopt, b.output, b.lse);
  b.tolerance.assign(b.output.size(), 1e-3f);
  b.lse_tolerance.assign(b.lse.size(), 1e-2f);
  return b;
}

CampaignOptions every_bit(long long trials) {
  CampaignOptions o;
  o.site = FaultSite::scores;
  o.trials = trials;
  o.bits = {0, 31};
  return o;
}

InjectionSpace small_space() {
  InjectionSpace s;
  s.iterations = {2, 2};
  s.threads = 32;
  return s;
}

}  // namespace

TEST_CASE("a campaign runs every trial and tallies what the backend did", "[campaign]") {
  FakeBackend backend;
  const Baseline baseline = fake_baseline(backend);
  const CampaignOptions o = every_bit(640);
  int seen = 0;
  const CampaignResult r =
      run_campaign(backend, small_space(), baseline, o, [&](const TrialResult&) { ++seen; });
  CHECK(backend.runs == 640);
  CHECK(seen == 640);
  CHECK(r.tally.trials == 640);
  long long expected[kOutcomes.size()] = {};
  for (const TrialResult& t : r.trials) {
    INFO("bit " << t.plan.bit);
    const Outcome want = expected_outcome(t.plan.bit);
    REQUIRE(t.outcome == want);
    ++expected[static_cast<int>(want)];
  }
  for (Outcome out : kOutcomes) CHECK(r.tally.count(out) == expected[static_cast<int>(out)]);
  CHECK(r.tally.count(Outcome::sdc) > 0);
  CHECK(r.tally.count(Outcome::miscorrected) > 0);
  const std::string row = trials_csv_row(r.trials.front()), header = trials_csv_header();
  CHECK(std::count(row.begin(), row.end(), ',') == std::count(header.begin(), header.end(), ','));
  Baseline short_tolerance = baseline;
  short_tolerance.tolerance = {1.0f};
  CHECK_THROWS_AS(run_campaign(backend, small_space(), short_tolerance, o), Error);
  Baseline short_lse = baseline;
  short_lse.lse.pop_back();
  CHECK_THROWS_AS(run_campaign(backend, small_space(), short_lse, o), Error);
}

TEST_CASE("a fault that moves only the LSE is not masked", "[campaign]") {
  // A row max flipped in a CTA's last key block reaches only the LSE the kernel stores from it:
  // read as masked (false_positive when seen) while the campaign ignored the LSE.
  FakeBackend backend;
  const Baseline baseline = fake_baseline(backend);
  for (int bit : {2, 3, 4, 5}) {
    CampaignOptions o = every_bit(40);
    o.bits = {bit, bit};
    const CampaignResult r = run_campaign(backend, small_space(), baseline, o);
    INFO("bit " << bit << "\n" << summary_table(r.tally));
    CHECK(r.tally.count(expected_outcome(bit)) == 40);
    const TrialResult& t = r.trials.front();
    CHECK(t.deviation.within());
    CHECK(t.lse_deviation.within() == (bit == 5));
    // The per-trial CSV gives the LSE's deviation last.
    const std::string row = trials_csv_row(t);
    CHECK(trials_csv_header().substr(trials_csv_header().rfind(',') + 1) ==
          "max_abs_lse_deviation");
    CHECK(row.substr(row.rfind(',') + 1) == fmt::format("{:.6g}", t.lse_deviation.max_abs));
    if (bit == 4)
      CHECK(std::isinf(t.lse_deviation.max_abs));
    else
      CHECK(t.lse_deviation.max_abs == Approx(bit == 5 ? 1e-3 : 0.5).epsilon(1e-3));
  }
}

TEST_CASE("a fault-free run with detections is refused unless allowed, then subtracted",
          "[campaign]") {
  // Every trial inherited the fault-free run's alarms: masked read as false_positive, sdc as
  // detected.
  FakeBackend backend;
  backend.alarms.detected = 2;
  backend.alarms.corrected = 1;
  const Baseline baseline = fake_baseline(backend);
  CampaignOptions o = every_bit(640);
  REQUIRE_THROWS_AS(run_campaign(backend, small_space(), baseline, o), ConfigError);
  REQUIRE_THROWS_WITH(run_campaign(backend, small_space(), baseline, o),
                      Catch::Contains("the fault-free run reported detections (2 detected, 1 "
                                      "corrected)") &&
                          Catch::Contains("--thresholds") &&
                          Catch::Contains("--allow-clean-alarms"));
  CHECK(backend.runs == 0);  // refused before any trial
  CHECK_NOTHROW(check_clean_alarms(FaultReport{}, false));
  CHECK_NOTHROW(check_clean_alarms(baseline.report, true));
  o.allow_clean_alarms = true;
  const CampaignResult r = run_campaign(backend, small_space(), baseline, o);
  for (const TrialResult& t : r.trials) {
    INFO("bit " << t.plan.bit);
    REQUIRE(t.outcome == expected_outcome(t.plan.bit));
  }
  CHECK(r.tally.count(Outcome::masked) > 0);
  CHECK(r.tally.count(Outcome::sdc) > 0);
}

namespace {

// A kernel that gives the FP64 reference rounded to f16, and its LSE; `spoil` changes what it
// returns (every run, the fault-free ones included).
class ReferenceBackend final : public TrialBackend {
 public:
  Problem problem;
  Mask mask;
  reference::Tensor16 q, k, v;
  std::vector<float> output, lse;
  std::function<void(std::vector<float>& output, std::vector<float>& lse, int run)> spoil;
  int runs = 0;

  ReferenceBackend(const Problem& pr, Mask m) : problem(pr), mask(m) {
    std::mt19937_64 rng(3);
    const Precision p = Precision::f16;
    q = reference::random_tensor(rng, p, pr.q, pr.batch, pr.heads_q, pr.seqlen_q, pr.head_dim);
    k = reference::random_tensor(rng, p, pr.k, pr.batch, pr.heads_kv, pr.seqlen_k, pr.head_dim);
    v = reference::random_tensor(rng, p, pr.v, pr.batch, pr.heads_kv, pr.seqlen_k, pr.head_dim);
    for (double x : reference_output(pr, p, mask, q, k, v))
      output.push_back(reference::from_bits(reference::to_bits(static_cast<float>(x), p), p));
    for (int b = 0; b < pr.batch; ++b)
      for (int h = 0; h < pr.heads_q; ++h)
        for (int s = 0; s < pr.seqlen_q; ++s) {
          double row_lse = 0.0;
          reference::attention_row(pr, p, mask, q, k, v, b, h, s, &row_lse);
          lse.push_back(static_cast<float>(row_lse));
        }
  }
  FaultReport run(const std::optional<FaultPlan>&, std::vector<float>& out,
                  std::vector<float>& out_lse) override {
    out = output;
    out_lse = lse;
    if (spoil) spoil(out, out_lse, runs);
    ++runs;
    return {};
  }
  Baseline baseline() { return make_baseline(*this, problem, Precision::f16, mask, q, k, v); }
};

}  // namespace

TEST_CASE("the fault-free run is checked against the FP64 reference before any trial",
          "[campaign]") {
  // The tolerance was built on the fault-free output unchecked: a wrong or NaN output became
  // the yardstick (NaN == NaN passed).
  // 96 queries, 64 keys, causal: the first 32 rows see no key (LSE -inf).
  const Problem pr = Problem::bhsd(1, 2, 2, 96, 64, 32);
  ReferenceBackend backend(pr, Mask::causal);
  const Baseline good = backend.baseline();
  CHECK(backend.runs == 2);
  CHECK(good.check.passed);
  CHECK(good.deterministic);
  CHECK(good.output.size() == 2u * 96 * 32);
  CHECK(good.tolerance.size() == good.output.size());
  REQUIRE(good.lse.size() == 2u * 96);
  CHECK(good.lse[0] == -kInf);
  CHECK(std::isfinite(good.lse[95]));
  CHECK(good.lse_tolerance == std::vector<float>(2 * 96, 1e-2f));
  // The LSE tolerance: reference::tolerance's, whatever the precision's.
  CHECK(good.lse_tolerance[0] == static_cast<float>(reference::tolerance(Precision::f16, pr).lse));

  auto refused = [&](auto spoil, const char* what) {
    ReferenceBackend bad(pr, Mask::causal);
    bad.spoil = spoil;
    INFO(what);
    REQUIRE_THROWS_AS(bad.baseline(), Error);
    REQUIRE_THROWS_WITH(bad.baseline(),
                        Catch::Contains("fails the check against the FP64 reference"));
  };
  refused([](std::vector<float>& o, std::vector<float>&, int) { o[5000] = NAN; }, "a NaN");
  refused([](std::vector<float>& o, std::vector<float>&,
             int) { std::fill(o.begin() + 32 * 90, o.begin() + 32 * 91, 0.0f); },
          "a row left at 0");
  refused([](std::vector<float>&, std::vector<float>& l, int) { l[60] += 0.5f; },
          "an LSE off by 0.5");
  refused([](std::vector<float>&, std::vector<float>& l, int) { l[100] = NAN; }, "a NaN LSE");
  refused([](std::vector<float>&, std::vector<float>& l, int) { l[1] = 0.0f; },
          "an LSE for a row that sees no key");
  // A second fault-free run that differs is reported, not refused.
  ReferenceBackend noisy(pr, Mask::causal);
  noisy.spoil = [](std::vector<float>& o, std::vector<float>&, int run) {
    if (run == 1) o[7] += 1e-4f;
  };
  CHECK_FALSE(noisy.baseline().deterministic);
  // A backend of the wrong size.
  ReferenceBackend short_lse(pr, Mask::causal);
  short_lse.spoil = [](std::vector<float>&, std::vector<float>& l, int) { l.pop_back(); };
  CHECK_THROWS_AS(short_lse.baseline(), Error);

  // Trials against it: an LSE moved past 1e-2, or a -inf row given a value, is not masked.
  ReferenceBackend faulty(pr, Mask::causal);
  faulty.spoil = [](std::vector<float>&, std::vector<float>& l, int run) {
    if (run >= 2 && run % 2 == 0) l[95] += 0.02f;
    if (run >= 2 && run % 2 == 1) l[3] = 0.0f;  // row 3 sees no key
  };
  const Baseline base = faulty.baseline();
  InjectionSpace space;
  space.iterations = {1};
  space.threads = 1;
  const CampaignResult r = run_campaign(faulty, space, base, every_bit(10));
  CHECK(r.tally.count(Outcome::sdc) == 10);
}
