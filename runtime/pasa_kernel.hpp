// f16_pasa kernels loaded with their key-shift kernel (one module) and launched on f16 tensors:
// each launch shifts K into a workspace the kernel owns, then runs the attention on it.
#pragma once

#include <cstddef>
#include <memory>

#include "ftattn/runtime.hpp"

namespace ftattn::runtime {

// Bytes of the shift workspace for `problem` and key blocks of `block_n`: the shifted keys
// (dense f16, batch x heads_kv x seqlen_k x head_dim) then the shift vectors (batch x heads_kv x
// ceil(seqlen_k / block_n) x head_dim), each 256-byte aligned.
struct PasaLayout {
  std::size_t k_shifted = 0, shift = 0, bytes = 0;
  static PasaLayout of(const Problem& problem, int block_n);
};

// Loads an f16_pasa kernel. Throws NoDeviceError without a GPU.
std::shared_ptr<const Kernel> load_pasa_kernel(std::shared_ptr<const CompiledKernel> compiled);

}  // namespace ftattn::runtime
