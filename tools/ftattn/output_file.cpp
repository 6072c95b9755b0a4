#include "tools/ftattn/output_file.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "ftattn/errors.hpp"

namespace ftattn::cli {

namespace fs = std::filesystem;

OutputFile::OutputFile(std::string flag, std::string path, Mode mode)
    : flag_(std::move(flag)), path_(std::move(path)) {
  if (path_.empty()) return;
  if (path_ == "-") {
    if (mode == Mode::append)
      throw ConfigError(
          fmt::format("{}: '-' (standard output) cannot be appended to: give a file", flag_));
    to_stdout_ = true;
    return;
  }
  std::error_code ec;
  if (fs::is_directory(path_, ec))
    throw ConfigError(fmt::format("{}: '{}' is a folder: give a file name", flag_, path_));
  if (mode == Mode::append) {
    const bool existed = fs::exists(path_, ec);
    fresh_ = !existed || fs::file_size(path_, ec) == 0;
    // Tried now, so a path that cannot be written fails at once; opened at the first write, so
    // a command that fails before writing a row leaves no new file (nor a header alone) behind.
    file_.open(path_, std::ios::app);
    const bool writable = file_.is_open();
    const int err = errno;
    file_.close();
    if (writable && !existed) fs::remove(path_, ec);
    append_ = true;
    if (!writable) throw cannot_write(err);
  } else {
    temp_ = fmt::format("{}.tmp.{}", path_, ::getpid());
    file_.open(temp_, std::ios::trunc);
    if (!file_) throw cannot_write(errno);
  }
}

ConfigError OutputFile::cannot_write(int err) const {
  return ConfigError(fmt::format(
      "{}: cannot write '{}' ({}): give a file in a folder that exists and that you can write to",
      flag_, path_, std::strerror(err)));
}

OutputFile::~OutputFile() {
  if (!temp_.empty() && !committed_) {
    file_.close();
    std::remove(temp_.c_str());
  }
}

std::ostream& OutputFile::stream() {
  if (to_stdout_) return std::cout;
  if (append_ && !file_.is_open()) {
    file_.open(path_, std::ios::app);
    if (!file_) throw cannot_write(errno);
  }
  return file_;
}

void OutputFile::commit() {
  if (committed_ || !is_open()) return;
  committed_ = true;
  if (to_stdout_) {
    std::cout.flush();
    return;
  }
  if (append_ && !file_.is_open()) return;  // nothing was written
  file_.flush();
  const bool written = file_.good();
  file_.close();
  if (!written || file_.fail()) {
    if (!temp_.empty()) std::remove(temp_.c_str());
    throw Error(fmt::format(
        "{}: writing '{}' failed (disk full?){}", flag_, path_,
        temp_.empty() ? ": its last lines may be missing" : ": the file is left as it was"));
  }
  if (!temp_.empty() && std::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    std::remove(temp_.c_str());
    throw Error(fmt::format("{}: cannot replace '{}' ({})", flag_, path_, std::strerror(err)));
  }
}

}  // namespace ftattn::cli
