#include "codegen/llvm/pipeline.hpp"

#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>

#include <optional>

#include "codegen/llvm/contract_pass.hpp"
#include "codegen/llvm/fault_inject_pass.hpp"
#include "codegen/llvm/harden_pass.hpp"
#include "codegen/llvm/inline_all_pass.hpp"
#include "codegen/llvm/ir_classes.hpp"
#include "codegen/llvm/stats_pass.hpp"

namespace ftattn::llvm_route {
namespace {

std::optional<IrClass> class_from_spelling(llvm::StringRef text) {
  for (IrClass c :
       {IrClass::fp_arith, IrClass::load, IrClass::int_arith, IrClass::exp_max, IrClass::mma}) {
    if (text == llvm::StringRef(pass_spelling(c).data(), pass_spelling(c).size())) return c;
  }
  return std::nullopt;
}

// "NAME<PARAMS>" -> PARAMS, when the stage is NAME with parameters.
std::optional<llvm::StringRef> parameters(llvm::StringRef stage, llvm::StringRef name) {
  if (!stage.consume_front(name) || !stage.consume_front("<") || !stage.consume_back(">"))
    return std::nullopt;
  return stage;
}

}  // namespace

bool run_pipeline(llvm::Module& module, llvm::TargetMachine* target,
                  const std::vector<std::string>& stages, Statistics& stats, std::string& error) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder builder(target);
  std::string parse_error;

  builder.registerPipelineParsingCallback([&](llvm::StringRef stage,
                                              llvm::ModulePassManager& passes,
                                              llvm::ArrayRef<llvm::PassBuilder::PipelineElement>) {
    if (stage == "ftattn-inline-all") {
      passes.addPass(InlineAllPass());
      return true;
    }
    if (stage == "ftattn-contract") {
      ContractPass pass;
      pass.formed = &stats.contracted;
      passes.addPass(std::move(pass));
      return true;
    }
    if (stage == "ftattn-stats") {
      StatsPass pass;
      pass.out = &stats;
      passes.addPass(std::move(pass));
      return true;
    }
    if (auto p = parameters(stage, "ftattn-harden")) {
      auto c = class_from_spelling(*p);
      if (!c || *c == IrClass::load) {
        parse_error =
            "ftattn-harden takes fp-arith, int-arith, exp-max or mma, not '" + p->str() + "'";
        return false;
      }
      HardenPass pass;
      pass.target = *c;
      pass.sites = &stats.hardened_sites;
      passes.addPass(std::move(pass));
      return true;
    }
    if (auto p = parameters(stage, "ftattn-inject")) {
      auto [cls, rest] = p->split(';');
      auto c = class_from_spelling(cls);
      if (!c) {
        parse_error = "ftattn-inject takes fp-arith, load, int-arith, exp-max or mma, not '" +
                      cls.str() + "'";
        return false;
      }
      FaultInjectPass pass;
      pass.target = *c;
      pass.sites = &stats.injected_sites;
      if (rest.consume_front("functions=")) {
        llvm::SmallVector<llvm::StringRef, 4> names;
        rest.split(names, '|', -1, false);
        for (llvm::StringRef n : names) pass.functions.push_back(n.str());
      } else if (!rest.empty()) {
        parse_error =
            "ftattn-inject: unknown option '" + rest.str() + "' (expected functions=NAME|NAME...)";
        return false;
      }
      passes.addPass(std::move(pass));
      return true;
    }
    return false;
  });

  builder.registerModuleAnalyses(mam);
  builder.registerCGSCCAnalyses(cgam);
  builder.registerFunctionAnalyses(fam);
  builder.registerLoopAnalyses(lam);
  builder.crossRegisterProxies(lam, fam, cgam, mam);

  stats.stages.push_back(measure(module, "clang"));
  for (const std::string& stage : stages) {
    llvm::ModulePassManager passes;
    if (llvm::Error e = builder.parsePassPipeline(passes, stage)) {
      const std::string llvm_error = llvm::toString(std::move(e));
      error = "pass stage '" + stage + "': " + (parse_error.empty() ? llvm_error : parse_error);
      return false;
    }
    passes.run(module, mam);
    std::string broken;
    llvm::raw_string_ostream why(broken);
    if (llvm::verifyModule(module, &why)) {
      error = "the module does not verify after '" + stage + "': " + broken;
      return false;
    }
    stats.stages.push_back(measure(module, stage));
    // Analyses of the old IR must not leak into the next stage.
    mam.clear();
  }
  return true;
}

}  // namespace ftattn::llvm_route
