// Which IR instructions belong to which value class, for the injection, hardening and
// statistics passes, and the tag that marks instructions the passes themselves added.
#pragma once

#include <llvm/IR/Instruction.h>

#include <string_view>

#include "ftattn/config.hpp"

namespace ftattn::llvm_route {

// The class of `inst`'s result, or IrClass::none. Inline asm counts by its text: ex2.approx
// is exp_max, mma.sync/wgmma is mma, ld*/ldmatrix is load. Instructions the passes added are
// never classified.
IrClass classify(const llvm::Instruction& inst);

// Statistics buckets beyond the value classes: store, call, branch, other.
std::string_view statistics_bucket(const llvm::Instruction& inst);

// Marks an instruction as added by one of our passes, so no pass instruments it again.
void mark_ours(llvm::Instruction* inst);
bool is_ours(const llvm::Instruction& inst);

// The canonical spelling of a class in pass names: "fp-arith".
std::string_view pass_spelling(IrClass c);
// The config's spelling, "fp_arith" (the plugin cannot call the library's to_string).
std::string_view class_name(IrClass c);

}  // namespace ftattn::llvm_route
