// The 8-bit operand layout, E4M3 rounding and the host model of the int8 / fp8_e4m3 kernels'
// numerics: the error each precision must show against the FP64 reference, which the GPU tests'
// tolerances are derived from.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <set>

#include "ftattn/accuracy.hpp"
#include "ftattn/quantize.hpp"
#include "ftattn/quantize_model.hpp"
#include "ftattn/reference.hpp"

using namespace ftattn;

TEST_CASE("V^T key permutation matches the m16n8k32 A fragment of P", "[quantize]") {
  std::set<int> positions;
  for (int k = 0; k < 16; ++k) positions.insert(quant_model::permuted_key(k));
  CHECK(positions.size() == 16);
  CHECK(*positions.rbegin() == 15);
  // Thread t of a quad holds keys 2t, 2t+1 of the first two n8 score tiles (c0, c1); the A
  // fragment's register 0 is k = 4t..4t+3. Byte 4t+i of the group must then hold those keys.
  for (int t = 0; t < 4; ++t) {
    const int keys[4] = {2 * t, 2 * t + 1, 8 + 2 * t, 9 + 2 * t};
    for (int i = 0; i < 4; ++i) CHECK(quant_model::permuted_key(keys[i]) == 4 * t + i);
  }
}

TEST_CASE("E4M3 rounding: grid, ties to even, saturation, subnormals", "[quantize]") {
  CHECK(quant_model::round_e4m3(1.0f) == 1.0f);
  CHECK(quant_model::round_e4m3(1.0625f) == 1.0f);   // tie between 1 and 1.125: even
  CHECK(quant_model::round_e4m3(1.1875f) == 1.25f);  // tie between 1.125 and 1.25: even
  CHECK(quant_model::round_e4m3(-3.3f) == -3.25f);
  CHECK(quant_model::round_e4m3(448.0f) == 448.0f);
  CHECK(quant_model::round_e4m3(1000.0f) == 448.0f);                             // satfinite
  CHECK(quant_model::round_e4m3(std::ldexp(1.0f, -9)) == std::ldexp(1.0f, -9));  // smallest
  CHECK(quant_model::round_e4m3(std::ldexp(1.0f, -11)) == 0.0f);
  CHECK(quant_model::round_e4m3(0.0f) == 0.0f);
  CHECK(quant_model::quantize_value(127.6f, Precision::int8) == 127.0f);
  CHECK(quant_model::quantize_value(-2.5f, Precision::int8) == -2.0f);
  CHECK_THROWS_AS(quant_model::range(Precision::f16), ConfigError);
}

TEST_CASE("quantised layout: parts aligned, sized for the problem", "[quantize]") {
  const Problem pr = Problem::bhsd(2, 8, 2, 100, 1000, 64);
  const QuantizedLayout l = QuantizedLayout::of(pr);
  CHECK(l.keys_padded == 1008);
  for (size_t off : {l.q, l.k, l.v, l.q_scale, l.k_scale, l.v_scale}) CHECK(off % 256 == 0);
  CHECK(l.q == 0);
  CHECK(l.k >= 2u * 8 * 100 * 64);
  CHECK(l.v - l.k >= 2u * 2 * 1000 * 64);
  CHECK(l.q_scale - l.v >= 2u * 2 * 64 * 1008);
  CHECK(l.k_scale - l.q_scale >= 4u * 2 * 8 * 100);
  CHECK(l.v_scale - l.k_scale >= 4u * 2 * 2 * 1008);
  CHECK(l.bytes >= l.v_scale + 4u * 2 * 2 * 64);
  std::vector<char> ws(l.bytes);
  const QuantizedInputs in = QuantizedInputs::in(ws.data(), l);
  CHECK(static_cast<const char*>(in.v) == ws.data() + l.v);
  CHECK(reinterpret_cast<const char*>(in.k_scale) == ws.data() + l.k_scale);
}

namespace {

// The host model's output against FP64 attention on the same 16-bit inputs.
accuracy::Metrics model_error(Precision p, Mask mask, float stddev, float mean, int block_n,
                              bool lazy_int8 = false) {
  const Problem pr = Problem::bhsd(1, 2, 1, 64, 512, 64);
  std::mt19937_64 rng(7);
  auto make = [&](int heads, int seqlen, Strides s) {
    reference::Tensor16 t =
        reference::random_tensor(rng, Precision::f16, s, 1, heads, seqlen, 64, stddev);
    for (auto& x : t.data)
      x = reference::to_bits(reference::from_bits(x, Precision::f16) + mean, Precision::f16);
    return t;
  };
  const auto q = make(2, 64, pr.q), k = make(1, 512, pr.k), v = make(1, 512, pr.v);
  std::vector<double> gold, got;
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < 64; ++r) {
      auto g = reference::attention_row(pr, Precision::f16, mask, q, k, v, 0, h, r);
      auto m = quant_model::attention_row(pr, p, mask, block_n, q, k, v, 0, h, r, lazy_int8);
      gold.insert(gold.end(), g.begin(), g.end());
      got.insert(got.end(), m.begin(), m.end());
    }
  return accuracy::compare(gold, got);
}

}  // namespace

TEST_CASE("8-bit numerics: the error each precision must show on the GPU", "[quantize]") {
  // N(0, 1) inputs (INT-FlashAttention's Table 1 distribution) and U(0, 1)-like positive inputs.
  for (Mask mask : {Mask::none, Mask::causal}) {
    const accuracy::Metrics i8 = model_error(Precision::int8, mask, 1.0f, 0.0f, 64);
    const accuracy::Metrics f8 = model_error(Precision::fp8_e4m3, mask, 1.0f, 0.0f, 64);
    INFO("int8: " << i8.summary());
    INFO("fp8:  " << f8.summary());
    // INT8: Q/K steps of max/127 (about 0.4% of a row's range), P steps of 1/127 of the block
    // max, V per channel: a few 1e-2 relative. E4M3 keeps 3 mantissa bits (2^-4 relative).
    CHECK(i8.rel_l2 < 3e-2);
    CHECK(f8.rel_l2 < 6e-2);
    CHECK(i8.rel_l2 > 1e-4);  // the model does quantise
    CHECK(i8.cosine > 0.999);
    CHECK(f8.cosine > 0.998);
  }
  // Block size changes which P values are rounded against which max, not the error's size.
  const double a = model_error(Precision::int8, Mask::none, 1.0f, 0.0f, 32).rel_l2;
  const double b = model_error(Precision::int8, Mask::none, 1.0f, 0.0f, 128).rel_l2;
  CHECK(std::abs(a - b) < 0.5 * std::max(a, b));
}

TEST_CASE("int8's lazy softmax numerics: no less accurate than the eager ones", "[quantize]") {
  // The wgmma kernels' P: round(255 2^(x - ref)) against a whole-number reference at or above
  // the running max (one bit more than round(127 2^(x - max)) at the block that moves it, up to
  // two between), so its error against FP64 is at most the eager model's and still nonzero.
  for (Mask mask : {Mask::none, Mask::causal})
    for (int block_n : {64, 128}) {
      const accuracy::Metrics eager = model_error(Precision::int8, mask, 1.0f, 0.0f, block_n);
      const accuracy::Metrics lazy =
          model_error(Precision::int8, mask, 1.0f, 0.0f, block_n, /*lazy_int8=*/true);
      INFO("eager: " << eager.summary() << " | lazy: " << lazy.summary());
      CHECK(lazy.rel_l2 <= eager.rel_l2);
      CHECK(lazy.rel_l2 > 1e-4);
      CHECK(lazy.cosine > 0.999);
    }
  // The flag is int8's: fp8's model ignores it.
  const double f8 = model_error(Precision::fp8_e4m3, Mask::none, 1.0f, 0.0f, 64).rel_l2;
  CHECK(model_error(Precision::fp8_e4m3, Mask::none, 1.0f, 0.0f, 64, true).rel_l2 == f8);
}

TEST_CASE("the 8-bit host model refuses a mask it does not model", "[quantize]") {
  // It takes no block mask, so a block-sparse row read as dense.
  const Problem pr = Problem::bhsd(1, 1, 1, 16, 16, 64);
  std::mt19937_64 rng(3);
  const auto t = reference::random_tensor(rng, Precision::f16, pr.q, 1, 1, 16, 64);
  CHECK_THROWS_AS(quant_model::attention_row(pr, Precision::int8, Mask::block_sparse, 64, t, t, t,
                                             0, 0, 0, false),
                  ConfigError);
  CHECK(quant_model::attention_row(pr, Precision::int8, Mask::causal, 64, t, t, t, 0, 0, 3, false)
            .size() == 64);
}
