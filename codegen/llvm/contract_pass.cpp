#include "codegen/llvm/contract_pass.hpp"

#include <llvm/ADT/STLExtras.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Module.h>

#include "codegen/llvm/ir_classes.hpp"

namespace ftattn::llvm_route {
namespace {

bool is_fp_op(const llvm::Instruction& inst) {
  switch (inst.getOpcode()) {
    case llvm::Instruction::FAdd:
    case llvm::Instruction::FSub:
    case llvm::Instruction::FMul:
      return true;
    default:
      return false;
  }
}

// The types the back end fuses: f32 and f64, scalar or vector (f16/bf16 arithmetic is left as
// it is, the pass clears no flag there either).
bool fusable_type(const llvm::Type* type) {
  const llvm::Type* scalar = type->getScalarType();
  return scalar->isFloatTy() || scalar->isDoubleTy();
}

bool contractable(const llvm::Instruction& inst) {
  return is_fp_op(inst) && !is_ours(inst) && fusable_type(inst.getType()) &&
         inst.hasAllowContract();
}

// `value` as an fmul that may fuse into `user`: contractable and in the same block (the back
// end sees one block at a time).
llvm::Instruction* fusable_fmul(llvm::Value* value, const llvm::Instruction& user) {
  auto* inst = llvm::dyn_cast<llvm::Instruction>(value);
  if (inst == nullptr || inst->getOpcode() != llvm::Instruction::FMul || !contractable(*inst) ||
      inst->getParent() != user.getParent())
    return nullptr;
  return inst;
}

// Replaces the fadd/fsub `inst` by an llvm.fma when one of its operands is a fusable fmul.
bool contract(llvm::Instruction& inst) {
  if (inst.getOpcode() == llvm::Instruction::FMul || !contractable(inst)) return false;
  const bool subtract = inst.getOpcode() == llvm::Instruction::FSub;
  llvm::Instruction* product[2] = {fusable_fmul(inst.getOperand(0), inst),
                                   fusable_fmul(inst.getOperand(1), inst)};
  if (product[0] == nullptr && product[1] == nullptr) return false;
  // Both operands products: the one with fewer uses, else the first, as the back end chooses.
  int which = product[0] != nullptr ? 0 : 1;
  if (product[0] != nullptr && product[1] != nullptr &&
      product[0]->getNumUses() > product[1]->getNumUses())
    which = 1;
  llvm::Instruction* mul = product[which];
  llvm::Value* a = mul->getOperand(0);
  llvm::Value* b = mul->getOperand(1);
  llvm::Value* addend = inst.getOperand(1 - which);

  // Placed at `inst`, the builder gives what it adds inst's line (functions= filters read it).
  llvm::IRBuilder<> builder(&inst);
  builder.setFastMathFlags(inst.getFastMathFlags());
  if (subtract && which == 0) addend = builder.CreateFNeg(addend);  // a*b - x = fma(a, b, -x)
  if (subtract && which == 1) a = builder.CreateFNeg(a);            // x - a*b = fma(-a, b, x)
  llvm::Value* fma =
      builder.CreateIntrinsic(llvm::Intrinsic::fma, {inst.getType()}, {a, b, addend});
  fma->takeName(&inst);
  inst.replaceAllUsesWith(fma);
  inst.eraseFromParent();
  if (mul->use_empty()) mul->eraseFromParent();
  return true;
}

}  // namespace

llvm::PreservedAnalyses ContractPass::run(llvm::Module& module,
                                          llvm::ModuleAnalysisManager& /*analyses*/) {
  size_t count = 0;
  bool changed = false;
  for (llvm::Function& f : module) {
    for (llvm::BasicBlock& block : f)
      for (llvm::Instruction& inst : llvm::make_early_inc_range(block)) count += contract(inst);
    // What is left is not fused: clear the flag so the back end fuses nothing either.
    for (llvm::BasicBlock& block : f)
      for (llvm::Instruction& inst : block)
        if (contractable(inst)) {
          inst.setHasAllowContract(false);
          changed = true;
        }
  }
  if (formed != nullptr) *formed = count;
  return count == 0 && !changed ? llvm::PreservedAnalyses::all() : llvm::PreservedAnalyses::none();
}

}  // namespace ftattn::llvm_route
