// A fresh directory under the system temp dir for one test, removed with everything in it when
// the test ends.
#pragma once

#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace ftattn::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "ftattn-test") {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "-" + std::to_string(rd()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace ftattn::test
