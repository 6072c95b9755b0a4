// Heuristic defaults for the knobs a config leaves open (no tuning data involved).
#include <algorithm>

#include "ftattn/config.hpp"
#include "ftattn/errors.hpp"

namespace ftattn {

namespace {

// Accumulator floats per thread, as validate() counts them.
int accumulators(const KernelConfig& c) {
  const int tiles_per_warp = c.block_m / (16 * c.num_warps);
  const int s_registers = c.block_n / 8 * (c.precision == Precision::f16_pasa ? 2 : 4);
  return tiles_per_warp * (c.head_dim / 8 * 4 + s_registers);
}

}  // namespace

KernelConfig with_defaults(KernelConfig c, Arch device_arch, const Problem* problem) {
  if (c.arch.is_auto()) {
    if (device_arch.is_auto()) {
      throw ConfigError("no GPU to take the arch from: give --arch / KernelConfig::arch");
    }
    c.arch = device_arch;
  }
  if (c.head_dim == 0) {
    throw ConfigError(
        "head_dim is required: set KernelConfig::head_dim (Runtime::resolve takes it from the "
        "Problem)");
  }
  validate_head_dim(c.head_dim);  // before any size is computed from it

  const bool open_m = c.block_m == 0, open_n = c.block_n == 0;
  const bool open_w = c.num_warps == 0, open_s = c.num_stages == 0;
  const bool sixteen_bit = c.precision == Precision::f16 || c.precision == Precision::bf16;
  // Fitted to `ftattn tune` on an H200 over the standard grid (bench/results/nvidia-h200/
  // tune_f16.csv): 4 warps with two 16-row MMA tiles each (every K/V fragment feeds two MMAs)
  // and one K/V buffer in FlashAttention-2's schedule. Head dims up to 64 take 128-key blocks,
  // 96-128 take 64 (their accumulators leave no room for more), 192-256 need 8 warps for a
  // 128x128 tile. Short causal problems prefer smaller tiles: more CTAs to balance the
  // triangle (up to 1024 keys at wide heads, 512 at narrow ones: at 1024 the H100 ran d64's
  // 128x128 tile 5% faster, the H200 tied).
  const bool wide = c.head_dim > 128, narrow = c.head_dim <= 64;
  const bool short_causal =
      problem != nullptr && is_causal(c.mask) && problem->seqlen_k <= (narrow ? 512 : 1024);
  if (short_causal && (narrow || wide)) {
    if (open_m) c.block_m = 64;
    if (open_n) c.block_n = 64;
    if (open_w) c.num_warps = 4;
    if (open_s) c.num_stages = narrow ? 2 : 1;
  } else {
    if (open_m) c.block_m = 128;
    if (open_n) c.block_n = narrow || wide ? 128 : 64;
    // Head dim 64, causal, up to 1024 keys: 64-key blocks (the H100's tune at both precisions,
    // the H200's at f16: 1-2%).
    if (open_n && narrow && is_causal(c.mask) && problem != nullptr && problem->seqlen_k <= 1024)
      c.block_n = 64;
    if (open_w) c.num_warps = wide ? 8 : 4;
    if (open_s) c.num_stages = 1;
    // The H100's `ftattn tune` (bench/results/nvidia-h100/tune_f16.csv, tune_bf16.csv), since
    // two-stage steps issue the next block's copies after GEMM I and unprotected kernels write
    // O with running pointers, takes two stages for unprotected 16-bit kernels at head dims up to
    // 128 at every shape of the standard grid, both masks (one stage won by 0.5% or less at 2 of
    // 48).
    const bool two_stages = sixteen_bit && c.protection == Protection::none && !wide;
    if (open_s && two_stages) c.num_stages = 2;
  }

  // 8-bit kernels. int8: the fastest spill-free tiles of a sweep on an H100 (d32-d256, seqlen
  // 8192, bench/results/nvidia-h100/q8_tiles.csv), 4 warps: two 16-row MMA tiles per warp at
  // head_dim 128 without a mask (causal spills 4 bytes there on sm_90a), one elsewhere; 32-key
  // blocks at head_dim 192 below sm_90 (64 spill there). fp8 (emulated by f16 MMAs on sm_90, so
  // not worth a sweep): one tile per warp, 8 warps; with two its FP32 score tile and O spill at
  // head_dim 128.
  const bool q8 = c.precision == Precision::int8 || c.precision == Precision::fp8_e4m3;
  const bool int8_efta =
      c.precision == Precision::int8 &&
      (c.protection == Protection::efta_detect || c.protection == Protection::efta_correct);
  // Hopper's wgmma skeleton (kernel/fwd_q8_sm90.cuh), wherever its tile qualifies: one warpgroup
  // per CTA, several CTAs per SM, 128-key blocks, two stages (H100: for fp8 64 x 128 beat 128 x
  // 128 and 128 x 64 with two warpgroups by 10-33%, bench/results/nvidia-h100/
  // fp8_wgmma_tiles.csv; for int8 64 x 64 by 13-22%, int8_wgmma_tiles.csv); at head dim 256
  // 64-key blocks, O's 128 registers leave no room for more. At 256 fp8 takes the
  // warp-specialised 128 x 64 w8s3 (fwd_q8_ws_sm90.cuh; its consumers have 224 registers): on
  // the H100 1.07-1.18x the one-warpgroup 64 x 64 w4s2 at 4k-16k keys, both masks, w8s2 1-3%
  // behind (fp8_ws_d256.csv); with K and V by TMA within 1% of the best tile
  // (q8_tma_tiles_d256.csv). int8 there takes the one-warpgroup 64 x 64 w4s2 (254 registers, no
  // spills, two CTAs per SM): with TMA 4-11% ahead of 128 x 64 w8s3 (q8_tma_tiles_d256.csv,
  // int8_d256_one_group_ab.csv). Head dim 192 (rows of three 64-byte atoms; fp8's GEMM II in
  // three pieces) takes the one-warpgroup 64 x 128 w4s2 of 64 and 128: on the H100 at 1k-16k
  // keys, both masks, the fastest of five wgmma tiles for both (64 x 64 w4s2 within 2% causal at
  // 1k), 1.27-2.31x int8's mma.sync 64 x 64 w4s1 and 1.85-3.92x fp8's faster mma.sync tile
  // (q8_d192_tiles.csv).
  const bool ws_d256 = c.head_dim == 256 && c.precision == Precision::fp8_e4m3;
  KernelConfig wgmma_tile = c;
  wgmma_tile.block_m = ws_d256 ? 128 : 64;
  wgmma_tile.num_warps = ws_d256 ? 8 : 4;
  wgmma_tile.block_n = c.head_dim == 256 ? 64 : 128;
  // int8 EFTA (its K checksum rows in GEMM I, the softmax twice): at head dim 64 a 128-key block
  // spills 12-320 bytes under the three-CTA cap (both schemes, both masks), 64 keys fit.
  if (int8_efta && c.head_dim == 64) wgmma_tile.block_n = 64;
  // At head dim 128 causal problems up to 2k keys take 64-key blocks too (three CTAs per SM, less
  // of each diagonal block masked): on the H200 1.06-1.14x the 128-key tile at 1k and 2k keys,
  // both schemes, 0.97-1.06x at 3k and 4k, 0.95-0.97x at 8k (bench/results/nvidia-h200/
  // int8_efta_tiles_causal_d128.csv, int8_efta_tiles_d128.csv). efta_detect keeps 4 bytes in
  // local memory there.
  if (int8_efta && c.head_dim == 128 && is_causal(c.mask) && problem != nullptr &&
      problem->seqlen_k <= 2048)
    wgmma_tile.block_n = 64;
  wgmma_tile.num_stages = ws_d256 ? 3 : 2;
  if (int8_efta && open_m && open_w && !uses_wgmma(wgmma_tile)) {
    // int8 EFTA holds a second softmax evaluation and the checksum tiles: one MMA tile per warp,
    // 64-key blocks up to head_dim 128 and 32 above (ptxas -v on sm_90a: no spills but 4 bytes at
    // d256 causal for efta_detect; efta_correct keeps a block's INT32 P V, ~1.1 KB at d256).
    c.block_m = 64;
    c.num_warps = 4;
    if (open_n) c.block_n = c.head_dim <= 128 ? 64 : 32;
    if (open_s) c.num_stages = 1;
  } else if (q8 && open_m && open_w && uses_wgmma(wgmma_tile)) {
    c.block_m = wgmma_tile.block_m;
    c.num_warps = wgmma_tile.num_warps;
    if (open_n) c.block_n = wgmma_tile.block_n;
    if (open_s) c.num_stages = wgmma_tile.num_stages;
  } else if (c.precision == Precision::int8 && open_m && open_w) {
    const int d = c.head_dim;
    const bool two_tiles = d == 128 && !is_causal(c.mask);
    c.block_m = two_tiles ? 128 : 64;
    c.num_warps = 4;
    if (open_n) {
      if (two_tiles)
        c.block_n = 64;
      else if (d <= 128)
        c.block_n = 128;
      else
        c.block_n = d == 192 && c.arch.sm < 90 ? 32 : 64;
    }
    if (open_s) c.num_stages = 1;
  } else if (q8 && open_m && open_w) {
    c.block_m = 128;
    c.num_warps = 8;
    if (open_n) c.block_n = c.head_dim <= 64 ? 128 : 64;
    // fp8 at head_dim 192-256 spills on sm_90a with 64-key blocks; 32 fits. EFTA holds a
    // second softmax evaluation and its P until GEMM II is done, and still runs fastest with
    // 64-key blocks at head_dim 128 although they spill there (H100, fp8_efta_tiles.csv: 6-15%
    // faster than 32-key blocks, which do not); at 256, 64 spill 2-3 KB and 32 stay.
    if (open_n && c.head_dim > 128) c.block_n = 32;
    if (open_n &&
        (c.protection == Protection::efta_detect || c.protection == Protection::efta_correct))
      c.block_n = c.head_dim <= 128 ? 64 : 32;
    // Unprotected fp8 at head dim 256 with its per-block P V tile: one stage (the next K fetched
    // after P is packed) spills 60 bytes on sm_89, two none (ptxas -v; sm_90's f16 emulation of
    // the e4m3 MMA spills 12 bytes with one and 392 with two).
    if (open_s && c.precision == Precision::fp8_e4m3 && c.head_dim == 256 && c.arch.sm < 90 &&
        c.protection == Protection::none)
      c.num_stages = 2;
  }

  // f16 and bf16 on Hopper's wgmma skeleton (kernel/fwd_sm90.cuh), wherever its tile qualifies
  // (unprotected, masks none and causal, head dims 64 and 128). Fitted to the H100's `ftattn tune`
  // over the standard grid (bench/results/nvidia-h100/tune_f16.csv, tune_bf16.csv), where the
  // wgmma tiles won every head-dim-64 and -128 shape from the mma.sync ones: one warpgroup per CTA
  // and two stages; 128-key blocks at head dim 64 but for causal problems up to 1024 keys, 64 at
  // 128, with three stages there up to 512 keys (causal: 1024); at 16k keys and more, two
  // warpgroups and three stages (causal with 128-key blocks). Unprotected head dim 128 has since
  // moved to the warp-specialised tile (below).
  // Flash-ABFT on it (its V checksum atom in shared memory, 30-40 more registers) takes two
  // warpgroups and three stages at head dim 128 at every length: on the H100 128 x 64 w8s3 ran
  // 2-5% faster than 64 x 64 w4s2 at 4k and 7-8% at 16k, both masks (abft_sm90_tiles.csv).
  // EFTA on it (the S checksum tile in GEMM I, one or two in GEMM II) takes 128 x 128, two
  // warpgroups, two stages (three do not fit) at head dim 128: the wider key block halves GEMM
  // I's checksum share, and on the H100 it ran 6-17% faster than 128 x 64 w8s3 and 9-32% faster
  // than 64 x 64 w4s2 (4k and 16k keys, both masks, both schemes; efta_wgmma_tiles.csv). At head
  // dim 64 it kept the unprotected tile, 64 x 128 w4s2: 2-5% faster there than 128 x 128 w8s2,
  // 3-12% than 64 x 64 w4s2, 18-29% than 128 x 64 w8s2 (4k keys; efta_wgmma_tiles_d64.csv);
  // since the two consumers' overlap 128 x 128 w8s2 runs 1.13-1.30x it, and three consumers
  // lead both from 2k keys (below).
  // Unprotected at head dim 128: the warp-specialised kernel (kernel/fwd_ws_sm90.cuh), 128 x 128,
  // two stages: on the H100 at 4k-16k keys it ran 1.19-1.26x the fastest tile of the build before
  // it without a mask and 1.08-1.15x causal (ws_tiles.csv), and `ftattn tune` chose it (or w8s3,
  // by 0.6% at most) at every standard-grid shape but causal 512 keys, where 64 x 64 w4s3 stays
  // (tune_*_d128_ws.csv). At head dim 64 it ran 7-12% slower than 64 x 128 w4s2 at 4k-8k keys
  // (level at 16k), whose three CTAs per SM overlap their softmax as well.
  KernelConfig wgmma16 = c;
  const int keys = problem != nullptr ? problem->seqlen_k : 4096;
  const bool efta =
      c.protection == Protection::efta_detect || c.protection == Protection::efta_correct;
  // Flash-ABFT at head dim 128 takes the same tile (warp-specialised: -2% to +11% over the
  // unprotected kernel against +16-31% at 128 x 64 w8s3, abft_ws_tiles.csv). Builds with
  // injection sites take the tile their scheme runs without them, so campaigns hit the kernel
  // that runs.
  // Causal up to 512 keys it walks persistent tiles in pairs (kernel/tile_walk.cuh): on the H200
  // (nvidia-h200/causal_walk_pairs_ab.csv, f16, 32 heads) 128 x 128 w8s2 walked ran 1.10x the
  // one-warpgroup 64 x 64 w4s3 at 512 keys and 1.105x its own one-CTA-per-tile self at 1k. Where
  // the problem has too few heads to walk (two pairs per head at 512 keys, no more of them than a
  // Hopper GPU's 132 SMs), 64 x 64 w4s3 stays.
  const bool few_pairs =
      problem != nullptr && int64_t{problem->batch} * problem->heads_q * 2 <= 132;
  const bool short_causal_d128 = is_causal(c.mask) && keys <= 512 && few_pairs;
  const bool ws_d128 =
      c.head_dim == 128 && ((c.protection == Protection::none && !short_causal_d128) ||
                            c.protection == Protection::flash_abft);
  const bool long_d128 = c.head_dim == 128 && (keys >= 16384 || c.protection != Protection::none);
  wgmma16.block_m = long_d128 || ws_d128 ? 128 : 64;
  wgmma16.num_warps = long_d128 || ws_d128 ? 8 : 4;
  if (open_n) {
    if (c.head_dim <= 64)
      wgmma16.block_n = is_causal(c.mask) && keys <= 1024 ? 64 : 128;
    else
      wgmma16.block_n = (keys >= 16384 && is_causal(c.mask)) || efta || ws_d128 ? 128 : 64;
  }
  if (open_s) {
    const bool short_d128 =
        c.head_dim == 128 && (keys <= 512 || (is_causal(c.mask) && keys <= 1024));
    wgmma16.num_stages = !ws_d128 && (short_d128 || long_d128) && !efta ? 3 : 2;
  }
  // Unprotected from 2k keys at head dim 128: three consumer warpgroups, 192 x 128 w12s2 (each
  // turn finishes GEMM II before GEMM I, so O, S and P fit 160 registers). On the H100, timed in
  // turn with 128 x 128 w8s2 (ws_three_consumers.csv, 2k-16k keys): 1.09-1.18x without a mask and
  // 1.02-1.10x causal for f16 and bf16. At head dim 64 it was level with 64 x 128 w4s2 at 16k
  // keys without a mask and 2-13% slower elsewhere, so 64 keeps that. Flash-ABFT takes it too
  // (its checksum tile costs a 4-byte spill): on the H100, f16 and bf16, 2k-16k keys, timed in
  // turn with its 128 x 128 w8s2, 1.10-1.16x without a mask and 1.04-1.12x causal
  // (abft_three_consumers*.csv). EFTA keeps two consumers (it spills 1.9-3 KB at three).
  // Which configs may run three consumers is warp_specialized()'s rule, asked of the finished
  // candidate.
  // Flash-ABFT at head dim 64 takes them from 1k keys without a mask and 2k causal: there its
  // checksum tile is 1/16 of the MMAs, and on one warpgroup (64 x 128 w4s2, 217 registers) it ran
  // +34-46% over the unprotected kernel. On the H100, f16, in turn with five other wgmma tiles
  // (abft_d64_tiles.csv, K and V prepared and per call): 1.13-1.15x that tile at 1k keys,
  // 1.29-1.30x / 1.41-1.42x at 2k / 8k without a mask, 1.15-1.16x / 1.27x causal; at 1k causal
  // 64 x 64 w4s2 (the short causal tile above) stays ahead.
  // Head dim 32 (rows of one 64-byte swizzle atom) runs the one-warpgroup 64 x 128 w4s2 (64 x 64
  // causal up to 1k keys, as 64), 1.19-1.31x the mma.sync 128 x 128 w4s2 it had on the H100 (f16,
  // 1k-16k keys, both masks, in turn with seven wgmma tiles: d32_tiles.csv); three consumers
  // tie with it only at 16k keys without a mask. Flash-ABFT takes the three consumers from 2k keys
  // without a mask and 8k causal: 1.24x / 1.36x the mma.sync 128 x 128 w4s1 at 2k / 8k keys
  // against 1.21-1.23x for 64 x 128 w4s2, 1.27x causal at 8k against 1.21x, while at 2k causal
  // one warpgroup led, 1.19-1.21x against 1.10-1.11x (d32_abft_tiles.csv).
  const bool abft_narrow = c.protection == Protection::flash_abft &&
                           ((c.head_dim == 64 && keys >= (is_causal(c.mask) ? 2048 : 1024)) ||
                            (c.head_dim == 32 && keys >= (is_causal(c.mask) ? 8192 : 2048)));
  // EFTA at head dim 64 (its O and checksum tiles leave room for three consumers there: no
  // spills but efta_detect's 16 bytes without a mask). On the H100, f16, 2k and 8k keys, both
  // masks, K and V prepared and per call, in turn with 64 x 128 w4s2 and 128 x 128 w8s2
  // (efta_three_consumers_d32_d64.csv): 192 x 128 w12s2 1.14-1.50x 64 x 128 w4s2, and ahead of
  // 128 x 128 w8s2 but for efta_correct causal at 2k keys (w8 1.26-1.30x, w12 1.20-1.26x), which
  // takes w8 below 8k keys. Below 2k keys (not measured) one warpgroup stays. At head dim 32 in
  // the same run three consumers ran 1.03-1.22x 64 x 128 w4s2 without a mask from 2k keys and
  // 1.05-1.09x the best at 8k causal, but 0.91-0.99x at 2k causal (efta_correct causal keeps
  // 128 x 128 w8s2 below 8k). efta_detect's fallback checks (protect/efta_rows.cuh) cost its
  // one-warpgroup kernel causal more than its three consumers (it spills 180 bytes at three CTAs
  // per SM): three rounds in turn with the fallbacks (d32_efta_fallback_tiles_2.csv, 128-key
  // blocks) put the three consumers ahead at 1k and 2k keys causal (1.02-1.17x, K and V prepared
  // or not), while at 1k without a mask one warpgroup leads (1.09-1.18x) and at 2k they trade
  // places. So from 2k keys (efta_correct causal from 8k); causal up to 1k keeps its 64-key
  // blocks on one warpgroup.
  const bool efta_correct = c.protection == Protection::efta_correct;
  const bool causal = is_causal(c.mask);
  const int efta_d32_keys = efta_correct && causal ? 8192 : 2048;
  const bool efta_three =
      efta &&
      ((c.head_dim == 64 && (keys >= 8192 || (keys >= 2048 && !(efta_correct && causal)))) ||
       (c.head_dim == 32 && keys >= efta_d32_keys));
  // Below 2k keys they lead too, from 512 keys without a mask and past 1k causal: on the H200
  // (nvidia-h200/short_tiles_d128_r*.csv, short_abft_tiles_r*.csv, short_pasa_tiles_r*.csv), in
  // turn with 128 x 128 w8s2, the default there before, f16, bf16, Flash-ABFT and f16_pasa ran
  // 1.05-1.25x at 512-1.5k keys without a mask and 1.10-1.13x at 1.5k causal; at 1k causal
  // 0.99-1.03x, and at 512 causal 0.94-0.97x (64 x 64 w4s3 leads there unprotected).
  const bool three_d128 =
      c.head_dim == 128 && (keys >= 2048 || (is_causal(c.mask) ? keys > 1024 : keys >= 512));
  KernelConfig three = wgmma16;
  three.block_m = 192;
  three.num_warps = 12;
  if ((three_d128 || abft_narrow || efta_three) && warp_specialized(three)) wgmma16 = three;
  if (!efta_three && efta_correct && is_causal(c.mask) &&
      (c.head_dim == 32 || (c.head_dim == 64 && keys >= 2048))) {
    wgmma16.block_m = 128;
    wgmma16.num_warps = 8;
    if (open_n) wgmma16.block_n = 128;
  }
  // Head dim 96 (rows of three 64-byte swizzle atoms), unprotected: the same three consumers with
  // 128-key blocks at every length. On the H100 at 1k-16k keys, both masks, f16 and bf16, timed
  // in turn with the wgmma tiles from 64 x 64 w4s2 to 192 x 64 w12s2 and with the mma.sync
  // 128 x 64 w4s2 it had: the fastest everywhere, 1.38-2.06x that one (d96_tiles.csv).
  // With a checksum scheme (d96_protected_tiles.csv, 2k and 8k keys, K and V prepared and per
  // call): Flash-ABFT the three consumers too, 1.08-1.16x its 128 x 128 w8s2; EFTA 128 x 128
  // w8s2, as at head dim 128 (its consumers need more registers than three leave); 1.66-2.25x
  // the mma.sync tiles they had.
  // Short runs (up to 256 keys, causal up to 512) take the one-warpgroup 64 x 64 w4s2 instead: more
  // CTAs for the few key blocks, 1.17-1.62x the three consumers there (d96_short_tiles.csv); from
  // 512 keys without a mask and 1k causal the three consumers lead or tie.
  const bool short_d96 = keys <= 256 || (is_causal(c.mask) && keys <= 512);
  if (c.head_dim == 96) {
    const bool one_group = short_d96 && c.protection == Protection::none;
    wgmma16.block_m = one_group ? 64 : efta ? 128 : 192;
    wgmma16.num_warps = one_group ? 4 : efta ? 8 : 12;
    if (open_n) wgmma16.block_n = one_group ? 64 : 128;
    if (open_s) wgmma16.num_stages = 2;
  }
  // Unprotected at head dim 256: the warp-specialised kernel's one tile there, 128 x 64 w8s2 (O's
  // 128 registers beside 64-key scores in each consumer). On the H100 at 4k-16k keys, both masks,
  // 1.77-2.00x the mma.sync 128 x 128 w8s1 for f16 and bf16 (d256_ws.csv), and 1.4-2.0x the
  // mma.sync tiles at 512-2k keys, short causal runs included (d256_ws_short.csv).
  // Head dim 192 takes the same tile (O's 96 registers; 128-key blocks in two stages would not
  // fit shared memory): on the H100 at 1k-16k keys, both masks, 1.97-2.49x the fastest mma.sync
  // tile for f16 and bf16 and 1.81-2.62x for f16_pasa (d192_ws_tiles.csv); three stages ran
  // within 2% of two either way. The checksum schemes and their injection builds too, their
  // tiles beside O in GEMM II (m64n200, m64n208): 2.03-2.81x the faster of the mma.sync tiles
  // they had (128 x 128 w8s1 for Flash-ABFT, 64 x 64 w4s1 for EFTA) at 2k and 8k keys, both
  // masks, K and V prepared or not (d192_protected_tiles.csv).
  if ((c.head_dim == 256 && c.protection == Protection::none) ||
      (c.head_dim == 192 && c.protection != Protection::decoupled)) {
    wgmma16.block_m = 128;
    wgmma16.num_warps = 8;
    if (open_n) wgmma16.block_n = 64;
    if (open_s) wgmma16.num_stages = 2;
  }
  if (sixteen_bit && open_m && open_w && uses_wgmma(wgmma16)) c = wgmma16;

  // f16_pasa: ptxas -v (sm_80 and sm_90a, masks none and causal) reports no spills with these
  // except at head dim 128, where the one-stage kernel (no lazy rescale, fwd_sm80.cuh) spills
  // 48-100 bytes and still ran 2-6% faster than the spill-free lazy one; the f16 tiles at head
  // dims 32 and 96-192 spill a few bytes. Head dim 128 takes 64-key blocks: on an H100 they ran
  // 9% faster than 32-key ones (bench/results/nvidia-h100/pasa_tiles.csv); head dims 96 and 192
  // keep 32.
  // On Hopper without protection or with Flash-ABFT, head dims 64 and 256 take f16's 128 x 128 tile
  // (H100, same run as f16, bench/results/nvidia-h100/pasa_tiles_vs_f16.csv): at 64 with two stages
  // without a mask (0.99-1.02x f16, against 0.80x at 128 x 64) and one causal (0.90-0.94x against
  // 0.80-0.82x; sm_90a: no spills), at 256 with one (0.94-0.95x against 0.86x). Flash-ABFT's
  // kernels take the same tiles (pasa_abft_tiles.csv: 10-20% faster, +3-9% over the unprotected
  // ones where the old tiles were +14-26%); EFTA's keep theirs. Short causal runs, and sm_80 (not
  // measured; there the causal one spills), keep 128 x 64. Head dim 128 keeps 128 x 64, one stage
  // (two: 5-12% slower, 64 x 128: 22-32%).
  if (c.precision == Precision::f16_pasa && open_m && open_n && open_w && open_s) {
    const int d = c.head_dim;
    c.block_m = 128;
    c.block_n = d == 96 || d == 192 ? 32 : 64;
    c.num_warps = d > 128 ? 8 : 4;
    c.num_stages = d == 32 ? 2 : 1;
    const bool abft_or_none =
        c.protection == Protection::none || c.protection == Protection::flash_abft;
    if ((d == 64 || d == 256) && abft_or_none && !short_causal && c.arch.sm >= 90) {
      c.block_n = 128;
      if (d == 64 && !is_causal(c.mask)) c.num_stages = 2;
    }
    // Unprotected on sm_90a: the wgmma skeleton (kernel/fwd_pasa_sm90.cuh), two stages, 128-key
    // blocks (FP16 scores: half the registers of f16's). H100 sweep over 5 tiles, 4k-16k keys,
    // both masks (bench/results/nvidia-h100/pasa_wgmma_tiles.csv): 64 x 128 w4s2 at 64 (fastest
    // by 5% or more), 128 x 128 w8s2 at 128 (by 13% or more). Since then the warp-specialised
    // kernel takes three consumer warpgroups (192 x 128 w12s2, FP16 scores leave the registers
    // for a third): on the H100 (pasa_three_consumers.csv, three rounds, f16 beside it) 1.08-1.16x
    // f16 at 128 where 128 x 128 w8s2 ran 0.94-1.01x, and 1.01-1.20x at 64 but for causal runs
    // up to 4k keys (0.89x, where 64 x 128 w4s2 keeps 0.95x). Shorter runs keep the earlier
    // tiles (pasa_three_consumers_short.csv, 512-2k keys): at 128 below 2k keys the 192-row
    // tile was level without a mask and 8-11% slower causal; at 64 it is slower up to 2k keys.
    // Since, at 128 the three consumers lead from 512 keys without a mask and past 1k causal on
    // the H200 (three_d128 above).
    // Causal at 64 keeps 64 x 128 w4s2 up to 8k keys: there, K' prepared, it ran 1.003-1.007x
    // f16 against the three consumers' 0.976-0.992x (three runs on the H100,
    // pasa_d64_causal_tiles.csv, pasa_d64_causal_long_*.csv); at 12k the two were level, at 16k
    // the three consumers 1.01x ahead.
    // Head dim 256: f16's warp-specialised 128 x 64 w8s2 (1.83-1.98x the mma.sync 128 x 128
    // w8s1 on the H100 at 4k-16k keys, both masks, d256_ws.csv; 1.3-1.9x at 512-2k keys,
    // d256_ws_short.csv). Head dim 192 too: 1.81-2.62x its mma.sync tiles at 1k-16k keys
    // (d192_ws_tiles.csv).
    KernelConfig wgmma_pasa = c;
    // Head dim 96: 192 x 128 w12s2, 1.56-2.57x the mma.sync 128 x 32 w4s1 at 1k-16k keys, both
    // masks, and ahead of every other wgmma tile (d96_pasa_tiles.csv); up to 256 keys, and 512
    // causal (short_d96), 64 x 128 w4s2: 1.04-1.31x it there (d96_pasa_short_tiles.csv).
    // Head dim 32: 64 x 128 w4s2, 1.31-1.44x the mma.sync 128 x 64 w4s2 at 1k-16k keys, and
    // 64 x 64 causal up to 1k keys (1.31-1.36x against 1.28-1.32x), as f16 there
    // (d32_pasa_tiles.csv).
    const bool short_causal_d32 = c.head_dim == 32 && is_causal(c.mask) && keys <= 1024;
    // Flash-ABFT rides in the warp-specialised kernel only (its checksum tile beside O in GEMM
    // II, l its ones column): three consumers at head dims 32-128. On the H200
    // (nvidia-h200/pasa_abft_tiles_d*.csv, 1k / 4k / 16k keys, both masks, K and V prepared and
    // per call) 1.02-1.38x 128 x 128 w8s2 and 1.5-3.0x the mma.sync tiles it had, but at head dim
    // 128 and 1k keys causal (w8s2 1-2% ahead) and at head dim 32 causal up to 1k keys, where the
    // mma.sync 128 x 64 w4s2 stays (1.04-1.05x).
    const bool abft_three =
        c.protection == Protection::flash_abft && c.head_dim <= 128 && !short_causal_d32;
    // EFTA rides in the warp-specialised kernel on two consumers (kernel/pasa_efta_sm90.cuh) at
    // head dims 64 and 128 with the key blocks of its mma.sync tiles, 64: its GEMM I check
    // allows FP16 noise in proportion to the scores a thread sums, so 128-key blocks let about
    // twice the score flips through silently (H200, 10,000 flips: 993 / 642 of them at head dim
    // 128 without a mask / causal against 553 / 344; nvidia-h200/campaign_pasa_efta_ws*.csv).
    // 128 x 64 w8s2 ran 1.26-1.35x the mma.sync 128 x 64 w4s1 at 128 and 1.02-1.07x at 64;
    // 128 x 128 w8s2 1.53-1.77x and 1.25-1.37x (pasa_efta_tiles.csv). Head dim 96 keeps the
    // mma.sync 128 x 32 (64-key blocks: 2.5x its silent score flips; pasa_efta_tiles_d96.csv),
    // and 32 its own (the warp-specialised tiles ran 0.98-1.09x there).
    const bool efta_ws = efta && (c.head_dim == 64 || c.head_dim == 128);
    const bool three = !efta && (three_d128 || abft_three || (c.head_dim == 96 && !short_d96) ||
                                 (c.head_dim == 64 && keys > (is_causal(c.mask) ? 8192 : 2048)));
    const bool two = efta ? efta_ws : (c.head_dim == 128 && !three) || c.head_dim >= 192;
    wgmma_pasa.block_m = three ? 192 : two ? 128 : 64;
    wgmma_pasa.num_warps = three ? 12 : two ? 8 : 4;
    wgmma_pasa.block_n = c.head_dim >= 192 || short_causal_d32 || efta ? 64 : 128;
    wgmma_pasa.num_stages = 2;
    if (uses_wgmma(wgmma_pasa)) c = wgmma_pasa;
  }

  // EFTA adds accumulators and checks. For efta_detect at head dims 64 and 128, two 16-row MMA
  // tiles per warp (128 x 64, 4 warps, one stage: every K/V fragment feeds two MMAs) ran 8-25%
  // faster on an H100 than one (64 x 128) although they spill at d128
  // (bench/results/nvidia-h100/efta_tiles.csv). efta_correct takes 128 x 64 too since the output
  // threshold's growth counts 128-key steps: its output site then let 83 of 3,000 flips through
  // silently against 91 at 64 x 128 (before, 132: output_threshold_tiles.csv), and it ran faster
  // (efta_correct_tiles.csv). Head dim 96 spills 230-300 bytes at 128 x 64 and keeps 64 x 128,
  // 192-256 keep 64 x 64. Flash-ABFT's one checksum fits the unprotected tiles. f16_pasa keeps its
  // own 128 x 64 tile up to head dim 128 under EFTA too: for efta_correct it ran 2-4% faster than
  // 64 x 128 without a mask (even causal) at d64-d128 on an H100, and its scores let 61 of 1,000
  // flips through silently against 109 (64-key blocks halve the FP16 noise the score check must
  // allow; bench/results/nvidia-h100/pasa_efta_correct_tiles.csv, pasa_efta_campaign.csv).
  const bool pasa_tile = c.precision == Precision::f16_pasa && c.head_dim <= 128;
  if (efta && !short_causal && !q8 && !pasa_tile && !uses_wgmma(c)) {
    const bool two_tiles = c.head_dim == 64 || c.head_dim == 128;
    if (open_m) c.block_m = two_tiles ? 128 : 64;
    if (open_n) c.block_n = !two_tiles && c.head_dim <= 128 ? 128 : 64;
    if (open_w) c.num_warps = 4;
  }

  // Only adjust once every knob is positive; a negative user knob is left for validate() to
  // report.
  const bool adjustable =
      c.head_dim > 0 && c.block_m > 0 && c.block_n > 0 && c.num_warps > 0 && c.num_stages > 0;
  if (adjustable) {
    // A user-set num_warps can clash with the default block_m: every warp needs whole 16-row
    // tiles, and more tiles per warp cost accumulator registers. Only open knobs move.
    if (open_m && !open_w) {
      const int warp_rows = 16 * c.num_warps;
      c.block_m = std::max(warp_rows, c.block_m / warp_rows * warp_rows);
      while (accumulators(c) > 192 && c.block_m / 2 >= warp_rows &&
             (c.block_m / 2) % warp_rows == 0) {
        c.block_m /= 2;
      }
    }
    // 8-bit MMAs (m16n8k32) step P V's keys by 32: block_n stays a multiple of 32.
    const int min_n = q8 ? 32 : 16;
    if (open_n) {
      while (accumulators(c) > 192 && c.block_n > min_n) c.block_n /= 2;
    }

    // Block-sparse masks are read per kernel tile: the mask's blocks must be whole tiles.
    if (problem != nullptr && is_block_sparse(c.mask)) {
      while (open_n && c.block_n > min_n && problem->sparse_block_n % c.block_n != 0)
        c.block_n /= 2;
      while (open_m && c.block_m > 16 && problem->sparse_block_m % c.block_m != 0) {
        c.block_m /= 2;
        if (open_w && c.block_m < 16 * c.num_warps) c.num_warps /= 2;
      }
    }

    // Over the arch's shared memory: give up prefetch first, then halve the K/V tile, then the
    // Q tile. Only open knobs move; what still does not fit is validate()'s to report.
    const int limit = max_shared_memory_bytes(c.arch);
    while (c.shared_memory_bytes() > limit) {
      if (open_s && c.num_stages > 1) {
        --c.num_stages;
      } else if (open_n && c.block_n > 32) {
        c.block_n /= 2;
      } else if (open_m && c.block_m / 2 >= 16 * c.num_warps) {
        c.block_m /= 2;
      } else if (open_n && c.block_n > min_n) {
        c.block_n /= 2;
      } else {
        break;
      }
    }
  }

  validate(c);
  return c;
}

}  // namespace ftattn
