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

// V's one-pass quantisation on sm_90 and later (kernel/quantize_v_sm90.cuh): a cluster of
// kQuantizeVCtas CTAs of kQuantizeVThreads threads per KV head, each holding a slice of its keys
// in shared memory (quantize_v_shared_bytes); heads whose slice needs more than
// kQuantizeVMaxShared keep v_channel_max and pack_v.
inline constexpr int kQuantizeVCtas = 8;  // a portable cluster size
inline constexpr int kQuantizeVThreads = 256;
inline constexpr int kQuantizeVMaxShared = 200 * 1024;
// Keys per CTA: the padded keys split over the cluster in whole 64-key groups (pack_v's unit).
inline int quantize_v_slice_keys(int keys_padded) {
  const int groups = (keys_padded + 63) / 64;
  return (groups + kQuantizeVCtas - 1) / kQuantizeVCtas * 64;
}
// One key's row in the slice: 16 bytes of padding put a warp's 16-byte reads of one chunk down
// consecutive keys in different banks.
inline int quantize_v_row_bytes(int head_dim) { return head_dim * 2 + 16; }
// In 64 bits: a head of tens of millions of keys would wrap an int and pass quantize_v_fits.
inline long long quantize_v_shared_bytes(int keys_padded, int head_dim) {
  return static_cast<long long>(quantize_v_slice_keys(keys_padded)) *
         quantize_v_row_bytes(head_dim);
}
// Head dims whose 8-channel chunks divide the threads (each thread keeps one chunk): 32-256 but
// 96 and 192.
inline bool quantize_v_head_dim(int head_dim) { return kQuantizeVThreads % (head_dim / 8) == 0; }
// Whether V of a head of keys_padded keys takes the one-pass kernel (on sm_90 and later).
inline bool quantize_v_fits(int keys_padded, int head_dim) {
  return quantize_v_head_dim(head_dim) &&
         quantize_v_shared_bytes(keys_padded, head_dim) <= kQuantizeVMaxShared;
}

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
