// FMA contraction in IR, before any instrumentation: each contractable fadd/fsub of a
// contractable fmul in the same block becomes an llvm.fma, the way the NVPTX back end would
// fuse the pair (an fmul with several fadd users fuses into each of them; an fmul that keeps
// other uses stays for those). The contract flag is then cleared on the fadd, fsub and fmul
// left over, so the back end fuses nothing more: every contraction is decided here. Injection
// and hardening put code between an fmul and its fadd, which would otherwise stop the back end
// from fusing them, so an instrumented kernel would round differently from the plain one.
#pragma once

#include <llvm/IR/PassManager.h>

#include <cstddef>

namespace ftattn::llvm_route {

struct ContractPass : llvm::PassInfoMixin<ContractPass> {
  size_t* formed = nullptr;  // when set, receives the number of FMAs formed

  llvm::PreservedAnalyses run(llvm::Module& module, llvm::ModuleAnalysisManager& analyses);
  static bool isRequired() { return true; }
};

}  // namespace ftattn::llvm_route
