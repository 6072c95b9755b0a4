// PASA's beta fixed point (eq. 20-22), with the rounding of the storage type emulated exactly.
#include <fmt/format.h>

#include <cmath>

#include "ftattn/errors.hpp"
#include "ftattn/pasa.hpp"

namespace ftattn::pasa {
namespace {

struct Format {
  int mantissa_bits;  // including the implicit bit
  int min_exponent;   // of the smallest normal number
};

Format format_of(Precision p) {
  switch (p) {
    case Precision::f16:
    case Precision::f16_pasa:
      return {11, -14};
    case Precision::bf16:
      return {8, -126};
    default:
      break;
  }
  throw ConfigError(fmt::format("PASA stores S and P in f16 or bf16, not {}", to_string(p)));
}

}  // namespace

double round_to(double x, Precision storage) {
  const Format f = format_of(storage);
  if (x == 0.0 || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(std::abs(x), &e);  // |x| = m 2^e, m in [0.5, 1)
  // One unit in the last place at x's binade; below the normal range the spacing stays fixed.
  const int exponent = std::max(e - 1, f.min_exponent);
  const double ulp = std::ldexp(1.0, exponent - (f.mantissa_bits - 1));
  return std::copysign(std::nearbyint(std::abs(x) / ulp) * ulp, x);  // default mode: to even
}

double realised_recovery(double beta, int n, Precision storage) {
  const double b = round_to(beta / n, storage);
  const double a = round_to(1.0 - beta / n, storage) + b;
  return b * n / (a * (a - b * n)) + (1.0 - a) / a;
}

double optimal_beta(double start, int block_n, Precision storage) {
  if (!(start > 0.0 && start < 1.0))
    throw ConfigError(
        fmt::format("PASA beta must lie in (0, 1), got {}: beta = 1 is singular", start));
  if (block_n < 1) throw ConfigError(fmt::format("block_n {} must be at least 1", block_n));
  format_of(storage);  // reject other precisions before iterating
  double beta = start;
  for (int i = 0; i < 10000; ++i) {
    const double f = realised_recovery(beta, block_n, storage);
    const double next = f / (1.0 + f);
    if (std::abs(next - beta) < 1e-8) return next;
    beta = next;
  }
  throw ConfigError(
      fmt::format("PASA beta did not converge from {} for block_n {} ({}): start nearer 1 - 2^-k",
                  start, block_n, to_string(storage)));
}

}  // namespace ftattn::pasa
