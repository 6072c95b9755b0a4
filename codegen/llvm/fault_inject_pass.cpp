#include "codegen/llvm/fault_inject_pass.hpp"

#include <llvm/Demangle/Demangle.h>
#include <llvm/IR/DebugInfoMetadata.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/Transforms/Utils/BasicBlockUtils.h>
#include <llvm/Transforms/Utils/PromoteMemToReg.h>

#include "codegen/llvm/bits.hpp"
#include "codegen/llvm/ir_classes.hpp"
#include "codegen/llvm/kernel_params.hpp"

namespace ftattn::llvm_route {
namespace {

// Does `inst` come from one of `functions`? Walks the inlining chain of its debug location.
bool from_chosen_function(const llvm::Instruction& inst, const llvm::Function& kernel,
                          const std::vector<std::string>& functions) {
  if (functions.empty()) return true;
  auto matches = [&](llvm::StringRef name) {
    if (name.empty()) return false;
    const std::string demangled = llvm::demangle(name.str());
    for (const std::string& f : functions) {
      if (name.contains(f) || llvm::StringRef(demangled).contains(f)) return true;
    }
    return false;
  };
  for (const llvm::DILocation* loc = inst.getDebugLoc().get(); loc != nullptr;
       loc = loc->getInlinedAt()) {
    const llvm::DISubprogram* sp = loc->getScope()->getSubprogram();
    if (sp != nullptr && (matches(sp->getLinkageName()) || matches(sp->getName()))) return true;
  }
  // Without line tables, only the enclosing function can be named.
  return !inst.getDebugLoc() && matches(kernel.getName());
}

// Per-kernel state: whether this thread is the planned one, and its instance counter.
struct Plan {
  llvm::Value* armed = nullptr;      // i1: site == ir and this is the planned CTA and thread
  llvm::Value* iteration = nullptr;  // i32
  llvm::Value* element = nullptr;    // i32
  llvm::Value* bit = nullptr;        // i32
  llvm::Value* log = nullptr;        // FaultLog*, may be null
  llvm::AllocaInst* counter = nullptr;
};

Plan build_plan(llvm::Function& kernel, llvm::Argument* params, const ParamsLayout& layout) {
  llvm::Module& module = *kernel.getParent();
  llvm::IRBuilder<> b(&kernel.getEntryBlock(), kernel.getEntryBlock().begin());
  Plan plan;
  plan.counter = b.CreateAlloca(b.getInt32Ty(), nullptr, "ftattn.ir.instance");
  mark_ours(plan.counter);
  b.SetInsertPoint(&kernel.getEntryBlock(), setup_point(kernel));
  mark_ours(b.CreateStore(b.getInt32(0), plan.counter));
  llvm::Value* site = load_param_i32(b, params, layout.site);
  llvm::Value* cta = load_param_i32(b, params, layout.cta);
  llvm::Value* thread = load_param_i32(b, params, layout.thread);
  plan.iteration = load_param_i32(b, params, layout.iteration);
  plan.element = load_param_i32(b, params, layout.element);
  plan.bit = load_param_i32(b, params, layout.bit);
  plan.log = load_param_ptr(b, params, layout.fault_log);
  auto sreg = [&](llvm::Intrinsic::ID id) {
    return ours(b.CreateCall(llvm::Intrinsic::getOrInsertDeclaration(&module, id)));
  };
  // blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), as FaultPlan defines it.
  llvm::Value* linear = ours(b.CreateAdd(
      sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x),
      ours(b.CreateMul(
          sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x),
          ours(b.CreateAdd(
              sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y),
              ours(b.CreateMul(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y),
                               sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z)))))))));
  llvm::Value* tid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  plan.armed = ours(b.CreateAnd(
      ours(b.CreateICmpEQ(site, b.getInt32(layout.site_ir))),
      ours(b.CreateAnd(ours(b.CreateICmpEQ(linear, cta)), ours(b.CreateICmpEQ(tid, thread))))));
  return plan;
}

// XOR mask flipping `bit` (modulo the width) when `hit`, else 0.
llvm::Value* flip_mask(llvm::IRBuilder<>& b, llvm::Value* hit, llvm::Value* bit, unsigned width) {
  llvm::Value* position = ours(b.CreateURem(resize(b, bit, width), b.getIntN(width, width)));
  llvm::Value* one_bit = ours(b.CreateShl(b.getIntN(width, 1), position));
  return ours(b.CreateSelect(hit, one_bit, b.getIntN(width, 0)));
}

// Instruments one value; returns false for a type it cannot flip.
bool instrument(llvm::Instruction& inst, const Plan& plan) {
  const llvm::DataLayout& layout = inst.getModule()->getDataLayout();
  llvm::Type* type = inst.getType();
  auto* aggregate = llvm::dyn_cast<llvm::StructType>(type);
  if (aggregate != nullptr) {
    for (llvm::Type* e : aggregate->elements())
      if (bit_width(e, layout) == 0) return false;
  } else if (bit_width(type, layout) == 0) {
    return false;
  }

  // Every use as it is now; the instrumentation's own uses come later and keep the original.
  llvm::SmallVector<llvm::Use*, 8> uses;
  for (llvm::Use& u : inst.uses()) uses.push_back(&u);

  llvm::IRBuilder<> b(inst.getParent(), inst.getParent()->getFirstInsertionPt());
  if (!llvm::isa<llvm::PHINode>(inst)) b.SetInsertPoint(inst.getNextNode());
  llvm::Value* count = ours(b.CreateLoad(b.getInt32Ty(), plan.counter));
  mark_ours(b.CreateStore(ours(b.CreateAdd(count, b.getInt32(1))), plan.counter));
  llvm::Value* hit = ours(b.CreateAnd(plan.armed, ours(b.CreateICmpEQ(count, plan.iteration))));

  llvm::Value* flipped = nullptr;
  if (aggregate == nullptr) {
    flipped = xor_bits(b, &inst, flip_mask(b, hit, plan.bit, bit_width(type, layout)));
  } else {
    const unsigned n = aggregate->getNumElements();
    llvm::Value* which = ours(b.CreateURem(plan.element, b.getInt32(n)));
    flipped = &inst;
    for (unsigned i = 0; i < n; ++i) {
      llvm::Value* here = ours(b.CreateAnd(hit, ours(b.CreateICmpEQ(which, b.getInt32(i)))));
      llvm::Value* element = ours(b.CreateExtractValue(&inst, i));
      llvm::Type* et = aggregate->getElementType(i);
      llvm::Value* changed =
          xor_bits(b, element, flip_mask(b, here, plan.bit, bit_width(et, layout)));
      flipped = ours(b.CreateInsertValue(flipped, changed, i));
    }
  }
  for (llvm::Use* u : uses) u->set(flipped);
  return true;
}

// Counting mode (iteration < 0): the planned thread adds its number of dynamic instances to
// fault_log->detected on the way out, so a campaign can learn the space it draws from.
void add_count_report(llvm::Function& kernel, const Plan& plan, const ParamsLayout& layout) {
  llvm::SmallVector<llvm::ReturnInst*, 4> exits;
  for (llvm::BasicBlock& block : kernel)
    if (auto* ret = llvm::dyn_cast<llvm::ReturnInst>(block.getTerminator())) exits.push_back(ret);
  for (llvm::ReturnInst* ret : exits) {
    llvm::IRBuilder<> b(ret);
    llvm::Value* counting = ours(b.CreateAnd(
        plan.armed, ours(b.CreateAnd(ours(b.CreateICmpSLT(plan.iteration, b.getInt32(0))),
                                     ours(b.CreateIsNotNull(plan.log))))));
    llvm::Value* seen = ours(b.CreateLoad(b.getInt32Ty(), plan.counter));
    llvm::Instruction* then = llvm::SplitBlockAndInsertIfThen(counting, ret->getIterator(), false);
    b.SetInsertPoint(then);
    llvm::Value* detected =
        ours(b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), plan.log, layout.log_detected));
    // FaultLog::detected is 64-bit.
    llvm::Value* seen64 = ours(b.CreateZExt(seen, b.getInt64Ty()));
    mark_ours(llvm::cast<llvm::Instruction>(b.CreateAtomicRMW(llvm::AtomicRMWInst::Add, detected,
                                                              seen64, llvm::Align(8),
                                                              llvm::AtomicOrdering::Monotonic)));
  }
}

}  // namespace

llvm::PreservedAnalyses FaultInjectPass::run(llvm::Module& module,
                                             llvm::ModuleAnalysisManager& /*analyses*/) {
  size_t count = 0;
  const std::optional<ParamsLayout> layout = read_params_layout(module);
  if (layout && target != IrClass::none) {
    for (llvm::Function& f : module) {
      llvm::Argument* params = is_kernel(f) ? params_argument(f) : nullptr;
      if (params == nullptr) continue;
      llvm::SmallVector<llvm::Instruction*, 256> targets;
      for (llvm::BasicBlock& block : f)
        for (llvm::Instruction& inst : block)
          if (classify(inst) == target && from_chosen_function(inst, f, functions))
            targets.push_back(&inst);
      if (targets.empty()) continue;
      const Plan plan = build_plan(f, params, *layout);
      for (llvm::Instruction* inst : targets) count += instrument(*inst, plan);
      add_count_report(f, plan, *layout);
      // The counter lives in a register: promote it now so no later pass has to.
      llvm::DominatorTree dominators(f);
      llvm::PromoteMemToReg({plan.counter}, dominators);
    }
  }
  if (sites != nullptr) *sites = count;
  return count == 0 ? llvm::PreservedAnalyses::all() : llvm::PreservedAnalyses::none();
}

}  // namespace ftattn::llvm_route
