#include "codegen/llvm/inline_all_pass.hpp"

#include <llvm/IR/Module.h>

#include "codegen/llvm/kernel_params.hpp"

namespace ftattn::llvm_route {

llvm::PreservedAnalyses InlineAllPass::run(llvm::Module& module,
                                           llvm::ModuleAnalysisManager& /*analyses*/) {
  bool changed = false;
  for (llvm::Function& f : module) {
    if (f.isDeclaration() || is_kernel(f) || f.hasFnAttribute(llvm::Attribute::NoInline) ||
        f.hasFnAttribute(llvm::Attribute::AlwaysInline))
      continue;
    f.removeFnAttr(llvm::Attribute::OptimizeNone);
    f.addFnAttr(llvm::Attribute::AlwaysInline);
    changed = true;
  }
  return changed ? llvm::PreservedAnalyses::none() : llvm::PreservedAnalyses::all();
}

}  // namespace ftattn::llvm_route
