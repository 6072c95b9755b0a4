// The runtime: config in, compiled and cached kernel out, launched on the caller's stream.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "ftattn/config.hpp"
#include "ftattn/errors.hpp"
#include "ftattn/fault.hpp"
#include "ftattn/kernel.hpp"

// The Driver API's stream type, declared as cuda.h does so users need not include it.
typedef struct CUstream_st* CUstream;

namespace ftattn {

struct RuntimeOptions {
  std::filesystem::path cache_dir;  // empty: $FTATTN_CACHE_DIR, else the user's cache dir
  bool disk_cache = true;           // false: compile on every new config (memory cache only)
  bool tuning_db = true;  // fill open tile knobs from the tuning DBs (the user's, then shipped)
};

// A compiled kernel loaded on GPU 0 (its primary context), ready to launch. Launches on several
// streams are safe: a kernel with buffers of its own (f16_pasa, checksum schemes, 8-bit,
// decoupled) orders a launch on another stream after the previous one.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual const CompiledKernel& compiled() const = 0;
  const KernelConfig& config() const { return compiled().config; }

  // Launches on `stream` (nullptr: the default stream). Device pointers; `lse` may be null;
  // `block_mask` (device bytes laid out as Problem describes) is required by block-sparse
  // kernels and ignored by the others. Checks `problem` against the config first and throws
  // ConfigError if they do not match.
  void launch(const Problem& problem, const void* q, const void* k, const void* v, void* o,
              float* lse, CUstream stream, const unsigned char* block_mask = nullptr) const {
    launch(problem, q, k, v, o, lse, stream, block_mask, ProtectOptions{});
  }
  // The same with `protect`'s thresholds, fault plan and prepared K and V. Nothing waits, and the
  // fault log is neither reset nor read: run() resets it, waits and reads it.
  virtual void launch(const Problem& problem, const void* q, const void* k, const void* v, void* o,
                      float* lse, CUstream stream, const unsigned char* block_mask,
                      const ProtectOptions& protect) const = 0;

  // Prepares on `stream` what this kernel's calls on `problem` compute from `k` and `v` alone (a
  // checksum scheme's prologue, f16_pasa's shift pass), for ProtectOptions::prepared_kv: calls of
  // any kernel of the same precision, head_dim, block_n and scheme on the same K and V may use
  // it (the mask may differ). ConfigError for kernels with nothing to prepare: unprotected f16
  // and bf16, the decoupled baseline, int8 and fp8 (their checksum rows come from each call's
  // quantised operands).
  virtual PreparedKv prepare_kv(const Problem& problem, const void* k, const void* v,
                                CUstream stream) const;

  // launch(), then for protected kernels (or a fault plan) waits for `stream`, reads the
  // kernel's fault log and acts on it as `protect.on_fault` says: OnFault::recompute relaunches
  // the (batch, head, query block) tiles with uncorrected detections, OnFault::raise throws
  // FaultError. Unprotected kernels return an empty report without waiting.
  virtual FaultReport run(const Problem& problem, const void* q, const void* k, const void* v,
                          void* o, float* lse, CUstream stream, const unsigned char* block_mask,
                          const ProtectOptions& protect) const;
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Fills what `config` leaves open (tuning DB, else heuristic) for `problem` on this runtime's
  // device; with no GPU the config must name its arch. The result is complete and valid.
  KernelConfig resolve(KernelConfig config, const Problem* problem = nullptr) const;

  // Generates and compiles (or takes from the caches) a kernel. Needs no GPU.
  // Many threads asking for the same new config compile it once.
  std::shared_ptr<const CompiledKernel> compile(const KernelConfig& config);

  // compile() plus loading on GPU 0. Throws NoDeviceError without one.
  std::shared_ptr<const Kernel> kernel(const KernelConfig& config);

  // O = attention(Q, K, V) on `stream`. `config` may be partly open; open fields get defaults.
  // `block_mask` as in Kernel::launch, for Mask::block_sparse*.
  // With a protection scheme the call waits for the stream, reads the kernel's fault log and
  // acts on it as `protect.on_fault` says; unprotected calls return an empty report at once.
  FaultReport attention(const Problem& problem, const void* q, const void* k, const void* v,
                        void* o, CUstream stream, KernelConfig config = {}, float* lse = nullptr,
                        const unsigned char* block_mask = nullptr,
                        const ProtectOptions& protect = {});

  // True when a GPU and its driver are usable; device_arch() is then its arch.
  bool has_device() const;
  Arch device_arch() const;  // throws NoDeviceError without a GPU

  const std::filesystem::path& cache_dir() const;

  struct Stats {
    int compiles = 0;         // NVRTC invocations by this runtime
    int disk_hits = 0;        // kernels read from the disk cache
    int memory_hits = 0;      // kernels served from memory
    int corrupt_entries = 0;  // disk entries found damaged and rebuilt
  };
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ftattn
