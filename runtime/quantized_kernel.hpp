// int8 and fp8_e4m3 kernels loaded with their quantisation kernels (one module), and launched
// on 16-bit tensors (quantised into a workspace the kernel owns) or on quantised operands.
#pragma once

#include <memory>

#include "ftattn/quantize.hpp"
#include "ftattn/runtime.hpp"

namespace ftattn::runtime {

bool is_quantized(Precision p);

// ConfigError when inputs quantize() made (`made`) do not fit a launch of `config` on `problem`:
// another precision, or other sizes (Q's only where the kernel reads quantised Q: !q_16bit).
void check_quantized_origin(const KernelConfig& config, const QuantizedInputs::Origin& made,
                            const Problem& problem, bool q_16bit);

// Loads an int8 or fp8_e4m3 kernel. Throws NoDeviceError without a GPU.
std::shared_ptr<const Kernel> load_quantized_kernel(std::shared_ptr<const CompiledKernel> compiled);

}  // namespace ftattn::runtime
