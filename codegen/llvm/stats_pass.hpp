// Statistics of a module: IR size (the pipeline measures it after every stage) and
// instruction counts by value class (the ftattn-stats pass, run last).
#pragma once

#include <llvm/IR/PassManager.h>

#include <string>

#include "codegen/llvm/route_api.hpp"

namespace ftattn::llvm_route {

// Functions with a body, basic blocks and instructions of `module`.
StageSize measure(const llvm::Module& module, std::string stage);

// Fills Statistics::by_class: the value classes, then store, call, branch, other.
struct StatsPass : llvm::PassInfoMixin<StatsPass> {
  Statistics* out = nullptr;

  llvm::PreservedAnalyses run(llvm::Module& module, llvm::ModuleAnalysisManager& analyses);
  static bool isRequired() { return true; }
};

}  // namespace ftattn::llvm_route
