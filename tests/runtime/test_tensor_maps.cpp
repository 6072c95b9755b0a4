#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "ftattn/config.hpp"
#include "ftattn/errors.hpp"
#include "runtime/tensor_maps.hpp"
#include "tests/support/configs.hpp"

using namespace ftattn;
using ftattn::test::default_config;

namespace {

const Arch kSm89{89, false}, kSm90a{90, true};

// K and V of `batch` x `heads_kv` KV heads of `seqlen_k` keys at fake 256-byte aligned addresses
// (the checks below run before any driver call); strides left to the caller.
AttentionParams kv_operands(int batch, int heads_kv, int seqlen_k, std::uintptr_t k,
                            std::uintptr_t v) {
  AttentionParams p{};
  p.batch = batch;
  p.heads_kv = heads_kv;
  p.seqlen_k = seqlen_k;
  p.k = reinterpret_cast<const void*>(k);
  p.v = reinterpret_cast<const void*>(v);
  return p;
}

// Dense 8-bit operands for 1 x 2 KV heads of 100 keys at head dim 128 (keys_padded 112).
AttentionParams dense_q8_params() {
  AttentionParams p = kv_operands(1, 2, 100, 0x10000, 0x20000);
  p.k_scale = reinterpret_cast<const float*>(0x30000);
  p.k_seq_stride = 128;
  p.k_head_stride = 100 * 128;
  p.k_batch_stride = 2 * p.k_head_stride;
  p.v_seq_stride = 112;
  p.v_head_stride = 128 * 112;
  p.v_batch_stride = 2 * p.v_head_stride;
  return p;
}

// 16-bit K and V in the bshd layout (seq stride heads x head_dim) for 2 x 4 KV heads of 300 keys
// at head dim 128.
AttentionParams bshd_16bit_params() {
  AttentionParams p = kv_operands(2, 4, 300, 0x100000, 0x200000);
  for (long long* s : {&p.k_seq_stride, &p.v_seq_stride}) *s = 4 * 128;
  for (long long* s : {&p.k_head_stride, &p.v_head_stride}) *s = 128;
  for (long long* s : {&p.k_batch_stride, &p.v_batch_stride}) *s = 300 * 4 * 128;
  return p;
}

}  // namespace

TEST_CASE(
    "TMA tensor maps of the 16-bit wgmma kernels: which kernels take them, and operands "
    "they cannot copy are refused",
    "[runtime][ws]") {
  const KernelConfig c = default_config(128, Precision::f16, Mask::none, kSm90a);
  REQUIRE(warp_specialized(c));
  CHECK(kv_tensor_maps(c));
  CHECK(kv_tensor_maps(default_config(128, Precision::f16_pasa, Mask::causal, kSm90a)));
  CHECK(kv_tensor_maps(default_config(256, Precision::bf16, Mask::none, kSm90a)));
  // Every checksum scheme on the warp-specialised kernel (its rows and chunks beside by
  // cp.async).
  CHECK(kv_tensor_maps(
      default_config(128, Precision::f16, Mask::none, kSm90a, Protection::efta_correct)));
  // The one-warpgroup kernel, unprotected (head dim 64's defaults, f16_pasa's too): its stage
  // mbarriers take no shared memory at two stages, and its three CTAs per SM stay.
  for (Precision p : {Precision::f16, Precision::f16_pasa}) {
    const KernelConfig one = default_config(64, p, Mask::causal, kSm90a);
    REQUIRE_FALSE(warp_specialized(one));
    CHECK(uses_wgmma(one));
    CHECK(kv_tensor_maps(one));
    CHECK(one.shared_memory_bytes() == (p == Precision::f16 ? 74752 : 76800));
  }
  // Three stages take 64 bytes more, where that costs no CTA per SM: 64 x 64 at head dim 64
  // (3 CTAs), not at 128 (two CTAs of 115,712 bytes fit, with 64 more only one).
  const KernelConfig three64 = test::tile_config(64, 64, 64, 4, 3, kSm90a);
  CHECK(kv_tensor_maps(three64));
  CHECK(three64.shared_memory_bytes() == 57344 + 64 + 1024);
  const KernelConfig three128 = test::tile_config(128, 64, 64, 4, 3, kSm90a);
  CHECK_FALSE(kv_tensor_maps(three128));
  CHECK(three128.shared_memory_bytes() == 114688 + 1024);
  // Not: the one-warpgroup kernel with a checksum scheme or injection sites, the mma.sync
  // skeleton, the 8-bit kernels.
  CHECK_FALSE(kv_tensor_maps(test::tile_config(64, 64, 128, 4, 2, kSm90a, Precision::f16,
                                               Mask::none, Protection::flash_abft)));
  KernelConfig injected = default_config(64, Precision::f16, Mask::none, kSm90a);
  injected.fault_injection = true;
  CHECK_FALSE(kv_tensor_maps(injected));
  CHECK_FALSE(kv_tensor_maps(default_config(128, Precision::f16, Mask::none, kSm89)));
  CHECK_FALSE(kv_tensor_maps(default_config(128, Precision::int8, Mask::none, kSm90a)));
  SECTION("a broadcast head stride") {
    AttentionParams p = bshd_16bit_params();
    p.v_head_stride = 0;
    CHECK_THROWS_AS(runtime::encode_kv_tensor_maps(c, p), ConfigError);
    CHECK_THROWS_WITH(runtime::encode_kv_tensor_maps(c, p),
                      Catch::Matchers::Contains("V starts at") &&
                          Catch::Matchers::Contains("0, 307200") &&
                          Catch::Matchers::Contains("not a broadcast one"));
  }
  SECTION("K off 16 bytes") {
    AttentionParams p = bshd_16bit_params();
    p.k = reinterpret_cast<const void*>(0x100008);
    CHECK_THROWS_WITH(runtime::encode_kv_tensor_maps(c, p),
                      Catch::Matchers::Contains("K starts at") &&
                          Catch::Matchers::Contains("16-byte aligned start"));
  }
}

TEST_CASE("TMA tensor maps of the 8-bit Hopper kernel: operands it cannot copy are refused",
          "[runtime][q8]") {
  const KernelConfig c = default_config(128, Precision::fp8_e4m3, Mask::none, kSm90a);
  REQUIRE(q8_tensor_maps(c));
  SECTION("K must start on 16 bytes") {
    AttentionParams p = dense_q8_params();
    p.k = reinterpret_cast<const void*>(0x10008);
    CHECK_THROWS_AS(runtime::encode_q8_tensor_maps(c, p), ConfigError);
    CHECK_THROWS_WITH(
        runtime::encode_q8_tensor_maps(c, p),
        Catch::Matchers::Contains("8-bit K") && Catch::Matchers::Contains("16-byte aligned"));
  }
  SECTION("V^T's rows must be multiples of 16 bytes apart") {
    AttentionParams p = dense_q8_params();
    p.v_seq_stride = 104;
    p.v_head_stride = 128 * 104;
    p.v_batch_stride = 2 * p.v_head_stride;
    CHECK_THROWS_AS(runtime::encode_q8_tensor_maps(c, p), ConfigError);
    CHECK_THROWS_WITH(runtime::encode_q8_tensor_maps(c, p),
                      Catch::Matchers::Contains("8-bit V^T") && Catch::Matchers::Contains("104"));
  }
  SECTION("the K scales must start on 16 bytes") {
    AttentionParams p = dense_q8_params();
    p.k_scale = reinterpret_cast<const float*>(0x30004);
    CHECK_THROWS_AS(runtime::encode_q8_tensor_maps(c, p), ConfigError);
    CHECK_THROWS_WITH(runtime::encode_q8_tensor_maps(c, p),
                      Catch::Matchers::Contains("8-bit K scales"));
  }
  SECTION("heads must be dense over the batch") {
    AttentionParams p = dense_q8_params();
    p.k_batch_stride += 16;
    CHECK_THROWS_AS(runtime::encode_q8_tensor_maps(c, p), ConfigError);
    CHECK_THROWS_WITH(runtime::encode_q8_tensor_maps(c, p),
                      Catch::Matchers::Contains("dense heads"));
  }
  // The warp-specialised 8-bit kernel (head dim 256) takes them too; the mma.sync one keeps its
  // cp.async copies, and the 16-bit kernels take their own maps (below).
  CHECK(q8_tensor_maps(default_config(256, Precision::int8, Mask::causal, kSm90a)));
  CHECK_FALSE(q8_tensor_maps(default_config(128, Precision::fp8_e4m3, Mask::none, kSm89)));
  CHECK_FALSE(q8_tensor_maps(default_config(128, Precision::f16, Mask::none, kSm90a)));
}
