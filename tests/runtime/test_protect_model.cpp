// The checksum arithmetic of the protection schemes on small tiles, with the papers' errors
// fixed and pinned (shared/notes/seed-ft.md: 2.4 and 3.x).
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "ftattn/protect_model.hpp"

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

TEST_CASE("clean rows raise no alarm; two errors or a hit checksum are not miscorrected",
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
