// What KvChecksums holds, and when a call may reuse them: checksums encoded once by a protected
// kernel's prologue serve later calls whose prologue would write the same bytes.
#pragma once

#include <string>

#include "ftattn/config.hpp"
#include "ftattn/fault.hpp"
#include "runtime/driver.hpp"

namespace ftattn {

// What the prologue's output depends on: the workspace layout (precision, scheme, head_dim,
// block_n, batch, KV heads, keys) and the tensors it reads (K where the scheme checks scores,
// V always; null where it does not).
struct ChecksumSubject {
  std::string kernel;  // the kernel's canonical name, for messages
  Precision precision = Precision::f16;
  Protection protection = Protection::none;
  int head_dim = 0, block_n = 0;
  int batch = 0, heads_kv = 0, seqlen_k = 0;
  const void* k = nullptr;
  const void* v = nullptr;
  Strides k_strides, v_strides;
};

struct KvChecksums::State {
  ChecksumSubject subject;
  runtime::DeviceBuffer buffer;  // protect/workspace.cuh's layout
};

namespace runtime {

// ConfigError unless `config`'s calls have a prologue whose output another call may reuse: a
// 16-bit checksum scheme of the fused kernel, and not f16_pasa's EFTA (K' changes per call).
void require_reusable_checksums(const KernelConfig& config);

// The subject of `config`'s prologue on `problem` reading `k` and `v`.
ChecksumSubject checksum_subject(const KernelConfig& config, const Problem& problem, const void* k,
                                 const void* v);

// ConfigError saying what differs when checksums of `encoded` cannot serve a call on `wanted`.
void require_same_subject(const ChecksumSubject& encoded, const ChecksumSubject& wanted);

}  // namespace runtime
}  // namespace ftattn
