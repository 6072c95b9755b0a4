#include "codegen/llvm/frontend.hpp"

#include <clang/Basic/DiagnosticOptions.h>
#include <clang/CodeGen/CodeGenAction.h>
#include <clang/Driver/CreateInvocationFromArgs.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/CompilerInvocation.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/VirtualFileSystem.h>
#include <llvm/Support/raw_ostream.h>

#include <vector>

namespace ftattn::llvm_route {
namespace {

// Where the unit and the templates appear in the in-memory file system.
constexpr const char* kRoot = "/ftattn-jit";

}  // namespace

std::unique_ptr<llvm::Module> compile_to_ir(const Request& request, llvm::LLVMContext& context,
                                            std::string& diagnostics) {
  const std::string include_dir = std::string(kRoot) + "/include";
  const std::string main_file = std::string(kRoot) + "/" + request.name + ".cu";

  // Templates and the unit live in memory over the real file system, which clang still needs
  // for its own resource headers (__clang_cuda_builtin_vars.h).
  auto memory = llvm::makeIntrusiveRefCnt<llvm::vfs::InMemoryFileSystem>();
  for (const auto& [path, text] : request.headers)
    memory->addFile(include_dir + "/" + path, 0, llvm::MemoryBuffer::getMemBufferCopy(text, path));
  memory->addFile(main_file, 0, llvm::MemoryBuffer::getMemBufferCopy(request.text, main_file));
  auto vfs =
      llvm::makeIntrusiveRefCnt<llvm::vfs::OverlayFileSystem>(llvm::vfs::getRealFileSystem());
  vfs->pushOverlay(memory);

  // The clang driver turns ordinary flags into the device-side cc1 job; its path locates the
  // resource headers.
  // No CUDA installation is consulted (--cuda-path leads nowhere): the PTX version comes from
  // the options (--cuda-feature), so the output does not depend on the toolkit found here.
  std::vector<std::string> args = {FTATTN_CLANG_PATH,
                                   "-x",
                                   "cuda",
                                   "--cuda-device-only",
                                   "-nocudainc",
                                   "-nocudalib",
                                   "--cuda-path=" + std::string(kRoot) + "/no-cuda",
                                   "-Wno-pass-failed",
                                   "-Xclang",
                                   "-disable-llvm-passes",
                                   "-I" + include_dir};
  args.insert(args.end(), request.clang_args.begin(), request.clang_args.end());
  for (const char* forced : {"ftattn/llvm/prelude.cuh", "ftattn/llvm/ir_layout.cuh"}) {
    args.push_back("-include");
    args.push_back(forced);
  }
  args.insert(args.end(), {"-emit-llvm", main_file});
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());

  llvm::raw_string_ostream out(diagnostics);
  clang::DiagnosticOptions diag_options;
  auto* printer = new clang::TextDiagnosticPrinter(out, diag_options);
  llvm::IntrusiveRefCntPtr<clang::DiagnosticsEngine> diags =
      clang::CompilerInstance::createDiagnostics(*vfs, diag_options, printer, true);

  clang::CreateInvocationOptions options;
  options.Diags = diags;
  options.VFS = vfs;
  std::shared_ptr<clang::CompilerInvocation> invocation = clang::createInvocation(argv, options);
  if (!invocation) {
    diagnostics += "clang could not build a device compilation from: ";
    for (const std::string& a : args) diagnostics += a + " ";
    return nullptr;
  }

  clang::CompilerInstance clang_instance(invocation);
  clang_instance.setVirtualFileSystem(vfs);
  clang_instance.createDiagnostics(new clang::TextDiagnosticPrinter(out, diag_options), true);
  clang::EmitLLVMOnlyAction action(&context);
  if (!clang_instance.ExecuteAction(action)) return nullptr;
  return action.takeModule();
}

}  // namespace ftattn::llvm_route
