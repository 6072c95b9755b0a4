#include "runtime/disk_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <random>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

#include "ftattn/errors.hpp"
#include "runtime/hash.hpp"

namespace ftattn::runtime {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kFormat = 1;
constexpr const char* kVersionDir = "v1";
constexpr const char* kTmpDir = "tmp";
constexpr const char* kLocksDir = "locks";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kMetaFile = "meta.json";
// Every file the manifest must cover.
constexpr std::array<const char*, 5> kPayloadFiles = {"kernel.cu", "kernel.ptx", "kernel.cubin",
                                                      "compile.log", kMetaFile};
constexpr const char* kFixHint =
    " (point FTATTN_CACHE_DIR or RuntimeOptions::cache_dir at a writable directory, or turn the "
    "disk cache off)";

bool is_lower_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// std::error_code's message is thread-safe, unlike strerror().
std::string os_error(int err) { return std::error_code(err, std::generic_category()).message(); }

[[noreturn]] void throw_io(std::string_view what, const fs::path& path, const std::string& error) {
  throw CacheError("ftattn disk cache: cannot " + std::string(what) + " '" + path.string() +
                   "': " + error + kFixHint);
}

void require_valid_key(const std::string& key) {
  if (!is_valid_cache_key(key)) {
    // Checked before any path is built from the key, so "../x" can never leave the root.
    throw CacheError("ftattn disk cache: invalid key '" + key +
                     "': a key is exactly 32 lowercase hex characters (runtime::hash_hex)");
  }
}

// A failed system call while publishing; store() decides whether to retry or throw.
struct IoFailure {
  std::string what;
  fs::path path;
  int err;
};

// Names temp and quarantine dirs: pid keeps processes apart, the random part threads.
std::string unique_suffix() {
  thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) ^ rd() ^
           std::hash<std::thread::id>{}(std::this_thread::get_id());
  }());
  static constexpr char kDigits[] = "0123456789abcdef";
  std::uint64_t r = rng();
  std::string out(16, '0');
  for (auto& c : out) {
    c = kDigits[r & 0xf];
    r >>= 4;
  }
  return std::to_string(::getpid()) + "." + out;
}

// Returns 0 or errno.
int write_file(const fs::path& path, std::string_view data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return err;
    }
    off += static_cast<std::size_t>(n);
  }
  // No fsync: a file torn by a power cut fails the manifest check and reads as corrupt.
  if (::close(fd) != 0 && errno != EINTR) return errno;
  return 0;
}

// Returns 0 or errno.
int read_file(const fs::path& path, std::string& out) {
  out.clear();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<std::size_t>(st.st_size));
  std::array<char, 1 << 16> buf;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return err;
    }
    out.append(buf.data(), static_cast<std::size_t>(n));
  }
  ::close(fd);
  return 0;
}

// Removes a file tree when it goes out of scope, unless released.
class DirGuard {
 public:
  explicit DirGuard(fs::path path) : path_(std::move(path)) {}
  ~DirGuard() {
    if (!path_.empty()) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  DirGuard(const DirGuard&) = delete;
  DirGuard& operator=(const DirGuard&) = delete;
  void release() { path_.clear(); }

 private:
  fs::path path_;
};

// Removes an entry dir. It is first renamed into tmp/ so that nobody ever sees a half-deleted
// entry under its real name; a crash mid-delete leaves only a stray that clear() removes.
// Returns true when something was removed.
bool discard_entry(const fs::path& root, const fs::path& dir, const std::string& key) {
  std::error_code ec;
  const fs::path tmp_root = root / kVersionDir / kTmpDir;
  fs::create_directories(tmp_root, ec);
  const fs::path doomed = tmp_root / (key + ".dead." + unique_suffix());
  if (::rename(dir.c_str(), doomed.c_str()) == 0) {
    fs::remove_all(doomed, ec);
    return true;
  }
  if (errno == ENOENT) return false;  // someone else removed it first
  return fs::remove_all(dir, ec) > 0;
}

// The entry's manifest, or an explanation of why it cannot be trusted.
std::optional<json> read_manifest(const fs::path& dir, const std::string& key,
                                  std::string& reason) {
  std::string text;
  if (const int err = read_file(dir / kManifest, text); err != 0) {
    reason = std::string(kManifest) + ": " + (err == ENOENT ? "missing" : os_error(err));
    return std::nullopt;
  }
  json manifest = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object()) {
    reason = std::string(kManifest) + ": not a valid JSON object";
    return std::nullopt;
  }
  const auto format = manifest.find("format");
  if (format == manifest.end() || !format->is_number_integer() || *format != kFormat) {
    reason = std::string(kManifest) + ": missing or unsupported format (expected " +
             std::to_string(kFormat) + ")";
    return std::nullopt;
  }
  const auto stored_key = manifest.find("key");
  if (stored_key == manifest.end() || !stored_key->is_string() || *stored_key != key) {
    reason = std::string(kManifest) + ": names another key";
    return std::nullopt;
  }
  const auto files = manifest.find("files");
  if (files == manifest.end() || !files->is_object()) {
    reason = std::string(kManifest) + ": no file list";
    return std::nullopt;
  }
  for (const char* name : kPayloadFiles) {
    const auto f = files->find(name);
    if (f == files->end() || !f->is_object() || !f->contains("bytes") ||
        !(*f)["bytes"].is_number_unsigned() || !f->contains("xxh3_128") ||
        !(*f)["xxh3_128"].is_string()) {
      reason = std::string(kManifest) + ": no valid record for " + name;
      return std::nullopt;
    }
  }
  return manifest;
}

// The stored meta.json: {"format", "key", "name", "meta"}.
std::optional<json> parse_meta(const std::string& text, const std::string& key,
                               std::string& reason) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("key") || doc["key"] != key ||
      !doc.contains("name") || !doc["name"].is_string() || !doc.contains("meta")) {
    reason = std::string(kMetaFile) + ": not the expected object for this key";
    return std::nullopt;
  }
  return doc;
}

// Reads and verifies a whole entry; false (with reason) for anything the manifest contradicts.
bool read_entry(const fs::path& dir, const std::string& key, CacheEntry& entry,
                std::string& reason) {
  const std::optional<json> manifest = read_manifest(dir, key, reason);
  if (!manifest) return false;
  std::array<std::string, kPayloadFiles.size()> contents;
  for (std::size_t i = 0; i < kPayloadFiles.size(); ++i) {
    const char* name = kPayloadFiles[i];
    if (const int err = read_file(dir / name, contents[i]); err != 0) {
      reason = std::string(name) + ": " + (err == ENOENT ? "missing" : os_error(err));
      return false;
    }
    const json& record = (*manifest)["files"][name];
    const auto expected_bytes = record["bytes"].get<std::uint64_t>();
    if (contents[i].size() != expected_bytes) {
      reason = std::string(name) + ": " + std::to_string(contents[i].size()) +
               " bytes, manifest says " + std::to_string(expected_bytes);
      return false;
    }
    if (hash_hex(contents[i]) != record["xxh3_128"].get<std::string>()) {
      reason = std::string(name) + ": content does not match the manifest's hash";
      return false;
    }
  }
  const std::optional<json> meta = parse_meta(contents[4], key, reason);
  if (!meta) return false;
  entry.key = key;
  entry.name = (*meta)["name"].get<std::string>();
  entry.source = std::move(contents[0]);
  entry.ptx = std::move(contents[1]);
  entry.cubin = std::move(contents[2]);
  entry.log = std::move(contents[3]);
  entry.meta = (*meta)["meta"];
  return true;
}

// Cheap check for list(): manifest and sizes only, no hashing.
std::optional<CacheEntryInfo> describe_entry(const fs::path& dir, const std::string& key) {
  std::string reason;
  const std::optional<json> manifest = read_manifest(dir, key, reason);
  if (!manifest) return std::nullopt;
  CacheEntryInfo info;
  info.key = key;
  std::error_code ec;
  for (const char* name : kPayloadFiles) {
    const std::uintmax_t size = fs::file_size(dir / name, ec);
    if (ec || size != (*manifest)["files"][name]["bytes"].get<std::uint64_t>()) {
      return std::nullopt;
    }
    info.bytes += size;
  }
  info.bytes += fs::file_size(dir / kManifest, ec);
  if (ec) return std::nullopt;
  info.written = fs::last_write_time(dir / kManifest, ec);
  if (ec) return std::nullopt;
  std::string text;
  if (read_file(dir / kMetaFile, text) != 0) return std::nullopt;
  const std::optional<json> meta = parse_meta(text, key, reason);
  if (!meta) return std::nullopt;
  info.name = (*meta)["name"].get<std::string>();
  info.meta = (*meta)["meta"];
  return info;
}

// Every <root>/v1/<shard>/<key> directory path with a well-formed name.
std::vector<std::pair<std::string, fs::path>> entry_dirs(const fs::path& root) {
  std::vector<std::pair<std::string, fs::path>> out;
  std::error_code ec;
  for (fs::directory_iterator shard(root / kVersionDir, ec), end; !ec && shard != end;
       shard.increment(ec)) {
    const std::string shard_name = shard->path().filename().string();
    if (shard_name.size() != 2 || !is_lower_hex(shard_name)) continue;  // skips tmp/
    std::error_code ec2;
    for (fs::directory_iterator it(shard->path(), ec2); !ec2 && it != end; it.increment(ec2)) {
      const std::string key = it->path().filename().string();
      if (is_valid_cache_key(key) && key.compare(0, 2, shard_name) == 0) {
        out.emplace_back(key, it->path());
      }
    }
  }
  return out;
}

}  // namespace

bool is_valid_cache_key(std::string_view key) { return key.size() == 32 && is_lower_hex(key); }

DiskCache::DiskCache(std::filesystem::path root) : root_(std::move(root)) {}

std::filesystem::path DiskCache::default_root() {
  const auto env = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value != nullptr ? value : "";
  };
  if (std::string dir = env("FTATTN_CACHE_DIR"); !dir.empty()) return dir;
  if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty() && fs::path(xdg).is_absolute()) {
    return fs::path(xdg) / "ftattn";
  }
  if (std::string home = env("HOME"); !home.empty()) return fs::path(home) / ".cache" / "ftattn";
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  if (ec || tmp.empty()) tmp = "/tmp";
  // Per user: a shared temp dir must not mix users' binaries.
  return tmp / ("ftattn-cache-" + std::to_string(::getuid()));
}

const std::filesystem::path& DiskCache::root() const { return root_; }

std::filesystem::path DiskCache::entry_dir(const std::string& key) const {
  require_valid_key(key);
  return root_ / kVersionDir / key.substr(0, 2) / key;
}

DiskCache::LoadResult DiskCache::load(const std::string& key) const {
  const fs::path dir = entry_dir(key);
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (st.type() == fs::file_type::not_found) return {LoadStatus::miss, std::nullopt, ""};
  if (ec)
    return {LoadStatus::miss, std::nullopt,
            "cannot inspect '" + dir.string() + "': " + ec.message()};

  std::string reason;
  CacheEntry entry;
  bool ok = false;
  if (st.type() != fs::file_type::directory) {
    reason = "entry is not a directory";
  } else {
    try {
      ok = read_entry(dir, key, entry, reason);
    } catch (const std::exception& e) {  // e.g. a JSON type surprise: still only a bad entry
      reason = std::string("unreadable entry: ") + e.what();
    }
  }
  if (ok) return {LoadStatus::hit, std::move(entry), ""};
  // Vanished while we read it (clear() or another reader discarding it): plain miss.
  if (!fs::exists(dir, ec) && !ec) return {LoadStatus::miss, std::nullopt, "removed while read"};
  discard_entry(root_, dir, key);
  return {LoadStatus::corrupt, std::nullopt, reason};
}

void DiskCache::store(const CacheEntry& entry) {
  const fs::path final_dir = entry_dir(entry.key);
  const fs::path tmp_root = root_ / kVersionDir / kTmpDir;

  std::string meta_text;
  try {
    meta_text =
        json{{"format", kFormat}, {"key", entry.key}, {"name", entry.name}, {"meta", entry.meta}}
            .dump(2) +
        "\n";
  } catch (const json::exception& e) {  // e.g. a string that is not UTF-8
    throw CacheError("ftattn disk cache: cannot store '" + entry.name +
                     "': name or meta is not serialisable as JSON: " + e.what());
  }
  const std::array<std::string_view, kPayloadFiles.size()> contents = {
      entry.source, entry.ptx, entry.cubin, entry.log, meta_text};
  json files = json::object();
  for (std::size_t i = 0; i < kPayloadFiles.size(); ++i) {
    files[kPayloadFiles[i]] = {{"bytes", contents[i].size()}, {"xxh3_128", hash_hex(contents[i])}};
  }
  const std::string manifest_text =
      json{{"format", kFormat}, {"key", entry.key}, {"name", entry.name}, {"files", files}}.dump(
          2) +
      "\n";

  // Retried only when clear() pulls our temp dir away mid-write (ENOENT).
  for (int attempt = 0;; ++attempt) {
    try {
      std::error_code ec;
      fs::create_directories(tmp_root, ec);
      if (ec) throw IoFailure{"create directory", tmp_root, ec.value()};
      fs::create_directories(final_dir.parent_path(), ec);
      if (ec) throw IoFailure{"create directory", final_dir.parent_path(), ec.value()};

      fs::path tmp;
      for (;;) {
        tmp = tmp_root / (entry.key + "." + unique_suffix());
        if (::mkdir(tmp.c_str(), 0755) == 0) break;
        if (errno != EEXIST) throw IoFailure{"create directory", tmp, errno};
      }
      DirGuard guard(tmp);
      for (std::size_t i = 0; i < kPayloadFiles.size(); ++i) {
        if (const int err = write_file(tmp / kPayloadFiles[i], contents[i]); err != 0) {
          throw IoFailure{"write", tmp / kPayloadFiles[i], err};
        }
      }
      // Last: its presence is what makes the entry complete.
      if (const int err = write_file(tmp / kManifest, manifest_text); err != 0) {
        throw IoFailure{"write", tmp / kManifest, err};
      }

      for (int publish = 0; publish < 3; ++publish) {
        if (::rename(tmp.c_str(), final_dir.c_str()) == 0) {
          guard.release();
          return;
        }
        const int err = errno;
        if (err != EEXIST && err != ENOTEMPTY) throw IoFailure{"publish into", final_dir, err};
        // Someone published first. Same key => same content, so keep theirs if it is sound;
        // load() discards it if damaged and we try again.
        if (load(entry.key).status == LoadStatus::hit) return;
      }
      throw_io("publish into", final_dir, "an existing entry kept reappearing damaged");
    } catch (const IoFailure& f) {
      if (f.err == ENOENT && attempt < 2) continue;
      throw_io(f.what, f.path, os_error(f.err));
    }
  }
}

std::vector<CacheEntryInfo> DiskCache::list() const {
  std::vector<CacheEntryInfo> out;
  for (const auto& [key, dir] : entry_dirs(root_)) {
    try {
      if (std::optional<CacheEntryInfo> info = describe_entry(dir, key)) {
        out.push_back(std::move(*info));
      }
    } catch (const std::exception&) {
      // A damaged entry is simply not listed; load() reports and removes it.
    }
  }
  std::sort(out.begin(), out.end(), [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
    return std::tie(a.name, a.key) < std::tie(b.name, b.key);
  });
  return out;
}

std::size_t DiskCache::clear() {
  std::size_t removed = 0;
  for (const auto& [key, dir] : entry_dirs(root_)) {
    if (discard_entry(root_, dir, key)) ++removed;
  }
  // Temp dirs: crashed writers' leftovers and interrupted deletes. Collected first so the
  // directory is not modified while iterated.
  std::vector<fs::path> strays;
  std::error_code ec;
  for (fs::directory_iterator it(root_ / kVersionDir / kTmpDir, ec), end; !ec && it != end;
       it.increment(ec)) {
    strays.push_back(it->path());
  }
  for (const fs::path& stray : strays) fs::remove_all(stray, ec);
  return removed;
}

DiskCache::KeyLock DiskCache::lock(const std::string& key) {
  require_valid_key(key);
  const fs::path dir = root_ / kLocksDir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_io("create directory", dir, ec.message());
  const fs::path file = dir / (key + ".lock");
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) throw_io("open lock file", file, os_error(errno));
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd);
    throw_io("lock", file, os_error(err));
  }
  return KeyLock(fd);
}

DiskCache::KeyLock::~KeyLock() { unlock(); }

DiskCache::KeyLock::KeyLock(KeyLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

DiskCache::KeyLock& DiskCache::KeyLock::operator=(KeyLock&& other) noexcept {
  if (this != &other) {
    unlock();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void DiskCache::KeyLock::unlock() {
  if (fd_ < 0) return;
  // Explicit LOCK_UN: a forked child may share the open file description, and close() alone
  // would then leave the lock held.
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
  fd_ = -1;
}

}  // namespace ftattn::runtime
