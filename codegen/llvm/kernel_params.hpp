// Where the fault plan and the fault log live in a kernel's parameters, as the route's
// ir_layout.cuh table records them, and IR builders that read them inside a kernel.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <optional>

namespace ftattn::llvm_route {

// Byte offsets inside AttentionParams (and FaultLog::detected), read from the module.
struct ParamsLayout {
  int fault_log = 0;
  int site = 0, cta = 0, thread = 0, iteration = 0, element = 0, bit = 0;
  int log_detected = 0;
  int site_ir = 0;  // the FaultSiteId value of IR-level injection
};

// The layout table of the module, or nullopt when the unit was not compiled with it.
std::optional<ParamsLayout> read_params_layout(const llvm::Module& module);
// Removes the table once no pass needs it (it is not part of the kernel).
void drop_params_layout(llvm::Module& module);

// Kernel entry points (ptx_kernel) and their by-value params argument (nullptr if none).
bool is_kernel(const llvm::Function& f);
llvm::Argument* params_argument(llvm::Function& kernel);

// i32 / pointer loads of a params field at `offset`, marked as ours.
llvm::Value* load_param_i32(llvm::IRBuilder<>& b, llvm::Value* params, int offset);
llvm::Value* load_param_ptr(llvm::IRBuilder<>& b, llvm::Value* params, int offset);

// After the entry block's allocas: where a pass puts its per-kernel setup.
llvm::BasicBlock::iterator setup_point(llvm::Function& kernel);

}  // namespace ftattn::llvm_route
