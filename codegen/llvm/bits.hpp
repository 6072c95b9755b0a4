// A value's bits as an integer of the same width and back: how the injection pass flips a bit
// and the hardening pass perturbs and compares values of any scalar or vector type.
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace ftattn::llvm_route {

// Width in bits of a value the passes can treat as bits (int, fp, pointer, vectors of them), or
// 0 for anything else (aggregates, void, labels).
unsigned bit_width(const llvm::Type* type, const llvm::DataLayout& layout);

// `v` as an integer of bit_width bits; every instruction created is marked as ours.
llvm::Value* to_bits(llvm::IRBuilder<>& b, llvm::Value* v);
// Inverse of to_bits for `type`.
llvm::Value* from_bits(llvm::IRBuilder<>& b, llvm::Value* bits, llvm::Type* type);
// `v` xor `mask`, where mask is an integer as wide as v's bits.
llvm::Value* xor_bits(llvm::IRBuilder<>& b, llvm::Value* v, llvm::Value* mask);
// An i32 value (zero-extended or truncated) as an integer of `width` bits.
llvm::Value* resize(llvm::IRBuilder<>& b, llvm::Value* i32, unsigned width);

// Marks the instructions a builder call created (a Value that is an Instruction) as ours.
llvm::Value* ours(llvm::Value* v);

}  // namespace ftattn::llvm_route
