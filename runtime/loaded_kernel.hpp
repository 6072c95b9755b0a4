// A CompiledKernel loaded into the current context with the Driver API, and its launch.
#pragma once

#include <memory>

#include "ftattn/params.cuh"
#include "ftattn/runtime.hpp"

namespace ftattn::runtime {

// Throws NoDeviceError without a GPU, DriverError if the image does not load.
std::shared_ptr<const Kernel> load_kernel(std::shared_ptr<const CompiledKernel> compiled);

// K's and V's fields of the kernel parameters for `problem`, and the softmax scale (what the work
// on K and V alone reads: a checksum prologue, f16_pasa's shift);
// throws ConfigError for a problem the kernel cannot run (shape mismatch, misaligned pointers or
// strides).
AttentionParams kv_params(const Problem& problem, const KernelConfig& config, const void* k,
                          const void* v);
// The kernel parameters for `problem`; throws ConfigError for a problem the kernel cannot run
// (shape mismatch, misaligned pointers or strides).
AttentionParams make_params(const Problem& problem, const KernelConfig& config, const void* q,
                            const void* k, const void* v, void* o, float* lse,
                            const unsigned char* block_mask = nullptr);

}  // namespace ftattn::runtime
