// One checked and timed kernel run on the GPU, shared by `run` and `demo`: random inputs, a
// poisoned output, one launch checked against the host reference, then timed launches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ftattn/reference.hpp"
#include "ftattn/runtime.hpp"
#include "runtime/driver.hpp"

namespace ftattn::cli {

struct DeviceRunOptions {
  bool lse = false;      // also write and check the log-sum-exp
  int check_rows = 256;  // query rows compared with the reference; 0: all
  int warmup = 5;
  int iters = 20;  // timed launches; 0: no timing
  uint64_t seed = 1;
  double density = 0.5;  // block-sparse masks: share of (query block, key block) pairs kept
  // Work on K and V alone (checksum prologues, f16_pasa's shift) prepared once
  // (Kernel::prepare_kv) and used by every launch, the checked one included; ConfigError for
  // kernels with none.
  bool prepare_kv = false;
};

struct DeviceRunResult {
  KernelConfig config;  // as resolved and run
  bool from_cache = false;
  double compile_seconds = 0.0;
  reference::CheckReport check;
  bool timed = false;  // only a kernel that passed the check is timed
  double median_ms = 0.0, min_ms = 0.0, tflops = 0.0;
  // 8-bit precisions: median_ms is what a caller with 16-bit tensors waits for, quantisation
  // included; these split it into the attention on quantised operands alone and the
  // quantisation alone (each its own median). 0 for the 16-bit precisions.
  double attention_ms = 0.0, quantize_ms = 0.0;
};

// Random inputs for one problem, on the host (for the reference) and on the GPU, with an output
// buffer. Made once and shared by every config run on the problem.
struct DeviceInputs {
  Precision precision;
  reference::Tensor16 q, k, v;
  runtime::DeviceBuffer dq, dk, dv, d_o, d_lse;
};
std::unique_ptr<DeviceInputs> make_inputs(const Problem& problem, Precision precision,
                                          uint64_t seed);

// Throws NoDeviceError without a GPU, ConfigError for a config or problem that cannot run,
// DriverError when the GPU reports a failure.
DeviceRunResult run_on_device(Runtime& runtime, const KernelConfig& config, const Problem& problem,
                              const DeviceRunOptions& options);
// The same on inputs made by make_inputs (their precision must be the config's).
DeviceRunResult run_on_device(Runtime& runtime, const KernelConfig& config, const Problem& problem,
                              DeviceInputs& inputs, const DeviceRunOptions& options);

// A kernel checked against the reference once and ready to be launched again on the same inputs,
// for callers that time several kernels in turn (`bench --interleave`). The launches stay valid
// while the inputs and the runtime live.
struct PreparedRun {
  DeviceRunResult result;        // config, cache and check; not yet timed
  std::function<void()> launch;  // the whole call, as a caller with 16-bit tensors makes it
  // 8-bit precisions: the quantisation alone, and the attention on its last output (empty else).
  std::function<void()> quantize, attention;
};
PreparedRun prepare_on_device(Runtime& runtime, const KernelConfig& config, const Problem& problem,
                              DeviceInputs& inputs, const DeviceRunOptions& options);
// One timed piece of work on the default stream: its events' elapsed ms.
double time_once(runtime::EventTimer& timer, const std::function<void()>& work);
// Fills result's timing from the launches' times in ms (median, min, TFLOP/s).
void record_times(DeviceRunResult& result, const Problem& problem, std::vector<double> ms);
double median_of(std::vector<double> values);

// "batch 2, heads 8 (kv 8), seqlen 1024 (k 1024), head_dim 128"
std::string describe_problem(const Problem& problem);

// One line about the current GPU: name, arch, SMs, driver version. Throws NoDeviceError.
std::string describe_device();

// The kernel, check and timing lines of one result.
void print_result(const DeviceRunResult& result, const DeviceRunOptions& options);

}  // namespace ftattn::cli
