#include "codegen/llvm/kernel_params.hpp"

#include <llvm/IR/CallingConv.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/Instructions.h>

#include "codegen/llvm/ir_classes.hpp"

namespace ftattn::llvm_route {
namespace {

constexpr const char* kLayoutName = "ftattn_ir_params_layout";
constexpr unsigned kLayoutFields = 9;

llvm::Instruction* ours(llvm::Value* v) {
  auto* inst = llvm::dyn_cast<llvm::Instruction>(v);
  if (inst != nullptr) mark_ours(inst);
  return inst;
}

}  // namespace

std::optional<ParamsLayout> read_params_layout(const llvm::Module& module) {
  const llvm::GlobalVariable* g = module.getGlobalVariable(kLayoutName);
  if (g == nullptr || !g->hasInitializer()) return std::nullopt;
  const auto* table = llvm::dyn_cast<llvm::ConstantDataArray>(g->getInitializer());
  if (table == nullptr || table->getNumElements() != kLayoutFields) return std::nullopt;
  auto at = [&](unsigned i) { return static_cast<int>(table->getElementAsInteger(i)); };
  ParamsLayout l;
  l.fault_log = at(0);
  l.site = at(1);
  l.cta = at(2);
  l.thread = at(3);
  l.iteration = at(4);
  l.element = at(5);
  l.bit = at(6);
  l.log_detected = at(7);
  l.site_ir = at(8);
  return l;
}

void drop_params_layout(llvm::Module& module) {
  llvm::GlobalVariable* g = module.getGlobalVariable(kLayoutName);
  if (g == nullptr) return;
  // llvm.compiler.used keeps it alive through O3; take it out of that list first.
  if (llvm::GlobalVariable* used = module.getGlobalVariable("llvm.compiler.used")) {
    llvm::SmallVector<llvm::Constant*, 4> keep;
    if (auto* list = llvm::dyn_cast<llvm::ConstantArray>(used->getInitializer())) {
      for (llvm::Use& u : list->operands()) {
        auto* c = llvm::cast<llvm::Constant>(u.get());
        if (c->stripPointerCasts() != g) keep.push_back(c);
      }
    }
    auto* elem = llvm::cast<llvm::ArrayType>(used->getValueType())->getElementType();
    used->eraseFromParent();
    if (!keep.empty()) {
      auto* type = llvm::ArrayType::get(elem, keep.size());
      auto* fresh =
          new llvm::GlobalVariable(module, type, false, llvm::GlobalValue::AppendingLinkage,
                                   llvm::ConstantArray::get(type, keep), "llvm.compiler.used");
      fresh->setSection("llvm.metadata");
    }
  }
  g->removeDeadConstantUsers();
  if (g->use_empty()) g->eraseFromParent();
}

bool is_kernel(const llvm::Function& f) {
  return !f.isDeclaration() && f.getCallingConv() == llvm::CallingConv::PTX_Kernel;
}

llvm::Argument* params_argument(llvm::Function& kernel) {
  for (llvm::Argument& arg : kernel.args()) {
    if (arg.hasByValAttr()) return &arg;
  }
  return nullptr;
}

llvm::Value* load_param_i32(llvm::IRBuilder<>& b, llvm::Value* params, int offset) {
  llvm::Value* at = b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), params, offset);
  ours(at);
  llvm::Value* v = b.CreateAlignedLoad(b.getInt32Ty(), at, llvm::Align(4));
  ours(v);
  return v;
}

llvm::Value* load_param_ptr(llvm::IRBuilder<>& b, llvm::Value* params, int offset) {
  llvm::Value* at = b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), params, offset);
  ours(at);
  llvm::Value* v = b.CreateAlignedLoad(b.getPtrTy(), at, llvm::Align(8));
  ours(v);
  return v;
}

llvm::BasicBlock::iterator setup_point(llvm::Function& kernel) {
  llvm::BasicBlock& entry = kernel.getEntryBlock();
  auto it = entry.getFirstInsertionPt();
  while (it != entry.end() && llvm::isa<llvm::AllocaInst>(*it)) ++it;
  return it;
}

}  // namespace ftattn::llvm_route
