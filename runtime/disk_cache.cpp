#include "runtime/disk_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <new>
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

bool is_lower_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// std::error_code's message is thread-safe, unlike strerror().
std::string os_error(int err) { return std::error_code(err, std::generic_category()).message(); }

// What to change, for the OS error `err` (0: none known). Names every way to choose the
// directory: the environment, the CLI's flag and the library's option.
std::string fix_hint(int err) {
  constexpr const char* kElsewhere =
      "FTATTN_CACHE_DIR, ftattn --cache-dir or RuntimeOptions::cache_dir";
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return std::string(
                 " (no room for the file: the disk or your quota is full, or a file size "
                 "limit was hit; free space there, or choose a directory on another disk "
                 "with ") +
             kElsewhere + ")";
    case EMFILE:
    case ENFILE:
      return " (too many open files: raise the limit, e.g. ulimit -n, or open fewer at once)";
    case ENOMEM:
      return "";
    default:
      return std::string(" (choose a directory you can write with ") + kElsewhere +
             "; library users can also set RuntimeOptions::disk_cache = false)";
  }
}

[[noreturn]] void throw_io(std::string_view what, const fs::path& path, int err,
                           const std::string& detail = {}) {
  throw CacheError("ftattn disk cache: cannot " + std::string(what) + " '" + path.string() +
                   "': " + (detail.empty() ? os_error(err) : detail) + fix_hint(err));
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

// True for the names store() and discard_entry() give their dirs in tmp/:
// <key>.<pid>.<16 hex> and <key>.dead.<pid>.<16 hex>. clear() removes nothing else there.
bool is_temp_name(std::string_view name) {
  if (name.size() < 34 || !is_valid_cache_key(name.substr(0, 32)) || name[32] != '.') {
    return false;
  }
  std::string_view rest = name.substr(33);
  if (rest.starts_with("dead.")) rest.remove_prefix(5);
  const std::size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos) return false;
  const std::string_view pid = rest.substr(0, dot);
  const std::string_view random = rest.substr(dot + 1);
  return std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
         random.size() == 16 && is_lower_hex(random);
}

// fs::remove_all with its failure as an errno (0: it is gone). remove_all reports failure by
// returning uintmax_t(-1), which a `> 0` test takes for success. ENOENT partway means someone
// else (another clear(), a discard) is removing it too: try again while it still stands.
int remove_tree(const fs::path& path) {
  for (int attempt = 0;; ++attempt) {
    std::error_code ec;
    const std::uintmax_t removed = fs::remove_all(path, ec);
    if (!ec && removed != static_cast<std::uintmax_t>(-1)) return 0;
    const int err = ec ? ec.value() : EIO;
    if (err != ENOENT) return err;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return 0;
    if (attempt == 2) return err;
  }
}

// True when `path` is a real directory, not a link to one. Anything else that is there is
// noted in `odd` (when given): ftattn never makes it, so it is never followed or removed.
// Throws CacheError when `path` cannot be inspected; false when it does not exist.
bool is_real_dir(const fs::path& path, std::vector<DiskCache::Left>* odd) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    throw_io("read", path, errno);
  }
  if (S_ISDIR(st.st_mode)) return true;
  if (odd != nullptr) {
    const char* what = S_ISLNK(st.st_mode)   ? "a symbolic link"
                       : S_ISREG(st.st_mode) ? "a regular file"
                                             : "a special file";
    odd->push_back({path, std::string("it is ") + what +
                              ", not a directory ftattn made, so it was left alone (remove it "
                              "yourself if it does not belong there)"});
  }
  return false;
}

// The children of `dir`, none when it does not exist. Throws CacheError when it cannot be
// read: an unreadable cache must not pass for an empty one.
std::vector<fs::path> children(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    out.push_back(it->path());
  }
  if (ec && ec != std::errc::no_such_file_or_directory) throw_io("read", dir, ec.value());
  return out;
}

// Removes an entry dir. It is first renamed into tmp/ so that nobody ever sees a half-deleted
// entry under its real name; a crash mid-delete leaves only a stray that clear() removes.
// Returns 0 when it was removed, ENOENT when someone else removed it first, else the errno of
// the failure; then what is left of it stays, at `*left_at` when given.
int discard_entry(const fs::path& root, const fs::path& dir, const std::string& key,
                  fs::path* left_at = nullptr) {
  if (left_at != nullptr) *left_at = dir;
  std::error_code ec;
  const fs::path tmp_root = root / kVersionDir / kTmpDir;
  fs::create_directories(tmp_root, ec);
  // Only into a real tmp/: a link there would take the entry out of the cache.
  struct stat st {};
  if (!ec && ::lstat(tmp_root.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    const fs::path doomed = tmp_root / (key + ".dead." + unique_suffix());
    if (::rename(dir.c_str(), doomed.c_str()) == 0) {
      if (left_at != nullptr) *left_at = doomed;
      return remove_tree(doomed);
    }
    if (errno == ENOENT) return ENOENT;
  }
  if (::lstat(dir.c_str(), &st) != 0) return errno;
  return remove_tree(dir);
}

// Why an entry could not be used. Only damage is a reason to remove it: a read that failed for
// any other cause (permissions, too many open files, I/O error) says nothing about the entry.
struct Trouble {
  enum Kind { none, damaged, unreadable } kind = none;
  std::string reason;
  explicit operator bool() const { return kind != none; }
};

Trouble damaged(std::string reason) { return {Trouble::damaged, std::move(reason)}; }

// A failed read_file() of a file the entry must have.
Trouble read_failure(std::string_view name, int err) {
  if (err == ENOENT) return damaged(std::string(name) + ": missing");
  return {Trouble::unreadable, std::string(name) + ": " + os_error(err)};
}

// The entry's manifest, or why it cannot be trusted.
Trouble read_manifest(const fs::path& dir, const std::string& key, json& manifest) {
  std::string text;
  if (const int err = read_file(dir / kManifest, text); err != 0) {
    return read_failure(kManifest, err);
  }
  manifest = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object()) {
    return damaged(std::string(kManifest) + ": not a valid JSON object");
  }
  const auto format = manifest.find("format");
  if (format == manifest.end() || !format->is_number_integer() || *format != kFormat) {
    return damaged(std::string(kManifest) + ": missing or unsupported format (expected " +
                   std::to_string(kFormat) + ")");
  }
  const auto stored_key = manifest.find("key");
  if (stored_key == manifest.end() || !stored_key->is_string() || *stored_key != key) {
    return damaged(std::string(kManifest) + ": names another key");
  }
  const auto files = manifest.find("files");
  if (files == manifest.end() || !files->is_object()) {
    return damaged(std::string(kManifest) + ": no file list");
  }
  for (const char* name : kPayloadFiles) {
    const auto f = files->find(name);
    if (f == files->end() || !f->is_object() || !f->contains("bytes") ||
        !(*f)["bytes"].is_number_unsigned() || !f->contains("xxh3_128") ||
        !(*f)["xxh3_128"].is_string()) {
      return damaged(std::string(kManifest) + ": no valid record for " + name);
    }
  }
  return {};
}

// The stored meta.json: {"format", "key", "name", "meta"}.
Trouble parse_meta(const std::string& text, const std::string& key, json& doc) {
  doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("key") || doc["key"] != key ||
      !doc.contains("name") || !doc["name"].is_string() || !doc.contains("meta")) {
    return damaged(std::string(kMetaFile) + ": not the expected object for this key");
  }
  return {};
}

// Reads and verifies a whole entry.
Trouble read_entry(const fs::path& dir, const std::string& key, CacheEntry& entry) {
  json manifest;
  if (Trouble t = read_manifest(dir, key, manifest)) return t;
  std::array<std::string, kPayloadFiles.size()> contents;
  for (std::size_t i = 0; i < kPayloadFiles.size(); ++i) {
    const char* name = kPayloadFiles[i];
    if (const int err = read_file(dir / name, contents[i]); err != 0) {
      return read_failure(name, err);
    }
    const json& record = manifest["files"][name];
    const auto expected_bytes = record["bytes"].get<std::uint64_t>();
    if (contents[i].size() != expected_bytes) {
      return damaged(std::string(name) + ": " + std::to_string(contents[i].size()) +
                     " bytes, manifest says " + std::to_string(expected_bytes));
    }
    if (hash_hex(contents[i]) != record["xxh3_128"].get<std::string>()) {
      return damaged(std::string(name) + ": content does not match the manifest's hash");
    }
  }
  json meta;
  if (Trouble t = parse_meta(contents[4], key, meta)) return t;
  entry.key = key;
  entry.name = meta["name"].get<std::string>();
  entry.source = std::move(contents[0]);
  entry.ptx = std::move(contents[1]);
  entry.cubin = std::move(contents[2]);
  entry.log = std::move(contents[3]);
  entry.meta = meta["meta"];
  return {};
}

// Cheap check for list(): manifest and sizes only, no hashing.
std::optional<CacheEntryInfo> describe_entry(const fs::path& dir, const std::string& key) {
  json manifest;
  if (read_manifest(dir, key, manifest)) return std::nullopt;
  CacheEntryInfo info;
  info.key = key;
  std::error_code ec;
  for (const char* name : kPayloadFiles) {
    const std::uintmax_t size = fs::file_size(dir / name, ec);
    if (ec || size != manifest["files"][name]["bytes"].get<std::uint64_t>()) {
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
  json meta;
  if (parse_meta(text, key, meta)) return std::nullopt;
  info.name = meta["name"].get<std::string>();
  info.meta = meta["meta"];
  return info;
}

// For list() and clear(): the entry if list() shows it, nullopt if it is a leftover.
std::optional<CacheEntryInfo> try_describe(const fs::path& dir, const std::string& key) {
  try {
    return describe_entry(dir, key);
  } catch (const std::exception&) {  // e.g. a JSON type surprise: not listed; load() reports it
    return std::nullopt;
  }
}

// The dirs in <root>/v1/tmp that store() and discard_entry() made: unfinished writes and
// interrupted deletes. Anything else there, or a tmp/ that is not a real directory, is noted
// in `odd` (when given) and left alone. Throws CacheError when tmp/ cannot be read.
std::vector<fs::path> temp_dirs(const fs::path& root, std::vector<DiskCache::Left>* odd) {
  std::vector<fs::path> out;
  const fs::path dir = root / kVersionDir / kTmpDir;
  if (!is_real_dir(dir, odd)) return out;
  for (const fs::path& child : children(dir)) {
    if (!is_temp_name(child.filename().string())) {
      if (odd != nullptr) {
        odd->push_back({child,
                        "ftattn never makes this name, so it was left alone (remove it yourself "
                        "if it does not belong there)"});
      }
      continue;
    }
    if (is_real_dir(child, odd)) out.push_back(child);
  }
  return out;
}

// The fallback root lies in a directory every user may write, so someone else could create it
// (or a link by its name) first and have us load their binaries. Trust only a real directory of
// this user that nobody else can write.
void require_private_dir(const fs::path& dir) {
  const std::string fix =
      "; set FTATTN_CACHE_DIR (or ftattn --cache-dir, RuntimeOptions::cache_dir) to a cache "
      "directory of your own";
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw CacheError("ftattn disk cache: cannot create the fallback cache directory '" +
                     dir.string() + "': " + os_error(errno) + fix);
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    throw CacheError("ftattn disk cache: cannot inspect the fallback cache directory '" +
                     dir.string() + "': " + os_error(errno) + fix);
  }
  std::string problem;
  if (S_ISLNK(st.st_mode)) {
    problem = "is a symbolic link";
  } else if (!S_ISDIR(st.st_mode)) {
    problem = "is not a directory";
  } else if (st.st_uid != ::getuid()) {
    problem = "belongs to user id " + std::to_string(st.st_uid) + ", not to you (" +
              std::to_string(::getuid()) + ")";
  } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    problem = "can be written by other users";
  }
  if (!problem.empty()) {
    throw CacheError("ftattn disk cache: the fallback cache directory '" + dir.string() + "' " +
                     problem + ", so kernels in it cannot be trusted" + fix);
  }
}

// Every <root>/v1/<shard>/<key> directory with a well-formed name. Links and files where
// v1/, a shard or an entry belongs are noted in `odd` (when given) and never followed. Throws
// CacheError when a directory cannot be read.
std::vector<std::pair<std::string, fs::path>> entry_dirs(const fs::path& root,
                                                         std::vector<DiskCache::Left>* odd) {
  std::vector<std::pair<std::string, fs::path>> out;
  const fs::path version = root / kVersionDir;
  if (!is_real_dir(version, odd)) return out;
  for (const fs::path& shard : children(version)) {
    const std::string shard_name = shard.filename().string();
    if (shard_name.size() != 2 || !is_lower_hex(shard_name)) continue;  // skips tmp/
    if (!is_real_dir(shard, odd)) continue;
    for (const fs::path& dir : children(shard)) {
      const std::string key = dir.filename().string();
      if (is_valid_cache_key(key) && key.compare(0, 2, shard_name) == 0 && is_real_dir(dir, odd)) {
        out.emplace_back(key, dir);
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
  const fs::path root = tmp / ("ftattn-cache-" + std::to_string(::getuid()));
  require_private_dir(root);
  return root;
}

const std::filesystem::path& DiskCache::root() const { return root_; }

std::filesystem::path DiskCache::entry_dir(const std::string& key) const {
  require_valid_key(key);
  return root_ / kVersionDir / key.substr(0, 2) / key;
}

DiskCache::LoadResult DiskCache::load(const std::string& key, OnDamage on_damage) const {
  const fs::path dir = entry_dir(key);
  // store() with Existing::replace may swap the entry while we read it: a read that mixed the
  // two is read again, never taken for damage (which would remove the new entry). Each retry
  // means another replacement happened, so this ends as soon as the writers pause.
  for (int attempt = 1;; ++attempt) {
    struct stat before {};
    if (::stat(dir.c_str(), &before) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return {LoadStatus::miss, std::nullopt, ""};
      return {LoadStatus::miss, std::nullopt,
              "cannot inspect '" + dir.string() + "': " + os_error(errno)};
    }

    Trouble trouble;
    CacheEntry entry;
    if (!S_ISDIR(before.st_mode)) {
      trouble = damaged("entry is not a directory");
    } else {
      try {
        trouble = read_entry(dir, key, entry);
      } catch (const std::bad_alloc&) {  // our memory, not the entry
        trouble = {Trouble::unreadable, "out of memory while reading it"};
      } catch (const std::exception& e) {  // e.g. a JSON type surprise: still only a bad entry
        trouble = damaged(std::string("unreadable entry: ") + e.what());
      }
    }
    if (!trouble) return {LoadStatus::hit, std::move(entry), ""};
    if (trouble.kind == Trouble::unreadable) {
      return {LoadStatus::miss, std::nullopt,
              "cannot read '" + dir.string() + "': " + trouble.reason};
    }
    struct stat after {};
    // Vanished while we read it (clear() or another reader discarding it): plain miss.
    if (::stat(dir.c_str(), &after) != 0 && errno == ENOENT) {
      return {LoadStatus::miss, std::nullopt, ""};
    }
    const bool replaced = after.st_ino != before.st_ino || after.st_dev != before.st_dev ||
                          after.st_ctim.tv_sec != before.st_ctim.tv_sec ||
                          after.st_ctim.tv_nsec != before.st_ctim.tv_nsec;
    if (!replaced) {  // the entry we read is still the one there: its damage is real
      if (on_damage == OnDamage::discard) discard_entry(root_, dir, key);
      return {LoadStatus::corrupt, std::nullopt, trouble.reason};
    }
    if (attempt == 100) {
      return {LoadStatus::miss, std::nullopt,
              "'" + dir.string() + "' was replaced again every time it was read"};
    }
  }
}

void DiskCache::store(const CacheEntry& entry, Existing existing) {
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

  // Retried only when clear() pulls our temp dir away (ENOENT), mid-write or before the rename
  // that publishes it: only a complete temp dir is ever renamed into place.
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
        if (existing == Existing::replace) {
          // Swapped in one step, so a reader sees the old entry or ours, never neither. The old
          // one now has our temp dir's name, and the guard removes it.
          if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) ==
              0) {
            return;
          }
          const int swap_err = errno;
          if (swap_err == ENOENT) continue;  // the old one went meanwhile, or clear() took ours
          if (swap_err != EINVAL && swap_err != ENOSYS && swap_err != ENOTSUP) {
            throw IoFailure{"publish into", final_dir, swap_err};
          }
          // A file system that cannot swap (NFS, older kernels): old one out, then ours in.
          if (const int gone = discard_entry(root_, final_dir, entry.key);
              gone != 0 && gone != ENOENT) {
            throw IoFailure{"replace", final_dir, gone};
          }
          continue;
        }
        // Someone published first. Same key => same content, so keep theirs if it is sound;
        // load() discards it if damaged and we try again. One we cannot read stays: it may well
        // be sound, and it is not ours to remove.
        const LoadResult theirs = load(entry.key);
        if (theirs.status == LoadStatus::hit) return;
        if (theirs.status == LoadStatus::miss && !theirs.reason.empty()) {
          throw_io("publish into", final_dir, 0,
                   "an entry is already there and cannot be read: " + theirs.reason);
        }
      }
      throw_io("publish into", final_dir, 0,
               existing == Existing::replace ? "other entries kept taking its place"
                                             : "an existing entry kept reappearing damaged");
    } catch (const IoFailure& f) {
      if (f.err == ENOENT && attempt < 2) continue;
      throw_io(f.what, f.path, f.err);
    }
  }
}

std::vector<CacheEntryInfo> DiskCache::list(std::size_t* leftovers) const {
  std::vector<CacheEntryInfo> out;
  std::size_t unlisted = 0;
  for (const auto& [key, dir] : entry_dirs(root_, nullptr)) {
    if (std::optional<CacheEntryInfo> info = try_describe(dir, key)) {
      out.push_back(std::move(*info));
    } else {
      ++unlisted;  // load() reports and removes a damaged one
    }
  }
  if (leftovers != nullptr) *leftovers = unlisted + temp_dirs(root_, nullptr).size();
  std::sort(out.begin(), out.end(), [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
    return std::tie(a.name, a.key) < std::tie(b.name, b.key);
  });
  return out;
}

DiskCache::Cleared DiskCache::clear() {
  Cleared cleared;
  const auto could_not_remove = [&](const fs::path& path, int err) {
    cleared.left.push_back({path, "could not remove it: " + os_error(err)});
  };
  for (const auto& [key, dir] : entry_dirs(root_, &cleared.left)) {
    // Classified as list() does, so that the counts match what `cache ls` showed.
    const bool listed = try_describe(dir, key).has_value();
    fs::path left_at;
    const int err = discard_entry(root_, dir, key, &left_at);
    if (err == 0) {
      ++(listed ? cleared.entries : cleared.leftovers);
    } else if (err != ENOENT) {  // ENOENT: someone else removed it first
      could_not_remove(left_at, err);
    }
  }
  // Temp dirs: crashed writers' leftovers and interrupted deletes, but also dirs of writers
  // still running. Collected first so the directory is not modified while iterated.
  for (const fs::path& stray : temp_dirs(root_, &cleared.left)) {
    // Never removed under the writer's name: store() may rename it into place at any moment,
    // and remove_all, deleting through an open directory, would follow it and empty the
    // published entry. Renamed first, it is ours alone, and the writer's store() retries.
    const std::string key = stray.filename().string().substr(0, 32);
    const fs::path doomed = stray.parent_path() / (key + ".dead." + unique_suffix());
    if (::rename(stray.c_str(), doomed.c_str()) != 0) {
      if (errno != ENOENT) could_not_remove(stray, errno);  // ENOENT: published or removed
      continue;
    }
    if (const int err = remove_tree(doomed); err != 0) {
      could_not_remove(doomed, err);
    } else {
      ++cleared.leftovers;
    }
  }
  return cleared;
}

DiskCache::KeyLock DiskCache::lock(const std::string& key, std::string_view what) {
  require_valid_key(key);
  const fs::path dir = root_ / kLocksDir;
  const fs::path file = dir / (key + ".lock");
  const auto no_lock = [&](std::string why) {
    KeyLock none;
    none.failure_ = std::move(why);
    return none;
  };
  // flock() needs no write access, so an existing lock file is opened read-only: read-only and
  // shared caches lock too. O_NONBLOCK: a FIFO under that name must not hang the open;
  // O_NOFOLLOW: a link must not lead elsewhere.
  constexpr int kFlags = O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  int fd = ::open(file.c_str(), O_RDONLY | kFlags);
  if (fd < 0 && errno == ENOENT) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return no_lock("cannot create '" + dir.string() + "': " + ec.message());
    fd = ::open(file.c_str(), O_RDWR | O_CREAT | kFlags, 0666);
    // Whoever locks this key next may be another user of a shared cache: let them open it,
    // whatever our umask. Failure only costs them the lock, so it is not an error.
    if (fd >= 0) (void)::fchmod(fd, 0666);
  }
  if (fd < 0) return no_lock("cannot open '" + file.string() + "': " + os_error(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return no_lock("'" + file.string() + "' is not a regular file");
  }
  const auto fail = [&](int err) {
    ::close(fd);
    return no_lock("cannot lock '" + file.string() + "': " + os_error(err));
  };
  // Try without waiting first, so that a wait is never silent: a stuck holder would otherwise
  // hang every other compile of this key with no word why.
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return fail(errno);
    const std::string who = what.empty() ? key : std::string(what);
    std::fprintf(stderr, "ftattn: waiting for another process compiling %s (lock %s)\n",
                 who.c_str(), file.c_str());
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno != EINTR) return fail(errno);
    }
    break;
  }
  return KeyLock(fd);
}

DiskCache::KeyLock::~KeyLock() { unlock(); }

DiskCache::KeyLock::KeyLock(KeyLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), failure_(std::move(other.failure_)) {}

DiskCache::KeyLock& DiskCache::KeyLock::operator=(KeyLock&& other) noexcept {
  if (this != &other) {
    unlock();
    fd_ = std::exchange(other.fd_, -1);
    failure_ = std::move(other.failure_);
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
