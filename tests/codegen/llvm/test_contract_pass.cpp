// FMA contraction in IR (ftattn-contract): contractable fadd/fsub of fmul pairs become llvm.fma,
// the rest is left unfused, and an instrumented kernel therefore contracts as the plain one does.
#include <llvm/AsmParser/Parser.h>
#include <llvm/IR/IntrinsicInst.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "codegen/embedded_templates.hpp"
#include "codegen/llvm/ir_classes.hpp"
#include "codegen/llvm/pipeline.hpp"
#include "codegen/llvm/route_api.hpp"
#include "ftattn/codegen.hpp"
#include "tests/codegen/llvm/ir_fixture.hpp"
#include "tests/support/configs.hpp"

namespace {

using ftattn::test::count_calls_to;
using ftattn::test::count_opcode;
using ftattn::test::find_named;
using ftattn::test::verifies;
namespace route = ftattn::llvm_route;

// s*: pairs that contract; n*: pairs that must not; m8 keeps a use of its own (a store).
constexpr const char* kPairsIr = R"IR(
target triple = "nvptx64-nvidia-cuda"

define void @pairs(float %a, float %b, float %c, float %d, double %x, half %h, ptr %out) {
entry:
  %m1 = fmul contract float %a, %b
  %s1 = fadd contract float %m1, %c
  store volatile float %s1, ptr %out
  %m2 = fmul contract float %c, %d
  %s2 = fadd contract float %a, %m2
  store volatile float %s2, ptr %out
  %m3 = fmul contract float %a, %d
  %s3 = fsub contract float %m3, %b
  store volatile float %s3, ptr %out
  %m4 = fmul contract float %b, %c
  %s4 = fsub contract float %d, %m4
  store volatile float %s4, ptr %out
  %m5 = fmul fast float %a, %a
  %s5 = fadd fast float %m5, %d
  store volatile float %s5, ptr %out
  %m6 = fmul contract float %b, %b
  %n6 = fadd float %m6, %c
  store volatile float %n6, ptr %out
  %m7 = fmul float %c, %c
  %n7 = fadd contract float %m7, %a
  store volatile float %n7, ptr %out
  %m8 = fmul contract float %d, %d
  %s8 = fadd contract float %m8, %a
  store volatile float %s8, ptr %out
  store volatile float %m8, ptr %out
  %m9 = fmul contract double %x, %x
  %s9 = fadd contract double %x, %m9
  store volatile double %s9, ptr %out
  %p = fmul contract float %a, %c
  %q = fmul contract float %b, %d
  store volatile float %p, ptr %out
  %s10 = fadd contract float %p, %q
  store volatile float %s10, ptr %out
  %u = fmul contract float %a, %d
  %v = fmul contract float %b, %c
  %s11 = fsub contract float %u, %v
  store volatile float %s11, ptr %out
  %mh = fmul contract half %h, %h
  %nh = fadd contract half %mh, %h
  store volatile half %nh, ptr %out
  %m12 = fmul contract float %a, %b
  br label %next

next:
  %n12 = fadd contract float %m12, %d
  store volatile float %n12, ptr %out
  ret void
}
)IR";

struct Parsed {
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> module;
  explicit Parsed(const char* text) {
    llvm::SMDiagnostic error;
    module = llvm::parseAssemblyString(text, error, context);
    if (!module) throw std::runtime_error(error.getMessage().str());
  }
};

const llvm::CallBase* fma_named(const llvm::Function& f, llvm::StringRef name) {
  const auto* call = llvm::dyn_cast_or_null<llvm::IntrinsicInst>(find_named(f, name));
  return call != nullptr && call->getIntrinsicID() == llvm::Intrinsic::fma ? call : nullptr;
}

bool is_value(const llvm::Value* v, llvm::StringRef name) { return v->getName() == name; }

bool is_fneg_of(const llvm::Value* v, llvm::StringRef name) {
  const auto* neg = llvm::dyn_cast<llvm::UnaryOperator>(v);
  return neg != nullptr && neg->getOpcode() == llvm::Instruction::FNeg &&
         is_value(neg->getOperand(0), name);
}

bool has_contract(const llvm::Function& f, llvm::StringRef name) {
  return find_named(f, name)->hasAllowContract();
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The generated unit of `name` through the route, without the cubin; `contract` false drops
// the ftattn-contract stage from its pass list.
route::Result compile(const std::string& name, ftattn::IrClass inject, bool contract) {
  ftattn::KernelConfig config = ftattn::KernelConfig::parse(name);
  config.ir_inject = inject;
  const ftattn::codegen::KernelSource source = ftattn::codegen::generate(config);
  route::Request request;
  request.name = source.name;
  request.symbol = source.symbol;
  request.text = source.text;
  for (const auto& f : ftattn::codegen::embedded_templates())
    request.headers.emplace_back(std::string(f.path), std::string(f.text));
  request.clang_args = source.options;
  request.arch = ftattn::codegen::nvrtc_arch(config.arch);
  request.passes = source.passes;
  if (!contract) std::erase(request.passes, std::string("ftattn-contract"));
  request.link_cubin = false;
  route::Result result;
  std::string error;
  const bool ok = route::compile(request, result, error);
  INFO(error << "\n" << result.log);
  REQUIRE(ok);
  return result;
}

}  // namespace

TEST_CASE("contraction turns contractable fmul + fadd/fsub pairs into llvm.fma", "[llvm]") {
  Parsed ir(kPairsIr);
  route::Statistics stats;
  std::string error;
  REQUIRE(route::run_pipeline(*ir.module, nullptr, {"ftattn-contract"}, stats, error));
  INFO(error);
  REQUIRE(verifies(*ir.module));
  const llvm::Function& f = *ir.module->getFunction("pairs");
  CHECK(stats.contracted == 9);
  CHECK(count_calls_to(f, "llvm.fma.f32") == 8);
  CHECK(count_calls_to(f, "llvm.fma.f64") == 1);

  // fadd(a*b, c) = fma(a, b, c); fadd(a, c*d) = fma(c, d, a).
  const llvm::CallBase* s1 = fma_named(f, "s1");
  REQUIRE(s1 != nullptr);
  CHECK((is_value(s1->getArgOperand(0), "a") && is_value(s1->getArgOperand(1), "b") &&
         is_value(s1->getArgOperand(2), "c")));
  const llvm::CallBase* s2 = fma_named(f, "s2");
  REQUIRE(s2 != nullptr);
  CHECK((is_value(s2->getArgOperand(0), "c") && is_value(s2->getArgOperand(1), "d") &&
         is_value(s2->getArgOperand(2), "a")));
  // a*d - b = fma(a, d, -b); d - b*c = fma(-b, c, d).
  const llvm::CallBase* s3 = fma_named(f, "s3");
  REQUIRE(s3 != nullptr);
  CHECK((is_value(s3->getArgOperand(0), "a") && is_value(s3->getArgOperand(1), "d") &&
         is_fneg_of(s3->getArgOperand(2), "b")));
  const llvm::CallBase* s4 = fma_named(f, "s4");
  REQUIRE(s4 != nullptr);
  CHECK((is_fneg_of(s4->getArgOperand(0), "b") && is_value(s4->getArgOperand(1), "c") &&
         is_value(s4->getArgOperand(2), "d")));
  // fast includes contract; f64 contracts too.
  CHECK(fma_named(f, "s5") != nullptr);
  CHECK(fma_named(f, "s9") != nullptr);
  // An fmul with another use fuses into its fadd and stays for the store.
  const llvm::CallBase* s8 = fma_named(f, "s8");
  REQUIRE(s8 != nullptr);
  CHECK(is_value(s8->getArgOperand(0), "d"));
  REQUIRE(find_named(f, "m8") != nullptr);
  CHECK(find_named(f, "m8")->hasOneUse());
  // Fused products with no use left are gone.
  for (const char* gone : {"m1", "m2", "m3", "m4", "m5", "m9"}) {
    INFO(gone);
    CHECK(find_named(f, gone) == nullptr);
  }
  // Two products: the one with fewer uses fuses (q: p is also stored); on a tie, the first.
  const llvm::CallBase* s10 = fma_named(f, "s10");
  REQUIRE(s10 != nullptr);
  CHECK((is_value(s10->getArgOperand(0), "b") && is_value(s10->getArgOperand(2), "p")));
  const llvm::CallBase* s11 = fma_named(f, "s11");
  REQUIRE(s11 != nullptr);
  CHECK((is_value(s11->getArgOperand(0), "a") && is_fneg_of(s11->getArgOperand(2), "v")));

  // Not contracted: a plain fadd, a plain fmul, an fmul of another block, f16.
  for (const char* kept : {"n6", "n7", "n12", "nh"}) {
    INFO(kept);
    REQUIRE(find_named(f, kept) != nullptr);
    CHECK(find_named(f, kept)->getOpcode() == llvm::Instruction::FAdd);
  }
  // What is left unfused may not be fused by the back end either (f16 is left as it was).
  for (const char* cleared : {"m6", "n7", "m8", "p", "v", "m12", "n12"}) {
    INFO(cleared);
    CHECK_FALSE(has_contract(f, cleared));
  }
  CHECK(has_contract(f, "mh"));
  CHECK(has_contract(f, "nh"));
  CHECK(count_opcode(f, llvm::Instruction::FAdd).original == 4);
  CHECK(count_opcode(f, llvm::Instruction::FSub).original == 0);
}

TEST_CASE("contraction leaves code without contractable pairs alone", "[llvm]") {
  llvm::LLVMContext context;
  auto module = ftattn::test::parse_kernel_ir(context);  // its fadd has no contract flag
  route::Statistics stats;
  std::string error;
  REQUIRE(route::run_pipeline(*module, nullptr, {"ftattn-contract"}, stats, error));
  CHECK(stats.contracted == 0);
  CHECK(count_calls_to(*module->getFunction("kernel"), "llvm.fma") == 0);
  CHECK(count_opcode(*module->getFunction("kernel"), llvm::Instruction::FMul).original == 1);
  CHECK(verifies(*module));
}

TEST_CASE("the FMAs formed are fp_arith values for injection and hardening", "[llvm]") {
  Parsed ir(kPairsIr);
  route::Statistics stats;
  std::string error;
  REQUIRE(route::run_pipeline(*ir.module, nullptr, {"ftattn-contract"}, stats, error));
  const llvm::Function& f = *ir.module->getFunction("pairs");
  for (const char* name : {"s1", "s4", "s9"}) {
    INFO(name);
    CHECK(route::classify(*find_named(f, name)) == ftattn::IrClass::fp_arith);
  }
}

TEST_CASE("every LLVM-route kernel contracts in IR, right after O3", "[llvm]") {
  for (ftattn::IrClass inject : {ftattn::IrClass::none, ftattn::IrClass::fp_arith}) {
    ftattn::KernelConfig c =
        ftattn::KernelConfig::parse("ftattn_fwd_sm90a_f16_d64_m128n64_w4s2_none_none_llvm");
    c.ir_inject = inject;
    const auto passes = ftattn::codegen::generate(c).passes;
    REQUIRE(passes.size() >= 3);
    CHECK(passes[1] == "default<O3>");
    CHECK(passes[2] == "ftattn-contract");
  }
}

TEST_CASE("an fp_arith-instrumented kernel has the plain kernel's FMAs", "[llvm]") {
  // The kernel of the GPU test "IR-level injection flips one dynamic instance as planned".
  const std::string name = "ftattn_fwd_sm90a_f16_d64_m128n64_w4s2_none_none_llvm";
  const auto plain = compile(name, ftattn::IrClass::none, true);
  const auto injected = compile(name, ftattn::IrClass::fp_arith, true);
  const size_t fmas = count(plain.ptx, "fma.rn.f32");
  INFO("plain " << fmas << ", instrumented " << count(injected.ptx, "fma.rn.f32"));
  CHECK(plain.stats.contracted > 0);
  CHECK(fmas > 0);
  // The condition for the instrumented kernel to compute, unplanned, what the plain one does.
  CHECK(count(injected.ptx, "fma.rn.f32") == fmas);
  CHECK(injected.stats.contracted == plain.stats.contracted);
  CHECK(injected.stats.injected_sites > 0);
  // Every fp add and multiply left over carries .rn in both, so ptxas fuses none either.
  for (const auto* r : {&plain, &injected}) {
    CHECK(count(r->ptx, "\tmul.f32") + count(r->ptx, "\tadd.f32") + count(r->ptx, "\tsub.f32") ==
          0);
    CHECK(count(r->ptx, "\tmul.rn.f32") > 0);
  }
  // The other classes the GPU test instruments keep them too.
  for (ftattn::IrClass other : {ftattn::IrClass::exp_max, ftattn::IrClass::mma}) {
    INFO(ftattn::to_string(other));
    CHECK(count(compile(name, other, true).ptx, "fma.rn.f32") == fmas);
  }

  // Without the stage the back end fuses the plain kernel's pairs but not the instrumented
  // ones (the check after each fmul sits between it and its fadd): what the GPU saw.
  const auto plain_late = compile(name, ftattn::IrClass::none, false);
  const auto injected_late = compile(name, ftattn::IrClass::fp_arith, false);
  INFO("without ftattn-contract: plain " << count(plain_late.ptx, "fma.rn.f32") << ", instrumented "
                                         << count(injected_late.ptx, "fma.rn.f32"));
  CHECK(count(injected_late.ptx, "fma.rn.f32") < count(plain_late.ptx, "fma.rn.f32"));
  // The stage forms the FMAs the back end formed in the plain kernel: it rounds as before.
  CHECK(count(plain_late.ptx, "fma.rn.f32") == fmas);
}
