// A complete kernel config from its knobs, for tests that name tiles directly, and the check that
// a call fails with ConfigError and a given message. Include after Catch2.
#pragma once

#include "ftattn/config.hpp"
#include "ftattn/errors.hpp"

// Type and message both: a wrong exception type must not pass on its text alone.
#define REQUIRE_CONFIG_ERROR(expr, text)              \
  do {                                                \
    REQUIRE_THROWS_AS(expr, ftattn::ConfigError);     \
    REQUIRE_THROWS_WITH(expr, Catch::Contains(text)); \
  } while (0)

namespace ftattn::test {

inline KernelConfig tile_config(int head_dim, int block_m, int block_n, int num_warps,
                                int num_stages, Arch arch, Precision precision = Precision::f16,
                                Mask mask = Mask::none, Protection protection = Protection::none) {
  KernelConfig c;
  c.head_dim = head_dim;
  c.block_m = block_m;
  c.block_n = block_n;
  c.num_warps = num_warps;
  c.num_stages = num_stages;
  c.precision = precision;
  c.protection = protection;
  c.mask = mask;
  c.arch = arch;
  return c;
}

}  // namespace ftattn::test
