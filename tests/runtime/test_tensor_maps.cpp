#include <catch2/catch.hpp>
#include <string>

#include "ftattn/config.hpp"
#include "ftattn/errors.hpp"
#include "runtime/tensor_maps.hpp"
#include "tests/support/configs.hpp"

using namespace ftattn;
using ftattn::test::default_config;

namespace {

const Arch kSm89{89, false}, kSm90a{90, true};

// Dense 8-bit operands for 1 x 2 KV heads of 100 keys at head dim 128 (keys_padded 112), at
// 256-byte aligned fake addresses: the checks below run before any driver call.
AttentionParams dense_q8_params() {
  AttentionParams p{};
  p.batch = 1;
  p.heads_kv = 2;
  p.seqlen_k = 100;
  p.k = reinterpret_cast<const void*>(0x10000);
  p.v = reinterpret_cast<const void*>(0x20000);
  p.k_scale = reinterpret_cast<const float*>(0x30000);
  p.k_seq_stride = 128;
  p.k_head_stride = 100 * 128;
  p.k_batch_stride = 2 * p.k_head_stride;
  p.v_seq_stride = 112;
  p.v_head_stride = 128 * 112;
  p.v_batch_stride = 2 * p.v_head_stride;
  return p;
}

}  // namespace

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
  // The warp-specialised 8-bit kernel (head dim 256) takes them too; the mma.sync one and the
  // 16-bit kernels keep their cp.async copies.
  CHECK(q8_tensor_maps(default_config(256, Precision::int8, Mask::causal, kSm90a)));
  CHECK_FALSE(q8_tensor_maps(default_config(128, Precision::fp8_e4m3, Mask::none, kSm89)));
  CHECK_FALSE(q8_tensor_maps(default_config(128, Precision::f16, Mask::none, kSm90a)));
}
