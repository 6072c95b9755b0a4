// The trial backend: the kernel compiled with fault_injection (source sites) or ir_inject (site
// ir), launched through Runtime::attention with the plan in ProtectOptions, inputs uploaded once.
#include "ftattn/campaign.hpp"
#include "runtime/driver.hpp"

namespace ftattn::campaign {
namespace {

class SourceBackend final : public TrialBackend {
 public:
  SourceBackend(Runtime& rt, const KernelConfig& config, const Problem& problem,
                const reference::Tensor16& q, const reference::Tensor16& k,
                const reference::Tensor16& v, OnFault on_fault)
      : rt_(rt), config_(config), problem_(problem), on_fault_(on_fault) {
    if (!config.fault_injection && config.ir_inject == IrClass::none)
      throw ConfigError(
          "the campaign backend needs a config with injection points: fault_injection (source "
          "sites) or ir_inject (LLVM route, site ir)");
    auto upload = [](const reference::Tensor16& t) {
      runtime::DeviceBuffer b(t.data.size() * sizeof(uint16_t));
      b.upload(t.data.data(), b.bytes());
      return b;
    };
    dq_ = upload(q);
    dk_ = upload(k);
    dv_ = upload(v);
    host_o_.strides = problem.o;
    host_o_.data.resize(reference::span_elements(problem.o, problem.batch, problem.heads_q,
                                                 problem.seqlen_q, problem.head_dim));
    do_ = runtime::DeviceBuffer(host_o_.data.size() * sizeof(uint16_t));
    rt_.kernel(config_);  // compile and load before the first trial is timed
  }

  FaultReport run(const std::optional<FaultPlan>& plan, std::vector<float>& output) override {
    ProtectOptions protect;
    protect.on_fault = on_fault_;
    protect.inject = plan;
    // NaN bytes: an element the kernel fails to write shows up as beyond tolerance.
    do_.fill_bytes(0xFF);
    FaultReport report = rt_.attention(problem_, dq_.data(), dk_.data(), dv_.data(), do_.data(),
                                       nullptr, config_, nullptr, nullptr, protect);
    do_.download(host_o_.data.data(), do_.bytes());  // synchronous: waits for the kernel
    output = dense_output(problem_, config_.precision, host_o_);
    return report;
  }

 private:
  Runtime& rt_;
  KernelConfig config_;
  Problem problem_;
  OnFault on_fault_;
  runtime::DeviceBuffer dq_, dk_, dv_, do_;
  reference::Tensor16 host_o_;
};

}  // namespace

std::vector<FalseAlarms> count_false_alarms(Runtime& rt, const KernelConfig& config,
                                            const Problem& pr, int runs, uint64_t seed) {
  std::vector<FalseAlarms> rows;
  for (Distribution d : kDistributions) rows.push_back({d});
  const size_t o_elements =
      reference::span_elements(pr.o, pr.batch, pr.heads_q, pr.seqlen_q, pr.head_dim);
  runtime::DeviceBuffer dq, dk, dv, d_o(o_elements * sizeof(uint16_t));
  for (int i = 0; i < runs; ++i) {
    FalseAlarms& row = rows[static_cast<size_t>(i) % rows.size()];
    std::mt19937_64 rng(seed + static_cast<uint64_t>(i));
    auto upload = [&](runtime::DeviceBuffer& buffer, const Strides& strides, int heads,
                      int seqlen) {
      const reference::Tensor16 t = random_tensor(row.distribution, rng, config.precision, strides,
                                                  pr.batch, heads, seqlen, pr.head_dim);
      if (buffer.bytes() < t.data.size() * sizeof(uint16_t))
        buffer = runtime::DeviceBuffer(t.data.size() * sizeof(uint16_t));
      buffer.upload(t.data.data(), t.data.size() * sizeof(uint16_t));
    };
    upload(dq, pr.q, pr.heads_q, pr.seqlen_q);
    upload(dk, pr.k, pr.heads_kv, pr.seqlen_k);
    upload(dv, pr.v, pr.heads_kv, pr.seqlen_k);
    const FaultReport r =
        rt.attention(pr, dq.data(), dk.data(), dv.data(), d_o.data(), nullptr, config);
    runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    ++row.runs;
    row.flagged += r.detected > 0;
    row.detected += r.detected;
    row.corrected += r.corrected;
  }
  return rows;
}

std::unique_ptr<TrialBackend> source_backend(Runtime& rt, const KernelConfig& config,
                                             const Problem& problem, const reference::Tensor16& q,
                                             const reference::Tensor16& k,
                                             const reference::Tensor16& v, OnFault on_fault) {
  return std::make_unique<SourceBackend>(rt, config, problem, q, k, v, on_fault);
}

}  // namespace ftattn::campaign
