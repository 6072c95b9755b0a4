// Runs the route's pass list over a module, one stage at a time, measuring the IR after each.
// Stages are LLVM pipeline texts; ours are registered under these names:
//   ftattn-inline-all
//   ftattn-contract
//   ftattn-harden<CLASS>
//   ftattn-inject<CLASS>  or  ftattn-inject<CLASS;functions=NAME|NAME...>
//   ftattn-stats
// CLASS: fp-arith, load, int-arith, exp-max, mma. Anything else goes to LLVM's parser
// (e.g. default<O3>).
#pragma once

#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <string>
#include <vector>

#include "codegen/llvm/route_api.hpp"

namespace ftattn::llvm_route {

// Throws nothing; returns false with `error` naming the stage that could not be parsed or that
// left a broken module.
bool run_pipeline(llvm::Module& module, llvm::TargetMachine* target,
                  const std::vector<std::string>& stages, Statistics& stats, std::string& error);

}  // namespace ftattn::llvm_route
