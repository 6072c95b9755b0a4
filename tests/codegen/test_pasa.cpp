// f16_pasa on the host: the shifting identity on small tiles, the host model of the kernel's
// numerics against FP64 on normal inputs and on PASA's overflow cases, beta in the generated
// source, validation, every head dim compiling without spills at the defaults, and the EFTA
// units (inject flag, checksum prologue, tiles, thresholds, compiling).
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "codegen/checksum_atoms.hpp"
#include "ftattn/campaign.hpp"
#include "ftattn/codegen.hpp"
#include "ftattn/pasa.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/pasa_shift.hpp"
#include "runtime/protected_launch.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/sample_rows.hpp"

using namespace ftattn;
using test::dot;

namespace {

// softmax(q K^T * scale) V in FP64.
std::vector<double> golden_row(const float* q, const std::vector<float>& k,
                               const std::vector<float>& v, int n, int d, double scale) {
  std::vector<double> s(n), o(d, 0.0);
  double mx = -INFINITY, l = 0.0;
  for (int t = 0; t < n; ++t) mx = std::max(mx, s[t] = dot(q, &k[t * d], d) * scale);
  for (int t = 0; t < n; ++t) {
    const double e = std::exp(s[t] - mx);
    l += e;
    for (int x = 0; x < d; ++x) o[x] += e * v[t * d + x];
  }
  for (double& x : o) x /= l;
  return o;
}

struct ModelError {
  double rel_l2 = 0.0;
  long long non_finite = 0;
};

ModelError model_error(const char* dist, int rows_q, int n, int d, int block_n) {
  const auto q = test::sample_rows(dist, rows_q, d, 1), k = test::sample_rows(dist, n, d, 2),
             v = test::sample_rows(dist, n, d, 3);
  const double beta = codegen::pasa_beta(block_n);
  const float scale = 1.f / std::sqrt(float(d));
  double err2 = 0.0, ref2 = 0.0;
  ModelError e;
  for (int r = 0; r < rows_q; ++r) {
    const auto got =
        pasa::attention_row_model(&q[r * d], k.data(), v.data(), n, d, block_n, beta, scale);
    const auto ref = golden_row(&q[r * d], k, v, n, d, scale);
    for (int x = 0; x < d; ++x) {
      if (!std::isfinite(got[x])) ++e.non_finite;
      err2 += (got[x] - ref[x]) * (got[x] - ref[x]);
      ref2 += ref[x] * ref[x];
    }
  }
  e.rel_l2 = std::sqrt(err2 / ref2);
  return e;
}

}  // namespace

TEST_CASE("PASA shift: K' = c (K - r) with r = fl16(beta * block mean), recovered by q . r",
          "[pasa]") {
  const int d = 32;
  for (int n : {16, 5}) {  // a whole block and a short tail block
    INFO("n = " << n);
    const auto k = test::sample_rows("uniform30", n, d, 7);
    const auto q = test::sample_rows("uniform30", 1, d, 8);
    const double beta = codegen::pasa_beta(16);
    const float c = 1.f / std::sqrt(float(d)) * float(M_LOG2E);
    const pasa::ShiftedBlock sb = pasa::shift_block(k.data(), n, d, beta, c);
    for (int x = 0; x < d; ++x) {
      double mean = 0.0;
      for (int t = 0; t < n; ++t) mean += k[t * d + x];
      mean /= n;  // the tail block's real keys only
      CHECK(sb.shift[x] == Approx(beta * mean).epsilon(1e-3));
      CHECK(sb.shift[x] == pasa::round_to(sb.shift[x], Precision::f16));  // f16-exact
    }
    for (int t = 0; t < n; ++t) {
      // The true base-2 logit is q . K' + c (q . r): PASA's recovery, exact up to K' rounding
      // (2^-11 relative per element).
      const double truth = c * dot(q.data(), &k[t * d], d);
      const double shifted = dot(q.data(), &sb.k_shifted[t * d], d);
      const double recovered = shifted + c * dot(q.data(), sb.shift.data(), d);
      double bound = 0.0;
      for (int x = 0; x < d; ++x) bound += std::abs(q[x] * sb.k_shifted[t * d + x]) * 0x1p-11;
      CHECK(std::abs(recovered - truth) <= bound + 1e-9 * std::abs(truth));
      // The unshifted product leaves f16's range at d = 128 (30 * 30 * 128 = 115,200); the
      // shifted one keeps beta's remainder only: (1 - beta) x0^2 d c, far below it.
      CHECK(std::abs(shifted) < 0.05 * std::abs(truth));
    }
  }
}

TEST_CASE("PASA host model: FP16 scores without overflow, error against FP64", "[pasa]") {
  // Normal inputs: the FP16 scores and P (2^-11 each) give rel L2 9e-4 here; the GPU bound for
  // f16_pasa is 5e-3 (reference::check), room for ex2.approx.f16x2's error. PASA's cases give
  // 3e-4 (uniform) and 5e-4 (hybrid): the output is a peaked softmax over values near 30.
  const ModelError normal = model_error("normal", 8, 300, 128, 32);
  CHECK(normal.non_finite == 0);
  CHECK(normal.rel_l2 < 2.5e-3);
  // PASA's overflow cases (Table 4: 100% NaN under FP16 scores): no NaN or Inf, and the error
  // of a peaked softmax over values near 30.
  for (const char* dist : {"uniform30", "hybrid30"}) {
    INFO(dist);
    const ModelError e = model_error(dist, 8, 300, 128, 32);
    CHECK(e.non_finite == 0);
    CHECK(e.rel_l2 < 2e-3);
  }
  // The unshifted scores of those inputs do overflow f16.
  const auto q = test::sample_rows("uniform30", 1, 128, 1),
             k = test::sample_rows("uniform30", 1, 128, 2);
  CHECK(std::abs(dot(q.data(), k.data(), 128)) > 65504.0);
}

TEST_CASE("f16_pasa units bake beta for their block_n into the source", "[pasa][codegen]") {
  for (auto [n, beta] : {std::pair{32, 0.984375}, {64, 0.984619}, {128, 0.984497}}) {
    KernelConfig c = test::tile_config(64, 128, n, 4, 1, Arch{80, false}, Precision::f16_pasa);
    INFO(c.name());
    CHECK(codegen::pasa_beta(n) == Approx(beta).margin(5e-7));
    const codegen::KernelSource src = codegen::generate(c);
    CHECK(src.text.find(fmt::format("kPasaBeta = {:.9g}f", codegen::pasa_beta(n))) !=
          std::string::npos);
    CHECK(src.text.find(codegen::pasa_shift_symbol(src.symbol) + "(") != std::string::npos);
    CHECK(src.text.find("ftattn/kernel/fwd_pasa_sm80.cuh") != std::string::npos);
  }
}

TEST_CASE("f16_pasa: EFTA and fault injection validate, decoupled and the LLVM route are refused",
          "[pasa]") {
  KernelConfig c = test::tile_config(128, 128, 32, 4, 1, Arch{80, false}, Precision::f16_pasa);
  CHECK_NOTHROW(validate(c));
  // Flash-ABFT's P V checksum; EFTA's K' checksum rows and second softmax evaluation.
  for (Protection p : {Protection::flash_abft, Protection::efta_detect, Protection::efta_correct})
    for (bool inject : {false, true}) {
      c.protection = p;
      c.fault_injection = inject;
      INFO(c.name());
      CHECK_NOTHROW(validate(c));
    }
  c.fault_injection = false;
  c.protection = Protection::decoupled;
  REQUIRE_CONFIG_ERROR(validate(c), "protection decoupled is not built for precision f16_pasa");
  REQUIRE_CONFIG_ERROR(validate(c), "use protection none, flash_abft, efta_detect or efta_correct");
  c.protection = Protection::efta_correct;
  c.backend = Backend::llvm;
  REQUIRE_CONFIG_ERROR(validate(c), "f16_pasa is built for the NVRTC route only");
}

TEST_CASE("f16_pasa EFTA units: the inject flag, the checksum prologue and K' checksum rows",
          "[pasa][codegen][protect]") {
  for (Protection p : {Protection::efta_detect, Protection::efta_correct})
    for (bool inject : {false, true}) {
      // sm_80's kernel; sm_90a's warp-specialised one below.
      const KernelConfig c =
          test::default_config(128, Precision::f16_pasa, Mask::causal, Arch{80, false}, p, inject);
      INFO(c.name());
      CHECK(c.name().ends_with("_inj") == inject);
      const codegen::KernelSource src = codegen::generate(c);
      CHECK(src.text.find("ftattn/kernel/fwd_pasa_sm80.cuh") != std::string::npos);
      CHECK(src.text.find("ftattn/protect/checksum.cuh") != std::string::npos);
      CHECK(src.text.find(inject ? "/*inject=*/true>" : "/*inject=*/false>") != std::string::npos);
      // The prologue writes the checksums of the shifted keys: it runs after the shift kernel,
      // both from the same unit.
      CHECK(src.text.find(codegen::checksum_symbol(src.symbol) + "(") != std::string::npos);
      CHECK(src.text.find(codegen::pasa_shift_symbol(src.symbol) + "(") != std::string::npos);
      // Each K stage: block_n keys, 8 checksum rows per K atom, the shift row.
      const auto [k_atoms, v_atoms] = codegen::checksum_atoms(p);
      const int stride = c.head_dim + (v_atoms <= 1 ? 8 : 24);
      CHECK(c.shared_memory_bytes() ==
            (c.block_m + c.num_stages * (2 * c.block_n + 8 * k_atoms + 1)) * stride * 2);
    }
}

TEST_CASE("f16_pasa EFTA resolves to a valid config at every head dim and arch", "[pasa]") {
  for (Arch arch : {Arch{80, false}, Arch{86, false}, Arch{89, false}, Arch{90, true}})
    for (Protection p : {Protection::efta_detect, Protection::efta_correct})
      for (int d : {64, 128, 256})
        for (Mask m : {Mask::none, Mask::causal})
          for (bool inject : {false, true}) {
            KernelConfig open;
            open.head_dim = d;
            open.precision = Precision::f16_pasa;
            open.protection = p;
            open.mask = m;
            open.fault_injection = inject;
            const Problem pr = Problem::bhsd(1, 4, 4, 1024, 1024, d);
            for (const Problem* problem : {static_cast<const Problem*>(nullptr), &pr}) {
              KernelConfig r;
              REQUIRE_NOTHROW(r = with_defaults(open, arch, problem));
              INFO(r.name());
              CHECK_NOTHROW(validate(r));
              CHECK(r.precision == Precision::f16_pasa);
              CHECK(r.protection == p);
              CHECK(r.fault_injection == inject);
              CHECK(r.shared_memory_bytes() <= max_shared_memory_bytes(arch));
            }
          }
}

namespace {

// f16_pasa with Flash-ABFT at its head-dim-128 defaults on `arch`, and the same tile unprotected,
// both compiled.
struct AbftBesidePlain {
  KernelConfig abft, plain;
  codegen::KernelSource src;
  runtime::NvrtcOutput out, base;
};

AbftBesidePlain abft_beside_plain(Arch arch, Mask m) {
  AbftBesidePlain b;
  b.abft = test::default_config(128, Precision::f16_pasa, m, arch, Protection::flash_abft);
  b.plain = b.abft;
  b.plain.protection = Protection::none;
  b.src = codegen::generate(b.abft);
  b.out = runtime::compile_with_nvrtc(b.src);
  b.base = runtime::compile_with_nvrtc(codegen::generate(b.plain));
  return b;
}

}  // namespace

TEST_CASE("f16_pasa with flash_abft: the checksum prologue and one more MMA per 16 keys",
          "[pasa][codegen][nvrtc]") {
  for (Mask m : {Mask::none, Mask::causal}) {
    // The mma.sync skeleton (sm_90 without "a"): Flash-ABFT's tile against the same tile
    // unprotected.
    const AbftBesidePlain b = abft_beside_plain(Arch{90, false}, m);
    const KernelConfig& abft = b.abft;
    INFO(abft.name());
    REQUIRE_FALSE(uses_wgmma(abft));
    REQUIRE_FALSE(uses_wgmma(b.plain));
    CHECK(abft.shared_memory_bytes() == b.plain.shared_memory_bytes());  // V's checksum: padding
    CHECK(b.out.ptx.find(".entry " + codegen::checksum_symbol(b.src.symbol)) != std::string::npos);
    CHECK(b.base.ptx.find(".entry checksums_") == std::string::npos);
    // GEMM II gains one n8 tile per 16-key step and 16-row tile: the checksum column. The loop
    // body appears once per variant (masked or not): count the copies from the plain kernel's
    // FP32 MMAs (GEMM II and the recovery tile).
    const std::string f32_mma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
    const int d = abft.head_dim, n = abft.block_n;
    const int tiles = abft.block_m / 16 / abft.num_warps;
    const int per_copy = tiles * ((d / 8) * (n / 16) + d / 16);
    const int copies = test::count(b.base.ptx, f32_mma) / per_copy;
    CHECK(copies >= 1);
    CHECK(test::count(b.base.ptx, f32_mma) == copies * per_copy);
    CHECK(test::count(b.out.ptx, f32_mma) - test::count(b.base.ptx, f32_mma) ==
          copies * tiles * (n / 16));
    CHECK(runtime::parse_ptxas_log(b.out.log, b.src.symbol).registers > 0);
  }
}

TEST_CASE("f16_pasa with flash_abft on sm_90a: the checksum tile beside O in GEMM II's wgmma",
          "[pasa][codegen][nvrtc]") {
  // The warp-specialised kernel at its defaults (three consumers at head dim 128): GEMM II's
  // wgmmas grow from m64n128 to m64n136 (O's 16 n8 tiles and the checksum tile; GEMM I keeps
  // FP16 accumulators, so only GEMM II has FP32 ones of that width), nothing spills and ptxas
  // serialises no wgmma (it did with GEMM II and GEMM I back to back, so the turn finishes GEMM
  // II first there, as f16's three consumers do).
  for (Mask m : {Mask::none, Mask::causal}) {
    const AbftBesidePlain b = abft_beside_plain(Arch{90, true}, m);
    INFO(b.abft.name());
    REQUIRE(warp_specialized(b.abft));
    REQUIRE(warp_specialized(b.plain));
    CHECK((b.abft.block_m == 192 && b.abft.num_warps == 12));
    CHECK(b.out.ptx.find(".entry " + codegen::checksum_symbol(b.src.symbol)) != std::string::npos);
    const std::string o_only = "m64n128k16.f32.f16.f16", with_tile = "m64n136k16.f32.f16.f16";
    CHECK(test::count(b.base.ptx, o_only) > 0);
    CHECK(test::count(b.base.ptx, with_tile) == 0);
    CHECK(test::count(b.out.ptx, o_only) == 0);
    CHECK(test::count(b.out.ptx, with_tile) == test::count(b.base.ptx, o_only));
    const ResourceUsage r = runtime::parse_ptxas_log(b.out.log, b.src.symbol);
    CHECK(r.spill_stores == 0);
    CHECK(r.performance_notes.empty());
  }
}

TEST_CASE("unprotected f16_pasa on three consumers: l from a tile of ones beside O in GEMM II",
          "[pasa][codegen][nvrtc]") {
  // Head dims up to 96 (FwdWgmmaTraits::ones_tile): GEMM II grows by one n8 tile (m64n72 at 64),
  // V's stages by an atom of ones, and nothing else: no checksum prologue, no spill, no ptxas
  // note. At 128 the tile would not fit the back-to-back turn (Flash-ABFT's splits it there),
  // so GEMM II stays m64n128.
  for (Mask m : {Mask::none, Mask::causal}) {
    const KernelConfig d64 =
        test::tile_config(64, 192, 128, 12, 2, Arch{90, true}, Precision::f16_pasa, m);
    const KernelConfig d128 =
        test::tile_config(128, 192, 128, 12, 2, Arch{90, true}, Precision::f16_pasa, m);
    INFO(d64.name());
    REQUIRE(warp_specialized(d64));
    const codegen::KernelSource src = codegen::generate(d64);
    const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
    CHECK(test::count(out.ptx, "m64n72k16.f32.f16.f16") > 0);
    CHECK(test::count(out.ptx, "m64n64k16.f32.f16.f16") == 0);
    CHECK(out.ptx.find(".entry checksums_") == std::string::npos);
    const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
    CHECK(r.spill_stores == 0);
    CHECK(r.performance_notes.empty());
    // The atom of ones: one 128-byte swizzle atom per key of each stage, as Flash-ABFT's.
    KernelConfig abft = d64;
    abft.protection = Protection::flash_abft;
    CHECK(d64.shared_memory_bytes() == abft.shared_memory_bytes());
    KernelConfig one_group = d64;
    one_group.block_m = 64, one_group.num_warps = 4;
    CHECK(test::count(runtime::compile_with_nvrtc(codegen::generate(one_group)).ptx,
                      "m64n72k16.f32.f16.f16") == 0);
    const runtime::NvrtcOutput wide = runtime::compile_with_nvrtc(codegen::generate(d128));
    CHECK(test::count(wide.ptx, "m64n128k16.f32.f16.f16") > 0);
    CHECK(test::count(wide.ptx, "m64n136k16.f32.f16.f16") == 0);
  }
}

TEST_CASE("f16_pasa workspace: shifted keys, then one shift vector per key block", "[pasa]") {
  const Problem pr = Problem::bhsd(2, 8, 4, 100, 130, 64);
  const runtime::PasaLayout l = runtime::PasaLayout::of(pr, 64);
  CHECK(l.k_shifted == 0);
  CHECK(l.shift == 2 * 4 * 130 * 64 * 2);  // already a multiple of 256
  // Seven rows of slack: the Hopper kernels read eight blocks' shift vectors at a time.
  CHECK(l.bytes >= l.shift + (2 * 4 * 3 + 7) * 64 * 2);
  CHECK(l.bytes % 256 == 0);
}

TEST_CASE("f16_pasa compiles at every head dim, spilling only where documented",
          "[pasa][codegen][nvrtc]") {
  for (Arch arch : {Arch{80, false}, Arch{90, true}})
    for (int d : {32, 64, 96, 128, 192, 256})
      for (Mask m : {Mask::none, Mask::causal}) {
        const KernelConfig c = test::default_config(d, Precision::f16_pasa, m, arch);
        INFO(c.name());
        const codegen::KernelSource src = codegen::generate(c);
        const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
        CHECK(out.ptx.find(".entry " + codegen::pasa_shift_symbol(src.symbol)) !=
              std::string::npos);
        CHECK(out.ptx.find("ex2.approx.f16x2") != std::string::npos);
        const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
        if (uses_wgmma(c)) {
          // sm_90a at every head dim (kernel/fwd_pasa_sm90.cuh): GEMM I one m64n{block_n}k16
          // wgmma with f16 accumulators per k16 step, GEMM II one m64n{d}k16 per 16 keys, and
          // the recovery one m64n8k16 with FP32 ones per k16 step only in the copies of GEMM I
          // that run on every eighth key block. Each is compiled once per masked and unmasked
          // step, and GEMM I once with the recovery and once without. No mma.sync, no spills,
          // and no wgmma serialised (C7511 / C7513: ptxas did that when the exponentials could
          // sink between GEMM II's wgmmas; C7514 when the recovery tile was read after the
          // branch that chose its MMA). The warp-specialised kernel (two warpgroups,
          // kernel/fwd_ws_sm90.cuh) has three turns with GEMM I per step (the first block's,
          // every eighth block's with the recovery, the others'), and GEMM II in all but the
          // first and once more after the loop. Three consumers at head dims up to 96 take l
          // from an n8 tile of ones beside O: GEMM II m64n{d + 8}.
          const bool ws = warp_specialized(c);
          const int gemm1 = ws ? 6 : 4, recovery = ws ? 4 : 2, gemm2 = ws ? 5 : 2;
          const int gemm2_n = d + (c.num_warps == 12 && d <= 96 ? 8 : 0);
          const std::string wgmma = "wgmma.mma_async.sync.aligned.m64n";
          CHECK(test::count(out.ptx, wgmma + std::to_string(c.block_n) + "k16.f16.f16.f16") ==
                gemm1 * (d / 16));
          CHECK(test::count(out.ptx, wgmma + "8k16.f32.f16.f16") == recovery * (d / 16));
          CHECK(test::count(out.ptx, wgmma + std::to_string(gemm2_n) + "k16.f32.f16.f16") ==
                gemm2 * (c.block_n / 16));
          CHECK(test::count(out.ptx, "mma.sync") == 0);
          // Three consumer warpgroups leave the producer 32 registers (setmaxnreg; its copy
          // loops' addresses spill) and each consumer 160.
          CHECK(r.spill_stores <= (c.num_warps == 12 ? 96 : 0));
          CHECK(out.log.find("C751") == std::string::npos);
          continue;
        }
        CHECK(arch.sm != 90);  // every head dim runs the wgmma skeleton on sm_90a
        // GEMM I with f16 accumulators; GEMM II and the recovery tile with FP32 ones.
        const int tiles = c.block_m / 16 / c.num_warps;
        CHECK(test::count(out.ptx, "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16") >=
              tiles * (c.block_n / 8) * (d / 16));
        CHECK(test::count(out.ptx, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") >=
              tiles * ((d / 8) * (c.block_n / 16) + d / 16));
        CHECK(r.registers > 0);
        // Documented (fwd_sm80.cuh, lazy_rescale): at head dim 128 the one-stage PASA kernel
        // rescales O on every block, and ptxas interleaves the exponentials with GEMM II at the
        // cost of 48-100 bytes of spills; it measured 2-6% faster (H100) than the spill-free
        // version with the rescale behind a branch.
        const int known = d == 128 ? 128 : 0;
        CHECK(r.spill_stores <= known);
        CHECK(r.spill_loads <= known);
      }
}

TEST_CASE("f16_pasa EFTA thresholds: scores calibrated below the FP16 worst case, O as for f16",
          "[pasa][protect]") {
  const Thresholds pasa = runtime::default_thresholds(Precision::f16_pasa);
  const Thresholds f16 = runtime::default_thresholds(Precision::f16);
  // GEMM I accumulates in FP16: the kernel multiplies `scores` by head_dim / 16 + 2 roundings.
  // Tighter than one rounding (2^-11, the worst case), at least 3x above the largest value clean
  // runs needed on an H100 (6.8e-5, bench/results/nvidia-h100/pasa_calibration.csv).
  CHECK(pasa.scores < 0x1p-11f);
  CHECK(pasa.scores >= 2.9f * 6.8e-5f);
  CHECK(pasa.output == f16.output);
  CHECK(pasa.row_sum == f16.row_sum);
  Thresholds mine;
  mine.scores = 1e-3f;
  const Thresholds t =
      runtime::effective_thresholds(Precision::f16_pasa, Protection::efta_correct, mine);
  CHECK(t.scores == 1e-3f);
  CHECK(t.output == pasa.output);
}

TEST_CASE("f16_pasa EFTA compiles with and without injection points: prologue, second softmax",
          "[pasa][codegen][nvrtc][protect]") {
  const Arch arch{90, true};
  for (int d : {64, 128})
    for (Mask m : {Mask::none, Mask::causal})
      for (Protection p : {Protection::efta_detect, Protection::efta_correct}) {
        const KernelConfig efta = test::default_config(d, Precision::f16_pasa, m, arch, p);
        // The unprotected kernel at the same tiles: its exponentials, once.
        KernelConfig plain = efta;
        plain.protection = Protection::none;
        const runtime::NvrtcOutput base = runtime::compile_with_nvrtc(codegen::generate(plain));
        const std::string exp2 = "ex2.approx.f16x2";
        for (bool inject : {false, true}) {
          KernelConfig c = efta;
          c.fault_injection = inject;
          INFO(c.name());
          // The unit asserts PasaTraits' shared memory against KernelConfig's: compiling it
          // checks the two agree (K' checksum rows and the shift row per K stage).
          const codegen::KernelSource src = codegen::generate(c);
          const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
          CHECK(out.ptx.find(".entry " + codegen::checksum_symbol(src.symbol)) !=
                std::string::npos);
          CHECK(out.ptx.find(".entry " + codegen::pasa_shift_symbol(src.symbol)) !=
                std::string::npos);
          CHECK(out.ptx.find("atom.global") != std::string::npos);  // the fault log
          // The softmax is evaluated a second time and compared bit for bit: the compilers must
          // not merge the two.
          CHECK(test::count(out.ptx, exp2) >= 2 * test::count(base.ptx, exp2));
          const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
          INFO("registers " << r.registers << ", spill stores " << r.spill_stores);
          CHECK(r.registers > 0);
          if (!inject) {  // the warp-specialised kernel: no spill, no serialised wgmma
            CHECK(r.spill_stores == 0);
            CHECK(r.performance_notes.empty());
          }
        }
      }
}

TEST_CASE(
    "f16_pasa EFTA on sm_90a: two consumer warpgroups up to head dim 128, FP32 checksum "
    "tile of its own, no spill or note",
    "[pasa][codegen][nvrtc][protect]") {
  for (Protection p : {Protection::efta_detect, Protection::efta_correct})
    for (Mask m : {Mask::none, Mask::causal}) {
      // The defaults: 128 x 64 w8s2 at head dims 64 and 128 (the mma.sync tiles' key blocks, so
      // the score check's coverage is theirs), the sm80 kernel at 32, 96 and 256.
      for (int d : {64, 128}) {
        const KernelConfig c = test::default_config(d, Precision::f16_pasa, m, Arch{90, true}, p);
        INFO(c.name());
        CHECK(warp_specialized(c));
        CHECK((c.block_m == 128 && c.block_n == 64 && c.num_warps == 8 && c.num_stages == 2));
      }
      for (int d : {32, 96, 256})
        CHECK_FALSE(uses_wgmma(test::default_config(d, Precision::f16_pasa, m, Arch{90, true}, p)));
      for (int d : {32, 64, 96, 128})
        for (int block_n : {64, 128}) {
          const KernelConfig c =
              test::tile_config(d, 128, block_n, 8, 2, Arch{90, true}, Precision::f16_pasa, m, p);
          INFO(c.name());
          REQUIRE(warp_specialized(c));
          // One warpgroup and three consumers keep the sm80 kernel.
          for (int w : {4, 12}) {
            KernelConfig other = c;
            other.num_warps = w, other.block_m = 16 * w;
            CHECK_FALSE(uses_wgmma(other));
          }
          const codegen::KernelSource src = codegen::generate(c);
          CHECK(src.text.find("attention_fwd_ws_sm90<") != std::string::npos);
          const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
          // GEMM I keeps FP16 accumulators at its width; its checksum tile is an m64n8 wgmma with
          // FP32 ones, issued with each of GEMM I's k-steps.
          const std::string gemm1 = fmt::format("m64n{}k16.f16.f16.f16", block_n);
          const std::string tile = "m64n8k16.f32.f16.f16";
          CHECK(test::count(out.ptx, gemm1) > 0);
          CHECK(test::count(out.ptx, tile) >= test::count(out.ptx, gemm1));
          const ResourceUsage r = runtime::parse_ptxas_log(out.log, src.symbol);
          CHECK(r.spill_stores == 0);
          CHECK(r.performance_notes.empty());
        }
    }
}

TEST_CASE(
    "PASA EFTA score check: FP16-accumulated scores stay inside the default bound, a flipped "
    "top mantissa bit does not",
    "[pasa][protect]") {
  // Host model of the kernel's GEMM I check (kernel/fwd_pasa_sm80.cuh): S'' accumulated in f16,
  // rounded once per 16-wide k-step, against the exact checksum q . (sum of the thread group's
  // k'), bounded by tol_scores * (d / 16 + 2) * (sum |S''| + |q| sum |k'| / sqrt(d)) + floor.
  // 69 keys: a full 64-key block and a 5-key tail block, whose few keys the |q| |k'| term covers.
  const float tol = runtime::default_thresholds(Precision::f16_pasa).scores;
  const int n = 69, block_n = 64, rows_q = 16;
  for (const char* dist : {"normal", "uniform30", "hybrid30"})
    for (int d : {64, 128}) {
      const std::vector<float> q = test::sample_rows(dist, rows_q, d, 91),
                               k = test::sample_rows(dist, n, d, 92);
      const float scale_log2 = static_cast<float>(1.0 / std::sqrt(d) * 1.4426950408889634);
      double worst = 0.0;  // the largest |e1| / bound seen
      int flips = 0, flips_seen = 0;
      for (int key0 = 0; key0 < n; key0 += block_n) {
        const int nb = std::min(block_n, n - key0);
        const pasa::ShiftedBlock sb =
            pasa::shift_block(&k[key0 * d], nb, d, codegen::pasa_beta(block_n), scale_log2);
        for (int r = 0; r < rows_q; ++r) {
          const float* qr = &q[r * d];
          const double q_norm = std::sqrt(dot(qr, qr, d));
          for (int t = 0; t < 4; ++t) {
            double ref = 0.0, sum = 0.0, abs_sum = 0.0, k_norms = 0.0, big = 0.0;
            for (int j = 0; j < nb; ++j) {
              if ((j % 8) / 2 != t) continue;
              const float* kj = &sb.k_shifted[j * d];
              double acc = 0.0;  // the f16 accumulator, rounded after every k-step
              for (int step = 0; step < d / 16; ++step)
                acc = pasa::round_to(acc + dot(qr + 16 * step, kj + 16 * step, 16), Precision::f16);
              ref += dot(qr, kj, d);
              sum += acc;
              abs_sum += std::abs(acc);
              k_norms += std::sqrt(dot(kj, kj, d));
              if (std::abs(acc) >= 1.0 && big == 0.0) big = acc;
            }
            const double bound =
                tol * (d / 16 + 2) * (abs_sum + q_norm * k_norms / std::sqrt(d)) + 1e-6;
            worst = std::max(worst, std::abs(ref - sum) / bound);
            if (big != 0.0) {
              // The top mantissa bit of a score of magnitude >= 1 moves it by >= 0.5.
              const uint16_t bits = reference::to_bits(static_cast<float>(big), Precision::f16);
              const double flipped = reference::from_bits(bits ^ 0x0200, Precision::f16);
              ++flips;
              flips_seen += std::abs(ref - (sum - big + flipped)) > bound;
            }
          }
        }
      }
      INFO(dist << " d" << d << ": worst |e1| / bound " << worst << ", flips seen " << flips_seen
                << " of " << flips);
      CHECK(worst < 1.0);   // no false alarm
      CHECK(worst > 0.01);  // and not a vacuous bound: within 100x of the real deviation
      REQUIRE(flips > 0);
      CHECK(flips_seen == flips);
    }
}

TEST_CASE(
    "f16_pasa defaults: the wgmma skeleton on sm_90a unprotected and with Flash-ABFT, mma.sync "
    "otherwise",
    "[pasa]") {
  // The H100 runs' tiles (codegen/defaults.cpp): three consumer warpgroups, 192 x 128 w12s2, at
  // head dim 128 and at 64 but for causal runs up to 8k keys, which keep 64 x 128 w4s2.
  for (Mask m : {Mask::none, Mask::causal}) {
    const KernelConfig d64 = test::default_config(64, Precision::f16_pasa, m, Arch{90, true});
    const KernelConfig d128 = test::default_config(128, Precision::f16_pasa, m, Arch{90, true});
    CHECK(uses_wgmma(d64));
    CHECK(uses_wgmma(d128));
    CHECK(warp_specialized(d128));
    CHECK((d128.block_m == 192 && d128.block_n == 128 && d128.num_warps == 12 &&
           d128.num_stages == 2));
    // Short runs: at 128 the three consumers from 512 keys without a mask and past 1k causal,
    // 128 x 128 w8s2 below; 64 x 128 w4s2 at 64 up to 2k.
    KernelConfig open_config;
    open_config.head_dim = 128, open_config.precision = Precision::f16_pasa, open_config.mask = m;
    const Problem short_run = Problem::bhsd(1, 8, 8, 1024, 1024, 128);
    const KernelConfig d128_short = with_defaults(open_config, Arch{90, true}, &short_run);
    CHECK(d128_short.num_warps == (m == Mask::causal ? 8 : 12));
    const Problem shorter_run = Problem::bhsd(1, 8, 8, 511, 511, 128);
    const KernelConfig d128_shorter = with_defaults(open_config, Arch{90, true}, &shorter_run);
    CHECK((d128_shorter.block_m == 128 && d128_shorter.num_warps == 8));
    const Problem causal_cut = Problem::bhsd(1, 8, 8, 1025, 1025, 128);
    CHECK(with_defaults(open_config, Arch{90, true}, &causal_cut).num_warps == 12);
    open_config.head_dim = 64;
    const Problem short64 = Problem::bhsd(1, 8, 8, 2048, 2048, 64);
    const KernelConfig d64_short = with_defaults(open_config, Arch{90, true}, &short64);
    CHECK((d64_short.block_m == 64 && d64_short.num_warps == 4));
    if (m == Mask::causal) {  // no problem given: 4k keys
      CHECK((d64.block_m == 64 && d64.block_n == 128 && d64.num_warps == 4 && d64.num_stages == 2));
      KernelConfig open;
      open.head_dim = 64, open.precision = Precision::f16_pasa, open.mask = m;
      const Problem mid_run = Problem::bhsd(1, 8, 8, 8192, 8192, 64);
      const KernelConfig d64_mid = with_defaults(open, Arch{90, true}, &mid_run);
      CHECK((d64_mid.block_m == 64 && d64_mid.num_warps == 4));
      const Problem long_run = Problem::bhsd(1, 8, 8, 16384, 16384, 64);
      const KernelConfig d64_long = with_defaults(open, Arch{90, true}, &long_run);
      CHECK((d64_long.block_m == 192 && d64_long.num_warps == 12));
    } else {
      CHECK(
          (d64.block_m == 192 && d64.block_n == 128 && d64.num_warps == 12 && d64.num_stages == 2));
    }
    // Head dim 256: f16's warp-specialised 128 x 64 w8s2.
    const KernelConfig d256 = test::default_config(256, Precision::f16_pasa, m, Arch{90, true});
    CHECK(warp_specialized(d256));
    CHECK(
        (d256.block_m == 128 && d256.block_n == 64 && d256.num_warps == 8 && d256.num_stages == 2));
    // Flash-ABFT and its injection builds: three consumers at head dims 32-128 (at 32 causal up
    // to 1k keys the mma.sync 128 x 64 w4s2), 128 x 64 w8s2 at 192, mma.sync at 256 (GEMM II's
    // m64n256 leaves no room for the tile).
    for (bool inject : {false, true}) {
      for (int d : {32, 64, 96, 128}) {
        const KernelConfig abft = test::default_config(d, Precision::f16_pasa, m, Arch{90, true},
                                                       Protection::flash_abft, inject);
        INFO(abft.name());
        CHECK(warp_specialized(abft));
        CHECK((abft.block_m == 192 && abft.block_n == 128 && abft.num_warps == 12 &&
               abft.num_stages == 2));
      }
      KernelConfig open_abft;
      open_abft.head_dim = 32, open_abft.precision = Precision::f16_pasa, open_abft.mask = m;
      open_abft.protection = Protection::flash_abft, open_abft.fault_injection = inject;
      const Problem short32 = Problem::bhsd(1, 8, 8, 1024, 1024, 32);
      const KernelConfig d32_short = with_defaults(open_abft, Arch{90, true}, &short32);
      INFO(d32_short.name());
      CHECK(uses_wgmma(d32_short) == (m == Mask::none));
      const KernelConfig d192 = test::default_config(192, Precision::f16_pasa, m, Arch{90, true},
                                                     Protection::flash_abft, inject);
      CHECK(warp_specialized(d192));
      CHECK((d192.block_m == 128 && d192.block_n == 64 && d192.num_warps == 8));
      CHECK_FALSE(uses_wgmma(test::default_config(256, Precision::f16_pasa, m, Arch{90, true},
                                                  Protection::flash_abft, inject)));
    }
    // sm_80, or injection sites on one warpgroup: the sm80 PASA kernel. Unprotected injection
    // builds of a warp-specialised tile run it.
    CHECK_FALSE(uses_wgmma(test::default_config(128, Precision::f16_pasa, m, Arch{80, false})));
    CHECK(warp_specialized(test::default_config(128, Precision::f16_pasa, m, Arch{90, true},
                                                Protection::none, /*inject=*/true)));
    KernelConfig one_group = d64;
    one_group.block_m = 64, one_group.num_warps = 4, one_group.fault_injection = true;
    CHECK_FALSE(uses_wgmma(one_group));
  }
}
