#include "runtime/tensor_maps.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "codegen/checksum_atoms.hpp"
#include "codegen/swizzle_atom.hpp"
#include "ftattn/errors.hpp"
#include "ftattn/quantize_params.cuh"
#include "runtime/driver.hpp"

namespace ftattn::runtime {
namespace {

static_assert(sizeof(TensorMap) == sizeof(CUtensorMap) &&
                  alignof(TensorMap) >= alignof(CUtensorMap),
              "params.cuh's TensorMap must hold a CUtensorMap");

struct Box {
  const char* what;
  CUtensorMapDataType type;
  const void* base;
  std::array<cuuint64_t, 4> dims;     // innermost first; rank = dims used
  std::array<cuuint64_t, 3> strides;  // bytes, of dims 1 to 3
  std::array<cuuint32_t, 4> box;
  cuuint32_t rank;
  CUtensorMapSwizzle swizzle;
};

// TMA's rules for a global tensor, checked before any driver call.
bool copyable(const Box& b) {
  return reinterpret_cast<std::uintptr_t>(b.base) % 16 == 0 &&
         std::all_of(b.strides.begin(), b.strides.begin() + (b.rank - 1), [](cuuint64_t s) {
           return s % 16 == 0 && s > 0 && s < (cuuint64_t{1} << 40);
         });
}

void require_copyable(const Box& b) {
  if (!copyable(b))
    throw ConfigError(fmt::format(
        "the 8-bit {} starts at {} with strides {}, {} bytes: the Hopper 8-bit kernel copies it by "
        "TMA, which needs a 16-byte aligned start and strides that are multiples of 16 bytes "
        "(ftattn::quantize lays operands out so)",
        b.what, b.base, b.strides[0], b.strides[1]));
}

void encode(TensorMap& out, const Box& b) {
  const std::array<cuuint32_t, 4> element_strides{1, 1, 1, 1};
  check(driver().cuTensorMapEncodeTiled(
            reinterpret_cast<CUtensorMap*>(&out), b.type, b.rank, const_cast<void*>(b.base),
            b.dims.data(), b.strides.data(), b.box.data(), element_strides.data(),
            CU_TENSOR_MAP_INTERLEAVE_NONE, b.swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        fmt::format("cuTensorMapEncodeTiled ({})", b.what).c_str());
}

// The wgmma swizzle of a tile whose rows are `bytes` long (64, or 128 per atom).
CUtensorMapSwizzle swizzle_of(int bytes) {
  return bytes >= 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
}

}  // namespace

Q8TensorMaps encode_q8_tensor_maps(const KernelConfig& c, const AttentionParams& p) {
  // Every KV head of every batch is one dimension, so the operands must be dense over it.
  const auto d = static_cast<cuuint64_t>(c.head_dim);
  const auto keys_padded = static_cast<cuuint64_t>(p.v_seq_stride);
  const auto heads = static_cast<cuuint64_t>(p.batch) * static_cast<cuuint64_t>(p.heads_kv);
  const auto n = static_cast<cuuint32_t>(c.block_n);
  if (p.k_batch_stride != p.heads_kv * p.k_head_stride ||
      p.v_batch_stride != p.heads_kv * p.v_head_stride)
    throw ConfigError(fmt::format(
        "{}: its TMA copies take K and V^T with dense heads (batch stride = heads_kv x head "
        "stride), not K {} / {} and V^T {} / {} bytes",
        c.name(), p.k_batch_stride, p.k_head_stride, p.v_batch_stride, p.v_head_stride));
  const auto k_atom = static_cast<cuuint32_t>(codegen::swizzle_atom_bytes(c.head_dim));
  const Box k{"K",
              CU_TENSOR_MAP_DATA_TYPE_UINT8,
              p.k,
              {d, static_cast<cuuint64_t>(p.seqlen_k), heads},
              {static_cast<cuuint64_t>(p.k_seq_stride), static_cast<cuuint64_t>(p.k_head_stride)},
              {k_atom, n, 1},
              3,
              swizzle_of(static_cast<int>(k_atom))};
  const Box vt{"V^T",
               CU_TENSOR_MAP_DATA_TYPE_UINT8,
               p.v,
               {keys_padded, d, heads},
               {keys_padded, static_cast<cuuint64_t>(p.v_head_stride)},
               {n, static_cast<cuuint32_t>(d), 1},
               3,
               swizzle_of(c.block_n)};
  const Box k_scale{"K scales",
                    CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                    p.k_scale,
                    {keys_padded, heads, 1},
                    {keys_padded * 4, 0},
                    {n, 1, 1},
                    2,
                    CU_TENSOR_MAP_SWIZZLE_NONE};
  for (const Box* b : {&k, &vt, &k_scale}) require_copyable(*b);
  Q8TensorMaps maps{};
  encode(maps.k, k);
  encode(maps.vt, vt);
  encode(maps.k_scale, k_scale);
  const codegen::Q8ChecksumRows checks = codegen::q8_checksum_rows(c);
  if (c.protection != Protection::none) {
    // Flash-ABFT: int8's two digit rows of each KV head's byte rows of checksums (their
    // buffer's own dense layout, protect/int8_checksums.cuh), fp8's four E4M3 rows
    // (protect/fp8_checksums.cuh), below V^T's rows in its swizzle (Q8WgmmaTraits::digit_rows);
    // int8 efta_correct's eight rows, all it has.
    const auto rows = static_cast<cuuint64_t>(checks.v);
    const cuuint32_t copied =
        c.precision == Precision::int8 ? (c.protection == Protection::efta_correct ? 8 : 2) : 4;
    const Box vt_check{"V^T checksum rows",
                       CU_TENSOR_MAP_DATA_TYPE_UINT8,
                       p.checksums,
                       {keys_padded, rows, heads},
                       {keys_padded, rows * keys_padded},
                       {n, copied, 1},
                       3,
                       swizzle_of(c.block_n)};
    require_copyable(vt_check);
    encode(maps.vt_check, vt_check);
  }
  if (checks.k > 0) {
    // int8 EFTA's K rows after every head's V^T rows (q8_k_rows_offset): per KV head and key
    // block, 16 rows of head_dim bytes, landed below the block's keys in K's swizzle.
    const auto n_blocks = static_cast<cuuint64_t>((p.seqlen_k + c.block_n - 1) / c.block_n);
    const auto k_rows = static_cast<cuuint64_t>(checks.k);
    const char* base = static_cast<const char*>(p.checksums) +
                       q8_k_rows_offset(p.batch, p.heads_kv, checks.v_bytes(p.v_seq_stride));
    const Box k_check{"K checksum rows",
                      CU_TENSOR_MAP_DATA_TYPE_UINT8,
                      base,
                      {d, n_blocks * k_rows, heads},
                      {d, n_blocks * k_rows * d},
                      {k_atom, static_cast<cuuint32_t>(k_rows), 1},
                      3,
                      swizzle_of(static_cast<int>(k_atom))};
    require_copyable(k_check);
    encode(maps.k_check, k_check);
  }
  return maps;
}

KvTensorMaps encode_kv_tensor_maps(const KernelConfig& c, const AttentionParams& p) {
  const auto d = static_cast<cuuint64_t>(c.head_dim);
  const auto elem = cuuint64_t{2};
  const CUtensorMapDataType type = c.precision == Precision::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                  : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const std::array<cuuint64_t, 4> dims{d, static_cast<cuuint64_t>(p.seqlen_k),
                                       static_cast<cuuint64_t>(p.heads_kv),
                                       static_cast<cuuint64_t>(p.batch)};
  // One swizzle atom column of a key block per copy (sm90::tile_offset's layout): 128 bytes (64
  // channels), or 64 (32) where rows are no multiple of 128 bytes (head dim 96).
  const int atom_bytes = codegen::swizzle_atom_bytes(2 * c.head_dim);
  const auto atom = static_cast<cuuint32_t>(atom_bytes / 2);
  const CUtensorMapSwizzle swizzle = swizzle_of(atom_bytes);
  const std::array<cuuint32_t, 4> box{atom, static_cast<cuuint32_t>(c.block_n), 1, 1};
  const auto bytes = [&](long long elements) { return static_cast<cuuint64_t>(elements) * elem; };
  // A head (or batch) dimension of extent 1 is never stepped over: its stride may be anything
  // the caller had, so give TMA a legal one.
  const auto stride = [&](long long elements, cuuint64_t extent, cuuint64_t fallback) {
    return extent == 1 ? fallback : bytes(elements);
  };
  const auto kv_box = [&](const char* what, const void* base, long long seq, long long head,
                          long long batch) {
    const cuuint64_t s1 = bytes(seq);
    const cuuint64_t s2 = stride(head, dims[2], s1 * dims[1]);
    const cuuint64_t s3 = stride(batch, dims[3], s2 * dims[2]);
    return Box{what, type, base, dims, {s1, s2, s3}, box, 4, swizzle};
  };
  const Box k = kv_box(c.precision == Precision::f16_pasa ? "shifted K" : "K", p.k, p.k_seq_stride,
                       p.k_head_stride, p.k_batch_stride);
  const Box v = kv_box("V", p.v, p.v_seq_stride, p.v_head_stride, p.v_batch_stride);
  for (const Box* b : {&k, &v})
    if (!copyable(*b))
      throw ConfigError(fmt::format(
          "{}: {} starts at {} with strides (seq, head, batch) {}, {}, {} bytes; its TMA copies "
          "need a 16-byte aligned start and nonzero strides that are multiples of 16 bytes "
          "(below 2^40): pass a dense or 16-byte aligned view, not a broadcast one",
          c.name(), b->what, b->base, b->strides[0], b->strides[1], b->strides[2]));
  KvTensorMaps maps{};
  encode(maps.k, k);
  encode(maps.v, v);
  if (c.precision == Precision::f16_pasa) {
    // The shift rows: every KV head's key blocks in a row, and the layout's 7 rows of slack.
    const auto rows = static_cast<cuuint64_t>(p.batch) * static_cast<cuuint64_t>(p.heads_kv) *
                          ((static_cast<cuuint64_t>(p.seqlen_k) + c.block_n - 1) / c.block_n) +
                      7;
    Box shift{"shift rows", type, p.k_shift, {d, rows}, {}, {atom, 8}, 2, swizzle};
    shift.strides[0] = bytes(c.head_dim);
    encode(maps.shift, shift);  // the workspace's own layout: 256-byte aligned, dense rows
  }
  return maps;
}

}  // namespace ftattn::runtime
