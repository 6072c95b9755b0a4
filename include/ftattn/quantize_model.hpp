// Host model of the 8-bit kernels' numerics (int8, fp8_e4m3): the operand layout and key
// permutation the quantisation kernels write, E4M3 rounding, and one output row computed the
// way the kernel computes it (quantised Q, K, V with their scales, P quantised, l summed as the
// kernel sums it) but in double otherwise. Tests use it to pin the layout without a GPU and to
// bound each precision's error against the FP64 reference before any GPU run.
#pragma once

#include <vector>

#include "ftattn/config.hpp"
#include "ftattn/reference.hpp"

namespace ftattn::quant_model {

// Byte position of key k (0..15) within its group of 16 in a V^T row (params.cuh).
int permuted_key(int k);

// Round to the nearest E4M3 value (ties to even), saturated to +-448; subnormals down to 2^-9.
float round_e4m3(float x);

// The quantised value of x (already divided by its scale) as the precision stores it: int8
// rounds to nearest even and clamps to +-127; fp8_e4m3 rounds to E4M3.
float quantize_value(float x, Precision p);

// The largest quantised magnitude: 127 or 448.
float range(Precision p);

// One output row of `problem` as the int8 / fp8_e4m3 kernel computes it from 16-bit inputs
// (f16 storage; Q scaled per token, K per codegen::k_scale_block keys, V per channel), in double
// apart from the quantisation steps: the online softmax over blocks of
// `block_n` keys, P quantised against the running max. Masks: none or causal. `lazy_int8`: int8
// as the Hopper wgmma kernels compute it (codegen::lazy_int8_softmax): P unsigned, round(255 *
// 2^(logit - ref)) against a whole-number reference that moves to a block's max's ceiling only
// when that max exceeds it.
std::vector<double> attention_row(const Problem& problem, Precision p, Mask mask, int block_n,
                                  const reference::Tensor16& q, const reference::Tensor16& k,
                                  const reference::Tensor16& v, int b, int h, int row,
                                  bool lazy_int8 = false);

}  // namespace ftattn::quant_model
