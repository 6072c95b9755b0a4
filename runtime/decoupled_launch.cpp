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

namespace {

enum class Stage { scores, softmax, output };

Stage stage_of(FaultSite site) {
  switch (site) {
    case FaultSite::scores:
    case FaultSite::checksum:
      return Stage::scores;
    case FaultSite::row_max:
    case FaultSite::row_sum:
    case FaultSite::probs:
      return Stage::softmax;
    case FaultSite::output:
      return Stage::output;
    default:
      throw ConfigError(fmt::format(
          "decoupled has no injection point for site {}: use scores, checksum, row_max, row_sum, "
          "probs or output",
          campaign::site_name(site)));
  }
}

}  // namespace

DecoupledSiteKernel decoupled_site_kernel(const KernelConfig& c, FaultSite site) {
  switch (stage_of(site)) {
    case Stage::scores:
      return {"scores GEMM", "key tile fastest, then query tile, then batch x heads",
              "32-wide k step over head_dim", DecoupledTiles::scores_threads};
    case Stage::softmax:
      return {"softmax", "4 query rows each: row fastest, then head, then batch",
              "128-key chunk of the thread's row", 32 * DecoupledTiles::softmax_rows};
    case Stage::output:
      return {"output GEMM", "query tile fastest, then head, then batch", "32-key k step",
              codegen::decoupled_tiles(c.head_dim).output_threads()};
  }
  return {};
}

long long decoupled_site_ctas(const KernelConfig& c, const Problem& pr, FaultSite site) {
  const long long bh = int64_t{pr.batch} * pr.heads_q;
  switch (stage_of(site)) {
    case Stage::scores:  // grid (key tiles, row tiles, batch x heads)
      return bh * div_up(pr.seqlen_q, DecoupledTiles::scores_m) *
             div_up(pr.seqlen_k, DecoupledTiles::scores_n);
    case Stage::softmax:  // 4 rows per CTA
      return (bh * pr.seqlen_q + DecoupledTiles::softmax_rows - 1) / DecoupledTiles::softmax_rows;
    case Stage::output:  // grid (row tiles, heads, batch)
      return bh * div_up(pr.seqlen_q, codegen::decoupled_tiles(c.head_dim).output_m());
  }
  return 0;
}

int decoupled_site_iterations(const KernelConfig& c, const Problem& pr, FaultSite site,
                              long long cta, int thread) {
  const bool causal = is_causal(c.mask);
  switch (stage_of(site)) {
    case Stage::scores: {  // every k step, unless the tile is above every row's diagonal
      const int n_tiles = div_up(pr.seqlen_k, DecoupledTiles::scores_n);
      const int n = static_cast<int>(cta % n_tiles);
      const int m = static_cast<int>(cta / n_tiles % div_up(pr.seqlen_q, DecoupledTiles::scores_m));
      const int last_row = std::min((m + 1) * DecoupledTiles::scores_m, pr.seqlen_q) - 1;
      const bool runs = n * DecoupledTiles::scores_n < valid_keys(pr, causal, last_row);
      return runs ? c.head_dim / DecoupledTiles::k_step : 0;
    }
    case Stage::softmax: {  // warp w takes row 4 cta + w: its chunks (none past the last row)
      const int64_t r = cta * DecoupledTiles::softmax_rows + thread / 32;
      if (r >= int64_t{pr.batch} * pr.heads_q * pr.seqlen_q) return 0;
      return div_up(valid_keys(pr, causal, static_cast<int>(r % pr.seqlen_q)), 128);
    }
    case Stage::output: {  // the k steps up to the tile's last row's keys
      const DecoupledTiles t = codegen::decoupled_tiles(c.head_dim);
      const int m = static_cast<int>(cta % div_up(pr.seqlen_q, t.output_m()));
      const int last_row = std::min((m + 1) * t.output_m(), pr.seqlen_q) - 1;
      const int64_t k_end = std::min<int64_t>(
          decoupled_workspace(pr).row_elements,
          int64_t{div_up(valid_keys(pr, causal, last_row), DecoupledTiles::k_step)} *
              DecoupledTiles::k_step);
      return static_cast<int>(k_end / DecoupledTiles::k_step);
    }
  }
  return 0;
}

campaign::InjectionSpace decoupled_injection_space(const KernelConfig& c, const Problem& pr,
                                                   FaultSite site) {
  const DecoupledTiles t = codegen::decoupled_tiles(c.head_dim);
  campaign::InjectionSpace s;
  s.threads = decoupled_site_kernel(c, site).threads;
  switch (site) {
    case FaultSite::scores:
      s.elements = 2 * 8 * 4;
      break;
    case FaultSite::checksum:
      s.elements = 2 * 4;
      break;
    case FaultSite::probs:
      s.elements = 4;
      break;
    case FaultSite::output:
      s.elements = 2 * (t.output_warp_n / 8) * 4;
      break;
    default:  // row_max, row_sum
      s.elements = 1;
  }
  // The draw picks the thread apart from the iteration: a softmax CTA counts the chunks every
  // one of its warps runs (none where a warp is past the last row).
  const int warps = stage_of(site) == Stage::softmax ? DecoupledTiles::softmax_rows : 1;
  const long long ctas = decoupled_site_ctas(c, pr, site);
  s.iterations.reserve(static_cast<size_t>(ctas));
  for (long long cta = 0; cta < ctas; ++cta) {
    int n = std::numeric_limits<int>::max();
    for (int w = 0; w < warps; ++w)
      n = std::min(n, decoupled_site_iterations(c, pr, site, cta, 32 * w));
    s.iterations.push_back(n);
  }
  return s;
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
