#include "runtime/library_file.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <filesystem>
#include <system_error>

namespace ftattn::runtime {

LibraryFile library_file(const void* address) {
  LibraryFile lib;
  Dl_info info{};
  if (::dladdr(address, &info) == 0 || info.dli_fname == nullptr) return lib;
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(info.dli_fname, ec);
  lib.path = ec ? std::string(info.dli_fname) : real.string();
  struct stat st {};
  if (::stat(lib.path.c_str(), &st) == 0) {
    lib.bytes = static_cast<std::uintmax_t>(st.st_size);
    lib.mtime_ns =
        static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  }
  return lib;
}

std::string to_string(const LibraryFile& file) {
  return fmt::format("{} {} {}", file.path, file.bytes, file.mtime_ns);
}

}  // namespace ftattn::runtime
