// The TMA tensor maps of the 8-bit Hopper kernel (q8_tensor_maps(config)), encoded per launch on
// the host over the operands an AttentionParams points at.
#pragma once

#include "ftattn/config.hpp"
#include "ftattn/params.cuh"

namespace ftattn::runtime {

// K, V^T and the K scales of `p` (dense 8-bit operands, AttentionParams' layout) as
// Q8TensorMaps' boxes for `config`'s tiles. Throws ConfigError when the operands break TMA's
// rules (16-byte aligned bases, strides that are multiples of 16 bytes) and DriverError when the
// driver refuses otherwise.
Q8TensorMaps encode_q8_tensor_maps(const KernelConfig& config, const AttentionParams& p);

}  // namespace ftattn::runtime
