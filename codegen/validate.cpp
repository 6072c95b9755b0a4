// Every rule a kernel config and a problem must obey, in one place. Each message names the field
// and says what to change.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "ftattn/config.hpp"
#include "ftattn/errors.hpp"

namespace ftattn {

// Defined in config.cpp.
namespace detail {
void require_complete(const KernelConfig& config, std::string_view action);
void check_arch(Arch arch, std::string_view as_written);
}  // namespace detail

namespace {

constexpr std::array kHeadDims = {32, 64, 96, 128, 192, 256};
constexpr int kMaxBlock = 256;
constexpr int kMmaRows = 16;            // rows of one mma.sync tile; a warp owns whole tiles
constexpr int kAccumulatorLimit = 192;  // fp32 accumulator registers per thread we allow

template <size_t N>
bool contains(const std::array<int, N>& values, int v) {
  for (int x : values) {
    if (x == v) return true;
  }
  return false;
}

// Minimum sm per precision: bf16 mma.sync needs Ampere, fp8 mma needs Ada.
int min_sm(Precision p) { return p == Precision::fp8_e4m3 ? 89 : 80; }

bool is_built(Precision) { return true; }
// int8 and fp8_e4m3 run on the 8-bit skeleton (kernel/fwd_q8_sm80.cuh).
bool is_8bit(Precision p) { return p == Precision::int8 || p == Precision::fp8_e4m3; }
bool is_built(Protection) { return true; }

// a * b + c with int64 overflow detection; false when it does not fit.
bool mul_add(int64_t a, int64_t b, int64_t c, int64_t& out) {
  int64_t prod = 0;
  return !__builtin_mul_overflow(a, b, &prod) && !__builtin_add_overflow(prod, c, &out);
}

void check_tensor(std::string_view tensor, const Strides& s, int batch, int heads, int seqlen,
                  int head_dim) {
  for (auto [axis, stride] :
       {std::pair<std::string_view, int64_t>{"batch", s.batch}, {"head", s.head}, {"seq", s.seq}}) {
    if (stride < 0) {
      throw ConfigError(
          fmt::format("{} {} stride is {}: strides must be >= 0", tensor, axis, stride));
    }
  }
  // Rows of one head must not overlap; a single row may have any stride.
  if (seqlen > 1 && s.seq < head_dim) {
    throw ConfigError(fmt::format(
        "{} seq stride {} is smaller than head_dim {}: consecutive rows would overlap; use a seq "
        "stride of at least {}",
        tensor, s.seq, head_dim, head_dim));
  }
  // The largest element offset the kernel forms must fit in int64.
  int64_t last = head_dim - 1;
  if (!mul_add(int64_t{seqlen} - 1, s.seq, last, last) ||
      !mul_add(int64_t{heads} - 1, s.head, last, last) ||
      !mul_add(int64_t{batch} - 1, s.batch, last, last)) {
    throw ConfigError(fmt::format(
        "{} element offsets overflow int64 (strides batch {}, head {}, seq {}): the tensor is too "
        "large to index; split the call",
        tensor, s.batch, s.head, s.seq));
  }
}

// The output's rows must be distinct memory: CTAs write them at once. Sufficient and what every
// usual layout (BHSD, BSHD, padded) meets: taken from the smallest stride up, each axis steps
// past everything the axes inside it span. Inputs may overlap (stride 0 broadcasts).
void check_output_disjoint(const Strides& s, int batch, int heads, int seqlen, int head_dim) {
  std::array<std::pair<int64_t, int>, 3> axes{{{s.seq, seqlen}, {s.head, heads}, {s.batch, batch}}};
  std::sort(axes.begin(), axes.end());
  int64_t span = head_dim;  // elements of one row
  for (auto [stride, extent] : axes) {
    if (extent == 1) continue;
    if (stride < span) {
      throw ConfigError(fmt::format(
          "o strides (batch {}, head {}, seq {}) make rows of different heads, batches or "
          "positions share memory: give the output a layout where each stride steps past the "
          "axes inside it (e.g. contiguous BHSD or BSHD)",
          s.batch, s.head, s.seq));
    }
    span += stride * (extent - 1);  // no overflow: check_tensor bounded the last offset
  }
}

}  // namespace

void validate_head_dim(int head_dim) {
  if (!contains(kHeadDims, head_dim)) {
    throw ConfigError(fmt::format(
        "head_dim {} is not supported: use one of 32, 64, 96, 128, 192, 256", head_dim));
  }
}

void validate(const KernelConfig& c) {
  detail::require_complete(c, "validate");
  detail::check_arch(c.arch, c.arch.to_string());
  // Enum values from a cast outside their lists: each to_string throws ConfigError naming it
  // (an unknown backend compiled as NVRTC, and the name no longer parsed back to the config).
  for (std::string_view name :
       {to_string(c.precision), to_string(c.protection), to_string(c.mask), to_string(c.backend),
        to_string(c.ir_inject), to_string(c.ir_harden)})
    (void)name;

  // Arch requirement before "not built yet" so it stays the more specific message once the
  // precision exists.
  if (c.arch.sm < min_sm(c.precision)) {
    throw ConfigError(
        fmt::format("precision {} needs sm_{} or newer, not {}: pick another "
                    "precision or arch",
                    to_string(c.precision), min_sm(c.precision), c.arch.to_string()));
  }
  if (!is_built(c.precision)) {
    throw ConfigError(
        fmt::format("precision {} is not built yet: use f16 or bf16", to_string(c.precision)));
  }
  if (!is_built(c.protection)) {
    throw ConfigError(
        fmt::format("protection {} is not built yet: use none", to_string(c.protection)));
  }
  const bool checksums = c.protection == Protection::flash_abft ||
                         c.protection == Protection::efta_detect ||
                         c.protection == Protection::efta_correct;
  // int8, fp8 (kernel/fwd_q8_sm80.cuh) and f16_pasa (kernel/fwd_pasa_sm80.cuh) run skeletons of
  // their own, with every fused scheme: int8 with exact INT32 digit checksums
  // (protect/int8_checksums.cuh), fp8 with f16 checksum rows through f16 MMAs
  // (protect/fp8_checksums.cuh), f16_pasa with checksum rows of the shifted keys and a second
  // evaluation of its FP16 softmax. The LLVM route's prelude has none of their intrinsics, and the
  // decoupled baseline is three f16/bf16 kernels with FP32 scores.
  if (c.precision != Precision::f16 && c.precision != Precision::bf16) {
    if (c.backend == Backend::llvm) {
      throw ConfigError(fmt::format(
          "precision {} is built for the NVRTC route only: use backend nvrtc, or precision "
          "f16/bf16 on the LLVM route",
          to_string(c.precision)));
    }
    if (c.protection == Protection::decoupled) {
      throw ConfigError(fmt::format(
          "protection decoupled is not built for precision {} (no decoupled baseline: its three "
          "kernels are f16/bf16 ones): use protection none, flash_abft, efta_detect or "
          "efta_correct with {}, or precision f16/bf16 with protection decoupled",
          to_string(c.precision), to_string(c.precision)));
    }
  }

  if (is_8bit(c.precision)) {
    if (c.block_n % 32 != 0) {
      throw ConfigError(fmt::format(
          "block_n {} is not a multiple of 32: {} MMAs (m16n8k32) step the keys of P V by 32; "
          "use 32, 64, 128 or 256",
          c.block_n, to_string(c.precision)));
    }
    if (is_block_sparse(c.mask)) {
      throw ConfigError(fmt::format(
          "mask {} is not built for precision {} yet: use none or causal, or precision f16/bf16",
          to_string(c.mask), to_string(c.precision)));
    }
    if (c.fault_injection && !checksums) {
      throw ConfigError(fmt::format(
          "precision {} has fault-injection points only in its checksum schemes: use flash_abft, "
          "efta_detect or efta_correct, or turn fault_injection off",
          to_string(c.precision)));
    }
  }

  if (c.backend == Backend::llvm && !llvm_route_built()) {
    throw ConfigError(
        "backend llvm: this ftattn was built without the LLVM route (LLVM 22 not found when it "
        "was configured, or FTATTN_WITH_LLVM=OFF): install LLVM 22 (scripts/setup.sh), configure "
        "again with -DFTATTN_WITH_LLVM=AUTO (or ON) and rebuild, or use backend nvrtc");
  }
  if (c.backend != Backend::llvm &&
      (c.ir_inject != IrClass::none || c.ir_harden != IrClass::none)) {
    throw ConfigError(
        "ir_inject and ir_harden are IR passes of the LLVM route: set backend llvm, or leave them "
        "at none");
  }
  if (c.protection == Protection::decoupled && is_block_sparse(c.mask)) {
    throw ConfigError(fmt::format(
        "protection decoupled runs masks none and causal, not {}: block-sparse masks need a "
        "fused scheme (flash_abft, efta_detect or efta_correct), or use a dense mask",
        to_string(c.mask)));
  }
  if (c.backend == Backend::llvm && c.protection == Protection::decoupled) {
    throw ConfigError(
        "protection decoupled runs three separate kernels, and the LLVM route builds the fused "
        "kernel only: use backend nvrtc, or the LLVM route's DMR hardening (ir_harden)");
  }
  if (c.ir_harden == IrClass::load) {
    throw ConfigError(
        "ir_harden load is not supported (a duplicated load reads the same memory): harden "
        "fp_arith, int_arith, exp_max or mma");
  }

  validate_head_dim(c.head_dim);
  if (!contains(std::array{1, 2, 4, 8, 12}, c.num_warps)) {
    throw ConfigError(fmt::format(
        "num_warps {} is not supported: use 1, 2, 4 or 8, or 12 for three consumer warpgroups "
        "(16-bit warp-specialised kernels on sm_90a)",
        c.num_warps));
  }
  if (c.num_warps == 12 && !warp_specialized(c)) {
    throw ConfigError(
        "num_warps 12 (three consumer warpgroups) is the 16-bit warp-specialised kernel on "
        "sm_90a (f16, bf16 and f16_pasa unprotected or with flash_abft, or f16 and bf16 with "
        "EFTA at head dims 32 and 64; head dims 32, 64, 96 and 128, block_m 192, block_n 64 or "
        "128, two or more stages, backend nvrtc): use 1, 2, 4 or 8");
  }
  if (!contains(std::array{1, 2, 3}, c.num_stages)) {
    throw ConfigError(fmt::format("num_stages {} is not supported: use 1, 2 or 3", c.num_stages));
  }
  if (c.block_n % 16 != 0 || c.block_n < 16 || c.block_n > kMaxBlock) {
    throw ConfigError(
        fmt::format("block_n {} is not supported: use a multiple of 16 between 16 and {}",
                    c.block_n, kMaxBlock));
  }
  // EFTA's product check on the mma.sync kernels multiplies its factors in groups of four
  // 8-key score tiles (protect/efta_rows.cuh), so a block of more than 32 keys is whole groups.
  const bool efta =
      c.protection == Protection::efta_detect || c.protection == Protection::efta_correct;
  if (efta && !uses_wgmma(c) && c.block_n > 32 && c.block_n % 32 != 0) {
    throw ConfigError(fmt::format(
        "block_n {} with {} on the mma.sync kernel: its product check takes keys in groups of "
        "32; use block_n 16, 32 or a multiple of 32",
        c.block_n, to_string(c.protection)));
  }
  const int warp_rows = kMmaRows * c.num_warps;
  if (c.block_m % warp_rows != 0) {
    throw ConfigError(fmt::format(
        "block_m {} is not a multiple of 16 * num_warps = {} (each warp owns 16-row MMA tiles): "
        "use a multiple of {} up to {}, or change num_warps",
        c.block_m, warp_rows, warp_rows, kMaxBlock));
  }
  if (c.block_m > kMaxBlock) {
    throw ConfigError(
        fmt::format("block_m {} is over the limit of {}: lower it", c.block_m, kMaxBlock));
  }

  // Each warp holds, per 16-row tile, the O accumulator (head_dim/8 mma tiles of 4 floats per
  // thread) and the S = QK^T tile (block_n/8 tiles of 4 floats). Past the limit the kernel spills.
  // f16_pasa's S tile is FP16: two halves per register.
  const int tiles_per_warp = c.block_m / warp_rows;
  const int s_registers = c.block_n / 8 * (c.precision == Precision::f16_pasa ? 2 : 4);
  const int accumulators = tiles_per_warp * (c.head_dim / 8 * 4 + s_registers);
  if (accumulators > kAccumulatorLimit) {
    throw ConfigError(fmt::format(
        "block_m {}, block_n {}, num_warps {} with head_dim {} would need {} accumulator "
        "registers per thread (limit {}): lower block_m or block_n, or raise num_warps",
        c.block_m, c.block_n, c.num_warps, c.head_dim, accumulators, kAccumulatorLimit));
  }

  const int smem = c.shared_memory_bytes();
  const int limit = max_shared_memory_bytes(c.arch);
  if (smem > limit) {
    throw ConfigError(fmt::format(
        "block_m {}, block_n {}, num_stages {}, head_dim {} ({}) need {} bytes of shared memory, "
        "but {} allows at most {}: lower num_stages or block_n",
        c.block_m, c.block_n, c.num_stages, c.head_dim, to_string(c.precision), smem,
        c.arch.to_string(), limit));
  }
}

void validate_shape(const Problem& p) {
  for (auto [field, value] : {std::pair<std::string_view, int>{"batch", p.batch},
                              {"heads_q", p.heads_q},
                              {"heads_kv", p.heads_kv},
                              {"seqlen_q", p.seqlen_q},
                              {"seqlen_k", p.seqlen_k},
                              {"head_dim", p.head_dim}}) {
    if (value < 1) {
      throw ConfigError(fmt::format("problem {} is {}: it must be at least 1", field, value));
    }
  }
  if (p.heads_q % p.heads_kv != 0) {
    throw ConfigError(
        fmt::format("heads_kv ({}) must divide heads_q ({}) for GQA/MQA", p.heads_kv, p.heads_q));
  }
  if (!std::isfinite(p.softmax_scale) || p.softmax_scale < 0.0f) {
    throw ConfigError(fmt::format(
        "softmax_scale {} is invalid: give a finite value > 0, or 0 for 1/sqrt(head_dim)",
        p.softmax_scale));
  }

  // The LSE tensor (batch x heads_q x seqlen_q floats) and the grid's row index are int32.
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  const int64_t batch_heads = int64_t{p.batch} * p.heads_q;
  if (p.seqlen_q > kInt32Max / batch_heads) {
    throw ConfigError(fmt::format(
        "batch * heads_q * seqlen_q = {} * {} * {} is over 2^31-1 rows (the LSE tensor is "
        "indexed with int32): split the batch",
        p.batch, p.heads_q, p.seqlen_q));
  }

  // Kernels round lengths up to whole blocks in int32 (seqlen + block - 1): a length within a
  // block of 2^31 would wrap to a negative block count and run no block at all.
  constexpr int kMaxSeqlen = 1 << 30;
  if (p.seqlen_q > kMaxSeqlen || p.seqlen_k > kMaxSeqlen) {
    throw ConfigError(fmt::format(
        "seqlen_q {} / seqlen_k {}: sequence lengths must be at most 2^30 ({}): split the keys "
        "into calls and merge them by their LSE, or split the queries",
        p.seqlen_q, p.seqlen_k, kMaxSeqlen));
  }

  // Kernels take heads in the grid's y and the batch in its z.
  if (p.heads_q > 65535 || p.batch > 65535) {
    throw ConfigError(fmt::format(
        "batch ({}) and heads_q ({}) must each be at most 65535 (grid limits): split the call",
        p.batch, p.heads_q));
  }

  check_tensor("q", p.q, p.batch, p.heads_q, p.seqlen_q, p.head_dim);
  check_tensor("k", p.k, p.batch, p.heads_kv, p.seqlen_k, p.head_dim);
  check_tensor("v", p.v, p.batch, p.heads_kv, p.seqlen_k, p.head_dim);
  check_tensor("o", p.o, p.batch, p.heads_q, p.seqlen_q, p.head_dim);
  check_output_disjoint(p.o, p.batch, p.heads_q, p.seqlen_q, p.head_dim);
}

void validate(const Problem& p, const KernelConfig& c) {
  validate_shape(p);
  if (p.head_dim != c.head_dim) {
    throw ConfigError(fmt::format(
        "problem head_dim {} does not match the kernel config's head_dim {}: use a config with "
        "head_dim {}",
        p.head_dim, c.head_dim, p.head_dim));
  }

  if (is_block_sparse(c.mask)) {
    if (p.sparse_block_m <= 0 || p.sparse_block_n <= 0) {
      throw ConfigError(fmt::format(
          "mask {} needs the mask's block sizes: set Problem::sparse_block_m and sparse_block_n",
          to_string(c.mask)));
    }
    if (p.sparse_block_m % c.block_m != 0 || p.sparse_block_n % c.block_n != 0) {
      throw ConfigError(fmt::format(
          "the block mask's blocks ({} x {}) must be multiples of the kernel's tiles (block_m {} "
          "x block_n {}): use a config whose block_m divides {} and block_n divides {}",
          p.sparse_block_m, p.sparse_block_n, c.block_m, c.block_n, p.sparse_block_m,
          p.sparse_block_n));
    }
    if (p.block_mask_head_stride < -1) {
      throw ConfigError(fmt::format(
          "block_mask_head_stride {} is invalid: give bytes between heads, 0 for one shared "
          "mask, or -1 for dense",
          p.block_mask_head_stride));
    }
    // Heads whose masks overlap would read each other's blocks: not a shared mask (0), not one
    // of its own per head.
    const int64_t per_head = int64_t{p.block_mask_q_blocks()} * p.block_mask_k_blocks();
    if (p.block_mask_head_stride > 0 && p.block_mask_head_stride < per_head) {
      throw ConfigError(fmt::format(
          "block_mask_head_stride {} is less than a head's mask of {} x {} = {} bytes: give at "
          "least {}, 0 for one shared mask, or -1 for dense",
          p.block_mask_head_stride, p.block_mask_q_blocks(), p.block_mask_k_blocks(), per_head,
          per_head));
    }
  } else if (p.sparse_block_m != 0 || p.sparse_block_n != 0) {
    throw ConfigError(fmt::format(
        "the problem sets block-mask sizes but the mask is {}: use mask block_sparse or "
        "block_sparse_causal, or leave sparse_block_m and sparse_block_n at 0",
        to_string(c.mask)));
  }
}

}  // namespace ftattn
