// Problem shapes for bench and tune: the standard grid, and the `d,h,s,b;...` syntax.
#pragma once

#include <string>
#include <vector>

namespace ftattn::cli {

struct Shape {
  int head_dim, heads, seqlen, batch;
};

// 16k tokens in total: head dim 64 x 16 heads, 128 x 32, 256 x 16; seqlen 512 ... 16k.
std::vector<Shape> standard_grid();

// "head_dim,heads,seqlen,batch;..."; ConfigError on anything else.
std::vector<Shape> parse_shapes(const std::string& text);

// Non-empty pieces of `text` between `sep`s.
std::vector<std::string> split(const std::string& text, char sep);

}  // namespace ftattn::cli
