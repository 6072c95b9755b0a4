// Fault reports, fault policies and injection plans of protected attention.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ftattn {

// What to do when a protected kernel detects a fault it could not correct in place.
enum class OnFault {
  report,     // return the report; the output may be wrong where faults were detected
  recompute,  // relaunch the affected (batch, head, query block) tiles, then report
  raise,      // throw FaultError (spelled "throw" on the command line)
};
std::string_view to_string(OnFault f);
OnFault parse_on_fault(std::string_view text);  // "report", "recompute", "throw"

// Value classes the source-level injection can hit (mirrors FaultSite in the kernel params).
// pv: a key block's own P V tile before O takes it: int8's INT32 one on the mma.sync kernel,
// fp8 Flash-ABFT's FP32 one on the wgmma kernel (the 16-bit kernels, int8 on wgmma and fp8
// otherwise accumulate P V in O itself: site output).
// scale: an 8-bit kernel's dequantisation factors, a key's scale after its load or a row's
// softmax factor (s_Q times the softmax scale).
enum class FaultSite {
  none,
  scores,
  probs,
  row_max,
  row_sum,
  rescale,
  output,
  checksum,
  ir,
  pv,
  scale
};
std::string_view to_string(FaultSite s);
FaultSite parse_fault_site(std::string_view text);

// Where a detection happened.
enum class FaultStage { scores = 1, probs = 2, row_sum = 3, output = 4, row_max = 5 };
std::string_view to_string(FaultStage s);

// One bit flip at a chosen place. Takes effect only in kernels compiled with fault_injection. A
// launch refuses (ConfigError) a plan that could flip nothing on its problem: a CTA past the grid
// of the kernel that takes the site, an iteration past what that CTA runs (causal tiles run fewer
// key blocks), a negative count, a bit outside 0..31.
struct FaultPlan {
  FaultSite site = FaultSite::none;
  int cta = 0;        // linear CTA index (x fastest, then heads, then batch)
  int thread = 0;     // thread of the CTA
  int iteration = 0;  // key-block iteration (IR-level: dynamic instance)
  int element = 0;    // which value of the class the thread holds (modulo their count)
  int bit = 0;        // 0..31
};

struct FaultEvent {
  int batch = 0, head = 0, row = 0, col = -1;
  FaultStage stage = FaultStage::output;
  bool corrected = false;
  float magnitude = 0.0f;
  float threshold = 0.0f;
};

struct FaultReport {
  uint64_t detected = 0;           // checks that failed
  uint64_t corrected = 0;          // of those, values fixed in place by the kernel
  std::vector<FaultEvent> events;  // the first few, in the order the kernel recorded them
  int recomputed_tiles = 0;        // tiles relaunched under OnFault::recompute
  // Detections the recompute itself left uncorrected (counted in `detected` too): the output is
  // not proven right. 0 without a recompute.
  uint64_t unresolved = 0;
  bool clean() const { return detected == 0; }
  std::string summary() const;
};

// Thresholds of the checks, relative to the sum of absolute values each check adds up; 0 takes
// the calibrated default for the kernel's precision (see docs in the README).
struct Thresholds {
  float scores = 0.0f;   // GEMM I checksum (efta_correct, 16-bit: relative to
                         // max(|checksum|, sum |s|) + |q| sum |k| / sqrt(head_dim))
  float probs = 0.0f;    // exp product check: its exponent sum, relative to |q| sum |k|
  float output = 0.0f;   // GEMM II / output checksum
  float row_sum = 0.0f;  // l against the ones column (relative to l)
};

// What a kernel's calls compute from K and V alone before the attention, done once by
// Kernel::prepare_kv and kept by the caller for calls that read the same K and V unchanged, such
// as a KV cache between calls; given in ProtectOptions::prepared_kv, such a call skips that work:
// - a checksum scheme's prologue over V (Flash-ABFT: every key's row sum and their bound) or K
//   and V (EFTA: K's checksum rows and norms too). They are the checksums of K and V as they were
//   when prepared, so a later change to either (a write, or a fault in memory) fails the kernel's
//   checks as a fault in the kernel would;
// - f16_pasa's shift pass, which reads K and writes the shifted keys K' (and EFTA's checksums of
//   K'). Such calls read the prepared K', not K: a later change to K does not reach them.
// Prepare again after changing K or V. Copies share the device buffers, freed with the last;
// keep one alive until the calls that use it are done. Default-constructed: empty.
// Kernel::prepare_kv enqueues its work on the stream it is given: a call on another stream must
// wait for that stream (an event, or a synchronize), as for any asynchronous work.
class PreparedKv {
 public:
  struct State;  // runtime/prepared_kv.hpp
  PreparedKv() = default;
  explicit PreparedKv(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  bool empty() const { return state_ == nullptr; }
  const State* state() const { return state_.get(); }
  // The kernel that prepared it (its canonical name), for messages.
  std::string prepared_by() const;

 private:
  std::shared_ptr<const State> state_;
};

struct ProtectOptions {
  OnFault on_fault = OnFault::report;
  Thresholds thresholds;
  std::optional<FaultPlan> inject;  // needs a config with fault_injection
  int max_events = 16;              // records kept by the kernel
  // K's and V's work prepared earlier for this call (see PreparedKv), also for unprotected
  // f16_pasa kernels: the checksum prologue and PASA's shift pass are skipped. ConfigError where
  // it cannot serve: another K or V (pointer, strides, batch, KV heads, keys), another precision,
  // head_dim, block_n, scheme or (f16_pasa) softmax scale, or a kernel with nothing to skip.
  const PreparedKv* prepared_kv = nullptr;
};

}  // namespace ftattn
