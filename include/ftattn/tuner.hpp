// The autotuner: a search space per kernel family, pruning with reasons, measurement of the
// survivors, and a JSON tuning database keyed by GPU and problem bucket.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ftattn/config.hpp"

namespace ftattn::tuner {

// A kernel family: everything but the tile knobs.
struct Family {
  Arch arch;
  Precision precision = Precision::f16;
  Protection protection = Protection::none;
  int head_dim = 0;
  Mask mask = Mask::none;
  friend bool operator==(const Family&, const Family&) = default;
  // The family's fields in a config whose tile knobs are left open.
  KernelConfig open_config() const {
    KernelConfig c;
    c.arch = arch;
    c.precision = precision;
    c.protection = protection;
    c.head_dim = head_dim;
    c.mask = mask;
    return c;
  }
};

// --- Search space (tuner/search_space.cpp) ---------------------------------------------------

// The knob values the skeleton exposes; every combination is a candidate.
struct Knobs {
  std::vector<int> block_m{64, 128};
  std::vector<int> block_n{32, 64, 128};
  std::vector<int> num_warps{4, 8};
  std::vector<int> num_stages{1, 2, 3};
};

struct Rejected {
  KernelConfig config;
  std::string reason;  // why it was dropped, for the log
};

struct Pruned {
  std::vector<KernelConfig> kept;
  std::vector<Rejected> rejected;
};

// Every complete config of `family` over `knobs`, in a stable order, with the rules of
// validate() (tiling, accumulator budget, shared memory of the arch) applied before compiling.
Pruned enumerate(const Family& family, const Knobs& knobs = {});

// What the compiler reported for one candidate.
struct CompiledFacts {
  int registers = 0;
  int spill_bytes = 0;  // stores + loads
  int threads = 0;
  int shared_bytes = 0;
};

// Limits of the device a candidate must fit (per SM).
struct SmLimits {
  int registers = 65536;
  int shared_bytes = 228 * 1024;
  int max_threads = 2048;
};

// CTAs of one candidate that fit on one SM at once (0: it cannot run).
int ctas_per_sm(const CompiledFacts& facts, const SmLimits& limits);

// After compiling: drops candidates that spill more than `max_spill_bytes` or cannot keep
// `min_ctas` CTAs resident per SM, with the reason.
Pruned prune_compiled(const std::vector<std::pair<KernelConfig, CompiledFacts>>& compiled,
                      const SmLimits& limits, int max_spill_bytes = 512, int min_ctas = 1);

// --- Problem buckets and the tuning DB (tuner/db.cpp) -----------------------------------------

// Problems that share a tuned choice: seqlen_k rounded up to a power of two (at least 512),
// batch * heads_q rounded up to a power of two, causal or not.
struct Bucket {
  int seqlen = 0;
  int batch_heads = 0;
  bool causal = false;
  static Bucket of(const Problem& problem, Mask mask);
  std::string to_string() const;  // "s4096_bh128_causal"
  friend bool operator==(const Bucket&, const Bucket&) = default;
};

// The device a DB entry was tuned on.
struct DeviceKey {
  std::string gpu_name;    // "NVIDIA H200"
  int sm = 0;              // compute capability, 90
  int driver_version = 0;  // CUDA driver API version, 13000
  std::string ftattn_version = FTATTN_VERSION;
  friend bool operator==(const DeviceKey&, const DeviceKey&) = default;
};

struct Entry {
  DeviceKey device;
  Family family;
  Bucket bucket;
  KernelConfig best;          // complete
  double best_tflops = 0;     // measured
  double default_tflops = 0;  // the heuristic default, measured in the same run
  // The heuristic's choice for the bucket when it was tuned (bucket_default), JSON "default";
  // none in entries written before it was recorded. Once the heuristic picks otherwise, the entry
  // was tuned against another default and find() ignores it.
  std::optional<KernelConfig> default_config;
  // Fields this ftattn does not know (a newer one's), as a JSON object's text, "" for none:
  // written back as read, so an older ftattn updating a shared DB does not drop them.
  std::string other_fields;
};

// What the heuristic (with_defaults) picks for `family` on the bucket's largest problem: seqlen
// and batch * heads at the bucket's powers of two. An entry records it, so a lookup can tell that
// the heuristic has changed since (a shape inside the bucket may get another default, so the
// bucket's own problem is the one both sides can compute).
KernelConfig bucket_default(const Family& family, const Bucket& bucket);

// What the heuristic picks for `family` on `problem`: the default that tuning must beat.
KernelConfig heuristic_default(const Family& family, const Problem& problem);

// JSON file of entries. Lookups ignore entries of another GPU, arch or ftattn version, of a newer
// driver than the device's, or tuned against another heuristic default, and say so once through
// `note`; a device driver newer than the one tuned on is fine.
class Database {
 public:
  Database() = default;
  static Database load(
      const std::filesystem::path& path);  // missing file: empty; bad JSON: CacheError
  static Database parse(std::string_view json, const std::string& origin);
  // Temp file then rename, through a symlink to its target, keeping the file's permissions.
  void save(const std::filesystem::path& path) const;
  // Merges `changes` into the file at `path` (creating it) under a lock, so runs that update
  // the same file at once keep each other's entries. CacheError when it cannot be read or written.
  static void update(const std::filesystem::path& path, const Database& changes);
  std::string dump() const;

  // Replaces the entry with the same device, family and bucket, or adds it.
  void put(const Entry& entry);
  // The best config for this device, family and bucket, if tuned.
  std::optional<KernelConfig> find(const DeviceKey& device, const Family& family,
                                   const Bucket& bucket,
                                   const std::function<void(const std::string&)>& note = {}) const;
  const std::vector<Entry>& entries() const { return entries_; }
  // Entries this ftattn cannot read (another version's precision, say), as written: not used,
  // but written back by dump() so that saving loses nothing.
  const std::vector<std::string>& unread() const { return unread_; }
  void merge(const Database& other);  // `other` wins on equal keys

 private:
  std::vector<Entry> entries_;
  std::vector<std::string> unread_;  // compact JSON, in the order first seen
  void keep_unread(std::string entry);
};

// The databases shipped with ftattn (tuner/db/*.json, embedded at build time), merged.
const Database& shipped();

// The user's database beside the kernel cache: <cache dir>/tuning.json.
std::filesystem::path user_database_path(const std::filesystem::path& cache_dir);

}  // namespace ftattn::tuner
