// The whole LLVM route on generated units, without a GPU: PTX with the kernel entry, a cubin
// with a ptxas report, the same cache and keys that follow the pass list.
#include <catch2/catch.hpp>
#include <string>

#include "codegen/embedded_templates.hpp"
#include "codegen/llvm/route_api.hpp"
#include "ftattn/codegen.hpp"
#include "ftattn/runtime.hpp"
#include "runtime/cache_key.hpp"
#include "runtime/llvm_route.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

using ftattn::Arch;
using ftattn::Backend;
using ftattn::IrClass;
using ftattn::KernelConfig;

KernelConfig llvm_config(IrClass inject = IrClass::none, IrClass harden = IrClass::none) {
  KernelConfig c = ftattn::test::tile_config(64, 64, 64, 4, 2, Arch::parse("sm_80"));
  c.backend = Backend::llvm;
  c.ir_inject = inject;
  c.ir_harden = harden;
  return c;
}

// The route called directly, with a pass list of the test's choosing.
ftattn::llvm_route::Result compile_with_passes(const std::vector<std::string>& passes) {
  ftattn::codegen::KernelSource source = ftattn::codegen::generate(llvm_config());
  ftattn::llvm_route::Request request;
  request.name = source.name;
  request.symbol = source.symbol;
  request.text = source.text;
  for (const auto& f : ftattn::codegen::embedded_templates())
    request.headers.emplace_back(std::string(f.path), std::string(f.text));
  request.clang_args = source.options;
  request.arch = "sm_80";
  request.passes = passes;
  request.link_cubin = false;
  ftattn::llvm_route::Result result;
  std::string error;
  const bool ok = ftattn::llvm_route::compile(request, result, error);
  INFO(error << "\n" << result.log);
  REQUIRE(ok);
  return result;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("the LLVM route's source: clang options, pass list, same unit") {
  const KernelConfig plain = llvm_config();
  const auto source = ftattn::codegen::generate(plain);
  CHECK(source.backend == Backend::llvm);
  CHECK(contains(source.name, "_llvm"));
  CHECK(source.options.front() == "--cuda-gpu-arch=sm_80");
  CHECK(source.passes == std::vector<std::string>{"ftattn-inline-all", "default<O3>",
                                                  "ftattn-contract", "ftattn-stats"});
  const auto both = ftattn::codegen::generate(llvm_config(IrClass::fp_arith, IrClass::mma));
  CHECK(both.passes == std::vector<std::string>{"ftattn-inline-all", "default<O3>",
                                                "ftattn-contract", "ftattn-harden<mma>",
                                                "ftattn-inject<fp-arith>", "ftattn-stats"});
}

TEST_CASE("LLVM-route cache keys follow the pass list, the route and the LLVM version") {
  KernelConfig nvrtc = llvm_config();
  nvrtc.backend = Backend::nvrtc;
  const auto plain = ftattn::codegen::generate(llvm_config());
  const std::string key = ftattn::runtime::cache_key(plain);
  CHECK(key == ftattn::runtime::cache_key(ftattn::codegen::generate(llvm_config())));
  CHECK(key != ftattn::runtime::cache_key(ftattn::codegen::generate(nvrtc)));
  CHECK(key != ftattn::runtime::cache_key(ftattn::codegen::generate(llvm_config(IrClass::load))));
  // Same source and options, another pass list: another key.
  auto reordered = plain;
  reordered.passes = {"ftattn-inline-all", "ftattn-stats"};
  CHECK(key != ftattn::runtime::cache_key(reordered));
  CHECK(ftattn::runtime::llvm_version().starts_with("22."));
  CHECK(ftattn::runtime::llvm_route_hash().size() == 64);
}

TEST_CASE("the route's compiler is named from the libraries loaded, not the headers built with") {
  const ftattn::runtime::LlvmCompiler& here = ftattn::runtime::llvm_compiler();
  CHECK(&ftattn::runtime::llvm_compiler() == &here);  // asked once
  CHECK(here.version == "clang " + ftattn::runtime::llvm_version());
  CHECK(contains(here.identity, "clang version " + ftattn::runtime::llvm_version()));
  // Each library's file, so that an update in place (same version number) is seen too.
  for (const char* library : {"libLLVM", "libclang-cpp", "libnvJitLink"}) {
    INFO(here.identity << " should name " << library);
    CHECK(contains(here.identity, library));
  }
}

TEST_CASE("the route compiles a generated unit to PTX with the kernel entry and a cubin") {
  const auto source = ftattn::codegen::generate(llvm_config());
  const auto out = ftattn::runtime::compile_with_llvm(source, /*keep_ir=*/true);
  CHECK(contains(out.binary.ptx, ".entry " + source.symbol));
  CHECK(contains(out.binary.ptx, ".target sm_80"));
  CHECK(count(out.binary.ptx, "mma.sync.aligned.m16n8k16") > 0);
  // The cubin is an ELF image; the linker's report names the kernel and its registers.
  REQUIRE(out.binary.cubin.size() > 4);
  CHECK(out.binary.cubin.substr(1, 3) == "ELF");
  CHECK(contains(out.binary.log, "Used "));
  CHECK(contains(out.binary.log, source.symbol));
  // IR before: the template functions; after: one kernel, the layout table gone.
  CHECK(contains(out.ir_before, "ftattn_ir_params_layout"));
  CHECK_FALSE(contains(out.ir_after, "ftattn_ir_params_layout"));
  CHECK(contains(out.ir_after, "ptx_kernel void @" + source.symbol));
  CHECK(contains(out.statistics, "default<O3>"));
}

TEST_CASE("a hardened kernel carries both copies into PTX and reports through the log") {
  const auto plain = ftattn::runtime::compile_with_llvm(ftattn::codegen::generate(llvm_config()));
  const auto hardened = ftattn::runtime::compile_with_llvm(
      ftattn::codegen::generate(llvm_config(IrClass::none, IrClass::mma)));
  // Neither LLVM nor the PTX printer merged the copies.
  CHECK(count(hardened.binary.ptx, "mma.sync.aligned") ==
        2 * count(plain.binary.ptx, "mma.sync.aligned"));
  auto reports = [](const std::string& ptx) {
    return count(ptx, "atom.global.add") + count(ptx, "red.global.add");
  };
  CHECK(reports(hardened.binary.ptx) == reports(plain.binary.ptx) + 1);
}

TEST_CASE("injection can be limited to the code of chosen functions") {
  const std::vector<std::string> base = {"ftattn-inline-all", "default<O3>"};
  auto with = [&](const std::string& stage) {
    auto stages = base;
    stages.push_back(stage);
    return compile_with_passes(stages).stats.injected_sites;
  };
  const size_t everywhere = with("ftattn-inject<exp-max>");
  const size_t exp_only = with("ftattn-inject<exp-max;functions=fast_exp2>");
  const size_t nowhere = with("ftattn-inject<exp-max;functions=no_such_function>");
  CHECK(everywhere > 0);
  CHECK(exp_only > 0);
  CHECK(exp_only < everywhere);  // quad_max's maxima are left out
  CHECK(nowhere == 0);
}

TEST_CASE("Runtime compiles LLVM-route kernels into the same disk cache") {
  ftattn::test::TempDir dir;
  ftattn::RuntimeOptions options;
  options.cache_dir = dir.path();
  {
    ftattn::Runtime rt(options);
    const auto k = rt.compile(llvm_config(IrClass::fp_arith));
    CHECK_FALSE(k->from_disk_cache);
    CHECK(k->resources.registers > 0);
    CHECK(contains(k->compile_log, "instrumented sites: injection"));
  }
  ftattn::Runtime again(options);
  const auto k = again.compile(llvm_config(IrClass::fp_arith));
  CHECK(k->from_disk_cache);
  CHECK(k->resources.registers > 0);
}
