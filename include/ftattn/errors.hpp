// Typed errors. Every message says what went wrong and what to change.
#pragma once

#include <stdexcept>
#include <string>

namespace ftattn {

// Base of every error the library throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A config or problem that cannot be built or run: unsupported head dim, tiles that do not
// divide, shared memory over the arch's limit, a combination not built yet, a bad name.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// The compiler rejected the generated source; `log()` holds its log verbatim, and `compiler()`
// names it: NVRTC, or clang on the LLVM route.
class CompileError : public Error {
 public:
  CompileError(const std::string& what, std::string log, std::string compiler = "NVRTC")
      : Error(what + "\n--- " + compiler + " log ---\n" + log),
        log_(std::move(log)),
        compiler_(std::move(compiler)) {}
  const std::string& log() const { return log_; }
  const std::string& compiler() const { return compiler_; }

 private:
  std::string log_;
  std::string compiler_;
};

// The disk cache could not be read or written (permissions, full disk, bad directory).
class CacheError : public Error {
 public:
  using Error::Error;
};

// No usable GPU: the driver library is missing, or no device is present. Everything but
// loading and launching still works without one.
class NoDeviceError : public Error {
 public:
  using Error::Error;
};

// A protected kernel detected a fault it could not correct, under OnFault::raise. The message
// is the kernel's name and FaultReport::summary(): counts and the first event's place.
struct FaultReport;
class FaultError : public Error {
 public:
  using Error::Error;
};

// A CUDA Driver API call failed; `code()` is its CUresult.
class DriverError : public Error {
 public:
  DriverError(const std::string& what, int code) : Error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

}  // namespace ftattn
