// Kernel parameters, passed by value to every forward kernel. Plain C++ with fixed-width
// builtin types only: the host includes this same file, so the layouts cannot drift apart.
#pragma once

namespace ftattn {

struct AttentionParams {
  const void* q;  // batch x heads_q x seqlen_q x head_dim, strides below (elements)
  const void* k;  // batch x heads_kv x seqlen_k x head_dim
  const void* v;
  void* o;        // like q
  float* lse;     // batch x heads_q x seqlen_q, dense; may be null

  long long q_batch_stride, q_head_stride, q_seq_stride;
  long long k_batch_stride, k_head_stride, k_seq_stride;
  long long v_batch_stride, v_head_stride, v_seq_stride;
  long long o_batch_stride, o_head_stride, o_seq_stride;

  int batch;
  int heads_q;
  int heads_kv;
  int seqlen_q;
  int seqlen_k;
  int group_size;    // heads_q / heads_kv: query heads sharing one K/V head
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): the kernel works in base 2

  // Block-sparse masks: one byte per (head, query block, key block) of sparse_block_m x
  // sparse_block_n; nonzero means compute. Unused by dense kernels.
  const unsigned char* block_mask;
  long long block_mask_head_stride;  // bytes; 0: one mask for every head
  int block_mask_k_blocks;           // bytes per mask row: ceil(seqlen_k / sparse_block_n)
  int sparse_block_m;
  int sparse_block_n;
};

}  // namespace ftattn
