#include "runtime/llvm_route.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "codegen/embedded_templates.hpp"
#include "ftattn/errors.hpp"
#include "runtime/library_file.hpp"

#ifdef FTATTN_WITH_LLVM
#include "codegen/llvm/route_api.hpp"
#endif

namespace ftattn::runtime {

#ifdef FTATTN_WITH_LLVM
const char* llvm_route_sources_hash();  // generated at build time (hash_sources.cmake)
#endif

namespace {

#ifdef FTATTN_WITH_LLVM
constexpr const char* kPluginFile = "libftattn_llvm.so";

// The folder of the running program: the plugin sits next to the binaries of a build.
std::string program_folder() {
  std::vector<char> path(4096);
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0) return {};
  std::string p(path.data(), static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

// The plugin's entry points, or the reasons no candidate had them.
struct Plugin {
  llvm_route::CompileFn compile = nullptr;
  llvm_route::CompilerFn compiler = nullptr;
  std::string failures;
};

// Opens the plugin once; the same answer afterwards.
const Plugin& plugin() {
  static const Plugin found = [] {
    Plugin p;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("FTATTN_LLVM_PLUGIN")) candidates.push_back(env);
    if (std::string folder = program_folder(); !folder.empty())
      candidates.push_back(folder + "/" + kPluginFile);
    candidates.push_back(FTATTN_LLVM_PLUGIN_BUILD_PATH);
    for (const std::string& path : candidates) {
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        p.failures += fmt::format("\n  {}: {}", path, dlerror());
        continue;
      }
      p.compile =
          reinterpret_cast<llvm_route::CompileFn>(dlsym(handle, llvm_route::kCompileSymbol));
      p.compiler =
          reinterpret_cast<llvm_route::CompilerFn>(dlsym(handle, llvm_route::kCompilerSymbol));
      if (p.compile != nullptr && p.compiler != nullptr) return p;
      // An older plugin, say: without both, its kernels could not be checked against the cache.
      p.failures += fmt::format("\n  {}: not this version's plugin (it lacks {} or {})", path,
                                llvm_route::kCompileSymbol, llvm_route::kCompilerSymbol);
      p.compile = nullptr;
      p.compiler = nullptr;
    }
    return p;
  }();
  return found;
}
#endif

}  // namespace

std::string llvm_version() {
#ifdef FTATTN_WITH_LLVM
  return FTATTN_LLVM_VERSION;
#else
  return {};
#endif
}

std::string llvm_route_hash() {
#ifdef FTATTN_WITH_LLVM
  return llvm_route_sources_hash();
#else
  return {};
#endif
}

std::string llvm_route_toolkit_version() { return FTATTN_CUDA_TOOLKIT_VERSION; }

const LlvmCompiler& llvm_compiler() {
  static const LlvmCompiler compiler = [] {
    LlvmCompiler c;
#ifdef FTATTN_WITH_LLVM
    const Plugin& route = plugin();
    if (route.compiler == nullptr) return c;
    llvm_route::Compiler found;
    route.compiler(found);
    c.version = "clang " + found.version;
    c.identity = found.full_version;
    for (const void* address : found.libraries) {
      c.identity += "; " + to_string(library_file(address));
    }
#endif
    return c;
  }();
  return compiler;
}

LlvmRouteOutput compile_with_llvm(const codegen::KernelSource& source, bool keep_ir) {
#ifndef FTATTN_WITH_LLVM
  (void)keep_ir;
  throw ConfigError(fmt::format(
      "{}: this ftattn was built without the LLVM route: install LLVM 22 (scripts/setup.sh) and "
      "rebuild, or use backend nvrtc",
      source.name));
#else
  const Plugin& route = plugin();
  if (route.compile == nullptr) {
    throw ConfigError(fmt::format(
        "{} is not in the cache, and the LLVM route's compiler cannot be opened on this machine:{}"
        "\nCompile LLVM-route kernels where LLVM 22 is installed, into a cache folder "
        "(ftattn compile --backend llvm --arch <sm> --cache-dir <folder> ...), and point "
        "FTATTN_CACHE_DIR (or --cache-dir) here at a copy of it; or use backend nvrtc",
        source.name, route.failures));
  }
  llvm_route::Request request;
  request.name = source.name;
  request.symbol = source.symbol;
  request.text = source.text;
  for (const auto& file : codegen::embedded_templates())
    request.headers.emplace_back(std::string(file.path), std::string(file.text));
  for (const std::string& o : source.options) {
    request.clang_args.push_back(o);
    if (o.starts_with("--cuda-gpu-arch=")) request.arch = o.substr(16);
  }
  request.passes = source.passes;
  request.keep_ir = keep_ir;

  llvm_route::Result result;
  std::string error;
  if (!route.compile(request, result, error))
    throw CompileError(error, result.log, "clang (LLVM route)");
  if (result.llvm_version != llvm_version()) {
    throw ConfigError(fmt::format(
        "the LLVM route's plugin was built with LLVM {} but this library with LLVM {}: rebuild "
        "both from one build folder",
        result.llvm_version, llvm_version()));
  }
  LlvmRouteOutput out;
  out.binary.ptx = std::move(result.ptx);
  out.binary.cubin = std::move(result.cubin);
  out.binary.log = std::move(result.log);
  out.binary.seconds = result.seconds_frontend + result.seconds_passes + result.seconds_backend +
                       result.seconds_link;
  out.ir_before = std::move(result.ir_before);
  out.ir_after = std::move(result.ir_after);
  out.statistics = std::move(result.statistics);
  return out;
#endif
}

}  // namespace ftattn::runtime
