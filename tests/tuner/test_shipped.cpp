// The tuning DB shipped for the H200 covers the standard grid it was tuned on.
#include <catch2/catch.hpp>

#include "ftattn/tuner.hpp"

using namespace ftattn;
using namespace ftattn::tuner;

TEST_CASE("the shipped H200 DB answers every f16 shape of the standard grid", "[tuner][db]") {
  const DeviceKey h200{"NVIDIA H200", 90, 13000};
  int found = 0;
  for (auto [d, h] : {std::pair{64, 16}, std::pair{128, 32}, std::pair{256, 16}})
    for (int s : {512, 1024, 2048, 4096, 8192, 16384})
      for (Mask m : {Mask::none, Mask::causal}) {
        const Problem p = Problem::bhsd(16384 / s, h, h, s, s, d);
        const Family f{Arch{90, true}, Precision::f16, Protection::none, d, m};
        INFO("d" << d << " s" << s << " " << to_string(m));
        const auto best = shipped().find(h200, f, Bucket::of(p, m));
        REQUIRE(best.has_value());
        CHECK(best->head_dim == d);
        CHECK(best->mask == m);
        CHECK_NOTHROW(validate(*best));
        ++found;
      }
  CHECK(found == 36);
  // Another GPU, or a driver older than the one it was tuned with, gets nothing from it.
  const Family f{Arch{90, true}, Precision::f16, Protection::none, 128, Mask::none};
  const Bucket b = Bucket::of(Problem::bhsd(4, 32, 32, 4096, 4096, 128), Mask::none);
  CHECK_FALSE(shipped().find(DeviceKey{"NVIDIA H100 80GB HBM3", 90, 13000}, f, b).has_value());
  CHECK_FALSE(shipped().find(DeviceKey{"NVIDIA H200", 90, 12080}, f, b).has_value());
}
