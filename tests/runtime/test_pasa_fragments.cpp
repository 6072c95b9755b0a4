// CPU emulation of the fragment layouts behind PASA's EFTA GEMM I check
// (kernel/fwd_pasa_sm80.cuh): an mma.m16n8k16 whose A operand is a 16-key step of the FP16 S''
// accumulators (C layout == A layout) and whose B operand is the kernel's per-lane `ones_b`
// register must give every thread, in both of its columns, the sum of exactly its own S''
// elements of that step: the quantity its checksum column covers. Layouts per the PTX ISA
// (m16n8k16 .f16: a0..a3, b0..b1 and the C/D fragments), lane = 4 g + t.
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <random>

namespace {

// The kernel's ones_b: 1 (both halves) where this lane's B rows k = 2t, 2t + 1, 2t + 8, 2t + 9
// belong to the thread group of its column n = g, i.e. (k % 8) / 2 == n / 2.
bool kernel_ones_b(int lane) { return lane % 4 == (lane / 4) / 2; }

// D = A B for one m16n8k16 with A[16][16] (rows x keys of the step) and B assembled from the
// lanes' b registers as the PTX ISA distributes them: b0 = B[2t..2t+1][g], b1 = B[2t+8..][g].
void mma_ones(const double (&a)[16][16], const std::function<bool(int)>& ones, double (&d)[16][8]) {
  double b[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const double v = ones(lane) ? 1.0 : 0.0;
    for (int k : {2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9}) b[k][g] = v;
  }
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n) {
      d[i][n] = 0;
      for (int k = 0; k < 16; ++k) d[i][n] += a[i][k] * b[k][n];
    }
}

// How many (lane, row half, column) outputs differ from the sum of the lane's own elements.
int mismatches(const std::function<bool(int)>& ones) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> u(-1000, 1000);  // integers: sums exact in any order
  double a[16][16], d[16][8];
  for (auto& row : a)
    for (double& x : row) x = u(rng);
  mma_ones(a, ones, d);
  int bad = 0;
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int r = 0; r < 2; ++r) {
      // The lane's S'' of row g + 8 r in this step: n-tile 2 kp holds keys 2t, 2t + 1 (its C
      // register r), n-tile 2 kp + 1 keys 2t + 8, 2t + 9: A's a[r] and a[2 + r].
      const int row = g + 8 * r;
      const double own = a[row][2 * t] + a[row][2 * t + 1] + a[row][2 * t + 8] + a[row][2 * t + 9];
      for (int c = 0; c < 2; ++c) bad += d[row][2 * t + c] != own;  // both D columns it holds
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("PASA EFTA: the ones B operand sums each thread's own S'' of a key step",
          "[pasa][fragments]") {
  CHECK(mismatches(kernel_ones_b) == 0);
  // Wrong masks fail: every lane's ones, or the group taken from the column itself.
  CHECK(mismatches([](int) { return true; }) > 0);
  CHECK(mismatches([](int lane) { return lane % 4 == (lane / 4) % 4; }) > 0);
}
