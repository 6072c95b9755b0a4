#include "tools/ftattn/shapes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>

#include "ftattn/errors.hpp"

namespace ftattn::cli {

Problem problem_of(const Shape& s) {
  return Problem::bhsd(s.batch, s.heads, s.heads, s.seqlen, s.seqlen, s.head_dim);
}

std::vector<Shape> standard_grid() {
  std::vector<Shape> grid;
  for (auto [d, h] : {std::pair{64, 16}, std::pair{128, 32}, std::pair{256, 16}})
    for (int s : {512, 1024, 2048, 4096, 8192, 16384}) grid.push_back({d, h, s, 16384 / s});
  return grid;
}

std::vector<std::string> split_list(const std::string& text, char sep, std::string_view flag) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? end : end - start));
    if (out.back().empty())
      throw ConfigError(
          fmt::format("{}: '{}' has an empty item: separate items by one '{}', "
                      "with none at either end",
                      flag, text, sep));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

int positive_int(const std::string& text) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc{} && ptr == end && value > 0 && text[0] != '0' ? value : 0;
}

std::vector<Shape> parse_shapes(const std::string& text) {
  std::vector<Shape> shapes;
  for (const std::string& item : split_list(text, ';', "--shapes")) {
    std::vector<int> v;
    size_t start = 0;
    for (size_t end = 0; end != std::string::npos; start = end + 1) {
      end = item.find(',', start);
      v.push_back(positive_int(item.substr(start, end == std::string::npos ? end : end - start)));
    }
    if (v.size() != 4 || std::find(v.begin(), v.end(), 0) != v.end())
      throw ConfigError(fmt::format(
          "bad shape '{}': write head_dim,heads,seqlen,batch with whole numbers from 1 to {}, "
          "shapes separated by ';'",
          item, std::numeric_limits<int>::max()));
    shapes.push_back({v[0], v[1], v[2], v[3]});
    // Before any work: a shape that cannot run would otherwise stop a long run half way.
    validate_head_dim(shapes.back().head_dim);
    validate_shape(problem_of(shapes.back()));
  }
  return shapes;
}

}  // namespace ftattn::cli
