// `ftattn inspect --backend llvm --ir` as a user runs it.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/temp_dir.hpp"

#ifndef FTATTN_CLI_PATH
#error "FTATTN_CLI_PATH must name the built ftattn executable"
#endif

namespace {

struct Ran {
  int exit_code = -1;
  std::string out, err;
};

Ran run(const ftattn::test::TempDir& dir, const std::string& args) {
  const auto out = dir.path() / "out.txt", err = dir.path() / "err.txt";
  const std::string command = std::string(FTATTN_CLI_PATH) + " --cache-dir '" +
                              (dir.path() / "cache").string() + "' " + args + " >'" + out.string() +
                              "' 2>'" + err.string() + "'";
  const int status = std::system(command.c_str());
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  Ran r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  UNSCOPED_INFO(command << "\nstdout (start):\n"
                        << r.out.substr(0, 2000) << "\nstderr:\n"
                        << r.err);
  return r;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("inspect --ir prints the IR before and after the passes, and statistics") {
  ftattn::test::TempDir dir;
  const Ran r = run(dir,
                    "inspect --head-dim 64 --arch sm_80 --backend llvm --ir-inject mma "
                    "--ir-harden fp_arith --ir");
  REQUIRE(r.exit_code == 0);
  CHECK(has(r.out, "; IR before the passes"));
  CHECK(has(r.out, "; IR after the passes"));
  CHECK(has(r.out, "ftattn-harden<fp-arith>"));
  CHECK(has(r.out, "ftattn-inject<mma>"));
  CHECK(has(r.out, "instrumented sites: injection"));
  CHECK(has(r.out, "_llvm-inject-mma-harden-fp-arith"));
}

TEST_CASE("inspect --backend llvm compiles, --ir without it says what to add") {
  ftattn::test::TempDir dir;
  const Ran ok = run(dir, "inspect --head-dim 64 --arch sm_80 --backend llvm --resources");
  REQUIRE(ok.exit_code == 0);
  CHECK(has(ok.out, "_llvm"));
  CHECK(has(ok.out, "registers"));
  const Ran no_llvm = run(dir, "inspect --head-dim 64 --arch sm_80 --ir");
  CHECK(no_llvm.exit_code != 0);
  CHECK(has(no_llvm.err, "--backend llvm"));
  const Ran bad = run(dir, "inspect --head-dim 64 --arch sm_80 --backend clang");
  CHECK(bad.exit_code != 0);
  CHECK(has(bad.err, "nvrtc, llvm"));
}
