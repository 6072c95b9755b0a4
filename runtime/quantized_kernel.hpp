// int8 and fp8_e4m3 kernels loaded with their quantisation kernels (one module), and launched
// on 16-bit tensors (quantised into a workspace the kernel owns) or on quantised operands.
#pragma once

#include <memory>

#include "ftattn/runtime.hpp"

namespace ftattn::runtime {

bool is_quantized(Precision p);

// Loads an int8 or fp8_e4m3 kernel. Throws NoDeviceError without a GPU.
std::shared_ptr<const Kernel> load_quantized_kernel(std::shared_ptr<const CompiledKernel> compiled);

}  // namespace ftattn::runtime
