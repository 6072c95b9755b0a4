// GPU tests of the 8-bit precisions (int8 on sm_80+, fp8_e4m3 on sm_89+): against the FP64
// reference of the unquantised inputs (tolerances in reference::check, derived from the host
// model's error), and tightly against the host model of the kernel's own numerics
// (quant_model), which catches layout and scale bugs that the loose tolerance could hide.
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <optional>
#include <random>

#include "ftattn/quantize.hpp"
#include "ftattn/quantize_model.hpp"
#include "ftattn/quantize_params.cuh"
#include "ftattn/runtime.hpp"
#include "runtime/driver.hpp"
#include "tests/gpu/attention_case.hpp"

using namespace ftattn;

namespace {

Runtime& q8_runtime() {
  static Runtime rt;
  return rt;
}

std::vector<Precision> q8_precisions(Runtime& rt) {
  std::vector<Precision> out = {Precision::int8};
  if (rt.device_arch().sm >= 89) out.push_back(Precision::fp8_e4m3);
  return out;
}

using gpu_test::tensor_of;

// A stored 8-bit operand byte as the number it encodes: int8, or E4M3 (subnormals from 2^-9).
float stored_value(uint8_t byte, Precision p) {
  if (p == Precision::int8) return float(static_cast<int8_t>(byte));
  const int e = (byte >> 3) & 15, m = byte & 7;
  const float mag = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.f + m / 8.f, e - 7);
  return byte & 0x80 ? -mag : mag;
}

KernelConfig q8_config(int head_dim, Precision p, Mask m) {
  KernelConfig c;
  c.head_dim = head_dim;
  c.precision = p;
  c.mask = m;
  return c;
}

}  // namespace

TEST_CASE("8-bit precisions match the FP64 reference within their quantisation error",
          "[gpu][q8]") {
  Runtime& rt = q8_runtime();
  REQUIRE(rt.has_device());
  // Every head dim for each precision; the mask alternates (between precisions too), so each
  // (precision, mask) and each (head dim, mask) pair is covered while a run stays short. 256
  // rows, always including the ends, are checked against the reference.
  const std::vector<Precision> precisions = q8_precisions(rt);
  for (size_t pi = 0; pi < precisions.size(); ++pi) {
    const std::array<int, 6> dims = {32, 64, 96, 128, 192, 256};
    for (size_t di = 0; di < dims.size(); ++di) {
      const int d = dims[di];
      const Mask m = (pi + di) % 2 == 0 ? Mask::none : Mask::causal;
      // Odd lengths: neither a multiple of block_m, block_n nor the 16-key V^T group; GQA.
      const Problem pr = Problem::bhsd(2, 4, 2, 203, 517, d);
      const auto r =
          gpu_test::run_case(rt, q8_config(d, precisions[pi], m), pr, true, 256, 3000 + d);
      INFO(r.config_name << ": " << r.report.summary());
      CHECK(r.report.passed);
    }
  }
}

TEST_CASE("8-bit tiles and stages all give the same answer", "[gpu][q8]") {
  Runtime& rt = q8_runtime();
  // One and several stages for each precision (one stage is where K's scales share a buffer
  // with the next K); together they cover every tile.
  for (Precision p : q8_precisions(rt)) {
    const bool int8 = p == Precision::int8;
    for (auto [m, n, w, s] : std::vector<std::array<int, 4>>{
             {64, 64, 4, 1},
             int8 ? std::array{128, 64, 8, 3} : std::array{64, 64, 4, 2},
             int8 ? std::array{128, 32, 4, 1} : std::array{128, 128, 8, 2}}) {
      KernelConfig c = q8_config(128, p, Mask::causal);
      c.block_m = m, c.block_n = n, c.num_warps = w, c.num_stages = s;
      const Problem pr = Problem::bhsd(1, 2, 2, 333, 333, 128);
      const auto r = gpu_test::run_case(rt, c, pr, true, 256, 77);
      INFO(r.config_name << ": " << r.report.summary());
      CHECK(r.report.passed);
    }
  }
}

namespace {

// The wgmma skeleton against the mma.sync one at head dims `dims` (Hopper's `device`).
void check_q8_wgmma_against_sync(Runtime& rt, Arch device, std::initializer_list<int> dims) {
  // The same inputs (same seed) quantise alike for both skeletons; only FP32 summation orders
  // differ, so their errors against the FP64 reference agree closely, while a wrong swizzle,
  // descriptor or fragment order would put the wgmma one near 1 (head dim 256, fp8 only: two
  // swizzle atoms per Q and K row). Tiles: one and two warpgroups, 64- and 128-byte V^T rows, two
  // and three stages; odd lengths, GQA, LSE, causal rows that see no key at all.
  const Arch sm90{90, false};
  for (Precision prec : {Precision::fp8_e4m3, Precision::int8})
    for (int d : dims)
      for (auto [m, n, w, st] : std::vector<std::array<int, 4>>{
               {64, 128, 4, 2}, {128, 128, 8, 2}, {64, 64, 4, 3}, {128, 64, 8, 2}})
        for (Mask mask : {Mask::none, Mask::causal})
          for (const Problem& pr :
               {Problem::bhsd(2, 4, 2, 203, 517, d), Problem::bhsd(1, 2, 1, 300, 130, d),
                Problem::bhsd(1, 2, 2, 1000, 1000, d)}) {
            // int8 at 256: 64-key blocks (with 128 its S and O serialise the wgmmas or spill).
            if (d == 256 && prec == Precision::int8 && n == 128) continue;
            KernelConfig c = q8_config(d, prec, mask);
            c.block_m = m, c.block_n = n, c.num_warps = w, c.num_stages = st;
            c.arch = device;
            REQUIRE(uses_wgmma(c));
            KernelConfig sync = c;
            sync.arch = sm90;
            REQUIRE_FALSE(uses_wgmma(sync));
            const uint64_t seed = 900 + d + pr.seqlen_q;
            const auto a = gpu_test::run_case(rt, c, pr, true, 0, seed);
            const auto b = gpu_test::run_case(rt, sync, pr, true, 0, seed);
            INFO(a.config_name << " s" << pr.seqlen_q << "x" << pr.seqlen_k << ": "
                               << a.report.summary() << " | mma.sync: " << b.report.summary());
            CHECK(a.report.passed);
            CHECK(b.report.passed);
            if (prec == Precision::int8) {
              // int8's lazy softmax quantises P to 8 bits against its reference where mma.sync
              // takes 7 against the running max: P's rounding differs, and is no coarser.
              REQUIRE(lazy_int8_softmax(c));
              CHECK(a.report.rel_l2_error <= 1.05 * b.report.rel_l2_error);
            } else {
              CHECK(std::abs(a.report.rel_l2_error - b.report.rel_l2_error) <=
                    0.02 * b.report.rel_l2_error);
            }
            CHECK(a.report.max_lse_error <= 2 * b.report.max_lse_error + 1e-3);
          }
}

// The warp-specialised 8-bit skeleton against the one-warpgroup one at head dims `dims`.
void check_q8_ws_against_one_group(Runtime& rt, Arch device, std::initializer_list<int> dims) {
  // Two consumer warpgroups and a producer (kernel/fwd_q8_ws_sm90.cuh) against the one-warpgroup
  // wgmma skeleton on the same inputs: they quantise alike and differ only in FP32 summation
  // order. 16-32 key blocks per CTA wrap every buffer's mbarrier phase many times (a wrong
  // parity, a buffer refilled early or a K released before its scales are read shows up only
  // there, or hangs); short and ragged runs cover CTAs with one key block, a partial last block
  // and, causal with seqlen_q > seqlen_k, CTAs with none. Kernel::launch quantises Q in the
  // kernel (each consumer warpgroup its own rows); rows = 0 checks every row.
  // Head dim 256 too (GEMM II m64n256k32; 64-key blocks only).
  for (Precision prec : {Precision::fp8_e4m3, Precision::int8})
    for (int d : dims)
      for (auto [n, st] : std::vector<std::array<int, 2>>{{64, 2}, {64, 3}, {128, 2}})
        for (Mask mask : {Mask::none, Mask::causal})
          for (const Problem& pr :
               {Problem::bhsd(2, 8, 2, 2048, 2048, d), Problem::bhsd(1, 2, 1, 1000, 60, d),
                Problem::bhsd(1, 3, 1, 129, 1111, d), Problem::bhsd(2, 4, 2, 203, 517, d)}) {
            if (d == 256 && n == 128) continue;
            KernelConfig c = q8_config(d, prec, mask);
            c.block_m = 128, c.block_n = n, c.num_warps = 8, c.num_stages = st;
            c.arch = device;
            REQUIRE(warp_specialized(c));
            REQUIRE(launch_threads(c) == 384);
            KernelConfig one = c;  // one warpgroup, the same key blocks
            one.block_m = 64, one.num_warps = 4;
            REQUIRE_FALSE(warp_specialized(one));
            const int rows = pr.seqlen_q > 1500 ? 256 : 0;
            const uint64_t seed = 1500 + d + n + st + pr.seqlen_q;
            const auto a = gpu_test::run_case(rt, c, pr, true, rows, seed);
            const auto b = gpu_test::run_case(rt, one, pr, true, rows, seed);
            INFO(a.config_name << " s" << pr.seqlen_q << "x" << pr.seqlen_k << ": "
                               << a.report.summary() << " | one warpgroup: " << b.report.summary());
            CHECK(a.report.passed);
            CHECK(std::abs(a.report.rel_l2_error - b.report.rel_l2_error) <=
                  0.02 * b.report.rel_l2_error + 1e-5);
            CHECK(a.report.max_lse_error <= 2 * b.report.max_lse_error + 1e-3);
          }
}

}  // namespace

TEST_CASE("8-bit on Hopper: the wgmma skeleton matches the mma.sync one", "[gpu][q8][wgmma]") {
  Runtime& rt = q8_runtime();
  const std::optional<Arch> hopper = gpu_test::hopper_device(rt, "the wgmma skeleton");
  if (!hopper) return;
  check_q8_wgmma_against_sync(rt, *hopper, {64, 128, 256});
}

TEST_CASE("8-bit on Hopper at head dim 192: the wgmma skeleton matches the mma.sync one",
          "[gpu][q8][wgmma]") {
  Runtime& rt = q8_runtime();
  const std::optional<Arch> hopper = gpu_test::hopper_device(rt, "the wgmma skeleton");
  if (!hopper) return;
  // Q and K rows of three 64-byte swizzle atoms; int8's GEMM II m64n192k32, fp8's in three
  // pieces of 64 channels.
  check_q8_wgmma_against_sync(rt, *hopper, {192});
}

TEST_CASE("8-bit on Hopper: the warp-specialised skeleton on long and ragged sequences",
          "[gpu][q8][wgmma][ws]") {
  Runtime& rt = q8_runtime();
  const std::optional<Arch> hopper = gpu_test::hopper_device(rt, "the warp-specialised skeleton");
  if (!hopper) return;
  check_q8_ws_against_one_group(rt, *hopper, {64, 128, 256});
}

TEST_CASE("8-bit on Hopper at head dim 192: the warp-specialised skeleton, long and ragged",
          "[gpu][q8][wgmma][ws]") {
  Runtime& rt = q8_runtime();
  const std::optional<Arch> hopper = gpu_test::hopper_device(rt, "the warp-specialised skeleton");
  if (!hopper) return;
  check_q8_ws_against_one_group(rt, *hopper, {192});
}

TEST_CASE("fp8 K: one scale per 64 keys, and the Hopper kernel refuses finer K scales",
          "[gpu][q8]") {
  Runtime& rt = q8_runtime();
  if (rt.device_arch().sm < 89) {
    WARN("fp8_e4m3 needs sm_89 or later: not run");
    return;
  }
  // 200 keys: three full blocks and a short one, keys_padded 208. Key j's row is scaled by
  // 1 + j % 7, so per-token and per-block scales differ.
  const Problem pr = Problem::bhsd(1, 2, 1, 70, 200, 64);
  const auto kernel = rt.kernel(rt.resolve(q8_config(64, Precision::fp8_e4m3, Mask::none), &pr));
  std::mt19937_64 rng(11);
  auto q = reference::random_tensor(rng, Precision::f16, pr.q, 1, 2, 70, 64);
  auto k = reference::random_tensor(rng, Precision::f16, pr.k, 1, 1, 200, 64);
  auto v = reference::random_tensor(rng, Precision::f16, pr.v, 1, 1, 200, 64);
  for (int j = 0; j < 200; ++j)
    for (int i = 0; i < 64; ++i) {
      auto& x = k.data[j * pr.k.seq + i];
      x = reference::to_bits(reference::from_bits(x, Precision::f16) * (1 + j % 7), Precision::f16);
    }
  const QuantizedLayout layout = QuantizedLayout::of(pr);
  runtime::DeviceBuffer dq(q.data.size() * 2), dk(k.data.size() * 2), dv(v.data.size() * 2),
      dout(q.data.size() * 2), ws(layout.bytes);
  dq.upload(q.data.data(), dq.bytes());
  dk.upload(k.data.data(), dk.bytes());
  dv.upload(v.data.data(), dv.bytes());
  const QuantizedInputs in =
      quantize(*kernel, pr, dq.data(), dk.data(), dv.data(), Precision::f16, ws.data(), nullptr);
  CHECK(in.k_scale_block == 64);
  runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
  std::vector<float> scale(layout.keys_padded);
  std::vector<uint8_t> k8(200 * 64);
  runtime::check(runtime::driver().cuMemcpyDtoH(
                     scale.data(), reinterpret_cast<CUdeviceptr>(in.k_scale), scale.size() * 4),
                 "cuMemcpyDtoH");
  runtime::check(
      runtime::driver().cuMemcpyDtoH(k8.data(), reinterpret_cast<CUdeviceptr>(in.k), k8.size()),
      "cuMemcpyDtoH");
  for (int block = 0; block < 4; ++block) {
    float amax = 0.f;
    for (int j = block * 64; j < std::min(200, block * 64 + 64); ++j)
      for (int i = 0; i < 64; ++i)
        amax = std::max(amax, std::abs(k.at(Precision::f16, 0, 0, j, i)));
    const float inv = 448.f / amax;
    for (int j = block * 64; j < std::min(layout.keys_padded, block * 64 + 64); ++j) {
      INFO("key " << j);
      CHECK(scale[j] == amax / 448.f);
      if (j >= 200) continue;
      int wrong = 0;
      for (int i = 0; i < 64; ++i)
        wrong += stored_value(k8[j * 64 + i], Precision::fp8_e4m3) !=
                 quant_model::round_e4m3(k.at(Precision::f16, 0, 0, j, i) * inv);
      CHECK(wrong == 0);
    }
  }
  // Inputs that claim a scale per key: the kernel that folds a scale per 64 keys refuses them
  // with a ConfigError that says what to change; runs of 128 are runs of 64 too.
  QuantizedInputs per_key = in;
  per_key.k_scale_block = 1;
  QuantizedInputs per_128 = in;
  per_128.k_scale_block = 128;
  if (uses_wgmma(kernel->config())) {
    CHECK_THROWS_WITH(
        launch_quantized(*kernel, pr, per_key, dout.data(), Precision::f16, nullptr, nullptr),
        Catch::Contains("one K scale per 64 keys"));
  } else {
    CHECK_NOTHROW(
        launch_quantized(*kernel, pr, per_key, dout.data(), Precision::f16, nullptr, nullptr));
  }
  CHECK_NOTHROW(
      launch_quantized(*kernel, pr, per_128, dout.data(), Precision::f16, nullptr, nullptr));
  per_key.k_scale_block = 0;
  CHECK_THROWS_AS(
      launch_quantized(*kernel, pr, per_key, dout.data(), Precision::f16, nullptr, nullptr),
      ConfigError);
  runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
}

TEST_CASE("run_quantized reads the fault log: clean, a planted flip seen, raised, recomputed",
          "[gpu][q8][protect][run_quantized]") {
  Runtime& rt = q8_runtime();
  // Operands quantised once, as for a KV cache; every protected run then reads its own log.
  const Problem pr = Problem::bhsd(1, 2, 2, 256, 512, 128);
  std::mt19937_64 rng(21);
  const auto q = reference::random_tensor(rng, Precision::f16, pr.q, 1, 2, 256, 128);
  const auto k = reference::random_tensor(rng, Precision::f16, pr.k, 1, 2, 512, 128);
  const auto v = reference::random_tensor(rng, Precision::f16, pr.v, 1, 2, 512, 128);
  gpu_test::DeviceIo io(q, k, v);
  runtime::DeviceBuffer ws(QuantizedLayout::of(pr).bytes);
  // O (poisoned first) against the FP64 reference on every row.
  auto checked = [&](Precision p, const std::function<FaultReport()>& call, FaultReport* fault) {
    io.o.fill_bytes(0xFF);
    const FaultReport r = call();
    runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    if (fault != nullptr) *fault = r;
    return reference::check(pr, p, Mask::causal, q, k, v, io.output(pr), nullptr, 0);
  };
  for (Precision p : q8_precisions(rt))
    for (Protection prot : {Protection::flash_abft, Protection::efta_correct}) {
      KernelConfig c = q8_config(128, p, Mask::causal);
      c.protection = prot;
      c.fault_injection = true;
      const auto kernel = rt.kernel(rt.resolve(c, &pr));
      INFO(kernel->compiled().name);
      const QuantizedInputs in = quantize(*kernel, pr, io.q.data(), io.k.data(), io.v.data(),
                                          Precision::f16, ws.data(), nullptr);
      auto run = [&](const ProtectOptions& o) {
        return [&, o] {
          return run_quantized(*kernel, pr, in, io.o.data(), Precision::f16, nullptr, nullptr, o);
        };
      };
      FaultReport clean;
      const reference::CheckReport clean_check = checked(p, run({}), &clean);
      CHECK(clean_check.passed);
      CHECK(clean.detected == 0);
      // An exponent bit of an O accumulator (thread 5, key block 1 of CTA 0): seen, and where
      // every detection was corrected the output is right. (An uncorrected one may still fall
      // within fp8's loose tolerance.)
      const ProtectOptions planted = gpu_test::plant(FaultSite::output, 30, 3);
      FaultReport seen;
      const reference::CheckReport seen_check = checked(p, run(planted), &seen);
      INFO(seen.summary() << "; " << seen_check.summary());
      CHECK(seen.detected >= 1);
      if (seen.corrected == seen.detected) CHECK(seen_check.passed);
      // The log is reset per call: the next clean call reports nothing.
      FaultReport after;
      checked(p, run({}), &after);
      CHECK(after.detected == 0);
      ProtectOptions raise = planted;
      raise.on_fault = OnFault::raise;
      if (seen.corrected < seen.detected) CHECK_THROWS_AS(run(raise)(), FaultError);
      ProtectOptions recompute = planted;
      recompute.on_fault = OnFault::recompute;
      FaultReport fixed;
      const reference::CheckReport fixed_check = checked(p, run(recompute), &fixed);
      INFO("recompute: " << fixed.summary() << "; " << fixed_check.summary());
      CHECK(fixed_check.passed);
      CHECK(fixed.unresolved == 0);
      if (fixed.detected > fixed.corrected) CHECK(fixed.recomputed_tiles >= 1);
      runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    }
  // An unprotected kernel: an empty report, the right answer, and a policy it cannot apply
  // refused before any GPU work.
  for (Precision p : q8_precisions(rt)) {
    const auto kernel = rt.kernel(rt.resolve(q8_config(128, p, Mask::causal), &pr));
    INFO(kernel->compiled().name);
    const QuantizedInputs in = quantize(*kernel, pr, io.q.data(), io.k.data(), io.v.data(),
                                        Precision::f16, ws.data(), nullptr);
    FaultReport none;
    CHECK(checked(
              p,
              [&] {
                return run_quantized(*kernel, pr, in, io.o.data(), Precision::f16, nullptr,
                                     nullptr);
              },
              &none)
              .passed);
    CHECK(none.clean());
    ProtectOptions recompute;
    recompute.on_fault = OnFault::recompute;
    CHECK_THROWS_WITH(
        run_quantized(*kernel, pr, in, io.o.data(), Precision::f16, nullptr, nullptr, recompute),
        Catch::Contains("nothing is checked"));
  }
}

TEST_CASE("the wgmma kernel quantises Q itself to the separate pass's bytes",
          "[gpu][q8][wgmma][ws]") {
  Runtime& rt = q8_runtime();
  const std::optional<Arch> hopper = gpu_test::hopper_device(rt, "the wgmma skeleton");
  if (!hopper) return;
  const Arch device = *hopper;
  // Kernel::launch hands the wgmma kernel the caller's f16 Q; quantize() + launch_quantized the
  // separate pass's 8-bit Q. Same bytes and scales, so the same O bit for bit (odd lengths, GQA,
  // a tile with rows past the end, both masks, every head dim that fuses it). The defaults (one
  // warpgroup), and two consumer warpgroups warp-specialised: there each warpgroup quantises
  // its own rows, or the producer copies the separate pass's Q.
  for (Precision prec : {Precision::fp8_e4m3, Precision::int8})
    for (int d : {64, 128})
      for (Mask m : {Mask::none, Mask::causal})
        for (bool two_groups : {false, true}) {
          const Problem pr = Problem::bhsd(2, 4, 2, 203, 517, d);
          KernelConfig c = q8_config(d, prec, m);
          if (two_groups) c.block_m = 128, c.block_n = 128, c.num_warps = 8, c.num_stages = 2;
          const auto kernel = rt.kernel(rt.resolve(c, &pr));
          INFO(kernel->compiled().name);
          REQUIRE(quantises_q_in_kernel(kernel->config()));
          REQUIRE(warp_specialized(kernel->config()) == two_groups);
          std::mt19937_64 rng(40 + d);
          const auto q = reference::random_tensor(rng, Precision::f16, pr.q, 2, 4, 203, d);
          const auto k = reference::random_tensor(rng, Precision::f16, pr.k, 2, 2, 517, d);
          const auto v = reference::random_tensor(rng, Precision::f16, pr.v, 2, 2, 517, d);
          runtime::DeviceBuffer dq(q.data.size() * 2), dk(k.data.size() * 2), dv(v.data.size() * 2),
              o1(q.data.size() * 2), o2(q.data.size() * 2), ws(QuantizedLayout::of(pr).bytes);
          dq.upload(q.data.data(), dq.bytes());
          dk.upload(k.data.data(), dk.bytes());
          dv.upload(v.data.data(), dv.bytes());
          o1.fill_bytes(0xFF);
          o2.fill_bytes(0x00);
          kernel->launch(pr, dq.data(), dk.data(), dv.data(), o1.data(), nullptr, nullptr, nullptr);
          const QuantizedInputs in = quantize(*kernel, pr, dq.data(), dk.data(), dv.data(),
                                              Precision::f16, ws.data(), nullptr);
          launch_quantized(*kernel, pr, in, o2.data(), Precision::f16, nullptr, nullptr);
          runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
          std::vector<uint16_t> a(q.data.size()), b(q.data.size());
          o1.download(a.data(), o1.bytes());
          o2.download(b.data(), o2.bytes());
          int differ = 0;
          for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
          CHECK(differ == 0);
        }
}

TEST_CASE("8-bit kernels follow the host model of their numerics closely, bf16 in and out",
          "[gpu][q8]") {
  Runtime& rt = q8_runtime();
  for (Precision p : q8_precisions(rt))
    for (Precision io : {Precision::f16, Precision::bf16})
      for (Mask m : {Mask::none, Mask::causal}) {
        const Problem pr = Problem::bhsd(1, 2, 1, 190, 300, 64);
        const auto kernel = rt.kernel(rt.resolve(q8_config(64, p, m), &pr));
        INFO(kernel->compiled().name << " " << to_string(io));
        std::mt19937_64 rng(5);
        // The model reads f16 storage; bf16 runs get inputs that bf16 represents exactly.
        auto make = [&](const Strides& s, int heads, int seqlen) {
          auto t = reference::random_tensor(rng, Precision::bf16, s, 1, heads, seqlen, 64);
          for (auto& x : t.data)
            x = reference::to_bits(reference::from_bits(x, Precision::bf16), io);
          return t;
        };
        const auto q = make(pr.q, 2, 190), k = make(pr.k, 1, 300), v = make(pr.v, 1, 300);
        runtime::DeviceBuffer dq(q.data.size() * 2), dk(k.data.size() * 2), dv(v.data.size() * 2),
            dout(q.data.size() * 2), ws(QuantizedLayout::of(pr).bytes);
        dq.upload(q.data.data(), dq.bytes());
        dk.upload(k.data.data(), dk.bytes());
        dv.upload(v.data.data(), dv.bytes());
        dout.fill_bytes(0xFF);
        const QuantizedInputs in =
            quantize(*kernel, pr, dq.data(), dk.data(), dv.data(), io, ws.data(), nullptr);
        launch_quantized(*kernel, pr, in, dout.data(), io, nullptr, nullptr);
        runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
        reference::Tensor16 o;
        o.strides = pr.o;
        o.data.resize(q.data.size());
        dout.download(o.data.data(), dout.bytes());

        auto as_f16 = [&](reference::Tensor16 t) {  // the model reads f16 storage
          for (auto& x : t.data)
            x = reference::to_bits(reference::from_bits(x, io), Precision::f16);
          return t;
        };
        const auto q16 = as_f16(q), k16 = as_f16(k), v16 = as_f16(v);
        double err2 = 0, ref2 = 0;
        for (int h = 0; h < 2; ++h)
          for (int r = 0; r < 190; ++r) {
            const auto model =
                quant_model::attention_row(pr, p, m, kernel->config().block_n, q16, k16, v16, 0, h,
                                           r, lazy_int8_softmax(kernel->config()));
            for (int x = 0; x < 64; ++x) {
              const double e = o.at(io, 0, h, r, x) - model[x];
              err2 += e * e;
              ref2 += model[x] * model[x];
            }
          }
        // Same quantisation on both sides. What is left: ex2.approx and float sums, a value that
        // rounds to the neighbouring level when x * (range / max) and x / scale differ in the
        // last bit, and the 16-bit output (bf16: 2^-9 relative). An error in the layout, the
        // permutation or a scale is of the size of O itself.
        const double tol =
            (p == Precision::int8 ? 5e-3 : 1.5e-2) + (io == Precision::bf16 ? 4e-3 : 0);
        CHECK(std::sqrt(err2 / ref2) < tol);
      }
}

namespace {

// int8 Flash-ABFT on the wgmma kernel holds O's INT32 channel sums to its digit columns within
// an integer bound the folds cannot exceed, and l to the ones column: no threshold moves them.
// Flips planted at iteration 1 show each is live: in O (thread 5), in the digit column (thread
// 4, the quad's lane 0) and the ones column (thread 7, lane 3) of the checksum tile, and in l's
// FP32 share; recompute relaunches the tile to the right answer.
void check_int8_wgmma_abft_live(Runtime& rt, KernelConfig c, const Problem& pr, uint64_t seed) {
  c.fault_injection = true;
  struct Plant {
    FaultSite site;
    int thread, element, bit;
    FaultStage stage;
  };
  for (const Plant pl : {Plant{FaultSite::output, 5, 3, 20, FaultStage::output},
                         Plant{FaultSite::checksum, 4, 0, 20, FaultStage::output},
                         Plant{FaultSite::checksum, 7, 1, 20, FaultStage::row_sum},
                         Plant{FaultSite::row_sum, 5, 0, 29, FaultStage::row_sum}}) {
    ProtectOptions o = gpu_test::plant(pl.site, pl.bit, pl.element, OnFault::recompute);
    o.inject->thread = pl.thread;
    const gpu_test::Planted s = gpu_test::run_planted(rt, c, pr, o, seed);
    INFO(s.result.config_name << " " << to_string(pl.site) << " thread " << pl.thread << ": "
                              << s.result.report.summary() << "; " << s.fault.summary());
    CHECK(s.fault.detected >= 1);
    REQUIRE_FALSE(s.fault.events.empty());
    CHECK(s.fault.events.at(0).stage == pl.stage);
    CHECK(s.fault.recomputed_tiles >= 1);
    CHECK(s.result.report.passed);
  }
}

}  // namespace

TEST_CASE("int8 with flash_abft: right answers, no false alarm, a live check, recompute",
          "[gpu][q8][protect]") {
  Runtime& rt = q8_runtime();
  for (int d : {64, 128, 256})
    for (Mask m : {Mask::none, Mask::causal}) {
      KernelConfig c = q8_config(d, Precision::int8, m);
      c.protection = Protection::flash_abft;
      // Odd lengths (a short tail block, padded V^T keys), GQA, LSE: the reference check and a
      // clean report. The block identity is exact, so a clean run must report nothing.
      const Problem pr = Problem::bhsd(2, 4, 2, 203, 517, d);
      gpu_test::check_clean_protected(rt, c, pr, 3100 + d);
      if (uses_wgmma(rt.resolve(c, &pr))) {
        check_int8_wgmma_abft_live(rt, c, pr, 3100 + d);
        continue;
      }
      // The FP32 check is live; recompute relaunches on the same quantised operands.
      const FaultReport tripped = gpu_test::check_live_output(rt, c, pr, 3100 + d);
      CHECK(tripped.events.at(0).threshold > 0.f);  // the FP32 check, not the exact one
    }
  // On Hopper the same on the mma.sync skeleton (sm_90 without "a"), which the wgmma one
  // replaced at head dims 64 and 128.
  if (!gpu_test::hopper_device(rt, "the mma.sync int8 Flash-ABFT beside the wgmma one")) return;
  for (Mask m : {Mask::none, Mask::causal}) {
    KernelConfig c = q8_config(128, Precision::int8, m);
    c.protection = Protection::flash_abft;
    c.arch = Arch{90, false};
    const Problem pr = Problem::bhsd(2, 4, 2, 203, 517, 128);
    REQUIRE_FALSE(uses_wgmma(rt.resolve(c, &pr)));
    gpu_test::check_clean_protected(rt, c, pr, 3300);
    const FaultReport tripped = gpu_test::check_live_output(rt, c, pr, 3300);
    CHECK(tripped.events.at(0).threshold > 0.f);
  }
}

TEST_CASE("int8's lazy softmax: maxima that climb every block, rows past INT32's range",
          "[gpu][q8][wgmma][lazy]") {
  Runtime& rt = q8_runtime();
  const std::optional<Arch> hopper = gpu_test::hopper_device(rt, "the wgmma skeleton");
  if (!hopper) return;
  const Arch device = *hopper;
  auto run = [&](const KernelConfig& c, const Problem& pr, const reference::Tensor16& q,
                 const reference::Tensor16& k, const reference::Tensor16& v) {
    const gpu_test::DeviceIo io(q, k, v);
    rt.attention(pr, io.q.data(), io.k.data(), io.v.data(), io.o.data(), nullptr, c);
    runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    return io.output(pr);
  };

  // Climbing maxima: key j's first channel grows with j and every query's first channel is
  // large, so each 128-key block's max lies about 1.5 (base 2) above the previous one and most
  // blocks move the reference: folds (O's shift, l's rescale) on nearly every block, with the
  // rows of a warp folding together. Checked against the FP64 reference and, tightly, against
  // the host model of the lazy numerics.
  for (int d : {64, 128, 256})
    for (auto [m, w] : std::vector<std::array<int, 2>>{{64, 4}, {128, 8}})
      for (Mask mask : {Mask::none, Mask::causal}) {
        const int n = 4096, bn = d == 256 ? 64 : 128;
        const Problem pr = Problem::bhsd(1, 2, 1, 300, n, d);
        std::mt19937_64 rng(77 + d + m);
        std::normal_distribution<float> noise(0.f, 0.3f);
        const auto q =
            tensor_of(pr.q, 2, 300, d, [&](int, int, int i) { return i == 0 ? 24.f : noise(rng); });
        const auto k = tensor_of(
            pr.k, 1, n, d, [&](int, int s, int i) { return i == 0 ? 11.f * s / n : noise(rng); });
        const auto v = tensor_of(pr.v, 1, n, d, [&](int, int, int) { return noise(rng) / 0.3f; });
        KernelConfig c = q8_config(d, Precision::int8, mask);
        c.block_m = m, c.block_n = bn, c.num_warps = w, c.num_stages = 2;
        c.arch = device;
        REQUIRE(lazy_int8_softmax(c));
        const auto o = run(c, pr, q, k, v);
        const auto report = reference::check(pr, Precision::int8, mask, q, k, v, o, nullptr, 64);
        INFO("climbing d" << d << " m" << m << " " << to_string(mask) << ": " << report.summary());
        CHECK(report.passed);
        double err2 = 0, ref2 = 0;
        for (int h = 0; h < 2; ++h)
          for (int r = 0; r < 300; r += 7) {
            const auto model =
                quant_model::attention_row(pr, Precision::int8, mask, bn, q, k, v, 0, h, r, true);
            for (int x = 0; x < d; ++x) {
              const double e = o.at(Precision::f16, 0, h, r, x) - model[x];
              err2 += e * e;
              ref2 += model[x] * model[x];
            }
          }
        CHECK(std::sqrt(err2 / ref2) < 5e-3);
      }

  // Flat rows: Q = 0, so every score is 0 and every P is 255. V near 1 quantises to about 127,
  // so O's INT32 would reach 255 * 127 * 98,304 > 2^31 without the periodic halving of rows
  // whose l passed 2^22. O is the mean of V.
  {
    const int n = 98304, d = 64;
    const Problem pr = Problem::bhsd(1, 1, 1, 64, n, d);
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<float> u(0.9f, 1.f);
    const auto q = tensor_of(pr.q, 1, 64, d, [](int, int, int) { return 0.f; });
    const auto k = tensor_of(pr.k, 1, n, d, [&](int, int, int) { return u(rng) - 0.95f; });
    const auto v = tensor_of(pr.v, 1, n, d, [&](int, int, int) { return u(rng); });
    for (auto [m, w] : std::vector<std::array<int, 2>>{{64, 4}, {128, 8}}) {
      KernelConfig c = q8_config(d, Precision::int8, Mask::none);
      c.block_m = m, c.block_n = 128, c.num_warps = w, c.num_stages = 2;
      c.arch = device;
      const auto o = run(c, pr, q, k, v);
      const auto report = reference::check(pr, Precision::int8, Mask::none, q, k, v, o, nullptr, 0);
      INFO("flat m" << m << ": " << report.summary());
      CHECK(report.passed);
      CHECK(report.rel_l2_error < 1e-2);
    }
  }
}

TEST_CASE("fp8 on Hopper: O stays accurate over long rows of same-signed values",
          "[gpu][q8][wgmma][fp8_accumulation]") {
  Runtime& rt = q8_runtime();
  const std::optional<Arch> hopper = gpu_test::hopper_device(rt, "the wgmma skeleton");
  if (!hopper) return;
  const Arch device = *hopper;
  // Hopper's E4M3 wgmma keeps about 14 bits when it adds into its accumulators, so an O that
  // the MMAs accumulated over every key block lost more of each new block as it grew: on these
  // inputs rel L2 was 1.4e-2 at 1k keys, 7.0e-2 at 4k and 0.28 at 16k, at every head dim. Each
  // block's P V now starts from zero and is added to O in FP32 (q8::fold_output): 1.1e-3 to
  // 1.7e-3 at 1k to 16k. The mma.sync skeleton does the same (Ada's native e4m3 mma.sync keeps
  // 22 bits too, by SageAttention2's account); here it runs as sm_90, whose f16 emulation of
  // that MMA does not truncate, so its cases check the per-block tile's arithmetic, not Ada's.
  auto uniform = [](const Strides& st, int heads, int seqlen, int d, float lo, float hi,
                    unsigned seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    return tensor_of(st, heads, seqlen, d, [&](int, int, int) { return u(rng); });
  };
  struct Case {
    int d, m, n, w, s, keys;
    float q_hi;         // Q = 0 makes every score 0: all P at their largest, O the mean of V
    bool sync = false;  // the mma.sync skeleton (as sm_90)
  };
  const std::vector<Case> cases = {
      {64, 64, 128, 4, 2, 16384, 1.f},        {64, 128, 128, 8, 2, 16384, 1.f},
      {128, 64, 128, 4, 2, 16384, 1.f},       {128, 128, 128, 8, 2, 16384, 1.f},
      {256, 128, 64, 8, 3, 16384, 1.f},       {256, 64, 64, 4, 2, 4096, 1.f},
      {64, 64, 128, 4, 2, 65536, 0.f},        {64, 128, 128, 8, 1, 16384, 1.f, true},
      {128, 128, 64, 8, 1, 16384, 1.f, true}, {256, 128, 32, 8, 1, 4096, 1.f, true},
  };
  for (const Case& cs : cases) {
    const Problem pr = Problem::bhsd(1, 1, 1, 128, cs.keys, cs.d);
    const auto q = uniform(pr.q, 1, 128, cs.d, 0.f, cs.q_hi, 11 + cs.d);
    const auto k = uniform(pr.k, 1, cs.keys, cs.d, 0.f, 1.f, 12 + cs.d);
    const auto v = uniform(pr.v, 1, cs.keys, cs.d, 0.f, 1.f, 13 + cs.d);
    KernelConfig c = q8_config(cs.d, Precision::fp8_e4m3, Mask::none);
    c.block_m = cs.m, c.block_n = cs.n, c.num_warps = cs.w, c.num_stages = cs.s;
    c.arch = cs.sync ? Arch{90, false} : device;
    REQUIRE(uses_wgmma(c) == !cs.sync);
    const gpu_test::DeviceIo io(q, k, v);
    rt.attention(pr, io.q.data(), io.k.data(), io.v.data(), io.o.data(), nullptr, c);
    runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    const auto o = io.output(pr);
    const auto report =
        reference::check(pr, Precision::fp8_e4m3, Mask::none, q, k, v, o, nullptr, 64);
    INFO(c.name() << ", " << cs.keys << " keys: " << report.summary());
    CHECK(report.passed);
    CHECK(report.rel_l2_error < 5e-3);
  }
}

TEST_CASE("V's quantisation, in one pass per KV head (Hopper) or two, gives the host's bytes",
          "[gpu][q8][quantize_v]") {
  Runtime& rt = q8_runtime();
  // Per channel, the scale max |v| / range over the head's keys and each byte v * (1 / scale)
  // rounded (int8: to nearest even, fp8: to E4M3), at the key's permuted place in its V^T row,
  // keys past the end 0. On sm_90+ heads whose keys fit a cluster's shared memory take the
  // one-pass kernel (quantize_v_sm90.cuh), longer ones v_channel_max and pack_v: both appear
  // here (head dim 128 at 6000 keys and 256 at 3100 keys are two-pass), as do CTAs of the
  // cluster with no keys (60 keys), GQA and both 16-bit inputs.
  struct Shape {
    int batch, heads_q, heads_kv, seqlen_k, head_dim;
  };
  for (Precision p : q8_precisions(rt))
    for (Precision io : {Precision::f16, Precision::bf16})
      for (Shape s : {Shape{1, 2, 1, 60, 64}, Shape{2, 4, 2, 1000, 128}, Shape{1, 1, 1, 6000, 128},
                      Shape{1, 2, 2, 3000, 256}, Shape{1, 1, 1, 3100, 256}}) {
        const Problem pr =
            Problem::bhsd(s.batch, s.heads_q, s.heads_kv, 64, s.seqlen_k, s.head_dim);
        const auto kernel = rt.kernel(rt.resolve(q8_config(s.head_dim, p, Mask::none), &pr));
        const QuantizedLayout layout = QuantizedLayout::of(pr);
        const bool one_pass =
            rt.device_arch().sm >= 90 && quantize_v_fits(layout.keys_padded, s.head_dim);
        INFO(to_string(p) << " " << to_string(io) << " keys " << s.seqlen_k << " d" << s.head_dim
                          << (one_pass ? " one pass" : " two passes"));
        std::mt19937_64 rng(s.seqlen_k + s.head_dim);
        const int d = s.head_dim;
        auto q = reference::random_tensor(rng, io, pr.q, s.batch, s.heads_q, 64, d);
        auto k = reference::random_tensor(rng, io, pr.k, s.batch, s.heads_kv, s.seqlen_k, d);
        auto v = reference::random_tensor(rng, io, pr.v, s.batch, s.heads_kv, s.seqlen_k, d);
        const gpu_test::DeviceIo io_buffers(q, k, v);
        runtime::DeviceBuffer ws(layout.bytes);
        ws.fill_bytes(0xAB);  // padding keys must be written as 0
        const QuantizedInputs in = quantize(*kernel, pr, io_buffers.q.data(), io_buffers.k.data(),
                                            io_buffers.v.data(), io, ws.data(), nullptr);
        runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
        const size_t heads = static_cast<size_t>(s.batch) * s.heads_kv;
        std::vector<float> scale(heads * d);
        std::vector<uint8_t> vt(heads * d * layout.keys_padded);
        runtime::check(
            runtime::driver().cuMemcpyDtoH(scale.data(), reinterpret_cast<CUdeviceptr>(in.v_scale),
                                           scale.size() * 4),
            "cuMemcpyDtoH");
        runtime::check(runtime::driver().cuMemcpyDtoH(
                           vt.data(), reinterpret_cast<CUdeviceptr>(in.v), vt.size()),
                       "cuMemcpyDtoH");
        const float range = quant_model::range(p);
        long long wrong_scales = 0, wrong_bytes = 0;
        for (int b = 0; b < s.batch; ++b)
          for (int h = 0; h < s.heads_kv; ++h)
            for (int c = 0; c < d; ++c) {
              float amax = 0.f;
              for (int j = 0; j < s.seqlen_k; ++j)
                amax = std::max(amax, std::abs(v.at(io, b, h, j, c)));
              const size_t row = (static_cast<size_t>(b) * s.heads_kv + h) * d + c;
              const float sc = amax / range;
              wrong_scales += scale[row] != sc;
              const float inv = sc > 0.f ? 1.f / sc : 0.f;
              for (int j = 0; j < layout.keys_padded; ++j) {
                const uint8_t byte =
                    vt[row * layout.keys_padded + j / 16 * 16 + quant_model::permuted_key(j % 16)];
                const float want = j < s.seqlen_k
                                       ? quant_model::quantize_value(v.at(io, b, h, j, c) * inv, p)
                                       : 0.f;
                wrong_bytes += stored_value(byte, p) != want;
              }
            }
        CHECK(wrong_scales == 0);
        CHECK(wrong_bytes == 0);
      }
}

TEST_CASE("Q's and K's quantisation by rows gives the host's bytes and scales",
          "[gpu][q8][quantize_rows]") {
  Runtime& rt = q8_runtime();
  // Per token (Q; K of int8) or per 64 keys (K of fp8_e4m3): the scale max |x| / range, each byte
  // x * (range / max |x|) rounded as the precision rounds; int8's K scales past the last key
  // (up to keys_padded) 0. Row counts that leave a CTA's rows part empty, GQA, both 16-bit inputs.
  struct Shape {
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  };
  for (Precision p : q8_precisions(rt))
    for (Precision io : {Precision::f16, Precision::bf16})
      for (Shape s : {Shape{1, 2, 1, 70, 60, 64}, Shape{2, 4, 2, 333, 1000, 128},
                      Shape{1, 3, 1, 129, 200, 192}, Shape{1, 2, 2, 65, 3000, 256}}) {
        const Problem pr =
            Problem::bhsd(s.batch, s.heads_q, s.heads_kv, s.seqlen_q, s.seqlen_k, s.head_dim);
        const auto kernel = rt.kernel(rt.resolve(q8_config(s.head_dim, p, Mask::none), &pr));
        const QuantizedLayout layout = QuantizedLayout::of(pr);
        INFO(to_string(p) << " " << to_string(io) << " q " << s.seqlen_q << " k " << s.seqlen_k
                          << " d" << s.head_dim);
        std::mt19937_64 rng(s.seqlen_q + s.seqlen_k + s.head_dim);
        const int d = s.head_dim;
        auto q = reference::random_tensor(rng, io, pr.q, s.batch, s.heads_q, s.seqlen_q, d);
        auto k = reference::random_tensor(rng, io, pr.k, s.batch, s.heads_kv, s.seqlen_k, d);
        auto v = reference::random_tensor(rng, io, pr.v, s.batch, s.heads_kv, s.seqlen_k, d);
        const gpu_test::DeviceIo io_buffers(q, k, v);
        runtime::DeviceBuffer ws(layout.bytes);
        ws.fill_bytes(0xAB);  // int8's padding K scales must be written as 0
        const QuantizedInputs in = quantize(*kernel, pr, io_buffers.q.data(), io_buffers.k.data(),
                                            io_buffers.v.data(), io, ws.data(), nullptr);
        runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
        const float range = quant_model::range(p);
        // Tensor t's rows (heads x seqlen per batch, dense bytes) against the host, with `rows`
        // tokens sharing a scale; scale_seq scale entries per head.
        auto check_rows = [&](const reference::Tensor16& t, const void* bytes, const float* scales,
                              int heads, int seqlen, int scale_seq, int rows) {
          const size_t n_heads = static_cast<size_t>(s.batch) * heads;
          std::vector<uint8_t> got(n_heads * seqlen * d);
          std::vector<float> got_scale(n_heads * scale_seq);
          runtime::check(runtime::driver().cuMemcpyDtoH(
                             got.data(), reinterpret_cast<CUdeviceptr>(bytes), got.size()),
                         "cuMemcpyDtoH");
          runtime::check(
              runtime::driver().cuMemcpyDtoH(
                  got_scale.data(), reinterpret_cast<CUdeviceptr>(scales), got_scale.size() * 4),
              "cuMemcpyDtoH");
          long long wrong_scales = 0, wrong_bytes = 0;
          for (int b = 0; b < s.batch; ++b)
            for (int h = 0; h < heads; ++h) {
              const size_t head = static_cast<size_t>(b) * heads + h;
              for (int j = 0; j < scale_seq; ++j) {
                float amax = 0.f;
                const int first = j / rows * rows;
                for (int jj = first; jj < std::min(seqlen, first + rows); ++jj)
                  for (int c = 0; c < d; ++c)
                    amax = std::max(amax, std::abs(t.at(io, b, h, jj, c)));
                const float want_scale = j < seqlen || rows == 1 ? amax / range : 0.f;
                // fp8's padding keys: whatever their block wrote (nothing reads them).
                if (j < seqlen || p == Precision::int8)
                  wrong_scales += got_scale[head * scale_seq + j] != want_scale;
                if (j >= seqlen) continue;
                const float inv = amax > 0.f ? range / amax : 0.f;
                for (int c = 0; c < d; ++c) {
                  const float want = quant_model::quantize_value(t.at(io, b, h, j, c) * inv, p);
                  wrong_bytes += stored_value(got[(head * seqlen + j) * d + c], p) != want;
                }
              }
            }
          CHECK(wrong_scales == 0);
          CHECK(wrong_bytes == 0);
        };
        check_rows(q, in.q, in.q_scale, s.heads_q, s.seqlen_q, s.seqlen_q, 1);
        check_rows(k, in.k, in.k_scale, s.heads_kv, s.seqlen_k, layout.keys_padded,
                   in.k_scale_block);
      }
}
