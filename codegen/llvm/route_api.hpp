// The contract between the library and the LLVM route's compiler, a plugin (libftattn_llvm.so)
// that the library opens only when it has to compile an LLVM-route kernel. Binaries therefore
// start, and load LLVM-route kernels from the cache, on machines without LLVM.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace ftattn::llvm_route {

// One generated unit and what to do with it.
struct Request {
  std::string name;    // canonical kernel name (diagnostics, file names)
  std::string symbol;  // the extern "C" entry point
  std::string text;    // the generated unit
  // Every header the unit may include (path relative to the include root, text).
  std::vector<std::pair<std::string, std::string>> headers;
  std::vector<std::string> clang_args;  // front-end flags (arch included)
  std::string arch;                     // "sm_90a"
  // The pass pipeline, in order, as codegen::llvm_passes spells it (e.g. "default<O3>",
  // "ftattn-contract", "ftattn-harden<fp-arith>", "ftattn-inject<fp-arith>", "ftattn-stats").
  std::vector<std::string> passes;
  bool keep_ir = false;    // fill Result::ir_before / ir_after
  bool link_cubin = true;  // PTX -> cubin with nvJitLink; false leaves the cubin empty
};

// IR size after one stage of the pipeline.
struct StageSize {
  std::string stage;  // "clang", then each pass of Request::passes
  size_t functions = 0;
  size_t blocks = 0;
  size_t instructions = 0;
};

struct Statistics {
  std::vector<StageSize> stages;
  // Instruction counts by class in the final IR: fp_arith, load, int_arith, exp_max, mma,
  // store, call, branch, other.
  std::vector<std::pair<std::string, size_t>> by_class;
  size_t injected_sites = 0;  // values the injection pass instrumented
  size_t hardened_sites = 0;  // operations the hardening pass duplicated
  size_t contracted = 0;      // fadd/fsub + fmul pairs the contraction pass made FMAs
};

struct Result {
  std::string ptx;
  std::string cubin;      // empty when Request::link_cubin is false
  std::string log;        // statistics, then the linker's ptxas report ("ptxas info ..." lines)
  std::string ir_before;  // clang's IR, before any pass (Request::keep_ir)
  std::string ir_after;   // the IR handed to the NVPTX back end (Request::keep_ir)
  Statistics stats;
  std::string statistics;    // stats as format_statistics renders them
  std::string llvm_version;  // "22.1.8"
  double seconds_frontend = 0, seconds_passes = 0, seconds_backend = 0, seconds_link = 0;
};

// Compiles `request`. Returns false with `error` set (and the front end's diagnostics in
// `result.log`) when the source, the passes or the back end fail.
bool compile(const Request& request, Result& result, std::string& error);

// Renders the statistics as the table `ftattn inspect --ir` prints.
std::string format_statistics(const Statistics& stats);

// What the plugin compiles with, read from the libraries loaded with it rather than from the
// headers it was built against: an LLVM updated in place (same soname, new code) changes this
// without a rebuild, and the cache must then not serve what the old one built.
struct Compiler {
  std::string version;       // "22.1.8", of the libLLVM loaded
  std::string full_version;  // clang's: "Debian clang version 22.1.8 (1~deb12u1)"
  // An address in each library whose code shapes the output (libLLVM, libclang-cpp,
  // nvJitLink), so that the caller can name their files.
  std::vector<const void*> libraries;
};

// The plugin's entry points, looked up by name after dlopen.
using CompileFn = bool (*)(const Request&, Result&, std::string&);
inline constexpr const char* kCompileSymbol = "ftattn_llvm_route_compile";
using CompilerFn = void (*)(Compiler&);
inline constexpr const char* kCompilerSymbol = "ftattn_llvm_route_compiler";

}  // namespace ftattn::llvm_route
