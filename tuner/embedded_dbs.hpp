// The shipped tuning databases (tuner/db/*.json), embedded at build time by embed_dbs.cmake.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

namespace ftattn::tuner {

// (file name relative to tuner/db/, e.g. "h200.json"; its JSON text), sorted by file name.
// Empty when tuner/db/ holds no JSON file.
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_databases();

}  // namespace ftattn::tuner
