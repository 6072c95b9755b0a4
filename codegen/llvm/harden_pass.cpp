#include "codegen/llvm/harden_pass.hpp"

#include <llvm/IR/Dominators.h>
#include <llvm/IR/Instructions.h>
#include <llvm/Transforms/Utils/BasicBlockUtils.h>
#include <llvm/Transforms/Utils/PromoteMemToReg.h>

#include "codegen/llvm/bits.hpp"
#include "codegen/llvm/ir_classes.hpp"
#include "codegen/llvm/kernel_params.hpp"

namespace ftattn::llvm_route {
namespace {

// A value no compiler can prove is zero: (plan.bit == 0x7fffdead), always false at launch.
constexpr int kNeverABit = 0x7fffdead;

// The first operand the copy can perturb: a scalar or vector of int, fp or pointer.
int perturbable_operand(const llvm::Instruction& inst) {
  const llvm::DataLayout& layout = inst.getModule()->getDataLayout();
  const unsigned n = llvm::isa<llvm::CallBase>(inst) ? llvm::cast<llvm::CallBase>(inst).arg_size()
                                                     : inst.getNumOperands();
  for (unsigned i = 0; i < n; ++i) {
    const llvm::Value* op = inst.getOperand(i);
    if (!llvm::isa<llvm::Constant>(op) && bit_width(op->getType(), layout) > 0)
      return static_cast<int>(i);
  }
  // All constants: perturb the first one that has bits.
  for (unsigned i = 0; i < n; ++i)
    if (bit_width(inst.getOperand(i)->getType(), layout) > 0) return static_cast<int>(i);
  return -1;
}

// i1: do `a` and `b` (same type, scalar or aggregate of scalars) differ in any bit?
llvm::Value* differs(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) {
  if (auto* st = llvm::dyn_cast<llvm::StructType>(x->getType())) {
    llvm::Value* any = b.getFalse();
    for (unsigned i = 0; i < st->getNumElements(); ++i) {
      llvm::Value* d =
          differs(b, ours(b.CreateExtractValue(x, i)), ours(b.CreateExtractValue(y, i)));
      any = ours(b.CreateOr(any, d));
    }
    return any;
  }
  return ours(b.CreateICmpNE(to_bits(b, x), to_bits(b, y)));
}

bool hardenable(const llvm::Instruction& inst) {
  const llvm::DataLayout& layout = inst.getModule()->getDataLayout();
  if (auto* st = llvm::dyn_cast<llvm::StructType>(inst.getType())) {
    for (llvm::Type* e : st->elements())
      if (bit_width(e, layout) == 0) return false;
  } else if (bit_width(inst.getType(), layout) == 0) {
    return false;
  }
  return perturbable_operand(inst) >= 0;
}

}  // namespace

llvm::PreservedAnalyses HardenPass::run(llvm::Module& module,
                                        llvm::ModuleAnalysisManager& /*analyses*/) {
  size_t count = 0;
  const std::optional<ParamsLayout> layout = read_params_layout(module);
  if (layout && target != IrClass::none && target != IrClass::load) {
    for (llvm::Function& f : module) {
      llvm::Argument* params = is_kernel(f) ? params_argument(f) : nullptr;
      if (params == nullptr) continue;
      llvm::SmallVector<llvm::Instruction*, 256> targets;
      for (llvm::BasicBlock& block : f)
        for (llvm::Instruction& inst : block)
          if (classify(inst) == target && hardenable(inst)) targets.push_back(&inst);
      if (targets.empty()) continue;

      llvm::IRBuilder<> b(&f.getEntryBlock(), f.getEntryBlock().begin());
      llvm::AllocaInst* mismatch = b.CreateAlloca(b.getInt1Ty(), nullptr, "ftattn.dmr.mismatch");
      mark_ours(mismatch);
      b.SetInsertPoint(&f.getEntryBlock(), setup_point(f));
      mark_ours(b.CreateStore(b.getFalse(), mismatch));
      llvm::Value* zero = ours(b.CreateZExt(
          ours(b.CreateICmpEQ(load_param_i32(b, params, layout->bit), b.getInt32(kNeverABit))),
          b.getInt32Ty()));
      llvm::Value* log = load_param_ptr(b, params, layout->fault_log);

      for (llvm::Instruction* inst : targets) {
        if (llvm::isa<llvm::FPMathOperator>(inst)) inst->setHasAllowContract(false);
        llvm::Instruction* copy = inst->clone();
        mark_ours(copy);
        copy->insertAfter(inst->getIterator());
        b.SetInsertPoint(copy);
        const int which = perturbable_operand(*inst);
        llvm::Value* operand = inst->getOperand(which);
        const unsigned width = bit_width(operand->getType(), module.getDataLayout());
        copy->setOperand(which, xor_bits(b, operand, resize(b, zero, width)));
        b.SetInsertPoint(copy->getNextNode());
        llvm::Value* seen = ours(b.CreateLoad(b.getInt1Ty(), mismatch));
        mark_ours(b.CreateStore(ours(b.CreateOr(seen, differs(b, inst, copy))), mismatch));
        ++count;
      }

      // Report once per thread, on the way out.
      llvm::SmallVector<llvm::ReturnInst*, 4> exits;
      for (llvm::BasicBlock& block : f)
        if (auto* ret = llvm::dyn_cast<llvm::ReturnInst>(block.getTerminator()))
          exits.push_back(ret);
      for (llvm::ReturnInst* ret : exits) {
        b.SetInsertPoint(ret);
        llvm::Value* seen = ours(b.CreateLoad(b.getInt1Ty(), mismatch));
        llvm::Value* report = ours(b.CreateAnd(seen, ours(b.CreateIsNotNull(log))));
        llvm::Instruction* then =
            llvm::SplitBlockAndInsertIfThen(report, ret->getIterator(), false);
        b.SetInsertPoint(then);
        llvm::Value* counter =
            ours(b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), log, layout->log_detected));
        mark_ours(llvm::cast<llvm::Instruction>(  // FaultLog::detected is 64-bit
            b.CreateAtomicRMW(llvm::AtomicRMWInst::Add, counter, b.getInt64(1), llvm::Align(8),
                              llvm::AtomicOrdering::Monotonic)));
      }
      llvm::DominatorTree dominators(f);
      llvm::PromoteMemToReg({mismatch}, dominators);
    }
  }
  if (sites != nullptr) *sites = count;
  return count == 0 ? llvm::PreservedAnalyses::all() : llvm::PreservedAnalyses::none();
}

}  // namespace ftattn::llvm_route
