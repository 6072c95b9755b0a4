// Accuracy metrics as the papers define them, and the INT8 quantisation host model.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "ftattn/accuracy.hpp"
#include "ftattn/errors.hpp"

using namespace ftattn;

TEST_CASE("metrics: known answers", "[accuracy]") {
  const std::vector<double> g{1.0, -2.0, 0.5, 4.0, 0.0};
  const std::vector<double> o{1.1, -2.0, 0.5, 3.0, 0.0};
  const accuracy::Metrics m = accuracy::compare(g, o);
  CHECK(m.elements == 5);
  CHECK(m.max_abs == Approx(1.0));
  CHECK(m.rel_l2 == Approx(std::sqrt(0.01 + 1.0) / std::sqrt(1 + 4 + 0.25 + 16)));
  CHECK(m.mre == Approx((0.1 / (1 + 1e-5) + 1.0 / (4 + 1e-5)) / 5));
  CHECK(m.mre_last4 == Approx((1.0 / (4 + 1e-5)) / 4));  // elements 1..4
  CHECK(m.abs_ratio == Approx(1.1 / 7.5));
  const double dot = 1.1 + 4 + 0.25 + 12, no = std::sqrt(1.21 + 4 + 0.25 + 9);
  CHECK(m.cosine == Approx(dot / (no * std::sqrt(21.25))));
  CHECK(m.non_finite_rate == 0.0);

  const accuracy::Metrics same = accuracy::compare(g, g);
  CHECK(same.rel_l2 == 0.0);
  CHECK(same.cosine == Approx(1.0));
}

TEST_CASE("metrics: NaN outputs are counted and poison the rest", "[accuracy]") {
  const std::vector<double> g{1, 2, 3, 4};
  const std::vector<double> o{1, NAN, 3, INFINITY};
  const accuracy::Metrics m = accuracy::compare(g, o);
  CHECK(m.non_finite_rate == 0.5);
  CHECK(std::isnan(m.rel_l2));
  CHECK(std::isnan(m.cosine));
  CHECK_THROWS(accuracy::compare(g, std::vector<double>{1, 2}));
}

TEST_CASE("metrics: a NaN or Inf in the golden is an error, not a quiet metric", "[accuracy]") {
  const std::vector<double> o{1, 2, 3, 4};
  // Before, a NaN golden dropped out of max_abs and left a finite value there.
  const std::vector<double> nan_golden{1, NAN, 3, 4};
  CHECK_THROWS_AS(accuracy::compare(nan_golden, o), Error);
  CHECK_THROWS_WITH(accuracy::compare(nan_golden, o),
                    Catch::Contains("golden tensor has 1 NaN or Inf values of 4") &&
                        Catch::Contains("element 1, is nan"));
  const std::vector<double> inf_golden{1, 2, -INFINITY, INFINITY};
  CHECK_THROWS_WITH(accuracy::compare(inf_golden, o), Catch::Contains("has 2 NaN or Inf values") &&
                                                          Catch::Contains("element 2, is -inf"));
  // Also where the output is non-finite at the same place: the golden is what is broken.
  const std::vector<double> both{1, NAN, 3, 4};
  CHECK_THROWS_AS(accuracy::compare(nan_golden, both), Error);
  // The size check still comes first.
  CHECK_THROWS_WITH(accuracy::compare(nan_golden, std::vector<double>{1}),
                    Catch::Contains("4 golden elements but 1 outputs"));
}

TEST_CASE("per-token INT8 quantisation: range, scale and error bound", "[accuracy]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0, 2);
  const int rows = 17, cols = 64;
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = n(rng);
  for (int c = 0; c < cols; ++c) x[5 * cols + c] = 0;  // an all-zero token
  const auto q = accuracy::quantize_per_row(x, rows, cols);
  REQUIRE(q.scales.size() == rows);
  const auto back = accuracy::dequantize(q, cols);
  for (int r = 0; r < rows; ++r) {
    float amax = 0;
    int peak = 0;
    for (int c = 0; c < cols; ++c) {
      amax = std::max(amax, std::abs(x[r * cols + c]));
      peak = std::max(peak, std::abs(int(q.values[r * cols + c])));
      // Round to nearest: within half a step of the row's scale.
      CHECK(std::abs(back[r * cols + c] - x[r * cols + c]) <= 0.5f * q.scales[r] * 1.0001f);
    }
    if (r == 5) {
      CHECK(q.scales[r] == 1.0f);
      CHECK(peak == 0);
    } else {
      CHECK(q.scales[r] == Approx(amax / 127));
      CHECK(peak == 127);  // the largest element maps to the end of the range, never past it
    }
  }
  const auto t = accuracy::quantize_per_tensor(x);
  REQUIRE(t.scales.size() == 1);
  for (auto v : t.values) CHECK(std::abs(int(v)) <= 127);
  CHECK_THROWS(accuracy::quantize_per_row(x, rows, cols + 1));
}

TEST_CASE("INT8 probabilities and INT32 headroom", "[accuracy]") {
  CHECK(accuracy::quantize_probability(0.0f) == 127);
  CHECK(accuracy::quantize_probability(-std::log(2.0f)) == 64);  // 63.5 rounds to even
  CHECK(accuracy::quantize_probability(-5.5f) == 1);             // exp(-5.5) = 0.0041 > 1/254
  CHECK(accuracy::quantize_probability(-5.6f) == 0);             // below 1/254: flushed to zero
  CHECK(accuracy::quantize_probability(3.0f) == 127);            // never above the row max
  CHECK(accuracy::int32_headroom(256, 256));
  CHECK(accuracy::int32_headroom(128, 1024, false));       // 16129 * 131072 < 2^31
  CHECK_FALSE(accuracy::int32_headroom(256, 1024, true));  // 16384 * 262144 > 2^31
}
