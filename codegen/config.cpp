// KernelConfig and Problem as values: enum spellings, arch parsing, the canonical name and its
// parser, sizes, strides, flops and the hash. The rules a config must obey live in validate.cpp,
// the heuristic defaults in defaults.cpp.
#include "ftattn/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "codegen/checksum_atoms.hpp"
#include "codegen/swizzle_atom.hpp"
#include "ftattn/errors.hpp"
#include "runtime/hash.hpp"

namespace ftattn {

// Shared with validate.cpp (no private header to keep them in).
namespace detail {
std::string open_fields(const KernelConfig& config);
void require_complete(const KernelConfig& config, std::string_view action);
void check_arch(Arch arch, std::string_view as_written);
}  // namespace detail

namespace {

constexpr std::array kPrecisions = {Precision::f16, Precision::bf16, Precision::int8,
                                    Precision::f16_pasa, Precision::fp8_e4m3};
constexpr std::array kProtections = {Protection::none, Protection::flash_abft,
                                     Protection::efta_detect, Protection::efta_correct,
                                     Protection::decoupled};
constexpr std::array kMasks = {Mask::none, Mask::causal, Mask::block_sparse,
                               Mask::block_sparse_causal};
constexpr std::array kBackends = {Backend::nvrtc, Backend::llvm};
constexpr std::array kIrClasses = {IrClass::none,      IrClass::fp_arith, IrClass::load,
                                   IrClass::int_arith, IrClass::exp_max,  IrClass::mma};

// Every sm the project targets; 'a' is allowed on the ones in kArchSpecificSms.
constexpr std::array kSupportedSms = {80, 86, 87, 89, 90, 100, 120};
constexpr std::array kArchSpecificSms = {90, 100};

constexpr std::string_view kNamePrefix = "ftattn_fwd_";
constexpr std::string_view kNameShape =
    "ftattn_fwd_<arch>_<precision>_d<head_dim>_m<block_m>n<block_n>_w<num_warps>s<num_stages>_"
    "<mask>_<protection>";

template <typename T, size_t N>
bool contains(const std::array<T, N>& values, T v) {
  for (T x : values) {
    if (x == v) return true;
  }
  return false;
}

// The token form used inside canonical names: fields are split on '_', so tokens use '-'.
std::string dashed(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c == '_') c = '-';
  }
  return out;
}

template <typename Enum, size_t N>
Enum parse_enum(std::string_view what, std::string_view text, const std::array<Enum, N>& values) {
  for (Enum v : values) {
    if (text == to_string(v) || text == dashed(to_string(v))) return v;
  }
  std::string expected;
  for (Enum v : values) {
    if (!expected.empty()) expected += ", ";
    expected += to_string(v);
  }
  throw ConfigError(fmt::format("unknown {} '{}': expected one of {}", what, text, expected));
}

// The canonical name a kernel symbol (symbol(): every '-' written as '_') stands for: runs of
// tokens that spell a precision, mask or protection with '-' are joined again, and so is the
// LLVM route after "llvm". Only a hint for parse()'s error: names are read in their '-' form.
std::string name_of_symbol(std::string_view symbol) {
  std::vector<std::string> words;  // the '-' spellings that symbol() splits
  auto add = [&](std::string_view text) {
    if (dashed(text).find('-') != std::string::npos) words.push_back(dashed(text));
  };
  for (Precision p : kPrecisions) add(to_string(p));
  for (Mask m : kMasks) add(to_string(m));
  for (Protection p : kProtections) add(to_string(p));
  // Longest first: block-sparse-causal before block-sparse.
  std::sort(words.begin(), words.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });
  std::vector<std::string> tokens;
  for (size_t start = 0; start <= symbol.size();) {
    const size_t end = std::min(symbol.find('_', start), symbol.size());
    tokens.emplace_back(symbol.substr(start, end - start));
    start = end + 1;
  }
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string token = tokens[i];
    if (token == "llvm") {  // the route: one token of '-' parts to the end
      for (size_t j = i + 1; j < tokens.size(); ++j) token += "-" + tokens[j];
      i = tokens.size();
    } else {
      for (const std::string& w : words) {
        std::string joined = token;
        size_t j = i;
        while (joined.size() < w.size() && j + 1 < tokens.size()) joined += "-" + tokens[++j];
        if (joined == w) {
          token = joined;
          i = j;
          break;
        }
      }
    }
    out += (out.empty() ? "" : "_") + token;
  }
  return out;
}

// A positive decimal written the way name() writes it: digits only, no sign, no leading zero.
// Anything else (including values that overflow int) is nullopt.
std::optional<int> parse_positive(std::string_view text) {
  if (text.empty() || text.size() > 9 || text[0] == '0') return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string supported_arch_list() {
  std::string list;
  for (int sm : kSupportedSms) {
    if (!list.empty()) list += ", ";
    list += fmt::format("sm_{}", sm);
    if (contains(kArchSpecificSms, sm)) list += fmt::format(", sm_{}a", sm);
  }
  return list;
}

int element_bytes(Precision p) {
  switch (p) {
    case Precision::f16:
    case Precision::bf16:
    case Precision::f16_pasa:
      return 2;
    case Precision::int8:
    case Precision::fp8_e4m3:
      return 1;
  }
  throw ConfigError(fmt::format("invalid Precision value {}", static_cast<int>(p)));
}

}  // namespace

namespace detail {

// "head_dim, block_m, arch": the fields a resolver would still have to fill. Negative knobs are
// listed with their value since they are set, just invalid.
std::string open_fields(const KernelConfig& c) {
  std::string out;
  auto add = [&](std::string_view field, int value) {
    if (value > 0) return;
    if (!out.empty()) out += ", ";
    out += value == 0 ? std::string(field) : fmt::format("{} ({})", field, value);
  };
  add("head_dim", c.head_dim);
  add("block_m", c.block_m);
  add("block_n", c.block_n);
  add("num_warps", c.num_warps);
  add("num_stages", c.num_stages);
  if (c.arch.is_auto()) out += out.empty() ? "arch" : ", arch";
  return out;
}

void require_complete(const KernelConfig& c, std::string_view action) {
  // A negative knob is not "open": with_defaults would keep it, so say what is wrong instead.
  for (auto [field, value] : {std::pair<std::string_view, int>{"head_dim", c.head_dim},
                              {"block_m", c.block_m},
                              {"block_n", c.block_n},
                              {"num_warps", c.num_warps},
                              {"num_stages", c.num_stages}}) {
    if (value < 0) {
      throw ConfigError(
          fmt::format("{} is {}: knobs must be positive, or 0 to leave them open for with_defaults",
                      field, value));
    }
  }
  if (!c.is_complete()) {
    throw ConfigError(fmt::format(
        "cannot {} an incomplete kernel config: {} still open; Runtime::resolve or with_defaults "
        "fills them",
        action, open_fields(c)));
  }
}

void check_arch(Arch arch, std::string_view as_written) {
  if (arch.is_auto()) {
    throw ConfigError(
        "arch is auto: resolve it to the device's arch first (Runtime::resolve or with_defaults)");
  }
  if (!contains(kSupportedSms, arch.sm)) {
    throw ConfigError(fmt::format(
        "unsupported arch '{}': supported are {} (kernels need sm_80 or newer for mma.sync bf16)",
        as_written, supported_arch_list()));
  }
  if (arch.arch_specific && !contains(kArchSpecificSms, arch.sm)) {
    throw ConfigError(fmt::format(
        "sm_{}a: the 'a' suffix exists only for sm_90a and sm_100a: use sm_{}", arch.sm, arch.sm));
  }
}

}  // namespace detail

std::string_view to_string(Precision p) {
  switch (p) {
    case Precision::f16:
      return "f16";
    case Precision::bf16:
      return "bf16";
    case Precision::int8:
      return "int8";
    case Precision::f16_pasa:
      return "f16_pasa";
    case Precision::fp8_e4m3:
      return "fp8_e4m3";
  }
  throw ConfigError(fmt::format("invalid Precision value {}", static_cast<int>(p)));
}

std::string_view to_string(Protection p) {
  switch (p) {
    case Protection::none:
      return "none";
    case Protection::flash_abft:
      return "flash_abft";
    case Protection::efta_detect:
      return "efta_detect";
    case Protection::efta_correct:
      return "efta_correct";
    case Protection::decoupled:
      return "decoupled";
  }
  throw ConfigError(fmt::format("invalid Protection value {}", static_cast<int>(p)));
}

std::string_view to_string(Mask m) {
  switch (m) {
    case Mask::none:
      return "none";
    case Mask::causal:
      return "causal";
    case Mask::block_sparse:
      return "block_sparse";
    case Mask::block_sparse_causal:
      return "block_sparse_causal";
  }
  throw ConfigError(fmt::format("invalid Mask value {}", static_cast<int>(m)));
}

Precision parse_precision(std::string_view text) {
  return parse_enum("precision", text, kPrecisions);
}
Protection parse_protection(std::string_view text) {
  return parse_enum("protection", text, kProtections);
}
Mask parse_mask(std::string_view text) { return parse_enum("mask", text, kMasks); }

std::string_view to_string(Backend b) {
  switch (b) {
    case Backend::nvrtc:
      return "nvrtc";
    case Backend::llvm:
      return "llvm";
  }
  throw ConfigError(fmt::format("invalid Backend value {}", static_cast<int>(b)));
}

std::string_view to_string(IrClass c) {
  switch (c) {
    case IrClass::none:
      return "none";
    case IrClass::fp_arith:
      return "fp_arith";
    case IrClass::load:
      return "load";
    case IrClass::int_arith:
      return "int_arith";
    case IrClass::exp_max:
      return "exp_max";
    case IrClass::mma:
      return "mma";
  }
  throw ConfigError(fmt::format("invalid IrClass value {}", static_cast<int>(c)));
}

Backend parse_backend(std::string_view text) { return parse_enum("backend", text, kBackends); }
IrClass parse_ir_class(std::string_view text) { return parse_enum("IR class", text, kIrClasses); }

bool llvm_route_built() {
#ifdef FTATTN_WITH_LLVM
  return true;
#else
  return false;
#endif
}

std::string Arch::to_string() const {
  if (is_auto()) return "auto";
  return fmt::format("sm_{}{}", sm, arch_specific ? "a" : "");
}

Arch Arch::parse(std::string_view text) {
  // "auto" is what to_string() prints for the unset arch, so it reads back.
  if (text == "auto") return Arch{};
  std::string_view rest = text;
  if (rest.starts_with("sm_")) {
    rest.remove_prefix(3);
  } else if (rest.starts_with("sm")) {
    rest.remove_prefix(2);
  }
  Arch arch;
  if (rest.ends_with('a')) {
    arch.arch_specific = true;
    rest.remove_suffix(1);
  }
  std::optional<int> sm = parse_positive(rest);
  if (!sm) {
    throw ConfigError(fmt::format(
        "bad arch '{}': expected sm_<NN> or sm_<NN>a, e.g. sm_80, sm_86, sm_90a; supported are {}",
        text, supported_arch_list()));
  }
  arch.sm = *sm;
  detail::check_arch(arch, text);
  return arch;
}

int max_shared_memory_bytes(Arch arch) {
  detail::check_arch(arch, arch.to_string());
  // The per-block opt-in maximum (cudaFuncAttributeMaxDynamicSharedMemorySize).
  switch (arch.sm) {
    case 80:
    case 87:
      return 163 * 1024;
    case 86:
    case 89:
    case 120:
      return 99 * 1024;
    case 90:
    case 100:
      return 227 * 1024;
  }
  throw ConfigError(fmt::format("no shared memory limit recorded for {}", arch.to_string()));
}

bool uses_wgmma(const KernelConfig& c) {
  const bool q8 = c.precision == Precision::fp8_e4m3 || c.precision == Precision::int8;
  const bool b16 = c.precision == Precision::f16 || c.precision == Precision::bf16;
  // Head dims 192 and 256 in 16 bits: O's 96 or 128 registers fit only the warp-specialised
  // consumers, beside 64-key blocks (FwdWgmmaTraits). At 256 GEMM II (m64n256) has no room for a
  // checksum tile, so the checksum schemes and injection builds keep the sm80 skeleton there; at
  // 192 they take the same tile as the unprotected kernel (f16_pasa's only unprotected, below).
  const bool wide_tile = c.num_warps == 8 && c.block_n == 64;
  const bool wide16 = (b16 || c.precision == Precision::f16_pasa) &&
                      c.protection == Protection::none && !c.fault_injection && wide_tile;
  // Head dim 96 in 16 bits: rows of three 64-byte swizzle atoms (sm90::tile_offset), every tile.
  // Head dim 32 in 16 bits: rows of one 64-byte atom.
  const bool head_dim_ok = c.head_dim == 64 || c.head_dim == 128 || (c.head_dim == 96 && !q8) ||
                           (c.head_dim == 32 && !q8) || (c.head_dim == 256 && (q8 || wide16)) ||
                           (c.head_dim == 192 && (q8 || wide_tile));
  // The 16-bit skeleton also carries every checksum scheme and the fault-injection sites; the
  // 8-bit one-warpgroup skeleton Flash-ABFT (and its injection sites) at head dims 64 and 128,
  // whose checksum rows ride in GEMM II (kernel/fwd_q8_sm90.cuh), and int8 EFTA there, its K
  // checksum rows in GEMM I too.
  const bool q8_checked =
      c.protection == Protection::flash_abft ||
      (c.precision == Precision::int8 &&
       (c.protection == Protection::efta_detect || c.protection == Protection::efta_correct));
  const bool q8_protected =
      q8 && q8_checked && c.num_warps == 4 && (c.head_dim == 64 || c.head_dim == 128);
  const bool q8_ok =
      q8 && ((c.protection == Protection::none && !c.fault_injection) || q8_protected);
  const bool b16_ok = b16 && !is_block_sparse(c.mask) && c.protection != Protection::decoupled;
  // f16_pasa: unprotected on every tile (kernel/fwd_pasa_sm90.cuh, fwd_ws_sm90.cuh); with
  // Flash-ABFT, and with injection sites, on the warp-specialised tiles of two and three consumer
  // warpgroups (fwd_ws_sm90.cuh: the checksum tile beside O in GEMM II); with EFTA on two consumer
  // warpgroups up to head dim 128 (kernel/pasa_efta_sm90.cuh).
  const bool pasa_efta =
      c.protection == Protection::efta_detect || c.protection == Protection::efta_correct;
  const bool pasa_ws_tile = c.num_warps == 8 || c.num_warps == 12;
  const bool pasa_ok =
      c.precision == Precision::f16_pasa && !is_block_sparse(c.mask) &&
      (pasa_efta      ? c.num_warps == 8 && c.head_dim <= 128
       : pasa_ws_tile ? c.protection == Protection::none || c.protection == Protection::flash_abft
                      : c.protection == Protection::none && !c.fault_injection);
  return (q8_ok || b16_ok || pasa_ok) && head_dim_ok && c.arch.sm == 90 && c.arch.arch_specific &&
         c.backend == Backend::nvrtc && (c.block_n == 64 || c.block_n == 128) &&
         c.num_warps % 4 == 0 && c.block_m == 16 * c.num_warps && c.num_stages >= 2;
}

bool warp_specialized(const KernelConfig& c) {
  // 16-bit (kernel/fwd_ws_sm90.cuh): any protection and injection build on the wgmma skeleton.
  // 8-bit (kernel/fwd_q8_ws_sm90.cuh, Q8WgmmaTraits): on the wgmma skeleton, which is
  // unprotected, at head_dims 64 to 256.
  const bool q8 = element_bytes(c.precision) == 1;
  // Three consumer warpgroups (num_warps 12): f16_pasa, whose FP16 scores leave the registers
  // for a third, and f16 and bf16 unprotected or with Flash-ABFT, whose turn finishes GEMM II
  // before GEMM I (kernel/fwd_ws_sm90.cuh; Flash-ABFT's checksum tile costs a 4-byte spill).
  // EFTA's consumers spill 1.9-3 KB there at head dim 128 (136 bytes at 96) and ptxas serialises
  // their wgmmas; at head dims 32 and 64 they fit, and take the same split turn.
  const bool efta =
      c.protection == Protection::efta_detect || c.protection == Protection::efta_correct;
  const bool b16_three = (c.precision == Precision::f16 || c.precision == Precision::bf16) &&
                         (c.protection == Protection::none ||
                          c.protection == Protection::flash_abft || (efta && c.head_dim <= 64));
  const bool three = c.num_warps == 12 && (c.precision == Precision::f16_pasa || b16_three);
  return uses_wgmma(c) && (element_bytes(c.precision) == 2 || q8) && (c.num_warps == 8 || three);
}

bool q8_tensor_maps(const KernelConfig& c) {
  return element_bytes(c.precision) == 1 && uses_wgmma(c);
}

namespace {
// FwdWgmmaTraits::ones_tile: unprotected f16_pasa on three consumers at head dims up to 96 takes l
// from an n8 tile of ones beside O in GEMM II, in an atom after V's channels.
bool pasa_ones_tile(const KernelConfig& c) {
  return c.precision == Precision::f16_pasa && c.protection == Protection::none &&
         c.num_warps == 12 && c.head_dim <= 96 && warp_specialized(c);
}
// Q's tile and every stage's K and V tiles (FwdWgmmaTraits::loop_bytes with one Q buffer).
int64_t wgmma16_loop_bytes(const KernelConfig& c) {
  auto align = [](int64_t b) { return (b + 1023) / 1024 * 1024; };
  const int64_t row = 2 * int64_t{c.head_dim};
  // Checksums: EFTA's 8 rows per K atom below the keys, V's chunks in one more 128-byte atom
  // per key. f16_pasa: the shift rows of 8 blocks below the keys.
  const auto [k_atoms, v_atoms] = codegen::checksum_atoms(c.protection);
  const int64_t atom = codegen::swizzle_atom_bytes(static_cast<int>(row));
  const int64_t checksum_atom = v_atoms > 0 || pasa_ones_tile(c) ? atom * c.block_n : 0;
  const int64_t shift_rows = c.precision == Precision::f16_pasa ? 8 : 0;
  return align(c.block_m * row) +
         c.num_stages * (align((int64_t{c.block_n} + 8 * k_atoms + shift_rows) * row) +
                         align(c.block_n * row) + checksum_atom);
}
// Q's second buffer for persistent tiles (FwdWgmmaTraits::persistent), which then also holds
// the staged O; the warp-specialised skeleton's 256 bytes of mbarriers and the 1024 of
// alignment slack beside it must fit the sm_90 opt-in limit.
int64_t persistent_q_bytes(const KernelConfig& c) {
  return (int64_t{c.block_m} * 2 * c.head_dim + 1023) / 1024 * 1024;
}
bool persistent_fits(const KernelConfig& c) {
  return wgmma16_loop_bytes(c) + persistent_q_bytes(c) + 256 + 1024 <= 227 * 1024;
}
// FwdWgmmaTraits::tiles_bytes (kernel/fwd_sm90.cuh): swizzled Q, K and V tiles of 16-bit rows
// at 1024-byte boundaries, or the epilogue's padded O rows if more; persistent: two Q tiles,
// the epilogue staging O unpadded over its own.
int64_t wgmma16_tiles_bytes(const KernelConfig& c) {
  if (persistent_tiles(c)) return wgmma16_loop_bytes(c) + persistent_q_bytes(c);
  const int64_t out = int64_t{c.block_m} * (2 * int64_t{c.head_dim} + 16);
  return std::max(wgmma16_loop_bytes(c), out);
}
int64_t ctas_for(int64_t smem) { return 228 * 1024 / (smem + 1024); }
}  // namespace

bool persistent_tiles(const KernelConfig& c) {
  return warp_specialized(c) && (c.precision == Precision::f16 || c.precision == Precision::bf16) &&
         (c.mask == Mask::none || (c.mask == Mask::causal && c.num_warps == 8)) &&
         c.protection == Protection::none && !c.fault_injection &&
         (c.head_dim == 64 || c.head_dim == 128) && persistent_fits(c);
}

bool kv_tensor_maps(const KernelConfig& c) {
  if (element_bytes(c.precision) != 2 || !uses_wgmma(c)) return false;
  if (warp_specialized(c)) return true;
  // One warpgroup: unprotected, and only where the stage mbarriers cost no CTA per SM: up to
  // two stages in the alignment slack, three in 64 bytes more (FwdWgmmaTraits::kv_tma).
  const int64_t tiles = wgmma16_tiles_bytes(c) + 1024;
  return c.protection == Protection::none && !c.fault_injection &&
         (c.num_stages <= 2 || ctas_for(tiles + 64) == ctas_for(tiles));
}

bool lazy_int8_softmax(const KernelConfig& c) {
  return c.precision == Precision::int8 && uses_wgmma(c);
}

int launch_threads(const KernelConfig& c) {
  return 32 * c.num_warps + (warp_specialized(c) ? 128 : 0);
}

namespace {
// The rows of tile 0 where the ragged tile comes first (fwd_ws_sm90.cuh's kRaggedFirst: causal,
// block_m not a multiple of 128), else 0.
int ragged_first_rows(const KernelConfig& c, int seqlen_q) {
  const bool ragged_first = warp_specialized(c) && element_bytes(c.precision) == 2 &&
                            is_causal(c.mask) && c.block_m % 128 != 0;
  return ragged_first ? seqlen_q % c.block_m : 0;
}
}  // namespace

int query_tile_row0(const KernelConfig& c, int seqlen_q, int m_block) {
  const int ragged = ragged_first_rows(c, seqlen_q);
  return ragged > 0 && m_block > 0 ? ragged + (m_block - 1) * c.block_m : m_block * c.block_m;
}

int query_tile_of_row(const KernelConfig& c, int seqlen_q, int row) {
  const int ragged = ragged_first_rows(c, seqlen_q);
  if (ragged == 0) return row / c.block_m;
  return row < ragged ? 0 : 1 + (row - ragged) / c.block_m;
}

bool quantises_q_in_kernel(const KernelConfig& c) {
  return element_bytes(c.precision) == 1 && uses_wgmma(c) && c.head_dim <= 128;
}

bool KernelConfig::is_complete() const {
  return head_dim > 0 && block_m > 0 && block_n > 0 && num_warps > 0 && num_stages > 0 &&
         !arch.is_auto();
}

std::string KernelConfig::name() const {
  detail::require_complete(*this, "name");
  std::string route;
  if (backend == Backend::llvm) {
    route = "_llvm";
    if (ir_inject != IrClass::none) route += "-inject-" + dashed(to_string(ir_inject));
    if (ir_harden != IrClass::none) route += "-harden-" + dashed(to_string(ir_harden));
  }
  return fmt::format("{}sm{}{}_{}_d{}_m{}n{}_w{}s{}_{}_{}{}{}", kNamePrefix, arch.sm,
                     arch.arch_specific ? "a" : "", dashed(to_string(precision)), head_dim, block_m,
                     block_n, num_warps, num_stages, dashed(to_string(mask)),
                     dashed(to_string(protection)), fault_injection ? "_inj" : "", route);
}

std::string KernelConfig::symbol() const {
  std::string s = name();
  for (char& c : s) {
    if (c == '-') c = '_';
  }
  return s;
}

namespace {
KernelConfig parse_canonical(std::string_view name);
}  // namespace

KernelConfig KernelConfig::parse(std::string_view name) {
  try {
    return parse_canonical(name);
  } catch (const ConfigError& e) {
    // A kernel's symbol (as SASS and the cubin show it) pasted for its name: say which name.
    const std::string candidate = name_of_symbol(name);
    if (candidate != name) {
      try {
        parse_canonical(candidate);
      } catch (const ConfigError&) {
        throw e;
      }
      throw ConfigError(fmt::format(
          "{} (that looks like a kernel symbol, which writes '_' for the '-' inside fields: the "
          "name to give is '{}')",
          e.what(), candidate));
    }
    throw;
  }
}

namespace {
KernelConfig parse_canonical(std::string_view name) {
  auto fail = [&](std::string_view detail) {
    return ConfigError(fmt::format("bad kernel name '{}': {}", name, detail));
  };
  if (!name.starts_with(kNamePrefix)) {
    throw fail(
        fmt::format("it must start with '{}' (names look like {})", kNamePrefix, kNameShape));
  }

  // Fields are separated by '_'; no token contains '_' (enum tokens use '-'), so a plain split
  // finds them, and empty tokens from "__" or a trailing '_' show up as bad fields.
  std::string_view rest = name.substr(kNamePrefix.size());
  std::vector<std::string_view> tokens;
  while (!rest.empty()) {
    size_t end = rest.find('_');
    tokens.push_back(rest.substr(0, end));
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
    if (rest.empty()) tokens.push_back({});  // trailing '_'
  }

  constexpr std::array<std::string_view, 7> kFields = {
      "arch", "precision", "head_dim (d<N>)", "tile (m<N>n<N>)", "warps/stages (w<N>s<N>)",
      "mask", "protection"};
  auto token = [&](size_t i) {
    if (i >= tokens.size()) {
      throw fail(fmt::format("missing the {} field (names look like {})", kFields[i], kNameShape));
    }
    return tokens[i];
  };
  // Re-throws a sub-parser's error with the name in front.
  auto wrapped = [&](auto&& parse_field) {
    try {
      return parse_field();
    } catch (const ConfigError& e) {
      throw fail(e.what());
    }
  };
  // Reads "<p><N>" or "<p><N><q><M>" as written by name().
  auto number_after = [](std::string_view t, char p) -> std::optional<int> {
    if (t.empty() || t[0] != p) return std::nullopt;
    return parse_positive(t.substr(1));
  };
  auto number_pair = [&](std::string_view t, char p, char q) -> std::optional<std::pair<int, int>> {
    size_t split = t.find(q, 1);
    if (split == std::string_view::npos) return std::nullopt;
    auto a = number_after(t.substr(0, split), p);
    auto b = number_after(t.substr(split), q);
    if (!a || !b) return std::nullopt;
    return std::pair{*a, *b};
  };

  KernelConfig c;

  // Arch: only the canonical "sm<NN>" / "sm<NN>a" spelling, so that name(parse(s)) == s.
  std::string_view arch = token(0);
  {
    std::string_view digits = arch;
    bool specific = false;
    if (digits.starts_with("sm")) digits.remove_prefix(2);
    if (digits.ends_with('a')) {
      specific = true;
      digits.remove_suffix(1);
    }
    std::optional<int> sm = arch.starts_with("sm") ? parse_positive(digits) : std::nullopt;
    if (!sm) {
      throw fail(fmt::format("bad arch '{}': expected sm<NN> or sm<NN>a, e.g. sm80, sm90a", arch));
    }
    c.arch = Arch{*sm, specific};
    wrapped([&] { detail::check_arch(c.arch, arch); });
  }

  // Tokens are fetched outside wrapped() so a "missing field" error is not wrapped twice.
  const std::string_view precision = token(1);
  c.precision = wrapped([&] { return parse_precision(precision); });

  std::string_view d = token(2);
  if (auto v = number_after(d, 'd')) {
    c.head_dim = *v;
  } else {
    throw fail(fmt::format("malformed head_dim field '{}': expected d<head_dim>, e.g. d128", d));
  }

  std::string_view tile = token(3);
  if (auto v = number_pair(tile, 'm', 'n')) {
    std::tie(c.block_m, c.block_n) = *v;
  } else {
    throw fail(fmt::format("malformed tile field '{}': expected m<block_m>n<block_n>, e.g. m128n64",
                           tile));
  }

  std::string_view ws = token(4);
  if (auto v = number_pair(ws, 'w', 's')) {
    std::tie(c.num_warps, c.num_stages) = *v;
  } else {
    throw fail(fmt::format(
        "malformed warps/stages field '{}': expected w<num_warps>s<num_stages>, e.g. w4s2", ws));
  }

  const std::string_view mask = token(5);
  c.mask = wrapped([&] { return parse_mask(mask); });
  // Only the canonical '-' spelling can reach here: a '_' would have split the token.
  const std::string_view protection = token(6);
  c.protection = wrapped([&] { return parse_protection(protection); });

  // Optional trailing flags, in this order.
  size_t next = 7;
  if (next < tokens.size() && tokens[next] == "inj") {
    c.fault_injection = true;
    ++next;
  }
  if (next < tokens.size() && tokens[next].starts_with("llvm")) {
    c.backend = Backend::llvm;
    // "llvm", then "-inject-<class>" and "-harden-<class>" in that order; classes may hold '-'.
    std::string_view rest = tokens[next].substr(4);
    auto take_class = [&](std::string_view flag, IrClass& out) {
      if (!rest.starts_with(flag)) return;
      rest.remove_prefix(flag.size());
      size_t end = flag == "-inject-" ? rest.find("-harden-") : std::string_view::npos;
      const std::string_view cls = rest.substr(0, end);
      out = wrapped([&] { return parse_ir_class(cls); });
      if (out == IrClass::none)
        throw fail(fmt::format("'{}none' is spelled by leaving it out", flag));
      rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end);
    };
    take_class("-inject-", c.ir_inject);
    take_class("-harden-", c.ir_harden);
    if (!rest.empty()) {
      throw fail(fmt::format(
          "bad route token '{}': expected llvm, then optional -inject-<class> and -harden-<class>",
          tokens[next]));
    }
    ++next;
  }
  if (tokens.size() > next) {
    std::string junk;
    for (size_t i = next; i < tokens.size(); ++i) {
      junk += '_';
      junk += tokens[i];
    }
    throw fail(fmt::format(
        "trailing junk '{}' after the protection field (only _inj and then _llvm may follow it)",
        junk));
  }
  return c;
}
}  // namespace

int KernelConfig::shared_memory_bytes() const {
  if (head_dim <= 0 || block_m <= 0 || block_n <= 0 || num_stages <= 0) {
    throw ConfigError(fmt::format(
        "shared_memory_bytes needs head_dim, block_m, block_n and num_stages set (got d{} m{} "
        "n{} s{}): resolve the config first",
        head_dim, block_m, block_n, num_stages));
  }
  if (uses_wgmma(*this) && element_bytes(precision) == 2) {
    // FwdWgmmaTraits (kernel/fwd_sm90.cuh): swizzled Q, K and V tiles of 16-bit rows at
    // 1024-byte boundaries, the epilogue's padded O rows, 1024 bytes to align the dynamic base.
    // The mbarriers follow the tiles: the warp-specialised skeleton's, or the one-warpgroup
    // one's per stage where it copies K and V by TMA with three stages (with two they take the
    // alignment slack).
    const int64_t barriers = warp_specialized(*this)                   ? 256
                             : kv_tensor_maps(*this) && num_stages > 2 ? 64
                                                                       : 0;
    return static_cast<int>(
        std::min<int64_t>(wgmma16_tiles_bytes(*this) + barriers + 1024, INT_MAX));
  }
  if (uses_wgmma(*this)) {
    // Q8WgmmaTraits (kernel/fwd_q8_sm90.cuh): swizzled Q, K (+ a float per key) and V^T tiles
    // at 1024-byte boundaries, and 1024 bytes to align the dynamic base.
    auto align = [](int64_t b) { return (b + 1023) / 1024 * 1024; };
    // V^T, its tail (int8 efta_correct: and its own checksum rows' atom after it), and K (int8
    // EFTA: its checksum rows below the keys).
    const int tail_rows =
        precision == Precision::int8 && protection == Protection::efta_correct ? 16 : 8;
    const int64_t tail = align((int64_t{head_dim} + tail_rows) * block_n);
    const int64_t k_rows = codegen::q8_checksum_rows(*this).k;
    const int64_t stage = align(tail + (block_n + k_rows) * int64_t{head_dim});
    const int64_t loop = align(int64_t{block_m} * head_dim) + num_stages * stage;
    const int64_t out = int64_t{block_m} * (2 * int64_t{head_dim} + 16);
    // The warp-specialised skeleton's mbarriers follow the tiles, the one-warpgroup one's do
    // beyond two stages (with two they take the alignment slack).
    const int64_t barriers = warp_specialized(*this) ? 256 : num_stages > 2 ? 64 : 0;
    // int8 EFTA's second evaluation reads the rows' softmax factors from a copy of its own.
    const int64_t q_scales = k_rows > 0 ? int64_t{block_m} * 4 : 0;
    return static_cast<int>(
        std::min<int64_t>(std::max(loop, out) + barriers + q_scales + 1024, INT_MAX));
  }
  if (element_bytes(precision) == 1) {
    // The 8-bit skeleton (Q8Traits in kernel/fwd_q8_sm80.cuh; the generated unit asserts that the
    // two agree): Q and K rows of head_dim + 16 bytes, a float scale per key, V transposed into
    // head_dim rows of block_n + 16 bytes; the epilogue reuses it all for 16-bit O rows.
    // int8's checksum schemes append rows to K and V^T (protect/int8_checksums.cuh).
    const int64_t row = int64_t{head_dim} + 16;  // knobs not yet validated may be near INT_MAX
    const codegen::Q8ChecksumRows check = codegen::q8_checksum_rows(precision, protection);
    const int64_t v_rows = int64_t{head_dim} + check.v;
    const int64_t stage =
        int64_t{block_n} * (row + 4) + check.k * row + check.k16 * (2 * int64_t{head_dim} + 16) +
        v_rows * (int64_t{block_n} + 16) + check.v16 * (2 * int64_t{block_n} + 16);
    const int64_t loop = block_m * row + num_stages * stage;
    const int64_t out = int64_t{block_m} * (2 * int64_t{head_dim} + 16);
    return static_cast<int>(std::min<int64_t>(std::max(loop, out), INT_MAX));
  }
  // Q tile plus num_stages buffers each of K and V; rows padded by 8 elements against bank
  // conflicts. Checksum protections append 8 rows per K checksum to each K tile and 8 columns
  // per V checksum to every row (FwdTraits in kernel/fwd_sm80.cuh; generated units assert it).
  const auto [k_atoms, v_atoms] = codegen::checksum_atoms(protection);
  // f16_pasa K tiles carry one more row, the block's shift vector (PasaTraits in
  // kernel/fwd_pasa_sm80.cuh).
  const int shift_rows = precision == Precision::f16_pasa ? 1 : 0;
  const int64_t stride = int64_t{head_dim} + (v_atoms <= 1 ? 8 : 24);
  const int64_t rows =
      int64_t{block_m} + int64_t{num_stages} * (2 * int64_t{block_n} + 8 * k_atoms + shift_rows);
  const double approx = double(rows) * double(stride) * element_bytes(precision);
  if (approx > double(INT_MAX)) {
    throw ConfigError(fmt::format(
        "shared memory for block_m {}, block_n {}, num_stages {}, head_dim {} overflows int: "
        "lower them",
        block_m, block_n, num_stages, head_dim));
  }
  return static_cast<int>(rows * stride * element_bytes(precision));
}

Problem Problem::bhsd(int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k,
                      int head_dim) {
  Problem p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.head_dim = head_dim;
  const int64_t d = head_dim;
  p.q = Strides{int64_t{heads_q} * seqlen_q * d, int64_t{seqlen_q} * d, d};
  p.k = Strides{int64_t{heads_kv} * seqlen_k * d, int64_t{seqlen_k} * d, d};
  p.v = p.k;
  p.o = p.q;
  return p;
}

Problem Problem::bshd(int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k,
                      int head_dim) {
  Problem p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.head_dim = head_dim;
  const int64_t d = head_dim;
  p.q = Strides{int64_t{seqlen_q} * heads_q * d, d, int64_t{heads_q} * d};
  p.k = Strides{int64_t{seqlen_k} * heads_kv * d, d, int64_t{heads_kv} * d};
  p.v = p.k;
  p.o = p.q;
  return p;
}

float Problem::scale() const {
  if (softmax_scale > 0.0f) return softmax_scale;
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

// In int64: seqlen + block - 1 passes INT_MAX for blocks near it.
int Problem::block_mask_q_blocks() const {
  return sparse_block_m > 0
             ? static_cast<int>((int64_t{seqlen_q} + sparse_block_m - 1) / sparse_block_m)
             : 0;
}

int Problem::block_mask_k_blocks() const {
  return sparse_block_n > 0
             ? static_cast<int>((int64_t{seqlen_k} + sparse_block_n - 1) / sparse_block_n)
             : 0;
}

int64_t Problem::block_mask_head_bytes() const {
  return block_mask_head_stride >= 0
             ? block_mask_head_stride
             : int64_t{block_mask_q_blocks()} * int64_t{block_mask_k_blocks()};
}

size_t Problem::block_mask_bytes() const {
  return static_cast<size_t>(block_mask_head_bytes() * (heads_q - 1) +
                             int64_t{block_mask_q_blocks()} * block_mask_k_blocks());
}

double Problem::flops(Mask mask) const {
  if (seqlen_q <= 0 || seqlen_k <= 0) return 0.0;
  // Two matmuls (QK^T and PV) of 2 flops per multiply-add each.
  const double per_pair = 4.0 * batch * heads_q * head_dim;
  if (!is_causal(mask)) return per_pair * double(seqlen_q) * double(seqlen_k);

  // Causal, bottom-right aligned (FlashAttention-2): query i sees keys j <= i + (sk - sq), so
  // row i has clamp(i + 1 + sk - sq, 0, sk) keys. Sum that in closed form.
  const int64_t sq = seqlen_q, sk = seqlen_k;
  const int64_t first = 1 + sk - sq;  // keys of row 0 before clamping
  // Rows [lo, hi] have between 1 and sk-1 keys: first + i in (0, sk).
  const int64_t lo = std::max<int64_t>(0, 1 - first);
  const int64_t hi = std::min<int64_t>(sq - 1, sk - 1 - first);
  int64_t pairs = 0;
  if (lo <= hi) {
    const int64_t n = hi - lo + 1, ends = (first + lo) + (first + hi);
    // n * ends is even; halve the even factor first so the product stays within int64.
    pairs += n % 2 == 0 ? (n / 2) * ends : n * (ends / 2);
  }
  // Rows with i >= sk - first see every key.
  const int64_t full_from = std::max<int64_t>(0, sk - first);
  if (full_from < sq) pairs += (sq - full_from) * sk;
  return per_pair * double(pairs);
}

}  // namespace ftattn

size_t std::hash<ftattn::KernelConfig>::operator()(const ftattn::KernelConfig& c) const noexcept {
  uint64_t h = 0;
  for (int64_t field :
       {int64_t{c.head_dim}, int64_t{c.block_m}, int64_t{c.block_n}, int64_t{c.num_warps},
        int64_t{c.num_stages}, int64_t(c.precision), int64_t(c.protection), int64_t(c.mask),
        int64_t{c.arch.sm}, int64_t{c.arch.arch_specific}, int64_t{c.fault_injection},
        int64_t(c.backend), int64_t(c.ir_inject), int64_t(c.ir_harden)}) {
    h = ftattn::runtime::splitmix64(h ^ static_cast<uint64_t>(field));
  }
  return static_cast<size_t>(h);
}
