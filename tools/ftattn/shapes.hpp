// Problem shapes for bench and tune: the standard grid, and the `d,h,s,b;...` syntax.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ftattn/config.hpp"

namespace ftattn::cli {

struct Shape {
  int head_dim, heads, seqlen, batch;
};

// The problem bench and tune time for a shape: BHSD, as many KV heads as query heads.
Problem problem_of(const Shape& shape);

// 16k tokens in total: head dim 64 x 16 heads, 128 x 32, 256 x 16; seqlen 512 ... 16k.
std::vector<Shape> standard_grid();

// "head_dim,heads,seqlen,batch;..."; ConfigError on anything else, and on a head dim or problem
// the kernels cannot take.
std::vector<Shape> parse_shapes(const std::string& text);

// The items of a `sep`-separated list given to `flag`: none for an empty text; ConfigError for
// an empty item (",", "a,,b", "a,").
std::vector<std::string> split_list(const std::string& text, char sep, std::string_view flag);

// A decimal int from 1 up, as written (no sign, no leading zero); 0 for anything else.
int positive_int(const std::string& text);

}  // namespace ftattn::cli
