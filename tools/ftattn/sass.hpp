// SASS for a cubin through the toolkit's disassemblers (cuobjdump, else nvdisasm). They are not
// part of the library's dependencies, so their absence is reported, not an error.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ftattn::cli {

struct Disassembler {
  std::filesystem::path program;
  std::vector<std::string> args;  // placed before the cubin's path
};

// cuobjdump -sass, else nvdisasm, found on PATH, in $CUDA_HOME/bin or in /usr/local/cuda/bin.
std::optional<Disassembler> find_disassembler();

// Writes `cubin` to a temp file and runs the disassembler on it with its output going to ours.
// Returns false (after printing a note to stderr) when no disassembler is installed; a
// disassembler that fails is reported on stderr as a warning. SASS is optional either way.
bool print_sass(const std::string& cubin);

// The same through ftattn::digest_sass: one line per function (name, instruction count, hash of
// the normalised instructions), to compare two builds' machine code.
bool print_sass_digest(const std::string& cubin);

}  // namespace ftattn::cli
