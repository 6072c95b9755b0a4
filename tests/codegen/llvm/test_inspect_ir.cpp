// `ftattn inspect --backend llvm --ir` as a user runs it.
#include <catch2/catch.hpp>
#include <string>

#include "tests/support/shell.hpp"
#include "tests/support/temp_dir.hpp"

#ifndef FTATTN_CLI_PATH
#error "FTATTN_CLI_PATH must name the built ftattn executable"
#endif

namespace {

using ftattn::test::CliRun;
using ftattn::test::contains;

CliRun run(const ftattn::test::TempDir& dir, const std::string& args) {
  const CliRun r = ftattn::test::run_cli(
      FTATTN_CLI_PATH, dir.path(),
      "--cache-dir " + ftattn::test::shell_quote((dir.path() / "cache").string()) + " " + args);
  UNSCOPED_INFO(ftattn::test::describe(r, 2000));  // the IR is long
  return r;
}

}  // namespace

TEST_CASE("inspect --ir prints the IR before and after the passes, and statistics") {
  ftattn::test::TempDir dir;
  const CliRun r = run(dir,
                       "inspect --head-dim 64 --arch sm_80 --backend llvm --ir-inject mma "
                       "--ir-harden fp_arith --ir");
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.out, "; IR before the passes"));
  CHECK(contains(r.out, "; IR after the passes"));
  CHECK(contains(r.out, "ftattn-harden<fp-arith>"));
  CHECK(contains(r.out, "ftattn-inject<mma>"));
  CHECK(contains(r.out, "instrumented sites: injection"));
  CHECK(contains(r.out, "_llvm-inject-mma-harden-fp-arith"));
}

TEST_CASE("inspect --backend llvm compiles, --ir without it says what to add") {
  ftattn::test::TempDir dir;
  const CliRun ok = run(dir, "inspect --head-dim 64 --arch sm_80 --backend llvm --resources");
  REQUIRE(ok.exit_code == 0);
  CHECK(contains(ok.out, "_llvm"));
  CHECK(contains(ok.out, "registers"));
  const CliRun no_llvm = run(dir, "inspect --head-dim 64 --arch sm_80 --ir");
  CHECK(no_llvm.exit_code != 0);
  CHECK(contains(no_llvm.err, "--backend llvm"));
  const CliRun bad = run(dir, "inspect --head-dim 64 --arch sm_80 --backend clang");
  CHECK(bad.exit_code != 0);
  CHECK(contains(bad.err, "nvrtc, llvm"));
}
