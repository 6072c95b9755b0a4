// `ftattn inject` as a user meets it without a GPU: bad flags exit 2 with a reason that says
// what to change, checked before the device is; a good command line says no GPU was found and
// exits 3, as `accuracy` does.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/support/shell.hpp"
#include "tests/support/temp_dir.hpp"

#ifndef FTATTN_CLI_PATH
#error "FTATTN_CLI_PATH must name the built ftattn executable"
#endif

namespace {

using ftattn::test::CliRun;
using ftattn::test::shell_quote;

// Runs the CLI as on a machine without a GPU (the driver library points nowhere).
CliRun inject(const ftattn::test::TempDir& dir, const std::string& args) {
  const CliRun r = ftattn::test::run_cli(
      FTATTN_CLI_PATH, dir.path(),
      "--cache-dir " + shell_quote((dir.path() / "c").string()) + " inject " + args,
      {.env = {"FTATTN_LIBCUDA=" + (dir.path() / "none.so").string()},
       .streams = ftattn::test::Streams::stderr_only});
  UNSCOPED_INFO(ftattn::test::describe(r));
  return r;
}

bool says(const CliRun& r, const std::string& text) {
  return r.exit_code == 2 && r.err.find(text) != std::string::npos;
}

// A good command line on a machine without a GPU: not the bad-flag code.
bool needs_gpu(const CliRun& r) {
  return r.exit_code == 3 && r.err.find("no CUDA driver") != std::string::npos &&
         r.err.find("no trials were run") != std::string::npos;
}

}  // namespace

TEST_CASE("cli inject: bad flags say what to change", "[cli][campaign]") {
  ftattn::test::TempDir dir;
  CHECK(says(inject(dir, "--head-dim 64 --site score"), "unknown fault site 'score'"));
  CHECK(says(inject(dir, "--head-dim 64 --site alll"), "all (every one the kernel has)"));
  CHECK(says(inject(dir, "--head-dim 64 --site all,ir"), "--site ir runs alone"));
  CHECK(says(inject(dir, "--head-dim 64 --site scores --bits 0:32"), "bad bit range"));
  CHECK(says(inject(dir, "--head-dim 64 --site scores --shape 1,4"), "bad --shape"));
  CHECK(says(inject(dir, "--head-dim 64 --site scores --shape 1,x,8"), "bad --shape"));
  CHECK(says(inject(dir, "--head-dim 64 --site scores --shape 1,4,99999999"),
             "whole numbers from 1 to 16777216 (2^24)"));
  // Checked before the GPU is looked for, as bench and tune check theirs.
  CHECK(says(inject(dir, "--head-dim 7 --site scores"), "head_dim 7 is not supported"));
  CHECK(says(inject(dir, "--head-dim 64 --site scores --shape 1,4,1024,3"),
             "heads_kv (3) must divide heads_q (4)"));
  CHECK(says(inject(dir, "--head-dim 64 --site scores --on-fault throw"), "report or recompute"));
  CHECK(says(inject(dir, "--head-dim 64"), "--site"));
  CHECK(says(inject(dir, "--site scores"), "head_dim"));
  CHECK(says(inject(dir, "--head-dim 64 --site scores --trials 0"), "--trials"));
  CHECK(says(inject(dir, "--head-dim 64 --site scores --protection efta"), "protection"));
  CHECK(says(inject(dir, "--head-dim 64 --calibrate 2 --thresholds output=0"), "output=0"));
  CHECK(says(inject(dir, "--head-dim 64 --calibrate 2 --thresholds rowsum=1e-4"), "row_sum"));
  CHECK(says(inject(dir, "--head-dim 64 --calibrate 2 --thresholds output"), "check=value"));
  CHECK(says(inject(dir, "--head-dim 64 --calibrate 2 --thresholds output=1e-7x"), "check=value"));
  // Every site of the kernel, named once: a good campaign command line.
  CHECK(needs_gpu(inject(dir, "--head-dim 64 --protection efta_correct --site all,scores")));
  // A good calibration command line gets as far as the device.
  CHECK(needs_gpu(inject(dir,
                         "--head-dim 64 --protection efta_correct --calibrate 2 --thresholds "
                         "output=1e-7,row_sum=2e-4")));
  // The clean run's alarms are let through only on request, with --site.
  CHECK(needs_gpu(inject(dir, "--head-dim 64 --site scores --allow-clean-alarms")));
  CHECK(says(inject(dir, "--head-dim 64 --false-alarms 2 --allow-clean-alarms"), "--site"));
}

TEST_CASE("cli inject: a run that stops before its first row leaves no new CSV behind",
          "[cli][campaign]") {
  // The appended files were created, the summary with its header alone, before the no-GPU error.
  ftattn::test::TempDir dir;
  const auto summary = dir.path() / "summary.csv", calibration = dir.path() / "calibration.csv";
  const CliRun r = inject(dir,
                          "--head-dim 64 --protection efta_correct --site scores "
                          "--summary-csv " +
                              shell_quote(summary.string()) + " --calibrate 2 --calibration-csv " +
                              shell_quote(calibration.string()));
  CHECK(needs_gpu(r));
  CHECK_FALSE(std::filesystem::exists(summary));
  CHECK_FALSE(std::filesystem::exists(calibration));
  // A file that exists is checked at once and left as it was.
  { std::ofstream(summary) << "kept\n"; }
  CHECK(needs_gpu(
      inject(dir, "--head-dim 64 --site scores --summary-csv " + shell_quote(summary.string()))));
  std::ifstream in(summary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(all == "kept\n");
  CHECK(says(inject(dir, "--head-dim 64 --site scores --summary-csv " +
                             shell_quote((dir.path() / "no" / "such" / "x.csv").string())),
             "--summary-csv: cannot write"));
}

TEST_CASE("cli inject: a good command line needs a GPU and says so", "[cli][campaign]") {
  ftattn::test::TempDir dir;
  const CliRun r = inject(dir,
                          "--head-dim 64 --protection decoupled --site scores,probs,output "
                          "--trials 10 --bits 20:30 --false-alarms 5");
  CHECK(needs_gpu(r));
}

TEST_CASE("cli inject: site ir needs the IR instrumentation and runs alone", "[cli][campaign]") {
  ftattn::test::TempDir dir;
  CHECK(says(inject(dir, "--head-dim 64 --site ir"), "--backend llvm --ir-inject"));
  CHECK(says(inject(dir, "--head-dim 64 --backend llvm --ir-inject fp_arith --site ir,scores"),
             "--site ir runs alone"));
  CHECK(says(inject(dir, "--head-dim 64 --backend llvm --ir-inject fp_arith --site scores"),
             "drop --ir-inject"));
  CHECK(says(inject(dir,
                    "--head-dim 64 --backend llvm --ir-inject fp_arith --site ir "
                    "--ir-count lane"),
             "bad --ir-count 'lane'"));
  CHECK(says(inject(dir, "--head-dim 64 --backend llvm --ir-inject flops --site ir"), "flops"));
  // A good IR-level command line gets as far as the device.
  CHECK(needs_gpu(inject(dir,
                         "--head-dim 64 --backend llvm --ir-inject mma --ir-harden mma "
                         "--protection efta_detect --site ir --ir-count thread --trials 10")));
}
