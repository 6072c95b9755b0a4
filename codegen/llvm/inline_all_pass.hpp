// Marks every device function that may be inlined as always-inline, so that O3 leaves one
// function per kernel, as NVRTC does. Our passes then see the whole kernel, with its launch
// parameters in reach.
#pragma once

#include <llvm/IR/PassManager.h>

namespace ftattn::llvm_route {

struct InlineAllPass : llvm::PassInfoMixin<InlineAllPass> {
  llvm::PreservedAnalyses run(llvm::Module& module, llvm::ModuleAnalysisManager& analyses);
  static bool isRequired() { return true; }
};

}  // namespace ftattn::llvm_route
