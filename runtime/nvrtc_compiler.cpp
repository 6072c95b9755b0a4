#include "runtime/nvrtc_compiler.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <chrono>
#include <regex>
#include <sstream>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "codegen/embedded_templates.hpp"
#include "ftattn/errors.hpp"

namespace ftattn::runtime {
namespace {

// NVRTC resolves a relative file or #include name against the working directory and writes
// that path into the line info, so the same key would give different bytes in every directory
// and leak the user's paths into shared caches. It sees our files under this made-up root.
constexpr std::string_view kVirtualRoot = "/ftattn/";
constexpr std::string_view kTemplatesDir = "templates/";

// `text` with each #include "<p>" of an embedded template `p` made absolute under kVirtualRoot
// (NVRTC matches include names literally). Lines keep their count, so line numbers hold.
std::string absolute_includes(std::string_view text,
                              const std::unordered_set<std::string_view>& templates) {
  std::string out;
  out.reserve(text.size() + 1024);
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    const std::string_view line =
        text.substr(0, eol == std::string_view::npos ? text.size() : eol + 1);
    text.remove_prefix(line.size());
    // "#", "include" and a quoted name, spaces allowed around the "#".
    std::size_t i = line.find_first_not_of(" \t");
    if (i != std::string_view::npos && line[i] == '#') {
      i = line.find_first_not_of(" \t", i + 1);
      if (i != std::string_view::npos && line.substr(i).starts_with("include")) {
        const std::size_t open = line.find_first_not_of(" \t", i + 7);
        const std::size_t close = open == std::string_view::npos ? open : line.find('"', open + 1);
        if (open != std::string_view::npos && line[open] == '"' &&
            close != std::string_view::npos &&
            templates.contains(line.substr(open + 1, close - open - 1))) {
          out.append(line.substr(0, open + 1));
          out.append(kVirtualRoot);
          out.append(kTemplatesDir);
          out.append(line.substr(open + 1));
          continue;
        }
      }
    }
    out.append(line);
  }
  return out;
}

// Owns one nvrtcProgram; destroys it on every path out.
class Program {
 public:
  explicit Program(const codegen::KernelSource& source) {
    const auto& files = codegen::embedded_templates();
    std::unordered_set<std::string_view> paths;
    for (const auto& f : files) paths.insert(f.path);
    std::vector<std::string> texts, names;
    texts.reserve(files.size());
    names.reserve(files.size());
    for (const auto& f : files) {
      texts.push_back(absolute_includes(f.text, paths));
      names.push_back(fmt::format("{}{}{}", kVirtualRoot, kTemplatesDir, f.path));
    }
    std::vector<const char*> text_ptrs, name_ptrs;
    for (size_t i = 0; i < files.size(); ++i) {
      text_ptrs.push_back(texts[i].c_str());
      name_ptrs.push_back(names[i].c_str());
    }
    const std::string text = absolute_includes(source.text, paths);
    const std::string file_name = fmt::format("{}{}.cu", kVirtualRoot, source.name);
    check(nvrtcCreateProgram(&program_, text.c_str(), file_name.c_str(),
                             static_cast<int>(files.size()), text_ptrs.data(), name_ptrs.data()),
          "nvrtcCreateProgram");
  }
  ~Program() { nvrtcDestroyProgram(&program_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  nvrtcProgram get() const { return program_; }

  static void check(nvrtcResult r, const char* what) {
    if (r != NVRTC_SUCCESS)
      throw CompileError(fmt::format("{} failed: {}", what, nvrtcGetErrorString(r)), "");
  }

 private:
  nvrtcProgram program_ = nullptr;
};

std::string program_log(nvrtcProgram p) {
  size_t size = 0;
  nvrtcGetProgramLogSize(p, &size);
  std::string log(size, '\0');
  if (size > 0) nvrtcGetProgramLog(p, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

NvrtcOutput compile_with_nvrtc(const codegen::KernelSource& source) {
  Program program(source);
  std::vector<const char*> options;
  for (const auto& o : source.options) options.push_back(o.c_str());

  const auto start = std::chrono::steady_clock::now();
  const nvrtcResult result =
      nvrtcCompileProgram(program.get(), static_cast<int>(options.size()), options.data());
  NvrtcOutput out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.log = program_log(program.get());
  if (result != NVRTC_SUCCESS)
    throw CompileError(
        fmt::format("NVRTC could not compile {}: {}", source.name, nvrtcGetErrorString(result)),
        out.log);

  size_t size = 0;
  Program::check(nvrtcGetPTXSize(program.get(), &size), "nvrtcGetPTXSize");
  out.ptx.resize(size);
  Program::check(nvrtcGetPTX(program.get(), out.ptx.data()), "nvrtcGetPTX");
  while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  Program::check(nvrtcGetCUBINSize(program.get(), &size), "nvrtcGetCUBINSize");
  out.cubin.resize(size);
  Program::check(nvrtcGetCUBIN(program.get(), out.cubin.data()), "nvrtcGetCUBIN");
  return out;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

const LibraryFile& nvrtc_library() {
  // Whichever file defines the function we call is the NVRTC in use.
  static const LibraryFile library = library_file(reinterpret_cast<const void*>(&nvrtcVersion));
  return library;
}

std::string nvrtc_identity() {
  return fmt::format("{} {}", nvrtc_version(), to_string(nvrtc_library()));
}

ResourceUsage parse_ptxas_log(const std::string& log, const std::string& symbol) {
  ResourceUsage usage;
  // Notes such as "ptxas info : (C7512) Potential Performance Loss: ... in the function 'k'",
  // kept from the code to before " in/for the function".
  const std::string quoted = "'" + symbol + "'";
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    const auto code = line.find("(C");
    if (code == std::string::npos || !line.ends_with(quoted) ||
        line.find("Potential Performance Loss") == std::string::npos)
      continue;
    std::string note = line.substr(code, line.size() - quoted.size() - code);
    for (std::string_view tail : {" in the function ", " for the function "})
      if (note.ends_with(tail)) note.resize(note.size() - tail.size());
    usage.performance_notes.push_back(note);
  }
  // ptxas prints a block per function; read only the block of our entry point.
  const auto start = log.find("Function properties for " + symbol);
  if (start == std::string::npos) return usage;
  const auto next = log.find("Function properties for ", start + 1);
  const std::string block =
      log.substr(start, next == std::string::npos ? std::string::npos : next - start);
  std::smatch m;
  if (std::regex_search(block, m, std::regex(R"((\d+) bytes stack frame)")))
    usage.stack_frame = std::stoi(m[1]);
  if (std::regex_search(block, m, std::regex(R"((\d+) bytes spill stores)")))
    usage.spill_stores = std::stoi(m[1]);
  if (std::regex_search(block, m, std::regex(R"((\d+) bytes spill loads)")))
    usage.spill_loads = std::stoi(m[1]);
  if (std::regex_search(block, m, std::regex(R"(Used (\d+) registers)")))
    usage.registers = std::stoi(m[1]);
  if (std::regex_search(block, m, std::regex(R"((\d+) bytes smem)")))
    usage.static_shared_bytes = std::stoi(m[1]);
  return usage;
}

}  // namespace ftattn::runtime
