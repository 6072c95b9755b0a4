// Files the CLI writes (--csv, --json, ...). Each is opened before the command's work starts,
// so a path that cannot be written fails at once instead of after a long run. A replaced file
// is written beside its target and renamed over it only when complete, so a run that fails
// leaves the old file as it was.
#pragma once

#include <fstream>
#include <iosfwd>
#include <string>

#include "ftattn/errors.hpp"

namespace ftattn::cli {

class OutputFile {
 public:
  enum class Mode { replace, append };

  OutputFile() = default;
  // `path` empty: writes nothing; "-": standard output (replace only). ConfigError naming `flag`
  // when the file cannot be opened for writing.
  OutputFile(std::string flag, std::string path, Mode mode = Mode::replace);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();  // an uncommitted replacement is removed; the old file stays

  // The flag was given (an appended file opens at its first write).
  bool is_open() const { return to_stdout_ || append_ || file_.is_open(); }
  // An appended file that was new or empty, so it needs its header.
  bool fresh() const { return fresh_; }
  std::ostream& stream();
  // Flushes, and renames a replacement over its target. Error if a write failed.
  void commit();

 private:
  std::string flag_, path_, temp_;
  std::ofstream file_;
  bool to_stdout_ = false, fresh_ = false, committed_ = false, append_ = false;
  ConfigError cannot_write(int err) const;
};

}  // namespace ftattn::cli
