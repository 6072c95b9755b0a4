// KernelConfig -> instantiation unit. Only constants, types and policy names are filled in;
// the algorithm lives in templates/.
#include <fmt/format.h>

#include "codegen/decoupled_source.hpp"
#include "ftattn/codegen.hpp"
#include "ftattn/errors.hpp"
#include "ftattn/pasa.hpp"
#include "ftattn/quantize_params.cuh"

namespace ftattn::codegen {
namespace {

struct PrecisionPolicy {
  const char* header;
  const char* type;
};

PrecisionPolicy precision_policy(Precision p) {
  switch (p) {
    case Precision::f16:
      return {"ftattn/precision/f16.cuh", "ftattn::precision::F16"};
    case Precision::bf16:
      return {"ftattn/precision/bf16.cuh", "ftattn::precision::BF16"};
    case Precision::int8:
      return {"ftattn/precision/int8.cuh", "ftattn::precision::Int8"};
    case Precision::fp8_e4m3:
      return {"ftattn/precision/fp8_e4m3.cuh", "ftattn::precision::Fp8E4M3"};
    case Precision::f16_pasa:
      return {"ftattn/precision/f16_pasa.cuh", "ftattn::precision::F16Pasa"};
    default:
      break;
  }
  // validate() rejects these first; reaching here is a bug in the two lists disagreeing.
  throw ConfigError(fmt::format("precision {} has no code generator", to_string(p)));
}

PrecisionPolicy protection_policy(Protection p) {
  switch (p) {
    case Protection::none:
      return {"ftattn/protect/none.cuh", "ftattn::protect::None"};
    case Protection::flash_abft:
      return {"ftattn/protect/checksum.cuh",
              "ftattn::protect::Checksum<ftattn::protect::Scheme::flash_abft>"};
    case Protection::efta_detect:
      return {"ftattn/protect/checksum.cuh",
              "ftattn::protect::Checksum<ftattn::protect::Scheme::efta_detect>"};
    case Protection::efta_correct:
      return {"ftattn/protect/checksum.cuh",
              "ftattn::protect::Checksum<ftattn::protect::Scheme::efta_correct>"};
    default:
      break;
  }
  throw ConfigError(fmt::format("protection {} has no code generator", to_string(p)));
}

// The 8-bit skeleton's checksum schemes: int8's exact INT32 digit rows or fp8's f16 rows.
PrecisionPolicy q8_protection_policy(Precision precision, Protection p) {
  const bool fp8 = precision == Precision::fp8_e4m3;
  const char* header =
      fp8 ? "ftattn/protect/fp8_checksums.cuh" : "ftattn/protect/int8_checksums.cuh";
  switch (p) {
    case Protection::flash_abft:
      return {header, fp8 ? "ftattn::protect::Fp8Abft" : "ftattn::protect::Int8Abft"};
    case Protection::efta_detect:
      return {header, fp8 ? "ftattn::protect::Fp8Efta<false>" : "ftattn::protect::Int8Efta<false>"};
    case Protection::efta_correct:
      return {header, fp8 ? "ftattn::protect::Fp8Efta<true>" : "ftattn::protect::Int8Efta<true>"};
    default:
      break;
  }
  throw ConfigError(
      fmt::format("protection {} has no {} code generator", to_string(p), to_string(precision)));
}

// The name for `config`'s skeleton among the warp-specialised Hopper one, the wgmma one and the
// mma.sync one; and its kernel's launch bounds (the producer warpgroup on top of num_warps; the
// CTAs per SM the wgmma traits fit registers to).
const char* per_skeleton(const KernelConfig& config, const char* ws, const char* wgmma,
                         const char* sm80) {
  return warp_specialized(config) ? ws : uses_wgmma(config) ? wgmma : sm80;
}
const char* launch_bounds(const KernelConfig& config) {
  return per_skeleton(config, "Traits::launch_threads, 1", "Traits::threads, Traits::min_ctas",
                      "Traits::threads");
}

// Unprotected fp8 on Ada's mma.sync skeleton, eight warps, head dims 64 and 128: two CTAs per SM,
// as before each key block's P V got its own FP32 tile (kernel/fwd_q8_sm80.cuh), whose registers
// took head dim 128 to 132 per thread and one CTA per SM (ptxas -v: no spills at 128; head dim 96,
// the checked kernels and sm_90's f16 emulation of the e4m3 MMA spill under the cap, so they keep
// their own counts).
bool fp8_two_ctas(const KernelConfig& c) {
  return c.precision == Precision::fp8_e4m3 && c.arch.sm < 90 && c.num_warps == 8 &&
         (c.head_dim == 64 || c.head_dim == 128) && c.protection == Protection::none &&
         !c.fault_injection;
}

// 8-bit precisions run their own skeleton; its unit also carries the quantisation kernels.
bool is_8bit(Precision p) { return p == Precision::int8 || p == Precision::fp8_e4m3; }

// The wgmma skeletons that copy by TMA take their tensor maps as a second, __grid_constant__
// parameter: the 8-bit ones K, its scales and V^T (q8_tensor_maps), the 16-bit ones K and V
// (kv_tensor_maps).
std::string maps_param(const KernelConfig& config) {
  if (q8_tensor_maps(config)) return ", const __grid_constant__ ftattn::Q8TensorMaps maps";
  if (kv_tensor_maps(config)) return ", const __grid_constant__ ftattn::KvTensorMaps maps";
  return "";
}
std::string maps_arg(const KernelConfig& config) {
  return q8_tensor_maps(config) || kv_tensor_maps(config) ? ", maps" : "";
}
// The 16-bit wgmma skeletons decide for themselves whether they copy by TMA
// (FwdWgmmaTraits::kv_tma) and walk tiles persistently (::persistent): the unit checks they take
// the maps it is given and the grid the launch gives them.
std::string kv_tma_assert(const KernelConfig& config) {
  if (!uses_wgmma(config) || is_8bit(config.precision)) return "";
  return fmt::format(
      "\nstatic_assert(Traits::kv_tma == {}, \"codegen's kv_tensor_maps disagrees\");"
      "\nstatic_assert(Traits::persistent == {}, \"codegen's persistent_tiles disagrees\");",
      kv_tensor_maps(config), persistent_tiles(config));
}

std::string generate_8bit(const KernelConfig& config, const PrecisionPolicy& precision,
                          const PrecisionPolicy& protect, const std::string& name,
                          const std::string& symbol) {
  const bool wgmma = uses_wgmma(config);
  std::string text = fmt::format(
      R"(// {name}
// Generated by ftattn codegen: the 8-bit forward skeleton and its quantisation kernels.
#include "ftattn/kernel/{skeleton_header}"
#include "ftattn/kernel/quantize_sm80.cuh"
#include "{precision_header}"
#include "{protect_header}"

using Traits = ftattn::{traits}<
    /*head_dim=*/{head_dim}, /*block_m=*/{block_m}, /*block_n=*/{block_n},
    /*num_warps=*/{num_warps}, /*num_stages=*/{num_stages},
    {precision_type}, {protect_and_flags}>;
static_assert(Traits::smem_bytes == {smem}, "KernelConfig::shared_memory_bytes disagrees");{tma_assert}

extern "C" __global__ void __launch_bounds__({launch_bounds})
{symbol}(const ftattn::AttentionParams params{maps_param}) {{
  ftattn::{skeleton}<Traits>(params{maps_arg});
}}
)",
      fmt::arg("launch_bounds",
               fp8_two_ctas(config) ? "Traits::threads, 2" : launch_bounds(config)),
      fmt::arg("maps_param", maps_param(config)), fmt::arg("maps_arg", maps_arg(config)),
      fmt::arg("tma_assert", kv_tma_assert(config)),
      fmt::arg("skeleton_header",
               per_skeleton(config, "fwd_q8_ws_sm90.cuh", "fwd_q8_sm90.cuh", "fwd_q8_sm80.cuh")),
      fmt::arg("traits", wgmma ? "Q8WgmmaTraits" : "Q8Traits"),
      fmt::arg("skeleton", per_skeleton(config, "attention_fwd_q8_ws_sm90", "attention_fwd_q8_sm90",
                                        "attention_fwd_q8_sm80")),
      fmt::arg("protect_and_flags", fmt::format("{}, /*causal=*/{}, /*inject=*/{}", protect.type,
                                                is_causal(config.mask), config.fault_injection)),
      fmt::arg("name", name), fmt::arg("precision_header", precision.header),
      fmt::arg("protect_header", protect.header), fmt::arg("head_dim", config.head_dim),
      fmt::arg("block_m", config.block_m), fmt::arg("block_n", config.block_n),
      fmt::arg("num_warps", config.num_warps), fmt::arg("num_stages", config.num_stages),
      fmt::arg("precision_type", precision.type), fmt::arg("smem", config.shared_memory_bytes()),
      fmt::arg("symbol", symbol));
  if (config.protection != Protection::none)
    text += fmt::format(
        "\n// Checksum rows of V^T ({}), after pack_v.\n"
        "extern \"C\" __global__ void __launch_bounds__(128)\n"
        "{}(const ftattn::Q8ChecksumParams params) {{\n"
        "  {}(params);\n}}\n",
        protect.header, q8_v_rows_symbol(symbol),
        config.precision != Precision::fp8_e4m3
            ? (wgmma && config.protection == Protection::efta_correct
                   ? fmt::format("ftattn::protect::int8_v_wgmma_rows<{}>", config.head_dim)
                   : fmt::format("ftattn::protect::int8_v_rows<{}, Traits::Protect>",
                                 config.head_dim))
        : wgmma ? fmt::format("ftattn::protect::fp8_v_digit_rows<{}>", config.head_dim)
                : fmt::format("ftattn::protect::fp8_v_rows<{}, Traits::Protect>", config.head_dim));
  if (config.protection == Protection::efta_detect || config.protection == Protection::efta_correct)
    text += fmt::format(
        "\n// EFTA: the checksum rows of every K block ({}), after quantize_rows.\n"
        "extern \"C\" __global__ void __launch_bounds__(128)\n"
        "{}(const ftattn::Q8ChecksumParams params) {{\n"
        "  {}(params);\n}}\n",
        protect.header, q8_k_rows_symbol(symbol),
        config.precision == Precision::fp8_e4m3
            ? fmt::format("ftattn::protect::fp8_k_rows<{}, {}, Traits::Protect>", config.head_dim,
                          config.block_n)
            // The wgmma kernel's efta_correct reads efta_detect's rows (Q8WgmmaTraits).
            : fmt::format("ftattn::protect::int8_k_rows<{}, {}, {}>", config.head_dim,
                          config.block_n,
                          wgmma ? "ftattn::protect::Int8Efta<false>" : "Traits::Protect"));
  for (const char* input : {"F16", "BF16"})
    for (const char* kernel : {"quantize_rows", "quantize_key_blocks", "v_channel_max", "pack_v"}) {
      if (std::string_view(kernel) == "quantize_key_blocks" && k_scale_block(config.precision) == 1)
        continue;  // int8 keeps per-token K scales (INT-FlashAttention's)
      text += fmt::format(
          "extern \"C\" __global__ void __launch_bounds__(128)\n"
          "{}(const ftattn::QuantizeParams params) {{\n"
          "  ftattn::{}<ftattn::quant::{}In, {}, {}>(params);\n}}\n",
          quantize_symbol(symbol, kernel, input[0] == 'B' ? Precision::bf16 : Precision::f16),
          kernel, input, precision.type, config.head_dim);
    }
  // Hopper and later: V in one pass by clusters of CTAs (kernel/quantize_v_sm90.cuh).
  if (config.arch.sm >= 90 && quantize_v_head_dim(config.head_dim)) {
    text += "#include \"ftattn/kernel/quantize_v_sm90.cuh\"\n";
    for (Precision input : {Precision::f16, Precision::bf16})
      text += fmt::format(
          "extern \"C\" __global__ void __cluster_dims__(ftattn::kQuantizeVCtas, 1, 1)\n"
          "__launch_bounds__(ftattn::kQuantizeVThreads) {}(const ftattn::QuantizeParams params) "
          "{{\n"
          "  ftattn::quantize_v<ftattn::quant::{}In, {}, {}>(params);\n}}\n",
          quantize_symbol(symbol, "quantize_v", input), input == Precision::bf16 ? "BF16" : "F16",
          precision.type, config.head_dim);
  }
  return text;
}

// Checksum schemes: the kernel that writes every KV head's checksums before the attention runs
// (protect/checksum.cuh), instantiated on the unit's Traits. Empty for protection none.
std::string checksum_prologue(const KernelConfig& config, const std::string& symbol) {
  if (config.protection == Protection::none) return {};
  return fmt::format(
      "\n// The checksums of every KV head, written before the attention kernel runs.\n"
      "extern \"C\" __global__ void __launch_bounds__(Traits::threads)\n"
      "{}(const ftattn::AttentionParams params) {{\n"
      "  ftattn::protect::checksum_prologue<Traits>(params);\n}}\n",
      checksum_symbol(symbol));
}

// f16/bf16: the sm80 skeleton, or on Hopper's warpgroup MMAs the sm90 one (kernel/fwd_sm90.cuh:
// unprotected or Flash-ABFT, no block-sparse masks), whose traits take the same parameters.
std::string generate_16bit(const KernelConfig& config, const PrecisionPolicy& precision,
                           const PrecisionPolicy& protect, const std::string& name,
                           const std::string& symbol) {
  const bool wgmma = uses_wgmma(config);
  return fmt::format(
      R"(// {name}
// Generated by ftattn codegen: one instantiation of the {arch} forward skeleton.
#include "ftattn/kernel/{skeleton_header}"
#include "{precision_header}"
#include "{protect_header}"

using Traits = ftattn::{traits}<
    /*head_dim=*/{head_dim}, /*block_m=*/{block_m}, /*block_n=*/{block_n},
    /*num_warps=*/{num_warps}, /*num_stages=*/{num_stages},
    {precision_type}, {protect_type}, /*causal=*/{causal}, /*block_sparse=*/{block_sparse},
    /*inject=*/{inject}>;
static_assert(Traits::smem_bytes == {smem}, "KernelConfig::shared_memory_bytes disagrees");{tma_assert}

extern "C" __global__ void __launch_bounds__({launch_bounds})
{symbol}(const ftattn::AttentionParams params{maps_param}) {{
  ftattn::{skeleton}<Traits>(params{maps_arg});
}}
{prologue})",
      fmt::arg("name", name),
      fmt::arg("arch",
               per_skeleton(config, "sm90 (wgmma, warp-specialised)", "sm90 (wgmma)", "sm80")),
      fmt::arg("skeleton_header",
               per_skeleton(config, "fwd_ws_sm90.cuh", "fwd_sm90.cuh", "fwd_sm80.cuh")),
      fmt::arg("traits", wgmma ? "FwdWgmmaTraits" : "FwdTraits"),
      fmt::arg("skeleton", per_skeleton(config, "attention_fwd_ws_sm90", "attention_fwd_sm90",
                                        "attention_fwd_sm80")),
      fmt::arg("launch_bounds", launch_bounds(config)),
      fmt::arg("precision_header", precision.header), fmt::arg("protect_header", protect.header),
      fmt::arg("head_dim", config.head_dim), fmt::arg("block_m", config.block_m),
      fmt::arg("block_n", config.block_n), fmt::arg("num_warps", config.num_warps),
      fmt::arg("num_stages", config.num_stages), fmt::arg("precision_type", precision.type),
      fmt::arg("protect_type", protect.type),
      fmt::arg("causal", is_causal(config.mask) ? "true" : "false"),
      fmt::arg("block_sparse", is_block_sparse(config.mask) ? "true" : "false"),
      fmt::arg("inject", config.fault_injection ? "true" : "false"), fmt::arg("symbol", symbol),
      fmt::arg("smem", config.shared_memory_bytes()), fmt::arg("maps_param", maps_param(config)),
      fmt::arg("maps_arg", maps_arg(config)), fmt::arg("tma_assert", kv_tma_assert(config)),
      fmt::arg("prologue", checksum_prologue(config, symbol)));
}

// f16_pasa: the PASA skeleton (protection none, flash_abft, efta_detect or efta_correct) and its
// key-shift kernel, with beta baked in.
std::string generate_pasa(const KernelConfig& config, const PrecisionPolicy& protect,
                          const std::string& name, const std::string& symbol) {
  const bool wgmma = uses_wgmma(config);
  return fmt::format(
      R"(// {name}
// Generated by ftattn codegen: the PASA forward (FP16 scores, {arch}) and its key-shift kernel.
#include "ftattn/kernel/{skeleton_header}"
#include "{protect_header}"

// PASA's beta for block_n = {block_n} and f16 storage: the fixed point of eq. 22 from 1 - 2^-6.
constexpr float kPasaBeta = {beta:.9g}f;

using Traits = ftattn::{traits}<
    /*head_dim=*/{head_dim}, /*block_m=*/{block_m}, /*block_n=*/{block_n},
    /*num_warps=*/{num_warps}, /*num_stages=*/{num_stages},
    /*causal=*/{causal}, /*block_sparse=*/{block_sparse}, {protect_type},
    /*inject=*/{inject}>;
static_assert(Traits::smem_bytes == {smem}, "KernelConfig::shared_memory_bytes disagrees");{tma_assert}

extern "C" __global__ void __launch_bounds__({launch_bounds})
{symbol}(const ftattn::AttentionParams params{maps_param}) {{
  ftattn::{skeleton}<Traits>(params{maps_arg});
}}

// K' = scale_log2 * (K - r_j) and r_j = beta * mean of key block j, once per call.
extern "C" __global__ void __launch_bounds__(Traits::shift_threads)
{shift_symbol}(const ftattn::PasaShiftParams params) {{
  ftattn::pasa_shift_sm80<Traits>(params, kPasaBeta);
}}
{prologue})",
      fmt::arg("name", name),
      fmt::arg("arch", per_skeleton(config, "sm90 wgmma, warp-specialised", "sm90 wgmma", "sm80")),
      fmt::arg("skeleton_header", wgmma ? "fwd_pasa_sm90.cuh" : "fwd_pasa_sm80.cuh"),
      fmt::arg("traits", wgmma ? "PasaWgmmaTraits" : "PasaTraits"),
      fmt::arg("skeleton", per_skeleton(config, "attention_fwd_ws_sm90", "attention_fwd_pasa_sm90",
                                        "attention_fwd_pasa_sm80")),
      fmt::arg("launch_bounds", launch_bounds(config)), fmt::arg("head_dim", config.head_dim),
      fmt::arg("block_m", config.block_m), fmt::arg("block_n", config.block_n),
      fmt::arg("num_warps", config.num_warps), fmt::arg("num_stages", config.num_stages),
      fmt::arg("beta", pasa_beta(config.block_n)),
      fmt::arg("causal", is_causal(config.mask) ? "true" : "false"),
      fmt::arg("block_sparse", is_block_sparse(config.mask) ? "true" : "false"),
      fmt::arg("inject", config.fault_injection ? "true" : "false"),
      fmt::arg("smem", config.shared_memory_bytes()), fmt::arg("symbol", symbol),
      fmt::arg("shift_symbol", pasa_shift_symbol(symbol)),
      fmt::arg("protect_header", protect.header), fmt::arg("protect_type", protect.type),
      fmt::arg("maps_param", maps_param(config)), fmt::arg("maps_arg", maps_arg(config)),
      fmt::arg("tma_assert", kv_tma_assert(config)),
      fmt::arg("prologue", checksum_prologue(config, symbol)));
}

}  // namespace

std::string pasa_shift_symbol(const std::string& kernel_symbol) {
  // Not prefixed by the kernel's symbol: ptxas logs are read by symbol prefix.
  return "pasa_shift_" + kernel_symbol;
}

double pasa_beta(int block_n) {
  return pasa::optimal_beta(1.0 - 1.0 / 64, block_n, Precision::f16);
}

std::string nvrtc_arch(Arch arch) {
  return fmt::format("sm_{}{}", arch.sm, arch.arch_specific ? "a" : "");
}

std::string q8_v_rows_symbol(const std::string& kernel_symbol) {
  // Not prefixed by the kernel's symbol: ptxas logs are read by symbol prefix.
  return "q8_v_rows_" + kernel_symbol;
}

std::string q8_k_rows_symbol(const std::string& kernel_symbol) {
  // Not prefixed by the kernel's symbol: ptxas logs are read by symbol prefix.
  return "q8_k_rows_" + kernel_symbol;
}

std::string checksum_symbol(const std::string& kernel_symbol) {
  // Not prefixed by the kernel's symbol: ptxas logs are read by symbol prefix.
  return "checksums_" + kernel_symbol;
}

std::string quantize_symbol(const std::string& kernel_symbol, std::string_view kernel,
                            Precision input) {
  // Named after the kernel, not prefixed by its symbol: ptxas logs are read by symbol prefix.
  return fmt::format("{}_{}_{}", kernel, to_string(input), kernel_symbol);
}

int k_scale_block(Precision precision) { return precision == Precision::fp8_e4m3 ? 64 : 1; }

KernelSource generate(const KernelConfig& config) {
  validate(config);
  if (config.protection == Protection::decoupled) {  // three kernels of its own
    KernelSource out;
    out.name = config.name();
    out.symbol = config.symbol();
    out.text = decoupled_source(config, out.name, out.symbol);
    out.options = {"--gpu-architecture=" + nvrtc_arch(config.arch), "--std=c++17", "-lineinfo",
                   "-Xptxas=-v", "-default-device"};
    return out;
  }
  const PrecisionPolicy precision = precision_policy(config.precision);
  // The 8-bit skeleton's checksum schemes are their own policies: exact INT32 digit checksums.
  const PrecisionPolicy protect = is_8bit(config.precision) && config.protection != Protection::none
                                      ? q8_protection_policy(config.precision, config.protection)
                                      : protection_policy(config.protection);
  KernelSource out;
  out.name = config.name();
  out.symbol = config.symbol();
  out.text = is_8bit(config.precision)
                 ? generate_8bit(config, precision, protect, out.name, out.symbol)
             : config.precision == Precision::f16_pasa
                 ? generate_pasa(config, protect, out.name, out.symbol)
                 : generate_16bit(config, precision, protect, out.name, out.symbol);
  out.options = {"--gpu-architecture=" + nvrtc_arch(config.arch), "--std=c++17", "-lineinfo",
                 "-Xptxas=-v", "-default-device"};
  if (config.backend == Backend::llvm) use_llvm_route(config, out);
  return out;
}

}  // namespace ftattn::codegen
