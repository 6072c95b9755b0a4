// The tuner's choice, its parallel compile and `ftattn tune`'s report, with a fake timer (no GPU).
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "tests/support/configs.hpp"
#include "tests/support/temp_dir.hpp"
#include "tools/ftattn/tune_report.hpp"
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

namespace {

struct Report {
  std::ostringstream out, err, csv;
  ftattn::cli::TuneSummary summary;
  Report(const std::vector<ShapeResult>& results, Timer* verify) {
    summary = ftattn::cli::report_tune(results, Precision::f16, verify, out, err, &csv);
  }
};

}  // namespace

TEST_CASE("tune's report names every failed check and each shape without a winner", "[tuner]") {
  FakeTimer timer;
  const auto a = tile(128, 64, 4, 1), b = tile(128, 64, 4, 2), d = tile(64, 64, 4, 1);
  timer.wrong = {b.name()};
  const ShapeResult tuned =
      tune_shape(kFamily, Problem::bhsd(4, 32, 32, 4096, 4096, 128), {a, b}, a, timer);
  SECTION("a failed candidate: listed, counted, and the winner's row stays") {
    const Report r({tuned}, nullptr);
    CHECK(r.summary.failed_checks == 1);
    CHECK(r.summary.without_winner == 0);
    CHECK_THAT(r.err.str(), Catch::Contains("ftattn: check failed: d128 h32 s4096 b4 none: " +
                                            b.name() + ": check failed\n") &&
                                Catch::Contains("ftattn: 1 check failed (listed above)\n") &&
                                !Catch::Contains("heuristic default"));
    CHECK_THAT(r.out.str(), Catch::Contains(a.name()));
  }
  SECTION("the heuristic default failing, and a shape where nothing passed") {
    timer.wrong.insert(d.name());
    // The default pruned from the candidates, and measured on its own.
    const ShapeResult pruned_default =
        tune_shape(kFamily, Problem::bhsd(1, 8, 8, 1024, 1024, 128), {a}, d, timer);
    timer.wrong.insert(a.name());
    const ShapeResult nothing =
        tune_shape(kFamily, Problem::bhsd(1, 1, 1, 512, 512, 128), {a, b}, a, timer);
    REQUIRE_FALSE(nothing.found);
    const Report r({tuned, pruned_default, nothing}, nullptr);
    CHECK(r.summary.failed_checks == 4);
    CHECK(r.summary.without_winner == 1);
    const std::string err = r.err.str();
    CHECK_THAT(err, Catch::Contains("d128 h8 s1024 b1 none: " + d.name() +
                                    " (the heuristic default): check failed") &&
                        Catch::Contains("d128 h1 s512 b1 none: " + a.name() +
                                        " (the heuristic default): check failed") &&
                        Catch::Contains("d128 h1 s512 b1 none: " + b.name() + ": check failed"));
    CHECK_THAT(err, Catch::Contains("d128 h1 s512 b1 none: no candidate passed its check: no DB "
                                    "entry for bucket s512_bh1_full"));
    CHECK_THAT(err, Catch::Contains("ftattn: 4 checks failed (listed above), the heuristic "
                                    "default's at 2 shapes; 1 shape without a winner"));
    // The CSV names no winner as the table does; naming the empty config threw.
    CHECK_THAT(r.csv.str(), Catch::Contains("\n128,512,1,1,0,f16,-,0.00," + a.name()));
    CHECK_THAT(r.out.str(), Catch::Contains("(none)"));
  }
  SECTION("all passed: nothing on the error stream") {
    timer.wrong.clear();
    const ShapeResult clean =
        tune_shape(kFamily, Problem::bhsd(4, 32, 32, 4096, 4096, 128), {a, b}, a, timer);
    const Report r({clean}, nullptr);
    CHECK(r.summary.failed_checks == 0);
    CHECK(r.err.str().empty());
  }
}

TEST_CASE("tune --verify says when nothing was verified", "[tuner]") {
  FakeTimer timer;
  const auto a = tile(128, 64, 4, 1);
  timer.wrong = {a.name()};
  const ShapeResult nothing =
      tune_shape(kFamily, Problem::bhsd(1, 1, 1, 512, 512, 128), {a}, a, timer);
  const Report none({nothing}, &timer);
  CHECK_THAT(none.out.str(), Catch::Contains("nothing was verified: no shape has a tuned choice") &&
                                 !Catch::Contains("ratio"));
  CHECK(timer.calls == 1);  // a shape without a winner is not timed again

  timer.wrong.clear();
  timer.ms = {{a.name(), 1.0}};  // the fastest of the family: the tuned choice at 100%
  const ShapeResult tuned =
      tune_shape(kFamily, Problem::bhsd(1, 1, 1, 512, 512, 128), {a}, a, timer);
  const Report one({tuned}, &timer);
  CHECK_THAT(one.out.str(), Catch::Contains("tuned choice at 100.0% of it") &&
                                Catch::Contains("worst tuned / exhaustive-best ratio: 1.000"));
  CHECK(one.summary.failed_checks == 0);
}
