// The backend knob and the IR pass knobs as parts of a config value: names, parsing, equality,
// hashing, validation.
#include <catch2/catch.hpp>
#include <functional>
#include <string>

#include "ftattn/config.hpp"
#include "tests/support/configs.hpp"

namespace {

using ftattn::Arch;
using ftattn::Backend;
using ftattn::IrClass;
using ftattn::KernelConfig;

KernelConfig base() { return ftattn::test::tile_config(128, 128, 64, 4, 2, Arch::parse("sm_90a")); }

}  // namespace

TEST_CASE("backend and IR classes are spelled and parsed like the other enums") {
  CHECK(ftattn::to_string(Backend::llvm) == "llvm");
  CHECK(ftattn::parse_backend("nvrtc") == Backend::nvrtc);
  CHECK(ftattn::parse_ir_class("fp_arith") == IrClass::fp_arith);
  CHECK(ftattn::parse_ir_class("exp-max") == IrClass::exp_max);
  REQUIRE_CONFIG_ERROR(ftattn::parse_backend("gcc"), "expected one of nvrtc, llvm");
  REQUIRE_CONFIG_ERROR(ftattn::parse_ir_class("branches"), "fp_arith, load, int_arith");
}

TEST_CASE("LLVM-route names end in _llvm with the IR passes, and parse back") {
  KernelConfig c = base();
  const std::string nvrtc_name = c.name();
  c.backend = Backend::llvm;
  CHECK(c.name() == nvrtc_name + "_llvm");
  c.ir_inject = IrClass::fp_arith;
  CHECK(c.name() == nvrtc_name + "_llvm-inject-fp-arith");
  c.ir_harden = IrClass::exp_max;
  c.fault_injection = true;
  CHECK(c.name() == nvrtc_name + "_inj_llvm-inject-fp-arith-harden-exp-max");
  CHECK(KernelConfig::parse(c.name()) == c);
  c.ir_inject = IrClass::none;
  CHECK(c.name() == nvrtc_name + "_inj_llvm-harden-exp-max");
  CHECK(KernelConfig::parse(c.name()) == c);
  for (IrClass cls : {IrClass::load, IrClass::int_arith, IrClass::mma}) {
    KernelConfig d = base();
    d.backend = Backend::llvm;
    d.ir_inject = cls;
    CHECK(KernelConfig::parse(d.name()) == d);
  }
}

TEST_CASE("bad route tokens are refused with what to write") {
  const std::string name = base().name();
  REQUIRE_CONFIG_ERROR(KernelConfig::parse(name + "_llvm-inject-everything"), "unknown IR class");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse(name + "_llvm-fast"), "bad route token");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse(name + "_llvm-inject-none"), "leaving it out");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse(name + "_llvm_inj"), "trailing junk");
}

TEST_CASE("backend and IR passes are part of equality and the hash") {
  const KernelConfig a = base();
  KernelConfig b = a;
  b.backend = Backend::llvm;
  KernelConfig c = b;
  c.ir_harden = IrClass::mma;
  CHECK_FALSE(a == b);
  CHECK_FALSE(b == c);
  const std::hash<KernelConfig> h;
  CHECK(h(a) != h(b));
  CHECK(h(b) != h(c));
}

TEST_CASE("validation: IR passes need the LLVM route, loads cannot be hardened") {
  KernelConfig c = base();
  c.ir_inject = IrClass::fp_arith;
  REQUIRE_CONFIG_ERROR(ftattn::validate(c), "set backend llvm");
  c.backend = Backend::llvm;
  if (ftattn::llvm_route_built()) {
    CHECK_NOTHROW(ftattn::validate(c));
    c.ir_harden = IrClass::load;
    REQUIRE_CONFIG_ERROR(ftattn::validate(c), "harden fp_arith, int_arith, exp_max or mma");
  } else {
    REQUIRE_CONFIG_ERROR(ftattn::validate(c), "built without the LLVM route");
  }
}
