// PASA's beta per block size and storage type, pinned to the paper's Table 3 and to our own
// re-derivation for other block sizes (shared/notes/seed-numerics.md, B.5).
#include <catch2/catch.hpp>
#include <cmath>

#include "ftattn/errors.hpp"
#include "ftattn/pasa.hpp"

using namespace ftattn;

TEST_CASE("storage rounding is round-to-nearest-even with subnormals", "[pasa]") {
  CHECK(pasa::round_to(1.0, Precision::f16) == 1.0);
  CHECK(pasa::round_to(1.0 + std::ldexp(1.0, -11), Precision::f16) == 1.0);  // tie: to even
  CHECK(pasa::round_to(1.0 + 3 * std::ldexp(1.0, -11), Precision::f16) ==
        1.0 + std::ldexp(1.0, -9));  // tie: up to even
  CHECK(pasa::round_to(1.0 / 3.0, Precision::f16) == 0.333251953125);
  CHECK(pasa::round_to(std::ldexp(1.0, -25) * 3, Precision::f16) == std::ldexp(1.0, -23));
  CHECK(pasa::round_to(1.0 / 3.0, Precision::bf16) == 0.333984375);
  CHECK(pasa::round_to(-0.9375, Precision::bf16) == -0.9375);
  CHECK_THROWS_AS(pasa::round_to(1.0, Precision::int8), ConfigError);
}

TEST_CASE("optimal beta reproduces PASA's Table 3 (FP16, n = 128)", "[pasa]") {
  struct Row {
    double start, beta, recovery;
  };
  for (Row r : {Row{0.9, 0.899708, 8.971}, Row{1 - 1 / 16.0, 0.937500, 15.00},
                Row{1 - 1 / 32.0, 0.968994, 31.25}, Row{1 - 1 / 64.0, 0.984497, 63.50},
                Row{0.99, 0.990311, 102.2}, Row{0.999, 0.999031, 1031.0}}) {
    INFO("start " << r.start);
    const double beta = pasa::optimal_beta(r.start, 128, Precision::f16);
    CHECK(beta == Approx(r.beta).margin(5e-7));
    // At the fixed point the exact recovery beta/(1-beta) equals what the rounded matrix needs.
    const double realised = pasa::realised_recovery(beta, 128, Precision::f16);
    CHECK(realised == Approx(r.recovery).epsilon(1e-3));
    CHECK(beta / (1 - beta) == Approx(realised).epsilon(1e-6));
  }
  // The naive choice is off: 1 - 2^-6 promises 63 but the rounded matrix realises 63.5.
  CHECK(pasa::realised_recovery(1 - 1 / 64.0, 128, Precision::f16) == Approx(63.5).epsilon(1e-3));
}

TEST_CASE("beta depends on block size and storage type", "[pasa]") {
  struct Row {
    int n;
    Precision p;
    double b4, b5, b6;  // from starts 1 - 2^-4, 1 - 2^-5, 1 - 2^-6
  };
  for (Row r : {Row{32, Precision::f16, 0.937500, 0.968750, 0.984375},
                Row{64, Precision::f16, 0.937500, 0.968750, 0.984619},
                Row{128, Precision::f16, 0.937500, 0.968994, 0.984497},
                Row{256, Precision::f16, 0.937744, 0.968872, 0.984436},
                Row{128, Precision::bf16, 0.937988, 0.968994, 0.984497}}) {
    INFO("n " << r.n << " " << to_string(r.p));
    CHECK(pasa::optimal_beta(1 - 1 / 16.0, r.n, r.p) == Approx(r.b4).margin(5e-7));
    CHECK(pasa::optimal_beta(1 - 1 / 32.0, r.n, r.p) == Approx(r.b5).margin(5e-7));
    CHECK(pasa::optimal_beta(1 - 1 / 64.0, r.n, r.p) == Approx(r.b6).margin(5e-7));
  }
}

TEST_CASE("beta rejects the singular and the meaningless", "[pasa]") {
  CHECK_THROWS_WITH(pasa::optimal_beta(1.0, 128, Precision::f16), Catch::Contains("singular"));
  CHECK_THROWS_AS(pasa::optimal_beta(0.0, 128, Precision::f16), ConfigError);
  CHECK_THROWS_AS(pasa::optimal_beta(0.9, 0, Precision::f16), ConfigError);
  CHECK_THROWS_AS(pasa::optimal_beta(0.9, 128, Precision::fp8_e4m3), ConfigError);
}
