// Fault plans that cannot fire on the problem (a CTA past the grid, an iteration past what the CTA
// runs, a negative count, a bit past 31) are refused before any GPU work, and a campaign's own
// draws always pass the same check.
#include <catch2/catch.hpp>
#include <string>

#include "ftattn/campaign.hpp"
#include "runtime/fault_plan.hpp"
#include "tests/support/configs.hpp"

using namespace ftattn;
using runtime::check_fault_plan;

namespace {

const Arch kSm80{80, false};

KernelConfig injected(Mask mask, Protection protection = Protection::flash_abft,
                      Precision precision = Precision::f16) {
  KernelConfig c = test::tile_config(64, 128, 64, 4, 2, kSm80, precision, mask, protection);
  c.fault_injection = true;
  return c;
}

FaultPlan plan(FaultSite site, int cta, int iteration, int thread = 5) {
  return FaultPlan{site, cta, thread, iteration, 3, 29};
}

}  // namespace

TEST_CASE("fault plans: each field out of range is refused by name", "[fault_plan]") {
  // Grid: ceil(200 / 128) = 2 query blocks x 3 heads x 2 batch = 12 CTAs; ceil(300 / 64) = 5
  // key blocks each.
  const KernelConfig c = injected(Mask::none);
  const Problem pr = Problem::bhsd(2, 3, 3, 200, 300, 64);
  CHECK(runtime::fused_ctas(c, pr) == 12);
  CHECK(runtime::fused_key_blocks(c, pr, 11) == 5);
  // The last valid values.
  CHECK_NOTHROW(check_fault_plan(c, pr, plan(FaultSite::output, 11, 4)));
  CHECK_NOTHROW(check_fault_plan(c, pr, FaultPlan{FaultSite::scores, 11, 127, 4, 1 << 30, 31}));
  CHECK_NOTHROW(check_fault_plan(c, pr, FaultPlan{FaultSite::scores, 0, 0, 0, 0, 0}));

  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::output, 12, 0)),
                       "FaultPlan::cta 12 is outside this problem's launch: the grid of 2 query "
                       "blocks x 3 heads x 2 batch has 12 CTAs, so pick cta in 0..11 (query "
                       "block fastest, then head, then batch)");
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::output, 3, 5)),
                       "FaultPlan::iteration 5 is past the last iteration: CTA 3 (300 keys) runs "
                       "5 (one per key block of 64 keys), so pick iteration in 0..4");
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::output, -1, 0)),
                       "FaultPlan::cta -1 is negative");
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::output, 0, -1)),
                       "FaultPlan::iteration -1 is negative");
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, FaultPlan{FaultSite::output, 0, 5, 0, -2, 29}),
                       "FaultPlan::element -2 is negative");
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, FaultPlan{FaultSite::output, 0, 5, 0, 0, 32}),
                       "FaultPlan::bit 32 is outside 0..31");
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, FaultPlan{FaultSite::output, 0, 5, 0, 0, -1}),
                       "FaultPlan::bit -1 is outside 0..31");
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::output, 0, 0, 128)),
                       "FaultPlan::thread 128 is outside");
  // What the config alone decides is checked here too.
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::pv, 0, 0)), "has no fault site pv");
  KernelConfig plain = c;
  plain.fault_injection = false;
  REQUIRE_CONFIG_ERROR(check_fault_plan(plain, pr, plan(FaultSite::output, 0, 0)),
                       "has no source-level injection points");
}

TEST_CASE("fault plans: a warp-specialised kernel's producer threads are refused", "[fault_plan]") {
  // Two consumer warpgroups and a producer one (kernel/fwd_ws_sm90.cuh): only the consumers
  // carry injection points, so a plan for a producer thread would flip nothing.
  KernelConfig c = test::tile_config(128, 128, 128, 8, 2, Arch::parse("sm_90a"), Precision::f16,
                                     Mask::none, Protection::flash_abft);
  c.fault_injection = true;
  REQUIRE(warp_specialized(c));
  REQUIRE(launch_threads(c) == 384);
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 256, 128);
  CHECK_NOTHROW(check_fault_plan(c, pr, plan(FaultSite::output, 0, 0, 255)));
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::output, 0, 0, 256)),
                       "FaultPlan::thread 256 is outside " + c.name() +
                           "'s 256 consumer threads: its producer warpgroup (threads 256..383) "
                           "only copies and carries no injection points");
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::scores, 0, 0, 383)),
                       "producer warpgroup");
  // The campaign's space draws from the consumers alone.
  CHECK(campaign::injection_space(c, pr, FaultSite::output).threads == 256);
}

TEST_CASE("fault plans: causal tiles run fewer key blocks", "[fault_plan]") {
  // 300 x 300 causal, longest first: x = 0 runs rows 256..383 (5 blocks), x = 1 rows 128..255 (4),
  // x = 2 rows 0..127 (2); the next head starts again at x = 0.
  const KernelConfig c = injected(Mask::causal);
  const Problem pr = Problem::bhsd(1, 2, 2, 300, 300, 64);
  CHECK_NOTHROW(check_fault_plan(c, pr, plan(FaultSite::probs, 0, 4)));
  CHECK_NOTHROW(check_fault_plan(c, pr, plan(FaultSite::probs, 1, 3)));
  CHECK_NOTHROW(check_fault_plan(c, pr, plan(FaultSite::probs, 2, 1)));
  CHECK_NOTHROW(check_fault_plan(c, pr, plan(FaultSite::probs, 5, 1)));
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::probs, 2, 2)),
                       "FaultPlan::iteration 2 is past the last iteration: CTA 2 (300 keys, "
                       "causal: up to its tile's last row) runs 2");
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::probs, 5, 2)),
                       "pick iteration in 0..1");
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::probs, 6, 0)),
                       "has 6 CTAs, so pick cta in 0..5");
  // More queries than keys: rows 0..199 of 300 see no key, so x = 2 (rows 0..127) runs nothing.
  const Problem tall = Problem::bhsd(1, 1, 1, 300, 100, 64);
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, tall, plan(FaultSite::probs, 2, 0)),
                       "CTA 2 (100 keys, causal: up to its tile's last row) runs no key block of "
                       "64 keys on this problem, so nothing would flip: pick another cta");
  CHECK_NOTHROW(check_fault_plan(c, tall, plan(FaultSite::probs, 1, 0)));
}

TEST_CASE("fault plans: 8-bit kernels take the fused grid's bounds", "[fault_plan]") {
  const KernelConfig c = injected(Mask::causal, Protection::flash_abft, Precision::int8);
  const Problem pr = Problem::bhsd(1, 1, 1, 256, 256, 64);
  CHECK_NOTHROW(check_fault_plan(c, pr, plan(FaultSite::pv, 0, 3)));  // rows 128..255
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::pv, 0, 4)), "in 0..3");
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::scale, 2, 0)), "pick cta in 0..1");
}

TEST_CASE("fault plans: decoupled counts each site's kernel", "[fault_plan]") {
  KernelConfig c = injected(Mask::none, Protection::decoupled);
  // 130 queries, 200 keys, 2 heads.
  const Problem pr = Problem::bhsd(1, 2, 2, 130, 200, 64);
  SECTION("scores GEMM: 2 x 2 tiles per head, 64 / 32 k steps") {
    CHECK_NOTHROW(check_fault_plan(c, pr, plan(FaultSite::scores, 7, 1, 255)));
    CHECK_NOTHROW(check_fault_plan(c, pr, plan(FaultSite::checksum, 7, 1)));
    REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::scores, 8, 0)),
                         "decoupled's scores GEMM kernel has 8 CTAs, so pick cta in 0..7 (key "
                         "tile fastest");
    REQUIRE_CONFIG_ERROR(
        check_fault_plan(c, pr, plan(FaultSite::scores, 7, 2)),
        "runs 2 (one per 32-wide k step over head_dim), so pick iteration in 0..1");
    REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::scores, 0, 0, 256)),
                         "CTA of 256 threads");
  }
  SECTION("softmax: 4 rows per CTA, 128-key chunks") {
    CHECK_NOTHROW(check_fault_plan(c, pr, plan(FaultSite::probs, 64, 1, 127)));
    REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::row_sum, 65, 0)),
                         "decoupled's softmax kernel has 65 CTAs");
    REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::row_max, 0, 2)),
                         "pick iteration in 0..1");
    // The softmax CTA is 4 warps: thread 128 was let through (up to 1024) before.
    REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::probs, 0, 0, 128)),
                         "CTA of 128 threads");
  }
  SECTION("softmax, causal: the thread's own row") {
    c.mask = Mask::causal;
    const Problem square = Problem::bhsd(1, 1, 1, 130, 130, 64);
    // CTA 32 holds rows 128 and 129 (2 chunks each) in warps 0 and 1; warps 2 and 3 have none.
    CHECK_NOTHROW(check_fault_plan(c, square, plan(FaultSite::probs, 32, 1, 63)));
    REQUIRE_CONFIG_ERROR(check_fault_plan(c, square, plan(FaultSite::probs, 32, 0, 64)),
                         "runs no 128-key chunk of the thread's row on this problem, so nothing "
                         "would flip: pick another cta or thread");
    // Row 0 sees one key: one chunk.
    REQUIRE_CONFIG_ERROR(check_fault_plan(c, square, plan(FaultSite::probs, 0, 1, 0)),
                         "pick iteration in 0..0");
  }
  SECTION("output GEMM: 128 rows per CTA, 32-key k steps up to the keys read") {
    // ceil(200 / 32) = 7 k steps.
    CHECK_NOTHROW(check_fault_plan(c, pr, plan(FaultSite::output, 3, 6)));
    REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::output, 3, 7)),
                         "pick iteration in 0..6");
    REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::output, 4, 0)),
                         "decoupled's output GEMM kernel has 4 CTAs");
  }
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::rescale, 0, 0)),
                       "has no fault site rescale");
}

TEST_CASE("fault plans: site ir bounds the CTA, not the dynamic instance", "[fault_plan]") {
  KernelConfig c = test::tile_config(64, 128, 64, 4, 2, kSm80);
  c.backend = Backend::llvm;
  c.ir_inject = IrClass::fp_arith;
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 256, 64);  // 2 x 2 = 4 CTAs
  // Instances are counted per thread by launches: any count, and -1 (count, flip none).
  CHECK_NOTHROW(check_fault_plan(c, pr, plan(FaultSite::ir, 3, 1 << 20)));
  CHECK_NOTHROW(check_fault_plan(c, pr, plan(FaultSite::ir, 3, -1)));
  REQUIRE_CONFIG_ERROR(check_fault_plan(c, pr, plan(FaultSite::ir, 4, 0)),
                       "FaultPlan::cta 4 is outside");
}

TEST_CASE("fault plans: a campaign's draws always pass the launch's check", "[fault_plan]") {
  struct Case {
    KernelConfig config;
    Problem problem;
  };
  KernelConfig decoupled = injected(Mask::causal, Protection::decoupled);
  const std::vector<Case> cases = {
      {injected(Mask::none), Problem::bhsd(2, 3, 3, 200, 300, 64)},
      {injected(Mask::causal), Problem::bhsd(1, 2, 2, 300, 300, 64)},
      {injected(Mask::causal), Problem::bhsd(1, 2, 2, 300, 100, 64)},
      {injected(Mask::causal, Protection::efta_correct, Precision::int8),
       Problem::bhsd(1, 2, 1, 257, 333, 64)},
      {decoupled, Problem::bhsd(1, 2, 2, 130, 130, 64)},
      {decoupled, Problem::bhsd(2, 1, 1, 67, 300, 64)},
  };
  for (const Case& k : cases)
    for (FaultSite site : campaign::sites_of(k.config)) {
      INFO(k.config.name() << " site " << to_string(site) << " " << k.problem.seqlen_q << "x"
                           << k.problem.seqlen_k);
      const campaign::InjectionSpace space = campaign::injection_space(k.config, k.problem, site);
      for (uint64_t i = 0; i < 500; ++i) {
        const FaultPlan p = campaign::plan_trial(space, site, {0, 31}, 11, i);
        REQUIRE_NOTHROW(check_fault_plan(k.config, k.problem, p));
      }
    }
}
