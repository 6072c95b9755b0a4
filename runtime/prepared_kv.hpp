// What PreparedKv holds, and when a call may use it: the work a kernel's calls do on K and V
// alone before the attention (a checksum prologue, f16_pasa's shift pass), done once, serves later
// calls whose own would produce the same bytes.
#pragma once

#include <string>

#include "ftattn/config.hpp"
#include "ftattn/fault.hpp"
#include "runtime/driver.hpp"

namespace ftattn {

// What that work's output depends on: the layouts (precision, scheme, head_dim, block_n, batch,
// KV heads, keys), the tensors it reads (K where the scheme checks scores or f16_pasa shifts it,
// V where a scheme checks the output; null where not) and, for f16_pasa, the softmax scale
// its shift is taken in.
struct PreparedSubject {
  std::string kernel;  // the kernel's canonical name, for messages
  Precision precision = Precision::f16;
  Protection protection = Protection::none;
  int head_dim = 0, block_n = 0;
  int batch = 0, heads_kv = 0, seqlen_k = 0;
  const void* k = nullptr;
  const void* v = nullptr;
  Strides k_strides, v_strides;
  float scale = 0.0f;  // f16_pasa only
};

struct PreparedKv::State {
  PreparedSubject subject;
  runtime::DeviceBuffer checksums;  // protect/workspace.cuh's layout; empty: no checksum scheme
  runtime::DeviceBuffer shifted;    // f16_pasa: runtime::PasaLayout's; empty otherwise
};

namespace runtime {

// Why `config`'s calls have no work on K and V alone that another call may reuse (a 16-bit
// checksum scheme's prologue, f16_pasa's shift); empty when they have.
std::string unpreparable_reason(const KernelConfig& config);
// ConfigError with that reason, if any.
void require_preparable(const KernelConfig& config);

// The subject of `config`'s work on `problem` reading `k` and `v`.
PreparedSubject prepared_subject(const KernelConfig& config, const Problem& problem, const void* k,
                                 const void* v);

// ConfigError saying what differs when work prepared for `prepared` cannot serve a call on
// `wanted`.
void require_same_subject(const PreparedSubject& prepared, const PreparedSubject& wanted);

// The prepared work `protect` hands to a call of `config` on `problem` reading `k` and `v`: null
// when it hands none; ConfigError when it is empty or cannot serve this call.
const PreparedKv::State* prepared_for(const ProtectOptions& protect, const KernelConfig& config,
                                      const Problem& problem, const void* k, const void* v);

}  // namespace runtime
}  // namespace ftattn
