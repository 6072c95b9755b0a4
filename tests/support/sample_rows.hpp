// Rows of 16-bit-exact values for host models of the kernels' checks: N(0, 1), and PASA's biased
// uniform(30, 0.5) and hybrid(30, 10) from the campaign's generators; and their FP64 dot product.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ftattn/campaign.hpp"
#include "ftattn/reference.hpp"

namespace ftattn::test {

// n rows of d values drawn from `dist`: "normal", "uniform30" or "hybrid30".
inline std::vector<float> sample_rows(const char* dist, int n, int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Strides s{1LL * n * d, 1LL * n * d, d};
  const std::string name = dist;
  const reference::Tensor16 t =
      name == "normal"
          ? reference::random_tensor(rng, Precision::f16, s, 1, 1, n, d)
          : campaign::pasa_tensor(name == "uniform30", 30.0, name == "uniform30" ? 0.5 : 10.0, rng,
                                  Precision::f16, s, 1, 1, n, d);
  std::vector<float> out(static_cast<size_t>(n) * d);
  for (int i = 0; i < n * d; ++i) out[i] = reference::from_bits(t.data[i], Precision::f16);
  return out;
}

inline double dot(const float* a, const float* b, int d) {
  double s = 0.0;
  for (int x = 0; x < d; ++x) s += double(a[x]) * b[x];
  return s;
}

}  // namespace ftattn::test
