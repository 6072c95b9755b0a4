// Code generation: a complete KernelConfig -> a small, readable CUDA instantiation unit over the
// embedded templates. Same config, byte-identical source.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ftattn/config.hpp"

namespace ftattn::codegen {

struct KernelSource {
  std::string name;                  // canonical kernel name
  std::string symbol;                // extern "C" entry point
  std::string text;                  // the generated unit (includes the templates)
  std::vector<std::string> options;  // compiler options (NVRTC's, or clang's), arch included
  Backend backend = Backend::nvrtc;  // which compiler the options are for
  std::vector<std::string> passes;   // LLVM route: the IR pass stages, in order
};

// Validates `config` (ConfigError on failure) and emits its source.
KernelSource generate(const KernelConfig& config);

// NVRTC's name for an arch: "sm_90a".
std::string nvrtc_arch(Arch arch);

// The LLVM route's IR pass stages for `config`: inline, O3, FMA contraction, hardening and
// injection when asked for, statistics. Part of the cache key.
std::vector<std::string> llvm_passes(const KernelConfig& config);

// Turns NVRTC's source into the LLVM route's: clang options (its -D defines kept) and passes.
void use_llvm_route(const KernelConfig& config, KernelSource& source);

// The protection prologue that writes a call's checksums (protected configs only).
std::string checksum_symbol(const std::string& kernel_symbol);
// 8-bit configs with a checksum scheme: the kernel that writes V^T's checksum rows, and (EFTA)
// the one that writes every K block's (protect/int8_checksums.cuh, protect/fp8_checksums.cuh).
std::string q8_v_rows_symbol(const std::string& kernel_symbol);
std::string q8_k_rows_symbol(const std::string& kernel_symbol);

// int8 and fp8_e4m3 units also hold the quantisation kernels (kernel/quantize_sm80.cuh) for
// f16 and bf16 inputs: `kernel` is "quantize_rows", "quantize_key_blocks" (fp8_e4m3 only),
// "v_channel_max", "pack_v" or (sm_90 and later, kernel/quantize_v_sm90.cuh) "quantize_v",
// `input` f16 or bf16. E.g. "pack_v_bf16_<symbol>".
std::string quantize_symbol(const std::string& kernel_symbol, std::string_view kernel,
                            Precision input);

// Keys that share one K scale in an 8-bit precision's quantised operands: 64 for fp8_e4m3 (its
// Hopper kernel folds a block's scale into the exponent's FMA), 1 (per token) for int8.
int k_scale_block(Precision precision);

// f16_pasa units also hold the key-shift kernel (kernel/fwd_pasa_sm80.cuh) that writes the
// shifted keys and per-block shift vectors before each launch: "pasa_shift_<symbol>".
std::string pasa_shift_symbol(const std::string& kernel_symbol);

// The PASA beta an f16_pasa unit bakes in for `block_n`: the fixed point of PASA eq. 22 from
// 1 - 2^-6 for f16 storage (ftattn/pasa.hpp; 0.984497 at block_n 128, as in the paper).
double pasa_beta(int block_n);

}  // namespace ftattn::codegen
