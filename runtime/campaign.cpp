#include "ftattn/campaign.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "ftattn/errors.hpp"
#include "runtime/decoupled_launch.hpp"
#include "runtime/fault_plan.hpp"
#include "runtime/hash.hpp"

namespace ftattn::campaign {
namespace {

// Kernels whose key blocks keep their own P V tile before O takes it: int8 on mma.sync (INT32),
// fp8 with Flash-ABFT on wgmma (FP32, checked per block: kernel/fwd_q8_sm90.cuh).
bool has_pv_site(const KernelConfig& c) {
  if (c.precision == Precision::int8) return !uses_wgmma(c);
  return c.precision == Precision::fp8_e4m3 && c.protection == Protection::flash_abft &&
         uses_wgmma(c);
}

// The 8-bit kernels' dequantisation factors, in the builds that carry a checksum scheme (the
// injection builds): a key's scale as its lane loaded it, or a row's softmax factor.
bool eight_bit(Precision p) { return p == Precision::int8 || p == Precision::fp8_e4m3; }
bool has_scale_site(const KernelConfig& c) {
  return eight_bit(c.precision) && c.protection != Protection::none &&
         c.protection != Protection::decoupled;
}

// The fused kernels: grid (m_blocks, heads_q, batch), causal grids longest-first, one
// iteration per key block (fwd_sm80.cuh).
InjectionSpace fused_space(const KernelConfig& c, const Problem& pr, FaultSite site) {
  if (is_block_sparse(c.mask))
    throw ConfigError("campaigns run dense masks (none or causal): block-sparse is not planned");
  InjectionSpace s;
  s.threads = 32 * c.num_warps;
  const int m_tiles = c.block_m / (16 * c.num_warps);
  switch (site) {
    case FaultSite::scores:
    case FaultSite::probs:
      // f16_pasa holds S and P as f16 pairs: a value is one packed register of two halves.
      s.elements = m_tiles * (c.block_n / 8) * (c.precision == Precision::f16_pasa ? 2 : 4);
      break;
    case FaultSite::row_max:
    case FaultSite::row_sum:
    case FaultSite::rescale:
      s.elements = m_tiles * 2;
      break;
    case FaultSite::output:
      s.elements = m_tiles * (c.head_dim / 8) * 4;
      break;
    case FaultSite::pv:
      if (!has_pv_site(c))
        throw ConfigError(fmt::format(
            "site pv is a key block's own P V tile, which {} does not keep: it accumulates P V "
            "{}, use site output{}",
            c.name(), c.precision == Precision::int8 ? "onto its INT32 O" : "in O itself",
            c.precision == Precision::int8 ? " (or --arch sm_90 for the mma.sync kernel)" : ""));
      // int8 on mma.sync: the block's INT32 P V. fp8 Flash-ABFT's wgmma kernel: its FP32 tile as
      // GEMM II leaves it, O's channels of the first piece (at head dim 128 the first 64), of
      // which the kernel takes the element modulo its count.
      s.elements = c.precision == Precision::int8 ? m_tiles * (c.head_dim / 8) * 4 : 0;
      break;
    case FaultSite::checksum:
      s.elements = 0;  // scheme-specific: the kernel takes the element modulo its count
      break;
    case FaultSite::scale:
      if (!has_scale_site(c))
        throw ConfigError(fmt::format(
            "site scale is an 8-bit kernel's dequantisation factor, which {} does not have{}",
            c.name(),
            eight_bit(c.precision) ? " in an injection build: pick a checksum scheme"
                                   : ": use an int8 or fp8_e4m3 precision"));
      // The row factors, then the key scales of the block (kernel-specific: the kernel takes
      // the element modulo its count).
      s.elements = 0;
      break;
    default:
      throw ConfigError(
          fmt::format("site {} has no source-level injection point: use scores, "
                      "probs, row_max, row_sum, rescale, output or checksum",
                      site_name(site)));
  }
  // The bounds every launch checks a plan against (runtime::check_fault_plan): a draw from
  // here always passes.
  const long long ctas = runtime::fused_ctas(c, pr);
  s.iterations.reserve(static_cast<size_t>(ctas));
  for (long long cta = 0; cta < ctas; ++cta)
    s.iterations.push_back(runtime::fused_key_blocks(c, pr, cta));
  return s;
}

}  // namespace

// The names live with the enum (fault.cpp); a campaign refuses "none".
std::string_view site_name(FaultSite s) { return ftattn::to_string(s); }

FaultSite parse_site(std::string_view text) {
  if (text != "none") {
    try {
      return parse_fault_site(text);
    } catch (const ConfigError&) {
    }
  }
  throw ConfigError(fmt::format(
      "unknown fault site '{}': use scores, probs, row_max, row_sum, rescale, output, checksum, "
      "pv (int8 on mma.sync, fp8 Flash-ABFT on wgmma), scale (8-bit), all (every one the kernel "
      "has) (or ir with an IR-level backend)",
      text));
}

std::vector<FaultSite> sites_of(const KernelConfig& c) {
  if (c.protection == Protection::decoupled)
    return {FaultSite::scores,  FaultSite::probs,  FaultSite::row_max,
            FaultSite::row_sum, FaultSite::output, FaultSite::checksum};
  std::vector<FaultSite> sites{FaultSite::scores,  FaultSite::probs,   FaultSite::row_max,
                               FaultSite::row_sum, FaultSite::rescale, FaultSite::output};
  if (c.protection != Protection::none) sites.push_back(FaultSite::checksum);
  if (has_pv_site(c)) sites.push_back(FaultSite::pv);
  if (has_scale_site(c)) sites.push_back(FaultSite::scale);
  return sites;
}

std::string_view to_string(Outcome o) {
  switch (o) {
    case Outcome::masked:
      return "masked";
    case Outcome::corrected:
      return "corrected";
    case Outcome::detected:
      return "detected";
    case Outcome::sdc:
      return "sdc";
    case Outcome::false_positive:
      return "false_positive";
    case Outcome::miscorrected:
      return "miscorrected";
  }
  throw ConfigError(fmt::format("invalid Outcome value {}", static_cast<int>(o)));
}

Outcome classify(const Observation& seen) {
  if (seen.detected == 0) return seen.within_tolerance ? Outcome::masked : Outcome::sdc;
  if (!seen.within_tolerance) {
    // A report claiming every fault fixed makes recompute do nothing and tells the caller all is
    // well; an uncorrected detection, or a recompute that left some unresolved, says something
    // was wrong. A recompute that left none claims the output right.
    const bool claims_all_fixed =
        seen.recomputed_tiles > 0 ? seen.unresolved == 0 : seen.corrected >= seen.detected;
    return claims_all_fixed ? Outcome::miscorrected : Outcome::detected;
  }
  // Detected and the output is fine: either something fixed it, or the alarm was needless.
  return seen.corrected > 0 || seen.recomputed_tiles > 0 ? Outcome::corrected
                                                         : Outcome::false_positive;
}

float ulp(double magnitude, Precision p) {
  const int mantissa_bits = p == Precision::bf16 ? 7 : 10;
  const int min_exponent = p == Precision::bf16 ? -126 : -14;  // smallest normal
  const double a = std::abs(magnitude);
  const int e = a > 0 && std::isfinite(a) ? std::max(std::ilogb(a), min_exponent) : min_exponent;
  return static_cast<float>(std::ldexp(1.0, e - mantissa_bits));
}

double accuracy_bar(Precision p, const Problem& problem) {
  return reference::tolerance(p, problem).rel_l2;
}

std::vector<float> element_tolerance(const std::vector<float>& clean,
                                     const std::vector<double>& ref, Precision p,
                                     const Problem& problem, bool strict) {
  if (clean.size() != ref.size())
    throw Error(fmt::format("element_tolerance: {} clean values but {} reference values",
                            clean.size(), ref.size()));
  double sq = 0.0;
  for (double r : ref) sq += r * r;
  const float floor = strict || ref.empty()
                          ? 0.0f
                          : static_cast<float>(accuracy_bar(p, problem) *
                                               std::sqrt(sq / static_cast<double>(ref.size())));
  std::vector<float> tol(clean.size());
  for (size_t i = 0; i < clean.size(); ++i) {
    const double own = std::abs(static_cast<double>(clean[i]) - ref[i]);
    // A non-finite fault-free value admits no tolerance: any change of it counts (deviation()
    // lets the unchanged value pass).
    tol[i] = std::isfinite(own) ? std::max({static_cast<float>(own), ulp(ref[i], p), floor}) : 0.0f;
  }
  return tol;
}

Deviation deviation(const float* faulty, const float* clean, const float* tolerance, size_t n) {
  Deviation d;
  for (size_t i = 0; i < n; ++i) {
    // An unchanged element is no deviation, even an infinite one (Inf - Inf is NaN). A NaN
    // never passes: no accuracy check would take it, whatever the fault-free run gave.
    if (faulty[i] == clean[i]) continue;
    const float diff = std::abs(faulty[i] - clean[i]);
    // NaN fails the comparison; a finite value turned non-finite fails even an infinite
    // tolerance.
    const bool turned = std::isfinite(clean[i]) && !std::isfinite(faulty[i]);
    if (turned || !(diff <= tolerance[i])) ++d.over;
    if (std::isnan(diff))
      d.max_abs = std::numeric_limits<double>::infinity();
    else
      d.max_abs = std::max(d.max_abs, static_cast<double>(diff));
  }
  return d;
}

BitRange BitRange::parse(std::string_view text) {
  auto bad = [&] {
    return ConfigError(fmt::format(
        "bad bit range '{}': write lo:hi with 0 <= lo <= hi <= 31 (0 is the mantissa's lowest "
        "bit, 31 the sign), e.g. 0:31 or 23:30, or one bit",
        text));
  };
  auto number = [&](std::string_view s) {
    int v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) throw bad();
    return v;
  };
  BitRange r;
  const size_t colon = text.find(':');
  r.lo = number(text.substr(0, colon));
  r.hi = colon == std::string_view::npos ? r.lo : number(text.substr(colon + 1));
  if (r.lo < 0 || r.hi > 31 || r.lo > r.hi) throw bad();
  return r;
}

long long InjectionSpace::total_iterations() const {
  long long total = 0;
  for (int n : iterations) total += n;
  return total;
}

InjectionSpace injection_space(const KernelConfig& c, const Problem& pr, FaultSite site) {
  validate(pr, c);
  InjectionSpace s = c.protection == Protection::decoupled
                         ? runtime::decoupled_injection_space(c, pr, site)
                         : fused_space(c, pr, site);
  if (s.total_iterations() == 0)
    throw ConfigError(
        fmt::format("no CTA runs site {} on this problem: give a larger shape", site_name(site)));
  return s;
}

FaultPlan plan_trial(const InjectionSpace& space, FaultSite site, BitRange bits, uint64_t seed,
                     uint64_t index) {
  const long long total = space.total_iterations();
  if (total <= 0 || space.threads <= 0)
    throw ConfigError("plan_trial: the injection space is empty");
  uint64_t state = runtime::splitmix64(seed ^ runtime::splitmix64(index + 1));
  auto draw = [&](uint64_t n) {  // uniform in [0, n); n is small, the modulo bias is < 2^-32
    state = runtime::splitmix64(state);
    return state % n;
  };
  FaultPlan plan;
  plan.site = site;
  // A uniform (CTA, iteration) pair: walk the per-CTA counts.
  long long pick = static_cast<long long>(draw(static_cast<uint64_t>(total)));
  int cta = 0;
  while (pick >= space.iterations[cta]) pick -= space.iterations[cta++];
  plan.cta = cta;
  plan.iteration = static_cast<int>(pick);
  plan.thread = static_cast<int>(draw(static_cast<uint64_t>(space.threads)));
  // With an unknown count, a large range keeps the kernel's modulo nearly uniform.
  plan.element = static_cast<int>(draw(space.elements > 0 ? space.elements : 1u << 20));
  plan.bit = bits.lo + static_cast<int>(draw(static_cast<uint64_t>(bits.hi - bits.lo + 1)));
  return plan;
}

void Tally::add(Outcome o) {
  ++counts[static_cast<size_t>(o)];
  ++trials;
}

long long Tally::count(Outcome o) const { return counts[static_cast<size_t>(o)]; }

double Tally::share(Outcome o) const {
  return trials > 0 ? static_cast<double>(count(o)) / static_cast<double>(trials) : 0.0;
}

namespace {

// P(X <= k) for X ~ Binomial(n, p), 0 < p < 1, 0 <= k < n. Summed from k down: below the mode
// the terms shrink geometrically, so the sum stops after O(sqrt(n)) negligible terms, and
// lgamma keeps each term in range for n in the millions.
double binomial_cdf(long long k, long long n, double p) {
  const double nn = static_cast<double>(n), lp = std::log(p), lq = std::log1p(-p);
  const double lfn = std::lgamma(nn + 1);
  double sum = 0.0;
  for (long long i = k; i >= 0; --i) {
    const double x = static_cast<double>(i);
    const double term =
        std::exp(lfn - std::lgamma(x + 1) - std::lgamma(nn - x + 1) + x * lp + (nn - x) * lq);
    sum += term;
    if (x < nn * p && term <= 1e-17 * sum) break;  // an all-underflow tail too
  }
  return std::min(sum, 1.0);
}

}  // namespace

double clopper_pearson_upper_95(long long hits, long long n) {
  if (n <= 0 || hits >= n) return 1.0;
  if (hits <= 0) return -std::expm1(std::log(0.05) / static_cast<double>(n));  // 1 - 0.05^(1/n)
  // The CDF falls as p rises: bisect for P(X <= hits) = 0.05 above the observed rate.
  double lo = static_cast<double>(hits) / static_cast<double>(n), hi = 1.0;
  for (int i = 0; i < 200 && hi - lo > 1e-15 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (binomial_cdf(hits, n, mid) > 0.05 ? lo : hi) = mid;
  }
  return hi;
}

std::string_view to_string(Distribution d) {
  switch (d) {
    case Distribution::normal:
      return "normal(0,1)";
    case Distribution::uniform:
      return "uniform(x0=0,Am=1)";
    case Distribution::uniform_biased:
      return "uniform(x0=20,Am=0.5)";
    case Distribution::hybrid:
      return "hybrid(x0=0,Am=10)";
    case Distribution::hybrid_biased:
      return "hybrid(x0=20,Am=10)";
  }
  throw ConfigError(fmt::format("invalid Distribution value {}", static_cast<int>(d)));
}

reference::Tensor16 random_tensor(Distribution d, std::mt19937_64& rng, Precision p,
                                  const Strides& strides, int batch, int heads, int seqlen,
                                  int head_dim) {
  if (d == Distribution::normal)
    return reference::random_tensor(rng, p, strides, batch, heads, seqlen, head_dim);
  const bool uniform = d == Distribution::uniform || d == Distribution::uniform_biased;
  const bool biased = d == Distribution::uniform_biased || d == Distribution::hybrid_biased;
  const double x0 = biased ? 20.0 : 0.0;
  const double am = uniform ? (biased ? 0.5 : 1.0) : 10.0;
  return pasa_tensor(uniform, x0, am, rng, p, strides, batch, heads, seqlen, head_dim);
}

reference::Tensor16 pasa_tensor(bool uniform, double x0, double am, std::mt19937_64& rng,
                                Precision p, const Strides& strides, int batch, int heads,
                                int seqlen, int head_dim) {
  // PASA's generators (seed-numerics B.7): uniform U(x0 - Am, x0 + Am); hybrid
  // N(x0, 1) + N(0, Am^2) * Bernoulli(0.001).
  reference::Tensor16 t;
  t.strides = strides;
  t.data.assign(reference::span_elements(strides, batch, heads, seqlen, head_dim),
                reference::to_bits(std::numeric_limits<float>::quiet_NaN(), p));
  std::uniform_real_distribution<double> u(x0 - am, x0 + am);
  std::normal_distribution<double> n(x0, 1.0), outlier(0.0, am);
  std::bernoulli_distribution rare(0.001);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int s = 0; s < seqlen; ++s)
        for (int x = 0; x < head_dim; ++x) {
          const double v = uniform ? u(rng) : n(rng) + (rare(rng) ? outlier(rng) : 0.0);
          t.data[b * strides.batch + h * strides.head + s * strides.seq + x] =
              reference::to_bits(static_cast<float>(v), p);
        }
  return t;
}

std::vector<double> reference_output(const Problem& pr, Precision p, Mask mask,
                                     const reference::Tensor16& q, const reference::Tensor16& k,
                                     const reference::Tensor16& v) {
  const long long rows = 1LL * pr.batch * pr.heads_q * pr.seqlen_q;
  const int d = pr.head_dim;
  std::vector<double> out(static_cast<size_t>(rows) * d);
  auto work = [&](long long begin, long long end) {
    for (long long r = begin; r < end; ++r) {
      const int s = static_cast<int>(r % pr.seqlen_q);
      const int h = static_cast<int>((r / pr.seqlen_q) % pr.heads_q);
      const int b = static_cast<int>(r / (1LL * pr.seqlen_q * pr.heads_q));
      const std::vector<double> row = reference::attention_row(pr, p, mask, q, k, v, b, h, s);
      std::copy(row.begin(), row.end(), out.begin() + r * d);
    }
  };
  const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w)
    threads.emplace_back(work, rows * w / workers, rows * (w + 1) / workers);
  for (auto& t : threads) t.join();
  return out;
}

std::vector<float> dense_output(const Problem& pr, Precision p, const reference::Tensor16& o) {
  std::vector<float> out(static_cast<size_t>(pr.batch) * pr.heads_q * pr.seqlen_q * pr.head_dim);
  size_t i = 0;
  for (int b = 0; b < pr.batch; ++b)
    for (int h = 0; h < pr.heads_q; ++h)
      for (int s = 0; s < pr.seqlen_q; ++s)
        for (int x = 0; x < pr.head_dim; ++x) out[i++] = o.at(p, b, h, s, x);
  return out;
}

FaultReport TrialBackend::run(const std::optional<FaultPlan>& plan, std::vector<float>& output) {
  std::vector<float> lse;
  return run(plan, output, lse);
}

Baseline make_baseline(TrialBackend& backend, const Problem& pr, Precision p, Mask mask,
                       const reference::Tensor16& q, const reference::Tensor16& k,
                       const reference::Tensor16& v, bool strict) {
  Baseline b;
  b.report = backend.run(std::nullopt, b.output, b.lse);
  std::vector<float> again, again_lse;
  backend.run(std::nullopt, again, again_lse);
  b.deterministic = again == b.output && again_lse == b.lse;
  const size_t rows = static_cast<size_t>(pr.batch) * pr.heads_q * pr.seqlen_q;
  if (b.output.size() != rows * pr.head_dim || b.lse.size() != rows)
    throw Error(fmt::format(
        "make_baseline: the backend returned {} output values and {} LSE values, expected {} and "
        "{}",
        b.output.size(), b.lse.size(), rows * pr.head_dim, rows));
  // reference::check reads the output in a problem's strides: the dense ones the backend gives.
  Problem dense = pr;
  dense.o =
      Problem::bhsd(pr.batch, pr.heads_q, pr.heads_kv, pr.seqlen_q, pr.seqlen_k, pr.head_dim).o;
  reference::Tensor16 o;
  o.strides = dense.o;
  o.data.reserve(b.output.size());
  for (float x : b.output) o.data.push_back(reference::to_bits(x, p));
  b.check = reference::check(dense, p, mask, q, k, v, o, &b.lse, 1024);
  if (!b.check.passed)
    throw Error(fmt::format(
        "the fault-free run fails the check against the FP64 reference ({}): the campaign's "
        "tolerance would be built on a wrong output, so no trial was run",
        b.check.summary()));
  b.tolerance = element_tolerance(b.output, reference_output(pr, p, mask, q, k, v), p, pr, strict);
  b.lse_tolerance.assign(b.lse.size(), static_cast<float>(reference::tolerance(p, pr).lse));
  return b;
}

void check_clean_alarms(const FaultReport& clean, bool allowed) {
  if (clean.clean() || allowed) return;
  throw ConfigError(fmt::format(
      "the fault-free run reported detections ({}): every trial would inherit them, masked "
      "reading as false_positive and sdc as detected. Raise the thresholds that fire "
      "(--thresholds; --calibrate N measures what clean inputs need), or pass "
      "--allow-clean-alarms (CampaignOptions::allow_clean_alarms) to classify trials by what "
      "they report beyond the fault-free run",
      clean.summary()));
}

CampaignResult run_campaign(TrialBackend& backend, const InjectionSpace& space,
                            const Baseline& baseline, const CampaignOptions& o,
                            const std::function<void(const TrialResult&)>& progress) {
  check_clean_alarms(baseline.report, o.allow_clean_alarms);
  const std::vector<float>& clean = baseline.output;
  if (clean.size() != baseline.tolerance.size() ||
      baseline.lse.size() != baseline.lse_tolerance.size())
    throw Error("run_campaign: the clean output or LSE and its tolerance differ in size");
  // What a trial reports beyond the fault-free run (nothing to take away unless allowed).
  auto beyond = [](auto trial, auto clean_count) {
    return trial > clean_count ? trial - clean_count : decltype(trial){0};
  };
  const FaultReport& base = baseline.report;
  const auto start = std::chrono::steady_clock::now();
  CampaignResult result;
  result.trials.reserve(static_cast<size_t>(o.trials));
  std::vector<float> out, lse;
  for (long long i = 0; i < o.trials; ++i) {
    TrialResult t;
    t.index = static_cast<uint64_t>(i);
    t.plan = plan_trial(space, o.site, o.bits, o.seed, t.index);
    t.report = backend.run(t.plan, out, lse);
    if (out.size() != clean.size() || lse.size() != baseline.lse.size())
      throw Error(fmt::format(
          "run_campaign: the backend returned {} values and {} LSE values, expected {} and {}",
          out.size(), lse.size(), clean.size(), baseline.lse.size()));
    t.deviation = deviation(out.data(), clean.data(), baseline.tolerance.data(), clean.size());
    t.lse_deviation =
        deviation(lse.data(), baseline.lse.data(), baseline.lse_tolerance.data(), lse.size());
    const FaultReport& r = t.report;
    t.outcome = classify({beyond(r.detected, base.detected), beyond(r.corrected, base.corrected),
                          beyond(r.recomputed_tiles, base.recomputed_tiles),
                          t.deviation.within() && t.lse_deviation.within(),
                          beyond(r.unresolved, base.unresolved)});
    result.tally.add(t.outcome);
    if (progress) progress(t);
    result.trials.push_back(std::move(t));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::string summary_table(const Tally& t) {
  std::string out =
      fmt::format("{:<16} {:>8} {:>9} {:>16}\n", "outcome", "trials", "share", "95% upper bound");
  for (Outcome o : kOutcomes)
    out += fmt::format("{:<16} {:>8} {:>8.3f}% {:>15.3f}%\n", to_string(o), t.count(o),
                       100.0 * t.share(o), 100.0 * clopper_pearson_upper_95(t.count(o), t.trials));
  out += fmt::format("{:<16} {:>8}\n", "total", t.trials);
  return out;
}

std::string trials_csv_header() {
  return "trial,site,cta,thread,iteration,element,bit,outcome,detected,corrected,"
         "recomputed_tiles,elements_over,max_abs_deviation,first_stage,first_row,first_col,"
         "max_abs_lse_deviation";
}

std::string trials_csv_row(const TrialResult& t) {
  const FaultEvent* e = t.report.events.empty() ? nullptr : &t.report.events.front();
  return fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{:.6g},{},{},{},{:.6g}", t.index,
                     site_name(t.plan.site), t.plan.cta, t.plan.thread, t.plan.iteration,
                     t.plan.element, t.plan.bit, to_string(t.outcome), t.report.detected,
                     t.report.corrected, t.report.recomputed_tiles, t.deviation.over,
                     t.deviation.max_abs, e ? static_cast<int>(e->stage) : 0, e ? e->row : -1,
                     e ? e->col : -1, t.lse_deviation.max_abs);
}

namespace {

bool has_column(std::string_view header, std::string_view name) {
  while (!header.empty() && (header.back() == '\n' || header.back() == '\r'))
    header.remove_suffix(1);
  size_t begin = 0;
  while (begin <= header.size()) {
    const size_t end = std::min(header.find(',', begin), header.size());
    if (header.substr(begin, end - begin) == name) return true;
    begin = end + 1;
  }
  return false;
}

}  // namespace

SummaryLayout summary_csv_layout(std::string_view header) {
  if (!has_column(header, "miscorrected")) return SummaryLayout::before_miscorrected;
  return has_column(header, "baseline_detected") ? SummaryLayout::current
                                                 : SummaryLayout::before_settings;
}

std::string summary_csv_counts_header(SummaryLayout layout) {
  std::string h = "trials,masked,corrected,detected,sdc,false_positive,sdc_upper95,seconds";
  if (layout != SummaryLayout::before_miscorrected) h += ",miscorrected";
  if (layout == SummaryLayout::current)
    h += ",silent_upper95,on_fault,strict,thresholds,seed,heads_kv,ir_count,baseline_detected";
  return h;
}

std::string summary_csv_counts(const Tally& t, double seconds, const SummarySettings& s,
                               SummaryLayout layout) {
  const long long miscorrected = t.count(Outcome::miscorrected);
  const bool old = layout == SummaryLayout::before_miscorrected;
  std::string row = fmt::format("{},{},{},{},{},{},{:.3e},{:.2f}", t.trials,
                                t.count(Outcome::masked), t.count(Outcome::corrected),
                                t.count(Outcome::detected) + (old ? miscorrected : 0),
                                t.count(Outcome::sdc), t.count(Outcome::false_positive),
                                clopper_pearson_upper_95(t.count(Outcome::sdc), t.trials), seconds);
  if (old) return row;
  row += fmt::format(",{}", miscorrected);
  if (layout != SummaryLayout::current) return row;
  auto text = [](const std::string& x) { return x.empty() ? std::string("-") : x; };
  // Semicolons: one CSV field.
  const std::string thresholds =
      s.thresholds ? fmt::format("scores={:.3g};probs={:.3g};output={:.3g};row_sum={:.3g}",
                                 s.thresholds->scores, s.thresholds->probs, s.thresholds->output,
                                 s.thresholds->row_sum)
                   : "-";
  row += fmt::format(",{:.3e},{},{},{},{},{},{},{}",
                     clopper_pearson_upper_95(t.count(Outcome::sdc) + miscorrected, t.trials),
                     text(s.on_fault), s.strict ? (*s.strict ? "1" : "0") : "-", thresholds, s.seed,
                     s.heads_kv, text(s.ir_count),
                     s.baseline_detected ? std::to_string(*s.baseline_detected) : "-");
  return row;
}

}  // namespace ftattn::campaign
