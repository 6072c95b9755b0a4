#include "runtime/pasa_shift.hpp"

#include <fmt/format.h>

namespace ftattn::runtime {
namespace {

constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

PasaLayout PasaLayout::of(const Problem& problem, int block_n) {
  if (block_n < 1) throw ConfigError(fmt::format("block_n {} must be at least 1", block_n));
  const std::size_t heads = std::size_t(problem.batch) * problem.heads_kv;
  const std::size_t d = problem.head_dim;
  const std::size_t n_blocks = (std::size_t(problem.seqlen_k) + block_n - 1) / block_n;
  PasaLayout l;
  l.k_shifted = 0;
  l.shift = align_up(heads * problem.seqlen_k * d * 2);
  // The Hopper kernels load the shift vectors of eight blocks at a time (FwdWgmmaTraits::
  // recovery_blocks), up to seven past the last head's; those rows are never used.
  l.bytes = align_up(l.shift + (heads * n_blocks + 7) * d * 2);
  return l;
}

void enqueue_pasa_shift(CUfunction shift, const KernelConfig& config, const Problem& problem,
                        AttentionParams& p, DeviceBuffer& workspace, CUstream stream) {
  const PasaLayout layout = PasaLayout::of(problem, config.block_n);
  if (workspace.bytes() < layout.bytes) workspace = DeviceBuffer(layout.bytes);
  auto* ws = static_cast<char*>(workspace.data());

  PasaShiftParams s{};
  s.k = p.k;
  s.k_batch_stride = p.k_batch_stride;
  s.k_head_stride = p.k_head_stride;
  s.k_seq_stride = p.k_seq_stride;
  s.batch = problem.batch;
  s.heads_kv = problem.heads_kv;
  s.seqlen_k = problem.seqlen_k;
  s.scale_log2 = p.scale_log2;
  s.k_shifted = ws + layout.k_shifted;
  s.shift = ws + layout.shift;
  const unsigned n_blocks =
      static_cast<unsigned>((problem.seqlen_k + config.block_n - 1) / config.block_n);
  void* args[] = {&s};
  launch(
      shift,
      Dim3{n_blocks, static_cast<unsigned>(problem.heads_kv), static_cast<unsigned>(problem.batch)},
      Dim3{128, 1, 1}, 0, stream, args);

  use_shifted_keys(config, problem, p, workspace);
}

void use_shifted_keys(const KernelConfig& config, const Problem& problem, AttentionParams& p,
                      const DeviceBuffer& workspace) {
  const PasaLayout layout = PasaLayout::of(problem, config.block_n);
  if (workspace.bytes() < layout.bytes)
    throw Error("the shifted keys' workspace is smaller than their layout");
  auto* ws = static_cast<char*>(workspace.data());
  // The attention reads the shifted keys, dense.
  const long long d = problem.head_dim;
  p.k = ws + layout.k_shifted;
  p.k_seq_stride = d;
  p.k_head_stride = d * problem.seqlen_k;
  p.k_batch_stride = p.k_head_stride * problem.heads_kv;
  p.k_shift = ws + layout.shift;
}

}  // namespace ftattn::runtime
