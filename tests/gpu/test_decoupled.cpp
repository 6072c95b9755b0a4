// GPU tests of the decoupled baseline: the same output as the reference for every head dim,
// precision, mask and layout; faults planted in S, P, the row statistics and O are detected and
// corrected; the S/P workspace limit is a ConfigError.
#include <catch2/catch.hpp>

#include "ftattn/campaign.hpp"
#include "ftattn/runtime.hpp"
#include "runtime/driver.hpp"
#include "tests/gpu/attention_case.hpp"

using namespace ftattn;

namespace {

Runtime& shared_runtime() {
  static Runtime rt;
  return rt;
}

KernelConfig decoupled(int head_dim, Precision p, Mask m, bool inject = false) {
  KernelConfig c;
  c.head_dim = head_dim;
  c.precision = p;
  c.mask = m;
  c.protection = Protection::decoupled;
  c.fault_injection = inject;
  return c;
}

void expect_pass(const gpu_test::CaseResult& r) {
  INFO(r.config_name << ": " << r.report.summary());
  CHECK(r.report.passed);
  CHECK(r.report.rows_checked > 0);
}

std::string describe(const FaultReport& r) {
  return "detected " + std::to_string(r.detected) + ", corrected " + std::to_string(r.corrected);
}

// One launch through Runtime::attention with `plan`, then the output against the reference.
struct Planted {
  FaultReport report;
  reference::CheckReport check;
};

Planted run_planted(Runtime& rt, const KernelConfig& config, const Problem& pr,
                    const std::optional<FaultPlan>& plan) {
  std::mt19937_64 rng(11);
  const Precision p = config.precision;
  const int d = pr.head_dim;
  auto q = reference::random_tensor(rng, p, pr.q, pr.batch, pr.heads_q, pr.seqlen_q, d);
  auto k = reference::random_tensor(rng, p, pr.k, pr.batch, pr.heads_kv, pr.seqlen_k, d);
  auto v = reference::random_tensor(rng, p, pr.v, pr.batch, pr.heads_kv, pr.seqlen_k, d);
  auto backend =
      campaign::source_backend(rt, rt.resolve(config, &pr), pr, q, k, v, OnFault::report);
  std::vector<float> out;
  Planted r;
  r.report = backend->run(plan, out);
  reference::Tensor16 o;
  o.strides = Problem::bhsd(pr.batch, pr.heads_q, pr.heads_kv, pr.seqlen_q, pr.seqlen_k, d).o;
  for (float x : out) o.data.push_back(reference::to_bits(x, p));
  Problem dense = pr;
  dense.o = o.strides;
  r.check = reference::check(dense, p, config.mask, q, k, v, o, nullptr, 0);
  return r;
}

}  // namespace

TEST_CASE("decoupled matches the reference for every head dim, precision and mask",
          "[gpu][decoupled]") {
  Runtime& rt = shared_runtime();
  REQUIRE(rt.has_device());
  for (int d : {32, 64, 96, 128, 192, 256})
    for (Precision p : {Precision::f16, Precision::bf16})
      for (Mask m : {Mask::none, Mask::causal}) {
        // Odd lengths: neither a multiple of the GEMM tiles nor of the 64-element row padding.
        const Problem pr = Problem::bhsd(2, 3, 3, 200, 200, d);
        expect_pass(gpu_test::run_case(rt, decoupled(d, p, m), pr, true, 0, 2000 + d));
      }
}

TEST_CASE("decoupled: odd lengths, bottom-right causal, strides, GQA", "[gpu][decoupled]") {
  Runtime& rt = shared_runtime();
  for (auto [sq, sk] : std::vector<std::pair<int, int>>{
           {1, 1}, {1, 77}, {17, 5}, {300, 100}, {96, 1000}, {129, 128}, {255, 513}})
    for (Mask m : {Mask::none, Mask::causal}) {
      INFO("seqlen_q " << sq << " seqlen_k " << sk);
      const Problem pr = Problem::bhsd(1, 2, 2, sq, sk, 64);
      expect_pass(gpu_test::run_case(rt, decoupled(64, Precision::f16, m), pr, true, 0, sq + sk));
    }
  expect_pass(gpu_test::run_case(rt, decoupled(128, Precision::bf16, Mask::causal),
                                 Problem::bshd(2, 4, 4, 333, 257, 128), false, 0, 5));
  expect_pass(gpu_test::run_case(rt, decoupled(64, Precision::f16, Mask::none),
                                 Problem::bhsd(2, 8, 2, 190, 190, 64), true, 0, 6));
  expect_pass(gpu_test::run_case(rt, decoupled(128, Precision::f16, Mask::causal),
                                 Problem::bhsd(1, 6, 1, 150, 150, 128), true, 0, 7));
  // Through Runtime::attention with open tiles, twice (the workspace is reused, then grown).
  expect_pass(gpu_test::run_case(rt, decoupled(64, Precision::f16, Mask::none),
                                 Problem::bhsd(1, 2, 2, 100, 100, 64), false, 0, 8, true));
  expect_pass(gpu_test::run_case(rt, decoupled(64, Precision::f16, Mask::none),
                                 Problem::bhsd(2, 4, 4, 700, 700, 64), false, 0, 9, true));
}

TEST_CASE("decoupled: clean runs report nothing", "[gpu][decoupled]") {
  Runtime& rt = shared_runtime();
  for (Precision p : {Precision::f16, Precision::bf16})
    for (Mask m : {Mask::none, Mask::causal}) {
      const Planted r =
          run_planted(rt, decoupled(128, p, m, true), Problem::bhsd(1, 2, 2, 384, 384, 128), {});
      INFO(describe(r.report) << " / " << r.check.summary());
      CHECK(r.report.detected == 0);
      CHECK(r.check.passed);
    }
  const auto rows = campaign::count_false_alarms(rt, decoupled(64, Precision::f16, Mask::causal),
                                                 Problem::bhsd(1, 4, 4, 512, 512, 64), 10, 3);
  for (const auto& row : rows) {
    INFO(campaign::to_string(row.distribution));
    CHECK(row.flagged == 0);
  }
}

TEST_CASE("decoupled: planted faults are detected and corrected", "[gpu][decoupled]") {
  Runtime& rt = shared_runtime();
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 256, 64);
  // (site, thread, iteration, element, bit): exponent bits, so each fault matters.
  struct Case {
    FaultSite site;
    int thread, iteration, element, bit;
    bool corrected;  // a checksum hit is detected but leaves the data alone
  };
  for (Precision p : {Precision::f16, Precision::bf16})
    for (const Case& c :
         {Case{FaultSite::scores, 5, 1, 3, 27, true},
          Case{FaultSite::scores, 200, 0, 17, 30, true},  // to Inf or huge
          Case{FaultSite::probs, 33, 1, 2, 26, true}, Case{FaultSite::row_max, 40, 0, 0, 28, true},
          Case{FaultSite::row_sum, 70, 1, 0, 27, true}, Case{FaultSite::output, 7, 3, 5, 27, true},
          Case{FaultSite::output, 100, 6, 30, 31, true},  // sign
          Case{FaultSite::checksum, 9, 1, 2, 29, false}}) {
      FaultPlan plan;
      plan.site = c.site;
      plan.cta = 1;
      plan.thread = c.thread;
      plan.iteration = c.iteration;
      plan.element = c.element;
      plan.bit = c.bit;
      const Planted r = run_planted(rt, decoupled(64, p, Mask::none, true), pr, plan);
      INFO(campaign::site_name(c.site)
           << " " << to_string(p) << ": " << describe(r.report) << " / " << r.check.summary());
      CHECK(r.report.detected >= 1);
      CHECK((r.report.corrected >= 1) == c.corrected);
      CHECK(r.check.passed);
    }
}

TEST_CASE("decoupled: low-bit flips of the row statistics leave every row right",
          "[gpu][decoupled]") {
  // The softmax's tie-break after a mismatch shuffles across the warp. Its lanes once reduced l to
  // sums that differed in the last bit, so a flip of l's low bits split the warp there, and the
  // lanes that went on shuffled with absent ones: whole rows came out wrong, some unreported (781
  // of 10,000 row-sum flips in a campaign on the H200).
  Runtime& rt = shared_runtime();
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 256, 64);
  for (FaultSite site : {FaultSite::row_sum, FaultSite::row_max})
    for (int thread : {9, 41, 70, 127})
      for (int iteration : {0, 1})
        for (int bit = 0; bit < 10; ++bit) {
          FaultPlan plan;
          plan.site = site;
          plan.cta = 1;
          plan.thread = thread;
          plan.iteration = iteration;
          plan.element = 0;
          plan.bit = bit;
          const Planted r =
              run_planted(rt, decoupled(64, Precision::f16, Mask::none, true), pr, plan);
          INFO(campaign::site_name(site)
               << " thread " << thread << " iteration " << iteration << " bit " << bit << ": "
               << describe(r.report) << " / " << r.check.summary());
          CHECK(r.check.passed);
          CHECK(r.report.corrected == r.report.detected);
        }
}

TEST_CASE("decoupled: a workspace that cannot fit is a ConfigError", "[gpu][decoupled]") {
  Runtime& rt = shared_runtime();
  // 64 heads x 64k x 64k x 6 bytes = 1.5 TiB of S and P.
  const Problem pr = Problem::bhsd(1, 64, 64, 65536, 65536, 64);
  runtime::DeviceBuffer q(2 * 64 * 65536 * 64), o(2 * 64 * 65536 * 64);
  const KernelConfig c = rt.resolve(decoupled(64, Precision::f16, Mask::none), &pr);
  REQUIRE_THROWS_AS(
      rt.kernel(c)->launch(pr, q.data(), q.data(), q.data(), o.data(), nullptr, nullptr),
      ConfigError);
  REQUIRE_THROWS_WITH(
      rt.kernel(c)->launch(pr, q.data(), q.data(), q.data(), o.data(), nullptr, nullptr),
      Catch::Contains("workspace"));
}
