// Host models of the protection schemes' checksum arithmetic, in double precision, on small
// tiles. They pin the formulas (with the papers' errors fixed, shared/notes/seed-ft.md) and are
// what the kernels' protection policies are checked against.
#pragma once

#include <span>
#include <vector>

namespace ftattn::protect_model {

// --- EFTA tensor checksums (row checksums strided by the MMA atom width) ----------------------

constexpr int kStride = 8;  // one n8 MMA atom: a thread holds columns t, t+8, t+16, ...

// Strided checksums of one row of `cols` values (cols a multiple of 8), as an extra n8 atom
// computes them: c1[t] = sum_l x[t + 8l], c2[t] = sum_l (l + 1) x[t + 8l], l = 0 .. cols/8 - 1.
// For GEMM I the sum runs over the block's block_n key columns (lc = block_n/8 - 1), not over
// head_dim as the paper prints.
struct RowChecksums {
  double c1[kStride];
  double c2[kStride];
};
RowChecksums encode(std::span<const double> row);

enum class Verdict { clean, corrected, checksum_hit, uncorrectable };

struct Repair {
  Verdict verdict = Verdict::clean;
  int column = -1;         // the corrected element (Verdict::corrected)
  double magnitude = 0.0;  // what was added to it
};

// Compares `row` (possibly faulty) with checksums encoded from the fault-free data, residue by
// residue. A single error in a residue class is located from d2/d1 = l + 1, column
// t + 8 (d2/d1 - 1) (the paper's t + 8 d2/d1 is one group off) and corrected in place. A
// discrepancy is one above `tolerance * scale`, scale being the sum of |x| over that residue.
// The first residue that cannot be repaired ends the scan: a checksum hit (d1 ~ 0 while d2 is not,
// or a ratio outside 1 .. cols/8), or several errors (a ratio that is no integer).
Repair check_and_correct(std::span<double> row, const RowChecksums& expected, double tolerance);

// --- Flash-ABFT (one online checksum per query row over the P V path) -------------------------

// One query row of online-softmax attention over `keys` keys with the extra checksum lane:
// c = c e^(m_old - m_new) + rowsum(v_i) e^(s_i - m_new). Returns the output row and the
// predicted checksum c / l, to be compared with the sum of the output row.
struct AbftRow {
  std::vector<double> out;
  double predicted = 0.0;
  double actual() const;  // sum of out
};
// scores: `keys` values; values: keys x head_dim, row-major. `fault` (optional) is called on
// each intermediate (stage, key index, value&) so tests can flip values where faults land.
enum class Stage { score, probability, output_accumulator };
AbftRow flash_abft_row(std::span<const double> scores, std::span<const double> values, int head_dim,
                       void (*fault)(Stage, int, double&) = nullptr);

}  // namespace ftattn::protect_model
