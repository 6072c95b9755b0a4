// Whole-number bounds for the CLI's count flags (--batch, --iters, ...). CLI11's PositiveNumber
// and NonNegativeNumber print their range as doubles up to DBL_MAX; these say what to give.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace ftattn::cli {

// "007", "-01": CLI11 would read these as octal.
inline bool has_leading_zero(const std::string& text) {
  const size_t digits = !text.empty() && text[0] == '-' ? 1 : 0;
  return text.size() > digits + 1 && text[digits] == '0';
}

// Accepts a decimal integer from `min` to `max` (the flags are ints); anything else is a usage
// error that names the bound.
inline CLI::Validator at_least(int min, int max = std::numeric_limits<int>::max()) {
  const std::string need = "a whole number of at least " + std::to_string(min);
  return CLI::Validator(
      [min, max, need](std::string& text) -> std::string {
        long long value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || ec != std::errc{} || ptr != end) {
          return "'" + text + "' is not a whole number: give " + need;
        }
        // CLI11 converts "010" as octal (8) after this check has read it as 10.
        if (has_leading_zero(text)) return "'" + text + "' has a leading zero: give " + need;
        if (value < min) return text + " is too small: give " + need;
        if (value > max) return text + " is too large: give at most " + std::to_string(max);
        return {};
      },
      // The help's name of the bound, as CLI11's own checks print theirs.
      min == 0   ? std::string("NONNEGATIVE")
      : min == 1 ? std::string("POSITIVE")
                 : ">=" + std::to_string(min));
}

// --seed: a decimal number from 0 to 2^64 - 1. CLI11 alone wraps "-1" and saturates past the top.
inline CLI::Validator seed_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || ec != std::errc{} || ptr != end || has_leading_zero(text))
          return "'" + text + "' is not a seed: give a whole number from 0 to " +
                 std::to_string(std::numeric_limits<uint64_t>::max()) + " without leading zeros";
        return {};
      },
      "SEED");
}

// A finite decimal number (CLI11 alone takes "nan" and "inf"); with `positive`, above 0.
inline CLI::Validator finite_number(bool positive) {
  return CLI::Validator(
      [positive](std::string& text) -> std::string {
        double value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || ec != std::errc{} || ptr != end || !std::isfinite(value))
          return "'" + text + "' is not a finite number";
        if (positive && !(value > 0)) return text + " is not above 0: give a positive number";
        return {};
      },
      positive ? "POSITIVE" : "NUMBER");
}

}  // namespace ftattn::cli
