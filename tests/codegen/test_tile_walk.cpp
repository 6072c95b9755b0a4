// The order in which persistent CTAs walk their tiles (kernel/tile_walk.cuh), run on the host:
// every tile once, and causal pairs that give each CTA about the same number of key blocks.
#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

// The header is device code for NVRTC; on the host its qualifiers mean nothing.
#ifndef __device__
#define __device__
#endif
#ifndef __forceinline__
#define __forceinline__ inline
#endif
#include "ftattn/kernel/tile_walk.cuh"

namespace {

using ftattn::detail::TileCursor;
template <bool Causal>
using Walk = ftattn::detail::TileWalk<true, Causal>;

// CTA `cta` of `ctas`, as fwd_ws_sm90.cuh sets it up when the launch walks.
template <bool Causal>
Walk<Causal> walk_of(int m_blocks, int head_batch, int ctas, int cta) {
  const int units = Walk<Causal>::units_per_head(m_blocks) * head_batch;
  return {m_blocks, cta, units, ctas, Causal ? m_blocks / 2 * head_batch : 0};
}

struct Visit {
  int m_block, head_batch;
};

template <bool Causal>
std::vector<Visit> tiles_of(const Walk<Causal>& walk) {
  std::vector<Visit> out;
  for (TileCursor at = walk.begin(); walk.valid(at); at = walk.next(at)) {
    Visit v{};
    walk.tile(at, v.m_block, v.head_batch);
    out.push_back(v);
  }
  return out;
}

}  // namespace

TEST_CASE("Tile walk: every tile once, and causal pairs even out the CTAs' key blocks",
          "[persistent][codegen]") {
  for (int m_blocks : {1, 2, 3, 4, 6, 7, 8})
    for (int head_batch : {5, 160, 1024})
      for (int ctas : {114, 132}) {
        INFO(m_blocks << " m-blocks x " << head_batch << " heads on " << ctas << " CTAs");
        // Without a mask: tiles in turn, a head's side by side.
        {
          std::vector<int> seen(m_blocks * head_batch, 0);
          for (int cta = 0; cta < ctas; ++cta) {
            const auto tiles = tiles_of(walk_of<false>(m_blocks, head_batch, ctas, cta));
            for (size_t i = 0; i < tiles.size(); ++i) {
              const int tile = tiles[i].head_batch * m_blocks + tiles[i].m_block;
              CHECK(tile == cta + static_cast<int>(i) * ctas);
              ++seen[tile];
            }
          }
          CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
        }
        // Causal: a tile of m-block m sees m + 1 key blocks (square, block_m = block_n).
        std::vector<int> seen(m_blocks * head_batch, 0);
        int least = 1 << 30, most = 0;
        for (int cta = 0; cta < ctas; ++cta) {
          const auto walk = walk_of<true>(m_blocks, head_batch, ctas, cta);
          const auto tiles = tiles_of(walk);
          int blocks = 0;
          bool middles = false;
          for (const Visit& v : tiles) {
            REQUIRE((v.m_block >= 0 && v.m_block < m_blocks));
            REQUIRE((v.head_batch >= 0 && v.head_batch < head_batch));
            ++seen[v.head_batch * m_blocks + v.m_block];
            blocks += v.m_block + 1;
            // The middles (an odd count's) come after every pair.
            const bool middle = m_blocks % 2 == 1 && v.m_block == m_blocks / 2;
            CHECK((!middles || middle));
            middles = middles || middle;
          }
          least = std::min(least, blocks);
          most = std::max(most, blocks);
        }
        CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
        // CTAs take at most one pair and one middle more than others. With the middles in their
        // heads' places, an even count of CTAs took pairs only or middles only: at three
        // m-blocks and 1024 heads on 132 CTAs, half of them twice the others' key blocks.
        CHECK(most - least <= (m_blocks + 1) + (m_blocks / 2 + 1));
      }
}

TEST_CASE("Tile walk: a kernel that does not walk has its one tile", "[persistent][codegen]") {
  const ftattn::detail::TileWalk<false, true> one{8, 0, 1, 1, 0};
  const TileCursor at = one.begin();
  CHECK(one.valid(at));
  CHECK_FALSE(one.valid(one.next(at)));
  CHECK(one.parts(at.unit) == 1);
}
