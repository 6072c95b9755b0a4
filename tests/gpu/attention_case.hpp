// One GPU attention run checked against the host reference: random inputs, poisoned output,
// launch, download, compare.
#pragma once

#include <optional>

#include "ftattn/reference.hpp"
#include "ftattn/runtime.hpp"
#include "runtime/driver.hpp"

namespace ftattn::gpu_test {

// The device's arch when it is sm_90a (the wgmma and warp-specialised skeletons); otherwise a
// Catch2 warning that `what` needs it and was not run, and nullopt.
std::optional<Arch> hopper_device(Runtime& rt, const char* what);

struct CaseResult {
  reference::CheckReport report;
  std::string config_name;
};

// `rows` as in reference::check (<= 0: every row). `with_lse` also checks the log-sum-exp.
// `via_attention` launches through Runtime::attention with `config` as given (maybe open).
// `block_mask` (host bytes laid out as the problem says) goes with block-sparse masks.
// `protect`, when given, launches through Kernel::run with it and stores the report in `fault`.
CaseResult run_case(Runtime& rt, const KernelConfig& config, const Problem& problem, bool with_lse,
                    int rows, uint64_t seed, bool via_attention = false,
                    const std::vector<uint8_t>* block_mask = nullptr,
                    const ProtectOptions* protect = nullptr, FaultReport* fault = nullptr);

// A tensor of `p`'s 16-bit type in the problem's dense layout (one batch) with element (h, s, i) =
// f(h, s, i).
template <class F>
reference::Tensor16 tensor_of(const Strides& st, int heads, int seqlen, int d, F&& f,
                              Precision p = Precision::f16) {
  reference::Tensor16 t;
  t.strides = st;
  t.data.assign(reference::span_elements(st, 1, heads, seqlen, d), 0);
  for (int h = 0; h < heads; ++h)
    for (int s = 0; s < seqlen; ++s)
      for (int i = 0; i < d; ++i)
        t.data[h * st.head + s * st.seq + i] = reference::to_bits(f(h, s, i), p);
  return t;
}

// Device copies of inputs the caller made, and an output of Q's size poisoned with NaN (0xFF
// bytes, so an element the kernel does not write shows).
struct DeviceIo {
  runtime::DeviceBuffer q, k, v, o;
  DeviceIo(const reference::Tensor16& q, const reference::Tensor16& k,
           const reference::Tensor16& v);
  // O downloaded, with `problem`'s O strides.
  reference::Tensor16 output(const Problem& problem) const;
};

// A protected config on `problem` (with LSE, 256 rows checked): the reference check passes and
// the fault report is clean.
void check_clean_protected(Runtime& rt, const KernelConfig& config, const Problem& problem,
                           uint64_t seed);

// One run with a fault plan (no LSE, every row checked): the reference check and the fault report.
struct Planted {
  CaseResult result;
  FaultReport fault;
};
Planted run_planted(Runtime& rt, const KernelConfig& config, const Problem& problem,
                    const ProtectOptions& options, uint64_t seed);

// A fault plan at CTA 0, thread 5, key-block iteration 1, value `element` of the site.
ProtectOptions plant(FaultSite site, int bit, int element = 3, OnFault on_fault = OnFault::report);

// Its output check is live: at a threshold far below FP32 rounding every row trips it (only the
// absolute floor remains), and recompute relaunches those tiles to the right answer. Returns the
// report for the caller's own checks.
FaultReport check_live_output(Runtime& rt, const KernelConfig& config, const Problem& problem,
                              uint64_t seed);

// A protected wgmma kernel `c` beside the mma.sync one `sync` on the same inputs: odd lengths
// with GQA, and `long_batch` x 16 heads of 2k keys (128 rows checked), both with LSE. The wgmma
// one must come within 1.5x the mma.sync one's error of the reference (and of its LSE error
// twice); no alarm on either. Seeds from seed0 + head dim + query length.
void check_beside_mma_sync(Runtime& rt, const KernelConfig& c, const KernelConfig& sync,
                           int long_batch, uint64_t seed0);

}  // namespace ftattn::gpu_test
