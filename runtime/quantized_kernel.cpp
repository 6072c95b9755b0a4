#include "runtime/quantized_kernel.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <mutex>
#include <tuple>

#include "codegen/checksum_atoms.hpp"
#include "ftattn/codegen.hpp"
#include "ftattn/quantize.hpp"
#include "ftattn/quantize_params.cuh"
#include "runtime/driver.hpp"
#include "runtime/loaded_kernel.hpp"
#include "runtime/prepared_kv.hpp"
#include "runtime/protected_launch.hpp"
#include "runtime/tensor_maps.hpp"

namespace ftattn {
namespace runtime {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

void require_16bit(Precision p, const char* what) {
  if (p != Precision::f16 && p != Precision::bf16)
    throw ConfigError(fmt::format("{} must be f16 or bf16, not {}", what, to_string(p)));
}

void require_aligned(const char* tensor, const void* ptr, const Strides& s) {
  // The quantisation kernels read 16-byte chunks of 8 elements.
  if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0 || s.batch % 8 != 0 || s.head % 8 != 0 ||
      s.seq % 8 != 0)
    throw ConfigError(fmt::format(
        "{} must start on 16 bytes and have strides (batch {}, head {}, seq {}) that are multiples "
        "of 8 elements: quantisation reads rows in 16-byte chunks",
        tensor, s.batch, s.head, s.seq));
}

// Rows the quantize_rows kernel handles per 128-thread CTA (kernel/quantize_sm80.cuh).
int rows_per_cta(int head_dim) {
  const int chunks = head_dim / 8;
  const int group = chunks <= 4 ? 4 : chunks <= 8 ? 8 : chunks <= 16 ? 16 : 32;
  return 128 / group;
}

unsigned blocks(long long n, long long per) { return static_cast<unsigned>((n + per - 1) / per); }

class QuantizedKernel final : public Kernel {
 public:
  explicit QuantizedKernel(std::shared_ptr<const CompiledKernel> compiled)
      : compiled_(std::move(compiled)), module_(compiled_->cubin) {
    attention_ = module_.function(compiled_->symbol);
    const codegen::Q8ChecksumRows rows = codegen::q8_checksum_rows(compiled_->config);
    if (rows.v > 0 || rows.v16 > 0)
      v_rows_ = module_.function(codegen::q8_v_rows_symbol(compiled_->symbol));
    if (rows.k > 0 || rows.k16 > 0)
      k_rows_ = module_.function(codegen::q8_k_rows_symbol(compiled_->symbol));
  }

  const CompiledKernel& compiled() const override { return *compiled_; }

  // 16-bit f16 tensors in and out; quantised into this kernel's workspace.
  using Kernel::launch;
  void launch(const Problem& problem, const void* q, const void* k, const void* v, void* o,
              float* lse, CUstream stream, const unsigned char* /*block_mask*/,
              const ProtectOptions& protect) const override {
    if (protect.prepared_kv != nullptr) require_preparable(compiled_->config);
    validate(problem, compiled_->config);  // before the workspace is sized from it
    const QuantizedLayout layout = QuantizedLayout::of(problem);
    std::lock_guard lock(workspace_mu_);
    ensure_context();
    if (workspace_.bytes() < layout.bytes) workspace_ = DeviceBuffer(layout.bytes);
    const StreamOrder::Scope ordered(&workspace_order_, stream);
    AttentionParams p = quantized_params(problem, q, k, v, o, lse, stream);
    std::lock_guard protect_lock(protect_mu_);
    enqueue(problem, p, stream, protect, /*reset_log=*/false);  // nothing reads the log
  }

  // Protected (int8 checksum schemes): quantise, build the checksum rows, run (with the fault
  // plan, if any), read the fault log and act on it; a recompute relaunches the attention on the
  // same quantised operands without the plan.
  FaultReport run(const Problem& problem, const void* q, const void* k, const void* v, void* o,
                  float* lse, CUstream stream, const unsigned char* block_mask,
                  const ProtectOptions& protect) const override {
    const KernelConfig& c = compiled_->config;
    if (protect.prepared_kv != nullptr) require_preparable(c);
    if (c.protection == Protection::none)
      return Kernel::run(problem, q, k, v, o, lse, stream, block_mask, protect);
    validate(problem, c);  // before the workspace is sized from it
    const QuantizedLayout layout = QuantizedLayout::of(problem);
    std::scoped_lock lock(workspace_mu_, protect_mu_);  // launch()'s order: workspace first
    ensure_context();
    if (workspace_.bytes() < layout.bytes) workspace_ = DeviceBuffer(layout.bytes);
    const StreamOrder::Scope ordered(&workspace_order_, stream);
    AttentionParams p = quantized_params(problem, q, k, v, o, lse, stream);
    return enqueue_and_settle(problem, p, stream, protect);
  }

  // with_q false: K and V only (the wgmma kernel quantises Q itself); the result's q and q_scale
  // are then null.
  QuantizedInputs quantize(const Problem& problem, const void* q, const void* k, const void* v,
                           Precision input, void* workspace, CUstream stream,
                           bool with_q = true) const {
    const KernelConfig& c = compiled_->config;
    validate(problem, c);
    require_16bit(input, "the quantisation input type");
    if (q == nullptr || k == nullptr || v == nullptr || workspace == nullptr)
      throw ConfigError("q, k, v and the workspace must be device pointers, not null");
    require_aligned("q", q, problem.q);
    require_aligned("k", k, problem.k);
    require_aligned("v", v, problem.v);
    ensure_context();
    const QuantizedLayout layout = QuantizedLayout::of(problem);
    auto* ws = static_cast<char*>(workspace);
    const int d = problem.head_dim;
    auto fn = [&](const char* kernel) {
      return module_.function(codegen::quantize_symbol(compiled_->symbol, kernel, input));
    };
    // The parameters of one tensor's quantisation: 16-bit rows in, 8-bit operand and scales out.
    auto params = [&](const void* src, const Strides& s, int heads, int seqlen, size_t out,
                      size_t scale) {
      QuantizeParams p{};
      p.in = src;
      p.in_batch_stride = s.batch;
      p.in_head_stride = s.head;
      p.in_seq_stride = s.seq;
      p.batch = problem.batch;
      p.heads = heads;
      p.seqlen = seqlen;
      p.out = ws + out;
      p.scale = reinterpret_cast<float*>(ws + scale);
      p.keys_padded = layout.keys_padded;
      return p;
    };
    const unsigned hk = static_cast<unsigned>(problem.heads_kv);
    const unsigned b = static_cast<unsigned>(problem.batch);
    const Dim3 key_blocks{blocks(layout.keys_padded, 64), hk, b};  // 64 keys per CTA

    // quantize_rows: one row per head_dim / 8 lanes, a scale per row of scale_seq per head.
    auto quantize_rows = [&](QuantizeParams& p) {
      void* args[] = {&p};
      runtime::launch(fn("quantize_rows"),
                      Dim3{blocks(p.scale_seq, rows_per_cta(d)), static_cast<unsigned>(p.heads),
                           static_cast<unsigned>(p.batch)},
                      Dim3{128, 1, 1}, 0, stream, args);
    };

    if (with_q) {
      QuantizeParams pq =
          params(q, problem.q, problem.heads_q, problem.seqlen_q, layout.q, layout.q_scale);
      pq.scale_seq = problem.seqlen_q;
      quantize_rows(pq);
    }

    QuantizeParams pk =
        params(k, problem.k, problem.heads_kv, problem.seqlen_k, layout.k, layout.k_scale);
    pk.scale_seq = layout.keys_padded;
    void* k_args[] = {&pk};
    const int k_scale_block = codegen::k_scale_block(compiled_->config.precision);
    if (k_scale_block == 1)
      quantize_rows(pk);
    else
      runtime::launch(fn("quantize_key_blocks"), key_blocks, Dim3{128, 1, 1}, 0, stream, k_args);

    QuantizeParams pv =
        params(v, problem.v, problem.heads_kv, problem.seqlen_k, layout.v, layout.v_scale);
    void* v_args[] = {&pv};
    const size_t scale_bytes = sizeof(float) * problem.batch * problem.heads_kv * d;
    check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(pv.scale), 0, scale_bytes, stream),
          "cuMemsetD8Async");  // both paths combine CTAs with an atomic max from 0
    const long long v_shared = quantize_v_shared_bytes(layout.keys_padded, d);
    if (compiled_->config.arch.sm >= 90 && quantize_v_fits(layout.keys_padded, d)) {
      // V read once: a cluster per KV head keeps its keys in shared memory.
      runtime::launch(fn("quantize_v"), Dim3{kQuantizeVCtas, hk, b}, Dim3{kQuantizeVThreads, 1, 1},
                      static_cast<unsigned>(v_shared), stream, v_args);
    } else {
      runtime::launch(fn("v_channel_max"), Dim3{blocks(problem.seqlen_k, 64), hk, b},
                      Dim3{128, 1, 1}, 0, stream, v_args);
      runtime::launch(fn("pack_v"), key_blocks, Dim3{128, 1, 1}, 0, stream, v_args);
    }
    QuantizedInputs in = QuantizedInputs::in(workspace, layout);
    in.k_scale_block = k_scale_block;
    if (!with_q) in.q = nullptr, in.q_scale = nullptr;
    in.origin = QuantizedInputs::Origin{c.precision,      problem.batch,    problem.heads_q,
                                        problem.heads_kv, problem.seqlen_q, problem.seqlen_k,
                                        problem.head_dim};
    return in;
  }

  void launch_quantized(const Problem& problem, const QuantizedInputs& in, void* o,
                        Precision output, float* lse, CUstream stream) const {
    AttentionParams p = attention_params(problem, in, o, output, lse);
    std::lock_guard lock(protect_mu_);
    enqueue(problem, p, stream, {}, /*reset_log=*/false);  // nothing reads the log
  }

  // launch_quantized, then as run(): the fault log read and acted on.
  FaultReport run_quantized(const Problem& problem, const QuantizedInputs& in, void* o,
                            Precision output, float* lse, CUstream stream,
                            const ProtectOptions& protect) const {
    const KernelConfig& c = compiled_->config;
    if (protect.prepared_kv != nullptr) require_preparable(c);
    // Kernel::run's refusals (a policy or thresholds with nothing checked) before any GPU work.
    check_protect_options(c, protect);
    AttentionParams p = attention_params(problem, in, o, output, lse);
    std::lock_guard lock(protect_mu_);
    if (c.protection == Protection::none) {
      enqueue(problem, p, stream, protect, /*reset_log=*/false);  // throws for a fault plan
      return {};
    }
    return enqueue_and_settle(problem, p, stream, protect);
  }

 private:
  // The caller's f16 Q, K and V quantised into the workspace (caller holds workspace_mu_), and
  // the attention's parameters over them. The wgmma kernel quantises Q itself as it loads it
  // (kernel/fwd_q8_sm90.cuh): then only K and V go through the workspace, and Q's pass over
  // memory is saved.
  AttentionParams quantized_params(const Problem& problem, const void* q, const void* k,
                                   const void* v, void* o, float* lse, CUstream stream) const {
    // Checked before the quantisation kernels are enqueued, not after.
    if (o == nullptr) throw ConfigError("q, k, v and o must be device pointers, not null");
    const bool fused_q = quantises_q_in_kernel(compiled_->config);
    QuantizedInputs in =
        quantize(problem, q, k, v, Precision::f16, workspace_.data(), stream, !fused_q);
    if (fused_q) in.q = q;
    return attention_params(problem, in, o, Precision::f16, lse, fused_q);
  }

  // q_16bit: in.q is the caller's f16 Q with the problem's strides, which the wgmma kernel
  // quantises itself (quantises_q_in_kernel); in.q_scale is then unused.
  AttentionParams attention_params(const Problem& problem, const QuantizedInputs& in, void* o,
                                   Precision output, float* lse, bool q_16bit = false) const {
    const KernelConfig& c = compiled_->config;
    require_16bit(output, "the output type");
    if (in.q == nullptr || in.k == nullptr || in.v == nullptr ||
        (!q_16bit && in.q_scale == nullptr) || in.k_scale == nullptr || in.v_scale == nullptr)
      throw ConfigError("every pointer of the quantised inputs must be set");
    if (in.k_scale_block < 1)
      throw ConfigError(fmt::format(
          "k_scale_block is {}: it must be at least 1 (1: a scale per key)", in.k_scale_block));
    // The Hopper fp8 kernel reads one K scale per 64 keys (kernel/fwd_q8_sm90.cuh).
    const int need = uses_wgmma(c) ? codegen::k_scale_block(c.precision) : 1;
    if (in.k_scale_block % need != 0)
      throw ConfigError(fmt::format(
          "{} reads one K scale per {} keys, but these inputs share a scale over runs of {}: "
          "quantise K with one scale per {} keys (ftattn::quantize does), or run a kernel for "
          "--arch sm_90, which reads a scale per key",
          c.name(), need, in.k_scale_block, need));
    if (in.origin) check_quantized_origin(c, *in.origin, problem, q_16bit);
    const QuantizedLayout layout = QuantizedLayout::of(problem);
    // make_params checks the problem, O and alignment; the 8-bit operands are dense, so their
    // strides (bytes, 1 per element) are set here.
    Problem dense = problem;
    const int d = problem.head_dim;
    dense.q = q_16bit ? problem.q
                      : Strides{1LL * problem.heads_q * problem.seqlen_q * d,
                                1LL * problem.seqlen_q * d, d};
    dense.k = {1LL * problem.heads_kv * problem.seqlen_k * d, 1LL * problem.seqlen_k * d, d};
    dense.v = dense.k;
    AttentionParams p = make_params(dense, c, in.q, in.k, in.v, o, lse);
    p.v_seq_stride = layout.keys_padded;
    p.v_head_stride = 1LL * d * layout.keys_padded;
    p.v_batch_stride = p.v_head_stride * problem.heads_kv;
    p.q_scale = q_16bit ? nullptr : in.q_scale;
    p.q_16bit = q_16bit ? 1 : 0;
    p.k_scale = in.k_scale;
    p.v_scale = in.v_scale;
    p.o_is_bf16 = output == Precision::bf16 ? 1 : 0;
    ensure_context();
    return p;
  }

  // A protected launch on `p` (caller holds protect_mu_), its fault log read and acted on as
  // protect.on_fault says; a recompute relaunches on the same operands, without the fault plan
  // but with the caller's thresholds and log size.
  FaultReport enqueue_and_settle(const Problem& problem, AttentionParams& p, CUstream stream,
                                 const ProtectOptions& protect) const {
    enqueue(problem, p, stream, protect);
    ProtectOptions relaunch = protect;
    relaunch.inject.reset();
    return protector_.settle(
        protector_.collect(stream), protect.on_fault, compiled_->config, problem, p, stream,
        [&](AttentionParams& again) { enqueue(problem, again, stream, relaunch); });
  }

  // Protection set-up (the fault log and plan; the checksum rows from the quantised V^T and K
  // into a buffer this object owns, laid out as protect/int8_checksums.cuh reads them), then the
  // attention over the grid or the recompute tile list. Caller holds protect_mu_.
  void enqueue(const Problem& problem, AttentionParams& p, CUstream stream,
               const ProtectOptions& protect, bool reset_log = true) const {
    // The fault log and checksum rows are this object's own: a launch on another stream waits
    // until the last one is done with them.
    const bool shared_buffers =
        compiled_->config.protection != Protection::none || protect.inject.has_value();
    const StreamOrder::Scope ordered(shared_buffers ? &protect_order_ : nullptr, stream);
    enqueue_work(problem, p, stream, protect, reset_log);
  }

  void enqueue_work(const Problem& problem, AttentionParams& p, CUstream stream,
                    const ProtectOptions& protect, bool reset_log) const {
    const KernelConfig& c = compiled_->config;
    if (c.protection == Protection::none && protect.inject)  // as Kernel::run says
      throw ConfigError(c.name() +
                        " takes no fault plan: 8-bit kernels take one with a checksum "
                        "scheme");
    if (c.protection != Protection::none) {
      protector_.prepare(nullptr, c, problem, p, stream, protect, nullptr, reset_log);
      const QuantizedLayout layout = QuantizedLayout::of(problem);
      const codegen::Q8ChecksumRows rows = codegen::q8_checksum_rows(c);
      const int n_blocks = (problem.seqlen_k + c.block_n - 1) / c.block_n;
      const size_t k_offset = static_cast<size_t>(
          q8_k_rows_offset(problem.batch, problem.heads_kv, rows.v_bytes(layout.keys_padded)));
      const size_t bytes =
          k_offset + size_t(problem.batch) * problem.heads_kv * n_blocks * rows.k_bytes(c.head_dim);
      if (checksum_rows_.bytes() < bytes) checksum_rows_ = DeviceBuffer(bytes);
      char* base = static_cast<char*>(checksum_rows_.data());
      Q8ChecksumParams dp{p.v, base, layout.keys_padded, problem.seqlen_k, p.k, base + k_offset};
      void* dargs[] = {&dp};
      const unsigned hk = static_cast<unsigned>(problem.heads_kv);
      const unsigned b = static_cast<unsigned>(problem.batch);
      runtime::launch(v_rows_, Dim3{blocks(layout.keys_padded, 128), hk, b}, Dim3{128, 1, 1}, 0,
                      stream, dargs);
      if (k_rows_ != nullptr)
        runtime::launch(k_rows_, Dim3{static_cast<unsigned>(n_blocks), hk, b}, Dim3{128, 1, 1}, 0,
                        stream, dargs);
      p.checksums = checksum_rows_.data();
    }
    const Dim3 grid = p.tile_count > 0 ? Dim3{static_cast<unsigned>(p.tile_count), 1, 1}
                                       : Dim3{blocks(problem.seqlen_q, c.block_m),
                                              static_cast<unsigned>(problem.heads_q),
                                              static_cast<unsigned>(problem.batch)};
    // The one-warpgroup Hopper kernel copies K, its scales and V^T by TMA.
    Q8TensorMaps maps{};
    if (q8_tensor_maps(c)) maps = encode_q8_tensor_maps(c, p);
    void* args[] = {&p, &maps};
    runtime::launch(attention_, grid, Dim3{static_cast<unsigned>(launch_threads(c)), 1, 1},
                    static_cast<unsigned>(c.shared_memory_bytes()), stream, args);
  }

  std::shared_ptr<const CompiledKernel> compiled_;
  Module module_;
  CUfunction attention_ = nullptr;
  CUfunction v_rows_ = nullptr;  // 8-bit checksum schemes: V^T's checksum rows
  CUfunction k_rows_ = nullptr;  // 8-bit EFTA: every K block's checksum rows
  mutable std::mutex workspace_mu_;
  mutable std::mutex protect_mu_;  // the fault log and checksum rows of launch_quantized
  mutable ProtectedLauncher protector_;
  mutable DeviceBuffer checksum_rows_;   // V^T's, then (EFTA) every K block's
  mutable DeviceBuffer workspace_;       // Kernel::launch's quantised operands
  mutable StreamOrder workspace_order_;  // workspace_, across streams (under workspace_mu_)
  mutable StreamOrder protect_order_;    // the log and checksum rows (under protect_mu_)
};

const QuantizedKernel& as_quantized(const Kernel& kernel) {
  const auto* q = dynamic_cast<const QuantizedKernel*>(&kernel);
  if (q == nullptr)
    throw ConfigError(fmt::format("kernel {} is not an int8 or fp8_e4m3 kernel: use one of those",
                                  kernel.compiled().name));
  return *q;
}

}  // namespace

// Inputs quantize() made for another precision or other sizes would be read as garbage.
void check_quantized_origin(const KernelConfig& c, const QuantizedInputs::Origin& made,
                            const Problem& problem, bool q_16bit) {
  if (made.precision != c.precision)
    throw ConfigError(fmt::format(
        "these inputs were quantised for {}, and {} reads {}: quantise them with a {} kernel",
        to_string(made.precision), c.name(), to_string(c.precision), to_string(c.precision)));
  for (auto [field, was, is] :
       {std::tuple<const char*, int, int>{"batch", made.batch, problem.batch},
        {"heads_kv", made.heads_kv, problem.heads_kv},
        {"seqlen_k", made.seqlen_k, problem.seqlen_k},
        {"head_dim", made.head_dim, problem.head_dim},
        {"heads_q", made.heads_q, q_16bit ? made.heads_q : problem.heads_q},
        {"seqlen_q", made.seqlen_q, q_16bit ? made.seqlen_q : problem.seqlen_q}})
    if (was != is)
      throw ConfigError(fmt::format(
          "these inputs were quantised for {} {}, and the problem has {} {}: quantise them "
          "for this problem",
          field, was, field, is));
}

bool is_quantized(Precision p) { return p == Precision::int8 || p == Precision::fp8_e4m3; }

std::shared_ptr<const Kernel> load_quantized_kernel(
    std::shared_ptr<const CompiledKernel> compiled) {
  ensure_context();
  return std::make_shared<QuantizedKernel>(std::move(compiled));
}

}  // namespace runtime

QuantizedLayout QuantizedLayout::of(const Problem& pr) {
  validate_shape(pr);  // sizes from negative or overflowing lengths would wrap
  QuantizedLayout l;
  l.keys_padded = (pr.seqlen_k + 15) / 16 * 16;
  const size_t d = pr.head_dim;
  const size_t bq = size_t(pr.batch) * pr.heads_q, bk = size_t(pr.batch) * pr.heads_kv;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t offset = at;
    at = runtime::align_up(at + bytes);
    return offset;
  };
  l.q = take(bq * pr.seqlen_q * d);
  l.k = take(bk * pr.seqlen_k * d);
  l.v = take(bk * d * l.keys_padded);
  l.q_scale = take(sizeof(float) * bq * pr.seqlen_q);
  l.k_scale = take(sizeof(float) * bk * l.keys_padded);
  l.v_scale = take(sizeof(float) * bk * d);
  l.bytes = at;
  return l;
}

QuantizedInputs QuantizedInputs::in(void* workspace, const QuantizedLayout& l) {
  auto* ws = static_cast<char*>(workspace);
  QuantizedInputs in;
  in.q = ws + l.q;
  in.k = ws + l.k;
  in.v = ws + l.v;
  in.q_scale = reinterpret_cast<const float*>(ws + l.q_scale);
  in.k_scale = reinterpret_cast<const float*>(ws + l.k_scale);
  in.v_scale = reinterpret_cast<const float*>(ws + l.v_scale);
  return in;
}

QuantizedInputs quantize(const Kernel& kernel, const Problem& problem, const void* q, const void* k,
                         const void* v, Precision input, void* workspace, CUstream stream) {
  return runtime::as_quantized(kernel).quantize(problem, q, k, v, input, workspace, stream);
}

void launch_quantized(const Kernel& kernel, const Problem& problem, const QuantizedInputs& inputs,
                      void* o, Precision output, float* lse, CUstream stream) {
  runtime::as_quantized(kernel).launch_quantized(problem, inputs, o, output, lse, stream);
}

FaultReport run_quantized(const Kernel& kernel, const Problem& problem,
                          const QuantizedInputs& inputs, void* o, Precision output, float* lse,
                          CUstream stream, const ProtectOptions& protect) {
  return runtime::as_quantized(kernel).run_quantized(problem, inputs, o, output, lse, stream,
                                                     protect);
}

}  // namespace ftattn
