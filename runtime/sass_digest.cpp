#include "ftattn/sass_digest.hpp"

#include <cctype>

#include "runtime/hash.hpp"

namespace ftattn {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The function a line opens: cuobjdump's "Function : name", nvdisasm's ".text.name:" label.
std::string_view function_name(std::string_view line) {
  const std::string_view t = trim(line);
  constexpr std::string_view kFunction = "Function : ";
  if (const std::size_t at = t.find(kFunction); at != std::string_view::npos)
    return trim(t.substr(at + kFunction.size()));
  if (t.size() > 7 && t.starts_with(".text.") && t.back() == ':') return t.substr(6, t.size() - 7);
  return {};
}

// "/*01a0*/  FFMA R1, R2, R3, R4 ;  /* 0x... */" -> "FFMA R1, R2, R3, R4 ;". Addresses take as
// many hex digits as they need (past 0xffff: five). Directives (.byte, ...) are not instructions.
std::string normalise_instruction(std::string_view line) {
  std::string_view t = trim(line);
  if (!t.starts_with("/*")) return {};
  const std::size_t close = t.find("*/");
  if (close == std::string_view::npos || close == 2) return {};
  for (char c : t.substr(2, close - 2))
    if (!std::isxdigit(static_cast<unsigned char>(c))) return {};
  t = trim(t.substr(close + 2));
  const std::size_t semicolon = t.find(';');
  if (t.empty() || t.front() == '.' || semicolon == std::string_view::npos) return {};
  std::string out;
  bool space = false;
  for (char c : t.substr(0, semicolon + 1)) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

}  // namespace

std::vector<SassFunction> digest_sass(std::string_view text) {
  std::vector<SassFunction> functions;
  std::vector<std::string> bodies;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (const std::string_view name = function_name(line); !name.empty()) {
      functions.push_back({std::string(name), 0, {}});
      bodies.emplace_back();
      continue;
    }
    if (functions.empty()) continue;
    const std::string instruction = normalise_instruction(line);
    if (instruction.empty()) continue;
    ++functions.back().instructions;
    bodies.back() += instruction;
    bodies.back() += '\n';
  }
  for (std::size_t i = 0; i < functions.size(); ++i)
    functions[i].hash = runtime::hash_hex(bodies[i]);
  return functions;
}

}  // namespace ftattn
