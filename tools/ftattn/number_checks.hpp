// Whole-number bounds for the CLI's count flags (--batch, --iters, ...). CLI11's PositiveNumber
// and NonNegativeNumber print their range as doubles up to DBL_MAX; these say what to give.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <limits>
#include <string>

namespace ftattn::cli {

// Accepts a decimal integer from `min` to INT_MAX (the flags are ints); anything else is a usage
// error that names the bound.
inline CLI::Validator at_least(int min) {
  const std::string need = "a whole number of at least " + std::to_string(min);
  return CLI::Validator(
      [min, need](std::string& text) -> std::string {
        long long value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || ec != std::errc{} || ptr != end) {
          return "'" + text + "' is not a whole number: give " + need;
        }
        if (value < min) return text + " is too small: give " + need;
        if (value > std::numeric_limits<int>::max()) {
          return text + " is too large: give at most " +
                 std::to_string(std::numeric_limits<int>::max());
        }
        return {};
      },
      // The help's name of the bound, as CLI11's own checks print theirs.
      min == 0   ? std::string("NONNEGATIVE")
      : min == 1 ? std::string("POSITIVE")
                 : ">=" + std::to_string(min));
}

}  // namespace ftattn::cli
