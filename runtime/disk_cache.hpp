// Content-keyed on-disk cache of compiled kernels, safe to share between threads and processes.
//
// Layout under the root:
//   v1/<key[0:2]>/<key>/   one published entry: kernel.cu, kernel.ptx, kernel.cubin,
//                          compile.log, meta.json and manifest.json (written last)
//   v1/tmp/                entries being written, and damaged entries being deleted
//   locks/<key>.lock       flock files for KeyLock; never unlinked (see KeyLock)
//
// An entry is written in a private temp dir and renamed into place, so readers never see a
// half-written entry under its final name. The manifest records the size and hash of every
// file; load() trusts nothing it does not match, so torn writes, crashes and bit rot all read as
// `corrupt` rather than as a bad kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ftattn::runtime {

struct CacheEntry {
  std::string key;     // 32 lowercase hex chars: hash_hex of everything that affects the binary
  std::string name;    // canonical kernel name, for humans (ls)
  std::string source;  // generated CUDA source
  std::string ptx;
  std::string cubin;    // binary bytes
  std::string log;      // compiler log
  nlohmann::json meta;  // free-form caller metadata (config, compiler version, resources...)
};

struct CacheEntryInfo {
  std::string key;
  std::string name;
  std::uintmax_t bytes = 0;                 // all files of the entry together
  std::filesystem::file_time_type written;  // when the entry was published
  nlohmann::json meta;                      // the caller's meta, as stored
};

class DiskCache {
 public:
  // Nothing is created until the first store() or lock().
  explicit DiskCache(std::filesystem::path root);

  // $FTATTN_CACHE_DIR if set and non-empty; else $XDG_CACHE_HOME/ftattn (absolute only, as the
  // XDG spec asks); else $HOME/.cache/ftattn; else ftattn-cache-<uid> in the temp directory.
  static std::filesystem::path default_root();

  const std::filesystem::path& root() const;

  // Where the entry for `key` lives (whether or not it exists). Throws CacheError for a bad key.
  std::filesystem::path entry_dir(const std::string& key) const;

  enum class LoadStatus { hit, miss, corrupt };
  struct LoadResult {
    LoadStatus status = LoadStatus::miss;
    std::optional<CacheEntry> entry;  // set on hit only
    std::string reason;               // on corrupt: what was wrong; on miss: why, if not absent
  };

  // Throws CacheError only for an invalid key. A damaged entry (missing, truncated or altered
  // file, bad or foreign manifest) gives `corrupt` and is removed, so the next load misses.
  LoadResult load(const std::string& key) const;

  // Publishes `entry` atomically. If an equivalent entry is already there (another thread or
  // process won the race) ours is dropped. Throws CacheError (path and OS error) when the cache
  // cannot be written, or for an invalid key.
  void store(const CacheEntry& entry);

  // Published entries (manifest present, naming the right key, file sizes matching), sorted by
  // name then key. Hashes are not checked here: that is load()'s job. Never throws for damage.
  std::vector<CacheEntryInfo> list() const;

  // Removes every entry and every temp dir (those of crashed writers, but also of writers still
  // running, whose store() then retries). Returns the number of entries removed. Lock files stay.
  std::size_t clear();

  // Exclusive cross-process lock for one key: flock() on <root>/locks/<key>.lock. Each KeyLock
  // opens the file itself, so two threads of one process exclude each other too. Lock files are
  // never unlinked: unlinking would let a waiter lock a file that a newcomer no longer sees.
  class KeyLock {
   public:
    KeyLock() = default;  // holds nothing
    ~KeyLock();
    KeyLock(KeyLock&& other) noexcept;
    KeyLock& operator=(KeyLock&& other) noexcept;
    KeyLock(const KeyLock&) = delete;
    KeyLock& operator=(const KeyLock&) = delete;

    bool owns_lock() const { return fd_ >= 0; }
    void unlock();  // early release; the destructor does it otherwise

   private:
    friend class DiskCache;
    explicit KeyLock(int fd) : fd_(fd) {}
    int fd_ = -1;
  };

  // Blocks until the lock is held. Throws CacheError for an invalid key or an unusable dir.
  KeyLock lock(const std::string& key);

 private:
  std::filesystem::path root_;
};

// True for exactly 32 lowercase hex characters: the only keys the cache accepts.
bool is_valid_cache_key(std::string_view key);

}  // namespace ftattn::runtime
