// Each IR pass on a small kernel module, without a GPU: instrumentation where it belongs,
// none elsewhere, and a module that verifies.
#include <llvm/IR/InlineAsm.h>

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "codegen/llvm/kernel_params.hpp"
#include "codegen/llvm/pipeline.hpp"
#include "tests/codegen/llvm/ir_fixture.hpp"

namespace {

using ftattn::test::count_asm_calls;
using ftattn::test::count_calls_to;
using ftattn::test::count_opcode;
using ftattn::test::find_named;
using ftattn::test::verifies;
namespace route = ftattn::llvm_route;

struct Run {
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> module;
  route::Statistics stats;
  std::string error;
  bool ok = false;

  explicit Run(const std::vector<std::string>& stages) {
    module = ftattn::test::parse_kernel_ir(context);
    ok = route::run_pipeline(*module, nullptr, stages, stats, error);
  }
  llvm::Function& kernel() { return *module->getFunction("kernel"); }
  llvm::Function& helper() { return *module->getFunction("helper"); }
};

// Does `value`'s every use go through the injection (a bitcast/xor chain marked as ours)?
bool all_uses_instrumented(const llvm::Instruction& value) {
  if (value.use_empty()) return false;
  for (const llvm::User* user : value.users()) {
    const auto* inst = llvm::dyn_cast<llvm::Instruction>(user);
    if (inst == nullptr || !route::is_ours(*inst)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("the fixture module holds one value of each class and verifies") {
  Run run({"ftattn-stats"});
  REQUIRE(run.ok);
  REQUIRE(verifies(*run.module));
  std::map<std::string, size_t> by_class(run.stats.by_class.begin(), run.stats.by_class.end());
  CHECK(by_class["fp_arith"] == 3);  // fadd, fmul in the kernel; fadd in the helper
  CHECK(by_class["load"] == 1);
  CHECK(by_class["int_arith"] == 1);
  CHECK(by_class["exp_max"] == 2);  // ex2 asm and maxnum
  CHECK(by_class["mma"] == 1);
  CHECK(by_class["store"] == 1);
  CHECK(by_class["added by passes"] == 0);
  REQUIRE(run.stats.stages.size() == 2);
  CHECK(run.stats.stages[0].stage == "clang");
  CHECK(run.stats.stages[0].functions == 2);
  CHECK(run.stats.stages[1].instructions == run.stats.stages[0].instructions);
}

TEST_CASE("injection instruments exactly its class, in kernels only") {
  struct Case {
    std::string cls;
    size_t sites;
    std::vector<std::string> instrumented;
    std::vector<std::string> untouched;
  };
  const std::vector<Case> cases = {
      {"fp-arith", 2, {"sum", "prod"}, {"x", "e", "m", "i", "acc"}},
      {"load", 1, {"x"}, {"sum", "prod", "i"}},
      {"int-arith", 1, {"i"}, {"x", "sum", "acc"}},
      {"exp-max", 2, {"e", "m"}, {"sum", "x"}},
      {"mma", 1, {"acc"}, {"sum", "e", "m"}},
  };
  for (const Case& c : cases) {
    SECTION(c.cls) {
      Run run({"ftattn-inject<" + c.cls + ">"});
      INFO(run.error);
      REQUIRE(run.ok);
      REQUIRE(verifies(*run.module));
      CHECK(run.stats.injected_sites == c.sites);
      for (const std::string& name : c.instrumented) {
        INFO(name);
        CHECK(all_uses_instrumented(*find_named(run.kernel(), name)));
      }
      for (const std::string& name : c.untouched) {
        INFO(name);
        CHECK_FALSE(all_uses_instrumented(*find_named(run.kernel(), name)));
      }
      // The plan is read from the params and the thread's identity from special registers.
      CHECK(count_calls_to(run.kernel(), "llvm.nvvm.read.ptx.sreg.tid.x") == 1);
      CHECK(count_calls_to(run.kernel(), "llvm.nvvm.read.ptx.sreg.ctaid") == 3);
      // The helper is no kernel: it has no plan to read and stays as it was.
      CHECK(count_opcode(run.helper(), llvm::Instruction::FAdd).original == 1);
      CHECK(count_opcode(run.helper(), llvm::Instruction::Xor).ours == 0);
      // Counting mode: one report of the instance count per exit.
      CHECK(count_opcode(run.kernel(), llvm::Instruction::AtomicRMW).ours == 1);
      // The instance counter was promoted: no alloca is left behind.
      CHECK(count_opcode(run.kernel(), llvm::Instruction::Alloca).ours == 0);
    }
  }
}

TEST_CASE("an mma result flips one element chosen at launch") {
  Run run({"ftattn-inject<mma>"});
  REQUIRE(run.ok);
  // One xor per element of the { float x 4 } result, each with its own select.
  CHECK(count_opcode(run.kernel(), llvm::Instruction::Xor).ours == 4);
  CHECK(count_opcode(run.kernel(), llvm::Instruction::InsertValue).ours == 4);
}

TEST_CASE("a module without the params layout is left alone") {
  llvm::LLVMContext context;
  auto module = ftattn::test::parse_kernel_ir(context);
  route::drop_params_layout(*module);
  CHECK(module->getGlobalVariable("ftattn_ir_params_layout") == nullptr);
  CHECK(module->getGlobalVariable("llvm.compiler.used") == nullptr);
  REQUIRE(verifies(*module));
  route::Statistics stats;
  std::string error;
  REQUIRE(route::run_pipeline(
      *module, nullptr, {"ftattn-inject<fp-arith>", "ftattn-harden<fp-arith>"}, stats, error));
  CHECK(stats.injected_sites == 0);
  CHECK(stats.hardened_sites == 0);
}

TEST_CASE("hardening duplicates its class and reports through the fault log") {
  SECTION("fp-arith") {
    Run run({"ftattn-harden<fp-arith>"});
    INFO(run.error);
    REQUIRE(run.ok);
    REQUIRE(verifies(*run.module));
    CHECK(run.stats.hardened_sites == 2);
    CHECK(count_opcode(run.kernel(), llvm::Instruction::FAdd).original == 1);
    CHECK(count_opcode(run.kernel(), llvm::Instruction::FAdd).ours == 1);
    CHECK(count_opcode(run.kernel(), llvm::Instruction::FMul).ours == 1);
    // Both copies round alike: the hardened fmul is no longer contractible.
    CHECK_FALSE(
        llvm::cast<llvm::Instruction>(find_named(run.kernel(), "prod"))->hasAllowContract());
    // The copies' first operand goes through the launch-time zero.
    CHECK(count_opcode(run.kernel(), llvm::Instruction::Xor).ours == 2);
    // One report per thread on the way out, guarded by a null check of the log.
    CHECK(count_opcode(run.kernel(), llvm::Instruction::AtomicRMW).ours == 1);
    CHECK(count_opcode(run.kernel(), llvm::Instruction::Ret).original == 1);
    // Other classes and the helper are not duplicated.
    CHECK(count_opcode(run.kernel(), llvm::Instruction::Load).original == 1);
    CHECK(count_asm_calls(run.kernel(), "mma.sync") == 1);
    CHECK(count_opcode(run.helper(), llvm::Instruction::FAdd).ours == 0);
  }
  SECTION("mma") {
    Run run({"ftattn-harden<mma>"});
    REQUIRE(run.ok);
    REQUIRE(verifies(*run.module));
    CHECK(run.stats.hardened_sites == 1);
    CHECK(count_asm_calls(run.kernel(), "mma.sync") == 2);
    CHECK(count_asm_calls(run.kernel(), "ex2.") == 1);
  }
  SECTION("int-arith and exp-max") {
    Run run({"ftattn-harden<int-arith>", "ftattn-harden<exp-max>"});
    REQUIRE(run.ok);
    REQUIRE(verifies(*run.module));
    CHECK(count_opcode(run.kernel(), llvm::Instruction::Add).original == 1);
    CHECK(count_opcode(run.kernel(), llvm::Instruction::Add).ours == 1);
    CHECK(count_asm_calls(run.kernel(), "ex2.") == 2);
    CHECK(count_calls_to(run.kernel(), "llvm.maxnum") == 2);
  }
  SECTION("loads cannot be hardened") {
    Run run({"ftattn-harden<load>"});
    CHECK_FALSE(run.ok);
    CHECK_THAT(run.error, Catch::Contains("fp-arith, int-arith, exp-max or mma"));
  }
}

TEST_CASE("injection after hardening flips what the comparison sees, not the copies") {
  Run run({"ftattn-harden<fp-arith>", "ftattn-inject<fp-arith>", "ftattn-stats"});
  INFO(run.error);
  REQUIRE(run.ok);
  REQUIRE(verifies(*run.module));
  CHECK(run.stats.hardened_sites == 2);
  CHECK(run.stats.injected_sites == 2);  // the originals, not their copies
  // The original's uses, the comparison included, see the injected value.
  const llvm::Instruction* sum = find_named(run.kernel(), "sum");
  CHECK(all_uses_instrumented(*sum));
  REQUIRE(run.stats.stages.size() == 4);
  CHECK(run.stats.stages[1].instructions > run.stats.stages[0].instructions);
  CHECK(run.stats.stages[2].instructions > run.stats.stages[1].instructions);
}

TEST_CASE("inline-all makes device functions always-inline, not kernels") {
  Run run({"ftattn-inline-all"});
  REQUIRE(run.ok);
  CHECK(run.helper().hasFnAttribute(llvm::Attribute::AlwaysInline));
  CHECK_FALSE(run.kernel().hasFnAttribute(llvm::Attribute::AlwaysInline));
}

TEST_CASE("bad pass stages are refused with the stage named") {
  Run unknown_class({"ftattn-inject<everything>"});
  CHECK_FALSE(unknown_class.ok);
  CHECK_THAT(unknown_class.error, Catch::Contains("ftattn-inject<everything>"));
  Run unknown_option({"ftattn-inject<fp-arith;where=here>"});
  CHECK_FALSE(unknown_option.ok);
  CHECK_THAT(unknown_option.error, Catch::Contains("functions="));
}
