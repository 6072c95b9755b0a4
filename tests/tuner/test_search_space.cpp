// The tuner's search space: enumeration, and pruning before and after compiling with reasons.
#include <catch2/catch.hpp>
#include <set>

#include "ftattn/errors.hpp"
#include "ftattn/tuner.hpp"

using namespace ftattn;
using namespace ftattn::tuner;

TEST_CASE("enumerate keeps exactly the configs validate accepts", "[tuner]") {
  const Family f{Arch{90, true}, Precision::f16, Protection::none, 128, Mask::causal};
  const Pruned p = enumerate(f);
  const Knobs k;
  // The grid, and on sm_90a the three-consumer rows (192, 12) with every block_n and stage count.
  CHECK(p.kept.size() + p.rejected.size() ==
        (k.block_m.size() * k.num_warps.size() + 1) * k.block_n.size() * k.num_stages.size());
  REQUIRE_FALSE(p.kept.empty());
  std::set<std::string> names;
  for (const auto& c : p.kept) {
    CHECK_NOTHROW(validate(c));
    CHECK(c.head_dim == 128);
    CHECK(c.mask == Mask::causal);
    names.insert(c.name());
  }
  CHECK(names.size() == p.kept.size());  // no duplicates
  for (const auto& r : p.rejected) {
    CHECK_THROWS_AS(validate(r.config), ConfigError);
    CHECK_FALSE(r.reason.empty());
  }
  // 64 x 32 with 8 warps cannot tile (block_m must be a multiple of 16 * warps).
  bool found = false;
  for (const auto& r : p.rejected)
    if (r.config.block_m == 64 && r.config.num_warps == 8) {
      found = true;
      CHECK(r.reason.find("block_m") != std::string::npos);
    }
  CHECK(found);
  // The heuristic default is in the space, so tuning can only match or beat it.
  const KernelConfig d = with_defaults(KernelConfig{.head_dim = 128, .mask = Mask::causal}, f.arch);
  CHECK(names.count(d.name()) == 1);
}

TEST_CASE("enumerate: the 16-bit precisions on sm_90a also try three consumer warpgroups",
          "[tuner]") {
  for (Precision prec : {Precision::f16_pasa, Precision::f16, Precision::bf16})
    for (int d : {64, 128})
      for (Mask m : {Mask::none, Mask::causal}) {
        const Family f{Arch{90, true}, prec, Protection::none, d, m};
        const Pruned p = enumerate(f);
        std::set<std::string> names;
        for (const auto& c : p.kept) names.insert(c.name());
        const KernelConfig d_config =
            with_defaults(KernelConfig{.head_dim = d, .precision = prec, .mask = m}, f.arch);
        CHECK(names.count(d_config.name()) == 1);  // the default is in the space
        bool three = false;
        for (const auto& c : p.kept) three |= c.num_warps == 12 && c.block_m == 192;
        CHECK(three);
      }
  // Not for 8-bit precisions or other arches; kept only where validate() takes them (f16 with
  // Flash-ABFT: kept; with EFTA: rejected).
  for (const Family& f :
       {Family{Arch{90, true}, Precision::int8, Protection::none, 128, Mask::none},
        Family{Arch{80, false}, Precision::f16_pasa, Protection::none, 128, Mask::none}}) {
    const Pruned p = enumerate(f);
    for (const auto& c : p.kept) CHECK(c.num_warps != 12);
    for (const auto& r : p.rejected) CHECK(r.config.num_warps != 12);
  }
  const Pruned abft =
      enumerate(Family{Arch{90, true}, Precision::f16, Protection::flash_abft, 128, Mask::none});
  bool abft_three = false;
  for (const auto& c : abft.kept) abft_three |= c.num_warps == 12 && c.block_m == 192;
  CHECK(abft_three);
  const Pruned efta =
      enumerate(Family{Arch{90, true}, Precision::f16, Protection::efta_detect, 128, Mask::none});
  bool efta_rejected = false;
  for (const auto& c : efta.kept) CHECK(c.num_warps != 12);
  for (const auto& r : efta.rejected) efta_rejected |= r.config.num_warps == 12;
  CHECK(efta_rejected);
}

TEST_CASE("enumerate drops what does not fit a small arch's shared memory", "[tuner]") {
  const Family big{Arch{90, true}, Precision::bf16, Protection::none, 256, Mask::none};
  const Family small{Arch{86, false}, Precision::bf16, Protection::none, 256, Mask::none};
  const Pruned on_big = enumerate(big), on_small = enumerate(small);
  CHECK(on_small.kept.size() < on_big.kept.size());
  bool smem_reason = false;
  for (const auto& r : on_small.rejected)
    smem_reason |= r.reason.find("shared memory") != std::string::npos;
  CHECK(smem_reason);
  for (const auto& c : on_small.kept)
    CHECK(c.shared_memory_bytes() <= max_shared_memory_bytes(small.arch));
}

TEST_CASE("occupancy and spill pruning after compiling", "[tuner]") {
  const SmLimits h100;
  CHECK(ctas_per_sm({255, 0, 128, 70 * 1024}, h100) == 2);   // registers bound: 256 x 128
  CHECK(ctas_per_sm({128, 0, 128, 100 * 1024}, h100) == 2);  // shared memory bound
  CHECK(ctas_per_sm({64, 0, 128, 16 * 1024}, h100) == 8);    // registers: 65536 / (64 * 128)
  CHECK(ctas_per_sm({32, 0, 1024, 0}, h100) == 2);           // threads bound
  CHECK(ctas_per_sm({255, 0, 256, 240 * 1024}, h100) == 0);  // does not fit at all

  KernelConfig a, b, c;
  a.block_m = 1;
  b.block_m = 2;
  c.block_m = 3;
  const Pruned p = prune_compiled(
      {{a, {255, 0, 128, 70000}}, {b, {255, 2048, 128, 70000}}, {c, {255, 0, 256, 240 * 1024}}},
      h100, 512, 1);
  REQUIRE(p.kept.size() == 1);
  CHECK(p.kept[0].block_m == 1);
  REQUIRE(p.rejected.size() == 2);
  CHECK(p.rejected[0].reason.find("spills 2048") != std::string::npos);
  CHECK(p.rejected[1].reason.find("0 CTAs per SM") != std::string::npos);
}
