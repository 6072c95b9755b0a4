// The warp-specialised Hopper skeleton (kernel/fwd_ws_sm90.cuh): which configs take it, their
// CTA (a producer warpgroup on top of num_warps) and shared memory, and what NVRTC and ptxas make
// of the generated units.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "codegen/checksum_atoms.hpp"
#include "codegen/swizzle_atom.hpp"
#include "ftattn/codegen.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "tests/support/configs.hpp"

using namespace ftattn;

namespace {
const Arch kSm90a{90, true};

// What every warp-specialised unit shows: the kernel `skeleton` at 384 threads, the producer's
// registers handed to the consumers, copies arriving on mbarriers (Q by cp.async, K and V by
// TMA), turns passed by
// named barrier, no mma.sync and no serialised wgmma. Returns the unit's symbol, PTX and ptxas
// log for the caller's own checks.
struct WsUnit {
  std::string symbol;
  runtime::NvrtcOutput out;
};
WsUnit check_ws_unit(const KernelConfig& c, const std::string& skeleton) {
  REQUIRE(warp_specialized(c));
  INFO(c.name());
  const codegen::KernelSource src = codegen::generate(c);
  CHECK(src.text.find(skeleton + "<Traits>") != std::string::npos);
  CHECK(src.text.find("__launch_bounds__(Traits::launch_threads, 1)") != std::string::npos);
  runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
  CHECK(out.ptx.find(".maxntid 384, 1, 1") != std::string::npos);
  CHECK(test::count(out.ptx, "setmaxnreg.dec.sync.aligned.u32 56") == 1);
  CHECK(test::count(out.ptx, "setmaxnreg.inc.sync.aligned.u32 224") == 1);
  if (q8_tensor_maps(c)) {
    // 8-bit: Q by cp.async, K (one box per swizzle atom: 64 or 128 bytes), its scales and V^T by
    // TMA, each ring's bytes expected on its "full" mbarrier.
    CHECK(test::count(out.ptx, "cp.async.mbarrier.arrive.noinc.shared::cta.b64") == 1);
    // Per copy site (the producer's loop, however NVRTC unrolls it): one 2-D box of scales.
    const int sites = test::count(out.ptx, "cp.async.bulk.tensor.2d");
    CHECK(sites >= 1);
    CHECK(test::count(out.ptx, "cp.async.bulk.tensor.3d") ==
          sites * (c.head_dim / codegen::swizzle_atom_bytes(c.head_dim) + 1));
    CHECK(test::count(out.ptx, "mbarrier.arrive.expect_tx") == 2 * sites);
  } else {
    // 16-bit: Q by cp.async, K and V by TMA, one 4-D box per swizzle atom column per copy
    // site, each ring's bytes expected on its "full" mbarrier; f16_pasa's shift rows in 2-D
    // boxes. The checksum schemes' rows and chunks still come by every producer thread's
    // cp.async, arriving beside the TMA bytes.
    REQUIRE(kv_tensor_maps(c));
    const int atoms = c.head_dim * 2 / codegen::swizzle_atom_bytes(c.head_dim * 2);
    const int boxes = test::count(out.ptx, "cp.async.bulk.tensor.4d");
    CHECK(boxes >= 2 * atoms);
    CHECK(boxes % atoms == 0);
    CHECK(test::count(out.ptx, "mbarrier.arrive.expect_tx") >= 2);
    CHECK((test::count(out.ptx, "cp.async.bulk.tensor.2d") > 0) ==
          (c.precision == Precision::f16_pasa));
    // Persistent tiles: Q's second copy site, the two warps that walk the tiles.
    if (c.protection == Protection::none)
      CHECK(test::count(out.ptx, "cp.async.mbarrier.arrive.noinc.shared::cta.b64") ==
            (persistent_tiles(c) ? 2 : 1));
    else
      CHECK(test::count(out.ptx, "cp.async.mbarrier.arrive.noinc.shared::cta.b64") >= 3);
  }
  CHECK(test::count(out.ptx, "mbarrier.try_wait.parity") >= 3);
  CHECK(test::count(out.ptx, "bar.arrive") >= 1);
  CHECK(test::count(out.ptx, "mma.sync") == 0);
  INFO(out.log);
  CHECK(out.log.find("C751") == std::string::npos);  // wgmma serialised
  CHECK(out.log.find("C752") == std::string::npos);  // e.g. C7520: under a branch
  return {src.symbol, std::move(out)};
}

// The sm_90a defaults of an open config at head dim `d` for `keys` keys and queries.
KernelConfig defaults_at(int d, Precision p, Protection prot, Mask m, bool inject, int keys) {
  KernelConfig open;
  open.head_dim = d, open.precision = p, open.protection = prot, open.mask = m;
  open.fault_injection = inject;
  const Problem pr = Problem::bhsd(1, 8, 8, keys, keys, d);
  return with_defaults(open, kSm90a, &pr);
}

}  // namespace

TEST_CASE("warp_specialized: two consumer warpgroups of 16-bit tiles on sm_90a", "[ws][codegen]") {
  for (Precision p : {Precision::f16, Precision::bf16, Precision::f16_pasa})
    for (int d : {64, 128}) {
      const KernelConfig ws = test::tile_config(d, 128, 128, 8, 2, kSm90a, p);
      INFO(ws.name());
      CHECK(warp_specialized(ws));
      CHECK(launch_threads(ws) == 8 * 32 + 128);
      // One warpgroup: the plain wgmma skeleton, whose CTAs overlap each other instead.
      const KernelConfig one = test::tile_config(d, 64, 128, 4, 2, kSm90a, p);
      CHECK(uses_wgmma(one));
      CHECK_FALSE(warp_specialized(one));
      CHECK(launch_threads(one) == 128);
      // Every checksum scheme runs on it, and builds with fault-injection sites.
      for (Protection prot :
           {Protection::flash_abft, Protection::efta_detect, Protection::efta_correct}) {
        KernelConfig checked = ws;
        checked.protection = prot;
        CHECK(warp_specialized(checked));  // PASA's EFTA too (kernel/pasa_efta_sm90.cuh)
        CHECK(launch_threads(checked) == 384);
        // Three consumers: Flash-ABFT, and EFTA at head dims up to 64 only (at 128 its consumers
        // spill kilobytes).
        KernelConfig three = test::tile_config(d, 192, 128, 12, 2, kSm90a, p, Mask::none, prot);
        CHECK(warp_specialized(three) ==
              (prot == Protection::flash_abft || (p != Precision::f16_pasa && d <= 64)));
      }
      // Injection builds, PASA's unprotected ones too.
      KernelConfig injected = ws;
      injected.protection = p == Precision::f16_pasa ? Protection::none : Protection::flash_abft;
      injected.fault_injection = true;
      CHECK(warp_specialized(injected));
      // No warpgroup MMAs, no warp specialisation.
      KernelConfig sm80 = ws;
      sm80.arch = Arch{80, false};
      CHECK_FALSE(warp_specialized(sm80));
    }
}

TEST_CASE("head dim 96 defaults: three consumers but on short runs, every scheme on wgmma",
          "[ws][codegen]") {
  // Rows of three 64-byte swizzle atoms (sm90::tile_offset): unprotected f16, bf16 and f16_pasa,
  // and Flash-ABFT, take 192 x 128 w12s2 from 512 keys without a mask and 1k causal; shorter runs
  // the one-warpgroup tile (f16 and bf16 64 x 64, f16_pasa 64 x 128, two stages). EFTA takes
  // 128 x 128 w8s2 at every length.
  for (Precision p : {Precision::f16, Precision::bf16, Precision::f16_pasa})
    for (Protection prot : {Protection::none, Protection::flash_abft, Protection::efta_detect,
                            Protection::efta_correct})
      for (Mask m : {Mask::none, Mask::causal})
        for (int keys : {256, 512, 1024, 16384}) {
          if (p == Precision::f16_pasa && prot != Protection::none) continue;  // mma.sync
          const KernelConfig c = defaults_at(96, p, prot, m, false, keys);
          INFO(c.name() << " at " << keys << " keys");
          REQUIRE(uses_wgmma(c));
          const bool efta = prot == Protection::efta_detect || prot == Protection::efta_correct;
          const bool short_run = keys <= 256 || (m == Mask::causal && keys <= 512);
          if (efta) {
            CHECK((c.block_m == 128 && c.block_n == 128 && c.num_warps == 8 && c.num_stages == 2));
          } else if (short_run && prot == Protection::none) {
            CHECK((c.block_m == 64 && c.num_warps == 4 && c.num_stages == 2));
            CHECK(c.block_n == (p == Precision::f16_pasa ? 128 : 64));
          } else {
            CHECK((c.block_m == 192 && c.block_n == 128 && c.num_warps == 12 && c.num_stages == 2));
          }
        }
}

TEST_CASE("head dim 64 defaults: Flash-ABFT on three consumers from 1k keys or 2k causal",
          "[ws][codegen]") {
  // Its checksum tile is 1/16 of the MMAs there; on one warpgroup it ran +34-46% over the
  // unprotected kernel (abft_d64_tiles.csv). Injection builds take the same tile; the unprotected
  // kernel keeps one warpgroup, and short causal runs 64-key blocks.
  for (Precision p : {Precision::f16, Precision::bf16})
    for (Protection prot : {Protection::none, Protection::flash_abft})
      for (bool inject : {false, true})
        for (Mask m : {Mask::none, Mask::causal})
          for (int keys : {512, 1024, 2048, 16384}) {
            if (inject && prot == Protection::none) continue;
            const KernelConfig c = defaults_at(64, p, prot, m, inject, keys);
            INFO(c.name() << " at " << keys << " keys");
            REQUIRE(uses_wgmma(c));
            const bool three =
                prot == Protection::flash_abft && keys >= (m == Mask::causal ? 2048 : 1024);
            if (three) {
              CHECK(
                  (c.block_m == 192 && c.block_n == 128 && c.num_warps == 12 && c.num_stages == 2));
              CHECK(warp_specialized(c));
            } else {
              CHECK((c.block_m == 64 && c.num_warps == 4 && c.num_stages == 2));
              CHECK(c.block_n == (m == Mask::causal && keys <= 1024 ? 64 : 128));
            }
          }
}

TEST_CASE("head dim 64 defaults: EFTA on three consumers from 2k keys", "[ws][codegen]") {
  // efta_three_consumers_d32_d64.csv: 192 x 128 w12s2 from 2k keys, but efta_correct causal
  // below 8k keys, which takes 128 x 128 w8s2; shorter runs keep 64 x 128 w4s2 (64-key blocks
  // causal up to 1k keys). Injection builds alike.
  for (Precision p : {Precision::f16, Precision::bf16})
    for (Protection prot : {Protection::efta_detect, Protection::efta_correct})
      for (bool inject : {false, true})
        for (Mask m : {Mask::none, Mask::causal})
          for (int keys : {512, 1024, 2048, 4096, 8192, 16384}) {
            const KernelConfig c = defaults_at(64, p, prot, m, inject, keys);
            INFO(c.name() << " at " << keys << " keys");
            REQUIRE(uses_wgmma(c));
            CHECK(c.num_stages == 2);
            const bool causal = m == Mask::causal;
            const bool correct_causal = prot == Protection::efta_correct && causal;
            if (keys >= 8192 || (keys >= 2048 && !correct_causal)) {
              CHECK((c.block_m == 192 && c.block_n == 128 && c.num_warps == 12));
              CHECK(warp_specialized(c));
            } else if (correct_causal && keys >= 2048) {
              CHECK((c.block_m == 128 && c.block_n == 128 && c.num_warps == 8));
            } else {
              CHECK((c.block_m == 64 && c.num_warps == 4));
              CHECK(c.block_n == (causal && keys <= 1024 ? 64 : 128));
            }
          }
}

TEST_CASE("head dim 32 defaults: one warpgroup, checksum schemes three consumers on long runs",
          "[ws][codegen]") {
  // Rows of one 64-byte swizzle atom, GEMM II m64n32 (d32_tiles.csv, d32_abft_tiles.csv,
  // d32_efta_tiles.csv, efta_three_consumers_d32_d64.csv): unprotected and EFTA 64 x 128 w4s2
  // (64 x 64 causal up to 1k keys), the checksum schemes 192 x 128 w12s2 from 2k keys without a
  // mask and 8k causal (efta_detect 2k: d32_efta_fallback_tiles_2.csv), efta_correct causal below
  // that 128 x 128 w8s2. Injection builds take their scheme's tile.
  for (Precision p : {Precision::f16, Precision::bf16})
    for (Protection prot : {Protection::none, Protection::flash_abft, Protection::efta_detect,
                            Protection::efta_correct})
      for (bool inject : {false, true})
        for (Mask m : {Mask::none, Mask::causal})
          for (int keys : {512, 1024, 2048, 4096, 8192, 16384}) {
            if (inject && prot == Protection::none) continue;
            const KernelConfig c = defaults_at(32, p, prot, m, inject, keys);
            INFO(c.name() << " at " << keys << " keys");
            REQUIRE(uses_wgmma(c));
            CHECK(c.num_stages == 2);
            const bool causal = m == Mask::causal;
            const int causal_keys = prot == Protection::efta_detect ? 2048 : 8192;
            if (prot != Protection::none && keys >= (causal ? causal_keys : 2048)) {
              CHECK((c.block_m == 192 && c.block_n == 128 && c.num_warps == 12));
              CHECK(warp_specialized(c));
            } else if (prot == Protection::efta_correct && causal) {
              CHECK((c.block_m == 128 && c.block_n == 128 && c.num_warps == 8));
              CHECK(warp_specialized(c));
            } else {
              CHECK((c.block_m == 64 && c.num_warps == 4));
              CHECK(c.block_n == (causal && keys <= 1024 ? 64 : 128));
            }
          }
  // f16_pasa takes the same one-warpgroup tiles (d32_pasa_tiles.csv).
  for (Mask m : {Mask::none, Mask::causal})
    for (int keys : {512, 1024, 2048, 16384}) {
      const KernelConfig c = defaults_at(32, Precision::f16_pasa, Protection::none, m, false, keys);
      INFO(c.name() << " at " << keys << " keys");
      CHECK((c.block_m == 64 && c.num_warps == 4 && c.num_stages == 2));
      CHECK(c.block_n == (m == Mask::causal && keys <= 1024 ? 64 : 128));
      CHECK(uses_wgmma(c));
    }
}

TEST_CASE("head dim 32 units: GEMM II m64n32 and its checksum tiles, no spills at the defaults",
          "[ws][codegen][nvrtc]") {
  // One warpgroup and three consumers unprotected, each scheme on its default tile: GEMM II one
  // m64n{32 + 8 * checksum tiles}k16 per 16 keys, no mma.sync, no spills (efta_correct's
  // 128 x 128 w8s2 included) and no serialised wgmma.
  for (Protection prot : {Protection::none, Protection::flash_abft, Protection::efta_detect,
                          Protection::efta_correct})
    for (Mask m : {Mask::none, Mask::causal})
      for (int keys : {4096, 16384}) {
        KernelConfig open;
        open.head_dim = 32, open.precision = Precision::f16, open.protection = prot, open.mask = m;
        const Problem pr = Problem::bhsd(1, 8, 8, keys, keys, 32);
        const KernelConfig c = with_defaults(open, kSm90a, &pr);
        INFO(c.name());
        const codegen::KernelSource src = codegen::generate(c);
        const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
        const int v_atoms = codegen::checksum_atoms(prot).v;
        const std::string gemm2 = "wgmma.mma_async.sync.aligned.m64n" +
                                  std::to_string(32 + 8 * v_atoms) + "k16.f32.f16.f16";
        CHECK(test::count(out.ptx, gemm2) >= 2 * (c.block_n / 16));
        CHECK(test::count(out.ptx, "mma.sync") == 0);
        const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
        // efta_detect's one-warpgroup causal kernel spills 8 bytes, efta_correct's 24-28 at
        // 64 x 128 (its default without a mask; ahead of 128 x 128 w8s2 there regardless).
        const bool efta_w4 =
            prot != Protection::none && prot != Protection::flash_abft && c.num_warps == 4;
        CHECK(r.spill_stores <= (efta_w4 ? 28 : 0));
        CHECK(out.log.find("C751") == std::string::npos);
      }
}

TEST_CASE("Flash-ABFT's l is its checksum tile's ones column: the turns add no probabilities",
          "[ws][codegen][nvrtc]") {
  // The consumers' turns lie between the first and the last named-barrier arrive. There the
  // unprotected kernel sums each row's probabilities in FP32 (an add per score, 2 x 64 per
  // thread and copy of the softmax); Flash-ABFT takes l from the ones column GEMM II computes
  // anyway (protect/checksum.cuh), so its turns keep only the odd add of the softmax's rest.
  auto turn_adds = [](const KernelConfig& c) {
    INFO(c.name());
    const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(codegen::generate(c));
    const std::size_t first = out.ptx.find("bar.arrive");
    const std::size_t last = out.ptx.rfind("bar.arrive");
    REQUIRE(first != std::string::npos);
    const std::string turns = out.ptx.substr(first, last - first);
    return test::count(turns, "add.f32") + test::count(turns, "add.rn.f32");
  };
  const int unprotected =
      turn_adds(test::tile_config(128, 192, 128, 12, 2, kSm90a, Precision::f16, Mask::causal));
  CHECK(unprotected >= 2 * 64);
  for (int d : {64, 128}) {
    const int abft = turn_adds(test::tile_config(d, 192, 128, 12, 2, kSm90a, Precision::f16,
                                                 Mask::causal, Protection::flash_abft));
    CHECK(abft <= 8);
  }
}

TEST_CASE("query tiles: the causal 192-row tiles put their ragged tile first", "[ws][codegen]") {
  // A recompute relaunches the tile that computed a reported row: on the three-consumer causal
  // kernel that is not row / block_m, since tile 0 holds the seqlen_q % 192 ragged rows.
  const KernelConfig three = test::tile_config(128, 192, 128, 12, 2, kSm90a, Precision::f16,
                                               Mask::causal, Protection::flash_abft);
  REQUIRE(warp_specialized(three));
  // 400 rows: tile 0 is rows 0-15, tile 1 rows 16-207, tile 2 rows 208-399.
  CHECK(query_tile_row0(three, 400, 0) == 0);
  CHECK(query_tile_row0(three, 400, 1) == 16);
  CHECK(query_tile_row0(three, 400, 2) == 208);
  for (auto [row, tile] : std::vector<std::array<int, 2>>{
           {0, 0}, {15, 0}, {16, 1}, {207, 1}, {208, 2}, {209, 2}, {399, 2}})
    CHECK(query_tile_of_row(three, 400, row) == tile);
  // Every row maps to the tile whose rows hold it.
  for (int seqlen_q : {1, 191, 192, 193, 256, 400, 4096})
    for (int row = 0; row < seqlen_q; ++row) {
      const int t = query_tile_of_row(three, seqlen_q, row);
      INFO(seqlen_q << " " << row);
      CHECK(query_tile_row0(three, seqlen_q, t) <= row);
      CHECK(row < query_tile_row0(three, seqlen_q, t + 1));
    }
  // A whole number of tiles, no mask, or 128-row tiles: row / block_m.
  CHECK(query_tile_of_row(three, 384, 200) == 1);
  KernelConfig unmasked = three;
  unmasked.mask = Mask::none;
  CHECK(query_tile_of_row(unmasked, 400, 209) == 1);
  CHECK(query_tile_row0(unmasked, 400, 2) == 384);
  const KernelConfig two = test::tile_config(128, 128, 128, 8, 2, kSm90a, Precision::f16,
                                             Mask::causal, Protection::flash_abft);
  CHECK(query_tile_of_row(two, 400, 209) == 1);
  CHECK(query_tile_row0(two, 400, 3) == 384);
}

TEST_CASE("warp_specialized: two consumer warpgroups of int8 and fp8 tiles at head dims 64-256",
          "[ws][codegen][q8]") {
  for (Precision p : {Precision::int8, Precision::fp8_e4m3})
    for (int d : {64, 128})
      for (int n : {64, 128}) {
        const KernelConfig q8 = test::tile_config(d, 128, n, 8, 2, kSm90a, p);
        INFO(q8.name());
        CHECK(uses_wgmma(q8));
        CHECK(warp_specialized(q8));
        CHECK(launch_threads(q8) == 384);
        // One warpgroup (the 8-bit defaults): the plain wgmma skeleton.
        const KernelConfig one = test::tile_config(d, 64, n, 4, 2, kSm90a, p);
        CHECK(uses_wgmma(one));
        CHECK_FALSE(warp_specialized(one));
        CHECK(launch_threads(one) == 128);
        CHECK_FALSE(warp_specialized(test::default_config(d, p, Mask::causal, kSm90a)));
        // Protection or injection: the mma.sync skeleton; so is sm_90 without "a".
        KernelConfig abft = q8;
        abft.protection = Protection::flash_abft;
        CHECK_FALSE(warp_specialized(abft));
        CHECK(launch_threads(abft) == 256);
        KernelConfig injected = q8;
        injected.fault_injection = true;
        CHECK_FALSE(warp_specialized(injected));
        KernelConfig sm90 = q8;
        sm90.arch = Arch{90, false};
        CHECK_FALSE(warp_specialized(sm90));
      }
  // Head dim 256 too (O alone is 128 registers, FP32 for fp8, INT32 for int8: the consumers' 224
  // hold it).
  for (Precision p : {Precision::int8, Precision::fp8_e4m3}) {
    const KernelConfig wide = test::tile_config(256, 128, 64, 8, 2, kSm90a, p);
    CHECK(uses_wgmma(wide));
    CHECK(warp_specialized(wide));
    CHECK(launch_threads(wide) == 384);
  }
}

TEST_CASE("warp_specialized: the mbarriers take 256 bytes after the tiles", "[ws][codegen]") {
  // Q, two K and two V tiles of 128 rows x 256 bytes, the 1024 bytes that align the dynamic base,
  // and the barriers; the generated unit asserts that its traits agree. The unprotected kernel
  // walks persistent tiles: a second Q tile (not with injection sites).
  KernelConfig ws = test::tile_config(128, 128, 128, 8, 2, kSm90a, Precision::f16, Mask::causal);
  ws.fault_injection = true;
  CHECK_FALSE(persistent_tiles(ws));
  CHECK(ws.shared_memory_bytes() == 5 * 128 * 256 + 256 + 1024);
  const KernelConfig walked = test::tile_config(128, 128, 128, 8, 2, kSm90a);
  CHECK(persistent_tiles(walked));
  CHECK(walked.shared_memory_bytes() == 6 * 128 * 256 + 256 + 1024);
  KernelConfig checked = walked;
  checked.protection = Protection::efta_detect;  // 8 checksum rows per K tile, a V atom per key
  CHECK(checked.shared_memory_bytes() ==
        128 * 256 + 2 * ((128 + 8) * 256 + 128 * 256 + 128 * 128) + 256 + 1024);
}

TEST_CASE("warp_specialized 8-bit: the mbarriers take 256 bytes after the tiles",
          "[ws][codegen][q8]") {
  // Q, then per stage K with a float per key and V^T, each at 1024-byte boundaries, or the
  // epilogue's 16-bit O rows if larger; the barriers; 1024 bytes to align the base. The
  // generated unit asserts that Q8WgmmaTraits agrees.
  auto align = [](int b) { return (b + 1023) / 1024 * 1024; };
  for (Precision p : {Precision::int8, Precision::fp8_e4m3})
    for (int d : {64, 128})
      for (int n : {64, 128})
        for (int st : {2, 3}) {
          const KernelConfig c = test::tile_config(d, 128, n, 8, st, kSm90a, p);
          INFO(c.name());
          const int loop = align(128 * d) + st * (align(n * d + 4 * n) + align(d * n));
          const int out = 128 * (2 * d + 16);
          CHECK(c.shared_memory_bytes() == std::max(loop, out) + 256 + 1024);
        }
}

TEST_CASE("warp_specialized units: producer and consumers, no spills, no serialised wgmma",
          "[ws][codegen][nvrtc]") {
  // Flash-ABFT: the V checksum chunks among the producer's copies, GEMM II one n8 tile wider
  // (m64n{head_dim + 8}), the end-of-row check.
  for (int d : {64, 128})
    for (Mask m : {Mask::none, Mask::causal}) {
      const KernelConfig c =
          test::tile_config(d, 128, 64, 8, 3, kSm90a, Precision::f16, m, Protection::flash_abft);
      const WsUnit u = check_ws_unit(c, "attention_fwd_ws_sm90");
      CHECK(test::count(u.out.ptx, "wgmma.mma_async.sync.aligned.m64n" + std::to_string(d + 8) +
                                       "k16.f32.") == 3 * (64 / 16));
      CHECK(runtime::parse_ptxas_log(u.out.log, u.symbol).spill_stores == 0);
    }
  // EFTA: the producer copies the checksum rows below the keys (GEMM I one n8 tile wider) and the
  // V checksum chunks (GEMM II one, efta_correct two, n8 tiles wider); the consumers run the
  // checked softmax between turns and the row-sum and output checks at the end.
  for (Protection prot : {Protection::efta_detect, Protection::efta_correct})
    for (Precision p : {Precision::f16, Precision::bf16})
      for (int d : {64, 128})
        for (int n : {64, 128})
          for (Mask m : {Mask::none, Mask::causal}) {
            const KernelConfig c = test::tile_config(d, 128, n, 8, 2, kSm90a, p, m, prot);
            const WsUnit u = check_ws_unit(c, "attention_fwd_ws_sm90");
            const std::string wgmma = "wgmma.mma_async.sync.aligned.m64n";
            const int v_atoms = codegen::checksum_atoms(prot).v;
            CHECK(test::count(u.out.ptx, wgmma + std::to_string(n + 8) + "k16.f32.") >=
                  4 * (d / 16));
            CHECK(test::count(u.out.ptx, wgmma + std::to_string(d + 8 * v_atoms) + "k16.f32.") >=
                  3 * (n / 16));
            const ResourceUsage r = runtime::parse_ptxas_log(u.out.log, u.symbol);
            // efta_correct at 128 x 128: set-up values stored in the prologue and read in the
            // epilogue (SASS: STL before the key loop, LDL after it), 4 bytes (head dim 64,
            // causal: 20) since K and V come by TMA. efta_detect at 128 x 128, head dim 128, no
            // mask: 12 bytes since its fallback S check (protect/efta_rows.cuh), one value stored
            // and reloaded per key block; it ran level with the build before
            // (efta_detect_fallback_ab_2.csv).
            const bool tight = prot == Protection::efta_correct && n == 128;
            const bool fallback =
                prot == Protection::efta_detect && n == 128 && d == 128 && m == Mask::none;
            CHECK(r.spill_stores <= (fallback                       ? 12
                                     : !tight                       ? 0
                                     : d == 64 && m == Mask::causal ? 20
                                                                    : 4));
          }
  for (Precision p : {Precision::f16, Precision::bf16, Precision::f16_pasa})
    for (int d : {64, 128})
      for (int n : {64, 128})
        for (Mask m : {Mask::none, Mask::causal}) {
          const KernelConfig c = test::tile_config(d, 128, n, 8, 2, kSm90a, p, m);
          const WsUnit u = check_ws_unit(c, "attention_fwd_ws_sm90");
          const runtime::NvrtcOutput& out = u.out;
          // GEMM I in four copies (first block or not, masked or not), GEMM II in three (the last
          // block's after the loop); PASA's recovery beside each GEMM I.
          const std::string wgmma = "wgmma.mma_async.sync.aligned.m64n";
          const std::string acc = p == Precision::f16_pasa ? "k16.f16.f16.f16" : "k16.f32.";
          CHECK(test::count(out.ptx, wgmma + std::to_string(n) + acc) >= 4 * (d / 16));
          CHECK(test::count(out.ptx, wgmma + std::to_string(d) + "k16.f32.") >= 3 * (n / 16));
          if (p == Precision::f16_pasa)
            CHECK(test::count(out.ptx, wgmma + "8k16.f32.f16.f16") == 4 * (d / 16));
          const ResourceUsage r = runtime::parse_ptxas_log(out.log, u.symbol);
          CHECK(r.spill_stores == 0);
          CHECK(r.spill_loads == 0);
        }
}

TEST_CASE("warp_specialized 8-bit units: producer and consumers, no spills, no serialised wgmma",
          "[ws][codegen][nvrtc][q8]") {
  for (Precision p : {Precision::int8, Precision::fp8_e4m3})
    for (int d : {64, 128})
      for (int n : {64, 128})
        for (Mask m : {Mask::none, Mask::causal}) {
          // Two stages, and three at 64-key blocks (whose tiles are smaller).
          const KernelConfig c = test::tile_config(d, 128, n, 8, n == 64 ? 3 : 2, kSm90a, p, m);
          // With Q quantised in the kernel, each warpgroup syncs only itself before GEMM I.
          const WsUnit u = check_ws_unit(c, "attention_fwd_q8_ws_sm90");
          const runtime::NvrtcOutput& out = u.out;
          // GEMM I in four copies (first block or not, masked or not) of d / 32 k-steps, GEMM II
          // in three (the last block's after the loop) of n / 32; int8's S and O in INT32, its P
          // unsigned (the lazy softmax).
          const std::string wgmma = "wgmma.mma_async.sync.aligned.m64n";
          const bool int8 = p == Precision::int8;
          const std::string acc1 = int8 ? "k32.s32.s8.s8" : "k32.f32.e4m3.e4m3";
          const std::string acc2 = int8 ? "k32.s32.u8.s8" : acc1;
          const int gemm1 = 4 * (d / 32), gemm2 = 3 * (n / 32);
          if (n == d && !int8) {
            CHECK(test::count(out.ptx, wgmma + std::to_string(n) + acc1) == gemm1 + gemm2);
          } else {
            CHECK(test::count(out.ptx, wgmma + std::to_string(n) + acc1) == gemm1);
            CHECK(test::count(out.ptx, wgmma + std::to_string(d) + acc2) == gemm2);
          }
          const ResourceUsage r = runtime::parse_ptxas_log(out.log, u.symbol);
          CHECK(r.registers > 0);
          CHECK(r.spill_stores == 0);
          CHECK(r.spill_loads == 0);
          CHECK(r.performance_notes.empty());
        }
}

TEST_CASE("warp_specialized 8-bit units at head dim 192: a word of the producer's, no more",
          "[ws][codegen][nvrtc][q8]") {
  // Q and K rows of three 64-byte atoms: the producer's copy of Q's 12-chunk rows (no pass of its
  // 128 threads covers whole rows) spills one word under its 56 registers; the consumers nothing,
  // and no wgmma is serialised.
  for (Precision p : {Precision::int8, Precision::fp8_e4m3})
    for (int n : {64, 128}) {
      const KernelConfig c = test::tile_config(192, 128, n, 8, 2, kSm90a, p, Mask::causal);
      const WsUnit u = check_ws_unit(c, "attention_fwd_q8_ws_sm90");
      const ResourceUsage r = runtime::parse_ptxas_log(u.out.log, u.symbol);
      CHECK(r.spill_stores <= 4);
      CHECK(r.performance_notes.empty());
    }
}

TEST_CASE("persistent_tiles: unprotected 16-bit warp-specialised kernels that fit two Qs",
          "[ws][codegen][persistent]") {
  // The head-dim-128 default (192 x 128 w12s2: 225.25 KB with its second Q tile, under sm_90's
  // 227) and 128-row tiles at head dims 64 and 128 walk tiles, without a mask or causal (pairs of
  // a head's long and short tiles, kernel/tile_walk.cuh).
  const KernelConfig d128 = test::default_config(128, Precision::f16, Mask::none, kSm90a);
  REQUIRE(warp_specialized(d128));
  CHECK(persistent_tiles(d128));
  CHECK(d128.shared_memory_bytes() == 2 * 192 * 256 + 2 * 2 * 128 * 256 + 256 + 1024);
  CHECK(codegen::generate(d128).text.find("Traits::persistent == true") != std::string::npos);
  CHECK(persistent_tiles(test::tile_config(64, 192, 128, 12, 2, kSm90a, Precision::bf16)));
  CHECK(persistent_tiles(test::tile_config(128, 128, 64, 8, 3, kSm90a)));
  CHECK(persistent_tiles(
      test::tile_config(64, 128, 128, 8, 2, kSm90a, Precision::bf16, Mask::causal)));
  // Causal at head dim 128 up to 512 keys the default walks 128 x 128 w8s2 where the problem has
  // more pairs of tiles than a Hopper GPU has SMs; with fewer it keeps one warpgroup, 64 x 64.
  for (auto [batch, heads, walks] : std::vector<std::tuple<int, int, bool>>{
           {32, 32, true}, {2, 34, true}, {2, 33, false}, {1, 8, false}}) {
    KernelConfig open;
    open.head_dim = 128, open.mask = Mask::causal;
    const Problem pr = Problem::bhsd(batch, heads, heads, 512, 512, 128);
    const KernelConfig c = with_defaults(open, kSm90a, &pr);
    INFO(c.name() << " for " << batch << " x " << heads << " heads");
    CHECK(persistent_tiles(c) == walks);
    CHECK(c.block_m == (walks ? 128 : 64));
    CHECK(c.block_n == (walks ? 128 : 64));
  }
  // Not: three causal consumers (walked no faster, so the causal defaults from 2k keys are built
  // as before), a checksum scheme, injection sites, f16_pasa (its walk has not run on a GPU; at
  // 128 its shift rows leave no room for a second Q), head dims 96 and 256, 8-bit, one
  // warpgroup, block-sparse masks (the sm80 skeleton).
  CHECK_FALSE(persistent_tiles(
      test::tile_config(128, 192, 128, 12, 2, kSm90a, Precision::f16, Mask::causal)));
  CHECK_FALSE(
      persistent_tiles(test::tile_config(128, 64, 64, 4, 3, kSm90a, Precision::f16, Mask::causal)));
  CHECK_FALSE(persistent_tiles(
      test::default_config(128, Precision::f16, Mask::none, kSm90a, Protection::flash_abft)));
  KernelConfig injected = d128;
  injected.fault_injection = true;
  CHECK_FALSE(persistent_tiles(injected));
  CHECK_FALSE(persistent_tiles(test::default_config(128, Precision::f16_pasa, Mask::none, kSm90a)));
  CHECK_FALSE(
      persistent_tiles(test::tile_config(64, 192, 128, 12, 2, kSm90a, Precision::f16_pasa)));
  CHECK_FALSE(persistent_tiles(test::tile_config(96, 192, 128, 12, 2, kSm90a)));
  CHECK_FALSE(persistent_tiles(test::tile_config(256, 128, 64, 8, 2, kSm90a)));
  CHECK_FALSE(
      persistent_tiles(test::tile_config(128, 128, 128, 8, 2, kSm90a, Precision::fp8_e4m3)));
  CHECK_FALSE(persistent_tiles(test::tile_config(128, 64, 128, 4, 2, kSm90a)));
  CHECK_FALSE(persistent_tiles(
      test::tile_config(128, 128, 128, 8, 2, kSm90a, Precision::f16, Mask::block_sparse_causal)));
  const KernelConfig causal = test::default_config(128, Precision::f16, Mask::causal, kSm90a);
  REQUIRE(causal.num_warps == 12);
  CHECK(codegen::generate(causal).text.find("Traits::persistent == false") != std::string::npos);
  const KernelConfig abft =
      test::default_config(128, Precision::f16, Mask::causal, kSm90a, Protection::flash_abft);
  CHECK(codegen::generate(abft).text.find("Traits::persistent == false") != std::string::npos);
}
