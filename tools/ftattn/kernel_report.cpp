#include "tools/ftattn/kernel_report.hpp"

#include <fmt/format.h>

namespace ftattn::cli {

void print_kernel_header(const CompiledKernel& k) {
  fmt::print("kernel      {}\n", k.name);
  fmt::print("cache key   {}\n", k.cache_key);
  if (k.from_disk_cache) {
    fmt::print("build       from cache (compiled in {:.2f} s when built)\n", k.compile_seconds);
  } else {
    fmt::print("build       compiled in {:.2f} s\n", k.compile_seconds);
  }
  fmt::print("cubin       {} bytes\n", k.cubin.size());
  fmt::print("ptx         {} bytes\n", k.ptx.size());
}

void print_resources(const ResourceUsage& r) {
  fmt::print("resources\n");
  fmt::print("  registers           {} per thread\n", r.registers);
  fmt::print("  spill stores        {} bytes\n", r.spill_stores);
  fmt::print("  spill loads         {} bytes\n", r.spill_loads);
  fmt::print("  stack frame         {} bytes\n", r.stack_frame);
  fmt::print("  static shared       {} bytes\n", r.static_shared_bytes);
  fmt::print("  dynamic shared      {} bytes\n", r.dynamic_shared_bytes);
  fmt::print("  threads per block   {}\n", r.threads_per_block);
  for (const std::string& note : r.performance_notes)
    fmt::print("  ptxas note          {}\n", note);
}

std::size_t count_occurrences(std::string_view text, std::string_view needle) {
  if (needle.empty()) return 0;
  std::size_t count = 0;
  for (std::size_t pos = text.find(needle); pos != std::string_view::npos;
       pos = text.find(needle, pos + needle.size())) {
    ++count;
  }
  return count;
}

std::string first_lines(std::string_view text, int lines) {
  std::string out;
  for (int i = 0; i < lines && !text.empty(); ++i) {
    const std::size_t end = text.find('\n');
    out.append(text.substr(0, end));
    out += '\n';
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

std::string human_bytes(double bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, kUnits[unit]);
}

}  // namespace ftattn::cli
