// Codegen: determinism, readable output, and that NVRTC compiles every supported config for
// sm_80 and sm_90a into PTX with the tensor-core MMAs we wrote.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <regex>

#include "codegen/swizzle_atom.hpp"
#include "ftattn/codegen.hpp"
#include "ftattn/errors.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "tests/support/configs.hpp"

using namespace ftattn;

namespace {

KernelConfig make(int head_dim, Precision p, Mask m, Arch arch) {
  return test::default_config(head_dim, p, m, arch);
}

using test::count;

}  // namespace

TEST_CASE("generate is deterministic and names the specialisation", "[codegen]") {
  const KernelConfig c = make(128, Precision::bf16, Mask::causal, Arch{90, true});
  const codegen::KernelSource a = codegen::generate(c);
  const codegen::KernelSource b = codegen::generate(c);
  CHECK(a.text == b.text);
  CHECK(a.options == b.options);
  CHECK(a.name == c.name());
  CHECK(a.text.find("extern \"C\" __global__") != std::string::npos);
  CHECK(a.text.find(a.symbol + "(") != std::string::npos);
  CHECK(a.text.find("/*head_dim=*/128") != std::string::npos);
  CHECK(a.text.find("ftattn::precision::BF16") != std::string::npos);
  CHECK(a.text.find("/*causal=*/true") != std::string::npos);
  CHECK(std::count(a.text.begin(), a.text.end(), '\n') < 40);  // a unit a person can read
  CHECK(a.options.front() == "--gpu-architecture=sm_90a");

  KernelConfig other = c;
  other.block_n = c.block_n == 64 ? 32 : 64;
  CHECK(codegen::generate(other).text != a.text);
}

TEST_CASE("generate refuses invalid configs with the validator's message", "[codegen]") {
  KernelConfig c = make(128, Precision::f16, Mask::none, Arch{80, false});
  c.precision = Precision::f16_pasa;
  c.protection = Protection::decoupled;  // PASA has no decoupled baseline
  CHECK_THROWS_AS(codegen::generate(c), ConfigError);
  c.precision = Precision::f16;
  c.protection = Protection::none;
  c.block_m = 0;
  CHECK_THROWS_AS(codegen::generate(c), ConfigError);
}

TEST_CASE("NVRTC compiles every config of the first kernel for sm_80 and sm_90a",
          "[codegen][nvrtc]") {
  for (Arch arch : {Arch{80, false}, Arch{90, true}})
    for (int d : {32, 64, 96, 128, 192, 256})
      for (Precision p : {Precision::f16, Precision::bf16})
        for (Mask m : {Mask::none, Mask::causal}) {
          const KernelConfig c = make(d, p, m, arch);
          INFO(c.name());
          const codegen::KernelSource src = codegen::generate(c);
          const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
          const std::string type = p == Precision::bf16 ? "bf16.bf16" : "f16.f16";
          if (uses_wgmma(c)) {
            // The Hopper skeletons (head dims 32-256): per key block, GEMM I in d/16
            // m64n{block_n}k16 steps and GEMM II in block_n/16 m64n{d}k16 steps, unrolled; no
            // mma.sync and no ldmatrix (wgmma reads its operands from shared memory).
            const std::string gemm1 =
                fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}", c.block_n, type);
            const std::string gemm2 =
                fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}", d, type);
            CHECK(count(out.ptx, gemm1) >= d / 16);
            CHECK(count(out.ptx, gemm2) >= c.block_n / 16);
            CHECK(count(out.ptx, "mma.sync") == 0);
            CHECK(out.ptx.find("ldmatrix") == std::string::npos);
            // Unprotected, K and V come by TMA: a 4-D box per swizzle atom column of each tile
            // (128 bytes; at head dim 96, 64) per copy site, bytes expected on an mbarrier;
            // cp.async is left for Q alone (one 16-byte chunk per copying thread and pass over
            // its rows).
            REQUIRE(kv_tensor_maps(c));
            const int atoms = d * 2 / codegen::swizzle_atom_bytes(d * 2);
            const int boxes = count(out.ptx, "cp.async.bulk.tensor.4d");
            CHECK(boxes >= 2 * atoms);
            CHECK(boxes % atoms == 0);
            CHECK(count(out.ptx, "mbarrier.arrive.expect_tx") >= 1);
            // Persistent tiles (no mask, head dims 64 and 128) have a second copy site: two warps
            // walking tiles copy a quarter of Q per pass.
            const int copiers = warp_specialized(c) ? 128 : 32 * c.num_warps;
            const int walkers = persistent_tiles(c) ? c.block_m * d * 2 / 16 / 4 / 64 : 0;
            CHECK(count(out.ptx, "cp.async.cg.shared.global") <=
                  c.block_m * d * 2 / 16 / copiers + walkers);
          } else {
            const std::string mma = "mma.sync.aligned.m16n8k16.row.col.f32." + type + ".f32";
            // Two GEMMs of d/16 and block_n/16 k-steps per key block, fully unrolled.
            const int per_block = (c.block_m / 16) * (c.block_n / 8) * (d / 16) / c.num_warps +
                                  (c.block_m / 16) * (d / 8) * (c.block_n / 16) / c.num_warps;
            CHECK(count(out.ptx, mma) >= per_block);
            CHECK(out.ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") !=
                  std::string::npos);
          }
          // Unprotected kernels on sm_90a default to a wgmma one at every head dim (at 192 and
          // 256 the warp-specialised 128 x 64 w8s2: GEMM II is m64n192k16 or m64n256k16, waited
          // for in its turn: FlashAttention-3's overlap ran slower there).
          CHECK(uses_wgmma(c) == (arch.sm == 90));
          if (arch.sm == 90 && d >= 192) {
            CHECK((warp_specialized(c) && c.block_m == 128 && c.block_n == 64 && c.num_warps == 8 &&
                   c.num_stages == 2));
            CHECK(count(out.ptx, "wgmma.wait_group.sync.aligned 1;") == 0);
          }
          CHECK(out.ptx.find("cp.async.cg.shared.global") != std::string::npos);
          CHECK(out.ptx.find(".target sm_" + std::to_string(arch.sm)) != std::string::npos);
          CHECK(out.cubin.size() > 1000);
          CHECK(out.cubin.compare(0, 4,
                                  "\x7f"
                                  "ELF") == 0);
          const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
          CHECK(r.registers > 0);
          CHECK(r.registers <= 255);
          // Head dims 192 and 256 on sm_90a: O's 96 or 128 registers and the 64-key scores fit
          // the consumers' registers without spills or serialised wgmmas (ptxas C7512); at 96
          // the 64-byte atoms' descriptors cost none either, nor at 32 (rows of one such atom).
          if (uses_wgmma(c) && (d >= 192 || d == 96 || d == 32)) {
            CHECK(r.spill_stores == 0);
            CHECK(r.performance_notes.empty());
          }
        }
}

TEST_CASE("ptxas resource report is parsed for the named function only", "[codegen]") {
  const std::string log =
      "ptxas info    : Compiling entry function 'other' for 'sm_90a'\n"
      "ptxas info    : Function properties for other\n"
      "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 128 bytes smem\n"
      "ptxas info    : Function properties for k\n"
      "ptxas         .     16 bytes stack frame, 12 bytes spill stores, 20 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers\n";
  const ResourceUsage r = runtime::parse_ptxas_log(log, "k");
  CHECK(r.registers == 255);
  CHECK(r.stack_frame == 16);
  CHECK(r.spill_stores == 12);
  CHECK(r.spill_loads == 20);
  CHECK(r.static_shared_bytes == 0);
  const ResourceUsage o = runtime::parse_ptxas_log(log, "other");
  CHECK(o.registers == 40);
  CHECK(o.static_shared_bytes == 128);
  // Performance notes name their function at the end of the line; each kernel gets its own.
  const std::string notes =
      log +
      "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are "
      "serialized due to insufficient register resources for the function 'k'\n"
      "ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async instructions are "
      "serialized due to non wgmma instructions defining input registers of a wgmma between "
      "start and end of the pipeline stage in the function 'kk'\n";
  const ResourceUsage rk = runtime::parse_ptxas_log(notes, "k");
  REQUIRE(rk.performance_notes.size() == 1);
  CHECK(rk.performance_notes[0] ==
        "(C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
        "insufficient register resources");
  const ResourceUsage rkk = runtime::parse_ptxas_log(notes, "kk");
  REQUIRE(rkk.performance_notes.size() == 1);
  CHECK(rkk.performance_notes[0].rfind("(C7513)", 0) == 0);
  CHECK(rkk.performance_notes[0].find("pipeline stage") != std::string::npos);
  CHECK(runtime::parse_ptxas_log(notes, "other").performance_notes.empty());
}

TEST_CASE("a compile failure carries NVRTC's log verbatim", "[codegen][nvrtc]") {
  codegen::KernelSource bad;
  bad.name = bad.symbol = "broken";
  bad.text = "extern \"C\" __global__ void broken() { this_is_not_declared(); }\n";
  bad.options = {"--gpu-architecture=sm_80"};
  try {
    runtime::compile_with_nvrtc(bad);
    FAIL("expected a CompileError");
  } catch (const CompileError& e) {
    CHECK(e.log().find("this_is_not_declared") != std::string::npos);
    CHECK(std::string(e.what()).find("broken") != std::string::npos);
  }
}

TEST_CASE("epilogues write O in 16-byte stores", "[codegen][nvrtc]") {
  // A uint4_ assigned through a pointer was copied member by member: four 32-bit st.global per
  // 16 bytes of O. Each attention kernel stores nothing else to global memory but the LSE (f32);
  // f16_pasa's shift kernel writes K' 16 bytes at a time, the 8-bit row quantiser 8 at a time.
  const Arch sm80{80, false}, sm90a{90, true};
  // The PTX of one entry: from its .entry line to the next one.
  auto entry = [](const std::string& ptx, const std::string& symbol) {
    const size_t at = ptx.find(".entry " + symbol + "(");
    REQUIRE(at != std::string::npos);
    return ptx.substr(at, ptx.find(".entry ", at + 1) - at);
  };
  auto no_narrow_stores = [](const std::string& body) {
    CHECK(test::count(body, "st.global.u32") == 0);
    CHECK(test::count(body, "st.global.b32") == 0);
    CHECK(test::count(body, "st.global.u16") == 0);
  };
  for (const KernelConfig& c :
       {test::tile_config(64, 64, 64, 4, 2, sm80),
        test::tile_config(128, 192, 128, 12, 2, sm90a, Precision::f16, Mask::causal),
        test::tile_config(128, 128, 128, 8, 2, sm90a, Precision::bf16),
        test::tile_config(64, 64, 128, 4, 2, sm90a, Precision::f16, Mask::causal),
        make(128, Precision::int8, Mask::none, sm80),
        make(128, Precision::int8, Mask::causal, sm90a),
        make(64, Precision::fp8_e4m3, Mask::none, sm90a),
        make(128, Precision::f16_pasa, Mask::none, sm80),
        make(128, Precision::f16_pasa, Mask::causal, sm90a)}) {
    INFO(c.name());
    const codegen::KernelSource source = codegen::generate(c);
    const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(source);
    const std::string body = entry(out.ptx, source.symbol);
    CHECK(test::count(body, "st.global.v4.b32") > 0);
    no_narrow_stores(body);
    if (c.precision == Precision::f16_pasa) {
      const std::string shift = entry(out.ptx, codegen::pasa_shift_symbol(source.symbol));
      CHECK(test::count(shift, "st.global.v4.b32") > 0);
      // (It also writes the block's shift row, one 16-bit value per column.)
      CHECK(test::count(shift, "st.global.u32") == 0);
      CHECK(test::count(shift, "st.global.b32") == 0);
    }
    if (c.precision == Precision::int8 || c.precision == Precision::fp8_e4m3) {
      const std::string rows =
          entry(out.ptx, codegen::quantize_symbol(source.symbol, "quantize_rows", Precision::f16));
      CHECK(test::count(rows, "st.global.v2.b32") > 0);
      CHECK(test::count(rows, "st.global.u32") == 0);
    }
  }
}
