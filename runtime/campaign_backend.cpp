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
                const reference::Tensor16& v, OnFault on_fault, const Thresholds& thresholds)
      : rt_(rt), config_(config), problem_(problem), on_fault_(on_fault), thresholds_(thresholds) {
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
    dlse_ = runtime::DeviceBuffer(static_cast<size_t>(problem.batch) * problem.heads_q *
                                  problem.seqlen_q * sizeof(float));
    rt_.kernel(config_);  // compile and load before the first trial is timed
  }

  FaultReport run(const std::optional<FaultPlan>& plan, std::vector<float>& output,
                  std::vector<float>& lse) override {
    // Without injection points the backend runs the production kernel, clean runs only.
    if (plan && !config_.fault_injection && config_.ir_inject == IrClass::none)
      throw ConfigError(
          "a fault plan needs a config with injection points: fault_injection (source sites) or "
          "ir_inject (LLVM route, site ir); without them the campaign backend runs clean only");
    ProtectOptions protect;
    // Site ir's counting launches (iteration -1) count instances into the log without flipping:
    // their counts must not set off a recompute.
    const bool counting = plan && plan->site == FaultSite::ir && plan->iteration < 0;
    protect.on_fault = counting ? OnFault::report : on_fault_;
    protect.thresholds = thresholds_;
    protect.inject = plan;
    // NaN bytes: an element or LSE entry the kernel fails to write shows up as beyond tolerance.
    do_.fill_bytes(0xFF);
    dlse_.fill_bytes(0xFF);
    FaultReport report =
        rt_.attention(problem_, dq_.data(), dk_.data(), dv_.data(), do_.data(), nullptr, config_,
                      static_cast<float*>(dlse_.data()), nullptr, protect);
    do_.download(host_o_.data.data(), do_.bytes());  // synchronous: waits for the kernel
    output = dense_output(problem_, config_.precision, host_o_);
    lse.resize(dlse_.bytes() / sizeof(float));
    dlse_.download(lse.data(), dlse_.bytes());
    return report;
  }

 private:
  Runtime& rt_;
  KernelConfig config_;
  Problem problem_;
  OnFault on_fault_;
  Thresholds thresholds_;
  runtime::DeviceBuffer dq_, dk_, dv_, do_, dlse_;
  reference::Tensor16 host_o_;
};

}  // namespace

std::unique_ptr<TrialBackend> source_backend(Runtime& rt, const KernelConfig& config,
                                             const Problem& problem, const reference::Tensor16& q,
                                             const reference::Tensor16& k,
                                             const reference::Tensor16& v, OnFault on_fault,
                                             const Thresholds& thresholds) {
  return std::make_unique<SourceBackend>(rt, config, problem, q, k, v, on_fault, thresholds);
}

}  // namespace ftattn::campaign
