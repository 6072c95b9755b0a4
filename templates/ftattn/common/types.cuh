// Fixed-width types for device code compiled without any CUDA or system header.
#pragma once

namespace ftattn {

using u16 = unsigned short;
using u32 = unsigned int;
using u64 = unsigned long long;
using i64 = long long;

// 16 bytes, aligned for vector loads and stores (CUDA's uint4 without its header).
struct __align__(16) uint4_ {
  u32 x, y, z, w;
};

}  // namespace ftattn
