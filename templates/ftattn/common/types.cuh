// Fixed-width types for device code compiled without any CUDA or system header.
#pragma once

namespace ftattn {

using u16 = unsigned short;
using u32 = unsigned int;
using u64 = unsigned long long;
using i64 = long long;

}  // namespace ftattn
