#include "tools/ftattn/sass.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "ftattn/errors.hpp"
#include "ftattn/sass_digest.hpp"

extern char** environ;

namespace ftattn::cli {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> search_dirs() {
  std::vector<fs::path> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::string_view rest = path;
    while (true) {
      const std::size_t end = rest.find(':');
      const std::string_view dir = rest.substr(0, end);
      dirs.emplace_back(dir.empty() ? "." : dir);  // an empty PATH entry means "."
      if (end == std::string_view::npos) break;
      rest.remove_prefix(end + 1);
    }
  }
  // The toolkit's bin directory is often not on PATH.
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home != '\0') {
    dirs.push_back(fs::path(home) / "bin");
  }
  dirs.emplace_back("/usr/local/cuda/bin");
  return dirs;
}

std::optional<fs::path> find_program(const std::vector<fs::path>& dirs, std::string_view name) {
  for (const fs::path& dir : dirs) {
    const fs::path candidate = dir / name;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

// A cubin in the temp directory, removed when this goes out of scope.
class TempCubin {
 public:
  explicit TempCubin(const std::string& bytes) {
    std::string pattern = (fs::temp_directory_path() / "ftattn-sass-XXXXXX.cubin").string();
    const int fd = ::mkstemps(pattern.data(), 6);
    if (fd < 0) {
      throw Error(fmt::format("cannot create a temp file for the cubin ({}): {}", pattern,
                              std::strerror(errno)));
    }
    path_ = pattern;
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = errno;
        ::close(fd);
        throw Error(
            fmt::format("cannot write the cubin to {}: {}", path_.string(), std::strerror(err)));
      }
      done += static_cast<std::size_t>(n);
    }
    ::close(fd);
  }
  ~TempCubin() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  TempCubin(const TempCubin&) = delete;
  TempCubin& operator=(const TempCubin&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs `program args...` with our stderr and our stdout, or its stdout into the file `out` when
// given; returns its exit status, or -1 when it could not be started or was killed.
int run_program(const fs::path& program, const std::vector<std::string>& args,
                const fs::path* out = nullptr) {
  std::vector<std::string> owned;
  owned.push_back(program.string());
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);

  // What we printed so far must come before the child's output.
  std::fflush(stdout);
  std::fflush(stderr);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  if (out != nullptr)
    ::posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out->c_str(),
                                       O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int spawned =
      ::posix_spawn(&pid, owned[0].c_str(), &actions, nullptr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

std::optional<Disassembler> find_disassembler() {
  const std::vector<fs::path> dirs = search_dirs();
  if (auto cuobjdump = find_program(dirs, "cuobjdump")) return Disassembler{*cuobjdump, {"-sass"}};
  if (auto nvdisasm = find_program(dirs, "nvdisasm")) return Disassembler{*nvdisasm, {}};
  return std::nullopt;
}

namespace {

std::optional<Disassembler> find_or_note() {
  std::optional<Disassembler> tool = find_disassembler();
  if (!tool) {
    std::fflush(stdout);
    std::fputs(
        "ftattn: note: no cuobjdump or nvdisasm found: install the CUDA toolkit's binary "
        "utilities to see SASS\n",
        stderr);
  }
  return tool;
}

void warn_failed(const Disassembler& tool, int status, std::string_view what) {
  std::fflush(stdout);
  std::fputs(fmt::format("ftattn: warning: {} {} on the cubin: {}\n", tool.program.string(),
                         status < 0 ? "could not run" : fmt::format("exited with {}", status), what)
                 .c_str(),
             stderr);
}

}  // namespace

bool print_sass_digest(const std::string& cubin) {
  const std::optional<Disassembler> tool = find_or_note();
  if (!tool) return false;
  TempCubin file(cubin);
  const fs::path text = file.path().string() + ".sass";
  std::vector<std::string> args = tool->args;
  args.push_back(file.path().string());
  const int status = run_program(tool->program, args, &text);
  std::string sass;
  if (std::FILE* f = std::fopen(text.c_str(), "rb")) {
    char buffer[65536];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) sass.append(buffer, n);
    std::fclose(f);
  }
  std::error_code ec;
  fs::remove(text, ec);
  if (status != 0) {
    warn_failed(*tool, status, "no SASS digest");
    return true;
  }
  for (const SassFunction& f : digest_sass(sass))
    fmt::print("sass-digest {}  {} instructions  {}\n", f.name, f.instructions, f.hash);
  return true;
}

bool print_sass(const std::string& cubin) {
  const std::optional<Disassembler> tool = find_or_note();
  if (!tool) return false;
  TempCubin file(cubin);
  std::vector<std::string> args = tool->args;
  args.push_back(file.path().string());
  fmt::print("sass ({})\n", tool->program.filename().string());
  const int status = run_program(tool->program, args);
  if (status != 0) warn_failed(*tool, status, "SASS not shown");
  return true;
}

}  // namespace ftattn::cli
