// Which tiles a persistent CTA walks, in what order (kernel/fwd_ws_sm90.cuh). The launch's tiles
// fall into walk units, which the CTAs take in turn: CTA c units c, c + step, ... A unit is one
// tile (m-block) of a head, or with a causal mask the pair of its m-blocks m_blocks - 1 - u and u,
// whose key blocks add up to about m_blocks + 1 whatever u is, so that CTAs taking units in turn
// take equal work. An odd count leaves each head's middle m-block alone, a unit of half the work:
// those come after every pair, where they even out the CTAs' ends (among the pairs, with an even
// number of CTAs, every CTA took either pairs or middles). A head's units lie side by side, as
// the hardware hands out a grid's CTAs, so the CTAs at work at any time share few heads' K and V
// in L2 (a first build that walked causal tiles longest first over every head ran 0.84-0.92x:
// README, "Persistent tiles").
#pragma once

namespace ftattn::detail {

struct TileCursor {
  int unit;  // the walk unit
  int part;  // its first or (a causal pair) second tile
};

// Walks: a persistent kernel (otherwise the walk is its one tile, at compile time).
template <bool Walks, bool Causal>
struct TileWalk {
  int m_blocks;  // query tiles per head
  int first;     // this CTA's first unit
  int last;      // the units' end
  int step;      // CTAs walking
  int paired;    // causal: the units that are pairs, m_blocks / 2 per head; then the middles
                 // (0 where the CTA does not walk: its one tile is a unit)

  // The launch's units are units_per_head x heads x batch (Kernel::launch counts them alike).
  __device__ __forceinline__ static int units_per_head(int m_blocks) {
    return Causal ? (m_blocks + 1) / 2 : m_blocks;
  }
  // A pair's tiles, or one.
  __device__ __forceinline__ int parts(int unit) const { return Causal && unit < paired ? 2 : 1; }
  __device__ __forceinline__ TileCursor begin() const { return {Walks ? first : 0, 0}; }
  __device__ __forceinline__ bool valid(TileCursor c) const { return c.unit < (Walks ? last : 1); }
  __device__ __forceinline__ TileCursor next(TileCursor c) const {
    if constexpr (!Walks) return {1, 0};
    return c.part + 1 < parts(c.unit) ? TileCursor{c.unit, c.part + 1}
                                      : TileCursor{c.unit + step, 0};
  }
  // The cursor's m-block, and its head's index over heads x batch: the longer tile of a pair
  // first, so that a CTA's last tiles are its short ones.
  __device__ __forceinline__ void tile(TileCursor c, int& m_block, int& head_batch) const {
    if constexpr (!Causal) {
      m_block = c.unit % m_blocks;
      head_batch = c.unit / m_blocks;
      return;
    }
    if (c.unit >= paired) {  // a middle
      m_block = m_blocks / 2;
      head_batch = c.unit - paired;
      return;
    }
    const int u = c.unit % (m_blocks / 2);
    head_batch = c.unit / (m_blocks / 2);
    m_block = c.part == 0 ? m_blocks - 1 - u : u;
  }
};

}  // namespace ftattn::detail
