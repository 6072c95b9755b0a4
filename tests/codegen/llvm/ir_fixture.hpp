// A small hand-written kernel module with one value of every class, for the pass tests.
#pragma once

#include <llvm/AsmParser/Parser.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>

#include <memory>
#include <string>

#include "codegen/llvm/ir_classes.hpp"

namespace ftattn::test {

// Params: { fault_log pointer at 0, then site, cta, thread, iteration, element, bit }. The
// kernel holds 2 fp ops, 1 load, 1 integer add, ex2 asm + maxnum, 1 mma asm; the helper (not a
// kernel) one more fadd.
inline constexpr const char* kKernelIr = R"IR(
target triple = "nvptx64-nvidia-cuda"

@ftattn_ir_params_layout = addrspace(4) externally_initialized constant [9 x i32] [i32 0, i32 8, i32 12, i32 16, i32 20, i32 24, i32 28, i32 0, i32 8], align 4
@llvm.compiler.used = appending global [1 x ptr] [ptr addrspacecast (ptr addrspace(4) @ftattn_ir_params_layout to ptr)], section "llvm.metadata"

define ptx_kernel void @kernel(ptr byval({ ptr, [6 x i32] }) align 8 %params, ptr %data, i32 %n) {
entry:
  %x = load float, ptr %data, align 4
  %sum = fadd float %x, 1.0
  %prod = fmul contract float %sum, %x
  %e = call float asm "ex2.approx.ftz.f32 $0, $1;", "=f,f"(float %prod)
  %m = call float @llvm.maxnum.f32(float %e, float %x)
  %acc = call { float, float, float, float } asm sideeffect "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};", "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f"(i32 %n, i32 %n, i32 %n, i32 %n, i32 %n, i32 %n, float %m, float %m, float %m, float %m)
  %a0 = extractvalue { float, float, float, float } %acc, 0
  %i = add i32 %n, 7
  %idx = zext i32 %i to i64
  %p = getelementptr float, ptr %data, i64 %idx
  store float %a0, ptr %p, align 4
  ret void
}

define float @helper(float %a) {
  %r = fadd float %a, %a
  ret float %r
}

declare float @llvm.maxnum.f32(float, float)
)IR";

inline std::unique_ptr<llvm::Module> parse_kernel_ir(llvm::LLVMContext& context) {
  llvm::SMDiagnostic error;
  auto module = llvm::parseAssemblyString(kKernelIr, error, context);
  if (!module) {
    std::string text;
    llvm::raw_string_ostream out(text);
    error.print("kernel.ll", out);
    throw std::runtime_error(text);
  }
  return module;
}

inline bool verifies(const llvm::Module& module) { return !llvm::verifyModule(module, nullptr); }

// Instructions of `f` with `opcode`, counting ours (added by a pass) and the original ones.
struct OpcodeCount {
  int original = 0;
  int ours = 0;
};
inline OpcodeCount count_opcode(const llvm::Function& f, unsigned opcode) {
  OpcodeCount c;
  for (const llvm::BasicBlock& block : f)
    for (const llvm::Instruction& inst : block)
      if (inst.getOpcode() == opcode) (llvm_route::is_ours(inst) ? c.ours : c.original)++;
  return c;
}

inline const llvm::Instruction* find_named(const llvm::Function& f, llvm::StringRef name) {
  for (const llvm::BasicBlock& block : f)
    for (const llvm::Instruction& inst : block)
      if (inst.getName() == name) return &inst;
  return nullptr;
}

inline int count_calls_to(const llvm::Function& f, llvm::StringRef callee_prefix) {
  int n = 0;
  for (const llvm::BasicBlock& block : f)
    for (const llvm::Instruction& inst : block)
      if (const auto* call = llvm::dyn_cast<llvm::CallBase>(&inst))
        if (const llvm::Function* callee = call->getCalledFunction())
          if (callee->getName().starts_with(callee_prefix)) ++n;
  return n;
}

inline int count_asm_calls(const llvm::Function& f, llvm::StringRef text_prefix) {
  int n = 0;
  for (const llvm::BasicBlock& block : f)
    for (const llvm::Instruction& inst : block)
      if (const auto* call = llvm::dyn_cast<llvm::CallBase>(&inst))
        if (const auto* as = llvm::dyn_cast<llvm::InlineAsm>(call->getCalledOperand()))
          if (llvm::StringRef(as->getAsmString()).starts_with(text_prefix)) ++n;
  return n;
}

}  // namespace ftattn::test
