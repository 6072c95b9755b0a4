// Warp-specialised forward on Hopper (sm_90a), 128-row tiles: the tiles, MMAs and softmax of
// fwd_sm90.cuh (f16, bf16, unprotected or with a checksum scheme: Flash-ABFT's checksum atom in
// each V tile and GEMM II's extra n8 tile, checked at the end of the row; EFTA's checksum rows
// below the keys, GEMM I's extra n8 tile and its checked softmax) and fwd_pasa_sm90.cuh (f16_pasa:
// FP16 scores, the recovery MMA against the shift rows below the keys, PASA's softmax; unprotected,
// with Flash-ABFT's tile, or with EFTA: kernel/pasa_efta_sm90.cuh's GEMM I check and the softmax
// evaluated twice), scheduled the way FlashAttention-3 schedules them.
//
//   producer   the last warpgroup (56 registers each; 32 beside three consumers) copies Q once
//              by cp.async, then its first thread copies every key block's K and V tiles by
//              TMA (the tensor maps: params.cuh's KvTensorMaps) into their own rings of
//              num_stages buffers; the copies complete on the buffer's "full" mbarrier, and a
//              buffer is refilled once every consumer has arrived on its "empty" one.
//   consumers  warpgroups 0 and 1 (64 query rows each, 224 registers; f16 and bf16 unprotected or
//              with Flash-ABFT, or EFTA at head dim 64, also 0 to 2 with 160) take turns
//              on the tensor cores: named barriers pass a token round them, and each turn issues
//              the previous block's GEMM II (O += P V) and this block's GEMM I (S = Q K^T) back
//              to back (three FP32-score consumers: GEMM II done first).
//              While one warpgroup's MMAs run, the others run their softmax, so the tensor cores no
//              longer idle through it (in fwd_sm90.cuh both warpgroups met at a CTA barrier every
//              key block and ran their softmax at the same time).
//
// No CTA-wide barrier runs in the main loop: a consumer waits only for the buffers it reads.
//
// Persistent tiles (unprotected, head dims 64 and 128: FwdWgmmaTraits::persistent): given fewer
// CTAs than tiles (Kernel::launch up to 1k keys: one per SM), each CTA walks tiles in turn
// (causal: pairs of a head's long and short tiles, kernel/tile_walk.cuh), its rings, turns and
// two Q buffers running on from one tile to the next.
#pragma once

#include "ftattn/arch/sm80/cp_async.cuh"
#include "ftattn/arch/sm80/shared.cuh"
#include "ftattn/arch/sm90/barriers.cuh"
#include "ftattn/arch/sm90/tile_load.cuh"
#include "ftattn/arch/sm90/tma.cuh"
#include "ftattn/arch/sm90/wgmma.cuh"
#include "ftattn/arch/sm90/ws_pipeline.cuh"
#include "ftattn/kernel/fwd_pasa_sm80.cuh"
#include "ftattn/kernel/fwd_sm90.cuh"
#include "ftattn/kernel/pasa_efta_sm90.cuh"
#include "ftattn/kernel/tile_walk.cuh"

namespace ftattn {

namespace detail {
// The score registers of one warp's key block: FP32 accumulators, or PASA's FP16 pairs.
template <bool Pasa, int kST>
struct ScoreTile {
  using type = float[kST][4];
};
template <int kST>
struct ScoreTile<true, kST> {
  using type = u32[kST][2];  // register 2 nt + r: row half r of n8 tile nt
};
}  // namespace detail

template <class T>
__device__ __forceinline__ void attention_fwd_ws_sm90(const AttentionParams& p,
                                                      const KvTensorMaps& maps) {
  static_assert(T::warp_specialized && (T::num_warps == 8 || T::num_warps == 12),
                "two or three consumer warpgroups");
  using P = typename T::Precision;
  constexpr bool kBf16 = protect::IsBf16<P>::value;
  constexpr bool kPasa = P::pasa;
  constexpr int kST = T::s_tiles;
  constexpr int kOT = T::o_tiles;
  constexpr int kCT = T::checksum_tiles;        // GEMM II's checksum tiles (f16_pasa: or its ones)
  constexpr int kSC = T::score_checksum_tiles;  // EFTA: GEMM I's checksum tile
  constexpr bool kEfta = T::Protect::k_atoms > 0;
  // f16_pasa with EFTA (two consumers): GEMM I's checksum tile as an FP32 wgmma of its own, the
  // scores' own sums and the check of kernel/pasa_efta_sm90.cuh, and the softmax evaluated twice.
  constexpr bool kPasaEfta = kPasa && kEfta;
  // efta_correct rebuilds a faulty score from the weighted checksum rows in the K buffer, so the
  // buffer is released after the softmax, not after GEMM I.
  constexpr bool kLateKRelease = T::Protect::correct;
  // Three 16-bit FP32-score consumers: GEMM II done before GEMM I, so O, S and P never all
  // sit in the wgmma pipeline at once (160 registers each). P staged in shared memory instead,
  // so that the two could go back to back, ran 0.90-0.97x (staged_p_ab.csv). f16_pasa's FP16
  // scores go back to back, but with Flash-ABFT's tile at head dim 128 (there ptxas serialised
  // every wgmma, C7512).
  constexpr bool kSplitTurn = T::num_warps == 12 && (!P::pasa || (kCT > 0 && T::head_dim > 96));
  // EFTA (two consumers): FlashAttention-3's overlap inside each warpgroup. A turn issues this
  // block's GEMM I, then the previous block's GEMM II, and waits for GEMM I alone, so the softmax
  // runs while GEMM II does; O takes the block's factors, and GEMM II's registers its P, once
  // GEMM II is done (finish_turn). On an H100 at head dim 128 efta_correct ran 1.04-1.11x
  // (efta_correct_overlap_ab.csv), the unprotected 128 x 128 w8s2 1.005-1.012x
  // (w8_overlap_unprotected_ab.csv, not taken). efta_detect ran 0.93-0.98x (w8_overlap_ab.csv)
  // while ptxas put the wait for GEMM II at its softmax's first exponentials; with the product
  // check's alarms reported before the wait (kAlarmsFirst), a branch the wait cannot move above,
  // the wait follows the whole softmax and it ran 1.01-1.04x the old turn
  // (efta_alarms_before_wait_ab.csv). efta_correct so ran 0.97-1.01x: it keeps its wait where
  // ptxas puts it.
  constexpr bool kOverlap = T::num_warps == 8 && kEfta && !P::pasa;
  constexpr bool kAlarmsFirst = kOverlap && !T::Protect::correct;
  // Three EFTA consumers (head dims 32 and 64) take the split turn below instead; f16_pasa's two
  // the plain one.
  static_assert(
      !kEfta || kOverlap || (kSplitTurn && T::head_dim <= 64) || (kPasaEfta && T::num_warps == 8),
      "EFTA runs on two consumers, or three at head dims up to 64");
  // Without EFTA a row keeps its max until a block passes it by 2^8 (softmax_block, pasa::bias).
  // f16's EFTA rescales every block: efta_detect with the lazy rescale ran 0.95-0.97x
  // (efta_lazy_rescale_ab.csv). f16_pasa's keeps it: both evaluations take the same slack.
  constexpr int kLazyRescale = detail::kLazyRescaleSlack;
  // Flash-ABFT: l is the ones column of GEMM II's checksum tile (its odd column groups), which the
  // tile computes anyway, so the softmax adds no probabilities (f16_pasa: no f16 pair sums; its
  // unprotected three consumers up to head dim 96 have a tile of ones for it alone). It is
  // the sum of the 16-bit P that O took, as EFTA's l is. Like the FP32 sum before it, l is outside
  // Flash-ABFT's output check; a range check (check_ones_row_sum) catches its gross faults.
  constexpr bool kOnesRowSum = kCT > 0 && !kEfta;
  constexpr int kStages = T::num_stages;
  constexpr int kRowBytes = T::row_bytes;
  constexpr int kConsumers = T::threads;  // 256 or 384
  constexpr int kGroups = T::num_warps / 4;
  constexpr int kProducers = 128;
  constexpr int kConsumersDone = kGroups + 1;  // named barriers 1 ... kGroups pass the turn

  // Persistent tiles (T::persistent): each CTA walks the tiles of its walk units (TileWalk), its
  // K and V ring running on across them, the next tile's Q landing in the other of two buffers
  // while this one runs, and O staged over the tile's own. Otherwise the CTA's one tile comes
  // from its block index (tile_coords), and this loop runs once.
  constexpr bool kPersistent = T::persistent;
  constexpr int kQLoaders = 64;  // walking tiles: the producer's last two warps copy Q

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const u32 sQ = (sm80::smem_addr(smem_raw) + 1023u) & ~1023u;
  const u32 sK = sQ + T::q_buffers * T::q_bytes;
  const u32 sV = sK + kStages * T::k_tile_bytes;
  // K and V tiles come by TMA from one producer thread. The checksum schemes' rows below the
  // keys and chunks beside the channels still come by every producer thread's cp.async, which
  // then arrive on the same "full" barriers as the TMA copies' thread. Flash-ABFT's chunks by
  // the TMA unit ran 0.48-0.53x as 16-byte bulk copies (abft_bulk_chunks_ab.csv) and 0.98-1.02x
  // as one box of overlapping 128-byte rows per block (abft_tma_chunks_ab.csv).
  constexpr bool kThreadCopies = kEfta || T::Protect::v_atoms > 0;
  using Pipeline = sm90::WsPipeline<kStages, kProducers, T::num_warps,
                                    kThreadCopies ? kProducers + 1 : 1, T::q_buffers>;
  static_assert(Pipeline::barrier_bytes <= T::barrier_bytes, "the mbarriers follow the tiles");
  const Pipeline pipe{sQ + T::tiles_bytes};
  const int m_blocks = (p.seqlen_q + T::block_m - 1) / T::block_m;
  using Walk = detail::TileWalk<kPersistent, T::causal>;
  const int units = kPersistent ? Walk::units_per_head(m_blocks) * p.heads_q * p.batch : 1;
  const int first_unit =
      kPersistent ? blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z) : 0;
  const int ctas = kPersistent ? gridDim.x * gridDim.y * gridDim.z : 1;
  // Walking several tiles (a grid smaller than the walk units): Q by two warps into two buffers.
  // Given a CTA per tile, a persistent kernel runs as the others do.
  const bool walking = kPersistent && ctas < units;
  const Walk walk{m_blocks, walking ? first_unit : 0, walking ? units : 1, walking ? ctas : 1,
                  walking && T::causal ? m_blocks / 2 * p.heads_q * p.batch : 0};
  if (threadIdx.x == 0) {
    pipe.init(walking ? kQLoaders : kProducers);
    sm90::fence_barrier_init();  // seen by the TMA unit
  }
  if constexpr (T::ones_tile) {
    // Every stage's V atom after the channels: each key's 16 bytes (1, 0) four times, l's column
    // in every column group. Written once: the TMA copies fill the channels only.
    for (int c = threadIdx.x; c < kStages * T::block_n; c += T::launch_threads)
      sm80::st_shared_u128(sV + (c / T::block_n) * T::v_tile_bytes + T::kv_tile_bytes +
                               sm90::swizzled_offset<T::atom_bytes>(c % T::block_n, 0),
                           uint4_{0x3c00u, 0x3c00u, 0x3c00u, 0x3c00u});
    sm90::fence_async_shared();  // seen by the tensor cores
  }
  __syncthreads();

  const int diag = p.seqlen_k - p.seqlen_q;  // bottom-right causal alignment
  // Where tile `tile` lies: its query rows, head, batch and key blocks.
  struct Tile {
    int head, batch, head_kv, row0, row_end, n_blocks;
    detail::HeadOperands in;
  };
  auto tile_at = [&](detail::TileCursor at) {
    int m_block, head, batch;
    if (walking) {
      int head_batch;
      walk.tile(at, m_block, head_batch);
      head = head_batch % p.heads_q;
      batch = head_batch / p.heads_q;
    } else {
      detail::tile_coords<T>(p, m_block, head, batch);
    }
    Tile g;
    g.head = head;
    g.batch = batch;
    g.head_kv = head / p.group_size;
    // Causal 192-row tiles (f16_pasa's three consumers) on a sequence that is not a whole number
    // of them: the ragged part is the first tile, not the last. Causal, the last tile sees every
    // key, and as a remainder of 64 rows (4096 = 21 x 192 + 64) it did a whole tile's work for a
    // third of its rows; first, it sees one or two key blocks. Tile 0 then computes rows 0 to
    // 191 and writes the ragged ones; the others start there.
    constexpr bool kRaggedFirst = T::causal && T::block_m % 128 != 0;
    [[maybe_unused]] const int ragged = kRaggedFirst ? p.seqlen_q % T::block_m : 0;
    g.row0 = kRaggedFirst && ragged > 0 && m_block > 0 ? ragged + (m_block - 1) * T::block_m
                                                       : m_block * T::block_m;
    // Where this tile's rows end: the ragged first tile's at `ragged`, the others' at the
    // sequence end (-1).
    g.row_end = kRaggedFirst && ragged > 0 && m_block == 0 ? ragged : -1;
    g.n_blocks = detail::key_blocks<T>(p, g.row0, diag);
    g.in = detail::head_operands(p, batch, head, g.head_kv, g.row0);
    return g;
  };
  // Checksum schemes: the KV head's checksums and maxima (protect/workspace.cuh).
  using Protect = typename T::Protect;
  const ChecksumWorkspace cs = checksum_workspace(p.batch, p.heads_kv, p.seqlen_k, T::head_dim,
                                                  T::block_n, Protect::k_atoms, Protect::v_atoms);
  const unsigned char* cs_base = static_cast<const unsigned char*>(p.checksums);
  if (threadIdx.x >= kConsumers) {
    // Producer: only copies, so it hands its registers to the consumers.
    sm90::shrink_registers<sm90::ws_producer_registers<kGroups>>();
    const int t = threadIdx.x - kConsumers;
    if (!walking) {
      // One tile: every producer thread copies its Q, then thread 0 (and, for the checksum
      // schemes, all) copy K and V.
      const Tile g = tile_at(walk.begin());
      sm90::load_rows_swizzled<kProducers, T::block_m, kRowBytes>(
          sQ, g.in.q, p.q_seq_stride * 2, p.seqlen_q - g.row0, kRowBytes, t);
      sm90::cp_async_arrive(pipe.q_full());
      if (!kThreadCopies && t != 0) {
        sm80::cp_async_wait<0>();
        return;
      }
    } else if constexpr (kPersistent) {
      // Walking: the last two warps copy each tile's Q into its buffer once the consumers have
      // stored the O of the tile two before from it; thread 0 copies K and V.
      constexpr int kFirstLoader = kProducers - kQLoaders;
      if (t >= kFirstLoader) {
        int it = 0;
        for (auto at = walk.begin(); walk.valid(at); at = walk.next(at), ++it) {
          const Tile g = tile_at(at);
          const int b = it % 2;
          if (it >= 2) sm90::mbarrier_wait(pipe.q_empty(b), ((it - 2) / 2) & 1);
          // In four parts of whole 8-row swizzle groups, one at a time: unrolled whole, the
          // copies' addresses spilled 180 bytes at the producer's 32 registers.
          constexpr int kPart = T::block_m / 4;
          static_assert(kPart % 8 == 0 && T::atom_bytes == 128, "parts of whole 128-byte atoms");
#pragma unroll 1
          for (int part = 0; part < 4; ++part)
            sm90::load_rows_swizzled<kQLoaders, kPart, kRowBytes, T::block_m>(
                sQ + b * T::q_bytes + part * kPart * T::atom_bytes,
                g.in.q + static_cast<i64>(part) * kPart * p.q_seq_stride, p.q_seq_stride * 2,
                p.seqlen_q - g.row0 - part * kPart, kRowBytes, t - kFirstLoader);
          sm90::cp_async_arrive(pipe.q_full(b));
        }
        sm80::cp_async_wait<0>();
        return;
      }
      if (t != 0) return;
    }
    if (t == 0) {
      sm90::prefetch_tensor_map(maps.k);
      sm90::prefetch_tensor_map(maps.v);
      if constexpr (kPasa) sm90::prefetch_tensor_map(maps.shift);
    }
    // The K and V rings run on across a CTA's tiles: key block j of a tile is the ring's block
    // base + j.
    int base = 0;
    for (auto at = walk.begin(); walk.valid(at); at = walk.next(at)) {
      const Tile g = tile_at(at);
      const int head_kv = g.head_kv, batch = g.batch;
      const long long cs_head = static_cast<long long>(batch) * p.heads_kv + head_kv;
      // f16_pasa: maps.k holds the shifted keys K' (the shift kernel's output), maps.shift their
      // r_j, this KV head's from row shift_row0 (runtime::PasaLayout).
      [[maybe_unused]] const int shift_row0 =
          (batch * p.heads_kv + head_kv) * ((p.seqlen_k + T::block_n - 1) / T::block_n);
      for (int j = 0; j < g.n_blocks; ++j) {
        const int ring = base + j;
        const int s = ring % kStages;
        const int key0 = j * T::block_n;
        pipe.acquire_k(ring);
        const u32 dk = sK + s * T::k_tile_bytes;
        if (t == 0) {
          // PASA: every eighth block, the next eight shift rows below the keys.
          const bool shift_rows = kPasa && j % T::recovery_blocks == 0;
          sm90::mbarrier_expect_tx(
              pipe.k_full(s),
              detail::kv_tma_bytes<T> + (shift_rows ? detail::shift_tma_bytes<T> : 0));
          detail::tma_load_rows<T, T::k_rows>(dk, maps.k, key0, head_kv, batch, pipe.k_full(s));
          if (shift_rows) detail::tma_load_shift_rows<T>(dk, maps, shift_row0 + j, pipe.k_full(s));
        }
        if constexpr (kEfta)  // the block's checksum rows below the keys
          detail::load_k_checksum_rows<T, kProducers>(
              dk,
              cs_base + cs.k_offset + cs_head * cs.k_per_head +
                  static_cast<long long>(j) * 8 * T::Protect::k_atoms * T::chunks_per_row * 16,
              t);
        if constexpr (kThreadCopies) pipe.commit_k(ring);
        pipe.acquire_v(ring);
        const u32 dv = sV + s * T::v_tile_bytes;
        if (t == 0) {
          sm90::mbarrier_expect_tx(pipe.v_full(s), detail::kv_tma_bytes<T>);
          detail::tma_load_rows<T, T::block_n>(dv, maps.v, key0, head_kv, batch, pipe.v_full(s));
        }
        // Each key's checksum chunk, in an atom after its head_dim ones.
        if constexpr (T::Protect::v_atoms > 0)
          detail::load_v_checksum_chunks<T, kProducers>(
              dv, cs_base + cs_head * cs.v_per_head + key0 * 16ll * kCT, t);
        if constexpr (kThreadCopies) pipe.commit_v(ring);
      }
      base += g.n_blocks;
    }
    sm80::cp_async_wait<0>();
    return;
  }

  sm90::grow_registers<sm90::ws_consumer_registers<kGroups>>();
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warp_row = warp * 16;
  const int group = sm90::warpgroup_index();
  const int group_row = group * 64;

  // The turn passes round the warpgroups in order. Persistent, it runs on across tiles: the last
  // warpgroup's last turn of a tile hands it to warpgroup 0 for the next tile, so that its GEMM I
  // runs while the others finish and store theirs, and a tile without keys passes it round once.
  const sm90::TurnToken<1, kGroups> token{group};
  if (kPersistent && walk.valid(walk.begin())) token.start();  // warpgroup 0 goes first
  int base = 0;  // the K and V rings' block of this tile's key block 0 (the producer's)
  int it = 0;    // this CTA's tiles so far
  for (auto at = walk.begin(); walk.valid(at); at = walk.next(at), ++it) {
    const Tile g = tile_at(at);
    const bool more_tiles = kPersistent && walk.valid(walk.next(at));
    const int head = g.head, batch = g.batch, head_kv = g.head_kv, row0 = g.row0;
    const int row_end = g.row_end, n_blocks = g.n_blocks;
    const detail::HeadOperands in = g.in;
    const long long cs_head = static_cast<long long>(batch) * p.heads_kv + head_kv;
    const u32 sQt = sQ + (it % T::q_buffers) * T::q_bytes;  // this tile's Q, then its staged O

    // O, then (checksum schemes) its checksum tiles: one accumulator array for GEMM II's wgmma.
    float acc[1][kOT + kCT][4];
    float row_max[1][2];
    float row_sum[1][2];
    detail::clear_accumulators(acc, row_max, row_sum);
    auto& o = reinterpret_cast<float(&)[1][kOT][4]>(acc);
    auto global_row = [&](int r) { return row0 + warp_row + lane / 4 + r * 8; };
    // Fault injection (builds that ask for it): the one-warpgroup kernel's points (fwd_sm90.cuh).
    // O and its checksums are hit once block it's GEMM II is done, after the next turn.
    // f16_pasa's S and P are f16 pairs: a value is one packed register of two halves.
    auto inject = [&](int site, int it, auto* values, int n) {
      if constexpr (T::inject) inject_values(p.fault, site, it, values, n);
    };
    auto inject_output = [&](int it) {
      if constexpr (T::inject) {
        inject(fault_site_output, it, &o[0][0][0], kOT * 4);
        if constexpr (kCT > 0)
          detail::inject_output_checksums<kSC * 4, kCT * 4>(p.fault, it, acc[0][kOT]);
      }
    };
    // EFTA: SNVR's lower bound of l per row, |q| of this thread's rows, and the sum of |k| over
    // this thread's keys of each block.
    [[maybe_unused]] float lower_bound[2] = {0.f, 0.f};
    [[maybe_unused]] float q_norm = 0.f;
    [[maybe_unused]] const float* k_norms =
        reinterpret_cast<const float*>(cs_base + cs.knorm_offset + cs_head * cs.knorm_per_head);
    if constexpr (kEfta) q_norm = detail::efta_q_norm<T>(p, in.q, row0, warp_row, lane);
    // f16_pasa: the second evaluation of its softmax, from S'' + 0 (a zero unknown to the
    // compilers).
    [[maybe_unused]] pasa::SecondEvaluation second{
        {neg_inf(), neg_inf()}, {0.f, 0.f}, static_cast<u32>(min(p.seqlen_k, 0)), 0u};

    // Q has landed: before GEMM I reads it, and before the epilogue stages O over it (a CTA whose
    // rows see no key still had its Q copied, and the late copy overwrote the staged zeros).
    sm90::mbarrier_wait(pipe.q_full(it % T::q_buffers), (it / T::q_buffers) & 1);
    sm90::fence_async_shared();  // Q came by cp.async: seen by the tensor cores
    // The end-of-row check's bound on V's row sums, loaded before the last turn so that the last
    // GEMM II hides its latency. With one CTA per SM nothing overlaps a CTA's epilogue; this load,
    // the lazy sum |o| (check_output<T, true>) and store_rows together took Flash-ABFT's causal
    // overhead down by about a point (medians of eleven rounds), more than any of them alone
    // (abft_epilogue_parts_ab.csv).
    [[maybe_unused]] float v_bound = 0.f;  // rows that see no key: O, l and the checksum are 0
    [[maybe_unused]] const float* v_bounds =
        reinterpret_cast<const float*>(cs_base + cs.vmax_offset + cs_head * cs.vmax_per_head);
    if (kPersistent && n_blocks == 0) {
      token.wait();
      token.pass(/*last=*/!more_tiles);
    }
    if (n_blocks > 0) {
      if (!kPersistent) token.start();  // warpgroup 0 goes first

      u32 pa[kST / 2][4];  // the previous block's P, GEMM II's A operand
      // This block's S, then P (EFTA: and the checksum tile after it). PASA: the recovery tile
      // q . r_j in FP32 of the eight blocks from 8 (j / 8), computed on the first of them.
      typename detail::ScoreTile<kPasa, kST + (kPasa ? 0 : kSC)>::type s_all;
      auto& s = reinterpret_cast<typename detail::ScoreTile<kPasa, kST>::type&>(s_all);
      // GEMM I's checksum tile (EFTA): beside the scores, or f16_pasa's FP32 one.
      [[maybe_unused]] float sc_pasa[4];
      auto score_checksums = [&]() -> float(&)[4] {
        if constexpr (kPasa)
          return sc_pasa;
        else
          return s_all[kST];
      };
      [[maybe_unused]] float rc_table[4];
      // One turn on the tensor cores: GEMM II of block j - 1 (PV), GEMM I of block j into s (QK),
      // PASA's recovery tile (REC); returns once all are done and their buffers released. Which
      // MMAs run is fixed at compile time: a wgmma under a branch made ptxas serialise them all
      // (C7520).
      auto turn = [&](int j, auto pv, auto qk, auto rec) {
        using PV = decltype(pv);
        using QK = decltype(qk);
        // Two consumers: GEMM I first and GEMM II left in flight (kOverlap, finish_turn).
        constexpr bool kSplitGroups = kOverlap && PV::value && QK::value;
        [[maybe_unused]] float rc_tile[4], sc_tile[4];
        if (QK::value) pipe.wait_k(base + j);
        if (PV::value) pipe.wait_v(base + j - 1);
        // The producer's thread copies (checksum rows and chunks), seen by the tensor cores. K and
        // V come by TMA, which needs no fence: a fence per turn cost unprotected kernels a
        // MEMBAR.
        if constexpr (kThreadCopies) sm90::fence_async_shared();
        token.wait();
        sm90::wgmma_fence();
        auto issue_pv = [&] {
          const u32 sVs = sV + ((base + j - 1) % kStages) * T::v_tile_bytes;
          // O with its checksum tiles in one wgmma (m64n136 for Flash-ABFT at head dim 128): the
          // tile is nearly all of Flash-ABFT's prepared cost, yet a wgmma of its own and the sum on
          // the CUDA cores were slower (README, Flash-ABFT "Tried on 2026-11-27").
#pragma unroll
          for (int kc = 0; kc < kST / 2; ++kc)
            sm90::wgmma_16bit_rs<kBf16>(
                reinterpret_cast<float(&)[(kOT + kCT) * 4]>(acc[0]), pa[kc],
                sm90::n_major_k_step_descriptor<T::atom_bytes>(sVs, T::block_n, kc));
        };
        auto issue_qk = [&] {
          const u32 sKs = sK + ((base + j) % kStages) * T::k_tile_bytes;
#pragma unroll
          for (int ks = 0; ks < T::head_dim / 16; ++ks) {
            const u64 qd = sm90::k_step_descriptor<kRowBytes>(sQt, T::block_m, group_row, ks);
            const u64 kd = sm90::k_step_descriptor<kRowBytes>(sKs, T::k_rows, 0, ks);
            if constexpr (kPasa) {
              sm90::wgmma_f16acc_ss(reinterpret_cast<u32(&)[kST * 2]>(s), qd, kd, ks > 0);
              if constexpr (kEfta)
                sm90::wgmma_16bit_ss<false>(
                    sc_tile, qd, sm90::k_step_descriptor<kRowBytes>(sKs, T::k_rows, T::block_n, ks),
                    ks > 0);
              if constexpr (decltype(rec)::value)
                sm90::wgmma_16bit_ss<false>(
                    rc_tile, qd,
                    sm90::k_step_descriptor<kRowBytes>(sKs, T::k_rows, T::shift_row, ks), ks > 0);
            } else {
              sm90::wgmma_16bit_ss<kBf16>(reinterpret_cast<float(&)[(kST + kSC) * 4]>(s_all), qd,
                                          kd, ks > 0);
            }
          }
        };
        if constexpr (kSplitGroups) {
          issue_qk();
          sm90::wgmma_commit();
          issue_pv();
          sm90::wgmma_commit();
          token.pass(/*last=*/false);
          sm90::wgmma_wait<1>();  // GEMM I; GEMM II runs on under the softmax
          if (lane == 0 && !kLateKRelease) pipe.release_k(base + j);
          return;
        }
        if constexpr (PV::value) {
          issue_pv();
          if constexpr (kSplitTurn && QK::value) {
            sm90::wgmma_commit();
            sm90::wgmma_wait<0>();  // P's registers free before GEMM I's accumulators take them
            sm90::wgmma_fence();
          }
        }
        if constexpr (QK::value) issue_qk();
        sm90::wgmma_commit();
        token.pass(/*last=*/!QK::value && !more_tiles);  // the last turn has no GEMM I
        sm90::wgmma_wait<0>();
        if (lane == 0) {
          if (QK::value && !kLateKRelease) pipe.release_k(base + j);
          if (PV::value) pipe.release_v(base + j - 1);
        }
        if constexpr (decltype(rec)::value) pasa::keep_recovery_tile(rc_tile, rc_table);
        if constexpr (kPasaEfta && QK::value) pasa::keep_recovery_tile(sc_tile, sc_pasa);
      };
      // kOverlap: block j - 1's GEMM II, left in flight by block j's turn, done before O takes this
      // block's factors and GEMM II's registers take its P.
      auto finish_turn = [&](int j) {
        if constexpr (kOverlap) {
          // The softmax's P computed before the wait and O read after it, as far as the compiler
          // goes (ptxas may still pull the wait up: README). The wait runs for every block: under
          // a branch it serialised the wgmmas.
          sm90::fence_registers(s);
          sm90::wgmma_wait<0>();
          sm90::fence_registers(acc[0]);
          if (j == 0) return;
          if (lane == 0) pipe.release_v(base + j - 1);
          inject_output(j - 1);
        }
      };

      // GEMM II's A operand from the block's P, which the softmax leaves in s (FP32).
      auto pack_p = [&] {
#pragma unroll
        for (int kc = 0; kc < kST / 2; ++kc) {
          pa[kc][0] = P::pack(s[2 * kc][0], s[2 * kc][1]);
          pa[kc][1] = P::pack(s[2 * kc][2], s[2 * kc][3]);
          pa[kc][2] = P::pack(s[2 * kc + 1][0], s[2 * kc + 1][1]);
          pa[kc][3] = P::pack(s[2 * kc + 1][2], s[2 * kc + 1][3]);
        }
      };

      // efta_correct: K's buffer, once every lane's weighted checksum has read it.
      auto release_k_late = [&](int j) {
        if constexpr (kLateKRelease) {
          __syncwarp();
          if (lane == 0) pipe.release_k(base + j);
        }
      };

      auto step = [&](int, const int j, auto masked) {
        // EFTA's sum of |k| over this thread's keys of the block: loaded while the turn runs.
        [[maybe_unused]] float k_norm = 0.f;
        if constexpr (kEfta) k_norm = k_norms[j * 4 + lane % 4];
        constexpr detail::Bool<true> yes{};
        constexpr detail::Bool<false> no{};
        if (j == 0) {
          turn(j, no, yes, detail::Bool<kPasa>{});
        } else {
          if (kPasa && j % T::recovery_blocks == 0)
            turn(j, yes, yes, detail::Bool<kPasa>{});
          else
            turn(j, yes, yes, no);
          if constexpr (!kOverlap) inject_output(j - 1);
        }
        if constexpr (T::inject) {
          inject(fault_site_scores, j, &s[0][0], kPasa ? kST * 2 : kST * 4);
          // The checksum site is the concatenation [S checksums, O checksums]: S's are hit here.
          if constexpr (kSC > 0)
            if (p.fault.element % ((kSC + kCT) * 4) < kSC * 4)
              inject(fault_site_checksum, j, score_checksums(), kSC * 4);
        }
        if constexpr (kPasaEfta) {
          const u32 sKs = sK + ((base + j) % kStages) * T::k_tile_bytes;
          float own[2];
          pasa::own_score_sums(s, own);
          const float walk = q_norm * rsqrtf(float(T::head_dim)) * k_norm;
          pasa::check_scores<T>(p, s, {sc_pasa[0] + sc_pasa[1], sc_pasa[2] + sc_pasa[3]}, own, walk,
                                sQt, sKs, warp_row + lane / 4, lane % 4, j, global_row(0), batch,
                                head);
          release_k_late(j);
          float rc[4];
          pasa::block_recovery<T::recovery_blocks>(rc_table, j, lane, rc);
          second.alarms = 0u;
          pasa::wgmma_softmax<T, decltype(masked)::value, kLazyRescale>(
              p, s, rc, row0 + warp_row, j * T::block_n, lane, diag, row_max[0], row_sum[0], acc[0],
              pa, [&](float(&rescale)[2]) { inject(fault_site_rescale, j, rescale, 2); },
              [&](int i, u32& prob) {
                if constexpr (T::inject)
                  inject_value_at(p.fault, fault_site_probs, j, i, kST * 2, prob);
              },
              second);
          if (second.alarms != 0u)
#pragma unroll
            for (int r = 0; r < 2; ++r)
              if ((second.alarms >> r) & 1u)
                record_fault(p.fault_log, batch, head, global_row(r), -1, fault_stage_probs, false,
                             1.f, 0.f);
        } else if constexpr (kEfta) {
          const u32 sKs = sK + ((base + j) % kStages) * T::k_tile_bytes;
          detail::EftaBlock<kST> efta;
          detail::efta_softmax<T, decltype(masked)::value>(
              p, s, score_checksums(), efta, sQt, sKs, row0, warp_row, j, j, lane, diag, q_norm,
              k_norm, row_max[0], row_sum[0], lower_bound, batch, head, inject);
          release_k_late(j);
          if constexpr (kAlarmsFirst)
            detail::efta_report_alarms(p, efta, global_row(0), batch, head);
          finish_turn(j);
          detail::rescale_output<false>(acc[0], efta.rescale);  // EFTA rescales every block
          // P packed again from s, where efta_softmax left it: its packed copy, made under GEMM II,
          // made ptxas serialise the wgmmas (C7513).
          pack_p();
          if constexpr (!kAlarmsFirst)
            detail::efta_report_alarms(p, efta, global_row(0), batch, head);
        } else if constexpr (kPasa) {
          float rc[4];
          pasa::block_recovery<T::recovery_blocks>(rc_table, j, lane, rc);
          // O and its checksum tile take the block's factors; with the ones column no f16 sums.
          pasa::wgmma_softmax<T, decltype(masked)::value, kLazyRescale, !kOnesRowSum>(
              p, s, rc, row0 + warp_row, j * T::block_n, lane, diag, row_max[0], row_sum[0], acc[0],
              pa, [&](float(&rescale)[2]) { inject(fault_site_rescale, j, rescale, 2); });
          inject(fault_site_probs, j, &pa[0][0], kST * 2);
        } else {
          if (decltype(masked)::value)
            detail::for_each_masked<1, kST, T::causal>(
                row0 + warp_row, j * T::block_n, lane, p.seqlen_k, diag,
                [&](int, int nt, int i) { s[nt][i] = neg_inf(); });
          float rescale[2], block_sum[2];
          detail::softmax_block<kST, kLazyRescale, !kOnesRowSum>(s, p.scale_log2, row_max[0],
                                                                 rescale, block_sum);
          if constexpr (T::inject) {  // rescale before l and O take it
            inject(fault_site_probs, j, &s[0][0], kST * 4);
            inject(fault_site_rescale, j, rescale, 2);
          }
          if constexpr (!kOnesRowSum)
#pragma unroll
            for (int r = 0; r < 2; ++r) row_sum[0][r] = row_sum[0][r] * rescale[r] + block_sum[r];
          // O (GEMM II done in the turn) takes the factors unless no row of the warp moved.
          detail::rescale_output<(kLazyRescale > 0)>(acc[0], rescale);
          pack_p();
        }
        if constexpr (T::inject) {
          inject(fault_site_row_max, j, row_max[0], 2);
          if constexpr (kOnesRowSum)
            detail::inject_ones_row_sum<T>(
                p.fault, j, reinterpret_cast<float(&)[1][kCT][4]>(acc[0][kOT]), lane);
          else
            inject(fault_site_row_sum, j, row_sum[0], 2);
        }
      };
      detail::walk_key_blocks<T>(
          p.seqlen_k, row0, diag, n_blocks, [](int b) { return b; }, step);
      if constexpr (T::Protect::v_atoms > 0) v_bound = v_bounds[lane % 4];
      turn(n_blocks, detail::Bool<true>{}, detail::Bool<false>{},
           detail::Bool<false>{});  // the last block's GEMM II
      inject_output(n_blocks - 1);
    }

    // Every warpgroup's MMAs are done before the epilogue stages O over the Q tile (padded, the
    // rows reach past it: into the first K buffer, or the second Q buffer of persistent kernels).
    // Walking tiles, each warpgroup stages its rows unpadded over its own rows of Q, which only
    // its own GEMM I read: its four warps suffice, and the next tile's Q has its own buffer.
    if (walking)
      sm90::named_barrier_sync(kConsumersDone + 1 + group, 128);
    else
      sm90::named_barrier_sync(kConsumersDone, kConsumers);
    float l[1][2];  // EFTA's checked against the ones column, Flash-ABFT's that column
    if constexpr (kPasaEfta)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        pasa::check_second_evaluation(p, row_sum[0][r], second.row_sum[r], row_max[0][r],
                                      second.row_max[r], global_row(r), batch, head);
    detail::epilogue_row_sums<T, kOnesRowSum, kLazyRescale, kOT>(
        p, acc[0], row_sum[0], lower_bound, row_max[0], l[0], global_row, lane, batch, head);
    if constexpr (T::Protect::v_atoms > 0)  // the end-of-row output check, log and recompute list
      detail::check_output<T, true>(p, o, reinterpret_cast<const float(&)[1][kCT][4]>(acc[0][kOT]),
                                    l, v_bound, n_blocks, batch, head, lane,
                                    [&](int, int r) { return global_row(r); });
    // PASA's running max is already the base-2 logit.
    if (!walking) {
      detail::store_output<T, true>(p, o, l, row_max, kPasa ? 1.f : p.scale_log2, batch, head, row0,
                                    warp_row, lane, sQ, row_end);
    } else if constexpr (kPersistent) {
      detail::store_output<T, true, true>(p, o, l, row_max, kPasa ? 1.f : p.scale_log2, batch, head,
                                          row0, warp_row, lane, sQt, row_end);
      // Every lane's staged rows are read (their stores issued): the producer may refill Q.
      __syncwarp();
      if (lane == 0) sm90::mbarrier_arrive(pipe.q_empty(it % 2));
    }
    base += n_blocks;
  }
}

}  // namespace ftattn
