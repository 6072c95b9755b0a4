// The checksum arithmetic of the protection schemes on small tiles, with the papers' errors
// fixed and pinned (shared/notes/seed-ft.md: 2.4 and 3.x).
#include <algorithm>
#include <array>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "ftattn/pasa.hpp"
#include "ftattn/protect/locate.cuh"
#include "ftattn/protect_model.hpp"
#include "ftattn/quantize_model.hpp"

using namespace ftattn::protect_model;

namespace {

std::vector<double> random_row(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0, 3);
  std::vector<double> row(n);
  for (auto& x : row) x = d(rng);
  return row;
}

}  // namespace

TEST_CASE("tensor checksums are strided by the atom width over block_n columns", "[protect]") {
  std::vector<double> row(64);
  for (int j = 0; j < 64; ++j) row[j] = j;
  const RowChecksums c = encode(row);
  // Residue 3: columns 3, 11, ..., 59 (8 groups, lc = 64/8 - 1 = 7, not head_dim/8 - 1).
  double c1 = 0, c2 = 0;
  for (int l = 0; l < 8; ++l) {
    c1 += 3 + 8 * l;
    c2 += (l + 1) * (3 + 8 * l);
  }
  CHECK(c.c1[3] == c1);
  CHECK(c.c2[3] == c2);
  CHECK_THROWS(encode(std::vector<double>(60)));
}

TEST_CASE("a single error is located at t + 8 (d2/d1 - 1) and corrected", "[protect]") {
  for (int cols : {32, 64, 128})
    for (int col = 0; col < cols; col += 5) {
      auto row = random_row(cols, cols * 1000 + col);
      const auto clean = row;
      const RowChecksums expected = encode(row);
      row[col] += 17.25;  // the fault
      const Repair r = check_and_correct(row, expected, 1e-9);
      INFO("cols " << cols << " col " << col);
      REQUIRE(r.verdict == Verdict::corrected);
      CHECK(r.column == col);
      // The paper's t + 8 d2/d1 would name the next group.
      const int t = col % 8, paper = t + 8 * ((col / 8) + 1);
      CHECK(paper != r.column);
      CHECK(r.magnitude == Approx(-17.25));
      for (int j = 0; j < cols; ++j) CHECK(row[j] == Approx(clean[j]).margin(1e-9));
    }
}

TEST_CASE("clean rows raise no alarm, two errors or a hit checksum are not miscorrected",
          "[protect]") {
  auto row = random_row(64, 1);
  const RowChecksums expected = encode(row);
  CHECK(check_and_correct(row, expected, 1e-9).verdict == Verdict::clean);

  auto two = row;
  two[3] += 5.0;
  two[19] += 7.0;  // same residue 3: d2/d1 = (5*1 + 7*3)/12, no integer
  const auto before = two;
  CHECK(check_and_correct(two, expected, 1e-9).verdict == Verdict::uncorrectable);
  CHECK(two == before);  // nothing touched

  RowChecksums hit = expected;
  hit.c2[5] += 40.0;  // the checksum itself was hit, the data is fine
  auto data = row;
  CHECK(check_and_correct(data, hit, 1e-9).verdict == Verdict::checksum_hit);
  CHECK(data == row);

  // The tolerance is relative: the same data scaled by 1e6 stays clean.
  auto big = row;
  for (auto& x : big) x *= 1e6;
  const RowChecksums big_expected = encode(big);
  for (auto& x : big) x *= (1 + 1e-13);  // rounding-level noise
  CHECK(check_and_correct(big, big_expected, 1e-9).verdict == Verdict::clean);
}

TEST_CASE("Flash-ABFT sees faults on the P V path, not in the scores", "[protect]") {
  const int keys = 40, d = 16;
  const auto scores = random_row(keys, 7);
  const auto values = random_row(keys * d, 8);
  const AbftRow clean = flash_abft_row(scores, values, d);
  CHECK(clean.actual() == Approx(clean.predicted).epsilon(1e-12));

  // A corrupted output accumulator: the output is wrong and the check sees it.
  const AbftRow acc = flash_abft_row(scores, values, d, [](Stage s, int i, double& x) {
    if (s == Stage::output_accumulator && i == 20) x += 3.0;
  });
  CHECK(std::abs(acc.actual() - acc.predicted) > 1e-3);

  // A corrupted score or probability changes output and checksum alike: undetectable, though
  // the output is wrong. Flash-ABFT only covers the P V accumulation.
  const AbftRow bad_score = flash_abft_row(scores, values, d, [](Stage s, int i, double& x) {
    if (s == Stage::score && i == 11) x += 2.0;
  });
  const AbftRow bad_p = flash_abft_row(scores, values, d, [](Stage s, int i, double& x) {
    if (s == Stage::probability && i == 11) x *= 3.0;
  });
  for (const AbftRow* bad : {&bad_score, &bad_p}) {
    double diff = 0;
    for (int x = 0; x < d; ++x) diff = std::max(diff, std::abs(bad->out[x] - clean.out[x]));
    CHECK(diff > 1e-3);                                             // really wrong
    CHECK(bad->actual() == Approx(bad->predicted).epsilon(1e-12));  // and invisible
  }
}

TEST_CASE("int8 Flash-ABFT: channel sums as base-128 int8 digits, exact over the range",
          "[protect][q8]") {
  // Two digits hold 127 * 128 = 16,256 (top digit 127); head dims above 128 need a third.
  CHECK(int8_checksum_digit_count(32) == 2);
  CHECK(int8_checksum_digit_count(128) == 2);
  CHECK(int8_checksum_digit_count(192) == 3);
  CHECK(int8_checksum_digit_count(256) == 3);
  for (int d : {32, 64, 96, 128, 192, 256}) {
    const int count = int8_checksum_digit_count(d);
    for (int c = -127 * d; c <= 127 * d; ++c) {
      const std::vector<int8_t> digits = int8_checksum_digits(c, count);
      REQUIRE(int8_checksum_value(digits) == c);
      for (int i = 0; i + 1 < count; ++i) REQUIRE((digits[i] >= -64 && digits[i] <= 63));
    }
  }
  CHECK_THROWS_AS(int8_checksum_digits(127 * 256, 2), std::invalid_argument);
}

TEST_CASE("int8 Flash-ABFT: the block check is exact modulo 2^32 and sees every flipped bit",
          "[protect][q8]") {
  const uint32_t bias = 0x4B400000u;  // the int8 kernel's accumulator start, 1.5 * 2^23
  std::mt19937_64 rng(3);
  for (int d : {64, 128, 256})
    for (int keys : {64, 128}) {
      INFO("head_dim " << d << ", block_n " << keys);
      // The extremes (P = 127, |v| = 127: the largest sums, wrapping the biased accumulators)
      // and random blocks.
      for (int trial = 0; trial < 4; ++trial) {
        std::vector<uint8_t> p(keys);
        std::vector<int8_t> v(static_cast<size_t>(keys) * d);
        std::uniform_int_distribution<int> pd(0, 127), vd(-127, 127);
        for (auto& x : p) x = static_cast<uint8_t>(trial == 0 ? 127 : pd(rng));
        for (auto& x : v) x = static_cast<int8_t>(trial == 0 ? 127 : trial == 1 ? -127 : vd(rng));
        const Int8BlockSums sums = int8_block_sums(p, v, d, bias);
        const Int8Check clean = int8_block_check(sums, bias);
        REQUIRE(clean.ok());
        // The lhs is sum_j p_j c_j, as a plain integer when it fits.
        long long expect = 0;
        for (int j = 0; j < keys; ++j)
          for (int x = 0; x < d; ++x) expect += p[j] * v[static_cast<size_t>(j) * d + x];
        CHECK(clean.lhs == static_cast<uint32_t>(expect));
        // Any single bit of any accumulator, channel or digit, flipped: the check fails.
        for (int bit = 0; bit < 32; ++bit) {
          Int8BlockSums bad = sums;
          bad.channels[bit % d] ^= 1u << bit;
          CHECK_FALSE(int8_block_check(bad, bias).ok());
          bad = sums;
          bad.digits[bit % bad.digits.size()] ^= 1u << bit;
          // A flip of digit i's bit b moves the rhs by 128^i 2^b, which is 0 modulo 2^32 when
          // 7 i + b >= 32. Such a flip lands in a checksum accumulator only, never in O: it
          // cannot corrupt the output, so missing it is harmless.
          const int i = bit % static_cast<int>(bad.digits.size());
          if (7 * i + bit < 32) CHECK_FALSE(int8_block_check(bad, bias).ok());
        }
      }
    }
}

TEST_CASE("int8 Flash-ABFT on wgmma: the check stays exact through the folds, and sees faults",
          "[protect][q8]") {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> pd(0, 255), vd(-127, 127), step(1, 6);
  auto block = [&](int d, bool extreme) {
    std::vector<uint8_t> p(128);
    std::vector<int8_t> v(128 * static_cast<size_t>(d));
    for (auto& x : p) x = static_cast<uint8_t>(extreme ? 255 : pd(rng));
    for (auto& x : v) x = static_cast<int8_t>(extreme ? 127 : vd(rng));
    return std::pair{p, v};
  };
  for (int d : {64, 128}) {
    INFO("head_dim " << d);
    for (int trial = 0; trial < 20; ++trial) {
      // Clean: 0 after every block and every fold, and 64 l within 1 of 64 times l scaled
      // exactly (the kernel's FP32 l), as the kernel's l check takes it.
      Int8FoldedRow row = int8_folded_row(d);
      std::vector<Int8FoldedRow> states;
      double l = 0;
      for (int b = 0; b < 16; ++b) {
        const auto [p, v] = block(d, trial == 0);
        int8_folded_add(row, p, v);
        for (uint8_t x : p) l += x;
        REQUIRE(int8_folded_apart(row) == 0);
        if (b % 3 == 1) {
          const int s = step(rng);
          int8_folded_shift(row, {s, s, s, s});
          l = std::ldexp(l, -s);
          REQUIRE(int8_folded_apart(row) == 0);
        }
        CHECK(std::abs(row.l - 64 * l) < 1.0);
        states.push_back(row);
      }
      // A flip in O or C0, any bit, or in C1 below bit 25, before more blocks and folds: the
      // check sees it, however the folds shifted the flipped value since.
      const int at = trial % 8;
      for (int bit = 0; bit < 32; ++bit)
        for (int where = 0; where < 3; ++where) {
          if (where == 2 && bit >= 25) continue;
          Int8FoldedRow bad = states[at];
          int32_t& x = where == 0 ? bad.o[bit % d] : where == 1 ? bad.c0 : bad.c1;
          x = static_cast<int32_t>(static_cast<uint32_t>(x) ^ (1u << bit));
          for (int b = 0; b < 4; ++b) {
            const auto [p, v] = block(d, false);
            int8_folded_add(bad, p, v);
            const int s = step(rng);
            int8_folded_shift(bad, {s, s, s, s});
          }
          CHECK(int8_folded_apart(bad) != 0);
        }
      // One lane shifting by another amount than the quad.
      for (int lane = 0; lane < 4; ++lane) {
        Int8FoldedRow bad = states.back();
        std::array<int, 4> shifts{2, 2, 2, 2};
        shifts[lane] = 3;
        int8_folded_shift(bad, shifts);
        CHECK(int8_folded_apart(bad) != 0);
      }
    }
  }
  CHECK_THROWS_AS(int8_folded_row(256), std::invalid_argument);
}

TEST_CASE(
    "int8 efta_correct on wgmma: a flipped O element is rebuilt bit for bit at the next check",
    "[protect][q8]") {
  // The kernel's row: blocks added, a fold every third block, the row checked before each fold
  // and at the end. A flip of any bit of any element (or of C0, C1) between two checks is rebuilt
  // at the next, and the row ends equal to the clean one; a flip of W changes nothing D sees; two
  // wrong elements are seen, and one lane's wrong shift is seen and not repaired as one element.
  std::mt19937_64 rng(9);
  std::uniform_int_distribution<int> pd(0, 255), vd(-127, 127), step(1, 6);
  for (int d : {64, 128}) {
    std::vector<std::pair<std::vector<uint8_t>, std::vector<int8_t>>> blocks;
    std::vector<int> shifts;
    for (int b = 0; b < 12; ++b) {
      std::vector<uint8_t> p(128);
      std::vector<int8_t> v(128 * static_cast<size_t>(d));
      for (auto& x : p) x = static_cast<uint8_t>(b == 0 ? 255 : pd(rng));
      for (auto& x : v) x = static_cast<int8_t>(b == 0 ? 127 : vd(rng));
      blocks.emplace_back(p, v);
      shifts.push_back(b % 3 == 2 ? step(rng) : 0);
    }
    // `fault(row)` runs after block `at`'s add; returns the checks' reports.
    auto run = [&](int at, auto&& fault, Int8FoldedRow& row) {
      std::vector<Int8Repair> seen;
      row = int8_folded_row(d);
      for (size_t b = 0; b < blocks.size(); ++b) {
        int8_folded_add(row, blocks[b].first, blocks[b].second);
        if (static_cast<int>(b) == at) fault(row);
        if (shifts[b] > 0) {
          if (const Int8Repair r = int8_folded_repair(row); r.seen) seen.push_back(r);
          const int s = shifts[b];
          int8_folded_shift(row, {s, s, s, s});
        }
      }
      if (const Int8Repair r = int8_folded_repair(row); r.seen) seen.push_back(r);
      return seen;
    };
    Int8FoldedRow clean;
    REQUIRE(run(
                -1, [](Int8FoldedRow&) {}, clean)
                .empty());
    auto flip = [](int32_t& x, int bit) {
      x = static_cast<int32_t>(static_cast<uint32_t>(x) ^ (1u << bit));
    };
    for (int at : {1, 2, 11})
      for (int bit = 0; bit < 32; ++bit) {
        INFO("head_dim " << d << ", after block " << at << ", bit " << bit);
        const int ch = (7 * bit + at) % d;
        Int8FoldedRow row;
        std::vector<Int8Repair> seen = run(
            at, [&](Int8FoldedRow& r) { flip(r.o[ch], bit); }, row);
        REQUIRE(seen.size() == 1);
        CHECK(seen[0].corrected);
        CHECK(seen[0].channel == ch);
        CHECK(row.o == clean.o);
        for (int which = 0; which < 2; ++which) {
          if (which == 1 && bit >= 25) continue;  // 128 2^25 is 0 modulo 2^32
          seen = run(
              at, [&](Int8FoldedRow& r) { flip(which == 0 ? r.c0 : r.c1, bit); }, row);
          REQUIRE(seen.size() == 1);
          CHECK((seen[0].corrected && seen[0].channel == -1));
          CHECK(row.o == clean.o);
        }
        seen = run(
            at, [&](Int8FoldedRow& r) { flip(r.w1, bit); }, row);
        CHECK(seen.empty());
        CHECK(row.o == clean.o);
        // Two wrong elements are seen, but two checksums cannot always tell them from one: bit
        // b up in channel c and bit b + 1 down in c + 5 give E / D = c + 11, and the same bit
        // up in one and down in another cancels in D. Double faults are outside the model.
        seen = run(
            at,
            [&](Int8FoldedRow& r) {
              flip(r.o[ch], bit);
              flip(r.o[(ch + 5) % d], (bit + 1) % 32);
            },
            row);
        CHECK(seen.size() == 1);
      }
    for (int lane = 0; lane < 4; ++lane) {
      Int8FoldedRow row = int8_folded_row(d);
      int8_folded_add(row, blocks[1].first, blocks[1].second);
      std::array<int, 4> s{2, 2, 2, 2};
      s[lane] = 3;
      int8_folded_shift(row, s);
      const Int8Repair r = int8_folded_repair(row);
      CHECK((r.seen && !r.corrected));
    }
  }
}

TEST_CASE("int8 EFTA: strided checks are exact and every single flipped bit is rebuilt",
          "[protect][q8]") {
  const uint32_t bias = 0x4B400000u;
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> vd(-127, 127);
  // n: keys per column of a score block (block_n / 8, up to 32) or channels per column of a P V
  // block (head_dim / 8); the extremes wrap the biased accumulators and fill every digit.
  for (int d : {64, 128, 256})
    for (int n : {4, 16, 32})
      for (int trial = 0; trial < 3; ++trial) {
        INFO("head_dim " << d << ", n " << n << ", trial " << trial);
        std::vector<int8_t> q(d), y(static_cast<size_t>(n) * d);
        for (auto& x : q) x = static_cast<int8_t>(trial == 0 ? 127 : vd(rng));
        for (auto& x : y) x = static_cast<int8_t>(trial == 0 ? 127 : trial == 1 ? -127 : vd(rng));
        const Int8StridedRow clean = int8_strided_row(q, y, n, bias);
        REQUIRE(int8_strided_diff(clean, bias) == 0u);
        Int8StridedRow same = clean;
        CHECK(int8_strided_repair(same, bias) == -1);  // nothing to locate
        for (int j = 0; j < n; j += n / 4)
          for (int bit = 0; bit < 32; ++bit) {
            Int8StridedRow bad = clean;
            bad.x[j] ^= 1u << bit;
            CHECK(int8_strided_diff(bad, bias) != 0u);
            REQUIRE(int8_strided_repair(bad, bias) == j);
            CHECK(bad.x == clean.x);  // rebuilt bit for bit
          }
        // Two wrong values, or a wrong plain checksum: seen, never "repaired" into a third value.
        Int8StridedRow two = clean;
        two.x[0] ^= 1u << 5;  // different bits: the two changes cannot cancel
        two.x[n - 1] ^= 1u << 9;
        CHECK(int8_strided_diff(two, bias) != 0u);
        CHECK(int8_strided_repair(two, bias) == -1);
        Int8StridedRow hit = clean;
        hit.plain += 1 << 20;
        CHECK(int8_strided_diff(hit, bias) != 0u);
        CHECK(int8_strided_repair(hit, bias) == -1);
      }
}

TEST_CASE("fp8 efta_correct: a flipped score is located only with the weighted sum's lo half",
          "[protect][q8]") {
  // fp8_checksums.cuh: per checksum column, the plain (hi + lo) and weighted strided K sums in f16,
  // multiplied by E4M3 Q in FP32. The kernel's rule (protect::locate): ratio = e2 / e1 * n must be
  // an integer j in 1 .. n within 0.2. With the weighted sum in hi only its rounding, 2^-11 of
  // |Q| . sum |K|, moves the ratio by whole units for faults the check (2e-6 of that) sees.
  auto locate = [](float e1, float e2, int n) { return ftattn::protect::locate_index(e1, e2, n); };
  auto f16 = [](float x) {
    return static_cast<float>(ftattn::pasa::round_to(x, ftattn::Precision::f16));
  };
  auto flip = [](float x, int bit) {
    return std::bit_cast<float>(std::bit_cast<uint32_t>(x) ^ (1u << bit));
  };
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  constexpr int d = 128, n = 8;  // head_dim; keys per checksum column at block_n 64
  int seen = 0, located = 0, mislocated = 0, mislocated_hi_only = 0;
  for (int trial = 0; trial < 200; ++trial) {
    // E4M3 operands in quantised units (per-token scale max |x| / 448), as the kernel holds them.
    auto quantised = [&](std::vector<float>& row) {
      float m = 0.f;
      for (float& x : row) m = std::max(m, std::abs(x = normal(rng)));
      for (float& x : row) x = ftattn::quant_model::round_e4m3(x * 448.f / m);
    };
    std::vector<float> q(d);
    quantised(q);
    std::vector<std::vector<float>> k(n, std::vector<float>(d));
    for (auto& row : k) quantised(row);
    float s[n], ref = 0.f, weighted = 0.f, weighted_hi = 0.f, magnitude = 0.f;
    for (int j = 0; j < n; ++j) {
      s[j] = 0.f;
      for (int c = 0; c < d; ++c) s[j] += q[c] * k[j][c];
    }
    for (int c = 0; c < d; ++c) {
      float plain = 0.f, w = 0.f, a = 0.f;
      for (int j = 0; j < n; ++j) {
        plain += k[j][c];
        w += (j + 1) / float(n) * k[j][c];
        a += std::abs(k[j][c]);
      }
      ref += q[c] * (f16(plain) + f16(plain - f16(plain)));
      weighted += q[c] * (f16(w) + f16(w - f16(w)));
      weighted_hi += q[c] * f16(w);
      magnitude += std::abs(q[c]) * f16(a);
    }
    const int bad = trial % n;
    for (int bit = 10; bit <= 22; ++bit) {
      float x[n];
      std::copy(s, s + n, x);
      x[bad] = flip(x[bad], bit);
      float sum = 0.f, wsum = 0.f;
      for (int j = 0; j < n; ++j) {
        sum += x[j];
        wsum += (j + 1) / float(n) * x[j];
      }
      const float e1 = ref - sum;
      if (!(std::abs(e1) > 2e-6f * magnitude + 1e-6f)) continue;  // below the check: masked
      ++seen;
      const int j = locate(e1, weighted - wsum, n);
      located += j == bad;
      mislocated += j >= 0 && j != bad;
      const int j_hi = locate(e1, weighted_hi - wsum, n);
      mislocated_hi_only += j_hi >= 0 && j_hi != bad;
    }
  }
  INFO(seen << " seen, " << located << " located, " << mislocated << " mislocated, "
            << mislocated_hi_only << " mislocated with hi only");
  REQUIRE(seen > 1000);
  CHECK(mislocated == 0);
  CHECK(located > seen * 9 / 10);
  CHECK(mislocated_hi_only > 0);  // why the lo row exists
}

namespace {

float to_f16(float x) {
  return static_cast<float>(ftattn::pasa::round_to(x, ftattn::Precision::f16));
}

float flip_bit(float x, int bit) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(x) ^ (1u << bit));
}

// One row of 16-bit efta_correct's output check (protect/checksum.cuh): P in f16 over `keys` keys
// of f16 V, O and the checksums accumulated in FP32. The checksums are each V row's plain sum,
// its sum weighted by output_weight and by its square, each as f16 hi + lo. `group_*`: the
// per-thread layout before (group t: columns 8 nt + 2t + c, element j = 2 nt + c), its weighted
// checksum in f16 alone. `split_at`: O and every checksum as they stood after that many keys, for
// faults in the rescale between blocks.
struct OutputRow {
  static constexpr int head_dim = 128, keys = 512, group = 32;
  std::vector<float> o = std::vector<float>(head_dim, 0.f);
  float l = 0.f, ref = 0.f, wref = 0.f, sref = 0.f, vmax = 0.f;
  std::vector<float> group_ref = std::vector<float>(4, 0.f),
                     group_wref = std::vector<float>(4, 0.f),
                     group_vmax = std::vector<float>(4, 0.f);
  std::vector<float> o_at_split = o;
  float ref_at_split = 0.f, wref_at_split = 0.f, sref_at_split = 0.f;

  OutputRow(std::mt19937& rng, int split_at = 0) {
    using ftattn::protect::output_weight;
    std::normal_distribution<float> normal;
    auto hi_lo = [](float x) { return to_f16(x) + to_f16(x - to_f16(x)); };
    for (int k = 0; k < keys; ++k) {
      if (k == split_at) {
        o_at_split = o;
        ref_at_split = ref, wref_at_split = wref, sref_at_split = sref;
      }
      const float p = to_f16(std::exp2(std::min(0.f, normal(rng) * 2.f)));
      l += p;
      float plain = 0.f, weighted = 0.f, squared = 0.f, magnitude = 0.f;
      float gp[4] = {}, gw[4] = {}, ga[4] = {};
      for (int c = 0; c < head_dim; ++c) {
        const float x = to_f16(normal(rng));
        const float w = output_weight(c, head_dim);
        const int t = (c % 8) / 2, j = 2 * (c / 8) + c % 2;
        o[c] += p * x;
        plain += x;
        weighted += w * x;
        squared += w * w * x;
        magnitude += std::abs(x);
        gp[t] += x;
        gw[t] += (j + 1) / float(group) * x;
        ga[t] += std::abs(x);
      }
      ref += p * hi_lo(plain);
      wref += p * hi_lo(weighted);
      sref += p * hi_lo(squared);
      vmax = std::max(vmax, magnitude);
      for (int t = 0; t < 4; ++t) {
        group_ref[t] += p * hi_lo(gp[t]);
        group_wref[t] += p * to_f16(gw[t]);
        group_vmax[t] = std::max(group_vmax[t], ga[t]);
      }
    }
  }
};

// The kernel's output check (fwd_sm80.cuh, check_output) of `x` against the checksums: alarms
// over tol_output * (growth * values + B), corrects over tol_output * (2 growth + 1) * B with
// B = l * max sum |v|, where it locates by the ratios. f16's defaults (protected_launch.cpp).
struct OutputCheck {
  static constexpr float tol_output = 1.5e-7f, floor = 1e-6f;
  static constexpr float growth = OutputRow::keys / 128.f + 16;
  enum Verdict { clean, detected, to_locate };
  static Verdict verdict(const std::vector<float>& x, float ref, float bound) {
    float sum = 0.f, magnitude = 0.f;
    for (float v : x) sum += v, magnitude += std::abs(v);
    const float e1 = ref - sum;
    const float values = std::min(magnitude + std::abs(ref), 2 * bound);
    if (std::abs(e1) <= tol_output * (growth * values + bound) + floor) return clean;
    if (std::abs(e1) <= tol_output * (2 * growth + 1) * bound + floor) return detected;
    return to_locate;
  }
  // e1, e2 (weights `weight(i)`) and e3 (their squares) of `x` against the references.
  template <class Weight>
  static std::array<float, 3> discrepancies(const std::vector<float>& x, float ref, float wref,
                                            float sref, Weight&& weight) {
    float sum = 0.f, wsum = 0.f, ssum = 0.f;
    for (size_t i = 0; i < x.size(); ++i) {
      const float w = weight(static_cast<int>(i));
      sum += x[i], wsum += w * x[i], ssum += w * w * x[i];
    }
    return {ref - sum, wref - wsum, sref - ssum};
  }
};

}  // namespace

TEST_CASE("16-bit efta_correct: an O flip is located by the row's weighted sum in hi + lo",
          "[protect]") {
  // The layout before had per-thread checksums (32 of the row's elements each) with the weighted
  // one in f16 alone, whose rounding moved the located element for flips the check saw: it then
  // reported them corrected and left two elements wrong.
  using ftattn::protect::locate_index;
  using ftattn::protect::locate_output_column;
  using ftattn::protect::output_weight;
  constexpr int d = OutputRow::head_dim, group = OutputRow::group;
  std::mt19937 rng(5);
  struct Tally {
    int seen = 0, located = 0, mislocated = 0;
  } row, by_squares, per_group;
  auto tally = [](Tally& t, int at, int bad) {
    ++t.seen;
    t.located += at == bad;
    t.mislocated += at >= 0 && at != bad;
  };
  for (int trial = 0; trial < 40; ++trial) {
    const OutputRow r(rng);
    for (int bit = 10; bit <= 30; ++bit) {
      const int bad = (trial * 37 + bit * 11) % d;
      std::vector<float> x = r.o;
      x[bad] = flip_bit(x[bad], bit);
      if (OutputCheck::verdict(x, r.ref, r.l * r.vmax) == OutputCheck::to_locate) {
        const auto e = OutputCheck::discrepancies(x, r.ref, r.wref, r.sref,
                                                  [&](int c) { return output_weight(c, d); });
        tally(row, locate_index(e[0], e[1], d), bad);
        tally(by_squares, locate_output_column(e[0], e[1], e[2], d), bad);
      }
      const int t = (bad % 8) / 2;
      std::vector<float> mine(group);
      for (int j = 0; j < group; ++j) mine[j] = x[(j / 2) * 8 + 2 * t + j % 2];
      if (OutputCheck::verdict(mine, r.group_ref[t], r.l * r.group_vmax[t]) ==
          OutputCheck::to_locate) {
        const auto e = OutputCheck::discrepancies(mine, r.group_ref[t], r.group_wref[t], 0.f,
                                                  [](int j) { return (j + 1) / float(group); });
        tally(per_group, locate_index(e[0], e[1], group), 2 * (bad / 8) + bad % 2);
      }
    }
  }
  INFO("by rows: " << row.seen << " seen, " << row.located << " located, " << row.mislocated
                   << " mislocated; with the squares: " << by_squares.located
                   << " located; per thread, weighted in hi alone: " << per_group.seen << " seen, "
                   << per_group.mislocated << " mislocated");
  REQUIRE(row.seen > 300);
  CHECK(row.mislocated == 0);
  CHECK(row.located > row.seen * 95 / 100);
  // The squared weights reject no single flip the weighted ratio locates.
  CHECK(by_squares.located == row.located);
  CHECK(by_squares.mislocated == 0);
  CHECK(per_group.mislocated > 0);  // why the weighted sum has its lo half
}

TEST_CASE("16-bit efta_correct: a lane's rescale fault is not repaired as one O element",
          "[protect]") {
  // A fault in one lane's rescale factor between key blocks scales what that lane holds of the
  // row then, its 32 columns of O and its column group of the checksum tile, so e1 and e2 are
  // sums over many elements. With the weighted ratio alone such a fault was sometimes located at
  // one element and "corrected" (H200 campaigns: 52 of 10,000 rescale flips, f16 without a mask);
  // the square-weighted checksum (the atom's column group 2) must reject those.
  using ftattn::protect::locate_index;
  using ftattn::protect::locate_output_column;
  using ftattn::protect::output_weight;
  constexpr int d = OutputRow::head_dim;
  std::mt19937 rng(17);
  int seen = 0, by_ratio = 0, by_squares = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int split = 64 * (1 + trial % 7);
    const OutputRow r(rng, split);
    // Lane t of the quad holds columns 8 nt + 2t + c and the checksum tile's group t: plain (0),
    // the ones (1, l: left as it is), squared (2) and weighted (3).
    const int t = trial % 4;
    for (int bit = 0; bit <= 30; ++bit) {
      const float factor = flip_bit(1.f, bit);
      if (!std::isfinite(factor)) continue;
      std::vector<float> x = r.o;
      for (int c = 0; c < d; ++c)
        if ((c % 8) / 2 == t) x[c] += (factor - 1.f) * r.o_at_split[c];
      const float ref = r.ref + (t == 0 ? (factor - 1.f) * r.ref_at_split : 0.f);
      const float sref = r.sref + (t == 2 ? (factor - 1.f) * r.sref_at_split : 0.f);
      const float wref = r.wref + (t == 3 ? (factor - 1.f) * r.wref_at_split : 0.f);
      if (OutputCheck::verdict(x, ref, r.l * r.vmax) != OutputCheck::to_locate) continue;
      ++seen;
      const auto e = OutputCheck::discrepancies(x, ref, wref, sref,
                                                [&](int c) { return output_weight(c, d); });
      by_ratio += locate_index(e[0], e[1], d) >= 0;
      by_squares += locate_output_column(e[0], e[1], e[2], d) >= 0;
    }
  }
  INFO(seen << " rescale faults over the correction threshold: " << by_ratio
            << " located as one element by the weighted ratio, " << by_squares
            << " with the squares too");
  REQUIRE(seen > 1000);
  CHECK(by_ratio > 0);  // the aliasing the squares are for
  CHECK(by_squares == 0);
}

namespace {

// One unmasked row of 32 scores at head dim 128 (scale log2(e) / sqrt(128)), shifted by its own
// max as the kernel's running max would, checked against the exact checksum reference.
ProductCheck product_check(const std::vector<float>& scores, void (*fault)(int, float&) = nullptr) {
  const float scale = 1.4426950f / std::sqrt(128.f);
  const float shift = *std::max_element(scores.begin(), scores.end()) * scale;
  double num = 0.0;
  for (float s : scores) num += s;
  num = num * scale - static_cast<double>(scores.size()) * shift;
  return efta_correct_product_check(scores, scale, shift, 8, num, 1e-3f, fault);
}

// Scores whose exponents (score * scale, the max 0) are `t`.
std::vector<float> scores_of(const std::vector<float>& t) {
  const float scale = 1.4426950f / std::sqrt(128.f);
  std::vector<float> s(t.size());
  for (size_t j = 0; j < t.size(); ++j) s[j] = t[j] / scale;
  return s;
}

}  // namespace

TEST_CASE("efta_correct's product check: clean rows pass, partial products stay normal in range",
          "[protect]") {
  std::mt19937 rng(11);
  // Unit q and k at head dim 128: scores of standard deviation sqrt(128).
  std::normal_distribution<float> normal(0.f, std::sqrt(128.f));
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<float> s(32);
    for (float& x : s) x = normal(rng);
    const ProductCheck c = product_check(s);
    INFO("trial " << trial << ": dev " << c.dev << " tol " << c.tol);
    REQUIRE(c.in_range);
    CHECK_FALSE(c.alarm);
    CHECK(c.dev < c.tol / 4);  // the bound is not tight, and is not meant to be
  }
  // Rows whose groups' exponents spread as far as the range bound allows (sums down to -100,
  // split unevenly, in random order): no partial product or pair leaves FP32's normal range.
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<float> t(32);
    for (int g = 0; g < 4; ++g) {
      const float total = -100.f * unit(rng);
      float w[8], w_sum = 0.f;
      for (float& x : w) x = std::pow(unit(rng), 4.f), w_sum += x;  // a few large shares
      for (int j = 0; j < 8; ++j) t[8 * g + j] = total * w[j] / w_sum;
      std::shuffle(t.begin() + 8 * g, t.begin() + 8 * g + 8, rng);
    }
    t[rng() % 32] = 0.f;  // the row's max
    const ProductCheck c = product_check(scores_of(t));
    INFO("trial " << trial << ": smallest " << c.smallest << " largest " << c.largest);
    if (!c.in_range) continue;  // rounding took a group just past -100
    CHECK(c.smallest >= std::numeric_limits<float>::min());
    CHECK(c.largest <= 0x1p126f);
    CHECK_FALSE(c.alarm);
  }
  // The extreme split: one exponent of -99.5 and seven of 0 per group, both orders.
  for (bool last : {false, true}) {
    std::vector<float> t(32, 0.f);
    for (int g = 0; g < 4; ++g) t[8 * g + (last ? 7 : 0)] = -99.5f;
    const ProductCheck c = product_check(scores_of(t));
    REQUIRE(c.in_range);
    CHECK(c.smallest >= std::numeric_limits<float>::min());
    CHECK_FALSE(c.alarm);
  }
  // Past the floor the product is not checked (only the exponents against the checksum).
  std::vector<float> t(32, 0.f);
  t[3] = -120.f;
  CHECK_FALSE(product_check(scores_of(t)).in_range);
}

TEST_CASE("efta_correct's product check sees P flips of 2^-11 of P and more", "[protect]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, std::sqrt(128.f));
  static int target, bit;
  for (int trial = 0; trial < 600; ++trial) {
    std::vector<float> s(32);
    for (float& x : s) x = normal(rng);
    target = static_cast<int>(rng() % 32);
    bit = 13 + trial % 10;  // mantissa bits 13-22: 2^-11 to 2^-1 of P
    const ProductCheck c = product_check(s, [](int j, float& p) {
      if (j == target) p = std::bit_cast<float>(std::bit_cast<uint32_t>(p) ^ (1u << bit));
    });
    INFO("trial " << trial << " bit " << bit << ": dev " << c.dev << " tol " << c.tol);
    CHECK(c.alarm);
  }
}

TEST_CASE("fp8 wgmma Flash-ABFT: three E4M3 digits hold a key's channel sum to 2^-12",
          "[protect][q8]") {
  // Keys of quantised values (E4M3 numbers): normal, a few outliers among small values, tiny
  // ones, and all at the range's end. Each row is an E4M3 number; the digits give c s within
  // 2^-12 of it (plus 2^-18 where a remainder is subnormal), where two digits do not; the
  // magnitude covers s sum |v| within E4M3's rounding and is at least 4.
  using ftattn::quant_model::round_e4m3;
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  bool two_digits_short = false;
  for (int head_dim : {64, 128})
    for (int kind = 0; kind < 4; ++kind)
      for (int trial = 0; trial < 500; ++trial) {
        std::vector<float> v(head_dim);
        for (int d = 0; d < head_dim; ++d) {
          float x = normal(rng);
          if (kind == 1) x = d % 37 == 0 ? 40 * x : x / 20;
          if (kind == 2) x *= 1e-4f;
          if (kind == 3) x = x < 0 ? -448.0f : 448.0f;
          v[d] = round_e4m3(std::clamp(x, -448.0f, 448.0f));
        }
        const Fp8WgmmaRows rows = fp8_wgmma_rows(v);
        const double s = fp8_wgmma_scale(head_dim);
        double c = 0, a = 0;
        for (float x : v) c += x, a += std::abs(x);
        INFO(head_dim << " kind " << kind << " c " << c);
        for (float digit : rows.digits) REQUIRE(round_e4m3(digit) == digit);
        REQUIRE(std::abs(c * s) <= 224.0);
        REQUIRE(std::abs(rows.value() - c * s) <= 0x1p-12 * std::abs(c * s) + 0x1p-18);
        REQUIRE(rows.magnitude >= 4.0f);
        REQUIRE(rows.magnitude >= (1 - 0x1p-4) * a * s);
        const double two = double{rows.digits[0]} + rows.digits[1] / 16.0;
        if (std::abs(two - c * s) > 0x1p-12 * std::abs(c * s) + 0x1p-18) two_digits_short = true;
      }
  CHECK(two_digits_short);
  CHECK_THROWS_AS(fp8_wgmma_rows(std::vector<float>(129, 1.0f)), std::invalid_argument);
}

TEST_CASE("fp8 wgmma Flash-ABFT: O against its folded sums, the sums against the checksum columns",
          "[protect][q8]") {
  // The kernel's row model over four 128-key blocks: clean rows pass both checks at the default
  // 2e-7; a flipped O value, or one lane's wrong rescale factor (lane 0's included), parts O from
  // the sums beyond FP32 rounding; a flipped checksum column shows in the second check once it
  // moves the row's sum past 4096 tol_output of the magnitude, and a last-bit flip does not.
  using ftattn::quant_model::round_e4m3;
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  constexpr int kKeys = 128, kBlocks = 4;
  auto flip = [](float x, int bit) {
    return std::bit_cast<float>(std::bit_cast<uint32_t>(x) ^ (1u << bit));
  };
  for (int d : {64, 128})
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<std::vector<float>> ps, vs;
      std::vector<float> alphas;
      for (int b = 0; b < kBlocks; ++b) {
        std::vector<float> p(kKeys), v(kKeys * d);
        for (float& x : p) x = round_e4m3(256.0f * std::exp2(-8.0f * unit(rng)));
        for (float& x : v) x = round_e4m3(std::clamp(normal(rng), -448.0f, 448.0f));
        ps.push_back(p), vs.push_back(v);
        alphas.push_back(b == 0 ? 0.0f : std::exp2(-unit(rng)));
      }
      // Lane `bad_lane`'s factor at block 2 is doubled, an exponent flip (-1: none).
      auto run = [&](int bad_lane) {
        Fp8FoldedRow row = fp8_folded_row(d);
        for (int b = 0; b < kBlocks; ++b) {
          std::array<float, 4> a{};
          a.fill(alphas[b]);
          if (b == 2 && bad_lane >= 0) a[bad_lane] *= 2.0f;
          fp8_folded_add(row, ps[b], vs[b], a);
        }
        return row;
      };
      INFO("head_dim " << d << " trial " << trial);
      const Fp8FoldedRow clean = run(-1);
      const Fp8RowChecks ok = fp8_folded_checks(clean, 2e-7f);
      REQUIRE(ok.o_ok());
      REQUIRE(ok.gemm_ok());
      Fp8FoldedRow o_flip = clean;
      o_flip.o[5] = flip(o_flip.o[5], 20);
      CHECK_FALSE(fp8_folded_checks(o_flip, 2e-7f).o_ok());
      for (int lane : {0, 2}) CHECK_FALSE(fp8_folded_checks(run(lane), 2e-7f).o_ok());
      Fp8FoldedRow big = clean, small = clean;
      // An exponent bit that grows the column a lot (bit 30 below 2, bit 29 from 2 to 2^64).
      big.checksum[0] = flip(big.checksum[0], std::abs(big.checksum[0]) < 2.0f ? 30 : 29);
      small.checksum[0] = flip(small.checksum[0], 0);
      CHECK_FALSE(fp8_folded_checks(big, 2e-7f).gemm_ok());
      CHECK(fp8_folded_checks(small, 2e-7f).gemm_ok());
      CHECK(fp8_folded_checks(big, 2e-7f).o_ok());  // O itself is intact
    }
  CHECK_THROWS_AS(fp8_folded_row(256), std::invalid_argument);
}
