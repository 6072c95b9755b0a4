// Parameters of the quantisation kernels (kernel/quantize_sm80.cuh) that turn f16/bf16 Q, K, V
// into the 8-bit operands of the int8 and fp8_e4m3 kernels (layout: params.cuh). Plain C++ with
// builtin types: the host includes this same file.
#pragma once

namespace ftattn {

struct QuantizeParams {
  const void* in;  // 16-bit batch x heads x seqlen x head_dim, strides in elements
  long long in_batch_stride, in_head_stride, in_seq_stride;
  int batch, heads, seqlen;
  void* out;      // 8-bit: rows dense (batch x heads x seqlen x head_dim), or V^T (see params.cuh)
  float* scale;   // rows: per token, scale_seq per head; V: per channel (head_dim per head)
  int scale_seq;  // rows: scale entries per head (>= seqlen; the rest are written as 0)
  int keys_padded;  // V: the padded key count of a V^T row
};

// int8 Flash-ABFT's digit rows (protect/int8_abft.cuh): from the quantised V^T (head_dim rows of
// keys_padded bytes per head) to 8 rows of keys_padded bytes per head.
struct Int8DigitsParams {
  const void* vt;
  void* out;
  int keys_padded;
};

}  // namespace ftattn
