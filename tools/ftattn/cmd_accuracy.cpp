// ftattn accuracy: one config's output against the FP64 reference on the papers' input
// distributions (normal, uniform, PASA's uniform and hybrid with bias x0 and amplitude Am), with
// the papers' metrics: rel L2 (PASA's "RMSE"), max abs, MRE, cosine, NaN/Inf rate. The golden
// output is FP64 attention of the stored 16-bit inputs, so quantisation counts as error.
// --model fp16-scores runs PASA's FA(FP16-FP32) on the host instead (S = Q K^T stored in FP16,
// the rest in high precision): it overflows to NaN where PASA's paper says it does.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <thread>

#include "ftattn/accuracy.hpp"
#include "ftattn/reference.hpp"
#include "runtime/driver.hpp"
#include "tools/ftattn/commands.hpp"
#include "tools/ftattn/config_flags.hpp"
#include "tools/ftattn/number_checks.hpp"
#include "tools/ftattn/output_file.hpp"

namespace ftattn::cli {
namespace {

struct AccuracyOptions {
  ConfigFlags config;
  std::string dist = "normal", model, csv;
  std::optional<double> x0, am;  // the distribution's defaults when not given
  int batch = 1, heads = 16, seqlen = 1280, rows = 0;
  uint64_t seed = 1;
};

// One sample of the distribution. PASA eq. 17 (uniform) and eq. 18 (hybrid, p = 0.001).
struct Distribution {
  std::string name;
  double x0, am;
  double operator()(std::mt19937_64& rng) const {
    if (name == "normal") return std::normal_distribution<double>(x0, am)(rng);
    if (name == "uniform" || name == "pasa-uniform")
      return std::uniform_real_distribution<double>(x0 - am, x0 + am)(rng);
    const double outlier = std::bernoulli_distribution(0.001)(rng)
                               ? std::normal_distribution<double>(0.0, am)(rng)
                               : 0.0;
    return std::normal_distribution<double>(x0, 1.0)(rng) + outlier;
  }
};

Distribution distribution(const AccuracyOptions& o) {
  // Defaults: N(0, 1) and U(-0.5, 0.5) as in INT-FlashAttention; PASA's first overflow cases.
  double x0 = 0, am = 1;
  if (o.dist == "uniform") am = 0.5;
  if (o.dist == "pasa-uniform") x0 = 30, am = 0.5;
  if (o.dist == "pasa-hybrid") x0 = 30, am = 10;
  return {o.dist, o.x0.value_or(x0), o.am.value_or(am)};
}

reference::Tensor16 sample(const Distribution& dist, std::mt19937_64& rng, Precision storage,
                           const Strides& s, int batch, int heads, int seqlen, int d) {
  reference::Tensor16 t;
  t.strides = s;
  t.data.resize(reference::span_elements(s, batch, heads, seqlen, d));
  for (auto& x : t.data) x = reference::to_bits(static_cast<float>(dist(rng)), storage);
  return t;
}

// FA(FP16-FP32) of PASA's section 1.2 for one row: S leaves the matrix unit as FP16 (Inf past
// 65504), then scale, max, exp and sums in double.
std::vector<double> fp16_scores_row(const Problem& pr, Mask mask, const reference::Tensor16& q,
                                    const reference::Tensor16& k, const reference::Tensor16& v,
                                    int b, int h, int row) {
  const int d = pr.head_dim;
  const int last = is_causal(mask) ? std::min(pr.seqlen_k - 1, row + pr.seqlen_k - pr.seqlen_q)
                                   : pr.seqlen_k - 1;
  std::vector<double> s(std::max(last + 1, 0)), out(d, 0.0);
  double mx = -std::numeric_limits<double>::infinity();
  for (int j = 0; j <= last; ++j) {
    double dot = 0;
    for (int x = 0; x < d; ++x)
      dot += double(q.at(Precision::f16, b, h, row, x)) * k.at(Precision::f16, b, h, j, x);
    const float as_f16 =
        reference::from_bits(reference::to_bits(float(dot), Precision::f16), Precision::f16);
    s[j] = as_f16 * double(pr.scale());
    mx = std::max(mx, s[j]);
  }
  double sum = 0;
  for (int j = 0; j <= last; ++j) {
    const double e = std::exp(s[j] - mx);  // Inf - Inf = NaN: PASA's failure
    sum += e;
    for (int x = 0; x < d; ++x) out[x] += e * v.at(Precision::f16, b, h, j, x);
  }
  for (double& x : out) x /= sum;
  return out;
}

int run_accuracy(const AccuracyOptions& o, const GlobalOptions& global) {
  KernelConfig config = config_from_flags(o.config);
  if (config.head_dim == 0) config.head_dim = 128;  // PASA's (1, 16, 1280, 128)
  if (!o.model.empty() && o.model != "fp16-scores")
    throw ConfigError(fmt::format("unknown --model '{}': use fp16-scores", o.model));
  if (!o.model.empty() && config.precision != Precision::f16)
    throw ConfigError(
        fmt::format("--model {} stores its inputs in f16: drop --precision {} or the --model",
                    o.model, to_string(config.precision)));
  // The inputs are dense random tensors with no block mask to go with them.
  if (is_block_sparse(config.mask))
    throw ConfigError(fmt::format(
        "accuracy runs dense masks (none, causal), not {}: check a block-sparse kernel with "
        "ftattn run",
        to_string(config.mask)));
  const Distribution dist = distribution(o);
  const Problem pr = Problem::bhsd(o.batch, o.heads, o.heads, o.seqlen, o.seqlen, config.head_dim);
  validate_head_dim(config.head_dim);
  validate_shape(pr);
  // Q, K and V are sampled whole on the host (2 bytes an element each), whatever --rows says.
  const int64_t elements = int64_t{pr.batch} * pr.heads_q * pr.seqlen_q * config.head_dim;
  if (elements > (int64_t{1} << 30))
    throw ConfigError(fmt::format(
        "batch {} x heads {} x seqlen {} x head_dim {} = {} elements per input is more than this "
        "command samples on the host (2^30): give a smaller --batch, --heads or --seqlen",
        pr.batch, pr.heads_q, pr.seqlen_q, config.head_dim, elements));
  // Every row's output and its reference are kept, as doubles.
  const int64_t rows = int64_t{pr.batch} * pr.heads_q * pr.seqlen_q;
  const int64_t compared = o.rows > 0 ? std::min<int64_t>(o.rows, rows) : rows;
  if (compared * config.head_dim > (int64_t{1} << 28))
    throw ConfigError(fmt::format(
        "{} rows of head_dim {} are too many to compare on the host: give --rows (e.g. 4096) "
        "or a smaller problem",
        compared, config.head_dim));
  // Opened before any work, so a path that cannot be written fails at once.
  OutputFile csv("--csv", o.csv, OutputFile::Mode::append);
  // 8-bit and PASA kernels take f16 inputs.
  const Precision storage = config.precision == Precision::bf16 ? Precision::bf16 : Precision::f16;
  std::mt19937_64 rng(o.seed);
  const int d = config.head_dim;
  const auto q = sample(dist, rng, storage, pr.q, pr.batch, pr.heads_q, pr.seqlen_q, d);
  const auto k = sample(dist, rng, storage, pr.k, pr.batch, pr.heads_kv, pr.seqlen_k, d);
  const auto v = sample(dist, rng, storage, pr.v, pr.batch, pr.heads_kv, pr.seqlen_k, d);

  // Rows compared: all, or every n-th so that about `rows` are.
  const long long total = 1LL * pr.batch * pr.heads_q * pr.seqlen_q;
  const long long step = o.rows > 0 && o.rows < total ? total / o.rows : 1;
  std::vector<long long> picks;
  for (long long i = 0; i < total; i += step) picks.push_back(i);

  std::string what;
  reference::Tensor16 out16;
  const bool host_model = o.model == "fp16-scores";
  if (host_model) {
    what = "host model fp16-scores (PASA's FA(FP16-FP32))";
  } else {
    Runtime rt(global.runtime_options());
    if (!rt.has_device()) {
      if (config.arch.is_auto()) config.arch = Arch::parse("sm_90a");
      const auto compiled = rt.compile(rt.resolve(config, &pr));
      fmt::print("kernel    {} (compiled; no GPU, so nothing was launched)\n", compiled->name);
      std::fflush(stdout);
      std::fprintf(stderr, "ftattn: accuracy needs a GPU to run %s\n", compiled->name.c_str());
      return kNotLaunched;
    }
    const KernelConfig full = rt.resolve(config, &pr);
    what = full.name();
    runtime::DeviceBuffer dq(q.data.size() * 2), dk(k.data.size() * 2), dv(v.data.size() * 2),
        dout(reference::span_elements(pr.o, pr.batch, pr.heads_q, pr.seqlen_q, d) * 2);
    dq.upload(q.data.data(), dq.bytes());
    dk.upload(k.data.data(), dk.bytes());
    dv.upload(v.data.data(), dv.bytes());
    dout.fill_bytes(0xFF);
    rt.kernel(full)->launch(pr, dq.data(), dk.data(), dv.data(), dout.data(), nullptr, nullptr);
    out16.strides = pr.o;
    out16.data.resize(dout.bytes() / 2);
    dout.download(out16.data.data(), dout.bytes());
  }

  std::vector<double> golden(picks.size() * d), output(picks.size() * d);
  // An error in a worker is rethrown here: thrown inside a std::thread it would terminate.
  std::vector<std::exception_ptr> errors(std::max(1u, std::thread::hardware_concurrency()));
  auto rows_of = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const long long idx = picks[i];
      const int s = int(idx % pr.seqlen_q), h = int(idx / pr.seqlen_q % pr.heads_q),
                b = int(idx / (1LL * pr.seqlen_q * pr.heads_q));
      const auto g = reference::attention_row(pr, storage, config.mask, q, k, v, b, h, s);
      std::copy(g.begin(), g.end(), golden.begin() + i * d);
      if (host_model) {
        const auto m = fp16_scores_row(pr, config.mask, q, k, v, b, h, s);
        std::copy(m.begin(), m.end(), output.begin() + i * d);
      } else {
        for (int x = 0; x < d; ++x) output[i * d + x] = out16.at(storage, b, h, s, x);
      }
    }
  };
  auto work = [&](size_t begin, size_t end, std::exception_ptr& error) {
    try {
      rows_of(begin, end);
    } catch (...) {
      error = std::current_exception();
    }
  };
  const size_t workers = errors.size();
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w)
    threads.emplace_back(work, picks.size() * w / workers, picks.size() * (w + 1) / workers,
                         std::ref(errors[w]));
  for (auto& t : threads) t.join();
  for (const auto& error : errors)
    if (error) std::rethrow_exception(error);

  const accuracy::Metrics m = accuracy::compare(golden, output);
  fmt::print("run       {}\n", what);
  fmt::print("inputs    {} x0 {} Am {}, batch {}, heads {}, seqlen {}, head_dim {}, {} rows\n",
             dist.name, dist.x0, dist.am, pr.batch, pr.heads_q, pr.seqlen_q, d, picks.size());
  fmt::print("accuracy  {}\n", m.summary());
  if (csv.is_open()) {
    if (csv.fresh())
      csv.stream() << "run,dist,x0,am,batch,heads,seqlen,head_dim,rel_l2,max_abs,mre,mre_last4,"
                      "abs_ratio,cosine,non_finite_rate\n";
    csv.stream() << fmt::format(
        "{},{},{},{},{},{},{},{},{:.6e},{:.6e},{:.6e},{:.6e},{:.6e},{:.8f},{:.6f}\n",
        host_model ? "fp16-scores" : what, dist.name, dist.x0, dist.am, pr.batch, pr.heads_q,
        pr.seqlen_q, d, m.rel_l2, m.max_abs, m.mre, m.mre_last4, m.abs_ratio, m.cosine,
        m.non_finite_rate);
    csv.commit();
  }
  return 0;
}

}  // namespace

Command add_accuracy_command(CLI::App& parent, const GlobalOptions& global) {
  auto o = std::make_shared<AccuracyOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "accuracy", "Error of one config against the FP64 reference on the papers' distributions");
  add_config_flags(*cmd, o->config, Positional::one);
  cmd->add_option("--dist", o->dist, "normal, uniform, pasa-uniform or pasa-hybrid")
      ->check(CLI::IsMember({"normal", "uniform", "pasa-uniform", "pasa-hybrid"}))
      ->capture_default_str();
  cmd->add_option("--x0", o->x0,
                  "bias: mean (normal, hybrid) or centre (uniform); default 0, PASA cases 30")
      ->check(finite_number(false));
  cmd->add_option("--am", o->am,
                  "amplitude: std (normal), half width (uniform), outlier std (hybrid); > 0")
      ->check(finite_number(true));
  cmd->add_option("--batch", o->batch, "batch size")->check(at_least(1))->capture_default_str();
  cmd->add_option("--heads", o->heads, "heads")->check(at_least(1))->capture_default_str();
  cmd->add_option("--seqlen", o->seqlen, "sequence length")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--rows", o->rows, "query rows compared (0: all)")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed")->check(seed_number())->capture_default_str();
  cmd->add_option("--model", o->model,
                  "fp16-scores: PASA's FA(FP16-FP32) on the host instead of a kernel");
  cmd->add_option("--csv", o->csv, "append one line of metrics to this CSV file");
  return {cmd, [o, &global] { return run_accuracy(*o, global); }};
}

}  // namespace ftattn::cli
