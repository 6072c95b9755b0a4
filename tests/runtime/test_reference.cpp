// The host reference itself: 16-bit conversions and the masks it applies.
#include <catch2/catch.hpp>
#include <cmath>

#include "ftattn/reference.hpp"

using namespace ftattn;

TEST_CASE("16-bit conversions round to nearest even and keep specials", "[reference]") {
  for (Precision p : {Precision::f16, Precision::bf16}) {
    for (float x : {0.0f, 1.0f, -2.5f, 0.333333f, 1e-3f, 100.0f})
      CHECK(std::abs(reference::from_bits(reference::to_bits(x, p), p) - x) <=
            std::abs(x) * (p == Precision::f16 ? 1e-3f : 8e-3f));
    CHECK(std::isnan(reference::from_bits(reference::to_bits(NAN, p), p)));
    CHECK(std::isinf(reference::from_bits(reference::to_bits(INFINITY, p), p)));
  }
  CHECK(reference::to_bits(1.0f, Precision::f16) == 0x3c00);
  CHECK(reference::to_bits(65520.0f, Precision::f16) == 0x7c00);  // rounds past the largest half
  CHECK(reference::to_bits(1.0f, Precision::bf16) == 0x3f80);
  CHECK(reference::to_bits(1.00390625f, Precision::bf16) == 0x3f80);             // tie: to even
  CHECK(reference::from_bits(0x0001, Precision::f16) == std::ldexp(1.0f, -24));  // subnormal
}

TEST_CASE("reference block-sparse rows equal dense rows over the kept keys", "[reference]") {
  const Precision p = Precision::f16;
  Problem sparse = Problem::bhsd(1, 1, 1, 64, 256, 32);
  sparse.sparse_block_m = 32;
  sparse.sparse_block_n = 64;
  std::mt19937_64 rng(5);
  auto q = reference::random_tensor(rng, p, sparse.q, 1, 1, 64, 32);
  auto k = reference::random_tensor(rng, p, sparse.k, 1, 1, 256, 32);
  auto v = reference::random_tensor(rng, p, sparse.v, 1, 1, 256, 32);

  // Keep only the first key block for query block 0: the same as attention over 64 keys.
  std::vector<uint8_t> mask(sparse.block_mask_bytes(), 1);
  for (int kb = 1; kb < sparse.block_mask_k_blocks(); ++kb) mask[kb] = 0;
  Problem dense64 = Problem::bhsd(1, 1, 1, 64, 64, 32);
  dense64.k = sparse.k;
  dense64.v = sparse.v;
  for (int row : {0, 17, 31}) {
    double lse_sparse = 0, lse_dense = 0;
    const auto a = reference::attention_row(sparse, p, Mask::block_sparse, q, k, v, 0, 0, row,
                                            &lse_sparse, mask.data());
    const auto b = reference::attention_row(dense64, p, Mask::none, q, k, v, 0, 0, row, &lse_dense);
    for (int x = 0; x < 32; ++x) CHECK(a[x] == Approx(b[x]).margin(1e-12));
    CHECK(lse_sparse == Approx(lse_dense));
  }
  // Query block 1 keeps everything: the dense answer over all 256 keys.
  Problem dense256 = Problem::bhsd(1, 1, 1, 64, 256, 32);
  const auto a = reference::attention_row(sparse, p, Mask::block_sparse, q, k, v, 0, 0, 40, nullptr,
                                          mask.data());
  const auto b = reference::attention_row(dense256, p, Mask::none, q, k, v, 0, 0, 40);
  for (int x = 0; x < 32; ++x) CHECK(a[x] == Approx(b[x]).margin(1e-12));
  // A row whose blocks are all dropped gives zeros and lse -inf.
  std::fill(mask.begin(), mask.begin() + sparse.block_mask_k_blocks(), 0);
  double lse = 0;
  const auto z =
      reference::attention_row(sparse, p, Mask::block_sparse, q, k, v, 0, 0, 3, &lse, mask.data());
  for (double x : z) CHECK(x == 0.0);
  CHECK(std::isinf(lse));
  CHECK(lse < 0);
}

TEST_CASE("reference causal rows are aligned bottom-right", "[reference]") {
  const Precision p = Precision::bf16;
  Problem pr = Problem::bhsd(1, 1, 1, 4, 10, 16);
  std::mt19937_64 rng(9);
  auto q = reference::random_tensor(rng, p, pr.q, 1, 1, 4, 16);
  auto k = reference::random_tensor(rng, p, pr.k, 1, 1, 10, 16);
  auto v = reference::random_tensor(rng, p, pr.v, 1, 1, 10, 16);
  // The last query row sees every key; row 0 sees keys 0..6.
  const auto last = reference::attention_row(pr, p, Mask::causal, q, k, v, 0, 0, 3);
  const auto full = reference::attention_row(pr, p, Mask::none, q, k, v, 0, 0, 3);
  for (int x = 0; x < 16; ++x) CHECK(last[x] == Approx(full[x]));
  Problem seven = Problem::bhsd(1, 1, 1, 4, 7, 16);
  seven.k = pr.k;
  seven.v = pr.v;
  const auto first = reference::attention_row(pr, p, Mask::causal, q, k, v, 0, 0, 0);
  const auto first7 = reference::attention_row(seven, p, Mask::none, q, k, v, 0, 0, 0);
  for (int x = 0; x < 16; ++x) CHECK(first[x] == Approx(first7[x]));
}
