// The ftattn CLI as a user meets it: run the built binary, check exit codes and output. Every
// test gets its own cache dir so none touches the user's cache or another test's entries.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/shell.hpp"
#include "tests/support/temp_dir.hpp"

#ifndef FTATTN_CLI_PATH
#error "FTATTN_CLI_PATH must name the built ftattn executable"
#endif

namespace fs = std::filesystem;

namespace {

using ftattn::test::CliRun;
using ftattn::test::contains;
using ftattn::test::read_file;
using ftattn::test::TempDir;

// Runs the CLI with `args` in `dir`'s context: env assignments ("NAME=value") go first.
CliRun run_cli(const TempDir& dir, const std::vector<std::string>& args,
               const std::vector<std::string>& env = {}) {
  const CliRun r = ftattn::test::run_cli(FTATTN_CLI_PATH, dir.path(),
                                         ftattn::test::shell_words(args), {.env = env});
  // Shown with every later failing assertion of the test, to see what the CLI said.
  UNSCOPED_INFO(ftattn::test::describe(r));
  return r;
}

// Cache dir under the test's temp dir, given on every command line.
std::vector<std::string> with_cache(const TempDir& dir, std::vector<std::string> args) {
  args.insert(args.begin(), {"--cache-dir", (dir.path() / "cache").string()});
  return args;
}

// The driver library is pointed at a file that does not exist, so the CLI behaves as on a
// machine without a GPU even where one is present.
std::string no_driver_env(const TempDir& dir) {
  return "FTATTN_LIBCUDA=" + (dir.path() / "no-such-libcuda.so.1").string();
}

// The default at head dim 128 on sm_90a: the wgmma skeleton (kernel/fwd_sm90.cuh).
const std::string kName = "ftattn_fwd_sm90a_f16_d128_m192n128_w12s2_none_none";

}  // namespace

TEST_CASE("cli: unknown precision fails with the valid values", "[cli]") {
  TempDir dir;
  const CliRun r =
      run_cli(dir, with_cache(dir, {"inspect", "--head-dim", "128", "--precision", "fp32"}));
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "ftattn: error: "));
  CHECK(contains(r.err, "fp32"));
  CHECK(contains(r.err, "f16"));
  CHECK(contains(r.err, "bf16"));
  CHECK(r.out.empty());
}

TEST_CASE("cli: unsupported head_dim and arch are config errors", "[cli]") {
  TempDir dir;
  const CliRun hd =
      run_cli(dir, with_cache(dir, {"compile", "--head-dim", "80", "--arch", "sm_90a"}));
  CHECK(hd.exit_code == 2);
  CHECK(contains(hd.err, "head_dim"));
  CHECK(contains(hd.err, "80"));

  const CliRun arch =
      run_cli(dir, with_cache(dir, {"inspect", "--head-dim", "128", "--arch", "sm_81"}));
  CHECK(arch.exit_code == 2);
  CHECK(contains(arch.err, "sm_81"));

  const CliRun missing = run_cli(dir, with_cache(dir, {"inspect", "--arch", "sm_80"}));
  CHECK(missing.exit_code == 2);
  CHECK(contains(missing.err, "--head-dim"));
}

TEST_CASE("cli: usage errors exit non-zero with one error line", "[cli]") {
  TempDir dir;
  const CliRun sub = run_cli(dir, with_cache(dir, {"frobnicate"}));
  CHECK(sub.exit_code != 0);
  CHECK(contains(sub.err, "ftattn: error: "));

  const CliRun flag = run_cli(dir, with_cache(dir, {"inspect", "--head-dim", "128", "--bogus"}));
  CHECK(flag.exit_code != 0);
  CHECK(contains(flag.err, "--bogus"));

  const CliRun none = run_cli(dir, with_cache(dir, {}));
  CHECK(none.exit_code != 0);

  const CliRun help = run_cli(dir, {"--help"});
  CHECK(help.exit_code == 0);
  CHECK(contains(help.out, "inspect"));

  const CliRun version = run_cli(dir, {"--version"});
  CHECK(version.exit_code == 0);
  CHECK(contains(version.out, "ftattn"));
}

TEST_CASE("cli: count flags out of range name the bound", "[cli]") {
  TempDir dir;
  const std::vector<std::string> run = {"run", "--head-dim", "128", "--batch", "1", "--heads", "1"};
  auto with = [&](std::vector<std::string> args, std::vector<std::string> more) {
    args.insert(args.end(), more.begin(), more.end());
    return with_cache(dir, args);
  };
  const CliRun zero = run_cli(dir, with(run, {"--seqlen", "0"}));
  CHECK(zero.exit_code == 2);
  CHECK(contains(zero.err, "--seqlen: 0 is too small: give a whole number of at least 1"));
  // CLI11's own range check printed DBL_MAX in full.
  CHECK_FALSE(contains(zero.err, "1797693"));

  const CliRun fraction = run_cli(dir, with(run, {"--seqlen", "1.5"}));
  CHECK(fraction.exit_code == 2);
  CHECK(contains(fraction.err, "'1.5' is not a whole number"));

  const CliRun huge = run_cli(dir, with(run, {"--seqlen", "99999999999"}));
  CHECK(huge.exit_code == 2);
  CHECK(contains(huge.err, "99999999999 is too large: give at most 2147483647"));

  const CliRun iters = run_cli(dir, with(run, {"--seqlen", "64", "--iters", "-1"}));
  CHECK(iters.exit_code == 2);
  CHECK(contains(iters.err, "--iters: -1 is too small: give a whole number of at least 0"));

  // tune took any --iters, and with none timed it read before the start of its timings.
  const CliRun tune = run_cli(dir, with_cache(dir, {"tune", "--iters", "0"}));
  CHECK(tune.exit_code == 2);
  CHECK(contains(tune.err, "--iters: 0 is too small: give a whole number of at least 1"));

  const CliRun jobs = run_cli(dir, with_cache(dir, {"tune", "--jobs", "-2"}));
  CHECK(jobs.exit_code == 2);
  CHECK(contains(jobs.err, "--jobs: -2 is too small"));

  const CliRun warmup = run_cli(dir, with_cache(dir, {"bench", "--warmup", "-1"}));
  CHECK(warmup.exit_code == 2);
  CHECK(contains(warmup.err, "--warmup: -1 is too small"));
}

TEST_CASE("cli: numbers with leading zeros and seeds out of range are refused", "[cli]") {
  TempDir dir;
  auto accuracy = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {"accuracy", "--model", "fp16-scores", "--head-dim", "64",
                                     "--heads",  "1"};
    args.insert(args.end(), more.begin(), more.end());
    return run_cli(dir, with_cache(dir, args));
  };
  // CLI11 read "0100" as octal 64 after the range check had read 100.
  const CliRun octal = accuracy({"--seqlen", "0100"});
  CHECK(octal.exit_code == 2);
  CHECK(contains(octal.err, "--seqlen: '0100' has a leading zero"));
  // "-1" wrapped to 2^64 - 1, and numbers past 2^64 saturated to it.
  for (const std::string seed : {"-1", "18446744073709551616", "012", "x"}) {
    const CliRun r = accuracy({"--seqlen", "16", "--seed", seed});
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, "--seed: '" + seed + "' is not a seed"));
  }
  CHECK(accuracy({"--seqlen", "16", "--seed", "18446744073709551615"}).exit_code == 0);
}

TEST_CASE("cli: lists and shapes with empty items or numbers past int are refused", "[cli]") {
  TempDir dir;
  const std::string no_gpu = no_driver_env(dir);
  auto expect = [&](std::vector<std::string> args, const std::string& message) {
    const CliRun r = run_cli(dir, with_cache(dir, args), {no_gpu});
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, message));
    // Refused as a usage error, before the GPU is looked for.
    CHECK_FALSE(contains(r.err, "no CUDA driver"));
  };
  expect({"bench", "--shapes", ";"}, "--shapes: ';' has an empty item");
  expect({"bench", "--shapes", "64,16,512,1;"}, "has an empty item");
  expect({"bench", "--precisions", ","}, "--precisions: ',' has an empty item");
  expect({"bench", "--precisions", ""}, "--precisions: empty value");
  expect({"tune", "--masks", "none,,causal"}, "--masks: 'none,,causal' has an empty item");
  // 4294967808 wrapped to 512 through sscanf's %d.
  expect({"bench", "--shapes", "64,16,4294967808,1"}, "bad shape '64,16,4294967808,1'");
  expect({"bench", "--shapes", "64,16,512"}, "bad shape '64,16,512'");
  // A shape no kernel runs fails before the first one is tuned, not half way.
  expect({"tune", "--shapes", "64,16,512,1;7,16,512,1"}, "head_dim 7 is not supported");
  expect({"bench", "--shapes", "64,1024,1048576,1024"}, "over 2^31-1 rows");
  expect({"inject", "--head-dim", "64", "--site", "scores,"}, "--site: 'scores,' has an empty");
  expect({"inject", "--head-dim", "64", "--site", "scores", "--shape", "1,,4,1024"},
         "--shape: '1,,4,1024' has an empty item");
  expect({"inject", "--head-dim", "64", "--site", "scores", "--trials", "9223372036854775807"},
         "--trials: 9223372036854775807 is too large: give at most 1000000");
  // Campaign flags without a campaign were ignored: now they name what they need.
  expect({"inject", "--head-dim", "64", "--false-alarms", "1", "--csv", "t.csv"},
         "--csv requires --site");
  expect({"inject", "--head-dim", "64", "--false-alarms", "1", "--bits", "3:4"},
         "--bits requires --site");
  expect({"inject", "--head-dim", "64", "--false-alarms", "1", "--calibration-csv", "c.csv"},
         "--calibration-csv requires --calibrate");
}

TEST_CASE("cli: output files are checked before any work and kept whole on failure", "[cli]") {
  TempDir dir;
  const std::string no_gpu = no_driver_env(dir);
  const std::string missing = (dir.path() / "no" / "such" / "out.csv").string();
  for (const auto& [command, flag] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"bench", "--shapes", "64,2,128,1"}, "--csv"},
           {{"bench", "--shapes", "64,2,128,1"}, "--json"},
           {{"tune", "--shapes", "64,2,128,1"}, "--csv"},
           {{"inject", "--head-dim", "64", "--site", "scores"}, "--summary-csv"},
           {{"accuracy", "--model", "fp16-scores", "--head-dim", "64", "--seqlen", "16"},
            "--csv"}}) {
    std::vector<std::string> args = command;
    args.insert(args.end(), {flag, missing});
    const CliRun r = run_cli(dir, with_cache(dir, args), {no_gpu});
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, flag + ": cannot write '" + missing + "'"));
    CHECK_FALSE(contains(r.err, "no CUDA driver"));  // said before the GPU is looked for
  }
  const CliRun folder =
      run_cli(dir, with_cache(dir, {"bench", "--json", dir.path().string()}), {no_gpu});
  CHECK(folder.exit_code == 2);
  CHECK(contains(folder.err, "is a folder: give a file name"));

  // A run that fails after opening its CSV (here: no GPU) leaves the old file as it was, and no
  // temp file beside it.
  const fs::path old = dir.path() / "results" / "old.csv";
  fs::create_directories(old.parent_path());
  std::ofstream(old) << "earlier results\n";
  const CliRun failed = run_cli(
      dir, with_cache(dir, {"bench", "--shapes", "64,2,128,1", "--csv", old.string()}), {no_gpu});
  CHECK(failed.exit_code == 2);
  CHECK(contains(failed.err, "no CUDA driver"));
  CHECK(read_file(old) == "earlier results\n");
  CHECK(std::distance(fs::directory_iterator(old.parent_path()), fs::directory_iterator()) == 1);
}

TEST_CASE("cli: accuracy checks its problem, model and distribution", "[cli]") {
  TempDir dir;
  auto accuracy = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {"accuracy", "--model", "fp16-scores"};
    args.insert(args.end(), more.begin(), more.end());
    return run_cli(dir, with_cache(dir, args));
  };
  auto expect = [&](std::vector<std::string> more, const std::string& message) {
    const CliRun r = accuracy(more);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, message));
  };
  expect({"--head-dim", "-1"}, "--head-dim: -1 is too small");  // was a vector length error
  expect({"--head-dim", "5"}, "head_dim 5 is not supported");
  expect({"--head-dim", "128", "--heads", "2147483647", "--seqlen", "2147483647", "--rows", "1"},
         "over 2^31-1 rows");
  expect({"--head-dim", "128", "--seqlen", "1048576", "--heads", "4"},
         "too many to compare on the host: give --rows");
  // The host model read bf16 inputs as f16 (rel L2 6.2).
  expect({"--head-dim", "64", "--precision", "bf16"}, "stores its inputs in f16");
  expect({"--head-dim", "64", "--am", "nan"}, "--am: 'nan' is not a finite number");
  expect({"--head-dim", "64", "--am", "-1"}, "--am: -1 is not above 0");
  expect({"--head-dim", "64", "--x0", "inf"}, "--x0: 'inf' is not a finite number");

  // The CSV gets its header once, then one row per run.
  const fs::path csv = dir.path() / "accuracy.csv";
  for (int i = 0; i < 2; ++i)
    CHECK(accuracy({"--heads", "1", "--seqlen", "32", "--head-dim", "64", "--x0", "1", "--am", "2",
                    "--csv", csv.string()})
              .exit_code == 0);
  std::istringstream lines(read_file(csv));
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].starts_with("run,dist,x0,am,"));
  CHECK(rows[1].starts_with("fp16-scores,normal,1,2,1,1,32,64,"));
  CHECK(rows[2] == rows[1]);  // same seed, same result
}

TEST_CASE("cli: a bad canonical name is named in the error", "[cli]") {
  TempDir dir;
  const std::string bad = "ftattn_fwd_sm90a_f16_d128_m128n64_w4s2_sideways_none";
  const CliRun positional = run_cli(dir, with_cache(dir, {"inspect", bad}));
  CHECK(positional.exit_code == 2);
  CHECK(contains(positional.err, bad));

  const CliRun flag = run_cli(dir, with_cache(dir, {"compile", "--config", "not_a_kernel"}));
  CHECK(flag.exit_code == 2);
  CHECK(contains(flag.err, "not_a_kernel"));
}

TEST_CASE("cli: inspect shows name, resources, source and PTX", "[cli]") {
  TempDir dir;
  const CliRun r = run_cli(dir, with_cache(dir, {"inspect", "--head-dim", "128", "--arch", "sm_90a",
                                                 "--source", "--resources", "--ptx"}));
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.out, kName));
  CHECK(contains(r.out, "registers"));
  CHECK(contains(r.out, "extern \"C\""));
  CHECK(contains(r.out, "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"));
  CHECK(contains(r.out, "compiled in"));

  // The same kernel by canonical name: read from the cache this time; no flags: header and
  // resources only.
  const CliRun again = run_cli(dir, with_cache(dir, {"inspect", kName}));
  REQUIRE(again.exit_code == 0);
  CHECK(contains(again.out, kName));
  CHECK(contains(again.out, "from cache"));
  CHECK(contains(again.out, "registers"));
  CHECK_FALSE(contains(again.out, "extern \"C\""));
  CHECK_FALSE(contains(again.out, "ptxas note"));

  // ptxas's performance notes would come with the resources, from a fresh compile or the cache
  // (their parsing: tests/codegen/test_generate.cpp). The fp8 wgmma kernel at head dim 128 had
  // its wgmmas serialised (C7512) while capped for three CTAs; at two it has none, either way.
  for (int pass = 0; pass < 2; ++pass) {
    const CliRun fp8 = run_cli(dir, with_cache(dir, {"inspect", "--precision", "fp8_e4m3",
                                                     "--head-dim", "128", "--arch", "sm_90a"}));
    REQUIRE(fp8.exit_code == 0);
    CHECK(contains(fp8.out, pass == 0 ? "compiled in" : "from cache"));
    CHECK(contains(fp8.out, "registers"));
    CHECK_FALSE(contains(fp8.out, "ptxas note"));
  }

  // No --arch and no GPU: sm_90a is assumed, and the user is told.
  const CliRun assumed =
      run_cli(dir, with_cache(dir, {"inspect", "--head-dim", "128"}), {no_driver_env(dir)});
  CHECK(assumed.exit_code == 0);
  CHECK(contains(assumed.out, kName));
  CHECK(contains(assumed.err, "sm_90a was assumed"));

  // --sass needs the toolkit's disassemblers; without them it says so and fails, so that a
  // script comparing two builds' digests does not read two empty ones as equal.
  const CliRun sass = run_cli(dir, with_cache(dir, {"inspect", kName, "--sass"}));
  const bool have_tool = !contains(sass.err, "no cuobjdump or nvdisasm found");
  CHECK(sass.exit_code == (have_tool ? 0 : 2));
  CHECK((have_tool ? contains(sass.out, "sass (") : contains(sass.err, "was not shown")));
  // --sass-digest likewise: one line per function of the cubin, the kernel's among them.
  const CliRun digest = run_cli(dir, with_cache(dir, {"inspect", kName, "--sass-digest"}));
  CHECK(digest.exit_code == (have_tool ? 0 : 2));
  CHECK((have_tool ? contains(digest.out, std::string("sass-digest ") + kName)
                   : contains(digest.err, "was not shown")));

  // Knob flags override the fields of a given name.
  const CliRun bf16 =
      run_cli(dir, with_cache(dir, {"inspect", "--config", kName, "--precision", "bf16"}));
  CHECK(bf16.exit_code == 0);
  CHECK(contains(bf16.out, "ftattn_fwd_sm90a_bf16_d128_m192n128_w12s2_none_none"));
}

TEST_CASE("cli: compile fills the cache, cache ls, clear and path", "[cli]") {
  TempDir dir;
  const std::vector<std::string> config = {"compile", "--head-dim", "64",    "--arch",
                                           "sm_80",   "--mask",     "causal"};
  const auto t0 = std::chrono::steady_clock::now();
  const CliRun first = run_cli(dir, with_cache(dir, config));
  const auto t1 = std::chrono::steady_clock::now();
  REQUIRE(first.exit_code == 0);
  CHECK(contains(first.out, "compiled in"));
  const CliRun second = run_cli(dir, with_cache(dir, config));
  const auto t2 = std::chrono::steady_clock::now();
  REQUIRE(second.exit_code == 0);
  CHECK(contains(second.out, "cache hit"));
  // Whole processes: a hit skips NVRTC, so it is far faster (about 60x here; the bound is loose
  // so a loaded CI machine does not trip it).
  const double miss_s = std::chrono::duration<double>(t1 - t0).count();
  const double hit_s = std::chrono::duration<double>(t2 - t1).count();
  INFO("first compile " << miss_s << " s, cache hit " << hit_s << " s");
  CHECK(hit_s * 5 < miss_s);
  CHECK_FALSE(contains(second.out, "compiled in"));
  const std::string name = second.out.substr(0, second.out.find(':'));
  CHECK(name.rfind("ftattn_fwd_sm80_f16_d64_", 0) == 0);

  const CliRun ls = run_cli(dir, with_cache(dir, {"cache", "ls"}));
  REQUIRE(ls.exit_code == 0);
  CHECK(contains(ls.out, name));
  CHECK(contains(ls.out, "  NVRTC "));  // which compiler built it
  // The word the help uses works too.
  const CliRun list = run_cli(dir, with_cache(dir, {"cache", "list"}));
  CHECK(list.exit_code == 0);
  CHECK(list.out == ls.out);

  const CliRun clear = run_cli(dir, with_cache(dir, {"cache", "clear"}));
  REQUIRE(clear.exit_code == 0);
  CHECK(contains(clear.out, "removed 1 "));

  const CliRun empty = run_cli(dir, with_cache(dir, {"cache", "ls"}));
  REQUIRE(empty.exit_code == 0);
  CHECK_FALSE(contains(empty.out, name));
  CHECK(contains(empty.out, "no cache entries"));

  const std::string root = (dir.path() / "cache").string();
  const CliRun path = run_cli(dir, with_cache(dir, {"cache", "path"}));
  CHECK(path.exit_code == 0);
  CHECK(path.out == root + "\n");

  // The environment variable is the default root; --cache-dir also works after the subcommand.
  const std::string env_root = (dir.path() / "from-env").string();
  const CliRun env_path = run_cli(dir, {"cache", "path"}, {"FTATTN_CACHE_DIR=" + env_root});
  CHECK(env_path.out == env_root + "\n");
  const CliRun late = run_cli(dir, {"cache", "path", "--cache-dir", root});
  CHECK(late.out == root + "\n");
}

TEST_CASE("cli: cache takes exactly one command and runs none of two", "[cli]") {
  TempDir dir;
  REQUIRE(
      run_cli(dir, with_cache(dir, {"compile", "--head-dim", "64", "--arch", "sm_80"})).exit_code ==
      0);
  const CliRun two = run_cli(dir, with_cache(dir, {"cache", "ls", "clear"}));
  CHECK(two.exit_code == 2);
  CHECK(contains(two.err, "ftattn: error: "));
  CHECK(contains(two.err, "clear"));
  CHECK(two.out.empty());
  const CliRun path_clear = run_cli(dir, with_cache(dir, {"cache", "path", "clear"}));
  CHECK(path_clear.exit_code == 2);
  CHECK(path_clear.out.empty());
  const CliRun clear_ls = run_cli(dir, with_cache(dir, {"cache", "clear", "ls"}));
  CHECK(clear_ls.exit_code == 2);
  CHECK(clear_ls.out.empty());
  // Nothing was cleared by any of them.
  const CliRun ls = run_cli(dir, with_cache(dir, {"cache", "ls"}));
  CHECK(ls.exit_code == 0);
  CHECK(contains(ls.out, "1 entry, "));

  const CliRun none = run_cli(dir, with_cache(dir, {"cache"}));
  CHECK(none.exit_code == 2);
  CHECK(contains(none.err, "cache needs a command: ls, clear or path"));
}

TEST_CASE("cli: run without a GPU is an error that says so", "[cli]") {
  TempDir dir;
  const CliRun r = run_cli(dir,
                           with_cache(dir, {"run", "--head-dim", "128", "--batch", "1", "--heads",
                                            "2", "--seqlen", "128"}),
                           {no_driver_env(dir)});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "ftattn: error: "));
  CHECK((contains(r.err, "no CUDA driver") || contains(r.err, "no CUDA device")));

  // A run without a head_dim is refused before the GPU is looked for.
  const CliRun no_hd =
      run_cli(dir, with_cache(dir, {"run", "--batch", "1", "--heads", "2", "--seqlen", "128"}));
  CHECK(no_hd.exit_code == 2);
  CHECK(contains(no_hd.err, "head_dim"));
}

TEST_CASE("cli: bench --interleave without a GPU is an error that says so", "[cli]") {
  TempDir dir;
  const CliRun r =
      run_cli(dir,
              with_cache(dir, {"bench", "--interleave", "--precisions", "f16", "--protection",
                               "none,flash_abft", "--shapes", "128,2,256,1"}),
              {no_driver_env(dir)});
  CHECK(r.exit_code == 2);
  CHECK((contains(r.err, "no CUDA driver") || contains(r.err, "no CUDA device")));
  // The flag is the bench's own: another command refuses it.
  const CliRun other = run_cli(dir, with_cache(dir, {"compile", "--interleave"}));
  CHECK(other.exit_code == 2);
  CHECK(contains(other.err, "--interleave"));
}

TEST_CASE("cli: run and bench take --prepare-kv, and without a GPU say so", "[cli]") {
  TempDir dir;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"run", "--prepare-kv", "--protection", "flash_abft", "--head-dim",
                                 "128", "--batch", "1", "--heads", "2", "--seqlen", "256"},
        std::vector<std::string>{"bench", "--prepare-kv", "--precisions", "f16_pasa", "--shapes",
                                 "128,2,256,1"}}) {
    const CliRun r = run_cli(dir, with_cache(dir, args), {no_driver_env(dir)});
    INFO(args[0] << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK((contains(r.err, "no CUDA driver") || contains(r.err, "no CUDA device")));
  }
  const CliRun other = run_cli(dir, with_cache(dir, {"compile", "--prepare-kv"}));
  CHECK(other.exit_code == 2);
  CHECK(contains(other.err, "--prepare-kv"));
}

TEST_CASE("cli: demo without a GPU compiles, inspects and says nothing ran", "[cli]") {
  TempDir dir;
  const CliRun r = run_cli(dir, with_cache(dir, {"demo"}), {no_driver_env(dir)});
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.out, "ftattn_fwd_sm90a_f16_d128_"));
  CHECK(contains(r.out, "ftattn_fwd_sm80_f16_d128_"));
  CHECK(contains(r.out, "ftattn_fwd_sm90a_fp8-e4m3_d128_m64n128_w4s2_"));  // the wgmma skeleton
  CHECK(contains(r.out, "512 mma.sync and 0 wgmma instructions"));         // f16 on sm_80
  // f16 on sm_90a, warp-specialised: GEMM I in 4 copies x 8, GEMM II in 3 x 8.
  CHECK(contains(r.out, "0 mma.sync and 56 wgmma instructions"));
  // fp8: 2 copies x (GEMM I's 4 + GEMM II's 4 in each of its two 64-channel pieces).
  CHECK(contains(r.out, "0 mma.sync and 24 wgmma instructions"));
  CHECK(contains(r.out,
                 "No GPU found: kernels were generated, compiled and inspected, but nothing was "
                 "launched."));
}

TEST_CASE("cli: demo without a GPU refuses --arch auto, which needs one", "[cli]") {
  TempDir dir;
  const CliRun r = run_cli(dir, with_cache(dir, {"demo", "--arch", "auto"}), {no_driver_env(dir)});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--arch auto takes the GPU's arch, and there is no GPU"));
}

TEST_CASE("cli: knob flags take decimal numbers, and no flag takes an empty value", "[cli]") {
  TempDir dir;
  auto compile = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {"compile", "--arch", "sm_80"};
    args.insert(args.end(), more.begin(), more.end());
    return run_cli(dir, with_cache(dir, args));
  };
  // CLI11 alone built d64 m128 n64 w8 s2 from these, exit 0.
  for (const auto& [flag, value] : {std::pair<std::string, std::string>{"--head-dim", "0100"},
                                    {"--block-m", "0200"},
                                    {"--block-n", "0100"},
                                    {"--warps", "010"},
                                    {"--stages", "02"}}) {
    std::vector<std::string> args = {"--head-dim", "64"};
    if (flag == "--head-dim") args.clear();
    args.insert(args.end(), {flag, value});
    const CliRun r = compile(args);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, flag + ": '" + value + "' has a leading zero"));
  }
  const CliRun hex = compile({"--head-dim", "0x40"});
  CHECK(hex.exit_code == 2);
  CHECK(contains(hex.err, "--head-dim: '0x40' is not a whole number"));
  const CliRun negative = compile({"--head-dim", "-1"});
  CHECK(negative.exit_code == 2);
  CHECK(contains(negative.err, "--head-dim: -1 is too small"));
  // An empty value read as "not given" and built the default.
  for (const std::string flag :
       {"--precision", "--protection", "--mask", "--arch", "--backend", "--config"}) {
    const CliRun r = compile({"--head-dim", "64", flag, ""});
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, flag + ": empty value: give "));
  }
  CHECK(compile({"--head-dim", "64", "--block-n", "32"}).exit_code == 0);
}

TEST_CASE("cli: no command's option takes an empty value, before any work", "[cli]") {
  TempDir dir;
  const std::string no_gpu = no_driver_env(dir);
  // Each of these read '' as "not given" and went on with the default file or grid.
  const std::vector<std::vector<std::string>> cases = {
      {"bench", "--shapes", ""},
      {"bench", "--csv", ""},
      {"bench", "--json", ""},
      {"accuracy", "--head-dim", "64", "--csv", ""},
      {"inject", "--head-dim", "64", "--protection", "flash_abft", "--site", "scores",
       "--summary-csv", ""},
      {"inject", "--head-dim", "64", "--protection", "flash_abft", "--site", "scores",
       "--thresholds", ""},
      {"--cache-dir", "", "compile", "--arch", "sm_80", "--head-dim", "64"}};
  for (const auto& args : cases) {
    const std::string flag = *std::find_if(args.begin(), args.end(), [](const std::string& a) {
      return a.rfind("--", 0) == 0 && a != "--head-dim" && a != "--protection" && a != "--site";
    });
    INFO(flag);
    const CliRun r = run_cli(dir, args, {no_gpu});
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, flag + ": empty value: give "));
  }
  // Flags take no value and still work.
  CHECK(run_cli(dir,
                with_cache(dir, {"inspect", "--arch", "sm_80", "--head-dim", "64", "--resources"}),
                {no_gpu})
            .exit_code == 0);
}

TEST_CASE("cli: bench refuses what it would not honour, before any work", "[cli]") {
  TempDir dir;
  const std::string no_gpu = no_driver_env(dir);
  auto bench = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {"bench"};
    args.insert(args.end(), more.begin(), more.end());
    return run_cli(dir, with_cache(dir, args), {no_gpu});
  };
  // --precision, --mask and --head-dim were overwritten by the lists and shapes.
  CliRun r = bench({"--precision", "bf16", "--precisions", "f16"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--precision and --precisions both given"));
  r = bench({"--mask", "causal", "--masks", "none"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--mask and --masks both given"));
  r = bench({"--head-dim", "128", "--shapes", "64,2,256,1"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "bench takes head dims from --shapes"));
  r = bench({"--head-dim", "96"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "the standard grid has no shape at head dim 96"));
  // No block masks to go with them: nothing could be timed, and bench said exit 0.
  r = bench({"--masks", "none,block_sparse", "--shapes", "64,2,256,1"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "bench times dense masks (none, causal), not block_sparse"));
  // Two tables on standard output would run together.
  r = bench({"--csv", "-", "--json", "-", "--shapes", "64,2,256,1"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--csv and --json both write to standard output"));
  r = bench({"--iters", "020"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--iters: '020' has a leading zero: give a whole number of at least 20"));
  // Taken as given: the single flags pick the sweep, and then the GPU is what is missing.
  r = bench({"--precision", "bf16", "--mask", "causal", "--head-dim", "64"});
  CHECK(r.exit_code == 2);
  CHECK((contains(r.err, "no CUDA driver") || contains(r.err, "no CUDA device")));
}

TEST_CASE("cli: tune refuses what it would not honour, before any work", "[cli]") {
  TempDir dir;
  const std::string no_gpu = no_driver_env(dir);
  auto tune = [&](std::vector<std::string> more, const std::string& message) {
    std::vector<std::string> args = {"tune"};
    args.insert(args.end(), more.begin(), more.end());
    const CliRun r = run_cli(dir, with_cache(dir, args), {no_gpu});
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, message));
    CHECK_FALSE(contains(r.err, "no CUDA driver"));  // said before the GPU is looked for
  };
  // Empty values took the defaults: the standard grid, the cache dir's DB, no CSV.
  for (const std::string flag :
       {"--shapes", "--db", "--csv", "--masks", "--precision", "--protection"})
    tune({flag, ""}, flag + ": empty value: give ");
  // The DB is never read for block-sparse masks: their entries would go unused.
  tune({"--masks", "none,block_sparse_causal", "--shapes", "64,2,1024,1"},
       "--masks: block_sparse_causal: the tuner and its DB serve dense masks only");
  tune({"--masks", "causal,none,causal", "--shapes", "64,2,1024,1"},
       "--masks: 'causal,none,causal' names causal twice");
  // Two shapes of one bucket: the DB kept the last one's winner alone, silently.
  tune({"--shapes", "128,32,3000,4;128,32,4096,4"},
       "--shapes: 128,32,3000,4 and 128,32,4096,4 fall in one tuning bucket (s4096_bh128_");
  tune({"--shapes", "64,2,1024,1;64,2,1024,1"}, "64,2,1024,1 and 64,2,1024,1 fall in one");
  // Other head dims, or another bucket, are other entries: then the GPU is what is missing.
  const CliRun r = run_cli(
      dir, with_cache(dir, {"tune", "--shapes", "128,32,4096,4;64,32,4096,4;128,32,8192,4"}),
      {no_gpu});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "no CUDA driver"));
}

TEST_CASE("cli: run refuses mask-block flags that would do nothing", "[cli]") {
  TempDir dir;
  auto run = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {"run",     "--head-dim", "64",       "--batch", "1",
                                     "--heads", "1",          "--seqlen", "64"};
    args.insert(args.end(), more.begin(), more.end());
    return run_cli(dir, with_cache(dir, args), {no_driver_env(dir)});
  };
  CliRun r = run({"--density", "0.5"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--sparse-block and --density shape a block-sparse mask"));
  r = run({"--mask", "block_sparse"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "give --sparse-block <rows>x<cols>"));
  // NaN passed CLI11's range check, and the random mask then kept no block.
  r = run({"--mask", "block_sparse", "--sparse-block", "64x64", "--density", "nan"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--density: 'nan' is not a finite number"));
  r = run({"--mask", "block_sparse", "--sparse-block", "64x64", "--density", "0.5"});
  CHECK(r.exit_code == 2);
  CHECK((contains(r.err, "no CUDA driver") || contains(r.err, "no CUDA device")));
}
