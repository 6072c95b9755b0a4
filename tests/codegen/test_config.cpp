// KernelConfig and Problem as values: enum and arch spellings, canonical names, sizes, strides,
// flops, hash.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "ftattn/config.hpp"
#include "ftattn/errors.hpp"
#include "tests/support/configs.hpp"

using namespace ftattn;

namespace {

KernelConfig make(int d, int m, int n, int w, int s, Precision p, Mask mask, Arch arch,
                  Protection prot = Protection::none) {
  return test::tile_config(d, m, n, w, s, arch, p, mask, prot);
}

const Arch kSm80{80, false};
const Arch kSm86{86, false};
const Arch kSm90a{90, true};

bool is_valid(const KernelConfig& c) {
  try {
    validate(c);
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

// Every combination the round-trip and hash tests walk over.
std::vector<KernelConfig> all_configs(bool valid_only) {
  struct Block {
    int m, n, w, s;
  };
  const Block blocks[] = {{128, 64, 4, 2}, {64, 64, 4, 2},  {64, 32, 4, 1},   {128, 32, 8, 3},
                          {16, 16, 1, 1},  {256, 16, 8, 2}, {128, 128, 8, 1}, {64, 128, 4, 1}};
  std::vector<KernelConfig> out;
  for (int d : {32, 64, 96, 128, 192, 256}) {
    for (Precision p : {Precision::f16, Precision::bf16}) {
      for (Mask mask : {Mask::none, Mask::causal, Mask::block_sparse, Mask::block_sparse_causal}) {
        for (Arch arch : {kSm80, kSm90a}) {
          for (const Block& b : blocks) {
            KernelConfig c = make(d, b.m, b.n, b.w, b.s, p, mask, arch);
            if (!valid_only || is_valid(c)) out.push_back(c);
          }
        }
      }
    }
  }
  return out;
}

// Pairs (i, j) a causal, bottom-right aligned mask lets through, counted one by one.
int64_t causal_pairs_brute(int sq, int sk) {
  int64_t n = 0;
  for (int i = 0; i < sq; ++i) {
    for (int j = 0; j < sk; ++j) {
      if (j <= i + sk - sq) ++n;
    }
  }
  return n;
}

}  // namespace

TEST_CASE("config: enum to_string and parse round trip", "[config]") {
  for (Precision p : {Precision::f16, Precision::bf16, Precision::int8, Precision::f16_pasa,
                      Precision::fp8_e4m3}) {
    std::string text(to_string(p));
    CHECK(parse_precision(text) == p);
    std::string dashed = text;
    for (char& ch : dashed) {
      if (ch == '_') ch = '-';
    }
    CHECK(parse_precision(dashed) == p);
  }
  for (Protection p : {Protection::none, Protection::flash_abft, Protection::efta_detect,
                       Protection::efta_correct}) {
    CHECK(parse_protection(std::string(to_string(p))) == p);
  }
  for (Mask m : {Mask::none, Mask::causal, Mask::block_sparse, Mask::block_sparse_causal})
    CHECK(parse_mask(to_string(m)) == m);

  CHECK(to_string(Precision::f16_pasa) == "f16_pasa");
  CHECK(to_string(Precision::fp8_e4m3) == "fp8_e4m3");
  CHECK(to_string(Protection::efta_correct) == "efta_correct");
  CHECK(to_string(Mask::causal) == "causal");
  CHECK(parse_precision("f16-pasa") == Precision::f16_pasa);
  CHECK(parse_protection("efta-correct") == Protection::efta_correct);
  CHECK(parse_protection("flash-abft") == Protection::flash_abft);
}

TEST_CASE("config: enum parse rejects unknown text and lists the choices", "[config]") {
  REQUIRE_CONFIG_ERROR(parse_precision("fp32"),
                       "unknown precision 'fp32': expected one of f16, bf16, int8, f16_pasa, "
                       "fp8_e4m3");
  REQUIRE_CONFIG_ERROR(parse_precision(""), "unknown precision ''");
  REQUIRE_CONFIG_ERROR(parse_precision("F16"), "'F16'");
  REQUIRE_CONFIG_ERROR(parse_protection("abft"),
                       "unknown protection 'abft': expected one of none, flash_abft, efta_detect, "
                       "efta_correct");
  REQUIRE_CONFIG_ERROR(parse_mask("sliding"),
                       "unknown mask 'sliding': expected one of none, causal");
  // A mixed spelling is neither the user's nor the name token.
  REQUIRE_CONFIG_ERROR(parse_precision("fp8-e4m3x"), "fp8-e4m3x");
}

TEST_CASE("config: Arch to_string and parse forms", "[config]") {
  CHECK(Arch{}.to_string() == "auto");
  CHECK(kSm80.to_string() == "sm_80");
  CHECK(kSm90a.to_string() == "sm_90a");
  CHECK(Arch{100, true}.to_string() == "sm_100a");

  CHECK(Arch::parse("sm_90a") == kSm90a);
  CHECK(Arch::parse("sm90a") == kSm90a);
  CHECK(Arch::parse("90a") == kSm90a);
  CHECK(Arch::parse("sm_80") == kSm80);
  CHECK(Arch::parse("sm80") == kSm80);
  CHECK(Arch::parse("80") == kSm80);
  CHECK(Arch::parse("sm_90") == Arch{90, false});
  CHECK(Arch::parse("sm_100a") == Arch{100, true});
  CHECK(Arch::parse("sm_120") == Arch{120, false});
  CHECK(Arch::parse("auto").is_auto());
  for (int sm : {80, 86, 87, 89, 90, 100, 120}) {
    Arch a{sm, false};
    CHECK(Arch::parse(a.to_string()) == a);
  }

  REQUIRE_CONFIG_ERROR(Arch::parse("sm_80a"),
                       "sm_80a: the 'a' suffix exists only for sm_90a and sm_100a");
  REQUIRE_CONFIG_ERROR(Arch::parse("120a"), "sm_120a: the 'a' suffix");
  REQUIRE_CONFIG_ERROR(Arch::parse("sm_75"), "unsupported arch 'sm_75'");
  REQUIRE_CONFIG_ERROR(Arch::parse("sm_75"), "sm_80 or newer");
  REQUIRE_CONFIG_ERROR(Arch::parse("sm81"), "sm81");
  REQUIRE_CONFIG_ERROR(Arch::parse("sm81"), "sm_86");  // lists what is supported
  REQUIRE_CONFIG_ERROR(Arch::parse("hopper"), "bad arch 'hopper'");
  REQUIRE_CONFIG_ERROR(Arch::parse(""), "bad arch ''");
  REQUIRE_CONFIG_ERROR(Arch::parse("sm_"), "bad arch 'sm_'");
  REQUIRE_CONFIG_ERROR(Arch::parse("sm_90b"), "bad arch 'sm_90b'");
  REQUIRE_CONFIG_ERROR(Arch::parse("sm_-80"), "bad arch");
}

TEST_CASE("config: max_shared_memory_bytes per arch", "[config]") {
  CHECK(max_shared_memory_bytes(kSm80) == 163 * 1024);
  CHECK(max_shared_memory_bytes(Arch{87, false}) == 163 * 1024);
  CHECK(max_shared_memory_bytes(kSm86) == 99 * 1024);
  CHECK(max_shared_memory_bytes(Arch{89, false}) == 99 * 1024);
  CHECK(max_shared_memory_bytes(Arch{120, false}) == 99 * 1024);
  CHECK(max_shared_memory_bytes(Arch{90, false}) == 227 * 1024);
  CHECK(max_shared_memory_bytes(kSm90a) == 227 * 1024);
  CHECK(max_shared_memory_bytes(Arch{100, true}) == 227 * 1024);
  REQUIRE_CONFIG_ERROR(max_shared_memory_bytes(Arch{}), "auto");
  REQUIRE_CONFIG_ERROR(max_shared_memory_bytes(Arch{75, false}), "sm_75");
  REQUIRE_CONFIG_ERROR(max_shared_memory_bytes(Arch{80, true}), "sm_80a");
}

TEST_CASE("config: literal canonical names and symbols", "[config]") {
  KernelConfig c =
      make(128, 128, 64, 4, 2, Precision::bf16, Mask::causal, kSm90a, Protection::efta_correct);
  CHECK(c.name() == "ftattn_fwd_sm90a_bf16_d128_m128n64_w4s2_causal_efta-correct");
  CHECK(c.symbol() == "ftattn_fwd_sm90a_bf16_d128_m128n64_w4s2_causal_efta_correct");

  c = make(128, 128, 64, 4, 2, Precision::f16, Mask::causal, kSm80);
  CHECK(c.name() == "ftattn_fwd_sm80_f16_d128_m128n64_w4s2_causal_none");
  CHECK(c.symbol() == c.name());

  c = make(64, 64, 32, 4, 1, Precision::fp8_e4m3, Mask::none, Arch{89, false},
           Protection::flash_abft);
  CHECK(c.name() == "ftattn_fwd_sm89_fp8-e4m3_d64_m64n32_w4s1_none_flash-abft");
  c = make(256, 64, 64, 4, 2, Precision::f16_pasa, Mask::none, Arch{100, true},
           Protection::efta_detect);
  CHECK(c.name() == "ftattn_fwd_sm100a_f16-pasa_d256_m64n64_w4s2_none_efta-detect");
  CHECK(c.symbol() == "ftattn_fwd_sm100a_f16_pasa_d256_m64n64_w4s2_none_efta_detect");

  KernelConfig parsed =
      KernelConfig::parse("ftattn_fwd_sm90a_bf16_d128_m128n64_w4s2_causal_efta-correct");
  CHECK(parsed ==
        make(128, 128, 64, 4, 2, Precision::bf16, Mask::causal, kSm90a, Protection::efta_correct));
}

TEST_CASE("config: parse inverts name for every valid combination", "[config]") {
  const std::vector<KernelConfig> valid = all_configs(true);
  // A healthy share of the grid must be valid, or this test checks little.
  REQUIRE(valid.size() >= 150);
  for (const KernelConfig& c : valid) {
    const std::string name = c.name();
    INFO(name);
    CHECK(name == c.name());  // stable
    const KernelConfig back = KernelConfig::parse(name);
    CHECK(back == c);
    CHECK(back.name() == name);
    CHECK(back.symbol() == c.symbol());
    CHECK(name.find('_') != std::string::npos);
  }
}

TEST_CASE("config: a kernel symbol given for a name is refused with the name to give", "[config]") {
  // SASS and cubins show symbols, which write '_' for the '-' inside fields; parse reads names
  // only, and its error says which name the symbol stands for.
  int symbols = 0;
  for (const KernelConfig& c : all_configs(true)) {
    const std::string name = c.name(), symbol = c.symbol();
    if (symbol == name) continue;
    ++symbols;
    INFO(symbol);
    REQUIRE_CONFIG_ERROR(KernelConfig::parse(symbol), "the name to give is '" + name + "'");
  }
  REQUIRE(symbols >= 50);
  KernelConfig routed = KernelConfig::parse("ftattn_fwd_sm90a_f16_d128_m128n64_w4s2_none_none");
  routed.backend = Backend::llvm;
  routed.ir_inject = IrClass::fp_arith;
  routed.ir_harden = IrClass::exp_max;
  REQUIRE_CONFIG_ERROR(KernelConfig::parse(routed.symbol()),
                       "the name to give is '" + routed.name() + "'");
  // Names that are wrong anyway get no such hint.
  const std::string bad = "ftattn_fwd_sm90a_fp32_d128_m128n64_w4s2_none_flash_abft";
  try {
    KernelConfig::parse(bad);
    FAIL("parsed " << bad);
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("name to give") == std::string::npos);
  }
}

TEST_CASE("config: parse inverts name for complete configs that are not built yet", "[config]") {
  // parse does not validate: names of planned precisions and protections read back too.
  for (Precision p : {Precision::f16, Precision::bf16, Precision::int8, Precision::f16_pasa,
                      Precision::fp8_e4m3}) {
    for (Protection prot : {Protection::none, Protection::flash_abft, Protection::efta_detect,
                            Protection::efta_correct}) {
      for (Arch arch : {kSm80, kSm86, Arch{89, false}, kSm90a, Arch{100, true}, Arch{120, false}}) {
        KernelConfig c = make(96, 64, 48, 2, 3, p, Mask::causal, arch, prot);
        INFO(c.name());
        CHECK(KernelConfig::parse(c.name()) == c);
      }
    }
  }
}

TEST_CASE("config: parse rejects malformed names and points at the bad part", "[config]") {
  const std::string good = "ftattn_fwd_sm80_f16_d128_m128n64_w4s2_causal_none";
  REQUIRE_NOTHROW(KernelConfig::parse(good));

  REQUIRE_CONFIG_ERROR(KernelConfig::parse("flash_fwd_sm80_f16_d128_m128n64_w4s2_causal_none"),
                       "must start with 'ftattn_fwd_'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("flash_fwd_sm80_f16_d128_m128n64_w4s2_causal_none"),
                       "'flash_fwd_sm80");  // quotes the name
  REQUIRE_CONFIG_ERROR(KernelConfig::parse(""), "must start with");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_bwd_sm80_f16_d128_m128n64_w4s2_causal_none"),
                       "must start with");

  // Arch.
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm81_f16_d128_m128n64_w4s2_causal_none"),
                       "unsupported arch 'sm81'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80a_f16_d128_m128n64_w4s2_causal_none"),
                       "the 'a' suffix");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm_80_f16_d128_m128n64_w4s2_causal_none"),
                       "bad arch 'sm'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_80_f16_d128_m128n64_w4s2_causal_none"),
                       "bad arch '80'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm080_f16_d128_m128n64_w4s2_causal_none"),
                       "bad arch 'sm080'");

  // Enums.
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_fp32_d128_m128n64_w4s2_causal_none"),
                       "unknown precision 'fp32'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_fp32_d128_m128n64_w4s2_causal_none"),
                       "bad kernel name 'ftattn_fwd_sm80_fp32");
  // The user spelling splits into two fields; only the '-' token is canonical.
  REQUIRE_CONFIG_ERROR(
      KernelConfig::parse("ftattn_fwd_sm80_f16_pasa_d128_m128n64_w4s2_causal_none"),
      "malformed head_dim field 'pasa'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_d128_m128n64_w4s2_sliding_none"),
                       "unknown mask 'sliding'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_d128_m128n64_w4s2_causal_abft"),
                       "unknown protection 'abft'");

  // Numeric fields.
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_h128_m128n64_w4s2_causal_none"),
                       "malformed head_dim field 'h128'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_d_m128n64_w4s2_causal_none"),
                       "malformed head_dim field 'd'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_d0_m128n64_w4s2_causal_none"),
                       "malformed head_dim field 'd0'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_d+128_m128n64_w4s2_causal_none"),
                       "'d+128'");
  REQUIRE_CONFIG_ERROR(
      KernelConfig::parse("ftattn_fwd_sm80_f16_d99999999999_m128n64_w4s2_causal_none"),
      "'d99999999999'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_d128_m128x64_w4s2_causal_none"),
                       "malformed tile field 'm128x64'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_d128_m128_w4s2_causal_none"),
                       "malformed tile field 'm128'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_d128_mn64_w4s2_causal_none"),
                       "malformed tile field 'mn64'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_d128_m128n64_w4_causal_none"),
                       "malformed warps/stages field 'w4'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_d128_m128n64_s2w4_causal_none"),
                       "malformed warps/stages field 's2w4'");

  // Missing fields.
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_"), "missing the arch field");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_d128"), "missing the tile");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_d128_m128n64_w4s2_causal"),
                       "missing the protection field");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse("ftattn_fwd_sm80_f16_d128_m128n64_w4s2_causal_"),
                       "unknown protection ''");

  // Trailing junk.
  REQUIRE_CONFIG_ERROR(KernelConfig::parse(good + "_x"), "trailing junk '_x'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse(good + "_"), "trailing junk '_'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse(good + "_none_none"), "trailing junk '_none_none'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse(good + "x"), "unknown protection 'nonex'");
  REQUIRE_CONFIG_ERROR(KernelConfig::parse(good + " "), "unknown protection 'none '");
}

TEST_CASE("config: name on an incomplete config says what is open", "[config]") {
  KernelConfig c;
  c.head_dim = 128;
  REQUIRE_CONFIG_ERROR(c.name(), "block_m, block_n, num_warps, num_stages, arch");
  REQUIRE_CONFIG_ERROR(c.name(), "Runtime::resolve or with_defaults");
  REQUIRE_CONFIG_ERROR(c.symbol(), "incomplete");

  c = make(128, 128, 64, 4, 2, Precision::f16, Mask::none, Arch{});
  CHECK_FALSE(c.is_complete());
  REQUIRE_CONFIG_ERROR(c.name(), "arch");
  c.arch = kSm80;
  CHECK(c.is_complete());
  CHECK_NOTHROW(c.name());
  c.num_stages = 0;
  CHECK_FALSE(c.is_complete());
  REQUIRE_CONFIG_ERROR(c.name(), "num_stages");
  c.num_stages = -1;
  CHECK_FALSE(c.is_complete());
  REQUIRE_CONFIG_ERROR(c.name(), "num_stages is -1");
}

TEST_CASE("config: shared_memory_bytes", "[config]") {
  // (block_m + 2 * num_stages * block_n) * (head_dim + 8) * element bytes.
  CHECK(make(128, 128, 64, 4, 2, Precision::f16, Mask::none, kSm80).shared_memory_bytes() ==
        (128 + 2 * 2 * 64) * (128 + 8) * 2);
  CHECK(make(64, 64, 64, 4, 3, Precision::bf16, Mask::none, kSm80).shared_memory_bytes() ==
        (64 + 2 * 3 * 64) * (64 + 8) * 2);
  // f16_pasa: one more row per K stage, the block's shift vector.
  CHECK(make(256, 64, 64, 4, 1, Precision::f16_pasa, Mask::none, kSm80).shared_memory_bytes() ==
        (64 + 2 * 64 + 1) * (256 + 8) * 2);
  // 8-bit (Q8Traits): Q and K rows of head_dim + 16 bytes, a float per key, V^T rows of
  // block_n + 16 bytes; at least block_m rows of 2 * head_dim + 16 bytes for the epilogue.
  CHECK(make(128, 128, 64, 4, 2, Precision::int8, Mask::none, kSm80).shared_memory_bytes() ==
        128 * 144 + 2 * (64 * 148 + 128 * 80));
  CHECK(make(128, 128, 64, 4, 2, Precision::fp8_e4m3, Mask::none, kSm80).shared_memory_bytes() ==
        128 * 144 + 2 * (64 * 148 + 128 * 80));
  CHECK(make(256, 128, 32, 8, 1, Precision::int8, Mask::none, kSm80).shared_memory_bytes() ==
        128 * (2 * 256 + 16));  // the 16-bit O staging is the larger
  REQUIRE_CONFIG_ERROR(
      make(128, 0, 64, 4, 2, Precision::f16, Mask::none, kSm80).shared_memory_bytes(),
      "shared_memory_bytes");
}

TEST_CASE("config: Problem dense strides", "[config]") {
  const Problem p = Problem::bhsd(2, 8, 2, 100, 300, 64);
  CHECK(p.batch == 2);
  CHECK(p.heads_q == 8);
  CHECK(p.heads_kv == 2);
  CHECK(p.seqlen_q == 100);
  CHECK(p.seqlen_k == 300);
  CHECK(p.head_dim == 64);
  CHECK(p.q.batch == 8 * 100 * 64);
  CHECK(p.q.head == 100 * 64);
  CHECK(p.q.seq == 64);
  CHECK(p.k.batch == 2 * 300 * 64);
  CHECK(p.k.head == 300 * 64);
  CHECK(p.k.seq == 64);
  CHECK(p.v.batch == p.k.batch);
  CHECK(p.v.head == p.k.head);
  CHECK(p.v.seq == p.k.seq);
  CHECK(p.o.batch == p.q.batch);
  CHECK(p.o.head == p.q.head);
  CHECK(p.o.seq == p.q.seq);

  const Problem s = Problem::bshd(2, 8, 2, 100, 300, 64);
  CHECK(s.q.batch == 100 * 8 * 64);
  CHECK(s.q.head == 64);
  CHECK(s.q.seq == 8 * 64);
  CHECK(s.k.batch == 300 * 2 * 64);
  CHECK(s.k.head == 64);
  CHECK(s.k.seq == 2 * 64);
  CHECK(s.v.batch == s.k.batch);
  CHECK(s.v.seq == s.k.seq);
  CHECK(s.o.batch == s.q.batch);
  CHECK(s.o.head == s.q.head);
  CHECK(s.o.seq == s.q.seq);

  // Strides are 64-bit: a large dense tensor must not wrap.
  const Problem big = Problem::bhsd(1, 64, 64, 1 << 20, 1 << 20, 256);
  CHECK(big.q.batch == int64_t{64} * (1 << 20) * 256);
}

TEST_CASE("config: Problem scale", "[config]") {
  Problem p = Problem::bhsd(1, 1, 1, 16, 16, 64);
  CHECK(p.scale() == Approx(0.125f));
  p.softmax_scale = 0.5f;
  CHECK(p.scale() == 0.5f);
  p = Problem::bhsd(1, 1, 1, 16, 16, 128);
  CHECK(p.scale() == Approx(1.0 / std::sqrt(128.0)));
}

TEST_CASE("config: Problem flops", "[config]") {
  const Problem p = Problem::bhsd(3, 4, 2, 100, 300, 64);
  const double per_pair = 4.0 * 3 * 4 * 64;
  CHECK(p.flops(Mask::none) == per_pair * 100 * 300);
  // seqlen_q < seqlen_k: every query sees its prefix plus the 200 extra keys.
  CHECK(p.flops(Mask::causal) == per_pair * double(causal_pairs_brute(100, 300)));

  // Square: half plus the diagonal.
  const Problem sq = Problem::bhsd(1, 1, 1, 7, 7, 32);
  CHECK(causal_pairs_brute(7, 7) == 7 * 8 / 2);
  CHECK(sq.flops(Mask::causal) == 4.0 * 32 * (7 * 8 / 2));

  // Brute force over small shapes, both seqlen_q < seqlen_k and seqlen_q > seqlen_k.
  for (int q = 1; q <= 12; ++q) {
    for (int k = 1; k <= 12; ++k) {
      const Problem t = Problem::bhsd(2, 3, 1, q, k, 64);
      INFO("seqlen_q " << q << " seqlen_k " << k);
      CHECK(t.flops(Mask::causal) == 4.0 * 2 * 3 * 64 * double(causal_pairs_brute(q, k)));
      CHECK(t.flops(Mask::none) == 4.0 * 2 * 3 * 64 * q * k);
    }
  }
  // seqlen_q much larger than seqlen_k: the first rows see nothing.
  CHECK(Problem::bhsd(1, 1, 1, 50, 3, 64).flops(Mask::causal) ==
        4.0 * 64 * double(causal_pairs_brute(50, 3)));
  CHECK(causal_pairs_brute(50, 3) == 6);

  // Large square: closed form n(n+1)/2 without overflow.
  const int64_t n = int64_t{1} << 30;
  const Problem large = Problem::bhsd(1, 1, 1, int(n), int(n), 1);
  CHECK(large.flops(Mask::causal) == 4.0 * double(n) * double(n + 1) / 2);
}

TEST_CASE("config: hash", "[config]") {
  const std::hash<KernelConfig> h;
  KernelConfig a = make(128, 128, 64, 4, 2, Precision::f16, Mask::causal, kSm80);
  KernelConfig b = KernelConfig::parse(a.name());
  REQUIRE(a == b);
  CHECK(h(a) == h(b));

  // Each field must reach the hash.
  std::vector<KernelConfig> variants(10, a);
  variants[0].head_dim = 64;
  variants[1].block_m = 64;
  variants[2].block_n = 128;
  variants[3].num_warps = 8;
  variants[4].num_stages = 3;
  variants[5].precision = Precision::bf16;
  variants[6].protection = Protection::efta_detect;
  variants[7].mask = Mask::none;
  variants[8].arch = Arch{86, false};
  variants[9].arch = Arch{80, true};
  for (const KernelConfig& v : variants) {
    CHECK_FALSE(v == a);
    CHECK(h(v) != h(a));
  }

  // No collisions over the whole test grid (valid or not).
  std::vector<KernelConfig> configs = all_configs(false);
  std::unordered_set<size_t> hashes;
  for (const KernelConfig& c : configs) hashes.insert(h(c));
  CHECK(hashes.size() == configs.size());
  std::unordered_set<KernelConfig> set(configs.begin(), configs.end());
  CHECK(set.size() == configs.size());
}
