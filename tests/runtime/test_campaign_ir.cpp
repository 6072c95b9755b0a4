// IR-level campaigns without a GPU: the space of dynamic instances from a fake counter, the draw
// located to (CTA, thread, instance), counting launches and the locating backend over fake
// backends.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "ftattn/campaign_ir.hpp"
#include "tests/support/configs.hpp"

using namespace ftattn;
using namespace ftattn::campaign;

namespace {

// 64 rows per CTA, 2 warps: 64 threads per CTA.
KernelConfig ir_config(IrClass inject = IrClass::fp_arith,
                       Protection protection = Protection::none) {
  KernelConfig c = test::tile_config(64, 64, 64, 2, 1, Arch::parse("sm_90a"), Precision::f16,
                                     Mask::causal, protection);
  c.backend = Backend::llvm;
  c.ir_inject = inject;
  return c;
}

// Records the plans it runs; reports `detected` per plan.
class FakeBackend final : public TrialBackend {
 public:
  std::vector<std::optional<FaultPlan>> plans;
  std::function<uint32_t(const FaultPlan&)> detected = [](const FaultPlan&) { return 0u; };
  FaultReport run(const std::optional<FaultPlan>& plan, std::vector<float>& output,
                  std::vector<float>& lse) override {
    plans.push_back(plan);
    output.assign(4, 1.0f);
    lse.assign(2, 0.5f);
    FaultReport r;
    if (plan) r.detected = detected(*plan);
    return r;
  }
};

}  // namespace

TEST_CASE("ir counting modes parse, with a reason for a bad one", "[campaign][ir]") {
  CHECK(parse_ir_count("cta") == IrCount::cta);
  CHECK(parse_ir_count("warp") == IrCount::warp);
  CHECK(parse_ir_count("thread") == IrCount::thread);
  for (IrCount c : {IrCount::cta, IrCount::warp, IrCount::thread})
    CHECK(parse_ir_count(to_string(c)) == c);
  REQUIRE_CONFIG_ERROR(parse_ir_count("lane"), "bad --ir-count 'lane'");
}

TEST_CASE("counting launches plan iteration -1 at site ir and subtract the baseline",
          "[campaign][ir]") {
  FakeBackend fake;
  fake.detected = [](const FaultPlan& p) {
    return static_cast<uint32_t>(100 * p.cta + p.thread + 3);
  };
  const InstanceCounter count = counting_launches(fake, 3);
  CHECK(count(2, 5) == 205);
  REQUIRE(fake.plans.size() == 1);
  REQUIRE(fake.plans[0].has_value());
  CHECK(fake.plans[0]->site == FaultSite::ir);
  CHECK(fake.plans[0]->cta == 2);
  CHECK(fake.plans[0]->thread == 5);
  CHECK(fake.plans[0]->iteration == -1);
  // Fewer detections than the fault-free run's false alarms: no instances, never negative.
  const InstanceCounter noisy = counting_launches(fake, 1000);
  CHECK(noisy(0, 0) == 0);
}

TEST_CASE("the ir space counts the fused grid and draws uniformly over real instances",
          "[campaign][ir]") {
  if (!llvm_route_built()) {
    WARN("built without the LLVM route: ir_inject configs do not validate here");
    return;
  }
  const KernelConfig c = ir_config();
  const Problem pr = Problem::bhsd(2, 3, 3, 130, 130, 64);  // 3 query blocks: 18 CTAs
  // Thread t of CTA c runs c + (t / 32) instances; CTA 0's first warp runs none.
  auto real = [](int cta, int thread) { return static_cast<long long>(cta + thread / 32); };

  SECTION("one launch per warp, lanes take their warp's count") {
    long long launches = 0;
    const IrSpace s = ir_injection_space(
        c, pr,
        [&](int cta, int t) {
          ++launches;
          CHECK(t % 32 == 0);
          return real(cta, t);
        },
        IrCount::warp);
    CHECK(s.threads == 64);
    CHECK(s.draw.threads == 1);
    CHECK(s.draw.elements == 0);
    REQUIRE(s.draw.iterations.size() == 18);
    CHECK(launches == 18 * 2);
    CHECK(s.launches == launches);
    for (int cta = 0; cta < 18; ++cta) {
      CHECK(s.draw.iterations[cta] == 32 * cta + 32 * (cta + 1));
      for (int t = 0; t < 64; ++t) CHECK(s.instances[cta * 64 + t] == real(cta, t));
    }
    // Every draw lands on an instance the thread runs; all threads and CTAs that run one are hit.
    std::map<std::pair<int, int>, int> hits;
    for (uint64_t i = 0; i < 20000; ++i) {
      const FaultPlan drawn = plan_trial(s.draw, FaultSite::ir, BitRange{0, 31}, 7, i);
      const FaultPlan p = s.locate(drawn);
      CHECK(p.site == FaultSite::ir);
      CHECK(p.cta == drawn.cta);
      REQUIRE(p.iteration >= 0);
      REQUIRE(p.iteration < real(p.cta, p.thread));
      ++hits[{p.cta, p.thread / 32}];
    }
    CHECK(hits.count({0, 0}) == 0);  // no instances: never drawn
    CHECK(hits.size() == 18 * 2 - 1);
    // Uniform over instances: (CTA 17, warp 1) has 18 x 32 of the 32 x 18^2 = 10368 instances.
    CHECK(hits[{17, 1}] == Approx(20000.0 * 18 * 32 / 10368).epsilon(0.1));
  }

  SECTION("cta and thread modes trade launches for exactness") {
    const IrSpace per_cta = ir_injection_space(c, pr, real, IrCount::cta);
    CHECK(per_cta.launches == 18);
    CHECK(per_cta.instances[5 * 64 + 40] == 5);  // assumed from thread 0
    const IrSpace exact = ir_injection_space(c, pr, real, IrCount::thread);
    CHECK(exact.launches == 18 * 64);
    CHECK(exact.instances[5 * 64 + 40] == 6);
    CHECK(exact.total() == per_cta.total() + 18 * 32);
  }

  SECTION("errors say what to change") {
    REQUIRE_CONFIG_ERROR(ir_injection_space(ir_config(IrClass::none), pr, real),
                         "--backend llvm --ir-inject");
    REQUIRE_CONFIG_ERROR(ir_injection_space(
                             c, pr, [](int, int) { return 0LL; }, IrCount::cta),
                         "runs an instance of fp_arith");
    REQUIRE_THROWS_AS(ir_injection_space(c, pr, [](int, int) { return -1LL; }), Error);
    const IrSpace s = ir_injection_space(c, pr, real, IrCount::cta);
    FaultPlan outside;
    outside.cta = 18;
    REQUIRE_THROWS_AS(s.locate(outside), Error);
  }
}

TEST_CASE("the locating backend runs the located plan and passes clean runs through",
          "[campaign][ir]") {
  if (!llvm_route_built()) {
    WARN("built without the LLVM route: ir_inject configs do not validate here");
    return;
  }
  const Problem pr = Problem::bhsd(1, 1, 1, 64, 64, 64);  // one CTA
  const IrSpace s = ir_injection_space(
      ir_config(IrClass::mma, Protection::efta_correct), pr,
      [](int, int t) { return t < 32 ? 10LL : 4LL; }, IrCount::warp);
  CHECK(s.total() == 32 * 10 + 32 * 4);
  FakeBackend fake;
  const auto located = locating_backend(fake, s);
  std::vector<float> out;
  located->run(std::nullopt, out);
  FaultPlan drawn;
  drawn.site = FaultSite::ir;
  drawn.iteration = 32 * 10 + 5;  // past the first warp's 320: thread 32 + 1, instance 1
  drawn.bit = 9;
  located->run(drawn, out);
  REQUIRE(fake.plans.size() == 2);
  CHECK(!fake.plans[0].has_value());
  REQUIRE(fake.plans[1].has_value());
  CHECK(fake.plans[1]->thread == 33);
  CHECK(fake.plans[1]->iteration == 1);
  CHECK(fake.plans[1]->bit == 9);

  // A whole campaign through it: every trial lands on a real instance.
  Baseline clean;
  clean.output.assign(4, 1.0f);
  clean.tolerance.assign(4, 0.0f);
  clean.lse.assign(2, 0.5f);
  clean.lse_tolerance.assign(2, 0.0f);
  CampaignOptions o;
  o.site = FaultSite::ir;
  o.trials = 200;
  const CampaignResult r = run_campaign(*located, s.draw, clean, o);
  CHECK(r.tally.count(Outcome::masked) == 200);
  for (size_t i = 2; i < fake.plans.size(); ++i) {
    const FaultPlan& p = *fake.plans[i];
    CHECK(p.iteration < (p.thread < 32 ? 10 : 4));
  }
}
