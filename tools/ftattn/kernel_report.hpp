// Human-readable views of a CompiledKernel, shared by inspect, compile and demo.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "ftattn/kernel.hpp"

namespace ftattn::cli {

// Name, cache key, how it was obtained (compiled now or read from the cache, with seconds) and
// the cubin and PTX sizes.
void print_kernel_header(const CompiledKernel& kernel);

// Registers, spills, stack, static and dynamic shared memory, threads per block.
void print_resources(const ResourceUsage& resources);

// How many times `needle` occurs in `text` (non-overlapping).
std::size_t count_occurrences(std::string_view text, std::string_view needle);

// The first `lines` lines of `text`, each ending in '\n'.
std::string first_lines(std::string_view text, int lines);

// "1.5 KiB", "12.3 MiB": sizes for people.
std::string human_bytes(double bytes);

}  // namespace ftattn::cli
