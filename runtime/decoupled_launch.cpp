#include "runtime/decoupled_launch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ftattn/kernel/decoupled_params.cuh"
#include "ftattn/params.cuh"

namespace ftattn::runtime {
namespace {

using codegen::DecoupledTiles;

int div_up(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

int valid_keys(const Problem& pr, bool causal, int row) {
  if (!causal) return pr.seqlen_k;
  return std::max(0, std::min(pr.seqlen_k, row + 1 + pr.seqlen_k - pr.seqlen_q));
}

}  // namespace

float decoupled_tolerance(Precision p, int k) {
  // The hi/lo checksum operand leaves a relative error of u^2 (u: the 16-bit unit roundoff);
  // the FP32 sums of the GEMM and of the recomputation add rounding that grows like sqrt(k)
  // for k terms. Both are relative to the sum of absolute contributions, which the threshold
  // multiplies. Margins: 2x and 8 standard deviations.
  const double u = p == Precision::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  return static_cast<float>(2 * u * u + 8 * std::sqrt(std::max(k, 1)) * std::ldexp(1.0, -24));
}

DecoupledWorkspace decoupled_workspace(const Problem& pr) {
  DecoupledWorkspace w;
  w.row_elements = (int64_t{pr.seqlen_k} + DecoupledTiles::row_pad - 1) / DecoupledTiles::row_pad *
                   DecoupledTiles::row_pad;
  const double rows = double(pr.batch) * pr.heads_q * pr.seqlen_q;
  const double s_bytes = rows * double(w.row_elements) * 4;
  if (s_bytes * 1.5 > double(std::numeric_limits<std::size_t>::max() / 2))
    throw ConfigError("decoupled: the S and P workspace overflows size_t: split the call");
  w.s_bytes = static_cast<std::size_t>(s_bytes);
  w.p_bytes = w.s_bytes / 2;
  return w;
}

campaign::InjectionSpace decoupled_injection_space(const KernelConfig& c, const Problem& pr,
                                                   FaultSite site) {
  const DecoupledTiles t = codegen::decoupled_tiles(c.head_dim);
  const bool causal = is_causal(c.mask);
  campaign::InjectionSpace s;
  switch (site) {
    case FaultSite::scores:
    case FaultSite::checksum: {  // scores GEMM, grid (key tiles, row tiles, batch x heads)
      s.threads = DecoupledTiles::scores_threads;
      s.elements = site == FaultSite::scores ? 2 * 8 * 4 : 2 * 4;
      const int n_tiles = div_up(pr.seqlen_k, DecoupledTiles::scores_n);
      const int m_tiles = div_up(pr.seqlen_q, DecoupledTiles::scores_m);
      for (int bh = 0; bh < pr.batch * pr.heads_q; ++bh)
        for (int m = 0; m < m_tiles; ++m)
          for (int n = 0; n < n_tiles; ++n) {
            const int last_row = std::min((m + 1) * DecoupledTiles::scores_m, pr.seqlen_q) - 1;
            const bool runs = n * DecoupledTiles::scores_n < valid_keys(pr, causal, last_row);
            s.iterations.push_back(runs ? c.head_dim / DecoupledTiles::k_step : 0);
          }
      return s;
    }
    case FaultSite::row_max:
    case FaultSite::row_sum:
    case FaultSite::probs: {  // softmax, 4 rows per CTA; a chunk every warp of the CTA runs
      s.threads = 32 * DecoupledTiles::softmax_rows;
      s.elements = site == FaultSite::probs ? 4 : 1;
      const int64_t rows = int64_t{pr.batch} * pr.heads_q * pr.seqlen_q;
      for (int64_t r0 = 0; r0 < rows; r0 += DecoupledTiles::softmax_rows) {
        int chunks = std::numeric_limits<int>::max();
        for (int w = 0; w < DecoupledTiles::softmax_rows; ++w) {
          const int64_t r = r0 + w;
          chunks =
              r < rows
                  ? std::min(chunks,
                             div_up(valid_keys(pr, causal, static_cast<int>(r % pr.seqlen_q)), 128))
                  : 0;
        }
        s.iterations.push_back(chunks);
      }
      return s;
    }
    case FaultSite::output: {  // output GEMM, grid (row tiles, heads, batch)
      s.threads = t.output_threads();
      s.elements = 2 * (t.output_warp_n / 8) * 4;
      const int64_t ld = decoupled_workspace(pr).row_elements;
      const int m_tiles = div_up(pr.seqlen_q, t.output_m());
      for (int bh = 0; bh < pr.batch * pr.heads_q; ++bh)
        for (int m = 0; m < m_tiles; ++m) {
          const int last_row = std::min((m + 1) * t.output_m(), pr.seqlen_q) - 1;
          const int64_t k_end = std::min<int64_t>(
              ld, int64_t{div_up(valid_keys(pr, causal, last_row), DecoupledTiles::k_step)} *
                      DecoupledTiles::k_step);
          s.iterations.push_back(static_cast<int>(k_end / DecoupledTiles::k_step));
        }
      return s;
    }
    default:
      throw ConfigError(fmt::format(
          "decoupled has no injection point for site {}: use scores, checksum, row_max, row_sum, "
          "probs or output",
          campaign::site_name(site)));
  }
}

void DecoupledLauncher::launch(const Module& module, const std::string& symbol,
                               const KernelConfig& c, const Problem& pr,
                               const AttentionParams& params, CUstream stream) const {
  const DecoupledTiles t = codegen::decoupled_tiles(c.head_dim);
  const DecoupledWorkspace w = decoupled_workspace(pr);
  if (int64_t{pr.batch} * pr.heads_q > 65535)
    throw ConfigError(
        fmt::format("decoupled: batch x heads_q = {} is over 65535 (grid limit): split the call",
                    int64_t{pr.batch} * pr.heads_q));
  if (div_up(pr.seqlen_q, DecoupledTiles::scores_m) > 65535)
    throw ConfigError(fmt::format(
        "decoupled: seqlen_q {} takes {} blocks of {} query rows, over 65535 (grid limit): split "
        "the queries",
        pr.seqlen_q, div_up(pr.seqlen_q, DecoupledTiles::scores_m), DecoupledTiles::scores_m));

  std::lock_guard lock(mutex_);
  ensure_context();
  if (workspace_.bytes() < w.bytes()) {
    std::size_t free_bytes = 0, total_bytes = 0;
    check(driver().cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo");
    const std::size_t have = free_bytes + workspace_.bytes();
    auto gib = [](std::size_t b) { return static_cast<double>(b) / (1024.0 * 1024 * 1024); };
    const std::string advice = fmt::format(
        "decoupled needs {:.2f} GiB of workspace for S and P (batch x heads x seqlen_q x "
        "seqlen_k = {} x {} x {} x {}), {:.2f} GiB are free: use a fused scheme (efta_correct "
        "keeps S and P on chip) or a smaller problem",
        gib(w.bytes()), pr.batch, pr.heads_q, pr.seqlen_q, pr.seqlen_k, gib(have));
    if (w.bytes() > have) throw ConfigError(advice);
    workspace_ = DeviceBuffer();  // free the old one first: the new one may need its room
    try {
      workspace_ = DeviceBuffer(w.bytes());
    } catch (const DriverError& e) {
      if (e.code() == CUDA_ERROR_OUT_OF_MEMORY) throw ConfigError(advice);
      throw;
    }
  }

  DecoupledParams dp{};
  dp.attn = params;
  dp.s = static_cast<float*>(workspace_.data());
  dp.p = static_cast<char*>(workspace_.data()) + w.s_bytes;
  dp.row_elements = w.row_elements;
  dp.tol_scores =
      params.tol_scores > 0 ? params.tol_scores : decoupled_tolerance(c.precision, c.head_dim);
  dp.tol_output =
      params.tol_output > 0 ? params.tol_output : decoupled_tolerance(c.precision, pr.seqlen_k);
  dp.tol_floor = params.tol_floor;
  void* args[] = {&dp};

  const unsigned bh = static_cast<unsigned>(pr.batch * pr.heads_q);
  runtime::launch(module.function(symbol),
                  Dim3{static_cast<unsigned>(div_up(pr.seqlen_k, DecoupledTiles::scores_n)),
                       static_cast<unsigned>(div_up(pr.seqlen_q, DecoupledTiles::scores_m)), bh},
                  Dim3{DecoupledTiles::scores_threads, 1, 1},
                  static_cast<unsigned>(t.scores_smem_bytes()), stream, args);
  const int64_t rows = int64_t{pr.batch} * pr.heads_q * pr.seqlen_q;
  runtime::launch(module.function("decoupled_softmax_" + symbol),
                  Dim3{static_cast<unsigned>((rows + DecoupledTiles::softmax_rows - 1) /
                                             DecoupledTiles::softmax_rows),
                       1, 1},
                  Dim3{32 * DecoupledTiles::softmax_rows, 1, 1}, 0, stream, args);
  runtime::launch(module.function("decoupled_output_" + symbol),
                  Dim3{static_cast<unsigned>(div_up(pr.seqlen_q, t.output_m())),
                       static_cast<unsigned>(pr.heads_q), static_cast<unsigned>(pr.batch)},
                  Dim3{static_cast<unsigned>(t.output_threads()), 1, 1},
                  static_cast<unsigned>(t.output_smem_bytes(c.head_dim)), stream, args);
}

}  // namespace ftattn::runtime
