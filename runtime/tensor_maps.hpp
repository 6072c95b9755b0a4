// The TMA tensor maps of the 8-bit Hopper kernels (q8_tensor_maps(config)) and of the 16-bit
// ones (kv_tensor_maps(config)), encoded per launch on the host over the operands an
// AttentionParams points at.
#pragma once

#include "ftattn/config.hpp"
#include "ftattn/params.cuh"

namespace ftattn::runtime {

// K, V^T and the K scales of `p` (dense 8-bit operands, AttentionParams' layout) as
// Q8TensorMaps' boxes for `config`'s tiles. Throws ConfigError when the operands break TMA's
// rules (16-byte aligned bases, strides that are multiples of 16 bytes) and DriverError when the
// driver refuses otherwise.
Q8TensorMaps encode_q8_tensor_maps(const KernelConfig& config, const AttentionParams& p);

// K and V of `p` (16-bit, AttentionParams' strides; f16_pasa: the shifted keys and their shift
// rows, so encode after the shift has pointed p at them) as KvTensorMaps' boxes for `config`'s
// tiles. Throws ConfigError on operands TMA cannot copy (unaligned, zero or odd strides) and
// DriverError when the driver refuses otherwise.
KvTensorMaps encode_kv_tensor_maps(const KernelConfig& config, const AttentionParams& p);

}  // namespace ftattn::runtime
