// Helpers for tests that run the built CLI through the shell and read what it wrote.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ftattn::test {

// `s` as one single-quoted shell word.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Each of `args` quoted, joined by spaces: an argument vector as one shell command tail.
inline std::string shell_words(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) out += (out.empty() ? "" : " ") + shell_quote(a);
  return out;
}

// The whole file, or "" when it cannot be read.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Where the CLI's output goes; the files lie in the run's folder.
enum class Streams {
  separate,     // stdout and stderr each to its own file
  merged,       // 2>&1: both in `out`, in the order written
  stderr_only,  // stdout to /dev/null
};

// Everything about a run but the binary, its arguments and the folder.
struct CliOptions {
  std::vector<std::string> env;  // "NAME=value", set for the CLI alone
  std::string before;            // shell text run after the redirections, e.g. "ulimit -n 4; "
  Streams streams = Streams::separate;
  std::string tag;  // in the output files' names: keeps concurrent runs' files apart
};

struct CliRun {
  std::string command;  // what `sh -c` ran, for diagnostics
  int exit_code = -1;   // -1 when the CLI did not exit normally (a signal, or no shell)
  std::string out, err;
};

// Runs `binary` with `args` (shell words, quoted where needed: see shell_words) through
// `sh -c`, its output in files under `folder`. The redirections come first, so that `before`
// may take away what the shell would need for them (`ulimit -n`); the CLI is exec'd, so its
// exit status (or signal) is the shell's. The binary is a parameter: FTATTN_CLI_PATH is defined
// only for some test targets.
inline CliRun run_cli(const std::string& binary, const std::filesystem::path& folder,
                      const std::string& args, const CliOptions& options = {}) {
  const std::filesystem::path out = folder / ("stdout" + options.tag + ".txt");
  const std::filesystem::path err = folder / ("stderr" + options.tag + ".txt");
  std::string script = "exec >";
  script += options.streams == Streams::stderr_only ? "/dev/null" : shell_quote(out.string());
  script += options.streams == Streams::merged ? " 2>&1" : " 2>" + shell_quote(err.string());
  script += "; " + options.before + "exec ";
  if (!options.env.empty()) script += "env " + shell_words(options.env) + " ";
  script += shell_quote(binary);
  if (!args.empty()) script += " " + args;
  CliRun r;
  r.command = script;
  const int status = std::system(("sh -c " + shell_quote(script)).c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (options.streams != Streams::stderr_only) r.out = read_file(out);
  if (options.streams != Streams::merged) r.err = read_file(err);
  return r;
}

// The run for a failure message; stdout cut to its first `max_out` characters (IR is long).
inline std::string describe(const CliRun& r, std::size_t max_out = std::string::npos) {
  const bool cut = r.out.size() > max_out;
  return "command: " + r.command + "\nexit code: " + std::to_string(r.exit_code) + "\nstdout" +
         (cut ? " (start)" : "") + ":\n" + r.out.substr(0, max_out) + "\nstderr:\n" + r.err;
}

}  // namespace ftattn::test
