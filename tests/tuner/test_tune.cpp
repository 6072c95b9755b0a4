// The tuner's choice and its parallel compile, with a fake timer (no GPU).
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "tests/support/configs.hpp"
#include "tests/support/temp_dir.hpp"
#include "tuner/tune.hpp"

using namespace ftattn;
using namespace ftattn::tuner;

namespace {

// Times from a table; a config can be marked as failing its check.
class FakeTimer : public Timer {
 public:
  std::map<std::string, double> ms;
  std::set<std::string> wrong;
  int calls = 0;
  Measurement measure(const KernelConfig& c, const Problem&) override {
    ++calls;
    Measurement m;
    m.config = c;
    auto it = ms.find(c.name());
    m.ms = it == ms.end() ? 10.0 : it->second;
    m.passed = !wrong.count(c.name());
    if (!m.passed) m.error = "check failed";
    return m;
  }
};

const Family kFamily{Arch{90, true}, Precision::f16, Protection::none, 128, Mask::none};

KernelConfig tile(int m, int n, int w, int s) {
  return test::tile_config(128, m, n, w, s, kFamily.arch);
}

}  // namespace

TEST_CASE("the fastest candidate that passed its check wins", "[tuner]") {
  FakeTimer timer;
  const auto a = tile(128, 64, 4, 1), b = tile(128, 64, 4, 2), c = tile(128, 32, 4, 1);
  timer.ms = {{a.name(), 3.0}, {b.name(), 2.0}, {c.name(), 1.0}};
  timer.wrong = {c.name()};  // fastest, but wrong: must not win
  const Problem p = Problem::bhsd(4, 32, 32, 4096, 4096, 128);
  int ticks = 0;
  const ShapeResult r = tune_shape(kFamily, p, {a, b, c}, a, timer, [&] { ++ticks; });
  CHECK(ticks == 3);
  REQUIRE(r.found);
  CHECK(r.best.config == b);
  CHECK(r.heuristic.config == a);
  CHECK(r.heuristic.ms == 3.0);
  CHECK(timer.calls == 3);  // the heuristic was among the candidates: not timed twice
  CHECK(r.bucket == Bucket::of(p, Mask::none));
  CHECK(r.tflops(r.best.ms) == Approx(p.flops(Mask::none) / 2e-3 / 1e12));

  const Entry e = to_entry(r, DeviceKey{"NVIDIA H200", 90, 13000});
  CHECK(e.best == b);
  CHECK(e.best_tflops > e.default_tflops);
  // What the heuristic picks for the bucket, so that find() can tell when it has changed.
  CHECK(e.default_config == bucket_default(kFamily, r.bucket));
}

TEST_CASE("a pruned heuristic default is still measured as the baseline", "[tuner]") {
  FakeTimer timer;
  const auto a = tile(128, 64, 4, 1), d = tile(64, 64, 4, 1);
  timer.ms = {{a.name(), 2.0}, {d.name(), 1.5}};
  const Problem p = Problem::bhsd(1, 8, 8, 1024, 1024, 128);
  const ShapeResult r = tune_shape(kFamily, p, {a}, d, timer);
  CHECK(timer.calls == 2);
  CHECK(r.heuristic.config == d);
  CHECK(r.best.config == d);  // the default is faster than every candidate: it stays
}

TEST_CASE("nothing passing means nothing found", "[tuner]") {
  FakeTimer timer;
  const auto a = tile(128, 64, 4, 1);
  timer.wrong = {a.name()};
  const ShapeResult r = tune_shape(kFamily, Problem::bhsd(1, 1, 1, 512, 512, 128), {a}, a, timer);
  CHECK_FALSE(r.found);
}

TEST_CASE("candidates compile in parallel and are pruned by spills", "[tuner][nvrtc]") {
  ftattn::test::TempDir dir("ftattn-tune");
  {
    Runtime rt(RuntimeOptions{dir.path(), true});
    Family f = kFamily;
    f.head_dim = 64;
    f.arch = Arch{80, false};  // a grid of exactly these knobs (sm_90a adds three-consumer rows)
    Knobs small;
    small.block_m = {128};
    small.block_n = {64, 128};
    small.num_warps = {4};
    small.num_stages = {1, 2};
    const Pruned space = enumerate(f, small);
    REQUIRE(space.kept.size() == 4);
    const Pruned none_spill = compile_and_prune(rt, space.kept, SmLimits{}, 2, 1 << 20);
    CHECK(none_spill.kept.size() == 4);
    CHECK(rt.stats().compiles == 4);
    CHECK(none_spill.kept == space.kept);  // the candidates' order, whatever the threads did
    // With no spill allowed at all, anything that spills goes, with the reason.
    const Pruned strict = compile_and_prune(rt, space.kept, SmLimits{}, 2, 0);
    CHECK(rt.stats().compiles == 4);  // the second pass is served from memory
    for (const auto& r : strict.rejected) CHECK(r.reason.find("spills") != std::string::npos);
    CHECK(strict.kept.size() + strict.rejected.size() == 4);
  }
}
