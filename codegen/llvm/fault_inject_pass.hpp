// IR-level fault injection: every value of one class, in the chosen functions of each kernel,
// gets a check after its definition; the `iteration`-th dynamic instance (per thread) in thread
// `thread` of CTA `cta` has bit `bit` flipped, when the launch's plan says site == ir.
// Aggregates (MMA results) flip element `element` modulo their size. With iteration < 0 nothing
// flips: the planned thread adds the number of instances it ran to fault_log->detected instead
// (how a campaign measures the space it draws from).
#pragma once

#include <llvm/IR/PassManager.h>

#include <string>
#include <vector>

#include "ftattn/config.hpp"

namespace ftattn::llvm_route {

struct FaultInjectPass : llvm::PassInfoMixin<FaultInjectPass> {
  IrClass target = IrClass::fp_arith;
  // Instrument only code that came from these functions (a substring of the demangled or
  // mangled name of any function in the instruction's inlining chain, from the line tables);
  // empty: every function.
  std::vector<std::string> functions;
  size_t* sites = nullptr;  // when set, receives the number of instrumented values

  llvm::PreservedAnalyses run(llvm::Module& module, llvm::ModuleAnalysisManager& analyses);
  static bool isRequired() { return true; }
};

}  // namespace ftattn::llvm_route
