// The decoupled baseline without a GPU: its unit, tiles, workspace, thresholds, and that NVRTC
// compiles it for every head dim (the unit's static_asserts pin the host's tile numbers).
#include <catch2/catch.hpp>
#include <cmath>

#include "codegen/decoupled_source.hpp"
#include "ftattn/codegen.hpp"
#include "ftattn/runtime.hpp"
#include "runtime/decoupled_launch.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ftattn;

namespace {

KernelConfig decoupled(int head_dim, Precision p = Precision::f16, Mask m = Mask::none) {
  return test::tile_config(head_dim, 64, 64, 4, 1, Arch::parse("sm_80"), p, m,
                           Protection::decoupled);
}

}  // namespace

TEST_CASE("decoupled emits its three kernels in one unit", "[decoupled]") {
  const KernelConfig c = decoupled(128, Precision::bf16, Mask::causal);
  const codegen::KernelSource src = codegen::generate(c);
  CHECK(src.symbol == c.symbol());
  for (const std::string& kernel : {src.symbol + "(", "decoupled_softmax_" + src.symbol + "(",
                                    "decoupled_output_" + src.symbol + "("})
    CHECK(src.text.find(kernel) != std::string::npos);
  CHECK(src.text.find("ftattn::precision::BF16") != std::string::npos);
  CHECK(src.text.find("fwd_sm80.cuh") == std::string::npos);
  // Injection points only when asked for.
  KernelConfig inj = c;
  inj.fault_injection = true;
  CHECK(codegen::generate(inj).text != src.text);

  KernelConfig sparse = c;
  sparse.mask = Mask::block_sparse;
  REQUIRE_CONFIG_ERROR(codegen::generate(sparse), "block-sparse");
}

TEST_CASE("decoupled tiles cover head_dim in one output CTA of at most 8 warps", "[decoupled]") {
  for (int d : {32, 64, 96, 128, 192, 256}) {
    const codegen::DecoupledTiles t = codegen::decoupled_tiles(d);
    INFO("head_dim " << d);
    CHECK(t.output_warp_n * t.output_warps_n == d);
    CHECK(t.output_warp_n % 16 == 0);
    CHECK(t.output_warps_m * t.output_warps_n <= 8);
    CHECK(t.output_smem_bytes(d) <= 99 * 1024);  // fits sm_86/89 as well as sm_80/90
  }
  CHECK(codegen::decoupled_tiles(128).output_m() == 128);
  CHECK(codegen::decoupled_tiles(256).output_m() == 64);
  REQUIRE_CONFIG_ERROR(codegen::decoupled_tiles(80), "multiple of 32");
}

TEST_CASE("decoupled workspace is S in FP32 and P in 16 bits over padded rows", "[decoupled]") {
  const runtime::DecoupledWorkspace w =
      runtime::decoupled_workspace(Problem::bhsd(2, 3, 1, 100, 130, 64));
  CHECK(w.row_elements == 192);  // 130 rounded up to 64
  CHECK(w.s_bytes == 2u * 3 * 100 * 192 * 4);
  CHECK(w.p_bytes == w.s_bytes / 2);
  // EFTA's 16k point: 32 heads x 16k x 16k x 6 bytes = 48 GiB.
  const runtime::DecoupledWorkspace big =
      runtime::decoupled_workspace(Problem::bhsd(1, 32, 32, 16384, 16384, 128));
  CHECK(big.bytes() == 48ull << 30);
}

TEST_CASE("decoupled thresholds: bf16 looser than f16, growing with k", "[decoupled]") {
  for (int k : {32, 128, 1024, 16384}) {
    const float f16 = runtime::decoupled_tolerance(Precision::f16, k);
    const float bf16 = runtime::decoupled_tolerance(Precision::bf16, k);
    INFO("k " << k);
    CHECK(f16 > 0);
    CHECK(bf16 > f16);
    CHECK(bf16 < 1e-3f);  // still far below one 16-bit ulp of the values it guards
    CHECK(runtime::decoupled_tolerance(Precision::f16, 2 * k) > f16);
  }
}

TEST_CASE("NVRTC compiles the decoupled unit for every head dim", "[decoupled][nvrtc]") {
  test::TempDir dir;
  RuntimeOptions opts;
  opts.cache_dir = dir.path();
  Runtime rt(opts);
  for (int d : {32, 96, 192, 256}) {
    KernelConfig c = decoupled(d, d == 96 ? Precision::bf16 : Precision::f16,
                               d == 192 ? Mask::causal : Mask::none);
    c.fault_injection = d == 32;
    INFO(c.name());
    const auto k = rt.compile(c);
    CHECK(k->resources.registers > 0);
    CHECK(k->resources.spill_stores <= 16);
  }
}
