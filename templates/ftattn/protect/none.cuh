// Protection policy `none`. The skeleton calls these hooks at fixed points of the main loop;
// protection schemes (Flash-ABFT, EFTA) implement them. Here every hook is empty and compiles
// to nothing.
#pragma once

namespace ftattn::protect {

struct None {
  static constexpr bool enabled = false;
  static constexpr bool correct = false;
  static constexpr int k_atoms = 0;     // checksum tiles appended to K (GEMM I)
  static constexpr int v_atoms = 0;     // checksum tiles appended to V (GEMM II)
  static constexpr int digit_rows = 0;  // 8-bit skeleton: checksum rows appended to V^T
  static constexpr int k_rows = 0;      // 8-bit skeleton: checksum rows appended to K blocks
  static constexpr int f16_rows = 0;    // 8-bit skeleton: f16 checksum rows appended to V^T (fp8)
  static constexpr int k16_rows = 0;    // 8-bit skeleton: f16 checksum rows appended to K (fp8)
  static constexpr bool efta = false;   // 8-bit skeleton: EFTA's score and softmax checks
  static constexpr int ones_row = -1;   // 8-bit skeleton: the V^T row of ones (EFTA)
  // Unprotected f16_pasa's n8 tile of ones beside O (FwdWgmmaTraits::ones_tile): every column
  // group is (1, 0), so each lane holds l itself.
  __device__ static int ones_lane(int lane) { return lane; }
  __device__ static int second_ones_lane(int lane) { return lane; }

  struct State {};

  // After GEMM I: raw scores S = Q K^T of one key block, before masking and scaling.
  template <class Tile>
  __device__ __forceinline__ static void after_scores(State&, const Tile&, int /*n_block*/) {}
  // After max/exp: probabilities P of the block and the rescale factors of the running state.
  template <class Tile, class Rows>
  __device__ __forceinline__ static void after_probs(State&, const Tile&, const Rows&) {}
  // After GEMM II (O += P V) of one key block.
  template <class Acc>
  __device__ __forceinline__ static void after_pv(State&, const Acc&, int /*n_block*/) {}
  // Before normalisation and the store; a scheme verifies and reports here.
  template <class Acc, class Rows>
  __device__ __forceinline__ static void finish(State&, const Acc&, const Rows&) {}
};

}  // namespace ftattn::protect
