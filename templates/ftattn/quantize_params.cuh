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

// The 8-bit checksum rows (protect/int8_checksums.cuh, protect/fp8_checksums.cuh): from the
// quantised V^T (head_dim rows of keys_padded bytes per head) to the policy's rows of keys_padded
// values per head, and (int8 EFTA) from the quantised K (seqlen_k rows of head_dim bytes per head)
// to k_rows rows of head_dim bytes per head and key block.
struct Q8ChecksumParams {
  const void* vt;
  void* out;
  int keys_padded;
  int seqlen_k;
  const void* k;
  void* k_out;
};

// The 8-bit checksum workspace: every head's V^T rows (v_bytes_per_head: byte rows, then f16
// rows), then (int8 EFTA) the K rows, from this byte offset (aligned for cp.async).
inline long long q8_k_rows_offset(int batch, int heads_kv, long long v_bytes_per_head) {
  const long long v_bytes = static_cast<long long>(batch) * heads_kv * v_bytes_per_head;
  return (v_bytes + 255) / 256 * 256;
}

}  // namespace ftattn
