// The public description of a kernel (KernelConfig) and of a call (Problem).
// A config is a value: comparable, hashable, printable as a canonical name, parseable back.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ftattn {

enum class Precision { f16, bf16, int8, f16_pasa, fp8_e4m3 };
// decoupled: EFTA's baseline, separate kernels (checked GEMM, softmax with DMR, checked GEMM).
enum class Protection { none, flash_abft, efta_detect, efta_correct, decoupled };
// block_sparse: the launch passes a per-head mask over (query block, key block); skipped blocks
// cost neither loads nor MMAs. block_sparse_causal: both at once.
enum class Mask { none, causal, block_sparse, block_sparse_causal };
inline bool is_causal(Mask m) { return m == Mask::causal || m == Mask::block_sparse_causal; }
inline bool is_block_sparse(Mask m) {
  return m == Mask::block_sparse || m == Mask::block_sparse_causal;
}
// How a kernel is compiled: NVRTC, or the LLVM route (clang's CUDA front end, the project's IR
// passes, the NVPTX back end).
enum class Backend { nvrtc, llvm };
// Classes of IR values that the LLVM route's passes instrument (fault injection) or duplicate
// (hardening): fp add/mul/fma; loads; integer arithmetic; exp2 and max; tensor-core MMA results.
enum class IrClass { none, fp_arith, load, int_arith, exp_max, mma };
// True when this build has the LLVM route (built with FTATTN_WITH_LLVM).
bool llvm_route_built();

// Enum <-> text. Text is the user's spelling ("f16_pasa", "efta_correct"); parse accepts it and
// the canonical-name token ("f16-pasa", "efta-correct"); anything else throws ConfigError that
// lists the valid values.
std::string_view to_string(Precision p);
std::string_view to_string(Protection p);
std::string_view to_string(Mask m);
Precision parse_precision(std::string_view text);
Protection parse_protection(std::string_view text);
Mask parse_mask(std::string_view text);
std::string_view to_string(Backend b);
std::string_view to_string(IrClass c);
Backend parse_backend(std::string_view text);
IrClass parse_ir_class(std::string_view text);

// A GPU architecture: sm_80, sm_86, sm_89, sm_90a, ... `sm == 0` means "the current device".
struct Arch {
  int sm = 0;                  // 80, 86, 89, 90, 100, 120
  bool arch_specific = false;  // the "a" suffix (sm_90a): Hopper-only instructions allowed

  bool is_auto() const { return sm == 0; }
  std::string to_string() const;             // "sm_90a"; "auto" when unset
  static Arch parse(std::string_view text);  // "sm_90a", "sm90a", "90a"; throws ConfigError
  friend bool operator==(const Arch&, const Arch&) = default;
};

// Largest dynamic shared memory one CTA may use on `arch`, in bytes. Throws ConfigError for an
// arch the project does not target.
int max_shared_memory_bytes(Arch arch);

// One kernel specialisation. Integer knobs left at 0 and an auto arch are "open": the runtime
// fills them (tuning DB or heuristic) before generating code.
struct KernelConfig {
  int head_dim = 0;    // 32, 64, 96, 128, 192, 256 (0: take it from the Problem)
  int block_m = 0;     // query rows per CTA
  int block_n = 0;     // key rows per main-loop step
  int num_warps = 0;   // warps per CTA
  int num_stages = 0;  // K/V shared-memory buffers (1: no prefetch, 2: double buffering, ...)
  Precision precision = Precision::f16;
  Protection protection = Protection::none;
  Mask mask = Mask::none;
  Arch arch;
  // Compile in the source-level fault-injection points (a launch-time FaultPlan picks one).
  // Canonical names end in "_inj"; kernels without it carry no injection code at all.
  bool fault_injection = false;
  // The compile route. LLVM-route names end in "_llvm", followed by "-inject-<class>" and
  // "-harden-<class>" when those IR passes run (e.g. "_llvm-inject-fp-arith").
  Backend backend = Backend::nvrtc;
  IrClass ir_inject = IrClass::none;  // instrumented for IR-level injection (FaultSite::ir)
  IrClass ir_harden = IrClass::none;  // duplicated and compared (DMR); mismatches -> fault log

  // True when nothing is left open.
  bool is_complete() const;

  // Canonical name encoding the whole specialisation, e.g.
  // "ftattn_fwd_sm80_f16_d128_m128n64_w4s2_causal_none". Throws ConfigError when incomplete.
  std::string name() const;
  // The kernel's C symbol: the name with '-' turned into '_'.
  std::string symbol() const;
  // Inverse of name(); throws ConfigError that points at the bad field.
  static KernelConfig parse(std::string_view name);

  // Shared memory the kernel asks for at launch, in bytes (complete configs only).
  int shared_memory_bytes() const;

  friend bool operator==(const KernelConfig&, const KernelConfig&) = default;
};

// Every rule a complete config must obey, checked in one place. Throws ConfigError naming the
// field and what to change.
void validate(const KernelConfig& config);
// One of the head dims the kernels are built for (32, 64, 96, 128, 192, 256). Throws ConfigError.
void validate_head_dim(int head_dim);

// True when `config` runs a Hopper warpgroup-MMA skeleton (kernel/fwd_q8_sm90.cuh for fp8_e4m3 and
// int8, unprotected and without fault injection, and both with flash_abft and its injection
// builds on one warpgroup at head_dims 64 and 128; kernel/fwd_sm90.cuh for f16 and bf16, any
// protection but decoupled and injection builds, masks none or causal; f16_pasa unprotected, and
// with flash_abft and injection builds on the warp-specialised tiles of two and three consumer
// warpgroups, kernel/fwd_pasa_sm90.cuh and fwd_ws_sm90.cuh): sm_90a, head_dim 64 or 128
// (and 96 for f16, bf16 and f16_pasa: rows of three 64-byte swizzle atoms), block_n 64 or 128, 16
// rows per warp in whole warpgroups (num_warps 4 or 8), two or more stages; head_dims 192 and 256
// for int8 and fp8, and at 256 for f16, bf16 and f16_pasa unprotected at block_n 64 with two
// consumer warpgroups (the warp-specialised kernel, num_warps 8: O's 128 registers need its
// consumers' 224); head_dim 192 on that tile for f16_pasa unprotected or with flash_abft and for
// f16 and bf16 with any checksum scheme and injection build (GEMM II m64n192 to m64n208). Other
// configs run the mma.sync
// skeletons (on sm_90 ptxas emulates mma.sync e4m3 with f16 MMAs);
// `--arch sm_90` keeps them.
bool uses_wgmma(const KernelConfig& config);

// True when Kernel::launch lets the wgmma kernel quantise the caller's 16-bit Q as it loads it,
// instead of a separate pass: uses_wgmma and head_dim up to 128. At 256 each lane would hold 16
// chunks of its row, and the H100 ran fp8 7% slower fused (bench/results/nvidia-h100/
// fused_q_ab.csv).
bool quantises_q_in_kernel(const KernelConfig& config);

// True when `config` runs a warp-specialised Hopper skeleton: uses_wgmma and num_warps 8 (two
// consumer warpgroups), and either f16, bf16 or f16_pasa with any protection and injection build
// uses_wgmma takes (kernel/fwd_ws_sm90.cuh), or int8 or fp8_e4m3 unprotected
// (kernel/fwd_q8_ws_sm90.cuh). Its CTA has a third,
// producer warpgroup: see launch_threads.
bool warp_specialized(const KernelConfig& config);

// True when `config`'s attention kernel copies K, its scales and V^T by TMA, which takes the
// tensor maps of Q8TensorMaps (params.cuh) as a second kernel parameter: int8 and fp8_e4m3 on the
// wgmma skeletons (kernel/fwd_q8_sm90.cuh, fwd_q8_ws_sm90.cuh), i.e. uses_wgmma.
bool q8_tensor_maps(const KernelConfig& config);

// True when `config`'s attention kernel copies K and V (f16_pasa: K' and its shift rows) by TMA,
// which takes the tensor maps of KvTensorMaps (params.cuh) as a second kernel parameter: f16,
// bf16 and f16_pasa on the warp-specialised skeleton (kernel/fwd_ws_sm90.cuh, any protection),
// and on the one-warpgroup ones (fwd_sm90.cuh, fwd_pasa_sm90.cuh) where unprotected and without
// injection sites, unless three stages' mbarriers would cost a CTA per SM
// (FwdWgmmaTraits::kv_tma).
bool kv_tensor_maps(const KernelConfig& config);

// True when `config`'s attention kernel walks its tiles persistently (kernel/fwd_ws_sm90.cuh): the
// launch starts one CTA per SM (at most one per walk unit), and each CTA takes units blockIdx.x,
// blockIdx.x + gridDim.x, ... so that a tile's epilogue and the next one's loads overlap instead
// of paying a CTA's fill and drain per tile. A unit is a tile, or with a causal mask a head's
// pair of m-blocks m_blocks - 1 - u and u, which together see about as many keys whatever u is
// (kernel/tile_walk.cuh). f16 and bf16 on the warp-specialised skeleton, unprotected, without
// injection sites, no mask or causal (two consumer warpgroups: three walked causal tiles no
// faster than one per CTA, so the causal defaults from 2k keys, 192 x 128 w12s2, are built as
// before), at head dims 64 and 128, where a second Q buffer fits
// shared memory (the next tile's Q lands while this one runs; O is staged over the finished
// one). Not f16_pasa: its walk has not run on a GPU (at head dim 128 no second Q fits).
bool persistent_tiles(const KernelConfig& config);

// True when `config` runs int8's lazy softmax (kernel/fwd_q8_sm90.cuh, q8::lazy_softmax): int8 on
// a wgmma skeleton, where O stays in INT32 and P is unsigned, round(255 * 2^(x - ref)) against a
// whole-number reference that moves only when a key block's max exceeds it
// (quant_model::attention_row models it).
bool lazy_int8_softmax(const KernelConfig& config);

// Threads per CTA of `config`'s attention kernel: 32 * num_warps, plus the producer warpgroup's
// 128 when warp_specialized.
int launch_threads(const KernelConfig& config);

// The first query row of `config`'s query tile `m_block` (the tile list's and the grid's m
// index) on a problem of seqlen_q query rows: m_block * block_m, except on the 16-bit
// warp-specialised kernel's causal 192-row tiles, whose ragged part (seqlen_q % block_m rows) is
// tile 0, the others following it (kernel/fwd_ws_sm90.cuh).
int query_tile_row0(const KernelConfig& config, int seqlen_q, int m_block);
// The query tile that computes query row `row` (query_tile_row0's inverse): the one a recompute
// relaunches for a fault reported at that row.
int query_tile_of_row(const KernelConfig& config, int seqlen_q, int row);

struct Problem;

// Fills the open knobs of `config` with the heuristic defaults for `device_arch` (used when the
// config's arch is auto), and for `problem` when given (tile choices that depend on the sequence
// length). The result is complete and valid, or ConfigError is thrown.
KernelConfig with_defaults(KernelConfig config, Arch device_arch, const Problem* problem = nullptr);

// Strides of one tensor in elements. The head_dim axis is contiguous (stride 1).
struct Strides {
  int64_t batch = 0;
  int64_t head = 0;
  int64_t seq = 0;
};

// One attention call: O = softmax(scale * Q K^T [masked]) V.
// Q is batch x heads_q x seqlen_q x head_dim; K and V are batch x heads_kv x seqlen_k x head_dim
// (GQA/MQA when heads_kv < heads_q). O has Q's shape; LSE, when asked for, is a dense
// batch x heads_q x seqlen_q float tensor.
struct Problem {
  int batch = 1;
  int heads_q = 1;
  int heads_kv = 1;
  int seqlen_q = 0;
  int seqlen_k = 0;
  int head_dim = 0;
  Strides q, k, v, o;
  float softmax_scale = 0.0f;  // 0: 1/sqrt(head_dim)

  // Dense tensors laid out batch, heads, seq, head_dim.
  static Problem bhsd(int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k,
                      int head_dim);
  // Dense tensors laid out batch, seq, heads, head_dim.
  static Problem bshd(int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k,
                      int head_dim);

  float scale() const;  // the effective softmax scale
  // Floating-point operations of the forward pass (causal counts only the unmasked half).
  double flops(Mask mask) const;

  // Block-sparse masks (Mask::block_sparse*): the mask passed at launch holds one byte per
  // (head, query block, key block) of sparse_block_m x sparse_block_n elements, nonzero meaning
  // "compute this block". Each must be a multiple of the kernel's block_m / block_n.
  int sparse_block_m = 0;
  int sparse_block_n = 0;
  int64_t block_mask_head_stride = -1;    // bytes between heads; -1: dense; 0: one shared mask
  int block_mask_q_blocks() const;        // ceil(seqlen_q / sparse_block_m)
  int block_mask_k_blocks() const;        // ceil(seqlen_k / sparse_block_n)
  int64_t block_mask_head_bytes() const;  // the head stride in effect
  size_t block_mask_bytes() const;        // bytes the mask spans
};

// Checks a problem against the config that will run it. Throws ConfigError.
void validate(const Problem& problem, const KernelConfig& config);
// The checks that need no config: sizes, strides, GQA, softmax_scale, int32 row indices.
void validate_shape(const Problem& problem);

}  // namespace ftattn

template <>
struct std::hash<ftattn::KernelConfig> {
  size_t operator()(const ftattn::KernelConfig& c) const noexcept;
};
