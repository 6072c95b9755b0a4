#include "codegen/llvm/bits.hpp"

#include <llvm/IR/Module.h>

#include "codegen/llvm/ir_classes.hpp"

namespace ftattn::llvm_route {

llvm::Value* ours(llvm::Value* v) {
  if (auto* inst = llvm::dyn_cast<llvm::Instruction>(v)) mark_ours(inst);
  return v;
}

unsigned bit_width(const llvm::Type* type, const llvm::DataLayout& layout) {
  const llvm::Type* scalar = type->getScalarType();
  if (!scalar->isIntegerTy() && !scalar->isFloatingPointTy() && !scalar->isPointerTy()) return 0;
  if (type->isVectorTy() && !llvm::isa<llvm::FixedVectorType>(type)) return 0;
  return static_cast<unsigned>(layout.getTypeSizeInBits(const_cast<llvm::Type*>(type)));
}

llvm::Value* to_bits(llvm::IRBuilder<>& b, llvm::Value* v) {
  llvm::Type* type = v->getType();
  if (type->isIntegerTy()) return v;
  const llvm::DataLayout& layout = b.GetInsertBlock()->getModule()->getDataLayout();
  llvm::Type* as_int = b.getIntNTy(bit_width(type, layout));
  if (type->isPointerTy()) return ours(b.CreatePtrToInt(v, as_int));
  if (type->isVectorTy() && type->getScalarType()->isPointerTy()) {
    auto* ints = llvm::VectorType::get(layout.getIntPtrType(type->getScalarType()),
                                       llvm::cast<llvm::VectorType>(type));
    return ours(b.CreateBitCast(ours(b.CreatePtrToInt(v, ints)), as_int));
  }
  return ours(b.CreateBitCast(v, as_int));
}

llvm::Value* from_bits(llvm::IRBuilder<>& b, llvm::Value* bits, llvm::Type* type) {
  if (type->isIntegerTy()) return bits;
  if (type->isPointerTy()) return ours(b.CreateIntToPtr(bits, type));
  if (type->isVectorTy() && type->getScalarType()->isPointerTy()) {
    const llvm::DataLayout& layout = b.GetInsertBlock()->getModule()->getDataLayout();
    auto* ints = llvm::VectorType::get(layout.getIntPtrType(type->getScalarType()),
                                       llvm::cast<llvm::VectorType>(type));
    return ours(b.CreateIntToPtr(ours(b.CreateBitCast(bits, ints)), type));
  }
  return ours(b.CreateBitCast(bits, type));
}

llvm::Value* xor_bits(llvm::IRBuilder<>& b, llvm::Value* v, llvm::Value* mask) {
  return from_bits(b, ours(b.CreateXor(to_bits(b, v), mask)), v->getType());
}

llvm::Value* resize(llvm::IRBuilder<>& b, llvm::Value* i32, unsigned width) {
  return ours(b.CreateZExtOrTrunc(i32, b.getIntNTy(width)));
}

}  // namespace ftattn::llvm_route
