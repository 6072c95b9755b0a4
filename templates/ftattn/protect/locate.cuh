// Locating a single faulty element from a plain and a weighted checksum. Plain C++ (NVRTC
// compiles it for the device, -default-device), so the kernels (protect/checks.cuh) and the
// host's tests of the rule share one definition.
#pragma once

#ifndef __CUDA_ARCH__
#include <cmath>
#endif

namespace ftattn::protect {

// Where the single faulty element among n is, from the plain (e1) and weighted (e2) discrepancies
// with weights (j + 1) / n over element j: e2 / e1 * n, within 0.2 of an integer in 1 .. n; -1
// otherwise (two faults, a hit checksum, a discrepancy too small to locate, or not finite).
inline int locate_index(float e1, float e2, int n) {
  const float ratio = e2 / e1 * n;
  const float j = rintf(ratio);
  if (!(fabsf(ratio - j) <= 0.2f) || j < 1.f || j > float(n)) return -1;
  return static_cast<int>(j) - 1;
}

// The exact rule of the int8 checks (integers, 64 bits): a single wrong x_j among n leaves the
// plain discrepancy e1 = delta and the weighted one (weights j + 1) e2 = (j + 1) delta, so j =
// e2 / e1 - 1 when that divides and lies in 0 .. n - 1; -1 otherwise (no fault, two faults, a
// hit checksum).
inline int exact_index(long long e1, long long e2, int n) {
  if (e1 == 0 || e2 % e1 != 0 || e2 / e1 < 1 || e2 / e1 > n) return -1;
  return static_cast<int>(e2 / e1) - 1;
}

// efta_correct's weight of O's column c in its weighted row checksum (protect/checksum.cuh).
inline float output_weight(int column, int head_dim) { return (column + 1) / float(head_dim); }

// efta_correct's O column at fault among `head_dim`, from the discrepancies of the row's plain
// (e1), weighted (e2, weights w_c = output_weight) and square-weighted (e3, weights w_c^2)
// checksums; -1 where they disagree. One faulty element c gives e2 / e1 = w_c and e3 / e1 = w_c^2.
// A fault spread over many elements (a lane's rescale factor scales its 32 of the row) can put
// e2 / e1 near some w_c by chance, and was then repaired as that element, leaving the row wrong;
// e3 / e1 must then fall near w_c^2 too, as it does for one element and seldom for many.
inline int locate_output_column(float e1, float e2, float e3, int head_dim) {
  const int column = locate_index(e1, e2, head_dim);
  if (column < 0) return -1;
  const float w = output_weight(column, head_dim);
  // In the units of locate_index's window: its ratio is e2 / e1 * head_dim.
  const float off = (e3 / e1 - w * w) * head_dim;
  return fabsf(off) <= 0.2f ? column : -1;
}

}  // namespace ftattn::protect
