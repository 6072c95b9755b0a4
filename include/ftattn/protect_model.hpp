// Host models of the protection schemes' checksum arithmetic, in double precision, on small
// tiles. They pin the formulas (with the papers' errors fixed, shared/notes/seed-ft.md) and are
// what the kernels' protection policies are checked against.
#pragma once

#include <array>
#include <cstdint>
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

// --- int8 Flash-ABFT: exact INT32 checksums through the 8-bit MMAs ---------------------------
//
// int8 GEMM II multiplies P (integers 0..127) by V (int8) into INT32 exactly. V's per-key channel
// sum c = sum_d v_d needs more than 8 bits (|c| <= 127 head_dim), so it rides as extra V channels
// holding base-128 digits: c = sum_i 128^i digit_i, each digit an int8 (balanced, in [-64, 63],
// the top one wider). The MMAs then give sum_j p_j digit_i,j exactly for every digit, and for a
// query row sum_d (P V)_d == sum_i 128^i (P digit_i) must hold exactly: zero tolerance, in
// INT32 arithmetic modulo 2^32, so the kernel's biased accumulators (each channel starts at
// `bias`, int8 kernels use the bits of 1.5 * 2^23) may wrap and the check still holds. Any
// single flipped bit of a channel's or a digit's accumulator moves one side by a power of two
// (times 128^i), never 0 modulo 2^32.

// How many base-128 digits hold the channel sum of head_dim int8 values (2 up to head_dim 128:
// the top digit of |c| <= 16,256 stays within [-127, 127]; 3 above).
int int8_checksum_digit_count(int head_dim);
// c as `count` base-128 digits, least significant first. std::invalid_argument when c does not
// fit (a digit would leave int8).
std::vector<int8_t> int8_checksum_digits(int c, int count);
int int8_checksum_value(std::span<const int8_t> digits);

// One query row and one key block, as the kernel's accumulators hold it: `p` (block_n values
// 0..127), `v` (block_n x head_dim int8, row-major), each accumulator starting at `bias`.
// lhs = sum_d (acc_d - bias), rhs = sum_i 128^i (acc_digit_i - bias), both modulo 2^32.
struct Int8BlockSums {
  std::vector<uint32_t> channels;  // acc_d, per channel
  std::vector<uint32_t> digits;    // acc_digit_i, per digit
};
Int8BlockSums int8_block_sums(std::span<const uint8_t> p, std::span<const int8_t> v, int head_dim,
                              uint32_t bias);
struct Int8Check {
  uint32_t lhs = 0, rhs = 0;
  bool ok() const { return lhs == rhs; }
};
Int8Check int8_block_check(const Int8BlockSums& sums, uint32_t bias);

// --- int8 Flash-ABFT on the Hopper wgmma kernel: checksum columns beside O, through its folds ---
//
// kernel/fwd_q8_sm90.cuh keeps O in INT32 over all key blocks, P unsigned (0..255), and when a
// row's reference moves it shifts O right with rounding, (x + 2^(s-1)) >> s (a fold). The digit
// rows ride in GEMM II as extra columns C0 and C1, so that D = sum_d O_d - C0 - 128 C1 is 0
// (modulo 2^32) after every block, and a row of 64s as column L (64 times the row's sum of P,
// whose low 6 bits keep l's fractions through the folds). A quad's
// lane t holds channels 8 j + 2 t and 8 j + 2 t + 1; lane 0 also C0 and C1, lane 3 L. A fold
// shifts lane t's values by its own shift (the same on all four when clean), which moves D by
// the sum of (x' - x) over them: lane 0 adds that move to C0, and 2^30 for each lane whose
// shift is not its own, so D stays 0 exactly while clean, and a flip in O or C0 (any bit), in
// C1 (bits 0 to 24: 128 2^25 is 0 modulo 2^32) or one lane's shift leaves it nonzero for good.
//
// efta_correct there adds W = W0 + 128 W1 + 16384 W2, the digits of sum_d (d + 1) v_d (W0 and W1
// lane 1's, W2 lane 2's), so that E = sum_d (d + 1) O_d - W is 0 too and folds alike, W0 taking
// E's move. Checked before every fold and at the end (int8_folded_repair), O has taken only
// exact adds since the last check, so a single wrong O_d leaves D = delta and E = (d + 1) delta.
// A lane shifting by another amount marks E with 3 2^29 beside D's 2^30, which locates nothing.
struct Int8FoldedRow {
  std::vector<int32_t> o;          // per channel
  int32_t c0 = 0, c1 = 0, l = 0;   // the digit columns and 64 l
  int32_t w0 = 0, w1 = 0, w2 = 0;  // efta_correct's weighted digit columns
};
Int8FoldedRow int8_folded_row(int head_dim);
// One key block into the row: `p` (block_n values 0..255), `v` (block_n x head_dim int8).
void int8_folded_add(Int8FoldedRow& row, std::span<const uint8_t> p, std::span<const int8_t> v);
// A fold, lane t shifting by shifts[t] (each 0..30), C0 taking D's move.
void int8_folded_shift(Int8FoldedRow& row, const std::array<int, 4>& shifts);
// D = sum_d O_d - C0 - 128 C1, modulo 2^32 as a signed value: the kernel checks it is 0.
int int8_folded_apart(const Int8FoldedRow& row);
// efta_correct's check (q8::repair_output): nothing when D is 0; else, in 64 bits, a single wrong
// channel located from E / D and rebuilt (`channel`), or a wrong C0 or C1 (E = 0) rebuilt in C0;
// anything else seen, not corrected, and C0 rebased so that D is 0 again.
struct Int8Repair {
  bool seen = false, corrected = false;
  int channel = -1;
};
Int8Repair int8_folded_repair(Int8FoldedRow& row);

// --- fp8 Flash-ABFT on the Hopper wgmma kernel: E4M3 checksum rows -------------------------
//
// kernel/fwd_q8_sm90.cuh's GEMM II multiplies E4M3 operands only, so each key's channel sum
// c = sum_d v_d of its quantised values (protect/fp8_checksums.cuh) rides as three E4M3 digits of
// c s, s = 1 / (2 head_dim) (|c s| <= 224 < 448): d0 the E4M3 rounding of c s, d1 that of 16 (c s
// - d0), d2 that of 256 (c s - d0 - d1 / 16), so that the kernel weighs their columns by 1, 2^-4
// and 2^-8 and each stays out of E4M3's subnormals; and the magnitude max(s sum_d |v_d|, 4),
// rounded, which the threshold is relative to (at least 4: the digits' absolute error is then a
// small part of it however small the key's values).
struct Fp8WgmmaRows {
  std::array<float, 3> digits{};
  float magnitude = 0.0f;
  double value() const;  // d0 + d1 / 16 + d2 / 256, an estimate of c s
};
// `v`: one key's head_dim quantised values (E4M3 numbers).
Fp8WgmmaRows fp8_wgmma_rows(std::span<const float> v);
double fp8_wgmma_scale(int head_dim);  // s

// One query row through the kernel's blocks (kernel/fwd_q8_sm90.cuh, q8::fold_piece): a quad's
// lane t holds O's channels 8 j + 2 t and 8 j + 2 t + 1 and the sum of its own channels of each
// block's P V, folded with lane 0's rescale factor; O folds with the lane's own; the checksum
// columns (d0, d1 lane 0's; d2, the magnitude lane 1's) fold with their lane's. P V is exact here
// (the E4M3 wgmma's alignment is not modelled).
struct Fp8FoldedRow {
  std::vector<float> o;             // per channel
  std::array<float, 4> folded{};    // per lane
  std::array<float, 4> checksum{};  // d0, d1, d2, magnitude
  int blocks = 0;
};
Fp8FoldedRow fp8_folded_row(int head_dim);
// One key block: `p` (block_n E4M3 values), `v` (block_n x head_dim E4M3 values), each lane's
// rescale factor for what the row held before.
void fp8_folded_add(Fp8FoldedRow& row, std::span<const float> p, std::span<const float> v,
                    const std::array<float, 4>& alpha);
// q8::check_fp8_output's two checks at `tol_output` (the launcher's absolute floor left out):
// O against the folded sums, and the sums against the checksum columns (4096 tol_output of the
// magnitude).
struct Fp8RowChecks {
  double o_error = 0, o_threshold = 0, gemm_error = 0, gemm_threshold = 0;
  bool o_ok() const { return o_error <= o_threshold; }
  bool gemm_ok() const { return gemm_error <= gemm_threshold; }
};
Fp8RowChecks fp8_folded_checks(const Fp8FoldedRow& row, float tol_output);

// --- int8 EFTA: strided checksums per thread, exact single-error repair --------------------
//
// A thread of the m16n8k32 accumulator layout holds, per row, the values x_j = acc[8 j + e] of a
// tile row (j = 0..n-1: the keys of a score block, or the channels of a P V block; e its column
// within every 8-wide tile). Its checksums come from the same MMAs with extra operand rows: the
// digits (2, balanced base 128) of sum_j y_j and (3) of sum_j (j + 1) y_j, y_j the operand row
// multiplied into x_j. Then, modulo 2^32 and with every accumulator starting at `bias`,
//     sum_j (x_j - bias) == digit value of the plain checksum,
// and a single wrong x_j leaves, in 64-bit arithmetic on the de-biased values, e1 = delta and
// e2 = (j + 1) delta exactly (|delta| <= 2^31, the weights <= 32): j = e2 / e1 - 1.

// One thread-row of a strided check: x (biased accumulators), and the de-biased plain and
// weighted checksums as the kernel rebuilds them from their digit accumulators.
struct Int8StridedRow {
  std::vector<uint32_t> x;
  long long plain = 0, weighted = 0;
};
// The values and checksums of column e for one query row `q` (head_dim int8) against the
// operand rows `y` (n x head_dim int8, row j feeding x_j), each product through its digits.
Int8StridedRow int8_strided_row(std::span<const int8_t> q, std::span<const int8_t> y, int n,
                                uint32_t bias);
// The kernel's check: sum_j (x_j - bias) - plain, modulo 2^32 (0: clean).
uint32_t int8_strided_diff(const Int8StridedRow& row, uint32_t bias);
// The kernel's repair: the located j, with x_j rebuilt, or -1 (nothing located: no error, two
// errors, a hit checksum).
int int8_strided_repair(Int8StridedRow& row, uint32_t bias);

// --- efta_correct's product check (protect/efta_rows.cuh), in FP32 as the kernel computes it ---
//
// One thread's row of an unmasked key block: the raw scores s_j (in the kernel's order, a group
// being `group` consecutive values), their exponents t_j = s_j scale - shift, P_j = 2^t_j. Each
// group's exponent sum comes from its raw sum (one FMA), each factor is scaled by the group's
// 2^-k (k its mean exponent rounded, exact), and the product must be 2^residual to within the
// exps' error and FP32 rounding; separately the exponent sum must match the checksum's, `num`,
// within `budget` (the kernel's tol_probs |q| sum|k| term, in base-2 units, plus rounding).
// `fault(j, p)` may change P_j after its exp, as a flipped bit would.
struct ProductCheck {
  bool in_range = true;  // every group's exponents sum to at least -100
  bool alarm = false;
  float prod = 0.f, expected = 0.f, dev = 0.f, tol = 0.f;
  // The smallest and largest magnitude of every partial product and pair the check forms.
  float smallest = 0.f, largest = 0.f;
};
ProductCheck efta_correct_product_check(std::span<const float> scores, float scale_log2,
                                        float shift, int group, double num, float budget,
                                        void (*fault)(int, float&) = nullptr);

}  // namespace ftattn::protect_model
