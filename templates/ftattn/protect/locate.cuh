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

// efta_correct's weight of O's column c in its weighted row checksum (protect/checksum.cuh).
inline float output_weight(int column, int head_dim) { return (column + 1) / float(head_dim); }

}  // namespace ftattn::protect
