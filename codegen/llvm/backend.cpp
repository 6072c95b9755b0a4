#include "codegen/llvm/backend.hpp"

#include <fmt/format.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Triple.h>
#include <nvJitLink.h>

#include <mutex>
#include <vector>

namespace ftattn::llvm_route {
namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";

void initialise_nvptx() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

std::string jitlink_log(nvJitLinkHandle handle, bool info) {
  size_t size = 0;
  if ((info ? nvJitLinkGetInfoLogSize(handle, &size) : nvJitLinkGetErrorLogSize(handle, &size)) !=
          NVJITLINK_SUCCESS ||
      size == 0)
    return {};
  std::string text(size, '\0');
  if (info)
    nvJitLinkGetInfoLog(handle, text.data());
  else
    nvJitLinkGetErrorLog(handle, text.data());
  while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
  return text;
}

}  // namespace

std::unique_ptr<llvm::TargetMachine> nvptx_target(const std::string& arch, std::string& error) {
  initialise_nvptx();
  const llvm::Triple triple(kTriple);
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (target == nullptr) return nullptr;
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      triple, arch, "", options, std::nullopt, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!machine) error = "LLVM has no NVPTX target machine for " + arch;
  return machine;
}

bool emit_ptx(llvm::Module& module, llvm::TargetMachine& target, std::string& ptx,
              std::string& error) {
  module.setDataLayout(target.createDataLayout());
  module.setTargetTriple(target.getTargetTriple());
  llvm::raw_string_ostream out(ptx);
  llvm::buffer_ostream buffer(out);
  llvm::legacy::PassManager passes;
  if (target.addPassesToEmitFile(passes, buffer, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
    error = "the NVPTX back end cannot emit PTX for this module";
    return false;
  }
  passes.run(module);
  return true;
}

bool link_cubin(const std::string& ptx, const std::string& arch, const std::string& name,
                std::string& cubin, std::string& log, std::string& error) {
  const std::string arch_option = "-arch=" + arch;
  // -verbose gives ptxas's per-function report, which the runtime reads for resources.
  const std::vector<const char*> options = {arch_option.c_str(), "-O3", "-verbose", "-lineinfo"};
  nvJitLinkHandle handle = nullptr;
  nvJitLinkResult r = nvJitLinkCreate(&handle, static_cast<uint32_t>(options.size()),
                                      const_cast<const char**>(options.data()));
  if (r != NVJITLINK_SUCCESS) {
    error = fmt::format("nvJitLinkCreate failed ({}) for {}", static_cast<int>(r), arch);
    return false;
  }
  const std::string file = name + ".ptx";
  r = nvJitLinkAddData(handle, NVJITLINK_INPUT_PTX, ptx.data(), ptx.size(), file.c_str());
  if (r == NVJITLINK_SUCCESS) r = nvJitLinkComplete(handle);
  log = jitlink_log(handle, true);
  if (r != NVJITLINK_SUCCESS) {
    error = fmt::format("nvJitLink could not assemble the PTX ({}): {}", static_cast<int>(r),
                        jitlink_log(handle, false));
    nvJitLinkDestroy(&handle);
    return false;
  }
  size_t size = 0;
  nvJitLinkGetLinkedCubinSize(handle, &size);
  cubin.assign(size, '\0');
  nvJitLinkGetLinkedCubin(handle, cubin.data());
  nvJitLinkDestroy(&handle);
  return true;
}

}  // namespace ftattn::llvm_route
