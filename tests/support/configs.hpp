// A complete kernel config from its knobs, for tests that name tiles directly, or from the
// heuristic defaults; the check that a call fails with ConfigError and a given message; counting
// occurrences in generated text. Include after Catch2.
#pragma once

#include <string>

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

// The heuristic's choice for what the tests name; the tiles are left to with_defaults.
inline KernelConfig default_config(int head_dim, Precision precision, Mask mask, Arch arch,
                                   Protection protection = Protection::none,
                                   bool fault_injection = false) {
  KernelConfig c;
  c.head_dim = head_dim;
  c.precision = precision;
  c.mask = mask;
  c.protection = protection;
  c.fault_injection = fault_injection;
  c.arch = arch;
  return with_defaults(c, arch);
}

// Non-overlapping-start occurrences of `needle` in `text` (e.g. an instruction in PTX).
inline int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace ftattn::test
