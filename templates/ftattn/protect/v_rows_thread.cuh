// The thread of the 8-bit kernels' V^T checksum-row kernels (protect/int8_checksums.cuh,
// protect/fp8_checksums.cuh): one stored key position of one KV head, its V^T column and its
// column of the output rows. Grid (key chunks of blockDim.x, kv heads, batch).
#pragma once

#include "ftattn/quantize_params.cuh"

namespace ftattn::protect {

template <class Out, class In = unsigned char>
struct VtRowsThread {
  int pos;       // the stored key position (past keys_padded: nothing to do)
  const In* vt;  // the head's V^T, head_dim rows of keys_padded
  Out* out;      // the head's `rows` output rows of keys_padded, at pos

  __device__ __forceinline__ VtRowsThread(const Q8ChecksumParams& p, int head_dim, int rows)
      : pos(blockIdx.x * blockDim.x + threadIdx.x) {
    const long long head = static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y;
    vt = static_cast<const In*>(p.vt) + head * head_dim * static_cast<long long>(p.keys_padded);
    out = static_cast<Out*>(p.out) + head * rows * static_cast<long long>(p.keys_padded) + pos;
  }
};

}  // namespace ftattn::protect
