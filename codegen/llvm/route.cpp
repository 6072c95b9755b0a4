// The LLVM route end to end: front end, pass stages, NVPTX, nvJitLink; and the plugin's entries.
#include <clang/Basic/Version.h>
#include <llvm-c/Core.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/Support/raw_ostream.h>
#include <nvJitLink.h>

#include <chrono>

#include "codegen/llvm/backend.hpp"
#include "codegen/llvm/frontend.hpp"
#include "codegen/llvm/kernel_params.hpp"
#include "codegen/llvm/pipeline.hpp"
#include "codegen/llvm/route_api.hpp"

namespace ftattn::llvm_route {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string print(const llvm::Module& module) {
  std::string text;
  llvm::raw_string_ostream out(text);
  module.print(out, nullptr);
  return text;
}

}  // namespace

bool compile(const Request& request, Result& result, std::string& error) {
  result = Result{};
  result.llvm_version = LLVM_VERSION_STRING;

  auto start = std::chrono::steady_clock::now();
  llvm::LLVMContext context;
  std::string diagnostics;
  // Optimiser remarks and warnings go to the log, not to the caller's stderr.
  context.setDiagnosticHandlerCallBack(
      [](const llvm::DiagnosticInfo* info, void* sink) {
        std::string text;
        llvm::raw_string_ostream out(text);
        llvm::DiagnosticPrinterRawOStream printer(out);
        info->print(printer);
        *static_cast<std::string*>(sink) += text + "\n";
      },
      &diagnostics);
  std::unique_ptr<llvm::Module> module = compile_to_ir(request, context, diagnostics);
  result.seconds_frontend = seconds_since(start);
  if (!module) {
    error = "clang could not compile " + request.name;
    result.log = diagnostics;
    return false;
  }
  if (request.keep_ir) result.ir_before = print(*module);

  std::unique_ptr<llvm::TargetMachine> target = nvptx_target(request.arch, error);
  if (!target) return false;
  module->setDataLayout(target->createDataLayout());

  start = std::chrono::steady_clock::now();
  if (!run_pipeline(*module, target.get(), request.passes, result.stats, error)) return false;
  drop_params_layout(*module);
  result.seconds_passes = seconds_since(start);
  if (request.keep_ir) result.ir_after = print(*module);

  start = std::chrono::steady_clock::now();
  if (!emit_ptx(*module, *target, result.ptx, error)) return false;
  result.seconds_backend = seconds_since(start);

  std::string link_log;
  if (request.link_cubin) {
    start = std::chrono::steady_clock::now();
    if (!link_cubin(result.ptx, request.arch, request.name, result.cubin, link_log, error))
      return false;
    result.seconds_link = seconds_since(start);
  }
  result.statistics = format_statistics(result.stats);
  result.log = result.statistics;
  if (!diagnostics.empty()) result.log += "clang\n" + diagnostics;
  if (!link_log.empty()) result.log += "nvJitLink\n" + link_log + "\n";
  return true;
}

}  // namespace ftattn::llvm_route

// Looked up by name after dlopen (route_api.hpp: kCompileSymbol).
extern "C" __attribute__((visibility("default"))) bool ftattn_llvm_route_compile(
    const ftattn::llvm_route::Request& request, ftattn::llvm_route::Result& result,
    std::string& error) {
  try {
    return ftattn::llvm_route::compile(request, result, error);
  } catch (const std::exception& e) {
    error = std::string("the LLVM route failed: ") + e.what();
    return false;
  }
}

// Looked up by name after dlopen (route_api.hpp: kCompilerSymbol).
extern "C" __attribute__((visibility("default"))) void ftattn_llvm_route_compiler(
    ftattn::llvm_route::Compiler& compiler) {
  unsigned major = 0, minor = 0, patch = 0;
  LLVMGetVersion(&major, &minor, &patch);
  compiler.version =
      std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  compiler.full_version = clang::getClangFullVersion();
  compiler.libraries = {reinterpret_cast<const void*>(&LLVMGetVersion),
                        reinterpret_cast<const void*>(&clang::getClangFullVersion),
                        reinterpret_cast<const void*>(&nvJitLinkVersion)};
}
