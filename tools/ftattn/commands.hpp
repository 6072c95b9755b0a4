// The subcommands of the ftattn CLI and what they share: each add_*_command registers its
// options on the parent app and returns the function main() calls when it was chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "ftattn/runtime.hpp"

namespace ftattn::cli {

// Options given before (or, through fallthrough, after) the subcommand.
struct GlobalOptions {
  std::string cache_dir;  // --cache-dir; empty: $FTATTN_CACHE_DIR or the user's cache dir

  RuntimeOptions runtime_options() const { return RuntimeOptions{cache_dir, true}; }
};

// Exit code when a good command line found no GPU to run on (bad flags and errors exit 2).
inline constexpr int kNotLaunched = 3;

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // the process exit code; ftattn::Error propagates to main()
};

Command add_inspect_command(CLI::App& parent, const GlobalOptions& global);
Command add_compile_command(CLI::App& parent, const GlobalOptions& global);
Command add_run_command(CLI::App& parent, const GlobalOptions& global);
Command add_cache_command(CLI::App& parent, const GlobalOptions& global);
Command add_demo_command(CLI::App& parent, const GlobalOptions& global);
Command add_bench_command(CLI::App& parent, const GlobalOptions& global);
Command add_tune_command(CLI::App& parent, const GlobalOptions& global);
Command add_accuracy_command(CLI::App& parent, const GlobalOptions& global);
Command add_inject_command(CLI::App& parent, const GlobalOptions& global);

}  // namespace ftattn::cli
