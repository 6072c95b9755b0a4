// Content-keyed on-disk cache of compiled kernels, safe to share between threads and processes.
//
// Layout under the root:
//   v1/<key[0:2]>/<key>/   one published entry: kernel.cu, kernel.ptx, kernel.cubin,
//                          compile.log, meta.json and manifest.json (written last)
//   v1/tmp/                entries being written, and damaged or replaced entries being deleted
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
  // Nothing is created until the first store() or lock(), except the fallback root (below).
  explicit DiskCache(std::filesystem::path root);

  // $FTATTN_CACHE_DIR if set and non-empty; else $XDG_CACHE_HOME/ftattn (absolute only, as the
  // XDG spec asks); else $HOME/.cache/ftattn; else ftattn-cache-<uid> in the temp directory. That
  // last one is created 0700 at once, and CacheError is thrown unless it is a real directory of
  // this user that nobody else can write: anyone may create names in the temp directory first.
  static std::filesystem::path default_root();

  const std::filesystem::path& root() const;

  // Where the entry for `key` lives (whether or not it exists). Throws CacheError for a bad key.
  std::filesystem::path entry_dir(const std::string& key) const;

  enum class LoadStatus { hit, miss, corrupt };
  struct LoadResult {
    LoadStatus status = LoadStatus::miss;
    std::optional<CacheEntry> entry;  // set on hit only
    // On corrupt: what was wrong. On miss: empty when there is no entry, else why the entry that
    // is there could not be read.
    std::string reason;
  };

  // What load() does with an entry it finds damaged: remove it (the usual case, under the key's
  // lock) or leave it (a reader that could not get the lock must not write).
  enum class OnDamage { discard, keep };

  // Throws CacheError only for an invalid key. Damage (a file of the entry missing, a size or
  // hash that differs from the manifest, a manifest or meta that does not parse or names another
  // key) gives `corrupt`, and the entry is removed unless `on_damage` says keep. A file that is
  // there but cannot be read (permissions, too many open files, I/O error) says nothing about
  // the entry: that is a `miss` with the reason, and the entry stays. An entry that store()
  // replaces while it is read is read again, never taken for damaged.
  LoadResult load(const std::string& key, OnDamage on_damage = OnDamage::discard) const;

  // What store() does with an entry already published under the key: keep it (another thread
  // or process won the race, with the same content) or replace it (the caller found it stale).
  enum class Existing { keep, replace };

  // Publishes `entry` atomically. With Existing::keep, an equivalent entry already there is kept
  // and ours dropped. With Existing::replace, ours takes its place in one step where the file
  // system can swap directories (readers see the old entry or the new, never neither), else the
  // old one is removed first. Throws CacheError (path and OS error) when the cache cannot be
  // written, when an entry is in the way that cannot be read (keep), or for an invalid key.
  void store(const CacheEntry& entry, Existing existing = Existing::keep);

  // Published entries (manifest present, naming the right key, file sizes matching), sorted by
  // name then key. Hashes are not checked here: that is load()'s job. Never throws for damage;
  // throws CacheError when the cache's directories cannot be read, rather than showing none.
  // `leftovers`, when given, gets the number of other things clear() would remove: entry dirs
  // that are not listed (unfinished, damaged or unreadable) and temp dirs.
  std::vector<CacheEntryInfo> list(std::size_t* leftovers = nullptr) const;

  // Something clear() left where it was, and why.
  struct Left {
    std::filesystem::path path;
    std::string reason;
  };

  // What clear() removed, counted as list() counts: `entries` are those list() shows.
  struct Cleared {
    std::size_t entries = 0;
    std::size_t leftovers = 0;
    // Removals that failed, and things ftattn never makes (links, files, foreign names), which
    // it leaves alone: a link is never followed, so nothing outside the cache is touched.
    std::vector<Left> left;
  };

  // Removes every entry and every temp dir (those of crashed writers, but also of writers still
  // running, whose store() then retries). Lock files stay. Throws CacheError when the cache's
  // directories cannot be read; a removal that fails is in `left`.
  Cleared clear();

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
    // Why lock() could not lock; empty when it did.
    const std::string& failure() const { return failure_; }
    void unlock();  // early release; the destructor does it otherwise

   private:
    friend class DiskCache;
    explicit KeyLock(int fd) : fd_(fd) {}
    int fd_ = -1;
    std::string failure_;
  };

  // Blocks until the lock is held. When another holder keeps it, first says so on stderr
  // (naming `what`, e.g. the kernel, else the key), so a stuck holder is never a silent hang.
  // An existing lock file is opened read-only and a new one is made writable by all, so that
  // read-only and shared caches lock too. When no lock can be had at all (no lock file and no
  // right to create one) it returns a KeyLock that owns nothing, failure() saying why: the
  // caller may still read but must not write. Throws CacheError for an invalid key only.
  KeyLock lock(const std::string& key, std::string_view what = {});

 private:
  std::filesystem::path root_;
};

// True for exactly 32 lowercase hex characters: the only keys the cache accepts.
bool is_valid_cache_key(std::string_view key);

}  // namespace ftattn::runtime
