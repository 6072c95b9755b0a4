// GPU tests of the fused kernel's protection schemes: clean runs match the reference and report
// nothing; faults planted at every site are detected, corrected or recomputed as each scheme
// promises, and its documented blind spots stay blind.
#include <catch2/catch.hpp>
#include <random>

#include "ftattn/campaign.hpp"
#include "ftattn/runtime.hpp"
#include "tests/gpu/attention_case.hpp"

using namespace ftattn;

namespace {

Runtime& protect_runtime() {
  static Runtime rt;
  return rt;
}

KernelConfig protected_config(int head_dim, Precision p, Mask m, Protection prot,
                              bool inject = false) {
  KernelConfig c;
  c.head_dim = head_dim;
  c.precision = p;
  c.mask = m;
  c.protection = prot;
  c.fault_injection = inject;
  return c;
}

struct Outcome {
  gpu_test::CaseResult result;
  FaultReport fault;
};

Outcome run(const KernelConfig& c, const Problem& problem, const ProtectOptions& options,
            uint64_t seed = 7) {
  Outcome out;
  out.result = gpu_test::run_case(protect_runtime(), c, problem, false, 0, seed, false, nullptr,
                                  &options, &out.fault);
  return out;
}

// A big flip (exponent bit) in CTA 0, thread 5, key-block iteration 1.
ProtectOptions plant(FaultSite site, int element = 3, int bit = 29, int iteration = 1) {
  ProtectOptions o;
  o.inject = FaultPlan{site, 0, 5, iteration, element, bit};
  return o;
}

}  // namespace

TEST_CASE("protected kernels match the reference and raise no false alarm", "[gpu][protect]") {
  for (Protection prot :
       {Protection::flash_abft, Protection::efta_detect, Protection::efta_correct})
    for (Precision p : {Precision::f16, Precision::bf16})
      for (Mask m : {Mask::none, Mask::causal})
        for (int d : {64, 96, 128, 192, 256}) {
          const Problem problem = Problem::bhsd(2, 4, 2, 333, 517, d);
          const Outcome o = run(protected_config(d, p, m, prot), problem, {});
          INFO(o.result.config_name << ": " << o.result.report.summary() << "; "
                                    << o.fault.summary());
          CHECK(o.result.report.passed);
          CHECK(o.fault.clean());
        }
}

TEST_CASE("efta_correct corrects a flipped score and a flipped output element", "[gpu][protect]") {
  const Problem problem = Problem::bhsd(1, 2, 2, 256, 512, 128);
  for (FaultSite site : {FaultSite::scores, FaultSite::output}) {
    const Outcome o = run(
        protected_config(128, Precision::f16, Mask::none, Protection::efta_correct, true), problem,
        plant(site, 3, 30));  // bit 30: the exponent's top bit, a large change either way
    INFO(to_string(site) << ": " << o.result.report.summary() << "; " << o.fault.summary());
    CHECK(o.fault.detected >= 1);
    CHECK(o.fault.corrected == o.fault.detected);
    CHECK(o.result.report.passed);
  }
}

TEST_CASE("efta detects faults in P and the row sum, recompute repairs the output",
          "[gpu][protect]") {
  const Problem problem = Problem::bhsd(1, 2, 2, 256, 512, 128);
  for (Protection prot : {Protection::efta_detect, Protection::efta_correct})
    for (FaultSite site : {FaultSite::probs, FaultSite::row_sum, FaultSite::scores}) {
      if (site == FaultSite::scores && prot == Protection::efta_correct) continue;  // corrected
      const KernelConfig c = protected_config(128, Precision::f16, Mask::causal, prot, true);
      ProtectOptions report = plant(site, 1, 30);
      const Outcome seen = run(c, problem, report);
      INFO(to_string(prot) << " " << to_string(site) << ": " << seen.fault.summary());
      CHECK(seen.fault.detected >= 1);

      ProtectOptions fix = report;
      fix.on_fault = OnFault::recompute;
      const Outcome fixed = run(c, problem, fix);
      INFO("recompute: " << fixed.result.report.summary() << "; " << fixed.fault.summary());
      CHECK(fixed.result.report.passed);
      if (fixed.fault.detected > fixed.fault.corrected) CHECK(fixed.fault.recomputed_tiles >= 1);

      ProtectOptions raise = report;
      raise.on_fault = OnFault::raise;
      if (seen.fault.detected > seen.fault.corrected)
        CHECK_THROWS_AS(run(c, problem, raise), FaultError);
    }
}

TEST_CASE("efta_correct's product check sees small flips of P that efta_detect's may not",
          "[gpu][protect]") {
  // efta_correct checks the exps against the exponents they were given (the scores already
  // checked), to FP32 rounding: a few 1e-5 of the product. efta_detect's reference is GEMM I's
  // checksum, which leaves 1e-3 to 1e-2 to its rounding. Mantissa bits 13-18 move P by 2^-10
  // to 2^-5 of itself.
  const Problem problem = Problem::bhsd(1, 2, 2, 256, 512, 128);
  for (Mask m : {Mask::none, Mask::causal})
    for (int bit = 13; bit <= 18; ++bit) {
      const KernelConfig c =
          protected_config(128, Precision::f16, m, Protection::efta_correct, true);
      const Outcome seen = run(c, problem, plant(FaultSite::probs, 3, bit));
      INFO(to_string(m) << " bit " << bit << ": " << seen.fault.summary());
      CHECK(seen.fault.detected >= 1);
      if (!seen.fault.events.empty()) CHECK(seen.fault.events[0].stage == FaultStage::probs);
    }
}

TEST_CASE("efta sees a masked probability that is not zero, and efta_correct zeroes it",
          "[gpu][protect]") {
  // Causal, CTA 0 (the last query block, run first), its last key block: lane 0's element of
  // column kST - 1, odd key, first row half holds a key far right of the diagonal, so its P is
  // masked to 0. Bit 30 turns that 0 into 2.0, which the product check never sees (it skips
  // masked keys) and GEMM II's checksum sums consistently.
  const Problem problem = Problem::bhsd(1, 2, 2, 256, 256, 128);
  for (Protection prot : {Protection::efta_detect, Protection::efta_correct}) {
    const KernelConfig c = protect_runtime().resolve(
        protected_config(128, Precision::f16, Mask::causal, prot, true), &problem);
    const int m_blocks = (problem.seqlen_q + c.block_m - 1) / c.block_m;
    const int row0 = (m_blocks - 1) * c.block_m;
    const int last_block = (row0 + c.block_m - 1) / c.block_n;
    const int s_tiles = c.block_n / 8;
    ProtectOptions o;
    o.inject = FaultPlan{FaultSite::probs, 0, 0, last_block, (s_tiles - 1) * 4 + 1, 30};
    const Outcome seen = run(c, problem, o);
    INFO(c.name() << ": " << seen.result.report.summary() << "; " << seen.fault.summary());
    REQUIRE(seen.fault.detected >= 1);
    CHECK(seen.fault.events.at(0).stage == FaultStage::probs);
    CHECK(seen.fault.events.at(0).row == row0);
    if (prot == Protection::efta_correct) {
      CHECK(seen.fault.corrected == seen.fault.detected);
      CHECK(seen.result.report.passed);
    }
  }
}

TEST_CASE("flash_abft sees output faults and, as derived, not score faults", "[gpu][protect]") {
  const Problem problem = Problem::bhsd(1, 2, 2, 256, 512, 64);
  const KernelConfig c =
      protected_config(64, Precision::f16, Mask::none, Protection::flash_abft, true);
  const Outcome out = run(c, problem, plant(FaultSite::output, 2, 30));
  INFO(out.fault.summary());
  CHECK(out.fault.detected >= 1);
  CHECK(out.fault.corrected == 0);  // detect-only
  // A score fault moves the output and the checksum alike (common mode): undetectable.
  const Outcome scores = run(c, problem, plant(FaultSite::scores, 2, 27));
  CHECK(scores.fault.detected == 0);
}

TEST_CASE("flash_abft on the mma.sync kernel at 48, 80 and 112 keys per block", "[gpu][protect]") {
  // Its checksum prologue sums a block's keys in batches that divide ragged block sizes; before,
  // these tiles did not compile. Odd lengths leave a partial last block.
  const Problem problem = Problem::bhsd(2, 4, 2, 333, 517, 64);
  for (int n : {48, 80, 112})
    for (Mask m : {Mask::none, Mask::causal}) {
      KernelConfig c = protected_config(64, Precision::f16, m, Protection::flash_abft, true);
      c.block_m = 64;
      c.block_n = n;
      c.num_warps = 4;
      c.num_stages = 2;
      const Outcome clean = run(c, problem, {});
      INFO(clean.result.config_name << ": " << clean.result.report.summary() << "; "
                                    << clean.fault.summary());
      CHECK(clean.result.report.passed);
      CHECK(clean.fault.clean());
      const Outcome hit = run(c, problem, plant(FaultSite::output, 2, 30));
      INFO(hit.fault.summary());
      CHECK(hit.fault.detected >= 1);
    }
}

TEST_CASE("Kernel::run reports its own call only, after launches that detected faults",
          "[gpu][protect]") {
  // Kernel::launch reads no fault log and so no longer resets it; run resets it before its own
  // kernel. Two launches with a planted output fault leave detections in the log; a clean run
  // after them must report nothing, a faulty one its own detection.
  Runtime& rt = protect_runtime();
  const Problem problem = Problem::bhsd(1, 2, 2, 256, 512, 64);
  const KernelConfig c = rt.resolve(
      protected_config(64, Precision::f16, Mask::none, Protection::flash_abft, true), &problem);
  std::mt19937_64 rng(11);
  auto tensor = [&](const Strides& st, int heads, int seqlen) {
    return reference::random_tensor(rng, c.precision, st, problem.batch, heads, seqlen,
                                    problem.head_dim);
  };
  const gpu_test::DeviceIo io(tensor(problem.q, problem.heads_q, problem.seqlen_q),
                              tensor(problem.k, problem.heads_kv, problem.seqlen_k),
                              tensor(problem.v, problem.heads_kv, problem.seqlen_k));
  const auto kernel = rt.kernel(c);
  auto call = [&](const ProtectOptions& options) {
    return kernel->run(problem, io.q.data(), io.k.data(), io.v.data(), io.o.data(), nullptr,
                       nullptr, nullptr, options);
  };
  const ProtectOptions faulty = plant(FaultSite::output, 2, 30);
  const FaultReport first = call(faulty);
  INFO(first.summary());
  REQUIRE(first.detected >= 1);  // the plan is seen when the log is read
  for (int i = 0; i < 2; ++i)
    kernel->launch(problem, io.q.data(), io.k.data(), io.v.data(), io.o.data(), nullptr, nullptr,
                   nullptr, faulty);
  const FaultReport clean = call(ProtectOptions{});
  INFO(clean.summary());
  CHECK(clean.clean());
  const FaultReport again = call(faulty);
  CHECK(again.detected == first.detected);
  CHECK(again.events.size() == first.events.size());
}

TEST_CASE("a clean run of an injection build with no plan is clean", "[gpu][protect]") {
  const Problem problem = Problem::bhsd(1, 2, 2, 300, 300, 128);
  const Outcome o =
      run(protected_config(128, Precision::bf16, Mask::causal, Protection::efta_correct, true),
          problem, {});
  CHECK(o.result.report.passed);
  CHECK(o.fault.clean());
}

TEST_CASE("no false alarms on PASA's biased and hybrid inputs", "[gpu][protect]") {
  const Problem problem = Problem::bhsd(1, 4, 4, 1024, 1024, 128);
  for (Protection prot :
       {Protection::flash_abft, Protection::efta_detect, Protection::efta_correct})
    for (Precision p : {Precision::f16, Precision::bf16})
      for (campaign::Distribution dist : campaign::kDistributions) {
        const KernelConfig c = protect_runtime().resolve(
            protected_config(128, p, Mask::causal, prot, /*inject=*/true), &problem);
        std::mt19937_64 rng(11);
        auto q = campaign::random_tensor(dist, rng, p, problem.q, 1, 4, 1024, 128);
        auto k = campaign::random_tensor(dist, rng, p, problem.k, 1, 4, 1024, 128);
        auto v = campaign::random_tensor(dist, rng, p, problem.v, 1, 4, 1024, 128);
        auto backend =
            campaign::source_backend(protect_runtime(), c, problem, q, k, v, OnFault::report);
        std::vector<float> out;
        const FaultReport r = backend->run(std::nullopt, out);
        INFO(c.name() << " " << campaign::to_string(dist) << ": " << r.summary());
        CHECK(r.clean());
      }
}
