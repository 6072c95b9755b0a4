// The back end of the LLVM route: the NVPTX target machine, module -> PTX, and PTX -> cubin
// with nvJitLink (the toolkit's linker library, which runs ptxas in-process).
#pragma once

#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <memory>
#include <string>

namespace ftattn::llvm_route {

// The NVPTX target machine for `arch` ("sm_90a") at O3, or nullptr with `error`.
std::unique_ptr<llvm::TargetMachine> nvptx_target(const std::string& arch, std::string& error);

// PTX text of `module`; false with `error` when the back end refuses it.
bool emit_ptx(llvm::Module& module, llvm::TargetMachine& target, std::string& ptx,
              std::string& error);

// cubin for `arch`; `log` receives the ptxas report (resource usage). False with `error`.
bool link_cubin(const std::string& ptx, const std::string& arch, const std::string& name,
                std::string& cubin, std::string& log, std::string& error);

}  // namespace ftattn::llvm_route
