// The host reference itself: 16-bit conversions and the masks it applies.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

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

namespace {

// The reference's own output (rounded to the type) and LSE for every row of `pr`: what a
// correct kernel writes.
struct Exact {
  reference::Tensor16 o;
  std::vector<float> lse;
};
Exact exact_outputs(const Problem& pr, Precision p, Mask mask, const reference::Tensor16& q,
                    const reference::Tensor16& k, const reference::Tensor16& v) {
  Exact e;
  e.o.strides = pr.o;
  e.o.data.assign(reference::span_elements(pr.o, pr.batch, pr.heads_q, pr.seqlen_q, pr.head_dim),
                  0);
  for (int b = 0; b < pr.batch; ++b)
    for (int h = 0; h < pr.heads_q; ++h)
      for (int s = 0; s < pr.seqlen_q; ++s) {
        double lse = 0.0;
        const auto row = reference::attention_row(pr, p, mask, q, k, v, b, h, s, &lse);
        for (int x = 0; x < pr.head_dim; ++x)
          e.o.data[pr.o.batch * b + pr.o.head * h + pr.o.seq * s + x] =
              reference::to_bits(static_cast<float>(row[x]), p);
        e.lse.push_back(static_cast<float>(lse));
      }
  return e;
}

}  // namespace

TEST_CASE("reference check: every LSE entry, and a fault confined to one row", "[reference]") {
  const Precision p = Precision::f16;
  // 9 query rows over 6 keys, causal: rows 0-2 see no key (LSE -inf, O 0).
  const Problem pr = Problem::bhsd(1, 4, 4, 9, 6, 32);
  std::mt19937_64 rng(21);
  const auto q = reference::random_tensor(rng, p, pr.q, 1, 4, 9, 32);
  const auto k = reference::random_tensor(rng, p, pr.k, 1, 4, 6, 32);
  const auto v = reference::random_tensor(rng, p, pr.v, 1, 4, 6, 32);
  const Exact good = exact_outputs(pr, p, Mask::causal, q, k, v);
  CHECK(std::isinf(good.lse[0]));
  const auto check = [&](const Exact& e, int rows) {
    return reference::check(pr, p, Mask::causal, q, k, v, e.o, &e.lse, rows, 3);
  };
  CHECK(check(good, 4).passed);
  CHECK(check(good, 0).passed);
  // An LSE entry left at the caller's fill in a row the 4 sampled ones miss: it passed.
  Exact unwritten = good;
  unwritten.lse[2 * 9 + 5] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(check(unwritten, 4).passed);
  CHECK(check(unwritten, 4).bad_lse == 1);
  // -inf where the row sees keys.
  Exact empty = good;
  empty.lse[9 + 7] = -INFINITY;
  CHECK_FALSE(check(empty, 4).passed);
  // One row's output 5% off among 2048: the pooled rel L2 stays under the tolerance.
  const Problem many = Problem::bhsd(1, 1, 1, 2048, 64, 32);
  const auto mq = reference::random_tensor(rng, p, many.q, 1, 1, 2048, 32);
  const auto mk = reference::random_tensor(rng, p, many.k, 1, 1, 64, 32);
  const auto mv = reference::random_tensor(rng, p, many.v, 1, 1, 64, 32);
  Exact one_row = exact_outputs(many, p, Mask::none, mq, mk, mv);
  const auto zeroed = reference::check(many, p, Mask::none, mq, mk, mv, one_row.o, &one_row.lse, 0);
  CHECK(zeroed.passed);
  for (int x = 0; x < 32; ++x) {
    uint16_t& bits = one_row.o.data[many.o.seq * 1000 + x];
    bits = reference::to_bits(0.95f * reference::from_bits(bits, p), p);
  }
  const auto hit = reference::check(many, p, Mask::none, mq, mk, mv, one_row.o, &one_row.lse, 0);
  CHECK(hit.rel_l2_error < 2e-3);  // the pooled figure alone let it through
  CHECK(hit.max_row_error > 0.04);
  CHECK_FALSE(hit.passed);
}

TEST_CASE("reference tolerances: int8's grows with the key count, no row may reach half its norm",
          "[reference]") {
  const auto at = [](Precision p, int keys) {
    return reference::tolerance(p, Problem::bhsd(1, 1, 1, 64, keys, 128));
  };
  // Up to 4k keys the fixed bounds; 16x the keys doubles int8's, and only int8's.
  CHECK(at(Precision::int8, 4096).rel_l2 == 5e-2);
  CHECK(at(Precision::int8, 65536).rel_l2 == Approx(1e-1));
  CHECK(at(Precision::int8, 65536).lse == Approx(2e-1));
  CHECK(at(Precision::int8, 1 << 20).rel_l2 == Approx(2e-1));
  for (Precision p : {Precision::f16, Precision::bf16, Precision::f16_pasa, Precision::fp8_e4m3}) {
    INFO(to_string(p));
    CHECK(at(p, 1 << 20).rel_l2 == at(p, 1024).rel_l2);
    CHECK(at(p, 1 << 20).lse == at(p, 1024).lse);
  }
  CHECK(at(Precision::f16, 2048).row == Approx(2e-2));
  CHECK(at(Precision::bf16, 2048).row == Approx(1e-1));
  // 10x would let a row of zeros (error 1) through fp8 and long int8 runs.
  CHECK(at(Precision::fp8_e4m3, 2048).row == 0.5);
  CHECK(at(Precision::int8, 1 << 20).row == 0.5);
  // In check(): an fp8 output with one row zeroed among 256 kept the pooled figure under 1e-1.
  const Problem pr = Problem::bhsd(1, 1, 1, 256, 64, 32);
  std::mt19937_64 rng(5);
  const Precision f16 = Precision::f16;
  const auto q = reference::random_tensor(rng, f16, pr.q, 1, 1, 256, 32);
  const auto k = reference::random_tensor(rng, f16, pr.k, 1, 1, 64, 32);
  const auto v = reference::random_tensor(rng, f16, pr.v, 1, 1, 64, 32);
  Exact out = exact_outputs(pr, f16, Mask::none, q, k, v);
  CHECK(reference::check(pr, Precision::fp8_e4m3, Mask::none, q, k, v, out.o, nullptr, 0).passed);
  for (int x = 0; x < 32; ++x) out.o.data[pr.o.seq * 100 + x] = reference::to_bits(0.f, f16);
  const auto zero_row =
      reference::check(pr, Precision::fp8_e4m3, Mask::none, q, k, v, out.o, nullptr, 0);
  CHECK(zero_row.rel_l2_error < 1e-1);
  CHECK_FALSE(zero_row.passed);
}
