// GPU test: `ftattn tune` end to end on a small grid. The CLI tunes into a fresh cache dir; the
// DB it writes must hold a verified winner for the shape, and a Runtime on that cache dir must
// resolve an open config for the same problem to that winner.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ftattn/runtime.hpp"
#include "ftattn/tuner.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ftattn;
namespace fs = std::filesystem;

namespace {

// The ftattn CLI is built next to this binary.
fs::path cli_path() { return fs::read_symlink("/proc/self/exe").parent_path() / "ftattn"; }

}  // namespace

TEST_CASE("ftattn tune tunes a small grid end to end and the runtime picks the winner",
          "[gpu][tune]") {
  REQUIRE(fs::exists(cli_path()));
  test::TempDir dir("ftattn-tune");
  const fs::path csv = dir.path() / "tune.csv";
  const std::string cmd = "FTATTN_CACHE_DIR='" + dir.path().string() + "' '" + cli_path().string() +
                          "' tune --shapes '64,8,1024,2' --masks none,causal --warmup 1 --iters 5 "
                          "--csv '" +
                          csv.string() + "' > '" + (dir.path() / "tune.log").string() + "' 2>&1";
  INFO(cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);

  const tuner::Database db = tuner::Database::load(tuner::user_database_path(dir.path()));
  REQUIRE(db.entries().size() == 2);  // one per mask
  std::ifstream in(csv);
  std::stringstream table;
  table << in.rdbuf();
  CHECK(table.str().find("head_dim") != std::string::npos);

  RuntimeOptions options;
  options.cache_dir = dir.path();
  Runtime rt(options);
  for (const tuner::Entry& e : db.entries()) {
    INFO(e.best.name());
    CHECK(e.best_tflops > 0.0);
    CHECK(e.default_tflops > 0.0);
    CHECK(e.best_tflops >= 0.97 * e.default_tflops);  // the winner is at least as fast
    CHECK(e.device.gpu_name.find("NVIDIA") != std::string::npos);
    CHECK(e.default_config == tuner::bucket_default(e.family, e.bucket));
    KernelConfig open;
    open.head_dim = 64;
    open.mask = e.family.mask;
    const Problem problem = Problem::bhsd(2, 8, 8, 1024, 1024, 64);
    CHECK(rt.resolve(open, &problem) == e.best);
  }
}
