// Hardening by duplication (DMR): every operation of one class in each kernel is computed a
// second time and the two results are compared bit for bit. The copy's first operand passes
// through an XOR with a zero the compiler cannot see (it comes from the launch parameters), so
// neither LLVM nor ptxas can merge the two. A thread that saw a mismatch adds one to
// fault_log->detected when it returns (the log may be null). Hardened fp operations are not
// contracted into FMAs, so that both copies round alike.
#pragma once

#include <llvm/IR/PassManager.h>

#include "ftattn/config.hpp"

namespace ftattn::llvm_route {

struct HardenPass : llvm::PassInfoMixin<HardenPass> {
  IrClass target = IrClass::fp_arith;  // not IrClass::load
  size_t* sites = nullptr;             // when set, receives the number of duplicated operations

  llvm::PreservedAnalyses run(llvm::Module& module, llvm::ModuleAnalysisManager& analyses);
  static bool isRequired() { return true; }
};

}  // namespace ftattn::llvm_route
