// The rules of validate(config), validate(problem, config) and the with_defaults heuristic.
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>

#include "ftattn/config.hpp"
#include "ftattn/errors.hpp"
#include "tests/support/configs.hpp"

using namespace ftattn;

namespace {

const Arch kSm80{80, false};
const Arch kSm86{86, false};
const Arch kSm89{89, false};
const Arch kSm90a{90, true};

KernelConfig make(int d, int m, int n, int w, int s, Arch arch = kSm80,
                  Precision p = Precision::f16) {
  return test::tile_config(d, m, n, w, s, arch, p);
}

KernelConfig partial(int d, Arch arch = Arch{}) {
  KernelConfig c;
  c.head_dim = d;
  c.arch = arch;
  return c;
}

}  // namespace

TEST_CASE("validate: accepts the standard configs", "[validate]") {
  for (int d : {32, 64, 96, 128}) {
    CHECK_NOTHROW(validate(make(d, 128, 64, 4, 2)));
    CHECK_NOTHROW(validate(make(d, 128, 64, 4, 2, kSm90a, Precision::bf16)));
  }
  CHECK_NOTHROW(validate(make(192, 64, 64, 4, 2)));
  CHECK_NOTHROW(validate(make(256, 64, 64, 4, 1)));
  CHECK_NOTHROW(validate(make(256, 64, 64, 4, 2, kSm90a)));
  CHECK_NOTHROW(validate(make(64, 16, 16, 1, 1)));
  CHECK_NOTHROW(validate(make(64, 256, 32, 8, 3)));
  // Exactly at the accumulator limit: 2 tiles * (64 + 32) = 192.
  CHECK_NOTHROW(validate(make(128, 128, 64, 4, 1)));
  // Exactly at sm_86's shared memory limit: (64 + 2*64) * 264 * 2 = 101376 = 99 KiB.
  REQUIRE(make(256, 64, 64, 4, 1, kSm86).shared_memory_bytes() == 99 * 1024);
  CHECK_NOTHROW(validate(make(256, 64, 64, 4, 1, kSm86)));
}

TEST_CASE("validate: incomplete configs list the open fields", "[validate]") {
  REQUIRE_CONFIG_ERROR(validate(KernelConfig{}),
                       "head_dim, block_m, block_n, num_warps, num_stages, arch");
  REQUIRE_CONFIG_ERROR(validate(partial(128, kSm80)),
                       "block_m, block_n, num_warps, num_stages still open");
  REQUIRE_CONFIG_ERROR(validate(partial(128, kSm80)), "with_defaults");
  REQUIRE_CONFIG_ERROR(validate(make(128, 128, 64, 4, 2, Arch{})), ": arch still open");
  KernelConfig c = make(128, 128, 64, 4, 2);
  c.block_n = -64;
  REQUIRE_CONFIG_ERROR(validate(c), "block_n is -64");
}

TEST_CASE("validate: arch rules", "[validate]") {
  REQUIRE_CONFIG_ERROR(validate(make(128, 128, 64, 4, 2, Arch{75, false})),
                       "unsupported arch 'sm_75'");
  REQUIRE_CONFIG_ERROR(validate(make(128, 128, 64, 4, 2, Arch{86, true})),
                       "sm_86a: the 'a' suffix exists only for sm_90a and sm_100a");
  REQUIRE_CONFIG_ERROR(validate(make(128, 128, 64, 4, 2, kSm86, Precision::fp8_e4m3)),
                       "precision fp8_e4m3 needs sm_89 or newer, not sm_86");
}

TEST_CASE("validate: head_dim, warps, stages, block_n", "[validate]") {
  REQUIRE_CONFIG_ERROR(validate(make(80, 128, 64, 4, 2)),
                       "head_dim 80 is not supported: use one of 32, 64, 96, 128, 192, 256");
  REQUIRE_CONFIG_ERROR(validate(make(512, 64, 64, 4, 2)), "head_dim 512");
  REQUIRE_CONFIG_ERROR(validate(make(128, 128, 64, 3, 2)),
                       "num_warps 3 is not supported: use 1, 2, 4 or 8, or 12 for three "
                       "consumer warpgroups");
  REQUIRE_CONFIG_ERROR(validate(make(128, 256, 64, 16, 2)), "num_warps 16");
  // 12 warps: the 16-bit warp-specialised kernel with three consumer warpgroups, sm_90a only;
  // f16 and bf16 unprotected or with Flash-ABFT (its injection builds too), not with EFTA.
  const Arch sm90a{90, true};
  CHECK_NOTHROW(validate(make(128, 192, 128, 12, 2, sm90a, Precision::f16_pasa)));
  CHECK_NOTHROW(validate(make(64, 192, 64, 12, 2, sm90a, Precision::f16_pasa)));
  CHECK(warp_specialized(make(128, 192, 128, 12, 2, sm90a, Precision::f16_pasa)));
  CHECK(launch_threads(make(128, 192, 128, 12, 2, sm90a, Precision::f16_pasa)) == 512);
  CHECK_NOTHROW(validate(make(128, 192, 128, 12, 2, sm90a)));
  CHECK_NOTHROW(validate(make(64, 192, 64, 12, 2, sm90a, Precision::bf16)));
  CHECK(warp_specialized(make(128, 192, 128, 12, 2, sm90a)));
  KernelConfig checked = make(128, 192, 128, 12, 2, sm90a);
  checked.protection = Protection::flash_abft;
  CHECK_NOTHROW(validate(checked));
  CHECK(warp_specialized(checked));
  checked.fault_injection = true;
  CHECK_NOTHROW(validate(checked));
  for (Protection efta : {Protection::efta_detect, Protection::efta_correct}) {
    checked.protection = efta;
    REQUIRE_CONFIG_ERROR(validate(checked),
                         "num_warps 12 (three consumer warpgroups) is the 16-bit");
    REQUIRE_CONFIG_ERROR(validate(checked), "unprotected or with flash_abft");
  }
  // f16_pasa: three consumers unprotected and with Flash-ABFT, not with EFTA.
  KernelConfig pasa_checked = make(128, 192, 128, 12, 2, sm90a, Precision::f16_pasa);
  pasa_checked.protection = Protection::flash_abft;
  CHECK_NOTHROW(validate(pasa_checked));
  pasa_checked.protection = Protection::efta_detect;
  REQUIRE_CONFIG_ERROR(validate(pasa_checked), "num_warps 12");
  REQUIRE_CONFIG_ERROR(validate(make(128, 192, 128, 12, 2, sm90a, Precision::int8)),
                       "num_warps 12");
  REQUIRE_CONFIG_ERROR(validate(make(128, 192, 128, 12, 2, kSm80, Precision::f16_pasa)),
                       "use 1, 2, 4 or 8");
  REQUIRE_CONFIG_ERROR(validate(make(128, 192, 128, 12, 1, sm90a, Precision::f16_pasa)),
                       "two or more stages");
  REQUIRE_CONFIG_ERROR(validate(make(64, 128, 64, 4, 4)),
                       "num_stages 4 is not supported: use 1, 2 or 3");
  REQUIRE_CONFIG_ERROR(validate(make(64, 128, 40, 4, 2)),
                       "block_n 40 is not supported: use a multiple of 16 between 16 and 256");
  REQUIRE_CONFIG_ERROR(validate(make(32, 64, 512, 4, 1)), "block_n 512");
}

TEST_CASE("validate: block_m must be whole 16-row tiles per warp", "[validate]") {
  REQUIRE_CONFIG_ERROR(validate(make(128, 96, 64, 4, 2)),
                       "block_m 96 is not a multiple of 16 * num_warps = 64");
  REQUIRE_CONFIG_ERROR(validate(make(128, 96, 64, 4, 2)), "change num_warps");
  REQUIRE_CONFIG_ERROR(validate(make(64, 64, 64, 8, 2)),
                       "block_m 64 is not a multiple of 16 * num_warps = 128");
  REQUIRE_CONFIG_ERROR(validate(make(32, 512, 16, 8, 1)), "block_m 512 is over the limit of 256");
  CHECK_NOTHROW(validate(make(64, 96, 64, 2, 2)));  // 96 = 3 tiles of 2 warps * 16 rows
}

TEST_CASE("validate: accumulator register budget", "[validate]") {
  // 2 tiles per warp * (128/8*4 + 128/8*4) = 2 * 128 = 256 > 192.
  REQUIRE_CONFIG_ERROR(validate(make(128, 128, 128, 4, 1)),
                       "would need 256 accumulator registers per thread (limit 192): lower "
                       "block_m or block_n, or raise num_warps");
  // d256 with a 128-row tile on 4 warps: 2 * (128 + 32) = 320.
  REQUIRE_CONFIG_ERROR(validate(make(256, 128, 64, 4, 1, kSm90a)),
                       "would need 320 accumulator registers");
  // Raising num_warps fixes it.
  CHECK_NOTHROW(validate(make(128, 128, 128, 8, 1)));
}

TEST_CASE("validate: shared memory over the arch limit", "[validate]") {
  const KernelConfig c = make(256, 64, 64, 4, 3, kSm86);
  const int bytes = (64 + 2 * 3 * 64) * (256 + 8) * 2;
  REQUIRE(c.shared_memory_bytes() == bytes);
  REQUIRE(bytes == 236544);
  REQUIRE_CONFIG_ERROR(validate(c), "need 236544 bytes of shared memory");
  REQUIRE_CONFIG_ERROR(validate(c), "sm_86 allows at most 101376");
  REQUIRE_CONFIG_ERROR(validate(c), "lower num_stages or block_n");
  // Even Hopper's 227 KiB (232448 bytes) is too small for it; two stages fit there.
  REQUIRE_CONFIG_ERROR(validate(make(256, 64, 64, 4, 3, kSm90a)), "sm_90a allows at most 232448");
  CHECK_NOTHROW(validate(make(256, 64, 64, 4, 2, kSm90a)));
  // And sm_80's 163 KiB only with fewer stages.
  REQUIRE_CONFIG_ERROR(validate(make(256, 64, 64, 4, 2, kSm80)), "sm_80 allows at most 166912");
}

TEST_CASE("validate: precisions and protections not built yet", "[validate]") {
  CHECK_NOTHROW(validate(make(128, 128, 64, 4, 2, kSm80, Precision::f16_pasa)));
  for (Protection p : {Protection::flash_abft, Protection::efta_detect, Protection::efta_correct}) {
    KernelConfig c = make(128, 128, 64, 4, 2);
    c.protection = p;
    CHECK_NOTHROW(validate(c));  // f16 and bf16 carry every checksum scheme
    c.precision = Precision::int8;
    c.block_n = 64;
    CHECK_NOTHROW(validate(c));  // exact INT32 digit checksums
    c.arch = kSm89;
    c.precision = Precision::fp8_e4m3;
    CHECK_NOTHROW(validate(c));  // f16 checksum rows through f16 MMAs
  }
}

TEST_CASE("with_defaults: fills open knobs by the heuristic", "[validate]") {
  // sm_90 without "a" keeps the mma.sync skeleton, so its defaults are the sm80 ones.
  const Arch kSm90{90, false};
  KernelConfig c = with_defaults(partial(128), kSm90);
  CHECK(c == make(128, 128, 64, 4, 2, kSm90));
  CHECK(c.name() == "ftattn_fwd_sm90_f16_d128_m128n64_w4s2_none_none");

  c = with_defaults(partial(64), kSm80);
  CHECK(c == make(64, 128, 128, 4, 2, kSm80));

  // Two stages at every shape for unprotected kernels up to head dim 128 (the H100's tune since
  // the lean epilogue), one for protected kernels (their checks add registers); head dim 64
  // causal up to 1024 keys takes 64-key blocks, and 64 x 64 tiles up to 512.
  const Problem keys_512 = Problem::bhsd(1, 1, 1, 512, 512, 128);
  CHECK(with_defaults(partial(128), kSm90, &keys_512).num_stages == 2);
  CHECK(with_defaults(partial(64), kSm90, &keys_512).num_stages == 2);
  KernelConfig masked = partial(128);
  masked.mask = Mask::causal;
  CHECK(with_defaults(masked, kSm90, &keys_512).num_stages == 2);
  masked.head_dim = 64;
  const Problem keys_4k = Problem::bhsd(1, 1, 1, 4096, 4096, 64);
  CHECK(with_defaults(masked, kSm90, &keys_4k).num_stages == 2);
  CHECK(with_defaults(masked, kSm90, &keys_4k).block_n == 128);
  const Problem keys_1k = Problem::bhsd(1, 1, 1, 1024, 1024, 64);
  CHECK(with_defaults(masked, kSm90, &keys_1k) == [&] {
    auto e = make(64, 128, 64, 4, 2, kSm90);
    e.mask = Mask::causal;
    return e;
  }());
  CHECK(with_defaults(masked, kSm90, &keys_512).block_m == 64);
  KernelConfig protected_128 = partial(128);
  protected_128.protection = Protection::flash_abft;
  CHECK(with_defaults(protected_128, kSm90).num_stages == 1);
  // On sm_90a every checksum scheme runs the warp-specialised wgmma skeleton at head dim 128,
  // with injection sites too: EFTA two consumers, 128 x 128 w8s2; Flash-ABFT three from 2k keys
  // (192 x 128 w12s2; 4k without a problem) and from 512 without a mask, two below. At head dim 64
  // EFTA takes three consumers too (from 2k keys). On sm_90 EFTA keeps the mma.sync defaults.
  const Problem keys_2047_abft = Problem::bhsd(1, 1, 1, 2047, 2047, 128);
  const Problem keys_511_abft = Problem::bhsd(1, 1, 1, 511, 511, 128);
  for (Protection prot :
       {Protection::flash_abft, Protection::efta_detect, Protection::efta_correct}) {
    protected_128.protection = prot;
    const bool efta = prot != Protection::flash_abft;
    const int rows = efta ? 128 : 192, warps = efta ? 8 : 12;
    for (bool inject : {false, true}) {
      KernelConfig asked = protected_128;
      asked.fault_injection = inject;
      auto expect = [&](int m, int w) {
        auto e = make(128, m, 128, w, 2, kSm90a);
        e.protection = prot;
        e.fault_injection = inject;
        return e;
      };
      CHECK(with_defaults(asked, kSm90a) == expect(rows, warps));
      CHECK(warp_specialized(with_defaults(asked, kSm90a)));
      // Below 2k keys Flash-ABFT takes three consumers too from 512 keys without a mask.
      CHECK(with_defaults(asked, kSm90a, &keys_2047_abft) == expect(rows, warps));
      CHECK(with_defaults(asked, kSm90a, &keys_511_abft) == expect(128, 8));
    }
    KernelConfig protected_64 = partial(64);
    protected_64.protection = prot;
    // EFTA at head dim 64: three consumers from 2k keys (4096 when no problem is given).
    if (efta)
      CHECK(with_defaults(protected_64, kSm90a) == [&] {
        auto e = make(64, 192, 128, 12, 2, kSm90a);
        e.protection = prot;
        return e;
      }());
  }
  protected_128.protection = Protection::efta_detect;
  CHECK(with_defaults(protected_128, kSm90).num_stages == 1);
  CHECK_FALSE(uses_wgmma(with_defaults(protected_128, kSm90)));

  // sm_90a, unprotected f16/bf16 at head dims 64 and 128: the wgmma skeleton's tiles (the H100's
  // tune): 64 x 128 at 64 (64-key blocks causal up to 1024 keys); at 128 the warp-specialised
  // kernel, three consumers (192 x 128 w12s2) from 2k keys (4k without a problem), from 512
  // without a mask and past 1k causal, 128 x 128 w8s2 below, but causal up to 512 keys: 64 x 64
  // w4s3.
  c = with_defaults(partial(128), kSm90a);
  CHECK(c == make(128, 192, 128, 12, 2, kSm90a));
  CHECK(warp_specialized(c));
  CHECK(launch_threads(c) == 512);
  const Problem keys_2k_128 = Problem::bhsd(1, 1, 1, 2048, 2048, 128);
  CHECK(with_defaults(partial(128), kSm90a, &keys_2k_128) == make(128, 192, 128, 12, 2, kSm90a));
  const Problem keys_2047 = Problem::bhsd(1, 1, 1, 2047, 2047, 128);
  CHECK(with_defaults(partial(128), kSm90a, &keys_2047) == make(128, 192, 128, 12, 2, kSm90a));
  const Problem keys_511 = Problem::bhsd(1, 1, 1, 511, 511, 128);
  CHECK(with_defaults(partial(128), kSm90a, &keys_511) == make(128, 128, 128, 8, 2, kSm90a));
  KernelConfig masked_128 = partial(128);
  masked_128.mask = Mask::causal;
  CHECK(with_defaults(masked_128, kSm90a, &keys_2047).num_warps == 12);  // causal past 1k
  const Problem keys_1025 = Problem::bhsd(1, 1, 1, 1025, 1025, 128);
  CHECK(with_defaults(masked_128, kSm90a, &keys_1025).num_warps == 12);
  KernelConfig abft_128 = partial(128);
  abft_128.protection = Protection::flash_abft;
  CHECK(with_defaults(abft_128, kSm90a, &keys_2k_128) == [&] {
    auto e = make(128, 192, 128, 12, 2, kSm90a);
    e.protection = Protection::flash_abft;
    return e;
  }());
  abft_128.protection = Protection::efta_detect;
  CHECK(with_defaults(abft_128, kSm90a, &keys_2k_128).num_warps == 8);  // EFTA keeps two
  CHECK(with_defaults(partial(64), kSm90a) == make(64, 64, 128, 4, 2, kSm90a));
  CHECK_FALSE(warp_specialized(with_defaults(partial(64), kSm90a)));
  CHECK(with_defaults(partial(128), kSm90a, &keys_512) == make(128, 192, 128, 12, 2, kSm90a));
  const Problem keys_1k_128 = Problem::bhsd(1, 1, 1, 1024, 1024, 128);
  CHECK(with_defaults(partial(128), kSm90a, &keys_1k_128).num_stages == 2);
  masked.head_dim = 128;
  CHECK(with_defaults(masked, kSm90a, &keys_512) == [&] {
    auto e = make(128, 64, 64, 4, 3, kSm90a);
    e.mask = Mask::causal;
    return e;
  }());
  CHECK(with_defaults(masked, kSm90a, &keys_1k_128) == [&] {
    auto e = make(128, 128, 128, 8, 2, kSm90a);
    e.mask = Mask::causal;
    return e;
  }());
  const Problem keys_16k = Problem::bhsd(1, 1, 1, 16384, 16384, 128);
  CHECK(with_defaults(partial(128), kSm90a, &keys_16k) == make(128, 192, 128, 12, 2, kSm90a));
  CHECK(with_defaults(masked, kSm90a, &keys_16k) == [&] {
    auto e = make(128, 192, 128, 12, 2, kSm90a);
    e.mask = Mask::causal;
    return e;
  }());
  masked.head_dim = 64;
  CHECK(with_defaults(masked, kSm90a, &keys_1k) == [&] {
    auto e = make(64, 64, 64, 4, 2, kSm90a);
    e.mask = Mask::causal;
    return e;
  }());
  CHECK(with_defaults(masked, kSm90a, &keys_4k).block_n == 128);
  // A knob the user set that the wgmma skeleton cannot take keeps the mma.sync defaults.
  KernelConfig one_stage = partial(128);
  one_stage.num_stages = 1;
  CHECK_FALSE(uses_wgmma(with_defaults(one_stage, kSm90a)));
  KernelConfig sparse = partial(128);
  sparse.mask = Mask::block_sparse;
  CHECK_FALSE(uses_wgmma(with_defaults(sparse, kSm90a)));

  // Head dim 192: the warp-specialised 128 x 64 w8s2 on sm_90a (d192_ws_tiles.csv), with every
  // checksum scheme and its injection build too; the mma.sync 128 x 128 w8s1 elsewhere.
  c = with_defaults(partial(192), kSm90a);
  CHECK(c == make(192, 128, 64, 8, 2, kSm90a));
  CHECK(warp_specialized(c));
  CHECK(with_defaults(partial(192), kSm90) == make(192, 128, 128, 8, 1, kSm90));
  for (Protection prot :
       {Protection::flash_abft, Protection::efta_detect, Protection::efta_correct})
    for (bool inject : {false, true}) {
      KernelConfig checked = partial(192);
      checked.protection = prot;
      checked.fault_injection = inject;
      const KernelConfig r = with_defaults(checked, kSm90a);
      INFO(r.name());
      CHECK((warp_specialized(r) && r.block_m == 128 && r.block_n == 64 && r.num_warps == 8 &&
             r.num_stages == 2));
    }
  // Short causal problems take smaller tiles at narrow and wide heads, not at 128, on the
  // mma.sync skeleton; on sm_90a head dim 256 keeps the warp-specialised 128 x 64 w8s2 (faster
  // there at 512-2k keys too, bench/results/nvidia-h100/d256_ws_short.csv).
  const Problem short_seq = Problem::bhsd(1, 1, 1, 1024, 1024, 256);
  KernelConfig causal = partial(256);
  causal.mask = Mask::causal;
  CHECK(with_defaults(causal, kSm90, &short_seq) == [&] {
    auto e = make(256, 64, 64, 4, 1, kSm90);
    e.mask = Mask::causal;
    return e;
  }());
  CHECK(with_defaults(causal, kSm90a, &short_seq) == [&] {
    auto e = make(256, 128, 64, 8, 2, kSm90a);
    e.mask = Mask::causal;
    return e;
  }());
  const Problem long_seq = Problem::bhsd(1, 1, 1, 8192, 8192, 256);
  CHECK(with_defaults(causal, kSm90a, &long_seq).block_m == 128);
  causal.head_dim = 64;
  const Problem shorter_seq = Problem::bhsd(1, 1, 1, 512, 512, 64);
  CHECK(with_defaults(causal, kSm90, &shorter_seq).num_stages == 2);
  CHECK(with_defaults(causal, kSm90, &shorter_seq).block_m == 64);
  CHECK(with_defaults(causal, kSm90, &short_seq).block_m == 128);
  causal.head_dim = 128;
  CHECK(with_defaults(causal, kSm90, &short_seq).block_n == 64);

  // The config's own arch wins over the device's.
  c = with_defaults(partial(64, kSm86), kSm90a);
  CHECK(c.arch == kSm86);
  // Without a device, a config that names its arch still resolves.
  c = with_defaults(partial(64, kSm86), Arch{});
  CHECK(c.arch == kSm86);
  CHECK_NOTHROW(validate(c));

  // Every supported head_dim on every arch resolves to a valid config.
  for (Arch arch : {kSm80, kSm86, Arch{87, false}, kSm89, Arch{90, false}, kSm90a, Arch{100, true},
                    Arch{120, false}}) {
    for (int d : {32, 64, 96, 128, 192, 256}) {
      for (Precision p : {Precision::f16, Precision::bf16}) {
        KernelConfig open = partial(d);
        open.precision = p;
        open.mask = Mask::causal;
        INFO(arch.to_string() << " d" << d);
        KernelConfig r;
        REQUIRE_NOTHROW(r = with_defaults(open, arch));
        CHECK(r.is_complete());
        CHECK_NOTHROW(validate(r));
        CHECK(r.precision == p);
        CHECK(r.mask == Mask::causal);
        CHECK(r.shared_memory_bytes() <= max_shared_memory_bytes(arch));
      }
    }
  }
}

TEST_CASE("with_defaults: shrinks to fit the arch's shared memory", "[validate]") {
  // d256 wants 128x128 with 8 warps: 202752 bytes, over sm_80's 163 KiB and sm_86's 99 KiB.
  // Stages are already 1, so block_n halves: to 64 on sm_80, to 32 on sm_86.
  KernelConfig c = with_defaults(partial(256), kSm86);
  CHECK(c == make(256, 128, 32, 8, 1, kSm86));
  CHECK(c.shared_memory_bytes() <= max_shared_memory_bytes(kSm86));
  c = with_defaults(partial(256), kSm80);
  CHECK(c == make(256, 128, 64, 8, 1, kSm80));
  // sm_90a: the warp-specialised 128 x 64 w8s2 (197,888 bytes) fits as it is.
  c = with_defaults(partial(256), kSm90a);
  CHECK(c == make(256, 128, 64, 8, 2, kSm90a));
  CHECK(c.shared_memory_bytes() <= max_shared_memory_bytes(kSm90a));

  // d128 on sm_86: 104448 bytes with 2 stages, so 1.
  CHECK(with_defaults(partial(128), kSm86) == make(128, 128, 64, 4, 1, kSm86));

  // A user-set num_stages stays; block_n gives instead.
  KernelConfig s2 = partial(256);
  s2.num_stages = 2;
  c = with_defaults(s2, kSm86);
  CHECK(c.num_stages == 2);
  CHECK(c.block_n <= 32);
  CHECK(c.shared_memory_bytes() <= max_shared_memory_bytes(kSm86));

  // Both fixed and too big: reported, not silently changed.
  KernelConfig fixed = partial(256);
  fixed.num_stages = 3;
  fixed.block_n = 64;
  REQUIRE_CONFIG_ERROR(with_defaults(fixed, kSm86), "lower num_stages or block_n");
}

TEST_CASE("with_defaults: keeps the knobs the user set", "[validate]") {
  KernelConfig user = partial(64);
  user.block_n = 32;
  user.num_stages = 3;
  user.precision = Precision::bf16;
  user.mask = Mask::causal;
  KernelConfig c = with_defaults(user, kSm80);
  CHECK(c.block_n == 32);
  CHECK(c.num_stages == 3);
  CHECK(c.block_m == 128);
  CHECK(c.num_warps == 4);
  CHECK(c.precision == Precision::bf16);
  CHECK(c.mask == Mask::causal);

  // A complete, valid config comes back unchanged.
  const KernelConfig full = make(96, 64, 32, 2, 3, kSm89, Precision::bf16);
  CHECK(with_defaults(full, kSm90a) == full);

  // A user-set num_warps gets a block_m it divides and that fits the register budget.
  user = partial(128);
  user.num_warps = 8;
  c = with_defaults(user, kSm80);
  CHECK(c.num_warps == 8);
  CHECK(c.block_m % (16 * 8) == 0);
  CHECK_NOTHROW(validate(c));
  user.num_warps = 1;
  c = with_defaults(user, kSm80);
  CHECK(c.num_warps == 1);
  CHECK_NOTHROW(validate(c));
  user = partial(256);
  user.num_warps = 8;
  c = with_defaults(user, kSm90a);
  CHECK(c.block_m == 128);
  CHECK_NOTHROW(validate(c));

  // A user-set invalid knob is kept and reported.
  user = partial(128);
  user.block_m = 96;
  REQUIRE_CONFIG_ERROR(with_defaults(user, kSm80), "block_m 96");
  user = partial(128);
  user.num_warps = -4;
  REQUIRE_CONFIG_ERROR(with_defaults(user, kSm80), "num_warps is -4");
}

TEST_CASE("with_defaults: errors", "[validate]") {
  REQUIRE_CONFIG_ERROR(with_defaults(partial(128), Arch{}),
                       "no GPU to take the arch from: give --arch / KernelConfig::arch");
  REQUIRE_CONFIG_ERROR(with_defaults(partial(0), kSm80), "head_dim is required");
  REQUIRE_CONFIG_ERROR(with_defaults(partial(80), kSm80), "head_dim 80 is not supported");
  // Checked before any size is computed from it (head_dim + 16 overflowed int).
  KernelConfig huge = partial(std::numeric_limits<int>::max(), kSm90a);
  huge.precision = Precision::int8;
  REQUIRE_CONFIG_ERROR(with_defaults(huge, kSm90a), "is not supported");
  KernelConfig fp8 = partial(128);
  fp8.precision = Precision::fp8_e4m3;
  REQUIRE_CONFIG_ERROR(with_defaults(fp8, kSm80), "precision fp8_e4m3 needs sm_89 or newer");
  REQUIRE_CONFIG_ERROR(with_defaults(partial(128), Arch{75, false}), "unsupported arch 'sm_75'");
}

TEST_CASE("validate: problem against config", "[validate]") {
  const KernelConfig c = make(128, 128, 64, 4, 2);
  CHECK_NOTHROW(validate(Problem::bhsd(2, 32, 8, 1000, 1000, 128), c));
  CHECK_NOTHROW(validate(Problem::bshd(2, 32, 1, 1, 4096, 128), c));  // MQA, one query row

  REQUIRE_CONFIG_ERROR(validate(Problem::bhsd(2, 32, 5, 128, 128, 128), c),
                       "heads_kv (5) must divide heads_q (32) for GQA/MQA");
  REQUIRE_CONFIG_ERROR(validate(Problem::bhsd(2, 32, 8, 128, 128, 64), c),
                       "problem head_dim 64 does not match the kernel config's head_dim 128");
  REQUIRE_CONFIG_ERROR(validate(Problem::bhsd(0, 32, 8, 128, 128, 128), c),
                       "problem batch is 0: it must be at least 1");
  REQUIRE_CONFIG_ERROR(validate(Problem::bhsd(1, 32, 8, 0, 128, 128), c), "seqlen_q is 0");
  REQUIRE_CONFIG_ERROR(validate(Problem::bhsd(1, 32, 8, 128, 0, 128), c), "seqlen_k is 0");
  REQUIRE_CONFIG_ERROR(validate(Problem::bhsd(1, 0, 1, 128, 128, 128), c), "heads_q is 0");
  REQUIRE_CONFIG_ERROR(validate(Problem{}, c), "seqlen_q is 0");
}

TEST_CASE("validate: problem strides and scale", "[validate]") {
  const KernelConfig c = make(128, 128, 64, 4, 2);
  Problem p = Problem::bhsd(2, 8, 8, 256, 256, 128);

  Problem bad = p;
  bad.k.head = -1;
  REQUIRE_CONFIG_ERROR(validate(bad, c), "k head stride is -1");
  bad = p;
  bad.o.seq = 64;
  REQUIRE_CONFIG_ERROR(validate(bad, c), "o seq stride 64 is smaller than head_dim 128");
  // One row: any seq stride is fine. Broadcast K/V over the batch (stride 0) is fine too.
  Problem one = Problem::bhsd(2, 8, 8, 1, 256, 128);
  one.q.seq = 0;
  one.o.seq = 0;
  one.k.batch = 0;
  one.v.batch = 0;
  CHECK_NOTHROW(validate(one, c));

  bad = p;
  bad.softmax_scale = -1.0f;
  REQUIRE_CONFIG_ERROR(validate(bad, c), "softmax_scale");
  bad.softmax_scale = std::numeric_limits<float>::infinity();
  REQUIRE_CONFIG_ERROR(validate(bad, c), "softmax_scale inf");
  bad.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  REQUIRE_CONFIG_ERROR(validate(bad, c), "softmax_scale");
  bad.softmax_scale = 0.25f;
  CHECK_NOTHROW(validate(bad, c));
}

TEST_CASE("validate: problem size guards", "[validate]") {
  const KernelConfig c = make(128, 128, 64, 4, 2);
  // 2 * 32 * 2^26 = 2^32 LSE rows: over int32.
  REQUIRE_CONFIG_ERROR(validate(Problem::bhsd(2, 32, 32, 1 << 26, 1024, 128), c),
                       "over 2^31-1 rows");
  // 2^31 rows from two batches of 2^30.
  REQUIRE_CONFIG_ERROR(validate(Problem::bhsd(2, 1, 1, 1 << 30, 16, 128), c), "over 2^31-1 rows");
  // Lengths stop at 2^30: within a block of 2^31 the kernels' block counts wrapped negative
  // and no key block ran (O = 0, no error).
  CHECK_NOTHROW(validate(Problem::bhsd(1, 1, 1, 1 << 30, 1 << 30, 128), c));
  REQUIRE_CONFIG_ERROR(validate(Problem::bhsd(1, 1, 1, (1 << 30) + 1, 16, 128), c),
                       "sequence lengths must be at most 2^30");
  REQUIRE_CONFIG_ERROR(
      validate(Problem::bhsd(1, 1, 1, 16, std::numeric_limits<int32_t>::max() - 50, 128), c),
      "sequence lengths must be at most 2^30");

  // Element offsets past int64.
  Problem huge = Problem::bhsd(60000, 8, 8, 128, 128, 128);
  huge.k.batch = int64_t{1} << 50;
  REQUIRE_CONFIG_ERROR(validate(huge, c), "k element offsets overflow int64");

  // Heads and batch ride in the grid's y and z (the driver refused them with INVALID_VALUE).
  REQUIRE_CONFIG_ERROR(validate(Problem::bhsd(65536, 1, 1, 16, 16, 128), c),
                       "must each be at most 65535");
  REQUIRE_CONFIG_ERROR(validate(Problem::bhsd(1, 70000, 70000, 16, 16, 128), c),
                       "heads_q (70000) must each be at most 65535");
  CHECK_NOTHROW(validate(Problem::bhsd(65535, 2, 1, 16, 16, 128), c));
}

TEST_CASE("validate: the output's rows must not share memory", "[validate]") {
  const KernelConfig c = make(128, 128, 64, 4, 2);
  const Problem p = Problem::bhsd(4, 4, 4, 16, 16, 128);
  CHECK_NOTHROW(validate(p, c));
  CHECK_NOTHROW(validate(Problem::bshd(4, 4, 2, 16, 16, 128), c));
  // These were accepted, and CTAs then wrote the same rows at once.
  for (auto [field, stride] : std::vector<std::pair<std::string, int64_t>>{
           {"head 0", 0}, {"batch 0", 0}, {"head one row", 128}}) {
    INFO(field);
    Problem bad = p;
    if (field == "batch 0")
      bad.o.batch = stride;
    else
      bad.o.head = stride;
    REQUIRE_CONFIG_ERROR(validate(bad, c), "share memory");
  }
  // Padded layouts and broadcast inputs are fine; a single head may take any head stride.
  Problem padded = p;
  padded.o.head = 16 * 128 + 64;
  padded.o.batch = 4 * padded.o.head + 8;
  padded.q.head = 0;
  CHECK_NOTHROW(validate(padded, c));
  Problem one_head = Problem::bhsd(2, 1, 1, 16, 16, 128);
  one_head.o.head = 0;
  CHECK_NOTHROW(validate(one_head, c));
}

TEST_CASE("validate: block-mask block counts do not overflow int", "[validate]") {
  Problem p = Problem::bhsd(1, 8, 8, 1024, 1024, 128);
  p.sparse_block_m = 2147483520;  // seqlen + block - 1 passed INT_MAX: 0 blocks, 0 bytes
  p.sparse_block_n = 128;
  CHECK(p.block_mask_q_blocks() == 1);
  CHECK(p.block_mask_k_blocks() == 8);
  CHECK(p.block_mask_head_bytes() == 8);
  CHECK(p.block_mask_bytes() == 64);
}

TEST_CASE("validate: EFTA on the mma.sync kernel takes keys in groups of 32", "[validate]") {
  for (Protection scheme : {Protection::efta_detect, Protection::efta_correct}) {
    for (int n : {48, 80, 112}) {
      KernelConfig c = make(64, 128, n, 4, 1);
      c.protection = scheme;
      REQUIRE_CONFIG_ERROR(validate(c), "use block_n 16, 32 or a multiple of 32");
    }
    for (int n : {16, 32, 64, 96}) {
      KernelConfig c = make(64, 128, n, 4, 1);
      c.protection = scheme;
      CHECK_NOTHROW(validate(c));
    }
  }
  // Flash-ABFT's prologue takes any multiple of 16 (its key batches divide ragged blocks).
  KernelConfig abft = make(64, 128, 48, 4, 1);
  abft.protection = Protection::flash_abft;
  CHECK_NOTHROW(validate(abft));
}

TEST_CASE("validate: enum values outside their lists, decoupled with a block mask", "[validate]") {
  // An unknown backend compiled as NVRTC, and the name no longer parsed back to the config.
  KernelConfig c = make(64, 128, 64, 4, 2);
  c.backend = static_cast<Backend>(5);
  REQUIRE_CONFIG_ERROR(validate(c), "invalid Backend value 5");
  c = make(64, 128, 64, 4, 2);
  c.mask = static_cast<Mask>(9);
  REQUIRE_CONFIG_ERROR(validate(c), "invalid Mask value 9");
  c = make(64, 128, 64, 4, 2);
  c.protection = static_cast<Protection>(7);
  REQUIRE_CONFIG_ERROR(validate(c), "invalid Protection value 7");
  // Only codegen refused it before.
  c = make(64, 128, 64, 4, 2);
  c.protection = Protection::decoupled;
  c.mask = Mask::block_sparse;
  REQUIRE_CONFIG_ERROR(validate(c), "protection decoupled runs masks none and causal");
}

TEST_CASE("validate: heads' block masks must not overlap", "[validate]") {
  KernelConfig c = make(64, 128, 64, 4, 2);
  c.mask = Mask::block_sparse;
  Problem p = Problem::bhsd(1, 4, 4, 512, 512, 64);
  p.sparse_block_m = 128;
  p.sparse_block_n = 128;
  // 4 x 4 blocks a head: a stride of 8 read half of the next head's mask as this head's.
  p.block_mask_head_stride = 8;
  REQUIRE_CONFIG_ERROR(validate(p, c),
                       "block_mask_head_stride 8 is less than a head's mask of 4 x 4 = 16 bytes");
  for (int64_t ok : {-1, 0, 16, 64}) {
    p.block_mask_head_stride = ok;
    CHECK_NOTHROW(validate(p, c));
  }
}
