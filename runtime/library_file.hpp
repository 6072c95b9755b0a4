// The shared library file a compiler runs from, as cache keys and compiler identities name it:
// an update in place keeps the library's name and version number but changes its file.
#pragma once

#include <cstdint>
#include <string>

namespace ftattn::runtime {

struct LibraryFile {
  std::string path;           // real path, links resolved; empty if it cannot be found
  std::uintmax_t bytes = 0;   // file size
  std::int64_t mtime_ns = 0;  // modification time, nanoseconds since the epoch
};

// The loaded library that holds `address` (a function of it), found with dladdr.
LibraryFile library_file(const void* address);

// "<path> <bytes> <mtime_ns>".
std::string to_string(const LibraryFile& file);

}  // namespace ftattn::runtime
