// ftattn accuracy without a GPU: the host FA(FP16-FP32) model reproduces PASA's overflow cases
// (Table 4: 100% NaN at Uniform(30, 0.5) and Hybrid(30, 10)) and stays accurate on N(0, 1); a
// kernel run compiles its config, says nothing was launched and exits 3; bad input exits 2.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "tests/support/shell.hpp"
#include "tests/support/temp_dir.hpp"

#ifndef FTATTN_CLI_PATH
#error "FTATTN_CLI_PATH must name the built ftattn executable"
#endif

namespace {

using ftattn::test::CliRun;
using ftattn::test::contains;

// No driver: behaves as on a machine without a GPU even where one is present. Output is stdout
// and stderr together.
CliRun accuracy(const ftattn::test::TempDir& dir, const std::string& args) {
  const CliRun r = ftattn::test::run_cli(
      FTATTN_CLI_PATH, dir.path(),
      "--cache-dir " + ftattn::test::shell_quote((dir.path() / "cache").string()) + " accuracy " +
          args,
      {.env = {"FTATTN_LIBCUDA=" + (dir.path() / "none.so").string()},
       .streams = ftattn::test::Streams::merged});
  UNSCOPED_INFO(ftattn::test::describe(r));
  return r;
}

}  // namespace

TEST_CASE("accuracy: FP16 scores overflow on PASA's cases, not on N(0, 1)", "[cli][accuracy]") {
  ftattn::test::TempDir dir;
  const std::string small = " --heads 1 --seqlen 128 --head-dim 128 --model fp16-scores";
  CliRun r = accuracy(dir, "--dist pasa-uniform" + small);
  CHECK(r.exit_code == 0);
  CHECK(contains(r.out, "pasa-uniform x0 30 Am 0.5"));
  CHECK(contains(r.out, "NaN/Inf 100.00%"));
  r = accuracy(dir, "--dist pasa-hybrid" + small);
  CHECK(r.exit_code == 0);
  CHECK(contains(r.out, "pasa-hybrid x0 30 Am 10"));
  CHECK(contains(r.out, "NaN/Inf 100.00%"));
  // x0 = 5: E[S] = d x0^2 = 3200 fits FP16, and so does every score.
  r = accuracy(dir, "--dist pasa-uniform --x0 5" + small);
  CHECK(contains(r.out, "NaN/Inf 0.00%"));
  const auto csv = dir.path() / "acc.csv";
  r = accuracy(dir, "--dist normal --csv " + csv.string() + small);
  CHECK(r.exit_code == 0);
  CHECK(contains(r.out, "NaN/Inf 0.00%"));
  CHECK(contains(r.out, "cosine 1.0000"));
  std::ifstream in(csv);
  std::string header, line;
  std::getline(in, header);
  std::getline(in, line);
  CHECK(header.rfind("run,dist,x0,am", 0) == 0);
  CHECK(line.rfind("fp16-scores,normal,0,1,", 0) == 0);
}

TEST_CASE("accuracy: kernels compile without a GPU, bad input is refused", "[cli][accuracy]") {
  ftattn::test::TempDir dir;
  // Exit code and a line of what it said: 3 compiled but not launched, 2 refused.
  auto answers = [&](const std::string& args, int code, const std::string& text) {
    const CliRun r = accuracy(dir, args);
    CHECK(r.exit_code == code);
    CHECK(contains(r.out, text));
    return r;
  };
  const CliRun int8 = answers("--precision int8 --head-dim 64 --arch sm_80 --heads 1 --seqlen 64",
                              3, "ftattn_fwd_sm80_int8_d64_");
  CHECK(contains(int8.out, "no GPU, so nothing was launched"));
  answers("--precision f16_pasa --dist pasa-hybrid --arch sm_90a --heads 1 --seqlen 64", 3,
          "ftattn_fwd_sm90a_f16-pasa_d128_");
  answers("--precision f16_pasa --protection efta_detect --arch sm_80 --heads 1 --seqlen 64", 3,
          "ftattn_fwd_sm80_f16-pasa_d128_");
  answers("--precision f16_pasa --protection decoupled --arch sm_80", 2,
          "use protection none, flash_abft, efta_detect or efta_correct with f16_pasa");
  answers("--dist cauchy", 2, "cauchy");
  answers("--model fp32", 2, "unknown --model 'fp32': use fp16-scores");
  answers("--precision fp8_e4m3 --arch sm_80 --head-dim 64", 2, "needs sm_89");
  // A block-sparse mask has no block mask here: the reference threw inside a worker thread,
  // which terminated the process.
  answers("--model fp16-scores --heads 1 --seqlen 64 --mask block_sparse", 2,
          "accuracy runs dense masks (none, causal), not block_sparse");
  // The inputs are sampled whole whatever --rows says: std::bad_alloc before.
  answers("--heads 1 --seqlen 1073741824 --rows 1", 2,
          "more than this command samples on the host (2^30)");
}
