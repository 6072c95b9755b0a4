// The decoupled baseline's row softmax with DMR (EFTA's "DMR-RSM" kernel): P = softmax(S) row by
// row, one warp per row. The row max and sum are computed twice and compared bit for bit; so is
// every probability. On a mismatch a third computation breaks the tie (the copy it agrees with
// wins; no agreement is reported uncorrected). Reads S (FP32) and writes P (16-bit), zeros past
// each row's last key as far as the output GEMM reads, and the log-sum-exp.
#pragma once

#include "ftattn/kernel/decoupled_common.cuh"

namespace ftattn::decoupled {

struct __align__(16) Float4 {
  float x[4];
};
struct __align__(8) U32x2 {
  u32 x[2];
};

// Grid: ceil(batch * heads_q * seqlen_q / 4) CTAs of 4 warps. Chunks of 128 keys: 4 per lane.
// OutputBlockM: rows per CTA of the output GEMM (how far past a causal row's bound it reads).
template <class P, bool Causal, int OutputBlockM, bool Inject>
__device__ __forceinline__ void softmax_kernel(const DecoupledParams& dp) {
  constexpr float kLog2e = 1.4426950408889634f;
  const AttentionParams& p = dp.attn;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const i64 rows = static_cast<i64>(p.batch) * p.heads_q * p.seqlen_q;
  const i64 row_id = static_cast<i64>(blockIdx.x) * 4 + warp;
  if (row_id >= rows) return;  // the whole warp: no shuffle is left waiting
  const int row = static_cast<int>(row_id % p.seqlen_q);
  const int bh = static_cast<int>(row_id / p.seqlen_q);
  const int batch = bh / p.heads_q, head = bh % p.heads_q;
  const int valid =
      Causal ? max(0, min(p.seqlen_k, row + 1 + p.seqlen_k - p.seqlen_q)) : p.seqlen_k;
  const int chunks = (valid + 127) / 128;
  const int ld = static_cast<int>(dp.row_elements);
  const float* s = dp.s + row_id * dp.row_elements;
  u16* out = static_cast<u16*>(dp.p) + row_id * dp.row_elements;

  bool hit_max = false, hit_sum = false, hit_prob = false;
  if constexpr (Inject) {
    hit_max = plan_hits(p.fault, fault_site_row_max);
    hit_sum = plan_hits(p.fault, fault_site_row_sum);
    hit_prob = plan_hits(p.fault, fault_site_probs);
  }

  auto load = [&](int key, float(&x)[4]) {
    if (key < valid) {  // key + 3 < ld always: ld and key are multiples of 4
      const Float4 v = *reinterpret_cast<const Float4*>(s + key);
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] = key + j < valid ? v.x[j] : -__int_as_float(0x7f800000);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] = -__int_as_float(0x7f800000);
    }
  };

  // One computation of the row's (max, sum of exp(S - max)), reduced over the warp.
  auto row_stats = [&](bool inject, float& m, float& l) {
    const float neg_inf = -__int_as_float(0x7f800000);
    m = neg_inf;
    l = 0.f;
    for (int c = 0; c < chunks; ++c) {
      float x[4];
      load(c * 128 + lane * 4, x);
      const float mx = v_max(v_max(x[0], x[1]), v_max(x[2], x[3]));
      const float m_new = v_max(m, mx);
      if (m_new != neg_inf) {
        float sum = v_mul(l, v_ex2(v_mul(v_sub(m, m_new), kLog2e)));
#pragma unroll
        for (int j = 0; j < 4; ++j) sum = v_add(sum, v_ex2(v_mul(v_sub(x[j], m_new), kLog2e)));
        l = sum;
        m = m_new;
      }
      if (Inject && inject && c == p.fault.iteration) {
        if (hit_max) m = flip_bit(m, p.fault.bit);
        if (hit_sum) l = flip_bit(l, p.fault.bit);
      }
    }
    // Each pair of lanes combines the lower lane's (m, l) with the higher one's in that order, so
    // both get the same bits: ptxas may fuse a product into the add (add.f32 allows it), and with
    // each lane's own value first the two lanes' sums differed in the last bit.
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      const float m_o = v_shfl_xor(m, off), l_o = v_shfl_xor(l, off);
      const bool low = (lane & off) == 0;
      const float m_1 = low ? m : m_o, l_1 = low ? l : l_o, m_2 = low ? m_o : m,
                  l_2 = low ? l_o : l;
      const float m_new = v_max(m_1, m_2);
      if (m_new != neg_inf)
        l = v_add(v_mul(l_1, v_ex2(v_mul(v_sub(m_1, m_new), kLog2e))),
                  v_mul(l_2, v_ex2(v_mul(v_sub(m_2, m_new), kLog2e))));
      m = m_new;
    }
  };

  float m_a, l_a, m_b, l_b;
  row_stats(true, m_a, l_a);
  row_stats(false, m_b, l_b);
  float m = m_a, l = l_a;
  // The whole warp takes the tie-break if any lane sees a mismatch: its shuffles need every lane.
  // (Lanes whose sums differed in the last bit once split here, and the lanes that went on shuffled
  // with absent ones: a flip of l's low bits then left whole rows wrong, some unreported.)
  if (__any_sync(0xffffffffu, !same_bits(m_a, m_b) || !same_bits(l_a, l_b))) {
    float m_c, l_c;
    row_stats(false, m_c, l_c);
    const bool agree = (same_bits(m_c, m_a) && same_bits(l_c, l_a)) ||
                       (same_bits(m_c, m_b) && same_bits(l_c, l_b));
    m = m_c;
    l = l_c;
    if (lane == 0)
      record_fault(p.fault_log, batch, head, row, -1, fault_stage_row_sum, agree,
                   same_bits(l_a, l_b) ? fabsf(m_a - m_b) : fabsf(l_a - l_b), 0.f);
  }
  if (lane == 0 && p.lse != nullptr)
    p.lse[static_cast<i64>(bh) * p.seqlen_q + row] =
        l > 0.f ? m + __logf(l) : -__int_as_float(0x7f800000);

  const float inv_a = l > 0.f ? v_rcp(l) : 0.f, inv_b = l > 0.f ? v_rcp(l) : 0.f;
  auto prob = [&](float x, float inv) { return v_mul(v_ex2(v_mul(v_sub(x, m), kLog2e)), inv); };
  for (int c = 0; c < chunks; ++c) {
    const int key = c * 128 + lane * 4;
    if (key >= ld) continue;
    float x[4], pa[4], pb[4];
    load(key, x);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      pa[j] = prob(x[j], inv_a);
      pb[j] = prob(x[j], inv_b);
    }
    if (Inject && hit_prob && c == p.fault.iteration)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (j == (p.fault.element & 3)) pa[j] = flip_bit(pa[j], p.fault.bit);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (!same_bits(pa[j], pb[j])) {
        const float pc = prob(x[j], v_rcp(l));
        record_fault(p.fault_log, batch, head, row, key + j, fault_stage_probs,
                     same_bits(pc, pa[j]) || same_bits(pc, pb[j]), fabsf(pa[j] - pb[j]), 0.f);
        pa[j] = pc;
      }
    U32x2 packed;
    packed.x[0] = P::pack(pa[0], pa[1]);
    packed.x[1] = P::pack(pa[2], pa[3]);
    *reinterpret_cast<U32x2*>(out + key) = packed;
  }
  // Zeros past the row's bound, as far as the output GEMM's k loop reads for this row's block
  // (at most OutputBlockM - 1 keys further for causal rows), and over the row padding.
  const int zero_end = min(ld, (valid + OutputBlockM + 31) / 32 * 32);
  for (int key = chunks * 128 + lane * 4; key < zero_end; key += 128)
    *reinterpret_cast<U32x2*>(out + key) = U32x2{{0u, 0u}};
}

}  // namespace ftattn::decoupled
