// GPU test: every key counts. The reference checks compare against FP64 within a tolerance, so
// they cannot see a kernel that drops, misplaces or lets in one key: at 16k keys one key weighs
// about 1/16k, far below bf16's or int8's tolerance. Here each query row attends almost wholly
// to one chosen target key (its score beats every other visible key's by kMargin), so the row's
// output is that key's V row, and a dropped target changes the whole row. Targets sit where such
// bugs live: the sequence's ends, every 16-key group's first key and its neighbours (so every
// block_n's boundaries), and under a mask the row's last visible key (causal: the diagonal);
// where a mask hides a target the nearest visible key takes its place. A target with a hidden
// neighbour (past the causal diagonal, across a skipped block's edge, or past the sequence's end
// in memory: the next KV head's first key) gets a decoy there that would beat it by
// kDecoyMargin if the mask let it in. Every row is compared on the host, and the LSE too.
// Run on the device machine: ./ftattn_gpu_tests "every key counts*"
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <future>
#include <map>
#include <random>
#include <sstream>
#include <tuple>

#include "ftattn/quantize_model.hpp"
#include "ftattn/runtime.hpp"
#include "runtime/driver.hpp"
#include "tests/gpu/attention_case.hpp"

using namespace ftattn;

namespace {

// Score units: natural log, after the softmax scale.
constexpr double kMargin = 20;       // target over any other visible key: those weigh <= N e^-20
constexpr double kDecoyMargin = 10;  // a decoy over the target: let in, it takes the row
constexpr double kDecoyLift = 0.25;  // the decoy's score is (1 + lift) times the target's
// |scores| stay below this: f16_pasa accumulates them in FP16 and 8-bit Q and K carry relative
// errors, both growing with the scores.
constexpr double kMaxScore = 150;

Runtime& every_key_runtime() {
  static Runtime rt;
  return rt;
}

// K and V on the host, [KV head][key][channel]: N(0, 1) rounded to bf16, which f16 holds too,
// so every precision gets the same numbers and V's rows are the exact outputs.
struct KeysValues {
  int keys = 0, d = 0;
  std::vector<float> k, v;
  const float* key(int h, int j) const { return &k[(size_t(h) * keys + j) * d]; }
  const float* value(int h, int j) const { return &v[(size_t(h) * keys + j) * d]; }
};

KeysValues random_keys_values(const Problem& pr, uint64_t seed) {
  KeysValues kv;
  kv.keys = pr.seqlen_k;
  kv.d = pr.head_dim;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  auto draw = [&] {
    const float x =
        reference::from_bits(reference::to_bits(normal(rng), Precision::bf16), Precision::bf16);
    return std::abs(x) < 0x1p-14f ? 0.f : x;  // below f16's normal range bf16 may not fit it
  };
  const size_t n = size_t(pr.heads_kv) * pr.seqlen_k * pr.head_dim;
  for (size_t i = 0; i < n; ++i) kv.k.push_back(draw());
  for (size_t i = 0; i < n; ++i) kv.v.push_back(draw());
  return kv;
}

// FP32 dot product in eight separate sums: kept in order, one sum stays scalar and slow, and the
// host builds millions of these. d is a multiple of 8 (every head dim is).
float dot(const float* a, const float* b, int d) {
  float s[8] = {};
  for (int i = 0; i < d; i += 8)
    for (int l = 0; l < 8; ++l) s[l] += a[i + l] * b[i + l];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// Which keys row `row` of query head `h` sees: causal aligned bottom-right (row i sees keys
// j <= i + seqlen_k - seqlen_q, as reference::attention_row and README say); block-sparse
// bytes per (query head, query block, key block).
struct Visibility {
  const Problem& pr;
  Mask mask;
  const std::vector<uint8_t>& block_mask;
  bool operator()(int h, int row, int j) const {
    if (j < 0 || j >= pr.seqlen_k) return false;
    if (is_causal(mask) && j > row + pr.seqlen_k - pr.seqlen_q) return false;
    return !is_block_sparse(mask) ||
           block_mask[h * pr.block_mask_head_bytes() +
                      int64_t{row / pr.sparse_block_m} * pr.block_mask_k_blocks() +
                      j / pr.sparse_block_n] != 0;
  }
};

// Where a dropped key most likely is: both ends of the sequence, and the first key of every
// 16-key group (so of every key block, 16 to 128 keys) with its neighbours.
std::vector<int> edge_keys(int seqlen_k) {
  std::vector<int> out = {0, seqlen_k - 2, seqlen_k - 1};
  for (int g = 0; g < seqlen_k; g += 16)
    for (int j : {g - 1, g, g + 1})
      if (j >= 0 && j < seqlen_k) out.push_back(j);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Row `row` of query head h: the edge keys in turn, from a different start in each head; under
// a mask every third row its last visible key (causal: the diagonal). A target the row cannot
// see moves to the nearest key it can (the lower on a tie). -1: the row sees no key.
int target_of(const Visibility& vis, const std::vector<int>& edges, int h, int row) {
  const int n = vis.pr.seqlen_k;
  int want = edges[(row + size_t(h) * edges.size() / vis.pr.heads_q) % edges.size()];
  if (vis.mask != Mask::none && row % 3 == 0) want = n - 1;
  for (int dist = 0; dist < n; ++dist) {
    if (vis(h, row, want - dist)) return want - dist;
    if (vis(h, row, want + dist)) return want + dist;
  }
  return -1;
}

// A key of KV head `head`; head -1: none.
struct KeyRef {
  int head = -1, key = 0;
};

// A key the row must not see, next to its target in memory: a neighbour across the mask's
// edge, or past the sequence's last (before its first) key the next (previous) KV head's first
// (last) key, which the dense layout with one batch puts there.
KeyRef decoy_of(const Visibility& vis, int h, int hk, int row, int t) {
  const int n = vis.pr.seqlen_k;
  if (t + 1 < n && !vis(h, row, t + 1)) return {hk, t + 1};
  if (t > 0 && !vis(h, row, t - 1)) return {hk, t - 1};
  if (t == n - 1 && hk + 1 < vis.pr.heads_kv) return {hk + 1, 0};
  if (t == 0 && hk > 0) return {hk - 1, n - 1};
  return {};
}

struct RowPlan {
  int target = -1;  // -1: the row sees no key; its output is 0 and its LSE -inf
  KeyRef decoy;
  double tail = 0;  // the other visible keys' sum of exp(s_j - s_target)
};

// A fault simulated on the host for a sample of rows: the target dropped, or the decoy let in.
// The check must reject each, or its margins and tolerances could not catch that fault.
struct Probe {
  int head = 0, row = 0;
  const char* fault = "";
  std::vector<float> out;
};

// Q and the expected rows for one shape and mask.
struct Plan {
  std::vector<float> q;       // [query head][row][channel]
  std::vector<RowPlan> rows;  // [query head][row]
  std::vector<Probe> probes;
  int infeasible = 0;  // rows where no Q met the margins within kMaxScore: must stay 0
  int decoys = 0;
  std::vector<int> edges;
  const RowPlan& at(int h, int row, int seqlen_q) const { return rows[size_t(h) * seqlen_q + row]; }
};

// Softmax over `keys` (with their scaled scores) times V, on the host.
std::vector<float> softmax_v(const KeysValues& kv,
                             const std::vector<std::pair<KeyRef, double>>& keys) {
  double top = -INFINITY;
  for (const auto& [ref, s] : keys) top = std::max(top, s);
  std::vector<double> acc(kv.d, 0.0);
  double sum = 0;
  for (const auto& [ref, s] : keys) {
    const double w = std::exp(s - top);
    sum += w;
    const float* v = kv.value(ref.head, ref.key);
    for (int x = 0; x < kv.d; ++x) acc[x] += w * v[x];
  }
  std::vector<float> out(kv.d, 0.f);
  for (int x = 0; x < kv.d && sum > 0; ++x) out[x] = float(acc[x] / sum);
  return out;
}

// One query head's rows of `plan` (each head writes only its own rows).
void plan_head(const Problem& pr, const KeysValues& kv, const Visibility& vis, int h, Plan& plan,
               std::vector<Probe>& probes, int& infeasible, int& decoys) {
  const int d = pr.head_dim, n = pr.seqlen_k;
  const int hk = h / (pr.heads_q / pr.heads_kv);
  const double scale = pr.scale();
  std::vector<float> u(d);
  std::vector<double> a(n);
  for (int row = 0; row < pr.seqlen_q; ++row) {
    RowPlan& rp = plan.rows[size_t(h) * pr.seqlen_q + row];
    float* q = &plan.q[(size_t(h) * pr.seqlen_q + row) * d];
    rp.target = target_of(vis, plan.edges, h, row);
    if (rp.target < 0) continue;  // Q stays 0
    const int t = rp.target;
    const float* kt = kv.key(hk, t);
    // Q = c u: u gives the target the scaled score sqrt(d) (and the decoy (1 + lift) sqrt(d),
    // solved through the two keys' Gram matrix); c lifts the target kMargin over every other
    // visible key and the decoy kDecoyMargin over the target.
    auto fits = [&](KeyRef decoy, double& c) {
      const double g11 = dot(kt, kt, d);
      double alpha = d / g11, beta = 0;
      const float* kd = decoy.head >= 0 ? kv.key(decoy.head, decoy.key) : nullptr;
      if (kd != nullptr) {
        const double g12 = dot(kt, kd, d), g22 = dot(kd, kd, d), det = g11 * g22 - g12 * g12;
        alpha = d * (g22 - g12 * (1 + kDecoyLift)) / det;
        beta = d * (g11 * (1 + kDecoyLift) - g12) / det;
      }
      for (int x = 0; x < d; ++x) u[x] = float(alpha * kt[x] + (kd ? beta * kd[x] : 0.0));
      double other = -INFINITY, peak = 0;
      for (int j = 0; j < n; ++j) {
        a[j] = vis(h, row, j) ? scale * dot(u.data(), kv.key(hk, j), d) : NAN;
        if (std::isnan(a[j])) continue;
        peak = std::max(peak, std::abs(a[j]));
        if (j != t) other = std::max(other, a[j]);
      }
      const double gap = a[t] - other;  // +inf when the target is the only visible key
      c = std::max(1.0, kMargin / gap);
      if (kd != nullptr) {
        const double ad = scale * dot(u.data(), kd, d);
        if (ad - a[t] <= 0) return false;
        c = std::max(c, kDecoyMargin / (ad - a[t]));
        peak = std::max(peak, std::abs(ad));
      }
      return gap > 0 && c * peak <= kMaxScore;
    };
    double c = 1;
    rp.decoy = decoy_of(vis, h, hk, row, t);
    if (rp.decoy.head >= 0 && !fits(rp.decoy, c)) rp.decoy = {};
    if (rp.decoy.head < 0 && !fits(rp.decoy, c)) ++infeasible;
    decoys += rp.decoy.head >= 0;
    for (int x = 0; x < d; ++x) q[x] = float(c * u[x]);
    for (int j = 0; j < n; ++j)
      if (j != t && !std::isnan(a[j])) rp.tail += std::exp(c * (a[j] - a[t]));
    if (row % 16 != 5) continue;
    std::vector<std::pair<KeyRef, double>> keys;
    for (int j = 0; j < n; ++j)
      if (j != t && !std::isnan(a[j])) keys.push_back({{hk, j}, c * a[j]});
    probes.push_back({h, row, "the target dropped", softmax_v(kv, keys)});
    if (rp.decoy.head >= 0) {
      keys.push_back({{hk, t}, c * a[t]});
      const float* kd = kv.key(rp.decoy.head, rp.decoy.key);
      keys.push_back({rp.decoy, c * scale * dot(u.data(), kd, d)});
      probes.push_back({h, row, "the decoy let in", softmax_v(kv, keys)});
    }
  }
}

Plan make_plan(const Problem& pr, const KeysValues& kv, Mask mask,
               const std::vector<uint8_t>& block_mask) {
  Plan plan;
  plan.edges = edge_keys(pr.seqlen_k);
  plan.q.assign(size_t(pr.heads_q) * pr.seqlen_q * pr.head_dim, 0.f);
  plan.rows.resize(size_t(pr.heads_q) * pr.seqlen_q);
  const Visibility vis{pr, mask, block_mask};
  struct HeadResult {
    std::vector<Probe> probes;
    int infeasible = 0, decoys = 0;
  };
  std::vector<std::future<HeadResult>> heads;  // one thread per head: the host's scores dominate
  for (int h = 0; h < pr.heads_q; ++h)
    heads.push_back(std::async(std::launch::async, [&, h] {
      HeadResult r;
      plan_head(pr, kv, vis, h, plan, r.probes, r.infeasible, r.decoys);
      return r;
    }));
  for (auto& f : heads) {
    HeadResult r = f.get();
    plan.infeasible += r.infeasible;
    plan.decoys += r.decoys;
    for (Probe& p : r.probes) plan.probes.push_back(std::move(p));
  }
  return plan;
}

// Bound on |O - V_target| per element for precision p on KV head hk: the 16-bit output's
// rounding (bf16's half step below 8 is 2^-6); for 8-bit, V's quantisation, per channel over the
// head's keys: int8 one step (twice its rounding), fp8 E4M3's relative 2^-4 (its half step).
struct Tolerance {
  std::vector<double> abs;
  double rel = 0;
};

Tolerance tolerance(Precision p, const KeysValues& kv, int hk) {
  Tolerance t;
  t.abs.assign(kv.d, p == Precision::bf16 ? 3e-2 : 1e-2);
  if (p == Precision::fp8_e4m3) t.rel = 0x1p-4 + 0x1p-10;
  if (p != Precision::int8) return t;
  for (int x = 0; x < kv.d; ++x) {
    float amax = 0;
    for (int j = 0; j < kv.keys; ++j) amax = std::max(amax, std::abs(kv.value(hk, j)[x]));
    t.abs[x] = amax / quant_model::range(p) + 4e-3;
  }
  return t;
}

// LSE bound: the precision's error in the target's score `score`, which is up to kMaxScore
// (f16_pasa: FP16 sums; int8 and fp8: quantised Q and K, so an error relative to the score: on an
// H200 int8 was 0.52 off at 116 and fp8 up to 3.1 at 105, E4M3 keeping 2^-4). A dropped target
// lowers LSE by at least kMargin - log(seqlen_k) (11 at 16k keys); a decoy let in shows in the
// output, which is checked element by element.
double lse_tolerance(Precision p, double score) {
  switch (p) {
    case Precision::f16_pasa:
      return 1.0;
    case Precision::int8:
      return 0.5 + 0.01 * std::abs(score);
    case Precision::fp8_e4m3:
      return 1.0 + 0.05 * std::abs(score);
    default:
      return 5e-2;
  }
}

// A row's worst element, in units of its bound (<= 1 passes; NaN counts as infinitely far).
struct RowError {
  int channel = 0;
  double ratio = 0;
};

RowError row_error(const std::vector<float>& got, const float* want, const Tolerance& tol) {
  RowError e;
  for (size_t x = 0; x < got.size(); ++x) {
    const double bound = tol.abs[x] + tol.rel * std::abs(want[x]);
    const double r = std::isfinite(got[x]) ? std::abs(got[x] - want[x]) / bound : INFINITY;
    if (r > e.ratio) e = {int(x), r};
  }
  return e;
}

// The key of KV head hk whose V row `out` is nearest, for failure messages.
int nearest_value(const KeysValues& kv, int hk, const std::vector<float>& out) {
  int best = -1;
  double best_d2 = INFINITY;
  for (int j = 0; j < kv.keys; ++j) {
    double d2 = 0;
    for (int x = 0; x < kv.d; ++x) d2 += std::pow(double(out[x]) - kv.value(hk, j)[x], 2);
    if (d2 < best_d2) best = j, best_d2 = d2;
  }
  return best;
}

// A host array [head][seq][channel] as a tensor of p's 16-bit storage in the problem's layout.
reference::Tensor16 to_tensor(const Strides& st, int heads, int seqlen, int d,
                              const std::vector<float>& a, Precision p) {
  return gpu_test::tensor_of(
      st, heads, seqlen, d,
      [&](int h, int s, int x) { return a[(size_t(h) * seqlen + s) * d + x]; }, p);
}

struct Shape {
  const char* name;
  Problem pr;
};

struct Run {
  size_t shape;
  Precision precision;
  Mask mask;
  Protection protection = Protection::none;
};

Problem problem_for(const Shape& s, Mask m) {
  Problem pr = s.pr;
  if (is_block_sparse(m)) pr.sparse_block_m = pr.sparse_block_n = 128;
  return pr;
}

// A random block mask for `pr` (half the blocks kept), where query block 1 sees nothing.
std::vector<uint8_t> sparse_mask(const Problem& pr, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution keep(0.5);
  std::vector<uint8_t> mask(pr.block_mask_bytes());
  for (auto& b : mask) b = keep(rng);
  for (int h = 0; h < pr.heads_q; ++h)
    for (int kb = 0; kb < pr.block_mask_k_blocks(); ++kb)
      mask[h * pr.block_mask_head_bytes() + pr.block_mask_k_blocks() + kb] = 0;
  return mask;
}

}  // namespace

TEST_CASE("every key counts: rows that attend to one key see that key", "[gpu][every_key]") {
  Runtime& rt = every_key_runtime();
  REQUIRE(rt.has_device());
  // Ragged lengths (no multiple of 16, 64 or 128); GQA; more query rows than keys, so causal's
  // first 28 rows see no key.
  const std::vector<Shape> shapes = {
      {"d128 q1003 k4133 heads 4/2", Problem::bhsd(1, 4, 2, 1003, 4133, 128)},
      {"d64 q1031 k1003 heads 3/3", Problem::bhsd(1, 3, 3, 1031, 1003, 64)}};
  std::vector<Precision> precisions = {Precision::f16, Precision::bf16, Precision::f16_pasa,
                                       Precision::int8};
  if (rt.device_arch().sm >= 89) precisions.push_back(Precision::fp8_e4m3);
  std::vector<Run> runs;
  for (size_t s = 0; s < shapes.size(); ++s)
    for (Precision p : precisions)
      for (Mask m : {Mask::none, Mask::causal}) runs.push_back({s, p, m});
  runs.push_back({0, Precision::f16, Mask::block_sparse});
  for (Mask m : {Mask::none, Mask::causal}) {
    runs.push_back({0, Precision::f16, m, Protection::efta_correct});
    runs.push_back({1, Precision::f16, m, Protection::flash_abft});
  }

  // The runtime's default kernel for each run, compiled side by side while the host plans.
  std::vector<KernelConfig> configs;
  std::vector<std::future<std::shared_ptr<const CompiledKernel>>> builds;
  for (const Run& r : runs) {
    KernelConfig c;
    c.head_dim = shapes[r.shape].pr.head_dim;
    c.precision = r.precision;
    c.mask = r.mask;
    c.protection = r.protection;
    const Problem pr = problem_for(shapes[r.shape], r.mask);
    configs.push_back(rt.resolve(c, &pr));
    builds.push_back(
        std::async(std::launch::async, [&rt, c = configs.back()] { return rt.compile(c); }));
  }

  std::vector<KeysValues> kvs;
  for (size_t s = 0; s < shapes.size(); ++s)
    kvs.push_back(random_keys_values(shapes[s].pr, 40 + s));
  std::map<std::tuple<size_t, Precision, int>, Tolerance> tolerances;
  auto tolerance_of = [&](size_t s, Precision p, int hk) -> const Tolerance& {
    const std::tuple key{s, p, hk};
    auto it = tolerances.find(key);
    if (it == tolerances.end()) it = tolerances.emplace(key, tolerance(p, kvs[s], hk)).first;
    return it->second;
  };
  std::map<std::pair<size_t, Mask>, std::vector<uint8_t>> block_masks;
  std::map<std::pair<size_t, Mask>, Plan> plans;
  for (const Run& r : runs) {
    const std::pair key{r.shape, r.mask};
    if (plans.count(key)) continue;
    const Problem pr = problem_for(shapes[r.shape], r.mask);
    const KeysValues& kv = kvs[r.shape];
    auto& bm = block_masks[key];
    if (is_block_sparse(r.mask)) bm = sparse_mask(pr, 7);
    const Plan& plan = plans[key] = make_plan(pr, kv, r.mask, bm);
    INFO(shapes[r.shape].name << " " << to_string(r.mask) << ": " << plan.decoys << " decoys");
    CHECK(plan.infeasible == 0);
    CHECK(plan.decoys > (r.mask == Mask::none ? 0 : pr.seqlen_q / 4));
    if (r.mask == Mask::none) {  // every edge key is some row's target
      std::vector<bool> hit(pr.seqlen_k);
      for (const RowPlan& rp : plan.rows)
        if (rp.target >= 0) hit[rp.target] = true;
      long long missed = 0;
      for (int j : plan.edges) missed += !hit[j];
      CHECK(missed == 0);
    }
    // The check can fail: each precision's bound rejects every simulated fault, and the
    // neighbour's V row in place of the target's (a misplaced key) on every row.
    const int group = pr.heads_q / pr.heads_kv;
    CHECK(plan.probes.size() > 100);
    for (Precision p : {Precision::f16, Precision::bf16, Precision::int8, Precision::fp8_e4m3}) {
      long long missed_faults = 0, missed_neighbours = 0;
      for (const Probe& probe : plan.probes) {
        const int hk = probe.head / group;
        const int t = plan.at(probe.head, probe.row, pr.seqlen_q).target;
        missed_faults +=
            row_error(probe.out, kv.value(hk, t), tolerance_of(r.shape, p, hk)).ratio <= 1;
      }
      for (int h = 0; h < pr.heads_q; ++h)
        for (int row = 0; row < pr.seqlen_q; ++row) {
          const int t = plan.at(h, row, pr.seqlen_q).target;
          if (t < 0) continue;
          const float* v = kv.value(h / group, t + 1 < pr.seqlen_k ? t + 1 : t - 1);
          missed_neighbours +=
              row_error(std::vector<float>(v, v + pr.head_dim), kv.value(h / group, t),
                        tolerance_of(r.shape, p, h / group))
                  .ratio <= 1;
        }
      INFO(to_string(p) << ": " << plan.probes.size() << " simulated faults");
      CHECK(missed_faults == 0);
      CHECK(missed_neighbours == 0);
    }
  }
  for (auto& b : builds) b.get();

  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    const Shape& shape = shapes[r.shape];
    const Problem pr = problem_for(shape, r.mask);
    const Plan& plan = plans.at({r.shape, r.mask});
    const std::vector<uint8_t>& bm = block_masks.at({r.shape, r.mask});
    const KeysValues& kv = kvs[r.shape];
    const Precision p = r.precision;
    const int d = pr.head_dim, sq = pr.seqlen_q, group = pr.heads_q / pr.heads_kv;
    std::ostringstream label;
    label << to_string(p) << " " << to_string(r.protection) << " " << to_string(r.mask) << " "
          << shape.name << " (" << configs[i].name() << ")";
    const auto q = to_tensor(pr.q, pr.heads_q, sq, d, plan.q, p);
    const gpu_test::DeviceIo io(q, to_tensor(pr.k, pr.heads_kv, pr.seqlen_k, d, kv.k, p),
                                to_tensor(pr.v, pr.heads_kv, pr.seqlen_k, d, kv.v, p));
    runtime::DeviceBuffer dlse(size_t(pr.heads_q) * sq * sizeof(float)), dmask(bm.size());
    dlse.fill_bytes(0xFF);
    if (!bm.empty()) dmask.upload(bm.data(), bm.size());
    const FaultReport fault =
        rt.kernel(configs[i])
            ->run(pr, io.q.data(), io.k.data(), io.v.data(), io.o.data(),
                  static_cast<float*>(dlse.data()), nullptr,
                  bm.empty() ? nullptr : static_cast<const unsigned char*>(dmask.data()),
                  ProtectOptions{});
    runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    const auto o = io.output(pr);
    std::vector<float> lse(size_t(pr.heads_q) * sq);
    dlse.download(lse.data(), dlse.bytes());

    long long bad_rows = 0, bad_lse = 0;
    int reported = 0;
    std::vector<float> got(d);
    const std::vector<float> zeros(d, 0.f);
    for (int h = 0; h < pr.heads_q; ++h)
      for (int row = 0; row < sq; ++row) {
        const RowPlan& rp = plan.at(h, row, sq);
        const int hk = h / group;
        for (int x = 0; x < d; ++x) got[x] = o.at(p, 0, h, row, x);
        const float* want = rp.target >= 0 ? kv.value(hk, rp.target) : zeros.data();
        const RowError e = row_error(got, want, tolerance_of(r.shape, p, hk));
        // The target's score from the Q the kernel got, plus the other keys' share.
        double want_lse = -INFINITY;
        if (rp.target >= 0) {
          double s = 0;
          for (int x = 0; x < d; ++x) s += double(q.at(p, 0, h, row, x)) * kv.key(hk, rp.target)[x];
          want_lse = s * pr.scale() + std::log1p(rp.tail);
        }
        const float got_lse = lse[size_t(h) * sq + row];
        const bool lse_ok = rp.target < 0
                                ? got_lse == -INFINITY
                                : std::abs(got_lse - want_lse) <= lse_tolerance(p, want_lse);
        bad_rows += e.ratio > 1;
        bad_lse += !lse_ok;
        if ((e.ratio > 1 || !lse_ok) && reported++ < 4) {
          std::ostringstream m;
          m << label.str() << ": head " << h << " row " << row;
          if (rp.target < 0)
            m << " sees no key";
          else
            m << " target key " << rp.target;
          if (rp.decoy.head >= 0)
            m << " (decoy: KV head " << rp.decoy.head << " key " << rp.decoy.key << ")";
          if (e.ratio > 1)
            m << ": channel " << e.channel << " got " << got[e.channel] << " want "
              << want[e.channel] << " (" << e.ratio << "x its bound), the row nearest key "
              << nearest_value(kv, hk, got) << "'s V";
          if (!lse_ok) m << "; LSE " << got_lse << " want " << want_lse;
          FAIL_CHECK(m.str());
        }
      }
    INFO(label.str() << ": " << bad_rows << " of " << pr.heads_q * sq << " rows and " << bad_lse
                     << " LSE entries wrong; " << fault.summary());
    CHECK(bad_rows == 0);
    CHECK(bad_lse == 0);
    CHECK(fault.clean());
  }
}
