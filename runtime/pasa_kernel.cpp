#include "runtime/pasa_kernel.hpp"

#include <fmt/format.h>

#include <mutex>

#include "ftattn/codegen.hpp"
#include "ftattn/params.cuh"
#include "runtime/driver.hpp"
#include "runtime/loaded_kernel.hpp"

namespace ftattn::runtime {
namespace {

constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

class PasaKernel final : public Kernel {
 public:
  explicit PasaKernel(std::shared_ptr<const CompiledKernel> compiled)
      : compiled_(std::move(compiled)), module_(compiled_->cubin) {
    attention_ = module_.function(compiled_->symbol);
    shift_ = module_.function(codegen::pasa_shift_symbol(compiled_->symbol));
  }

  const CompiledKernel& compiled() const override { return *compiled_; }

  // f16 Q, K, V in, f16 O out. K is shifted into this kernel's workspace first (same stream).
  void launch(const Problem& problem, const void* q, const void* k, const void* v, void* o,
              float* lse, CUstream stream, const unsigned char* block_mask) const override {
    const KernelConfig& c = compiled_->config;
    // make_params checks the problem, the pointers and every tensor's alignment (K's too).
    AttentionParams p = make_params(problem, c, q, k, v, o, lse, block_mask);
    const PasaLayout layout = PasaLayout::of(problem, c.block_n);
    ensure_context();
    std::lock_guard lock(workspace_mu_);
    if (workspace_.bytes() < layout.bytes) workspace_ = DeviceBuffer(layout.bytes);
    auto* ws = static_cast<char*>(workspace_.data());

    PasaShiftParams s{};
    s.k = k;
    s.k_batch_stride = problem.k.batch;
    s.k_head_stride = problem.k.head;
    s.k_seq_stride = problem.k.seq;
    s.batch = problem.batch;
    s.heads_kv = problem.heads_kv;
    s.seqlen_k = problem.seqlen_k;
    s.scale_log2 = p.scale_log2;
    s.k_shifted = ws + layout.k_shifted;
    s.shift = ws + layout.shift;
    const unsigned n_blocks = static_cast<unsigned>((problem.seqlen_k + c.block_n - 1) / c.block_n);
    void* shift_args[] = {&s};
    runtime::launch(shift_,
                    Dim3{n_blocks, static_cast<unsigned>(problem.heads_kv),
                         static_cast<unsigned>(problem.batch)},
                    Dim3{128, 1, 1}, 0, stream, shift_args);

    // The attention reads the shifted keys, dense.
    const long long d = problem.head_dim;
    p.k = s.k_shifted;
    p.k_seq_stride = d;
    p.k_head_stride = d * problem.seqlen_k;
    p.k_batch_stride = p.k_head_stride * problem.heads_kv;
    p.k_shift = s.shift;
    void* args[] = {&p};
    runtime::launch(
        attention_,
        Dim3{static_cast<unsigned>((problem.seqlen_q + c.block_m - 1) / c.block_m),
             static_cast<unsigned>(problem.heads_q), static_cast<unsigned>(problem.batch)},
        Dim3{static_cast<unsigned>(32 * c.num_warps), 1, 1},
        static_cast<unsigned>(c.shared_memory_bytes()), stream, args);
  }

 private:
  std::shared_ptr<const CompiledKernel> compiled_;
  Module module_;
  CUfunction attention_ = nullptr;
  CUfunction shift_ = nullptr;
  mutable std::mutex workspace_mu_;  // one launch at a time per kernel object
  mutable DeviceBuffer workspace_;
};

}  // namespace

PasaLayout PasaLayout::of(const Problem& problem, int block_n) {
  if (block_n < 1) throw ConfigError(fmt::format("block_n {} must be at least 1", block_n));
  const std::size_t heads = std::size_t(problem.batch) * problem.heads_kv;
  const std::size_t d = problem.head_dim;
  const std::size_t n_blocks = (std::size_t(problem.seqlen_k) + block_n - 1) / block_n;
  PasaLayout l;
  l.k_shifted = 0;
  l.shift = align_up(heads * problem.seqlen_k * d * 2);
  l.bytes = align_up(l.shift + heads * n_blocks * d * 2);
  return l;
}

std::shared_ptr<const Kernel> load_pasa_kernel(std::shared_ptr<const CompiledKernel> compiled) {
  ensure_context();
  return std::make_shared<PasaKernel>(std::move(compiled));
}

}  // namespace ftattn::runtime
