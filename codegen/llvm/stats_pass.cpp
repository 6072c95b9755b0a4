#include "codegen/llvm/stats_pass.hpp"

#include <fmt/format.h>
#include <llvm/IR/Module.h>

#include <array>
#include <map>

#include "codegen/llvm/ir_classes.hpp"

namespace ftattn::llvm_route {

StageSize measure(const llvm::Module& module, std::string stage) {
  StageSize s;
  s.stage = std::move(stage);
  for (const llvm::Function& f : module) {
    if (f.isDeclaration()) continue;
    ++s.functions;
    for (const llvm::BasicBlock& block : f) {
      ++s.blocks;
      s.instructions += block.size();
    }
  }
  return s;
}

llvm::PreservedAnalyses StatsPass::run(llvm::Module& module,
                                       llvm::ModuleAnalysisManager& /*analyses*/) {
  constexpr std::array kClasses = {IrClass::fp_arith, IrClass::load, IrClass::int_arith,
                                   IrClass::exp_max, IrClass::mma};
  std::map<std::string, size_t> counts;
  for (IrClass c : kClasses) counts[std::string(class_name(c))] = 0;
  for (const char* bucket : {"store", "call", "branch", "other"}) counts[bucket] = 0;
  size_t added = 0;
  for (const llvm::Function& f : module) {
    for (const llvm::BasicBlock& block : f) {
      for (const llvm::Instruction& inst : block) {
        if (is_ours(inst)) ++added;
        const IrClass c = classify(inst);
        ++counts[c == IrClass::none ? std::string(statistics_bucket(inst))
                                    : std::string(class_name(c))];
      }
    }
  }
  if (out != nullptr) {
    out->by_class.clear();
    for (IrClass c : kClasses) {
      const std::string name(class_name(c));
      out->by_class.emplace_back(name, counts[name]);
    }
    for (const char* bucket : {"store", "call", "branch", "other"})
      out->by_class.emplace_back(bucket, counts[bucket]);
    out->by_class.emplace_back("added by passes", added);
  }
  return llvm::PreservedAnalyses::all();
}

std::string format_statistics(const Statistics& stats) {
  std::string text = "IR size by stage\n";
  text +=
      fmt::format("  {:<34} {:>9} {:>7} {:>13}\n", "stage", "functions", "blocks", "instructions");
  for (const StageSize& s : stats.stages)
    text += fmt::format("  {:<34} {:>9} {:>7} {:>13}\n", s.stage, s.functions, s.blocks,
                        s.instructions);
  if (!stats.by_class.empty()) {
    text += "instructions by class (final IR)\n";
    for (const auto& [name, count] : stats.by_class)
      text += fmt::format("  {:<34} {:>9}\n", name, count);
  }
  text += fmt::format("FMAs formed by contraction: {}\n", stats.contracted);
  text += fmt::format("instrumented sites: injection {}, hardening {}\n", stats.injected_sites,
                      stats.hardened_sites);
  return text;
}

}  // namespace ftattn::llvm_route
