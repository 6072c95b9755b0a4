// Kernel parameters, passed by value to every forward kernel. Plain C++ with fixed-width
// builtin types only: the host includes this same file, so the layouts cannot drift apart.
#pragma once

namespace ftattn {

// Value classes a fault-injection plan can hit (source-level sites of the fused kernel).
enum FaultSiteId : int {
  fault_site_none = 0,
  fault_site_scores = 1,    // S accumulator after GEMM I
  fault_site_probs = 2,     // P after exp
  fault_site_row_max = 3,   // running row max
  fault_site_row_sum = 4,   // running row sum l
  fault_site_rescale = 5,   // alpha = exp(m_old - m_new)
  fault_site_output = 6,    // O accumulator after GEMM II
  fault_site_checksum = 7,  // a checksum accumulator of the protection scheme
  fault_site_ir = 8,        // IR-level: the n-th dynamic instance of an instrumented class
  fault_site_pv = 9,        // a key block's own P V before O takes it (ftattn/fault.hpp)
  fault_site_scale = 10,    // 8-bit: a key's scale after its load, or a row's softmax factor
};

// One bit flip, chosen at launch. Kernels compiled without injection ignore it.
struct FaultPlanParams {
  int site;    // FaultSiteId; fault_site_none disables injection
  int cta;     // linear CTA index: blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)
  int thread;  // threadIdx.x
  int iteration;  // key-block iteration of the main loop (IR level: dynamic instance index)
  int element;    // which value of the class this thread holds (taken modulo their number)
  int bit;        // 0..31
};

// What a protected kernel saw, for one detection or correction.
struct FaultRecord {
  int batch, head, row, col;  // col: -1 when the check has no column (row sums)
  int stage;                  // FaultStageId
  int corrected;              // 1 when the kernel fixed the value in place
  float magnitude;            // |checksum - recomputed| at detection
  float threshold;            // the bound it exceeded
};

enum FaultStageId : int {
  fault_stage_scores = 1,   // GEMM I checksum
  fault_stage_probs = 2,    // exp product check
  fault_stage_row_sum = 3,  // row-sum range check
  fault_stage_output = 4,   // GEMM II / output checksum
  fault_stage_row_max = 5,  // the quad's copies of a row's running max disagree
};

// Device-side fault log: counters, then the first `capacity` records. The counters are 64-bit:
// a storm of failed checks (thresholds set far too tight on a large problem) can pass 2^32, and
// a wrapped count could read as clean or as all corrected.
struct FaultLog {
  unsigned long long detected;
  unsigned long long corrected;
  unsigned int recorded;  // records written (at most capacity)
  unsigned int capacity;
  // FaultRecord records[capacity] follows
};

struct AttentionParams {
  const void* q;  // batch x heads_q x seqlen_q x head_dim, strides below (elements)
  const void* k;  // batch x heads_kv x seqlen_k x head_dim
  const void* v;
  void* o;     // like q
  float* lse;  // batch x heads_q x seqlen_q, dense; may be null

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

  // Protection (unused by kernels without it). Thresholds are relative: a check fails when
  // |checksum - recomputed| > tol * (a bound on the rounding of what it adds up) + floor (each
  // check's bound: protect/checksum.cuh, fwd_sm80.cuh's check_output, README).
  FaultLog* fault_log;  // may be null: detections are then only corrected, not reported
  float tol_scores, tol_probs, tol_output, tol_row_sum;
  float tol_floor;
  FaultPlanParams fault;  // used only by kernels compiled with fault injection

  // Recompute mode: when tile_count > 0 the grid's x walks tile_list, one (m_block, head,
  // batch) triple per CTA, instead of the full grid.
  const int* tile_list;
  int tile_count;

  // Checksum workspace written by the protection prologue kernel (per KV head), or null.
  const void* checksums;

  // Quantised precisions (int8, fp8_e4m3; kernel/fwd_q8_sm80.cuh). q, k, v then point at 8-bit
  // operands and every stride above counts bytes:
  //   q: batch x heads_q x seqlen_q x head_dim, k: batch x heads_kv x seqlen_k x head_dim;
  //   v: V transposed, batch x heads_kv x head_dim x keys_padded, where keys_padded =
  //      v_seq_stride = seqlen_k rounded up to 16; keys at or past seqlen_k are 0, and within
  //      each group of 16 keys, byte 4t + i holds key {2t, 2t+1, 2t+8, 2t+9}[i] (t = 0..3).
  // Scales (x = q * scale): q_scale per token, batch x heads_q x seqlen_q; k_scale per token,
  // batch x heads_kv x keys_padded; v_scale per channel, batch x heads_kv x head_dim. Unused by
  // f16/bf16.
  const float* q_scale;
  const float* k_scale;
  const float* v_scale;
  int o_is_bf16;  // quantised precisions: O is written as bf16 (else f16)
  // Quantised precisions on the Hopper wgmma skeleton: 0 when q holds 8-bit operands with
  // q_scale; 1 when q is the caller's f16 Q (strides in elements, Kernel::launch's input), which
  // the kernel quantises per token itself (q_scale unused). The mma.sync skeleton needs 0.
  int q_16bit;

  // f16_pasa (kernel/fwd_pasa_sm80.cuh): k then points at the shifted keys
  // K' = fl16(scale_log2 * (K - r_j)) and k_shift at the shift vectors r_j = fl16(beta *
  // mean of key block j), both written by the shift kernel: r is batch x heads_kv x
  // ceil(seqlen_k / block_n) x head_dim halves, dense. Unused by the other precisions.
  const void* k_shift;
};

// A TMA tensor map (CUtensorMap: 128 opaque bytes, 128-byte aligned as cuda.h declares it), encoded
// on the host by cuTensorMapEncodeTiled and passed as a __grid_constant__ kernel parameter, where
// the copy instructions read it.
struct alignas(128) TensorMap {
  unsigned long long opaque[16];
};

// The 8-bit Hopper skeletons' TMA tensor maps (kernel/fwd_q8_sm90.cuh, fwd_q8_ws_sm90.cuh), over
// AttentionParams' dense 8-bit operands with the KV heads of every batch as one dimension:
//   k:       head_dim x seqlen_k x (batch heads_kv) bytes, boxes of min(head_dim, 128) x block_n;
//   vt:      keys_padded x head_dim x (batch heads_kv) bytes, boxes of block_n x head_dim;
//   k_scale: keys_padded x (batch heads_kv) floats, boxes of block_n x 1;
//   vt_check: int8 Flash-ABFT's checksum rows of V^T (protect/int8_checksums.cuh), keys_padded x
//             8 x (batch heads_kv) bytes, boxes of block_n x 2 (the two digit rows);
//   k_check: int8 EFTA's checksum rows of every K block (the two digit tiles of its strided
//            sums), head_dim x (16 key blocks) x (batch heads_kv) bytes, boxes of head_dim x 16.
// K and V^T boxes land in the wgmma swizzle of their row width (64 or 128 bytes); whatever lies
// past a dimension's end is written as zeros, as the cp.async copies zero-fill.
struct Q8TensorMaps {
  TensorMap k;
  TensorMap vt;
  TensorMap k_scale;
  TensorMap vt_check;
  TensorMap k_check;
};

// The 16-bit wgmma skeletons' TMA tensor maps (kernel/fwd_ws_sm90.cuh, and fwd_sm90.cuh and
// fwd_pasa_sm90.cuh where unprotected: kv_tensor_maps), over the caller's K and V (or PASA's
// shifted keys) as AttentionParams strides them:
//   k, v:  head_dim x seqlen_k x heads_kv x batch halves, boxes of 64 x block_n x 1 x 1: one
//          128-byte swizzle atom column of a key block per copy;
//   shift: f16_pasa's shift rows, head_dim x (batch heads_kv key blocks) halves, boxes of 64 x 8.
// Keys past seqlen_k are written as zeros, as the cp.async copies zero-fill.
struct KvTensorMaps {
  TensorMap k;
  TensorMap v;
  TensorMap shift;
};

// The PASA shift kernel's parameters: K (16-bit, strides in elements) in; K' (dense, batch x
// heads_kv x seqlen_k x head_dim) and r (as AttentionParams::k_shift) out.
struct PasaShiftParams {
  const void* k;
  long long k_batch_stride, k_head_stride, k_seq_stride;
  int batch, heads_kv, seqlen_k;
  float scale_log2;  // folded into K' before its one rounding to f16
  void* k_shifted;
  void* shift;
};

}  // namespace ftattn
