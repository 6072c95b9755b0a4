// The front end of the LLVM route: a generated unit and its headers -> an LLVM module, through
// clang's CUDA device compilation, in memory (no files, no CUDA headers).
#pragma once

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>
#include <string>

#include "codegen/llvm/route_api.hpp"

namespace ftattn::llvm_route {

// The module, unoptimised (clang's passes disabled; ours and O3 run next), or nullptr with the
// diagnostics in `diagnostics`. Warnings land there too.
std::unique_ptr<llvm::Module> compile_to_ir(const Request& request, llvm::LLVMContext& context,
                                            std::string& diagnostics);

}  // namespace ftattn::llvm_route
