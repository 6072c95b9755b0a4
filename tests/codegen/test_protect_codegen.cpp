// The checksum protections on the host side: the kernels they generate (prologue, checksum MMA
// tiles, injection points), the shared-memory sizes the launch asks for, the workspace layout
// host and kernel share, thresholds, and the names of the fault enums.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ftattn/codegen.hpp"
#include "ftattn/errors.hpp"
#include "ftattn/fault.hpp"
#include "ftattn/protect/workspace.cuh"
#include "ftattn/reference.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/protected_launch.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/sample_rows.hpp"

using namespace ftattn;

namespace {

KernelConfig protected_config(Protection prot, bool inject = false) {
  return test::default_config(128, Precision::f16, Mask::none, Arch{90, true}, prot, inject);
}

using test::count;

}  // namespace

TEST_CASE("checksum schemes generate a prologue and compile with their extra MMA tiles",
          "[codegen][protect][nvrtc]") {
  // Each scheme on the mma.sync skeleton (sm_90 without "a"; on sm_90a Flash-ABFT runs the wgmma
  // one, below), and the unprotected kernel at Flash-ABFT's tile on it.
  const Arch sm90{90, false};
  KernelConfig none =
      test::default_config(128, Precision::f16, Mask::none, sm90, Protection::flash_abft);
  none.protection = Protection::none;
  REQUIRE_FALSE(uses_wgmma(none));
  const codegen::KernelSource base_src = codegen::generate(none);
  const runtime::NvrtcOutput base = runtime::compile_with_nvrtc(base_src);
  const ResourceUsage base_usage = runtime::parse_ptxas_log(base.log, base_src.symbol);
  const std::string mma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
  for (Protection prot :
       {Protection::flash_abft, Protection::efta_detect, Protection::efta_correct}) {
    const KernelConfig c = test::default_config(128, Precision::f16, Mask::none, sm90, prot);
    INFO(c.name());
    REQUIRE_FALSE(uses_wgmma(c));
    const codegen::KernelSource src = codegen::generate(c);
    CHECK(src.text.find("ftattn/protect/checksum.cuh") != std::string::npos);
    const std::string prologue = codegen::checksum_symbol(src.symbol);
    CHECK(src.text.find(prologue + "(") != std::string::npos);
    // The unit asserts its shared memory equals KernelConfig::shared_memory_bytes: compiling
    // it checks the two agree.
    const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
    CHECK(out.ptx.find(".entry " + prologue) != std::string::npos);
    CHECK(out.ptx.find("atom.global") != std::string::npos);  // the fault log
    // Per key block and 16-row MMA tile: one more 8-wide tile on GEMM I for the plain K
    // checksum (head_dim / 16 MMAs; efta_correct's weighted one runs only after a failed check)
    // and one per V checksum on GEMM II (block_n / 16 MMAs).
    const runtime::ChecksumAtoms atoms = runtime::checksum_atoms(prot);
    const int tiles = c.block_m / 16 / c.num_warps;
    const int plain =
        tiles * ((c.block_n / 8) * (c.head_dim / 16) + (c.head_dim / 8) * (c.block_n / 16));
    const int extra =
        tiles * (std::min(atoms.k, 1) * (c.head_dim / 16) + atoms.v * (c.block_n / 16));
    // The key-block step is instantiated twice (blocks with and without a mask); efta_correct's
    // weighted checksum is a rolled loop of one MMA per tile.
    const int weighted = prot == Protection::efta_correct ? tiles : 0;
    CHECK(count(out.ptx, mma) == 2 * (plain + extra + weighted));
    // Flash-ABFT keeps the unprotected tiles and spills no more than they do. The EFTA d128
    // defaults, two MMA tiles per warp, spill (defaults.cpp: measured faster than one tile
    // without spills), pinned near what ptxas 13 gives (168 and 224 bytes stored) so that
    // growth shows.
    const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
    if (prot == Protection::flash_abft)
      CHECK(r.spill_stores <= base_usage.spill_stores);
    else if (prot == Protection::efta_detect)
      CHECK(r.spill_stores <= 256);
    else
      CHECK(r.spill_stores <= 288);
  }
  CHECK(count(base.ptx, "atom.global") == 0);  // unprotected kernels carry no log
}

TEST_CASE("Flash-ABFT on the wgmma skeleton: GEMM II carries the checksum tile",
          "[codegen][protect][nvrtc]") {
  // sm_90a, head dims 64, 96, 128 and 192, both 16-bit types and masks: GEMM II is one
  // m64n{d + 8}k16 wgmma per 16 keys (the checksum tile beside O), the prologue is there, and the
  // injection build compiles into the same skeleton. Two consumers spill nothing; three (the head
  // dim 64 to 128 default from 1k-2k keys, 160 registers each) spill a word at 128, the checksum
  // tile beside O, S and P (more with the injection sites, whose builds only run campaigns: up to
  // 20 bytes causal since the lazy rescale's vote, 16 before; at head dim 96 64 bytes since the
  // row-sum site flips l in the ones column, 32-52 before).
  for (Precision p : {Precision::f16, Precision::bf16})
    for (int d : {64, 96, 128, 192})
      for (Mask m : {Mask::none, Mask::causal})
        for (bool inject : {false, true}) {
          const KernelConfig c =
              test::default_config(d, p, m, Arch{90, true}, Protection::flash_abft, inject);
          INFO(c.name());
          REQUIRE(uses_wgmma(c));
          const codegen::KernelSource src = codegen::generate(c);
          const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
          CHECK(out.ptx.find(".entry " + codegen::checksum_symbol(src.symbol)) !=
                std::string::npos);
          const std::string type = p == Precision::bf16 ? "bf16.bf16" : "f16.f16";
          const std::string gemm2 =
              "wgmma.mma_async.sync.aligned.m64n" + std::to_string(d + 8) + "k16.f32." + type;
          // Masked and unmasked steps; warp-specialised (two warpgroups): the loop's two turns
          // and the last block's after it.
          CHECK(count(out.ptx, gemm2) == (warp_specialized(c) ? 3 : 2) * (c.block_n / 16));
          CHECK(warp_specialized(c) == (c.num_warps == 8 || c.num_warps == 12));
          CHECK(c.num_warps == (d <= 128 ? 12 : 8));
          CHECK(count(out.ptx, "mma.sync") == 0);
          CHECK(out.ptx.find("atom.global") != std::string::npos);  // the fault log
          const int spills = runtime::parse_ptxas_log(out.log, src.symbol).spill_stores;
          // Injection builds at 128: 24 bytes since the tile loop of persistent kernels (set-up
          // code, not the key-block loop).
          CHECK(spills <= (c.num_warps == 12 ? (inject ? (d == 96 ? 64 : 24) : 4) : 0));
        }
}

TEST_CASE("EFTA on the wgmma skeleton: GEMM I and II carry the checksum tiles",
          "[codegen][protect][nvrtc]") {
  // sm_90a, head dims 64-192, both masks: GEMM I is one m64n{block_n + 8}k16 wgmma per
  // k16 step (the S checksum tile below the keys), GEMM II one m64n{d + 8 * v_atoms}k16 per 16
  // keys, in the masked and unmasked steps (warp-specialised, the head dim 96-192 defaults:
  // GEMM I in four turns, first block or not, GEMM II in three, the last block's after the
  // loop); no mma.sync,
  // no wgmma is serialised (C7511: a shuffle of an accumulator register in the epilogue did that
  // to efta_detect), and the spills stay within the bounds below.
  for (Protection prot : {Protection::efta_detect, Protection::efta_correct})
    for (int d : {64, 96, 128, 192})
      for (Mask m : {Mask::none, Mask::causal})
        for (bool inject : {false, true}) {
          if (inject && m == Mask::none) continue;  // one injection build per scheme and dim
          const KernelConfig c =
              test::default_config(d, Precision::bf16, m, Arch{90, true}, prot, inject);
          INFO(c.name());
          REQUIRE(uses_wgmma(c));
          const codegen::KernelSource src = codegen::generate(c);
          const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
          const runtime::ChecksumAtoms atoms = runtime::checksum_atoms(prot);
          const std::string wgmma = "wgmma.mma_async.sync.aligned.m64n";
          const std::string type = "k16.f32.bf16.bf16";
          const std::string gemm1 = wgmma + std::to_string(c.block_n + 8) + type;
          const std::string gemm2 = wgmma + std::to_string(d + 8 * atoms.v) + type;
          const bool ws = warp_specialized(c);
          // Head dim 64 at these defaults (4k keys): three consumers, efta_correct causal two.
          const bool three = c.num_warps == 12;
          CHECK(ws == (d >= 64));
          CHECK(three == (d == 64 && !(prot == Protection::efta_correct && m == Mask::causal)));
          const int gemm1_steps = (ws ? 4 : 2) * (d / 16),
                    gemm2_steps = (ws ? 3 : 2) * (c.block_n / 16);
          if (gemm1 == gemm2) {  // 128-key blocks at head dim 128 under EFTA: both n136
            CHECK(count(out.ptx, gemm1) == gemm1_steps + gemm2_steps);
          } else {
            CHECK(count(out.ptx, gemm1) == gemm1_steps);
            CHECK(count(out.ptx, gemm2) == gemm2_steps);
          }
          CHECK(count(out.ptx, "mma.sync") == 0);
          const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
          const bool correct_ws = ws && prot == Protection::efta_correct;
          // Since K and V come by TMA, set-up values stored before the key loop and read after
          // it (SASS: STL before the consumers' setmaxnreg, LDL after their last wgmma):
          // efta_correct 4 bytes, its injection builds up to 40 (36-40 since its turn overlaps
          // GEMM II with the softmax: O's injection point waits for GEMM II after it),
          // efta_detect's 8. At head dim 192 (O's 104 registers) efta_correct's causal kernel
          // spills 12; the injection builds there keep O in a local array (its injection point's
          // index), so they spill nothing but run serialised wgmmas (C7514): campaigns only.
          // Three consumers (160 registers each): efta_detect up to 16 bytes, the injection builds
          // of either scheme up to 96 (serialised wgmmas, C7514: campaigns only). efta_detect's
          // fallback checks (protect/efta_rows.cuh) add up to 12 bytes, 36 at head dim 192 causal
          // (0.95x the first check alone there, d192_efta_fallback_ab.csv; 0.93-0.97x at the
          // other head dims, where they spill nothing: efta_detect_fallback_ab_3.csv).
          if (three)
            CHECK(r.spill_stores <= (inject ? 96 : prot == Protection::efta_correct ? 0 : 16));
          else
            CHECK(r.spill_stores <= (correct_ws && inject ? 40
                                     : ws && inject       ? 8
                                     : correct_ws         ? (d == 192 ? 12 : 4)
                                     : ws                 ? (d == 192 ? 36 : 12)
                                                          : 0));
          if (!inject) CHECK(out.log.find("C751") == std::string::npos);
          // EFTA's two consumers overlap GEMM II with the softmax: each loop copy (unmasked,
          // masked) waits for GEMM I alone once; nothing else leaves a wgmma in flight (three
          // consumers finish GEMM II before GEMM I).
          CHECK(count(out.ptx, "wgmma.wait_group.sync.aligned 1;") == (ws && !three ? 2 : 0));
        }
}

TEST_CASE("fault injection compiles only into the builds that ask for it", "[codegen][protect]") {
  const KernelConfig plain = protected_config(Protection::efta_correct);
  const KernelConfig inject = protected_config(Protection::efta_correct, true);
  CHECK(inject.name() == plain.name() + "_inj");
  CHECK(KernelConfig::parse(inject.name()) == inject);
  CHECK(codegen::generate(plain).text.find("/*inject=*/false") != std::string::npos);
  CHECK(codegen::generate(inject).text.find("/*inject=*/true") != std::string::npos);
}

TEST_CASE("protected tiles take more shared memory: checksum rows and columns",
          "[codegen][protect]") {
  KernelConfig c;
  c.head_dim = 128;
  c.block_m = 64;
  c.block_n = 128;
  c.num_warps = 4;
  c.num_stages = 1;
  c.arch = Arch{90, true};
  const int none = c.shared_memory_bytes();
  CHECK(none == (64 + 2 * 128) * (128 + 8) * 2);
  c.protection = Protection::flash_abft;  // one V checksum tile fits the row padding
  CHECK(c.shared_memory_bytes() == none);
  c.protection = Protection::efta_detect;  // 8 K rows; its one V atom fits the row padding
  CHECK(c.shared_memory_bytes() == (64 + 2 * 128 + 8) * (128 + 8) * 2);
  c.protection = Protection::efta_correct;  // 16 K rows; its one V atom fits the row padding
  CHECK(c.shared_memory_bytes() == (64 + 2 * 128 + 16) * (128 + 8) * 2);
}

TEST_CASE("the checksum workspace layout is aligned and sized per head", "[protect]") {
  CHECK(checksum_workspace(2, 4, 1000, 128, 64, 0, 0).bytes == 0);
  const ChecksumWorkspace w = checksum_workspace(2, 4, 1000, 128, 64, 2, 2);
  CHECK(w.n_blocks == 16);
  CHECK(w.keys == 1024);
  CHECK(w.v_per_head == 1024 * 16 * 2);      // 16 16-bit columns per key
  CHECK(w.k_per_head == 16 * 16 * 128 * 2);  // 16 rows of head_dim per key block
  CHECK(w.knorm_per_head == 16 * 4 * 4);     // 4 floats per key block
  for (long long offset : {w.k_offset, w.knorm_offset, w.vmax_offset, w.bytes})
    CHECK(offset % 16 == 0);
  CHECK(w.k_offset == 8 * w.v_per_head);
  CHECK(w.bytes == w.vmax_offset + 8 * 16);
  // Flash-ABFT: V checksums only.
  const ChecksumWorkspace f = checksum_workspace(1, 1, 100, 64, 64, 0, 1);
  CHECK(f.k_per_head == 0);
  CHECK(f.knorm_per_head == 0);
  CHECK(f.v_per_head == 128 * 16);
}

TEST_CASE("thresholds: calibrated defaults per precision, overridable field by field",
          "[protect]") {
  const Thresholds f16 = runtime::default_thresholds(Precision::f16);
  const Thresholds bf16 = runtime::default_thresholds(Precision::bf16);
  // Calibrated on clean inputs (README): bf16's O checksum operands keep fewer bits. The row-sum
  // check compares a sum of 16-bit P with the FP32 sum of the unrounded P: at least half an ulp
  // of the format per term, and not much more (a looser check would pass faults that move l).
  CHECK(bf16.output > f16.output);
  CHECK(f16.row_sum >= 0x1p-11f);
  CHECK(f16.row_sum < 0x1p-10f);
  CHECK(bf16.row_sum >= 0x1p-8f);
  CHECK(bf16.row_sum < 0x1p-7f);
  CHECK(f16.scores < 1e-5f);  // 5x the largest residual seen, not the derived worst case
  // bf16's checksum split keeps 16 bits: its GEMM I check needs more, but not the old bound's
  // reach (|q| sum |k| is 6-11x the bound at head dims 64-128 on N(0, 1) rows).
  CHECK(bf16.scores > f16.scores);
  CHECK(bf16.scores < 2e-5f);
  Thresholds mine;
  mine.output = 1e-3f;
  const Thresholds t =
      runtime::effective_thresholds(Precision::f16, Protection::efta_correct, mine);
  CHECK(t.output == 1e-3f);
  CHECK(t.scores == f16.scores);
  CHECK(t.probs == f16.probs);
  CHECK(t.row_sum == f16.row_sum);
  mine.row_sum = 2e-4f;
  CHECK(runtime::effective_thresholds(Precision::bf16, Protection::flash_abft, mine).row_sum ==
        2e-4f);
  CHECK(runtime::effective_thresholds(Precision::bf16, Protection::flash_abft, mine).scores ==
        bf16.scores);
  // The decoupled baseline gets what was given, zeros included: its kernels then use their own
  // derived tolerance (the fused defaults gave it false alarms and uncorrected faults).
  const Thresholds dec = runtime::effective_thresholds(Precision::f16, Protection::decoupled, mine);
  CHECK(dec.output == 1e-3f);
  CHECK(dec.row_sum == 2e-4f);
  CHECK(dec.scores == 0.f);
  CHECK(dec.probs == 0.f);
  mine.probs = -1e-5f;
  REQUIRE_THROWS_AS(runtime::effective_thresholds(Precision::f16, Protection::decoupled, mine),
                    ConfigError);
  REQUIRE_THROWS_AS(runtime::effective_thresholds(Precision::f16, Protection::efta_correct, mine),
                    ConfigError);
  mine.probs = std::numeric_limits<float>::infinity();
  REQUIRE_THROWS_AS(runtime::effective_thresholds(Precision::f16, Protection::efta_correct, mine),
                    ConfigError);
  CHECK(runtime::checksum_atoms(Protection::none).k == 0);
  CHECK(runtime::checksum_atoms(Protection::decoupled).v == 0);
}

TEST_CASE("fault enums read and print the command line's spelling", "[protect]") {
  CHECK(parse_on_fault("throw") == OnFault::raise);
  CHECK(to_string(OnFault::recompute) == "recompute");
  CHECK_THROWS_WITH(parse_on_fault("retry"), Catch::Contains("report, recompute, throw"));
  CHECK(parse_fault_site("row_sum") == FaultSite::row_sum);
  CHECK(to_string(FaultSite::checksum) == "checksum");
  CHECK_THROWS_AS(parse_fault_site("alpha"), ConfigError);
  FaultReport r;
  CHECK(r.clean());
  CHECK(r.summary() == "no faults detected");
  r.detected = 2;
  r.corrected = 1;
  r.events.push_back(FaultEvent{0, 3, 17, 42, FaultStage::output, true, 0.5f, 0.01f});
  CHECK(r.summary().find("2 detected, 1 corrected") != std::string::npos);
  CHECK(r.summary().find("output at batch 0, head 3, row 17, col 42") != std::string::npos);
  CHECK(r.summary().find("not proven right") == std::string::npos);
  // The quad's copies of a row's running max that disagree (EFTA, 16-bit) have a stage of their
  // own, named as the site is.
  FaultReport max_apart;
  max_apart.detected = 1;
  max_apart.events.push_back(FaultEvent{1, 0, 5, -1, FaultStage::row_max, false, 0.25f, 0.f});
  CHECK(max_apart.summary().find("first: row_max at batch 1, head 0, row 5 (") !=
        std::string::npos);
  // A recompute that itself detects and cannot correct says so.
  r.recomputed_tiles = 1;
  r.unresolved = 1;
  CHECK(r.summary().find("1 tiles recomputed (1 detections in the recompute itself left "
                         "uncorrected: not proven right)") != std::string::npos);
}

TEST_CASE("the fault log counts past 2^32 failed checks", "[protect]") {
  // A storm of failed checks (thresholds set far too tight on a large problem) passes 2^32: a
  // 32-bit count could wrap to 0 (clean) or below the corrected count (nothing to recompute).
  STATIC_REQUIRE(sizeof(FaultLog::detected) == 8);
  STATIC_REQUIRE(sizeof(FaultLog::corrected) == 8);
  STATIC_REQUIRE(sizeof(FaultReport::detected) == 8);
  // The records follow the header at its size, which the host allocates and reads.
  STATIC_REQUIRE(sizeof(FaultLog) % alignof(FaultRecord) == 0);
  FaultReport r;
  r.detected = uint64_t{1} << 32;
  CHECK_FALSE(r.clean());
  CHECK(r.summary().find("4294967296 detected") != std::string::npos);
}

namespace {

// The EFTA row-sum check as the kernel forms it (fwd_sm80.cuh): the ones column sums the 16-bit
// P, the reference sums the unrounded P in FP32, over `keys` keys.
bool row_sum_alarm(const std::vector<float>& p, Precision precision, float extra = 0.0f) {
  double ones = 0.0, sum = 0.0;
  for (float x : p) {
    ones += reference::from_bits(reference::to_bits(x, precision), precision);
    sum += x;
  }
  ones += extra;  // a fault in the ones column
  const float tol = runtime::default_thresholds(precision).row_sum *
                        static_cast<float>(std::max(std::abs(sum), std::abs(ones))) +
                    static_cast<float>(p.size()) * 3e-8f + 1e-6f;
  return !(std::abs(sum - ones) <= tol);
}

}  // namespace

TEST_CASE("the row-sum threshold covers rounding P to 16 bits, and no more", "[protect]") {
  for (Precision precision : {Precision::f16, Precision::bf16}) {
    INFO(to_string(precision));
    const double half_ulp = precision == Precision::bf16 ? 0x1p-9 : 0x1p-12;  // of [0.5, 1)
    // Worst case: every P just above 0.5, rounding down by almost half an ulp, 2^-11 (f16) or
    // 2^-8 (bf16) of it.
    CHECK_FALSE(row_sum_alarm(std::vector<float>(4096, static_cast<float>(0.5 + 0.99 * half_ulp)),
                              precision));
    // f16 subnormals (below 2^-14) round by up to 2^-25 each: the per-key term covers them.
    CHECK_FALSE(row_sum_alarm(std::vector<float>(16384, 1.49f * 0x1p-24f), precision));
    // Softmax-like rows: one P of 1 and the rest spread over many binades.
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> t(-30.0f, 0.0f);
    for (int keys : {64, 1024, 16384}) {
      std::vector<float> p(keys);
      for (float& x : p) x = std::exp2(t(rng));
      p[0] = 1.0f;
      CHECK_FALSE(row_sum_alarm(p, precision));
      // A fault in the ones column of twice the threshold is seen.
      double sum = 0.0;
      for (float x : p) sum += x;
      const float twice =
          2.0f * runtime::default_thresholds(precision).row_sum * static_cast<float>(sum) +
          2.0f * (static_cast<float>(keys) * 3e-8f + 1e-6f);
      CHECK(row_sum_alarm(p, precision, twice));
    }
  }
}

TEST_CASE(
    "efta_correct score check: FP32 scores stay inside the default bound, which follows the "
    "scores and sees flips that |q| sum |k| let through",
    "[protect]") {
  // Host model of the 16-bit kernels' GEMM I check (protect/checks.cuh, scores_within): a
  // thread's raw scores over its keys of a block (keys 8 i + 2 t, 8 i + 2 t + 1), each an FP32
  // accumulation rounded once per 16-wide k-step, summed in FP32, against q times the keys'
  // FP32 checksum split into f16 hi + lo, accumulated the same way. Bound: tol_scores *
  // (max(|ref|, sum |s|) + |q| sum |k| / sqrt(d)) + floor; before: tol_scores * |q| sum |k| +
  // floor.
  const float tol = runtime::default_thresholds(Precision::f16).scores;
  auto fp32_dot = [](const float* a, const float* b, int d) {
    float acc = 0.f;
    for (int step = 0; step < d / 16; ++step)
      acc += static_cast<float>(test::dot(a + 16 * step, b + 16 * step, 16));
    return acc;
  };
  for (const char* dist : {"normal", "uniform30", "hybrid30"})
    for (int d : {64, 128})
      for (int block_n : {64, 128}) {
        const int rows_q = 16;
        const std::vector<float> q = test::sample_rows(dist, rows_q, d, 31),
                                 k = test::sample_rows(dist, block_n, d, 32);
        double worst = 0.0;  // the largest |e1| / bound on clean rows
        int flips = 0, seen = 0, seen_before = 0, low_flips = 0, low_seen_before = 0;
        for (int r = 0; r < rows_q; ++r) {
          const float* qr = &q[r * d];
          const float q_norm = static_cast<float>(std::sqrt(test::dot(qr, qr, d)));
          for (int t = 0; t < 4; ++t) {
            std::vector<float> c(d, 0.f), s;
            float k_norm = 0.f;
            for (int j = 0; j < block_n; ++j) {
              if ((j % 8) / 2 != t) continue;
              for (int x = 0; x < d; ++x) c[x] += k[j * d + x];
              k_norm += static_cast<float>(std::sqrt(test::dot(&k[j * d], &k[j * d], d)));
              s.push_back(fp32_dot(qr, &k[j * d], d));
            }
            std::vector<float> hi(d), lo(d);
            for (int x = 0; x < d; ++x) {
              hi[x] =
                  reference::from_bits(reference::to_bits(c[x], Precision::f16), Precision::f16);
              lo[x] = reference::from_bits(reference::to_bits(c[x] - hi[x], Precision::f16),
                                           Precision::f16);
            }
            const float ref = fp32_dot(qr, hi.data(), d) + fp32_dot(qr, lo.data(), d);
            float sum = 0.f, abs_sum = 0.f;
            for (float x : s) {
              sum += x;
              abs_sum += std::abs(x);
            }
            // The kernel passes a row within either magnitude: |ref| first, then sum |s|.
            const double walk = q_norm * k_norm / std::sqrt(double(d));
            auto bound_with = [&](double magnitude) {
              return tol * (std::max<double>(std::abs(ref), magnitude) + walk) + 1e-6;
            };
            const double bound = bound_with(abs_sum);
            const double bound_before = tol * q_norm * k_norm + 1e-6;
            worst = std::max(worst, std::abs(double(ref) - sum) / bound);
            if (std::string(dist) != "normal") continue;
            // Flips of mantissa bits 12-22 (2^-11 of a score and up) of scores of 4 or more,
            // the size whose flips moved outputs past their tolerance on the H100.
            for (float x : s) {
              if (std::abs(x) < 4.f) continue;
              for (int bit = 12; bit <= 22; ++bit) {
                uint32_t u;
                std::memcpy(&u, &x, 4);
                u ^= 1u << bit;
                float y;
                std::memcpy(&y, &u, 4);
                const double e1 = double(ref) - (double(sum) - x + y);
                // The kernel's threshold takes the flipped score's magnitude.
                const double b = bound_with(abs_sum - std::abs(x) + std::abs(y));
                ++flips;
                seen += std::abs(e1) > b;
                seen_before += std::abs(e1) > bound_before;
                if (bit <= 13) {
                  ++low_flips;
                  low_seen_before += std::abs(e1) > bound_before;
                }
              }
            }
          }
        }
        INFO(dist << " d" << d << " block_n " << block_n << ": worst |e1| / bound " << worst
                  << "; flips seen " << seen << " (before " << seen_before << ") of " << flips
                  << ", of bits 12-13 seen before " << low_seen_before << " of " << low_flips);
        CHECK(worst < 0.5);   // no false alarm, with margin for the tensor cores' own rounding
        CHECK(worst > 1e-3);  // and not vacuous
        if (std::string(dist) == "normal") {
          REQUIRE(flips > 0);
          CHECK(seen == flips);
          CHECK(low_seen_before < low_flips);  // the old bound missed some (most at d128)
        }
      }
}

TEST_CASE("ProtectOptions that cannot act on the kernel are refused before any GPU work",
          "[protect]") {
  using runtime::check_protect_options;
  const KernelConfig plain = test::tile_config(64, 128, 64, 4, 2, Arch{80, false});
  KernelConfig abft = plain;
  abft.protection = Protection::flash_abft;
  KernelConfig abft_inj = abft;
  abft_inj.fault_injection = true;
  CHECK_NOTHROW(check_protect_options(plain, {}));
  CHECK_NOTHROW(check_protect_options(abft, {}));
  // Nothing checked: the report would read clean whatever happened.
  ProtectOptions o;
  o.on_fault = OnFault::raise;
  REQUIRE_CONFIG_ERROR(check_protect_options(plain, o), "has protection none: nothing is checked");
  CHECK_NOTHROW(check_protect_options(abft, o));
  o = {};
  o.thresholds.output = 1e-6f;
  REQUIRE_CONFIG_ERROR(check_protect_options(plain, o), "has protection none");
  // Outside the enum: acted as recompute.
  o = {};
  o.on_fault = static_cast<OnFault>(7);
  REQUIRE_CONFIG_ERROR(check_protect_options(abft, o), "on_fault 7 is not an OnFault value");
  // A 64 GiB device log.
  o = {};
  o.max_events = std::numeric_limits<int>::max();
  REQUIRE_CONFIG_ERROR(check_protect_options(abft, o), "max_events 2147483647 is outside 0..");
  // Plans that flip nothing read as masked faults.
  o = {};
  o.inject = FaultPlan{FaultSite::none, 0, 5, 1, 3, 29};
  REQUIRE_CONFIG_ERROR(check_protect_options(abft_inj, o), "has no fault site none");
  o.inject = FaultPlan{FaultSite::pv, 0, 5, 1, 3, 29};  // an 8-bit kernel's site
  REQUIRE_CONFIG_ERROR(check_protect_options(abft_inj, o), "has no fault site pv");
  o.inject = FaultPlan{FaultSite::output, 0, 128, 1, 3, 29};  // 4 warps: threads 0..127
  REQUIRE_CONFIG_ERROR(check_protect_options(abft_inj, o), "FaultPlan::thread 128 is outside");
  o.inject = FaultPlan{FaultSite::output, 0, 127, 1, 3, 29};
  CHECK_NOTHROW(check_protect_options(abft_inj, o));
  o.inject = FaultPlan{FaultSite::checksum, 0, 5, 1, 3, 29};
  CHECK_NOTHROW(check_protect_options(abft_inj, o));
}
