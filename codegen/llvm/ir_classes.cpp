#include "codegen/llvm/ir_classes.hpp"

#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Metadata.h>

namespace ftattn::llvm_route {
namespace {

constexpr const char* kOursKind = "ftattn.ir";

// The PTX text of an inline-asm call, or empty.
llvm::StringRef asm_text(const llvm::CallBase& call) {
  if (const auto* as = llvm::dyn_cast<llvm::InlineAsm>(call.getCalledOperand()))
    return as->getAsmString();
  return {};
}

IrClass classify_call(const llvm::CallBase& call) {
  if (call.getType()->isVoidTy()) return IrClass::none;
  const llvm::StringRef text = asm_text(call).ltrim();
  if (!text.empty()) {
    if (text.starts_with("ex2.")) return IrClass::exp_max;
    if (text.starts_with("mma.") || text.starts_with("wgmma.")) return IrClass::mma;
    if (text.starts_with("ld")) return IrClass::load;
    return IrClass::none;
  }
  if (const auto* ii = llvm::dyn_cast<llvm::IntrinsicInst>(&call)) {
    switch (ii->getIntrinsicID()) {
      case llvm::Intrinsic::fma:
      case llvm::Intrinsic::fmuladd:
        return IrClass::fp_arith;
      case llvm::Intrinsic::maxnum:
      case llvm::Intrinsic::maximum:
      case llvm::Intrinsic::maximumnum:
      case llvm::Intrinsic::exp2:
      case llvm::Intrinsic::exp:
      case llvm::Intrinsic::nvvm_ex2_approx:
      case llvm::Intrinsic::nvvm_ex2_approx_ftz:
      case llvm::Intrinsic::nvvm_fmax_f:
      case llvm::Intrinsic::nvvm_fmax_ftz_f:
        return IrClass::exp_max;
      default:
        break;
    }
  }
  return IrClass::none;
}

}  // namespace

IrClass classify(const llvm::Instruction& inst) {
  if (is_ours(inst)) return IrClass::none;
  switch (inst.getOpcode()) {
    case llvm::Instruction::FAdd:
    case llvm::Instruction::FSub:
    case llvm::Instruction::FMul:
      return IrClass::fp_arith;
    case llvm::Instruction::Add:
    case llvm::Instruction::Sub:
    case llvm::Instruction::Mul:
    case llvm::Instruction::Shl:
    case llvm::Instruction::LShr:
    case llvm::Instruction::AShr:
    case llvm::Instruction::And:
    case llvm::Instruction::Or:
    case llvm::Instruction::Xor:
    case llvm::Instruction::UDiv:
    case llvm::Instruction::SDiv:
    case llvm::Instruction::URem:
    case llvm::Instruction::SRem:
      // Booleans are control, not data.
      return inst.getType()->isIntOrIntVectorTy(1) ? IrClass::none : IrClass::int_arith;
    case llvm::Instruction::Load:
      return IrClass::load;
    case llvm::Instruction::Call:
      return classify_call(llvm::cast<llvm::CallBase>(inst));
    default:
      return IrClass::none;
  }
}

std::string_view statistics_bucket(const llvm::Instruction& inst) {
  if (llvm::isa<llvm::StoreInst>(inst) || llvm::isa<llvm::AtomicRMWInst>(inst)) return "store";
  if (inst.isTerminator()) return "branch";
  if (llvm::isa<llvm::CallBase>(inst)) return "call";
  return "other";
}

void mark_ours(llvm::Instruction* inst) {
  inst->setMetadata(kOursKind, llvm::MDNode::get(inst->getContext(), {}));
}

bool is_ours(const llvm::Instruction& inst) { return inst.getMetadata(kOursKind) != nullptr; }

std::string_view pass_spelling(IrClass c) {
  switch (c) {
    case IrClass::none:
      return "none";
    case IrClass::fp_arith:
      return "fp-arith";
    case IrClass::load:
      return "load";
    case IrClass::int_arith:
      return "int-arith";
    case IrClass::exp_max:
      return "exp-max";
    case IrClass::mma:
      return "mma";
  }
  return "none";
}

std::string_view class_name(IrClass c) {
  switch (c) {
    case IrClass::fp_arith:
      return "fp_arith";
    case IrClass::int_arith:
      return "int_arith";
    case IrClass::exp_max:
      return "exp_max";
    default:
      return pass_spelling(c);
  }
}

}  // namespace ftattn::llvm_route
