// Layout of the checksum workspace the protection prologue writes and the fused kernel reads.
// Plain C++: the host sizes the buffer with the same function the kernel indexes it with.
//
// Per (batch, kv head), in this order, each region 16-byte aligned:
//   V checksums  keys x (8 * v_atoms) 16-bit values: extra columns appended to each V row
//   K checksums  n_blocks x (8 * k_atoms) x head_dim 16-bit values: extra rows of each K tile
//   K norms      n_blocks x 4 floats: per thread group t, the sum of |k|_2 over its keys
//   V maxima     4 floats: per thread group t, max over keys of sum |v| over the row (the same
//                in all four: every scheme checks O by rows)
// where keys = n_blocks * block_n, and thread group t of an MMA quad owns the columns
// {8l + 2t, 8l + 2t + 1} of every 8-wide tile.
#pragma once

namespace ftattn {

struct ChecksumWorkspace {
  long long v_per_head = 0, k_per_head = 0, knorm_per_head = 0, vmax_per_head = 0;
  long long k_offset = 0, knorm_offset = 0, vmax_offset = 0, bytes = 0;
  int n_blocks = 0, keys = 0;
};

inline long long checksum_align16(long long x) { return (x + 15) / 16 * 16; }

inline ChecksumWorkspace checksum_workspace(int batch, int heads_kv, int seqlen_k, int head_dim,
                                            int block_n, int k_atoms, int v_atoms) {
  ChecksumWorkspace w;
  if (k_atoms == 0 && v_atoms == 0) return w;
  w.n_blocks = (seqlen_k + block_n - 1) / block_n;
  w.keys = w.n_blocks * block_n;
  const long long heads = static_cast<long long>(batch) * heads_kv;
  w.v_per_head = checksum_align16(static_cast<long long>(w.keys) * 8 * v_atoms * 2);
  w.k_per_head = checksum_align16(static_cast<long long>(w.n_blocks) * 8 * k_atoms * head_dim * 2);
  w.knorm_per_head = k_atoms > 0 ? checksum_align16(static_cast<long long>(w.n_blocks) * 16) : 0;
  w.vmax_per_head = 16;
  w.k_offset = heads * w.v_per_head;
  w.knorm_offset = w.k_offset + heads * w.k_per_head;
  w.vmax_offset = w.knorm_offset + heads * w.knorm_per_head;
  w.bytes = w.vmax_offset + heads * w.vmax_per_head;
  return w;
}

}  // namespace ftattn
