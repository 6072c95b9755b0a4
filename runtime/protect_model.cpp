#include "ftattn/protect_model.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace ftattn::protect_model {

RowChecksums encode(std::span<const double> row) {
  if (row.size() % kStride != 0)
    throw std::invalid_argument("tensor checksums need a multiple of 8 columns");
  RowChecksums c{};
  for (size_t j = 0; j < row.size(); ++j) {
    const int t = static_cast<int>(j % kStride);
    const int l = static_cast<int>(j / kStride);
    c.c1[t] += row[j];
    c.c2[t] += (l + 1) * row[j];
  }
  return c;
}

Repair check_and_correct(std::span<double> row, const RowChecksums& expected, double tolerance) {
  const RowChecksums got = encode(row);
  const int groups = static_cast<int>(row.size()) / kStride;
  Repair repair;
  for (int t = 0; t < kStride; ++t) {
    double scale = 0.0, weighted = 0.0;
    for (int l = 0; l < groups; ++l) {
      scale += std::abs(row[t + kStride * l]);
      weighted += (l + 1) * std::abs(row[t + kStride * l]);
    }
    // The bound is relative to the magnitudes summed, so it survives large and tiny rows alike.
    const double tol1 = tolerance * std::max(scale, std::numeric_limits<double>::min());
    const double tol2 = tolerance * std::max(weighted, std::numeric_limits<double>::min());
    const double d1 = expected.c1[t] - got.c1[t];
    const double d2 = expected.c2[t] - got.c2[t];
    const bool off1 = std::abs(d1) > tol1, off2 = std::abs(d2) > tol2;
    if (!off1 && !off2) continue;
    if (off1 != off2) return {Verdict::checksum_hit, -1, 0.0};  // one checksum disagrees alone
    const double ratio = d2 / d1;                               // = l + 1 for one error in group l
    const double group = std::round(ratio);
    if (group < 1 || group > groups || std::abs(ratio - group) > 1e-3)
      return {Verdict::uncorrectable, -1, 0.0};
    const int column = t + kStride * (static_cast<int>(group) - 1);
    row[column] += d1;
    repair = {Verdict::corrected, column, d1};
  }
  return repair;
}

double AbftRow::actual() const {
  double s = 0.0;
  for (double x : out) s += x;
  return s;
}

AbftRow flash_abft_row(std::span<const double> scores, std::span<const double> values, int head_dim,
                       void (*fault)(Stage, int, double&)) {
  const int keys = static_cast<int>(scores.size());
  if (values.size() != static_cast<size_t>(keys) * head_dim)
    throw std::invalid_argument("values must be keys x head_dim");
  AbftRow r;
  r.out.assign(head_dim, 0.0);
  double m = -std::numeric_limits<double>::infinity(), l = 0.0, c = 0.0;
  for (int i = 0; i < keys; ++i) {
    double s = scores[i];
    if (fault) fault(Stage::score, i, s);
    const double m_new = std::max(m, s);
    const double alpha = std::exp(m - m_new);
    double p = std::exp(s - m_new);
    if (fault) fault(Stage::probability, i, p);
    double row_sum = 0.0;  // rowsum(v_i): the checksum lane of V, computed from fault-free V
    for (int x = 0; x < head_dim; ++x) row_sum += values[static_cast<size_t>(i) * head_dim + x];
    l = l * alpha + p;
    c = c * alpha + p * row_sum;
    for (int x = 0; x < head_dim; ++x) {
      r.out[x] = r.out[x] * alpha + p * values[static_cast<size_t>(i) * head_dim + x];
      if (fault && x == 0) fault(Stage::output_accumulator, i, r.out[x]);
    }
    m = m_new;
  }
  for (double& x : r.out) x /= l;
  r.predicted = c / l;
  return r;
}

}  // namespace ftattn::protect_model
