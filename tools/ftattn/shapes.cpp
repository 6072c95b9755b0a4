#include "tools/ftattn/shapes.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <sstream>

#include "ftattn/errors.hpp"

namespace ftattn::cli {

std::vector<Shape> standard_grid() {
  std::vector<Shape> grid;
  for (auto [d, h] : {std::pair{64, 16}, std::pair{128, 32}, std::pair{256, 16}})
    for (int s : {512, 1024, 2048, 4096, 8192, 16384}) grid.push_back({d, h, s, 16384 / s});
  return grid;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<Shape> parse_shapes(const std::string& text) {
  std::vector<Shape> shapes;
  for (const std::string& item : split(text, ';')) {
    Shape s{};
    char extra = 0;
    if (std::sscanf(item.c_str(), "%d,%d,%d,%d%c", &s.head_dim, &s.heads, &s.seqlen, &s.batch,
                    &extra) != 4 ||
        s.head_dim <= 0 || s.heads <= 0 || s.seqlen <= 0 || s.batch <= 0)
      throw ConfigError(fmt::format(
          "bad shape '{}': write head_dim,heads,seqlen,batch with positive numbers, shapes "
          "separated by ';'",
          item));
    shapes.push_back(s);
  }
  return shapes;
}

}  // namespace ftattn::cli
