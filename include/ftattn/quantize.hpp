// 8-bit attention (precision int8 or fp8_e4m3) on operands you quantise yourself, or on f16/bf16
// tensors. Kernel::launch of an int8/fp8_e4m3 kernel takes f16 Q, K, V and O and quantises into a
// workspace the kernel owns (launches on other streams wait their turn); the functions here split
// that in two, with your workspace and either 16-bit type, e.g. to quantise a KV cache once.
#pragma once

#include <cstddef>
#include <optional>

#include "ftattn/config.hpp"
#include "ftattn/runtime.hpp"

namespace ftattn {

// Where the 8-bit operands and their scales lie in one workspace for `problem` (byte offsets,
// each 256-byte aligned). Layout of each part: AttentionParams in templates/ftattn/params.cuh.
struct QuantizedLayout {
  int keys_padded = 0;         // seqlen_k rounded up to 16: the length of a V^T row and of k_scale
  size_t q = 0, k = 0, v = 0;  // 8-bit Q, K, and V transposed
  size_t q_scale = 0, k_scale = 0, v_scale = 0;  // float scales
  size_t bytes = 0;                              // the workspace size
  static QuantizedLayout of(const Problem& problem);
};

// Device pointers to quantised operands.
struct QuantizedInputs {
  const void* q = nullptr;         // batch x heads_q x seqlen_q x head_dim, dense
  const void* k = nullptr;         // batch x heads_kv x seqlen_k x head_dim, dense
  const void* v = nullptr;         // V^T: batch x heads_kv x head_dim x keys_padded, keys permuted
  const float* q_scale = nullptr;  // per token: batch x heads_q x seqlen_q
  const float* k_scale = nullptr;  // a value per key: batch x heads_kv x keys_padded
  // Keys from 0 on, in runs of this many, share one k_scale value. fp8_e4m3 on sm_90a needs 64
  // (what quantize() writes for it; codegen::k_scale_block); 1 means any value per token.
  int k_scale_block = 1;
  const float* v_scale = nullptr;  // per channel: batch x heads_kv x head_dim
  // What quantize() made these for; inputs you fill yourself may leave it unset. The bytes of an
  // int8 and an fp8 operand mean different numbers, and the layout follows the sizes, so
  // launch_quantized refuses a kernel of another precision or a problem of other sizes.
  struct Origin {
    Precision precision = Precision::int8;
    int batch = 0, heads_q = 0, heads_kv = 0, seqlen_q = 0, seqlen_k = 0, head_dim = 0;
  };
  std::optional<Origin> origin;
  // The views of a workspace laid out as `layout`.
  static QuantizedInputs in(void* workspace, const QuantizedLayout& layout);
};

// Quantises q, k, v (f16 or bf16 as `input` says, laid out as `problem` says) into `workspace`
// (QuantizedLayout::of(problem).bytes, device memory) on `stream`, with the quantisation kernels
// generated into `kernel`'s unit (an int8 or fp8_e4m3 kernel). Symmetric scales: max |x| / 127
// (int8) or / 448 (e4m3), per token for Q, per token (int8) or per 64 keys (fp8_e4m3) for K, per
// channel for V; the result's k_scale_block says which. ConfigError when `kernel`
// is not 8-bit, `input` is not f16 or bf16, or the tensors are misaligned.
QuantizedInputs quantize(const Kernel& kernel, const Problem& problem, const void* q, const void* k,
                         const void* v, Precision input, void* workspace, CUstream stream);

// Runs an int8 or fp8_e4m3 kernel on quantised operands; O (laid out as problem.o) is written as
// `output` (f16 or bf16), and the log-sum-exp when `lse` is not null. ConfigError when the
// inputs' origin names another precision or other sizes. Like Kernel::launch, a protected
// kernel runs its checks here but nothing reads its fault log: run_quantized reports.
void launch_quantized(const Kernel& kernel, const Problem& problem, const QuantizedInputs& inputs,
                      void* o, Precision output, float* lse, CUstream stream);

// launch_quantized with `protect`'s thresholds and fault plan, then as Kernel::run: a protected
// kernel (or a fault plan) waits for `stream`, reads the fault log and acts on it as
// `protect.on_fault` says (OnFault::recompute relaunches the tiles with uncorrected detections
// on the same quantised inputs, OnFault::raise throws FaultError). An unprotected kernel returns
// an empty report without waiting, and refuses a policy or thresholds it has nothing to apply to.
FaultReport run_quantized(const Kernel& kernel, const Problem& problem,
                          const QuantizedInputs& inputs, void* o, Precision output, float* lse,
                          CUstream stream, const ProtectOptions& protect = {});

}  // namespace ftattn
