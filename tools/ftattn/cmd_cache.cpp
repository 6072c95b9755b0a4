// ftattn cache ls | clear | path: look at and empty the disk cache.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "ftattn/errors.hpp"
#include "runtime/disk_cache.hpp"
#include "tools/ftattn/commands.hpp"
#include "tools/ftattn/kernel_report.hpp"

namespace ftattn::cli {
namespace {

std::filesystem::path cache_root(const GlobalOptions& global) {
  return global.cache_dir.empty() ? runtime::DiskCache::default_root()
                                  : std::filesystem::path(global.cache_dir);
}

std::string human_age(std::filesystem::file_time_type written) {
  using namespace std::chrono;
  const auto seconds =
      duration_cast<std::chrono::seconds>(std::filesystem::file_time_type::clock::now() - written)
          .count();
  if (seconds < 0) return "future";  // clock skew between writers; still show the entry
  if (seconds < 120) return fmt::format("{}s", seconds);
  if (seconds < 2 * 3600) return fmt::format("{}m", seconds / 60);
  if (seconds < 2 * 86400) return fmt::format("{}h", seconds / 3600);
  return fmt::format("{}d", seconds / 86400);
}

// "; 2 leftovers (unfinished, damaged or unreadable: cache clear removes them)", or nothing.
std::string leftover_note(std::size_t leftovers) {
  if (leftovers == 0) return "";
  return fmt::format("; {} leftover{} (unfinished, damaged or unreadable: cache clear removes {})",
                     leftovers, leftovers == 1 ? "" : "s", leftovers == 1 ? "it" : "them");
}

int run_ls(const GlobalOptions& global) {
  const runtime::DiskCache cache(cache_root(global));
  std::size_t leftovers = 0;
  const std::vector<runtime::CacheEntryInfo> entries = cache.list(&leftovers);
  if (entries.empty()) {
    fmt::print("no cache entries in {}{}\n", cache.root().string(), leftover_note(leftovers));
    return 0;
  }
  std::size_t name_width = 4;
  for (const auto& e : entries) name_width = std::max(name_width, e.name.size());
  fmt::print("{:<{}}  {:<32}  {:>10}  {:>6}  {:>8}  {}\n", "NAME", name_width, "KEY", "SIZE", "AGE",
             "COMPILE", "COMPILER");
  double total = 0;
  for (const auto& e : entries) {
    const auto seconds = e.meta.is_object() ? e.meta.find("compile_seconds") : e.meta.end();
    const std::string compile = seconds != e.meta.end() && seconds->is_number()
                                    ? fmt::format("{:.2f} s", seconds->get<double>())
                                    : "-";
    // Entries written before ftattn recorded it have none.
    const auto by = e.meta.is_object() ? e.meta.find("compiler") : e.meta.end();
    const std::string compiler =
        by != e.meta.end() && by->is_string() && !by->get<std::string>().empty()
            ? by->get<std::string>()
            : "-";
    fmt::print("{:<{}}  {:<32}  {:>10}  {:>6}  {:>8}  {}\n", e.name, name_width, e.key,
               human_bytes(static_cast<double>(e.bytes)), human_age(e.written), compile, compiler);
    total += static_cast<double>(e.bytes);
  }
  fmt::print("{} entr{}, {} in {}{}\n", entries.size(), entries.size() == 1 ? "y" : "ies",
             human_bytes(total), cache.root().string(), leftover_note(leftovers));
  return 0;
}

int run_clear(const GlobalOptions& global) {
  runtime::DiskCache cache(cache_root(global));
  // Counted as ls counts, so the numbers match what ls showed.
  const runtime::DiskCache::Cleared removed = cache.clear();
  const std::string leftovers =
      removed.leftovers == 0
          ? ""
          : fmt::format(" and {} leftover{}", removed.leftovers, removed.leftovers == 1 ? "" : "s");
  fmt::print("removed {} entr{}{} from {}\n", removed.entries, removed.entries == 1 ? "y" : "ies",
             leftovers, cache.root().string());
  if (removed.left.empty()) return 0;
  // Each thing left is named with why, so that the user can see to it; the exit code says that
  // the cache is not empty.
  std::string message = fmt::format("could not remove {} item{} from the cache",
                                    removed.left.size(), removed.left.size() == 1 ? "" : "s");
  for (const runtime::DiskCache::Left& item : removed.left) {
    message += fmt::format("; '{}': {}", item.path.string(), item.reason);
  }
  throw CacheError(message);
}

}  // namespace

Command add_cache_command(CLI::App& parent, const GlobalOptions& global) {
  CLI::App* cmd = parent.add_subcommand("cache", "List, clear or locate the kernel disk cache");
  CLI::App* ls = cmd->add_subcommand("ls", "List cached kernels")->alias("list");
  CLI::App* clear = cmd->add_subcommand("clear", "Remove every cached kernel");
  CLI::App* path = cmd->add_subcommand("path", "Print the cache's root directory");
  // One command per run: CLI11 would otherwise take `cache clear ls` as two and the run below
  // would do one of them. None at all is left to the run, whose message names the commands.
  cmd->require_subcommand(0, 1);
  return {cmd, [=, &global] {
            if (ls->parsed()) return run_ls(global);
            if (clear->parsed()) return run_clear(global);
            if (path->parsed()) {
              fmt::print("{}\n", cache_root(global).string());
              return 0;
            }
            throw Error("cache needs a command: ls, clear or path");
          }};
}

}  // namespace ftattn::cli
