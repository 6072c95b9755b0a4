// The LLVM route from the library's side: opens the route's compiler (libftattn_llvm.so) when a
// kernel must be compiled or a cached one checked, and names what LLVM-route cache keys depend
// on. Loading LLVM-route kernels from the cache needs neither the plugin nor LLVM.
#pragma once

#include <string>

#include "ftattn/codegen.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace ftattn::runtime {

struct LlvmRouteOutput {
  NvrtcOutput binary;     // ptx, cubin, log (statistics + ptxas report), seconds (whole route)
  std::string ir_before;  // clang's IR (keep_ir)
  std::string ir_after;   // the IR given to the NVPTX back end (keep_ir)
  std::string statistics;
};

// Compiles an LLVM-route source (codegen::use_llvm_route). Throws ConfigError when this build
// has no LLVM route or its plugin cannot be opened here (say where to compile instead), and
// CompileError with clang's diagnostics or the pass/back-end error.
LlvmRouteOutput compile_with_llvm(const codegen::KernelSource& source, bool keep_ir = false);

// "22.1.8": the LLVM this library was built against (empty without the LLVM route).
std::string llvm_version();
// Hash of the route's pass sources, so that a changed pass gives new cache keys.
std::string llvm_route_hash();
// The CUDA toolkit whose nvJitLink assembles LLVM-route PTX.
std::string llvm_route_toolkit_version();

// The compiler that builds LLVM-route kernels on this machine. Cache keys cannot hold it: a
// machine without LLVM must find the entries a machine with LLVM wrote. So every entry records
// it, and where it is known a hit that records another (or none) is compiled again.
struct LlvmCompiler {
  std::string version;   // "clang 22.1.8", for people (ftattn cache ls)
  std::string identity;  // clang's full version and its libraries' files; empty: no plugin here
};
// Asked of the plugin once per process (opening it, if no compile has yet); empty where the
// plugin cannot be opened, or in a build without the LLVM route.
const LlvmCompiler& llvm_compiler();

}  // namespace ftattn::runtime
