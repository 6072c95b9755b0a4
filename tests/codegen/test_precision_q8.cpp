// int8 and fp8_e4m3: validation rules, defaults, the generated unit, and that NVRTC compiles
// every head dim for sm_80 (int8), sm_89 and sm_90a with the 8-bit MMAs and without spills.
#include <array>
#include <catch2/catch.hpp>
#include <utility>

#include "codegen/checksum_atoms.hpp"
#include "ftattn/codegen.hpp"
#include "ftattn/quantize.hpp"
#include "ftattn/quantize_params.cuh"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/quantized_kernel.hpp"
#include "tests/support/configs.hpp"

using namespace ftattn;

namespace {

const Arch kSm80{80, false}, kSm89{89, false}, kSm90a{90, true};

using test::count;
using test::default_config;

}  // namespace

TEST_CASE("8-bit precisions: validation says what to change", "[codegen][q8]") {
  using test::tile_config;
  CHECK_NOTHROW(validate(tile_config(128, 128, 64, 8, 1, kSm80, Precision::int8)));
  CHECK_NOTHROW(validate(tile_config(128, 128, 64, 8, 1, kSm89, Precision::fp8_e4m3)));
  REQUIRE_CONFIG_ERROR(validate(tile_config(128, 128, 64, 8, 1, kSm80, Precision::fp8_e4m3)),
                       "precision fp8_e4m3 needs sm_89 or newer, not sm_80");
  REQUIRE_CONFIG_ERROR(validate(tile_config(128, 128, 48, 8, 1, kSm80, Precision::int8)),
                       "block_n 48 is not a multiple of 32");
  REQUIRE_CONFIG_ERROR(
      validate(tile_config(128, 128, 64, 8, 1, kSm80, Precision::int8, Mask::block_sparse)),
      "mask block_sparse is not built for precision int8");
  CHECK_NOTHROW(validate(tile_config(128, 128, 64, 8, 1, kSm89, Precision::fp8_e4m3, Mask::none,
                                     Protection::efta_detect)));
  // Protection: int8 has every fused scheme (exact digit checksums); fp8 none yet.
  for (Protection p : {Protection::flash_abft, Protection::efta_detect, Protection::efta_correct}) {
    KernelConfig c = tile_config(128, 128, 64, 8, 1, kSm80, Precision::int8, Mask::causal, p);
    CHECK_NOTHROW(validate(c));
    c.fault_injection = true;  // injection points in the int8 checksum schemes
    CHECK_NOTHROW(validate(c));
  }
  CHECK_NOTHROW(validate(tile_config(128, 128, 64, 8, 1, kSm89, Precision::fp8_e4m3, Mask::none,
                                     Protection::flash_abft)));
  CHECK_NOTHROW(validate(tile_config(128, 128, 64, 8, 1, kSm89, Precision::fp8_e4m3, Mask::none,
                                     Protection::efta_correct)));
  KernelConfig on_llvm = tile_config(128, 128, 64, 8, 1, kSm80, Precision::int8);
  on_llvm.backend = Backend::llvm;
  REQUIRE_CONFIG_ERROR(validate(on_llvm), "precision int8 is built for the NVRTC route only");
  KernelConfig plain_inject = tile_config(128, 128, 64, 8, 1, kSm80, Precision::int8);
  plain_inject.fault_injection = true;
  REQUIRE_CONFIG_ERROR(validate(plain_inject),
                       "fault-injection points only in its checksum schemes");
  REQUIRE_CONFIG_ERROR(validate(tile_config(128, 128, 64, 8, 1, kSm80, Precision::int8, Mask::none,
                                            Protection::decoupled)),
                       "no decoupled baseline");
}

TEST_CASE("int8 with flash_abft: digit rows in V^T, their kernel, one more IMMA tile per 32 keys",
          "[codegen][nvrtc][q8][protect]") {
  const Arch kSm90{90, false};  // the mma.sync skeleton (sm_90a runs wgmma up to head dim 128)
  for (int d : {64, 128, 256}) {
    // The same tile without protection (on sm_90a its own default is the wgmma skeleton's).
    const KernelConfig abft = default_config(d, Precision::int8, Mask::none,
                                             d == 256 ? kSm90a : kSm90, Protection::flash_abft);
    KernelConfig plain = abft;
    plain.protection = Protection::none;
    REQUIRE_FALSE(uses_wgmma(plain));
    INFO(abft.name());
    // 8 more V^T rows of block_n + 16 bytes per stage.
    CHECK(abft.shared_memory_bytes() - plain.shared_memory_bytes() ==
          abft.num_stages * 8 * (abft.block_n + 16));
    const codegen::KernelSource src = codegen::generate(abft);
    CHECK(src.text.find("ftattn::protect::Int8Abft") != std::string::npos);
    CHECK(count(src.text, codegen::q8_v_rows_symbol(src.symbol) + "(") == 1);
    const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
    const runtime::NvrtcOutput base = runtime::compile_with_nvrtc(codegen::generate(plain));
    CHECK(out.ptx.find(".entry " + codegen::q8_v_rows_symbol(src.symbol)) != std::string::npos);
    // GEMM II: head_dim / 8 channel tiles per 32 keys, plus the digit tile; per row tile and per
    // copy of the loop body.
    const std::string imma = "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32";
    const int tiles = abft.block_m / 16 / abft.num_warps;
    const int per_copy_gemm2 = tiles * (d / 8) * (abft.block_n / 32);
    const int per_copy_gemm1 = tiles * (abft.block_n / 8) * (d / 32);
    const int copies = count(base.ptx, imma) / (per_copy_gemm1 + per_copy_gemm2);
    CHECK(copies >= 1);
    CHECK(count(base.ptx, imma) == copies * (per_copy_gemm1 + per_copy_gemm2));
    CHECK(count(out.ptx, imma) - count(base.ptx, imma) == copies * tiles * (abft.block_n / 32));
    const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
    CHECK(r.registers > 0);
  }
}

namespace {

// Flash-ABFT's default tile for an 8-bit precision on sm_90a (the one-warpgroup wgmma kernel,
// checked here), and the same tile unprotected.
std::pair<KernelConfig, KernelConfig> one_warpgroup_abft(int d, Precision p, Mask m, bool inject) {
  KernelConfig abft = default_config(d, p, m, kSm90a, Protection::flash_abft);
  abft.fault_injection = inject;
  INFO(abft.name());
  REQUIRE(uses_wgmma(abft));
  CHECK_FALSE(warp_specialized(abft));
  CHECK((abft.block_m == 64 && abft.block_n == 128 && abft.num_warps == 4 && abft.num_stages == 2));
  KernelConfig plain = abft;
  plain.protection = Protection::none;
  plain.fault_injection = false;
  return {abft, plain};
}

}  // namespace

TEST_CASE("int8 with flash_abft on sm_90a: the checksum rows ride in the wgmma kernel's GEMM II",
          "[codegen][nvrtc][q8][protect]") {
  for (int d : {64, 128})
    for (Mask m : {Mask::none, Mask::causal})
      for (bool inject : {false, true}) {
        const auto [abft, plain] = one_warpgroup_abft(d, Precision::int8, m, inject);
        INFO(abft.name());
        // The digit rows take the stage's tail, which the tiles had as slack: no more bytes.
        CHECK(abft.shared_memory_bytes() == plain.shared_memory_bytes());
        const codegen::KernelSource src = codegen::generate(abft);
        CHECK(src.text.find("ftattn::Q8WgmmaTraits<") != std::string::npos);
        CHECK(src.text.find("ftattn::protect::Int8Abft") != std::string::npos);
        CHECK(count(src.text, codegen::q8_v_rows_symbol(src.symbol) + "(") == 1);
        const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
        const runtime::NvrtcOutput base = runtime::compile_with_nvrtc(codegen::generate(plain));
        // Every GEMM II is m64n(head_dim + 16): O's tiles and the two checksum tiles, in the
        // same wgmmas the unprotected kernel issues with n = head_dim.
        const std::string gemm2 =
            "wgmma.mma_async.sync.aligned.m64n" + std::to_string(d) + "k32.s32.u8.s8";
        const std::string checked =
            "wgmma.mma_async.sync.aligned.m64n" + std::to_string(d + 16) + "k32.s32.u8.s8";
        CHECK(count(base.ptx, gemm2) >= 2);
        CHECK(count(out.ptx, checked) == count(base.ptx, gemm2));
        CHECK(count(out.ptx, gemm2) == 0);
        CHECK(count(out.ptx, "mma.sync") == 0);
        // One more TMA box per copy site: the two digit rows, onto the stage's barrier.
        const int sites = count(out.ptx, "cp.async.bulk.tensor.2d");
        CHECK(sites == count(base.ptx, "cp.async.bulk.tensor.2d"));
        CHECK(count(out.ptx, "cp.async.bulk.tensor.3d") ==
              count(base.ptx, "cp.async.bulk.tensor.3d") + sites);
        // Three CTAs per SM (four spilled 804 bytes at 64) without serialised wgmmas; injection
        // builds, which run campaigns, not timings, serialise them (C7514: the plan's flips touch
        // O's registers). At head dim 128 ptxas keeps two of the tile's set-up values in local
        // memory (8 bytes, stored before the key-block loop, loaded outside it: SASS).
        const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
        CHECK(r.registers > 0);
        CHECK(r.registers <= 168);
        CHECK(r.spill_stores <= (inject ? 64 : 8));
        if (!inject) CHECK(r.performance_notes.empty());
      }
  // Head dim 256 (no n8 tile fits beside O's 256 columns) keeps the mma.sync skeleton (EFTA's
  // wgmma kernels: below).
  CHECK_FALSE(
      uses_wgmma(default_config(256, Precision::int8, Mask::none, kSm90a, Protection::flash_abft)));
}

TEST_CASE(
    "int8 with efta_detect on sm_90a: K digit rows in the wgmma kernel's GEMM I, softmax twice",
    "[codegen][nvrtc][q8][protect]") {
  const std::string ex2 = "ex2.approx.ftz.f32";  // P's exponentials (precision/int8.cuh)
  for (int d : {64, 128})
    for (int n : {64, 128})
      for (Mask m : {Mask::none, Mask::causal})
        for (bool inject : {false, true}) {
          KernelConfig efta = test::tile_config(d, 64, n, 4, 2, kSm90a, Precision::int8, m,
                                                Protection::efta_detect);
          efta.fault_injection = inject;
          INFO(efta.name());
          REQUIRE(uses_wgmma(efta));
          CHECK_FALSE(warp_specialized(efta));
          KernelConfig abft = efta;  // the same tile with Flash-ABFT's V checksums alone
          abft.protection = Protection::flash_abft;
          const codegen::Q8ChecksumRows rows = codegen::q8_checksum_rows(efta);
          CHECK((rows.k == 16 && rows.v == 8));
          const codegen::KernelSource src = codegen::generate(efta);
          CHECK(src.text.find("ftattn::Q8WgmmaTraits<") != std::string::npos);
          CHECK(src.text.find("ftattn::protect::Int8Efta<false>") != std::string::npos);
          CHECK(count(src.text, codegen::q8_k_rows_symbol(src.symbol) + "(") == 1);
          const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
          const runtime::NvrtcOutput base = runtime::compile_with_nvrtc(codegen::generate(abft));
          // GEMM I is m64n(block_n + 16) where Flash-ABFT's is m64n(block_n): the keys' tiles and
          // the two digit tiles, in as many wgmmas; GEMM II is Flash-ABFT's.
          const std::string gemm1 =
              "wgmma.mma_async.sync.aligned.m64n" + std::to_string(n) + "k32.s32.s8.s8";
          const std::string checked =
              "wgmma.mma_async.sync.aligned.m64n" + std::to_string(n + 16) + "k32.s32.s8.s8";
          const std::string gemm2 =
              "wgmma.mma_async.sync.aligned.m64n" + std::to_string(d + 16) + "k32.s32.u8.s8";
          CHECK(count(base.ptx, gemm1) >= d / 32);
          CHECK(count(out.ptx, checked) == count(base.ptx, gemm1));
          CHECK(count(out.ptx, gemm1) == 0);
          CHECK(count(out.ptx, gemm2) == count(base.ptx, gemm2));
          CHECK(count(out.ptx, "mma.sync") == 0);
          // One more TMA box per K copy: the block's 16 checksum rows.
          CHECK(count(out.ptx, "cp.async.bulk.tensor.3d") >
                count(base.ptx, "cp.async.bulk.tensor.3d"));
          // The softmax runs twice: the second evaluation is not merged into the first.
          REQUIRE(count(base.ptx, ex2) > 0);
          CHECK(count(out.ptx, ex2) == 2 * count(base.ptx, ex2));
          // Its inputs come from volatile loads of their own (ptxas merged plain ones with the
          // first evaluation's): per copy of the loop body, a pair of key scales per 8 keys in
          // each of its two passes (maxima, P), and the rows' factors from their copy.
          const std::string scales = "ld.shared.v2.f32", again = "ld.volatile.shared.v2.f32";
          const int copies = count(base.ptx, scales) / (n / 8);
          REQUIRE(copies >= 1);
          CHECK(count(base.ptx, scales) == copies * (n / 8));
          CHECK(count(out.ptx, scales) == count(base.ptx, scales));
          CHECK(count(out.ptx, again) == copies * (2 * (n / 8) + 1));
          // Shared memory: 16 rows of head_dim bytes below each stage's keys, and that copy.
          CHECK(efta.shared_memory_bytes() ==
                abft.shared_memory_bytes() + 2 * 16 * d + efta.block_m * 4);
          // The defaults' tiles (128 keys at head dim 128, two CTAs per SM; 64 at 64, three) fit
          // without spills; 64 keys at 128 keep a few bytes in local memory and 128 at 64 spill
          // (the three-CTA cap).
          const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
          CHECK(r.registers > 0);
          const bool default_tile = n == (d == 128 ? 128 : 64);
          CHECK(r.registers <= (d == 128 && n == 128 ? 255 : 168));
          if (default_tile && !inject) {
            CHECK(r.spill_stores == 0);
            CHECK(r.performance_notes.empty());
          }
          const KernelConfig chosen =
              default_config(d, Precision::int8, m, kSm90a, Protection::efta_detect, inject);
          CHECK((chosen.block_m == 64 && chosen.num_warps == 4 && chosen.num_stages == 2 &&
                 chosen.block_n == (d == 128 ? 128 : 64)));
        }
}

TEST_CASE(
    "int8 with efta_correct on sm_90a: efta_detect's kernel with weighted V rows in GEMM II's "
    "second tile",
    "[codegen][nvrtc][q8][protect]") {
  const std::string ex2 = "ex2.approx.ftz.f32";
  for (int d : {64, 128})
    for (int n : {64, 128})
      for (Mask m : {Mask::none, Mask::causal}) {
        KernelConfig correct =
            test::tile_config(d, 64, n, 4, 2, kSm90a, Precision::int8, m, Protection::efta_correct);
        INFO(correct.name());
        REQUIRE(uses_wgmma(correct));
        KernelConfig detect = correct;
        detect.protection = Protection::efta_detect;
        // efta_detect's 16 K rows (a failed score column is computed again, so no weighted K
        // rows), and 8 V^T rows of its own by one TMA box: the channel sum's and the weighted
        // sum's digits.
        const codegen::Q8ChecksumRows rows = codegen::q8_checksum_rows(correct);
        CHECK((rows.k == 16 && rows.v == 8 && rows.k16 == 0 && rows.v16 == 0));
        const codegen::KernelSource src = codegen::generate(correct);
        CHECK(src.text.find("ftattn::protect::int8_v_wgmma_rows<" + std::to_string(d) + ">") !=
              std::string::npos);
        CHECK(src.text.find("int8_k_rows<" + std::to_string(d) + ", " + std::to_string(n) +
                            ", ftattn::protect::Int8Efta<false>>") != std::string::npos);
        const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
        const runtime::NvrtcOutput base = runtime::compile_with_nvrtc(codegen::generate(detect));
        // The MMAs and the softmax's two evaluations are efta_detect's; the repair of a failed
        // score column takes dp4a on the CUDA cores, which efta_detect has none of.
        for (const std::string& op :
             {"wgmma.mma_async.sync.aligned.m64n" + std::to_string(n + 16) + "k32.s32.s8.s8",
              "wgmma.mma_async.sync.aligned.m64n" + std::to_string(d + 16) + "k32.s32.u8.s8", ex2,
              std::string("cp.async.bulk.tensor")})
          CHECK(count(out.ptx, op) == count(base.ptx, op));
        CHECK(count(out.ptx, "mma.sync") == 0);
        CHECK(count(out.ptx, "dp4a.s32.s32") > 0);
        CHECK(count(base.ptx, "dp4a.s32.s32") == 0);
        // Shared memory: the rows' atom after each stage's tail (8 rows of block_n bytes, in the
        // 1 KB alignment's slack at 64 keys).
        CHECK(correct.shared_memory_bytes() ==
              detect.shared_memory_bytes() + (n == 128 ? 2 * 1024 : 0));
        // The defaults' tiles fit without spills or serialised wgmmas.
        const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
        CHECK(r.registers > 0);
        const bool default_tile = n == (d == 128 ? 128 : 64);
        if (default_tile) {
          CHECK(r.spill_stores == 0);
          CHECK(r.performance_notes.empty());
        }
        const KernelConfig chosen =
            default_config(d, Precision::int8, m, kSm90a, Protection::efta_correct);
        CHECK((chosen.block_m == 64 && chosen.num_warps == 4 && chosen.num_stages == 2 &&
               chosen.block_n == (d == 128 ? 128 : 64)));
        // Causal problems up to 2k keys take 64-key blocks at head dim 128 too, both schemes.
        for (Protection prot : {Protection::efta_detect, Protection::efta_correct})
          for (int keys : {1024, 2048, 2049, 8192}) {
            KernelConfig open = correct;
            open.protection = prot;
            open.block_m = open.block_n = open.num_warps = open.num_stages = 0;
            const Problem pr = Problem::bhsd(1, 2, 2, keys, keys, d);
            const KernelConfig picked = with_defaults(open, kSm90a, &pr);
            INFO(picked.name() << " at " << keys << " keys");
            CHECK(uses_wgmma(picked));
            const bool short_causal = m == Mask::causal && keys <= 2048;
            CHECK(picked.block_n == (d == 128 && !short_causal ? 128 : 64));
          }
      }
}

TEST_CASE("fp8 with flash_abft on sm_90a: E4M3 checksum rows ride in the wgmma kernel's GEMM II",
          "[codegen][nvrtc][q8][protect]") {
  for (int d : {64, 128})
    for (Mask m : {Mask::none, Mask::causal})
      for (bool inject : {false, true}) {
        const auto [abft, plain] = one_warpgroup_abft(d, Precision::fp8_e4m3, m, inject);
        INFO(abft.name());
        // Four E4M3 rows per key, by TMA from a byte buffer (not the mma.sync kernel's f16 rows).
        const codegen::Q8ChecksumRows rows = codegen::q8_checksum_rows(abft);
        CHECK((rows.v == 4 && rows.v16 == 0 && rows.k == 0 && rows.k16 == 0));
        CHECK(abft.shared_memory_bytes() == plain.shared_memory_bytes());  // the stage's tail
        const codegen::KernelSource src = codegen::generate(abft);
        CHECK(src.text.find("ftattn::protect::fp8_v_digit_rows<" + std::to_string(d) + ">") !=
              std::string::npos);
        CHECK(src.text.find("fp8_v_rows<") == std::string::npos);
        const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
        const runtime::NvrtcOutput base = runtime::compile_with_nvrtc(codegen::generate(plain));
        // Every GEMM II piece is m64n72 (64 channels and the checksum tile; at head dim 128 the
        // first piece's extra tile reads the next piece's channels, which nothing folds), where
        // the unprotected kernel issues m64n64 (head dim 128, two pieces) or m64n64 (64).
        const std::string e4m3 = "k32.f32.e4m3.e4m3";
        const std::string piece = "wgmma.mma_async.sync.aligned.m64n64" + e4m3;
        const std::string checked = "wgmma.mma_async.sync.aligned.m64n72" + e4m3;
        CHECK(count(base.ptx, piece) >= 2);
        CHECK(count(out.ptx, checked) == count(base.ptx, piece));
        CHECK(count(out.ptx, piece) == 0);
        CHECK(count(out.ptx, "mma.sync") == 0);
        // One more TMA box per V^T copy: the four rows, onto the stage's barrier.
        CHECK(count(out.ptx, "cp.async.bulk.tensor.3d") >
              count(base.ptx, "cp.async.bulk.tensor.3d"));
        // Three CTAs per SM, no spills and no serialised wgmmas; injection builds (campaigns
        // only) serialise them: the pv site flips the tile's registers (C7514).
        const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
        CHECK(r.registers > 0);
        CHECK(r.registers <= 168);
        CHECK(r.spill_stores == 0);
        if (!inject) CHECK(r.performance_notes.empty());
      }
  // Head dim 256, EFTA, and the mma.sync skeleton (sm_90 without "a") keep the f16 rows.
  CHECK_FALSE(uses_wgmma(
      default_config(256, Precision::fp8_e4m3, Mask::none, kSm90a, Protection::flash_abft)));
  CHECK_FALSE(uses_wgmma(
      default_config(128, Precision::fp8_e4m3, Mask::none, kSm90a, Protection::efta_detect)));
  const KernelConfig mma_sync =
      default_config(128, Precision::fp8_e4m3, Mask::none, Arch{90, false}, Protection::flash_abft);
  CHECK_FALSE(uses_wgmma(mma_sync));
  CHECK(codegen::q8_checksum_rows(mma_sync).v16 == 8);
  CHECK(codegen::generate(mma_sync).text.find("fp8_v_rows<") != std::string::npos);
}

TEST_CASE("int8 EFTA: K and V^T checksum rows, their kernels, a second softmax evaluation",
          "[codegen][nvrtc][q8][protect]") {
  const std::string imma = "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32";
  const std::string ex2 = "ex2.approx.ftz.f32";  // P's exponentials (precision/int8.cuh)
  for (Protection prot : {Protection::efta_detect, Protection::efta_correct}) {
    const int d = 128;
    KernelConfig open;  // the tile int8 EFTA's defaults pick
    open.head_dim = d;
    open.precision = Precision::int8;
    open.protection = prot;
    // The mma.sync skeleton's (on sm_90a efta_detect runs the wgmma kernel: above).
    const KernelConfig efta = with_defaults(open, Arch{90, false});
    KernelConfig plain = efta;
    plain.protection = Protection::none;
    INFO(efta.name());
    const bool correct = prot == Protection::efta_correct;
    // Per stage: 16 (40) K rows of head_dim + 16 bytes, 8 (48) V^T rows of block_n + 16.
    const int k_rows = correct ? 40 : 16, v_rows = correct ? 48 : 8;
    CHECK(efta.shared_memory_bytes() - plain.shared_memory_bytes() ==
          efta.num_stages * (k_rows * (d + 16) + v_rows * (efta.block_n + 16)));
    const codegen::KernelSource src = codegen::generate(efta);
    CHECK(src.text.find(correct ? "Int8Efta<true>" : "Int8Efta<false>") != std::string::npos);
    CHECK(count(src.text, codegen::q8_v_rows_symbol(src.symbol) + "(") == 1);
    CHECK(count(src.text, codegen::q8_k_rows_symbol(src.symbol) + "(") == 1);
    const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
    const runtime::NvrtcOutput base = runtime::compile_with_nvrtc(codegen::generate(plain));
    CHECK(out.ptx.find(".entry " + codegen::q8_k_rows_symbol(src.symbol)) != std::string::npos);
    // Per copy of the loop body: GEMM I's two checksum tiles per 32 channels; GEMM II's one
    // (correct: three) per 32 keys; correct's rare paths, Q times 3 weighted tiles (a rolled
    // loop) and P times 3 per 32 keys.
    const int tiles = efta.block_m / 16 / efta.num_warps;
    const int per_copy = tiles * ((efta.block_n / 8) * (d / 32) + (d / 8) * (efta.block_n / 32));
    const int copies = count(base.ptx, imma) / per_copy;
    REQUIRE(copies >= 1);
    CHECK(count(base.ptx, imma) == copies * per_copy);
    const int extra =
        correct ? 2 * (d / 32) + 3 + 6 * (efta.block_n / 32) : 2 * (d / 32) + efta.block_n / 32;
    CHECK(count(out.ptx, imma) - count(base.ptx, imma) == copies * tiles * extra);
    // The softmax runs twice: the second evaluation is not merged into the first.
    REQUIRE(count(base.ptx, ex2) > 0);
    CHECK(count(out.ptx, ex2) == 2 * count(base.ptx, ex2));
    // It reads the key scales again, for each row it holds, and the row's factor from its copy
    // in the Q row's padding, by volatile loads: plain ones ptxas merged with the first
    // evaluation's, a register both would then trust.
    const std::string scales = "ld.shared.v2.f32", again = "ld.volatile.shared.v2.f32";
    REQUIRE(count(base.ptx, scales) > 0);
    CHECK(count(out.ptx, scales) == count(base.ptx, scales));
    CHECK(count(out.ptx, again) == 2 * tiles * count(base.ptx, scales));
    CHECK(count(out.ptx, "ld.volatile.shared.f32") == 2 * tiles * copies);
    CHECK(count(out.ptx, "st.shared.f32") - count(base.ptx, "st.shared.f32") == 2 * tiles);
    const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
    CHECK(r.spill_stores == 0);  // the defaults' tile fits
  }
}

TEST_CASE("fp8 with flash_abft: f16 checksum rows in V^T, two f16 MMAs per 32 keys",
          "[codegen][nvrtc][q8][protect]") {
  const std::string hmma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
  for (int d : {64, 128, 256}) {
    // The mma.sync skeleton (sm_90 without "a"; on sm_90a head dims 64 and 128 run the wgmma
    // kernel's E4M3 rows, above), and the same tile without protection.
    const KernelConfig abft =
        default_config(d, Precision::fp8_e4m3, Mask::none, Arch{90, false}, Protection::flash_abft);
    KernelConfig plain = abft;
    plain.protection = Protection::none;
    REQUIRE_FALSE(uses_wgmma(plain));
    INFO(abft.name());
    // 8 rows of block_n f16 values (+ 16 bytes of padding) per stage; at head dim 256 the
    // epilogue's O rows are the larger use of the same memory.
    const int extra = abft.num_stages * 8 * (2 * abft.block_n + 16);
    if (d <= 128)
      CHECK(abft.shared_memory_bytes() - plain.shared_memory_bytes() == extra);
    else
      CHECK(abft.shared_memory_bytes() >= plain.shared_memory_bytes());
    const codegen::KernelSource src = codegen::generate(abft);
    CHECK(src.text.find("ftattn::protect::Fp8Abft") != std::string::npos);
    CHECK(src.text.find("fp8_v_rows<" + std::to_string(d) + ", Traits::Protect>") !=
          std::string::npos);
    const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
    const runtime::NvrtcOutput base = runtime::compile_with_nvrtc(codegen::generate(plain));
    CHECK(out.ptx.find(".entry " + codegen::q8_v_rows_symbol(src.symbol)) != std::string::npos);
    CHECK(count(base.ptx, hmma) == 0);  // sm_90a's e4m3 MMAs stay e4m3 in PTX
    // Per row tile and copy of the loop body: two per 32 keys (each 16 keys of P, as f16).
    const int tiles = abft.block_m / 16 / abft.num_warps;
    const int per_copy = tiles * 2 * (abft.block_n / 32);
    CHECK(count(out.ptx, hmma) >= per_copy);
    CHECK(count(out.ptx, hmma) % per_copy == 0);
  }
}

TEST_CASE("fp8 with efta_detect: f16 K rows, three f16 MMAs per 16 channels, softmax twice",
          "[codegen][nvrtc][q8][protect]") {
  const std::string hmma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
  const int d = 128;
  KernelConfig abft = default_config(d, Precision::fp8_e4m3, Mask::none, kSm90a);
  abft.protection = Protection::flash_abft;
  KernelConfig efta = abft;
  efta.protection = Protection::efta_detect;
  abft.arch = Arch{90, false};  // Flash-ABFT on the same mma.sync skeleton (sm_90a: wgmma)
  INFO(efta.name());
  // 24 K rows of head_dim f16 values (+ 16 bytes) per stage.
  CHECK(efta.shared_memory_bytes() - abft.shared_memory_bytes() ==
        efta.num_stages * 24 * (2 * d + 16));
  const codegen::KernelSource src = codegen::generate(efta);
  CHECK(src.text.find("ftattn::protect::Fp8Efta") != std::string::npos);
  CHECK(src.text.find("fp8_k_rows<" + std::to_string(d) + ", " + std::to_string(efta.block_n) +
                      ", Traits::Protect>") != std::string::npos);
  const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
  const runtime::NvrtcOutput base = runtime::compile_with_nvrtc(codegen::generate(abft));
  CHECK(out.ptx.find(".entry " + codegen::q8_k_rows_symbol(src.symbol)) != std::string::npos);
  // Per row tile and copy of the loop body: GEMM I's checksum, three f16 MMAs (hi, lo, |Q|
  // against the magnitudes) per 16 channels, on top of Flash-ABFT's two per 32 keys.
  const int tiles = efta.block_m / 16 / efta.num_warps;
  const int abft_per_copy = tiles * 2 * (efta.block_n / 32);
  const int copies = count(base.ptx, hmma) / abft_per_copy;
  REQUIRE(copies >= 1);
  CHECK(count(out.ptx, hmma) == copies * (abft_per_copy + tiles * 3 * (d / 16)));
  // The softmax's second evaluation: twice the exponentials of the P words.
  const std::string ex2 = "ex2.approx.ftz.f32";
  CHECK(count(out.ptx, ex2) == 2 * count(base.ptx, ex2));
}

TEST_CASE("fp8 with efta_correct: weighted K rows, strided V^T rows, every MMA of the fast path",
          "[codegen][nvrtc][q8][protect]") {
  const std::string hmma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
  const int d = 128;
  KernelConfig detect = default_config(d, Precision::fp8_e4m3, Mask::none, kSm90a);
  detect.protection = Protection::efta_detect;
  KernelConfig correct = detect;
  correct.protection = Protection::efta_correct;
  INFO(correct.name());
  // 16 more K rows (the weighted sums, hi + lo) and 32 more V^T rows (strided hi, lo,
  // magnitude, weighted hi and lo: 40 against detect's 8), per stage.
  CHECK(correct.shared_memory_bytes() - detect.shared_memory_bytes() ==
        correct.num_stages * (16 * (2 * d + 16) + 32 * (2 * correct.block_n + 16)));
  const codegen::KernelSource src = codegen::generate(correct);
  CHECK(src.text.find("ftattn::protect::Fp8Efta<true>") != std::string::npos);
  const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
  const runtime::NvrtcOutput base = runtime::compile_with_nvrtc(codegen::generate(detect));
  // Against detect, per row tile and copy of the loop body: GEMM II's checksum tiles go from 1 to
  // 5 per 16 keys; the rare path adds 2 f16 MMAs per 16 channels in a rolled loop (2 h x 2 rows).
  const int tiles = correct.block_m / 16 / correct.num_warps;
  const int extra_per_copy = tiles * (4 * 2 * (correct.block_n / 32) + 2 * 2);
  const int extra = count(out.ptx, hmma) - count(base.ptx, hmma);
  REQUIRE(extra > 0);
  CHECK(extra % extra_per_copy == 0);
  const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
  CHECK(r.registers > 0);
}

TEST_CASE("8-bit defaults: complete, valid, block_n a multiple of 32", "[codegen][q8]") {
  for (Arch arch : {kSm80, kSm89, kSm90a})
    for (Precision p : {Precision::int8, Precision::fp8_e4m3})
      for (int d : {32, 64, 96, 128, 192, 256}) {
        if (p == Precision::fp8_e4m3 && arch.sm < 89) continue;
        const KernelConfig c = default_config(d, p, Mask::causal, arch);
        INFO(c.name());
        CHECK(c.is_complete());
        CHECK(c.block_n % 32 == 0);
        const int row_tiles = c.block_m / (16 * c.num_warps);  // MMA row tiles per warp
        CHECK((row_tiles == 1 || (row_tiles == 2 && p == Precision::int8 && d == 128)));
        CHECK(c.shared_memory_bytes() <= max_shared_memory_bytes(arch));
      }
}

TEST_CASE("8-bit unit: the q8 skeleton, the size check and its quantisation kernels",
          "[codegen][q8]") {
  const KernelConfig c = default_config(128, Precision::int8, Mask::causal, kSm80);
  const codegen::KernelSource src = codegen::generate(c);
  CHECK(src.text.find("ftattn/kernel/fwd_q8_sm80.cuh") != std::string::npos);
  CHECK(src.text.find("ftattn::precision::Int8") != std::string::npos);
  CHECK(src.text.find("static_assert(Traits::smem_bytes == " +
                      std::to_string(c.shared_memory_bytes())) != std::string::npos);
  for (Precision in : {Precision::f16, Precision::bf16})
    for (const char* k : {"quantize_rows", "v_channel_max", "pack_v"}) {
      const std::string sym = codegen::quantize_symbol(src.symbol, k, in);
      CHECK(sym.rfind(src.symbol, 0) == std::string::npos);  // no prefix: ptxas logs by prefix
      CHECK(count(src.text, sym + "(") == 1);
    }
  CHECK(std::count(src.text.begin(), src.text.end(), '\n') < 50);
  // int8 K keeps a scale per token (INT-FlashAttention's); fp8 K gets one per 64 keys from a
  // kernel of its own, which int8 units leave out.
  CHECK(codegen::k_scale_block(Precision::int8) == 1);
  CHECK(codegen::k_scale_block(Precision::fp8_e4m3) == 64);
  CHECK(src.text.find("quantize_key_blocks") == std::string::npos);
  const KernelConfig f8 = default_config(128, Precision::fp8_e4m3, Mask::causal, kSm89);
  const codegen::KernelSource f8_src = codegen::generate(f8);
  for (Precision in : {Precision::f16, Precision::bf16}) {
    const std::string sym = codegen::quantize_symbol(f8_src.symbol, "quantize_key_blocks", in);
    CHECK(count(f8_src.text, sym + "(") == 1);
  }
  // V in one pass (kernel/quantize_v_sm90.cuh): clusters of CTAs, sm_90 and later, head dims
  // whose 8-channel chunks divide its threads; short enough heads only (the runtime's choice).
  CHECK(src.text.find("quantize_v") == std::string::npos);  // sm_80
  for (int d : {32, 64, 96, 128, 192, 256}) {
    const codegen::KernelSource hopper =
        codegen::generate(default_config(d, Precision::int8, Mask::none, kSm90a));
    const bool one_pass = d != 96 && d != 192;
    INFO("head_dim " << d);
    CHECK(quantize_v_head_dim(d) == one_pass);
    for (Precision in : {Precision::f16, Precision::bf16})
      CHECK(count(hopper.text, codegen::quantize_symbol(hopper.symbol, "quantize_v", in) + "(") ==
            (one_pass ? 1 : 0));
    CHECK(count(hopper.text, "__cluster_dims__(ftattn::kQuantizeVCtas, 1, 1)") ==
          (one_pass ? 2 : 0));
  }
  // 8 CTAs of 704 keys x 272 bytes (191,488) fit; 768 x 272 do not.
  CHECK(quantize_v_slice_keys(5632) == 704);
  CHECK(quantize_v_fits(5632, 128));
  CHECK_FALSE(quantize_v_fits(5648, 128));
  CHECK(quantize_v_slice_keys(64) == 64);  // one group: seven CTAs of the cluster idle
  CHECK_FALSE(quantize_v_fits(64, 96));
  // Tens of millions of keys: the slice's bytes pass 2^31 (they wrapped an int and read as
  // fitting, then as a few bytes).
  CHECK(quantize_v_shared_bytes(64 << 20, 128) == (int64_t{1} << 23) * 272);
  CHECK_FALSE(quantize_v_fits(64 << 20, 128));
  CHECK_FALSE(quantize_v_fits(130'000'000, 128));
}

TEST_CASE("NVRTC compiles every 8-bit config with 8-bit MMAs and no spills",
          "[codegen][nvrtc][q8]") {
  struct Target {
    Arch arch;
    Precision p;
  };
  for (Target t : {Target{kSm80, Precision::int8}, Target{kSm89, Precision::int8},
                   Target{kSm90a, Precision::int8}, Target{kSm89, Precision::fp8_e4m3},
                   Target{kSm90a, Precision::fp8_e4m3}})
    for (int d : {32, 64, 96, 128, 192, 256})
      for (Mask m : {Mask::none, Mask::causal}) {
        if (m == Mask::causal && d != 64 && d != 128) continue;  // compile time
        const KernelConfig c = default_config(d, t.p, m, t.arch);
        INFO(c.name());
        const codegen::KernelSource src = codegen::generate(c);
        const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
        if (uses_wgmma(c)) {  // the wgmma skeleton's own case below has the rest
          // No spills (int8 causal at head_dim 128 spilled 12 bytes in its masked step until
          // 2026-11-28, 72 before K and V came by TMA).
          CHECK(runtime::parse_ptxas_log(out.log, src.symbol).spill_stores == 0);
          continue;
        }
        const std::string mma = t.p == Precision::int8
                                    ? "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"
                                    : "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32";
        // GEMM I: block_n/8 x d/32 per warp; GEMM II: d/8 x block_n/32; twice (masked and not).
        const int per_block = (c.block_n / 8) * (d / 32) + (d / 8) * (c.block_n / 32);
        CHECK(count(out.ptx, mma) >= per_block);
        if (t.p == Precision::fp8_e4m3)
          CHECK(out.ptx.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos);
        const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
        CHECK(r.registers > 0);
        // Ada's fp8 at head dims 64 and 128 keeps two CTAs of eight warps per SM: its per-block
        // P V slices took head dim 128 to 132 registers without the launch bound.
        const bool two_ctas =
            t.p == Precision::fp8_e4m3 && t.arch.sm == 89 && (d == 64 || d == 128);
        CHECK((src.text.find("__launch_bounds__(Traits::threads, 2)") != std::string::npos) ==
              two_ctas);
        if (two_ctas) CHECK(r.registers <= 128);
        // Documented (README, precisions): fp8 at head_dim 96 (sm_89) and 192 (sm_90a), and int8
        // at 256 on sm_80 and sm_89 (one stage fetches the next K after P is packed) spill a few
        // words under ptxas' register allocation; everything else spills nothing.
        const bool known = (t.p == Precision::fp8_e4m3 && (d == 96 || d == 192)) ||
                           (t.p == Precision::int8 && d == 256 && t.arch.sm < 90);
        CHECK(r.spill_stores <= (known ? 16 : 0));
        for (const char* k : {"quantize_rows", "quantize_key_blocks", "v_channel_max", "pack_v"}) {
          if (std::string_view(k) == "quantize_key_blocks" && t.p != Precision::fp8_e4m3) continue;
          const ResourceUsage q = runtime::parse_ptxas_log(
              out.log, codegen::quantize_symbol(src.symbol, k, Precision::bf16));
          CHECK(q.registers > 0);
          CHECK(q.spill_stores == 0);
        }
      }
}

TEST_CASE("8-bit on sm_90a: the wgmma skeleton, when it applies, and what it compiles to",
          "[codegen][nvrtc][q8]") {
  using test::tile_config;
  const Arch kSm90{90, false};
  // Its defaults at head dims 64, 128 and 192, unprotected: one warpgroup, 128-key blocks, two
  // stages.
  for (Precision p : {Precision::fp8_e4m3, Precision::int8})
    for (int d : {64, 128, 192}) {
      const KernelConfig c = default_config(d, p, Mask::causal, kSm90a);
      INFO(c.name());
      CHECK(uses_wgmma(c));
      CHECK((c.block_m == 64 && c.block_n == 128 && c.num_warps == 4 && c.num_stages == 2));
    }
  // Everything else keeps the mma.sync skeleton: another arch (sm_90 without "a" cannot run
  // wgmma), protection, head dim, one stage, or more than 16 rows per warp.
  const KernelConfig wg = tile_config(128, 128, 128, 8, 2, kSm90a, Precision::fp8_e4m3);
  CHECK(uses_wgmma(wg));
  auto with = [&](auto&& change) {
    KernelConfig c = wg;
    change(c);
    return uses_wgmma(c);
  };
  CHECK_FALSE(with([&](KernelConfig& c) { c.arch = kSm90; }));
  CHECK_FALSE(with([&](KernelConfig& c) { c.arch = kSm89; }));
  CHECK(with([](KernelConfig& c) { c.precision = Precision::int8; }));
  CHECK(with([](KernelConfig& c) { c.precision = Precision::f16; }));       // kernel/fwd_sm90.cuh
  CHECK(with([](KernelConfig& c) { c.precision = Precision::f16_pasa; }));  // fwd_pasa_sm90.cuh
  CHECK(with([](KernelConfig& c) {  // EFTA on PASA: the warp-specialised kernel, two consumers
    c.precision = Precision::f16_pasa;
    c.protection = Protection::efta_detect;
  }));
  CHECK_FALSE(with([](KernelConfig& c) {  // on one warpgroup it keeps fwd_pasa_sm80.cuh
    c.precision = Precision::f16_pasa;
    c.protection = Protection::efta_detect;
    c.block_m = 64, c.num_warps = 4;
  }));
  // PASA's injection builds ride in the warp-specialised kernel (two warpgroups here), and on
  // one warpgroup keep the sm80 skeleton.
  CHECK(with([](KernelConfig& c) {
    c.precision = Precision::f16_pasa;
    c.fault_injection = true;
  }));
  CHECK_FALSE(with([](KernelConfig& c) {
    c.precision = Precision::f16_pasa;
    c.fault_injection = true;
    c.block_m = 64, c.num_warps = 4;
  }));
  CHECK_FALSE(with([](KernelConfig& c) { c.protection = Protection::flash_abft; }));
  CHECK(with([](KernelConfig& c) { c.head_dim = 256; }));  // two swizzle atoms per row
  CHECK(with([](KernelConfig& c) {  // int8's O is its only 128-register tile (lazy softmax)
    c.head_dim = 256;
    c.precision = Precision::int8;
  }));
  CHECK(with([](KernelConfig& c) { c.head_dim = 192; }));       // three 64-byte atoms per row
  CHECK_FALSE(with([](KernelConfig& c) { c.head_dim = 96; }));  // 96-byte rows: no atom fits
  CHECK_FALSE(with([](KernelConfig& c) { c.block_n = 32; }));
  CHECK_FALSE(with([](KernelConfig& c) { c.num_stages = 1; }));
  CHECK_FALSE(with([](KernelConfig& c) { c.num_warps = 4; }));  // 32 rows per warp
  const KernelConfig wide = default_config(256, Precision::fp8_e4m3, Mask::none, kSm90a);
  CHECK(uses_wgmma(wide));
  // 8-bit at 256: fp8 the warp-specialised 128 x 64 w8s3 (two consumers of 224 registers hold
  // O), int8 one warpgroup's 64 x 64 w4s2 (its INT32 O is its only 128-register tile).
  for (Precision p : {Precision::fp8_e4m3, Precision::int8})
    for (Mask m : {Mask::none, Mask::causal}) {
      const KernelConfig c = default_config(256, p, m, kSm90a);
      INFO(c.name());
      if (p == Precision::fp8_e4m3)
        CHECK((c.block_m == 128 && c.block_n == 64 && c.num_warps == 8 && c.num_stages == 3 &&
               warp_specialized(c)));
      else
        CHECK((c.block_m == 64 && c.block_n == 64 && c.num_warps == 4 && c.num_stages == 2 &&
               uses_wgmma(c) && !warp_specialized(c)));
      // Both copy K, its scales and V^T by TMA (the warp-specialised producer's first thread).
      CHECK(q8_tensor_maps(c));
      CHECK(codegen::generate(c).text.find("const __grid_constant__ ftattn::Q8TensorMaps maps") !=
            std::string::npos);
    }
  // Kernel::launch fuses Q's quantisation into the wgmma kernel up to head dim 128 only.
  CHECK(quantises_q_in_kernel(wg));
  CHECK(quantises_q_in_kernel(default_config(64, Precision::int8, Mask::none, kSm90a)));
  CHECK_FALSE(quantises_q_in_kernel(wide));
  KernelConfig abft = wg;
  abft.protection = Protection::flash_abft;
  CHECK_FALSE(quantises_q_in_kernel(abft));

  for (auto [d, m, n, w] :
       {std::array{128, 64, 128, 4}, std::array{64, 64, 64, 4}, std::array{256, 64, 64, 4}}) {
    const KernelConfig c = tile_config(d, m, n, w, 2, kSm90a, Precision::fp8_e4m3, Mask::causal);
    INFO(c.name());
    REQUIRE(uses_wgmma(c));
    // Swizzled tiles at 1024-byte boundaries: Q, then per stage K with a float per key and V^T,
    // and 1024 bytes to align the base.
    auto align = [](int b) { return (b + 1023) / 1024 * 1024; };
    CHECK(c.shared_memory_bytes() ==
          align(m * d) + 2 * (align(n * d + 4 * n) + align(d * n)) + 1024);
    const codegen::KernelSource src = codegen::generate(c);
    CHECK(src.text.find("ftattn/kernel/fwd_q8_sm90.cuh") != std::string::npos);
    CHECK(src.text.find("ftattn::Q8WgmmaTraits<") != std::string::npos);
    CHECK(src.text.find("static_assert(Traits::smem_bytes == " +
                        std::to_string(c.shared_memory_bytes())) != std::string::npos);
    const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
    // Per key block and copy of the loop body (masked and not): GEMM I in head_dim / 32 steps of
    // N = block_n, GEMM II in block_n / 32 steps of N = head_dim, A from registers, into a tile
    // of its own (q8::fold_output); at head dim 256 in four pieces of N = 64 and at 128 in two,
    // each committed and waited for on its own.
    const int pieces = d / 64 > 1 ? d / 64 : 1;
    const int gemm2_n = d / pieces;
    const std::string gemm1 =
        "wgmma.mma_async.sync.aligned.m64n" + std::to_string(n) + "k32.f32.e4m3.e4m3";
    const std::string gemm2 =
        "wgmma.mma_async.sync.aligned.m64n" + std::to_string(gemm2_n) + "k32.f32.e4m3.e4m3";
    const int copies = count(out.ptx, "wgmma.commit_group") / (2 + pieces - 1);
    CHECK(copies == 2);
    if (n == gemm2_n) {
      CHECK(count(out.ptx, gemm1) == copies * (d / 32 + pieces * n / 32));
    } else {
      CHECK(count(out.ptx, gemm1) == copies * (d / 32));
      CHECK(count(out.ptx, gemm2) == copies * pieces * (n / 32));
    }
    CHECK(count(out.ptx, "mma.sync") == 0);
    CHECK(out.ptx.find("fence.proxy.async.shared::cta") != std::string::npos);
    // K, its scales and V^T come by TMA from the tensor maps of a second, __grid_constant__
    // parameter: per copy site one 2-D box of scales and (K atoms + 1) 3-D boxes, on the stage's
    // mbarrier; Q alone still takes cp.async chunks.
    REQUIRE(q8_tensor_maps(c));
    CHECK(src.text.find("const __grid_constant__ ftattn::Q8TensorMaps maps") != std::string::npos);
    const int sites = count(out.ptx, "cp.async.bulk.tensor.2d");
    CHECK(sites >= 2);
    CHECK(count(out.ptx, "cp.async.bulk.tensor.3d") == sites * ((d + 127) / 128 + 1));
    CHECK(count(out.ptx, "mbarrier.arrive.expect_tx") == sites);
    CHECK(out.ptx.find("mbarrier.try_wait.parity") != std::string::npos);
    const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
    CHECK(r.spill_stores == 0);
    // No wgmma serialised: neither for plain instructions writing a wgmma's operand registers
    // while it is in flight (C7513, a schedule bug) nor for lack of registers (C7512, which the
    // three-CTA cap caused at head dim 128 with a whole P V tile beside O).
    CHECK(r.performance_notes.empty());
    // One warpgroup: capped for three CTAs (65536 registers / 384 threads) at head dims 64 and
    // 128 (there with half of the block's P V tile at a time), one at 256, whose tiles' shared
    // memory fits two.
    if (w == 4 && d <= 128) CHECK(r.registers <= 168);
    if (d == 256) CHECK(c.shared_memory_bytes() > 228 * 1024 / 3 - 1024);
  }
}

TEST_CASE("int8 on sm_90a: four CTAs per SM where their shared memory fits",
          "[codegen][nvrtc][q8]") {
  // The one-warpgroup skeleton asks int8 for four CTAs where their shared memory allows, so
  // ptxas keeps to 128 registers (under the three-CTA cap both took 160: three CTAs, 5-13%
  // slower): head dim 64's default 64 x 128 and head dim 128's 64 x 64.
  for (auto [d, n] : {std::array{64, 128}, std::array{128, 64}})
    for (Mask m : {Mask::none, Mask::causal}) {
      const KernelConfig c = test::tile_config(d, 64, n, 4, 2, kSm90a, Precision::int8, m);
      INFO(c.name());
      REQUIRE(uses_wgmma(c));
      CHECK(4 * (c.shared_memory_bytes() + 1024) <= 228 * 1024);
      const codegen::KernelSource src = codegen::generate(c);
      const ResourceUsage r =
          runtime::parse_ptxas_log(runtime::compile_with_nvrtc(src).log, src.symbol);
      CHECK(r.registers > 0);
      CHECK(r.registers <= 128);
      CHECK(r.spill_stores == 0);
      CHECK(r.performance_notes.empty());
    }
  // At head dim 64 that tile is int8's default.
  const KernelConfig def = default_config(64, Precision::int8, Mask::none, kSm90a);
  CHECK((def.block_m == 64 && def.block_n == 128 && def.num_warps == 4 && def.num_stages == 2));
}

TEST_CASE("quantised inputs are refused by a kernel or problem they were not made for", "[q8]") {
  // The bytes of int8 and E4M3 operands mean different numbers, and the layout follows the
  // sizes: launched elsewhere they were read as garbage, with no error.
  const Problem made_for = Problem::bhsd(2, 8, 4, 1000, 1000, 128);
  const QuantizedInputs::Origin origin{Precision::int8, 2, 8, 4, 1000, 1000, 128};
  const KernelConfig int8 = test::tile_config(128, 64, 64, 4, 2, Arch{89, false}, Precision::int8);
  KernelConfig fp8 = int8;
  fp8.precision = Precision::fp8_e4m3;
  CHECK_NOTHROW(runtime::check_quantized_origin(int8, origin, made_for, false));
  REQUIRE_CONFIG_ERROR(runtime::check_quantized_origin(fp8, origin, made_for, false),
                       "these inputs were quantised for int8");
  Problem longer = made_for;
  longer.seqlen_k = 2000;
  REQUIRE_CONFIG_ERROR(runtime::check_quantized_origin(int8, origin, longer, false),
                       "quantised for seqlen_k 1000, and the problem has seqlen_k 2000");
  // Q's sizes count only where the kernel reads quantised Q.
  Problem fewer_rows = Problem::bhsd(2, 8, 4, 10, 1000, 128);
  REQUIRE_CONFIG_ERROR(runtime::check_quantized_origin(int8, origin, fewer_rows, false),
                       "seqlen_q 1000, and the problem has seqlen_q 10");
  CHECK_NOTHROW(runtime::check_quantized_origin(int8, origin, fewer_rows, true));
}

TEST_CASE("QuantizedLayout::of checks the problem before sizing the workspace", "[q8]") {
  // seqlen -5 gave a workspace of 18446744073709528320 bytes.
  CHECK_THROWS_AS(QuantizedLayout::of(Problem::bhsd(1, 1, 1, -5, -5, 128)), ConfigError);
  CHECK(QuantizedLayout::of(Problem::bhsd(1, 1, 1, 16, 16, 128)).bytes > 0);
}
