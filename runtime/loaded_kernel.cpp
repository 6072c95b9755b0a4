#include "runtime/loaded_kernel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <vector>

#include "ftattn/codegen.hpp"
#include "runtime/decoupled_launch.hpp"
#include "runtime/driver.hpp"
#include "runtime/pasa_shift.hpp"
#include "runtime/prepared_kv.hpp"
#include "runtime/protected_launch.hpp"
#include "runtime/quantized_kernel.hpp"
#include "runtime/tensor_maps.hpp"

namespace ftattn::runtime {
namespace {

// cp.async moves 16-byte chunks: every row must start on a 16-byte boundary.
void require_aligned(const char* tensor, const void* ptr, const Strides& s, int element_bytes) {
  if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0)
    throw ConfigError(
        fmt::format("{} is not 16-byte aligned: pass a pointer to the start of an "
                    "allocation or of a 16-byte aligned view",
                    tensor));
  const int elements = 16 / element_bytes;
  if (s.batch % elements != 0 || s.head % elements != 0 || s.seq % elements != 0)
    throw ConfigError(
        fmt::format("{} strides (batch {}, head {}, seq {}) must be multiples of {} "
                    "elements so that every row is 16-byte aligned",
                    tensor, s.batch, s.head, s.seq, elements));
}

// Persistent tiles (codegen's persistent_tiles) are walked by one CTA per SM up to this many keys
// per row. On the H200 (bench/results/nvidia-h200/persistent_tiles_ab.csv, two rounds, no mask,
// 32 heads) that ran 1.03-1.05x main at 512 keys and 1.01-1.02x at 1k on the three-consumer
// 192 x 128 tile at head dim 128 (1.06-1.15x on 128 x 128, 1.08-1.17x at head dim 64), and
// 0.98-1.00x from 2k keys. Causal, in pairs of a head's long and short tiles (kernel/tile_walk.cuh,
// nvidia-h200/causal_walk_pairs_ab.csv): 1.16x at 512 keys and 1.10x at 1k on 128 x 128 w8s2.
constexpr int kPersistentKeys = 1024;

class LoadedKernel final : public Kernel {
 public:
  explicit LoadedKernel(std::shared_ptr<const CompiledKernel> compiled)
      : compiled_(std::move(compiled)), module_(compiled_->cubin) {
    function_ = module_.function(compiled_->symbol);
    if (checksum_atoms(compiled_->config.protection).v > 0)
      prologue_ = module_.function(codegen::checksum_symbol(compiled_->symbol));
    if (compiled_->config.precision == Precision::f16_pasa)
      shift_ = module_.function(codegen::pasa_shift_symbol(compiled_->symbol));
    if (persistent_tiles(compiled_->config)) persistent_ctas_ = device_info(0).sm_count;
  }

  const CompiledKernel& compiled() const override { return *compiled_; }

  using Kernel::launch;
  void launch(const Problem& problem, const void* q, const void* k, const void* v, void* o,
              float* lse, CUstream stream, const unsigned char* block_mask,
              const ProtectOptions& protect) const override {
    AttentionParams params = make_params(problem, compiled_->config, q, k, v, o, lse, block_mask);
    ensure_context();
    std::lock_guard lock(protect_mu_);
    enqueue(problem, params, stream, protect, /*reset_log=*/false);  // nothing reads the log
  }

  // PASA's shift into buffers of the result's own, then the checksum prologue on the keys the
  // calls will read (K' for PASA's EFTA).
  PreparedKv prepare_kv(const Problem& problem, const void* k, const void* v,
                        CUstream stream) const override {
    const KernelConfig& c = compiled_->config;
    require_preparable(c);
    AttentionParams params = kv_params(problem, c, k, v);
    ensure_context();
    auto state = std::make_shared<PreparedKv::State>();
    state->subject = prepared_subject(c, problem, k, v);
    if (shift_ != nullptr) enqueue_pasa_shift(shift_, c, problem, params, state->shifted, stream);
    ProtectedLauncher::encode_checksums(prologue_, c, problem, params, state->checksums, stream);
    return PreparedKv(std::move(state));
  }

  FaultReport run(const Problem& problem, const void* q, const void* k, const void* v, void* o,
                  float* lse, CUstream stream, const unsigned char* block_mask,
                  const ProtectOptions& protect) const override {
    const KernelConfig& c = compiled_->config;
    // Nothing to read back: no checks, no plan, no DMR counting mismatches into the log.
    if (c.protection == Protection::none && !protect.inject && c.ir_harden == IrClass::none) {
      check_protect_options(c, protect);
      launch(problem, q, k, v, o, lse, stream, block_mask, protect);
      return {};
    }
    AttentionParams params = make_params(problem, c, q, k, v, o, lse, block_mask);
    ensure_context();
    std::lock_guard lock(protect_mu_);
    enqueue(problem, params, stream, protect);
    // The relaunch carries no fault plan, and the same thresholds and prepared K and V.
    ProtectOptions relaunch = protect;
    relaunch.inject.reset();
    return protector_.settle(
        protector_.collect(stream), protect.on_fault, c, problem, params, stream,
        [&](AttentionParams& again) { enqueue(problem, again, stream, relaunch); });
  }

 private:
  // PASA's key shift, the protection set-up, then the kernel (or the decoupled pipeline); the
  // first two taken from `protect`'s prepared K and V where it hands some. The launch reads a
  // copy of the caller's parameters: PASA's points at the shifted keys, so that a recompute
  // relaunch shifts the caller's keys again, not the shifted ones, and the checksums are of the
  // keys the kernel reads (K', for PASA's EFTA; V is not shifted). Caller holds protect_mu_.
  void enqueue(const Problem& problem, const AttentionParams& params, CUstream stream,
               const ProtectOptions& protect, bool reset_log = true) const {
    // The shift's buffers, the checksum workspace and fault log, and decoupled's S and P are
    // the kernel object's own: a launch on another stream waits until the last one is done
    // with them (Runtime hands every caller of a config the same object).
    const bool shared_buffers = shift_ != nullptr || uses_fault_log(protect);
    const StreamOrder::Scope ordered(shared_buffers ? &order_ : nullptr, stream);
    enqueue_work(problem, params, stream, protect, reset_log);
  }

  void enqueue_work(const Problem& problem, const AttentionParams& params, CUstream stream,
                    const ProtectOptions& protect, bool reset_log) const {
    const KernelConfig& c = compiled_->config;
    const PreparedKv::State* prepared = prepared_for(protect, c, problem, params.k, params.v);
    AttentionParams run = params;
    if (shift_ != nullptr) {
      if (prepared != nullptr)
        use_shifted_keys(c, problem, run, prepared->shifted);
      else
        enqueue_pasa_shift(shift_, c, problem, run, pasa_workspace_, stream);
    }
    if (uses_fault_log(protect))
      protector_.prepare(prologue_, c, problem, run, stream, protect, prepared, reset_log);
    if (c.protection == Protection::decoupled) {  // three kernels over a global S and P
      decoupled_.launch(module_, compiled_->symbol, c, problem, run, stream);
      return;
    }
    // A recompute launch walks its tile list in x; a full one covers every tile. A persistent
    // kernel takes them in turn on one CTA per SM (the warp-specialised kernels take an SM's
    // registers) where tiles are short, up to kPersistentKeys keys: there a CTA's fill and drain
    // weigh most. Given a CTA per tile, it runs one each.
    const unsigned m_blocks = static_cast<unsigned>((problem.seqlen_q + c.block_m - 1) / c.block_m);
    // Walk units (kernel/tile_walk.cuh): tiles, or causal pairs of a head's long and short ones.
    const unsigned units_per_head = is_causal(c.mask) ? (m_blocks + 1) / 2 : m_blocks;
    const long long units =
        static_cast<long long>(units_per_head) * problem.heads_q * problem.batch;
    // Walking needs more units than CTAs; given fewer, the grid is a CTA per tile, whose kernel
    // finds its tile from the block index as the others do (a grid of units would leave tiles out).
    const bool walk =
        persistent_ctas_ > 0 && problem.seqlen_k <= kPersistentKeys && units > persistent_ctas_;
    // check_fault_plan bounds a plan by a CTA per tile: walking kernels have no injection points.
    if (walk && run.fault.site != fault_site_none)
      throw Error(c.name() +
                  ": a persistent-tile launch took a fault plan, whose CTA index "
                  "assumes a CTA per tile");
    const Dim3 grid = run.tile_count > 0 ? Dim3{static_cast<unsigned>(run.tile_count), 1, 1}
                      : walk             ? Dim3{static_cast<unsigned>(persistent_ctas_), 1, 1}
                                         : Dim3{m_blocks, static_cast<unsigned>(problem.heads_q),
                                    static_cast<unsigned>(problem.batch)};
    // The 16-bit wgmma kernels copy K and V by TMA (kv_tensor_maps): their tensor maps ride as a
    // second parameter, encoded over the operands this launch reads (PASA's shifted keys).
    KvTensorMaps maps{};
    if (kv_tensor_maps(c)) maps = encode_kv_tensor_maps(c, run);
    void* args[] = {&run, &maps};
    runtime::launch(function_, grid, Dim3{static_cast<unsigned>(launch_threads(c)), 1, 1},
                    static_cast<unsigned>(c.shared_memory_bytes()), stream, args);
  }

  // Checks, a fault plan or DMR (ir_harden) write the fault log: prepare() sets it up.
  bool uses_fault_log(const ProtectOptions& protect) const {
    const KernelConfig& c = compiled_->config;
    return c.protection != Protection::none || protect.inject || c.ir_harden != IrClass::none;
  }

  std::shared_ptr<const CompiledKernel> compiled_;
  Module module_;
  CUfunction function_ = nullptr;
  CUfunction prologue_ = nullptr;  // checksum schemes: the workspace kernel
  CUfunction shift_ = nullptr;     // f16_pasa: the key-shift kernel
  int persistent_ctas_ = 0;        // persistent_tiles: CTAs a launch starts at most (SMs)
  DecoupledLauncher decoupled_;    // used by Protection::decoupled only
  mutable std::mutex protect_mu_;  // one set of workspaces and log per kernel object
  mutable ProtectedLauncher protector_;
  mutable DeviceBuffer pasa_workspace_;  // f16_pasa: the shifted keys and shift vectors
  mutable StreamOrder order_;            // the buffers above, across streams
};

}  // namespace

namespace {
// A tensor's strides into the kernel parameters' three fields for it.
template <class Field>
void copy_strides(const Strides& s, Field& batch, Field& head, Field& seq) {
  batch = s.batch;
  head = s.head;
  seq = s.seq;
}
}  // namespace

AttentionParams kv_params(const Problem& problem, const KernelConfig& config, const void* k,
                          const void* v) {
  validate(problem, config);
  if (k == nullptr || v == nullptr) throw ConfigError("k and v must be device pointers, not null");
  if (problem.heads_q > 65535 || problem.batch > 65535)
    throw ConfigError(
        fmt::format("batch ({}) and heads_q ({}) must each be at most 65535 (grid "
                    "limits): split the call",
                    problem.batch, problem.heads_q));
  const int element_bytes = 2;
  require_aligned("k", k, problem.k, element_bytes);
  require_aligned("v", v, problem.v, element_bytes);
  AttentionParams p{};
  p.k = k;
  p.v = v;
  copy_strides(problem.k, p.k_batch_stride, p.k_head_stride, p.k_seq_stride);
  copy_strides(problem.v, p.v_batch_stride, p.v_head_stride, p.v_seq_stride);
  p.batch = problem.batch;
  p.heads_q = problem.heads_q;
  p.heads_kv = problem.heads_kv;
  p.seqlen_q = problem.seqlen_q;
  p.seqlen_k = problem.seqlen_k;
  p.scale = problem.scale();  // f16_pasa's shift is taken in the softmax's units
  p.scale_log2 = p.scale * static_cast<float>(M_LOG2E);
  return p;
}

AttentionParams make_params(const Problem& problem, const KernelConfig& config, const void* q,
                            const void* k, const void* v, void* o, float* lse,
                            const unsigned char* block_mask) {
  AttentionParams p = kv_params(problem, config, k, v);
  if (q == nullptr || o == nullptr)
    throw ConfigError("q, k, v and o must be device pointers, not null");
  const int element_bytes = 2;
  require_aligned("q", q, problem.q, element_bytes);
  require_aligned("o", o, problem.o, element_bytes);
  if (reinterpret_cast<std::uintptr_t>(lse) % alignof(float) != 0)
    throw ConfigError("lse must be float-aligned");
  p.q = q;
  p.o = o;
  p.lse = lse;
  copy_strides(problem.q, p.q_batch_stride, p.q_head_stride, p.q_seq_stride);
  copy_strides(problem.o, p.o_batch_stride, p.o_head_stride, p.o_seq_stride);
  p.group_size = problem.heads_q / problem.heads_kv;
  if (is_block_sparse(config.mask)) {
    if (block_mask == nullptr)
      throw ConfigError(
          fmt::format("mask {} needs a block mask: pass block_mask (device bytes, "
                      "one per head, query block and key block)",
                      to_string(config.mask)));
    p.block_mask = block_mask;
    p.block_mask_head_stride = problem.block_mask_head_bytes();
    p.block_mask_k_blocks = problem.block_mask_k_blocks();
    p.sparse_block_m = problem.sparse_block_m;
    p.sparse_block_n = problem.sparse_block_n;
  }
  return p;
}

std::shared_ptr<const Kernel> load_kernel(std::shared_ptr<const CompiledKernel> compiled) {
  if (is_quantized(compiled->config.precision)) return load_quantized_kernel(std::move(compiled));
  ensure_context();
  return std::make_shared<LoadedKernel>(std::move(compiled));
}

}  // namespace ftattn::runtime
