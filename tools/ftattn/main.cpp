// ftattn: the command-line front end. Wires the subcommands and turns every failure into a
// one-line message and an exit code: 0 success, 1 a failed correctness check, 2 any error.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "ftattn/errors.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "tools/ftattn/commands.hpp"

namespace {

constexpr int kErrorExit = 2;

// Error messages are meant to be one line; make sure of it.
std::string one_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  return text;
}

void print_error(const std::string& reason) {
  std::fflush(stdout);  // keep what the command printed before the error in order
  std::fputs(fmt::format("ftattn: error: {}\n", one_line(reason)).c_str(), stderr);
}

// No option takes an empty value: `--csv ''` or `--shapes ''` would otherwise quietly mean the
// default. (Flags take no value; options with a more specific hint say it first.)
void refuse_empty_values(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size() == 0 || opt->count() == 0) continue;
    for (const std::string& value : opt->results())
      if (value.empty())
        throw CLI::ValidationError(
            opt->get_name(), "empty value: give one, or leave the option out for its default");
  }
  for (const CLI::App* sub : app.get_subcommands()) refuse_empty_values(*sub);
}

int run(int argc, char** argv) {
  CLI::App app{"ftattn: JIT fused-attention kernels: generate, compile, inspect, run", "ftattn"};
  // No require_subcommand: CLI11 would then call `ftattn typo` "a subcommand is required"
  // rather than name the unexpected word; a missing command is reported below instead.
  // Global options may also follow the subcommand: `ftattn compile ... --cache-dir dir`.
  app.fallthrough();
  app.set_version_flag("--version", [] {
    return fmt::format("ftattn {} (NVRTC {})", FTATTN_VERSION, ftattn::runtime::nvrtc_version());
  });

  ftattn::cli::GlobalOptions global;
  app.add_option("--cache-dir", global.cache_dir,
                 "kernel cache root (default: $FTATTN_CACHE_DIR, else the user's cache dir)");

  const std::vector<ftattn::cli::Command> commands = {
      ftattn::cli::add_inspect_command(app, global), ftattn::cli::add_compile_command(app, global),
      ftattn::cli::add_run_command(app, global),     ftattn::cli::add_cache_command(app, global),
      ftattn::cli::add_demo_command(app, global),    ftattn::cli::add_bench_command(app, global),
      ftattn::cli::add_tune_command(app, global),    ftattn::cli::add_accuracy_command(app, global),
      ftattn::cli::add_inject_command(app, global)};

  try {
    app.parse(argc, argv);
    refuse_empty_values(app);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive here too, with exit code 0.
    if (e.get_exit_code() == 0) return app.exit(e);
    print_error(fmt::format("{} (see ftattn --help)", e.what()));
    return kErrorExit;
  }

  for (const ftattn::cli::Command& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  throw ftattn::Error(
      "give a command: inspect, compile, run, bench, tune, accuracy, inject, cache or demo (see "
      "ftattn --help)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ftattn::CompileError& e) {
    // The reason first, then the compiler's log: the log is what says what to fix.
    const std::string what = e.what();
    print_error(what.substr(0, what.find('\n')));
    std::fputs(fmt::format("--- {} log ---\n{}\n", e.compiler(), e.log()).c_str(), stderr);
  } catch (const ftattn::Error& e) {
    print_error(e.what());
  } catch (const std::exception& e) {
    print_error(fmt::format("unexpected failure: {}", e.what()));
  } catch (...) {
    print_error("unexpected failure of an unknown kind");
  }
  return kErrorExit;
}
