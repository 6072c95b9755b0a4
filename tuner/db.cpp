// Problem buckets and the JSON tuning database: parsing (one bad entry is skipped, never fatal),
// deterministic dumping, atomic saving, lookups keyed by device, family and bucket, and the
// databases shipped inside the library.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "ftattn/config.hpp"
#include "ftattn/errors.hpp"
#include "ftattn/tuner.hpp"
#include "tuner/embedded_dbs.hpp"

namespace ftattn::tuner {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kFormat = 1;
constexpr int kMinSeqlen = 512;
constexpr int64_t kMaxBucket = int64_t{1} << 30;  // buckets saturate here instead of overflowing
// Far deeper than a tuning DB goes (an entry's fields are three levels down). dump() recurses,
// so a document nested thousands deep would overflow the stack: parse() refuses it unbuilt.
constexpr int kMaxDepth = 64;
// How many powers of two, in seqlen and in batch*heads each, a fallback bucket may be away from
// the one looked up (see Database::find).
constexpr int kMaxStep = 1;

// The smallest power of two >= max(v, floor), saturating at kMaxBucket.
int round_up_pow2(int64_t v, int floor) {
  int64_t p = floor;
  while (p < v && p < kMaxBucket) p *= 2;
  return static_cast<int>(p);
}

bool is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

int log2_of(int pow2) {
  int n = 0;
  while (pow2 > 1) {
    pow2 >>= 1;
    ++n;
  }
  return n;
}

std::string family_string(const Family& f) {
  return fmt::format("{}/{}/{}/d{}/{}", f.arch.to_string(), to_string(f.precision),
                     to_string(f.protection), f.head_dim, to_string(f.mask));
}

std::string device_string(const DeviceKey& d) {
  return fmt::format("{} (sm {}, driver {}) with ftattn {}", d.gpu_name, d.sm, d.driver_version,
                     d.ftattn_version);
}

Family family_of(const KernelConfig& c) {
  return Family{c.arch, c.precision, c.protection, c.head_dim, c.mask};
}

// Everything that makes an entry usable, shared by put() (which throws) and parse() (which skips
// the entry). Throws ConfigError naming what is wrong.
void check_entry(const Entry& e) {
  if (e.device.gpu_name.empty()) throw ConfigError("the gpu name is empty");
  if (e.device.sm <= 0) throw ConfigError(fmt::format("sm {} is not positive", e.device.sm));
  if (e.device.driver_version < 0) {
    throw ConfigError(fmt::format("driver {} is negative", e.device.driver_version));
  }
  if (e.device.ftattn_version.empty()) throw ConfigError("the ftattn version is empty");
  if (e.family.arch.is_auto()) throw ConfigError("the arch is auto: name a real arch");
  if (e.bucket.seqlen < kMinSeqlen || !is_pow2(e.bucket.seqlen)) {
    throw ConfigError(
        fmt::format("bucket seqlen {} is not a power of two >= {}", e.bucket.seqlen, kMinSeqlen));
  }
  if (!is_pow2(e.bucket.batch_heads)) {
    throw ConfigError(
        fmt::format("bucket batch_heads {} is not a power of two", e.bucket.batch_heads));
  }
  if (e.bucket.causal != is_causal(e.family.mask)) {
    throw ConfigError(fmt::format("bucket causal={} disagrees with mask {}", e.bucket.causal,
                                  to_string(e.family.mask)));
  }
  if (!e.best.is_complete()) throw ConfigError("the best config is incomplete");
  if (family_of(e.best) != e.family) {
    throw ConfigError(fmt::format("best kernel {} is not of the entry's family {}", e.best.name(),
                                  family_string(e.family)));
  }
  validate(e.best);
  if (e.default_config) {
    if (!e.default_config->is_complete()) throw ConfigError("the default config is incomplete");
    if (family_of(*e.default_config) != e.family) {
      throw ConfigError(fmt::format("default kernel {} is not of the entry's family {}",
                                    e.default_config->name(), family_string(e.family)));
    }
  }
  for (auto [what, v] : {std::pair<const char*, double>{"best_tflops", e.best_tflops},
                         std::pair<const char*, double>{"default_tflops", e.default_tflops}}) {
    if (!std::isfinite(v) || v < 0) {
      throw ConfigError(fmt::format("{} {} is not a finite number >= 0", what, v));
    }
  }
}

// The order of dump(): gpu, arch, precision, protection, head_dim, mask, bucket, then the rest of
// the device key so that the order is total.
auto sort_key(const Entry& e) {
  return std::tuple(std::string_view(e.device.gpu_name), e.family.arch.sm,
                    e.family.arch.arch_specific, static_cast<int>(e.family.precision),
                    static_cast<int>(e.family.protection), e.family.head_dim,
                    static_cast<int>(e.family.mask), e.bucket.causal, e.bucket.seqlen,
                    e.bucket.batch_heads, e.device.sm, e.device.driver_version,
                    std::string_view(e.device.ftattn_version));
}

bool same_key(const Entry& a, const Entry& b) {
  return a.device == b.device && a.family == b.family && a.bucket == b.bucket;
}

nlohmann::ordered_json to_json(const Entry& e) {
  nlohmann::ordered_json j;
  j["gpu"] = e.device.gpu_name;
  j["sm"] = e.device.sm;
  j["driver"] = e.device.driver_version;
  j["ftattn"] = e.device.ftattn_version;
  j["arch"] = e.family.arch.to_string();
  j["precision"] = to_string(e.family.precision);
  j["protection"] = to_string(e.family.protection);
  j["head_dim"] = e.family.head_dim;
  j["mask"] = to_string(e.family.mask);
  j["bucket"] = {{"seqlen", e.bucket.seqlen},
                 {"batch_heads", e.bucket.batch_heads},
                 {"causal", e.bucket.causal}};
  j["best"] = e.best.name();
  if (e.default_config) j["default"] = e.default_config->name();  // absent in older entries
  j["best_tflops"] = e.best_tflops;
  j["default_tflops"] = e.default_tflops;
  if (!e.other_fields.empty()) {
    const nlohmann::ordered_json other = nlohmann::ordered_json::parse(e.other_fields);
    for (auto it = other.begin(); it != other.end(); ++it)
      if (!j.contains(it.key())) j[it.key()] = it.value();
  }
  return j;
}

// The top-level fields to_json writes; any other is kept as Entry::other_fields.
constexpr std::array<std::string_view, 14> kEntryFields = {
    "gpu",      "sm",   "driver", "ftattn", "arch",    "precision",   "protection",
    "head_dim", "mask", "bucket", "best",   "default", "best_tflops", "default_tflops"};

// A required field of the given JSON type; ConfigError naming it otherwise.
const json& field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) throw ConfigError(fmt::format("missing field '{}'", name));
  return *it;
}

std::string get_string(const json& j, const char* name) {
  const json& v = field(j, name);
  if (!v.is_string()) throw ConfigError(fmt::format("field '{}' must be a string", name));
  return v.get<std::string>();
}

int get_int(const json& j, const char* name) {
  const json& v = field(j, name);
  if (!v.is_number_integer()) throw ConfigError(fmt::format("field '{}' must be an integer", name));
  const auto n = v.get<int64_t>();
  if (n < INT32_MIN || n > INT32_MAX) {
    throw ConfigError(fmt::format("field '{}' = {} is out of range", name, n));
  }
  return static_cast<int>(n);
}

double get_number(const json& j, const char* name) {
  const json& v = field(j, name);
  if (!v.is_number()) throw ConfigError(fmt::format("field '{}' must be a number", name));
  return v.get<double>();
}

bool get_bool(const json& j, const char* name) {
  const json& v = field(j, name);
  if (!v.is_boolean()) throw ConfigError(fmt::format("field '{}' must be true or false", name));
  return v.get<bool>();
}

Entry from_json(const json& j) {
  if (!j.is_object()) throw ConfigError("an entry must be a JSON object");
  Entry e;
  e.device.gpu_name = get_string(j, "gpu");
  e.device.sm = get_int(j, "sm");
  e.device.driver_version = get_int(j, "driver");
  e.device.ftattn_version = get_string(j, "ftattn");
  e.family.arch = Arch::parse(get_string(j, "arch"));
  e.family.precision = parse_precision(get_string(j, "precision"));
  e.family.protection = parse_protection(get_string(j, "protection"));
  e.family.head_dim = get_int(j, "head_dim");
  e.family.mask = parse_mask(get_string(j, "mask"));
  const json& b = field(j, "bucket");
  if (!b.is_object()) throw ConfigError("field 'bucket' must be an object");
  e.bucket.seqlen = get_int(b, "seqlen");
  e.bucket.batch_heads = get_int(b, "batch_heads");
  e.bucket.causal = get_bool(b, "causal");
  e.best = KernelConfig::parse(get_string(j, "best"));
  if (j.contains("default")) e.default_config = KernelConfig::parse(get_string(j, "default"));
  e.best_tflops = get_number(j, "best_tflops");
  e.default_tflops = get_number(j, "default_tflops");
  check_entry(e);
  json other = json::object();  // json, not ordered_json: one type can copy another's values
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find(kEntryFields.begin(), kEntryFields.end(), it.key()) == kEntryFields.end())
      other[it.key()] = it.value();
  if (!other.empty()) e.other_fields = other.dump();
  return e;
}

[[noreturn]] void bad_file(const std::string& origin, const std::string& what,
                           std::string_view advice = "delete or fix it") {
  throw CacheError(fmt::format("ftattn tuning database '{}': {}: {}", origin, what, advice));
}

// Writes `text` to `path` with permissions `mode` and flushes it to disk; 0 or errno.
int write_file(const fs::path& path, std::string_view text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  if (mode != 0 && ::fchmod(fd, mode) != 0) {
    const int err = errno;
    ::close(fd);
    return err;
  }
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return err;
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return err;
  }
  return ::close(fd) == 0 ? 0 : errno;
}

}  // namespace

// --- Bucket ----------------------------------------------------------------------------------

Bucket Bucket::of(const Problem& problem, Mask mask) {
  Bucket b;
  b.seqlen = round_up_pow2(problem.seqlen_k, kMinSeqlen);
  b.batch_heads = round_up_pow2(int64_t{problem.batch} * int64_t{problem.heads_q}, 1);
  b.causal = is_causal(mask);
  return b;
}

std::string Bucket::to_string() const {
  return fmt::format("s{}_bh{}_{}", seqlen, batch_heads, causal ? "causal" : "full");
}

KernelConfig heuristic_default(const Family& family, const Problem& problem) {
  return with_defaults(family.open_config(), family.arch, &problem);
}

KernelConfig bucket_default(const Family& family, const Bucket& bucket) {
  // with_defaults reads seqlen_k and batch * heads_q alone.
  return heuristic_default(family, Problem::bhsd(1, bucket.batch_heads, bucket.batch_heads,
                                                 bucket.seqlen, bucket.seqlen, family.head_dim));
}

// --- Database --------------------------------------------------------------------------------

// Invariant: entries_ is sorted by sort_key() and holds no two entries with the same (device,
// family, bucket), and every entry passes check_entry(), so dump() and parse() round-trip.

Database Database::load(const fs::path& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) {
    if (!ec || ec == std::errc::no_such_file_or_directory) return Database{};
    bad_file(path.string(), fmt::format("cannot read it ({})", ec.message()));
  }
  // Only a regular file (or a link to one) is read: a FIFO would block the read forever, and a
  // device is no database. Checked before the open too, so that no device is ever opened.
  const auto require_file = [&](fs::file_type type) {
    if (type == fs::file_type::directory) bad_file(path.string(), "it is a directory, not a file");
    if (type != fs::file_type::regular) {
      const char* kind = type == fs::file_type::fifo        ? "a FIFO"
                         : type == fs::file_type::socket    ? "a socket"
                         : type == fs::file_type::character ? "a character device"
                         : type == fs::file_type::block     ? "a block device"
                                                            : "not a file";
      bad_file(path.string(), fmt::format("it is {}, not a regular file", kind));
    }
  };
  require_file(status.type());
  // O_NONBLOCK: should a FIFO take the file's place after the check, the open does not wait.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) bad_file(path.string(), fmt::format("cannot open it ({})", std::strerror(errno)));
  std::string text;
  int err = 0;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    err = errno;
  } else if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    require_file(S_ISDIR(st.st_mode) ? fs::file_type::directory : fs::file_type::unknown);
  }
  char buf[1 << 16];
  while (err == 0) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno != EINTR) err = errno;
      continue;
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (err != 0) bad_file(path.string(), fmt::format("cannot read it ({})", std::strerror(err)));
  return parse(text, path.string());
}

Database Database::parse(std::string_view text, const std::string& origin) {
  json root;
  // Throws as soon as a container opens too deep, before the deep tree exists.
  const auto refuse_deep = [&](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxDepth) {
      bad_file(origin, fmt::format("nested more than {} levels deep, far more than a tuning "
                                   "database is",
                                   kMaxDepth));
    }
    return true;
  };
  try {
    root = json::parse(text, refuse_deep);
  } catch (const json::exception& e) {
    bad_file(origin, fmt::format("not valid JSON ({})", e.what()));
  }
  if (!root.is_object()) bad_file(origin, "the top level must be an object");
  auto format = root.find("format");
  if (format == root.end() || !format->is_number_integer()) {
    bad_file(origin, fmt::format("no integer \"format\" field (expected {})", kFormat));
  }
  if (format->get<int64_t>() > kFormat) {
    // Not broken: the ftattn that wrote it still reads it, so it must not be deleted.
    bad_file(origin,
             fmt::format("format {} was written by a newer ftattn (this one reads format {})",
                         format->dump(), kFormat),
             "leave it to that ftattn, and give this one's `ftattn tune` another --db file");
  }
  if (format->get<int64_t>() != kFormat) {
    bad_file(origin, fmt::format("format {} is not the one this ftattn reads ({})", format->dump(),
                                 kFormat));
  }
  auto entries = root.find("entries");
  if (entries == root.end() || !entries->is_array()) {
    bad_file(origin, "no \"entries\" array");
  }

  Database db;
  size_t index = 0;
  for (const json& j : *entries) {
    try {
      Entry e = from_json(j);
      for (const Entry& seen : db.entries_) {
        if (same_key(seen, e)) {
          std::cerr << fmt::format(
              "ftattn: {}: entries[{}] repeats the key of an earlier one ({} {} on {}); the "
              "later one wins\n",
              origin, index, family_string(e.family), e.bucket.to_string(),
              device_string(e.device));
        }
      }
      db.put(e);
    } catch (const std::exception& e) {  // ConfigError from our checks, json errors from get<>
      std::cerr << fmt::format(
          "ftattn: {}: not using entries[{}] (kept in the file as it is): {}\n", origin, index,
          e.what());
      db.keep_unread(j.dump());
    }
    ++index;
  }
  return db;
}

void Database::save(const fs::path& link) const {
  // Two threads saving the same path would share the temp file name.
  static std::mutex mutex;
  const std::lock_guard lock(mutex);
  const std::string text = dump();
  std::error_code ec;
  // A link stays a link: the file it names is replaced. An existing file keeps its permissions.
  fs::path path = link;
  if (fs::is_symlink(fs::symlink_status(link, ec))) {
    const fs::path target = fs::weakly_canonical(link, ec);
    if (!ec) path = target;
  }
  struct stat existing {};
  const mode_t mode = ::stat(path.c_str(), &existing) == 0 ? existing.st_mode & 07777 : 0;
  if (path.has_parent_path()) {
    fs::create_directories(path.parent_path(), ec);
    if (ec) {
      throw CacheError(fmt::format("ftattn tuning database: cannot create directory '{}' ({})",
                                   path.parent_path().string(), ec.message()));
    }
  }
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  if (const int err = write_file(tmp, text, mode); err != 0) {
    fs::remove(tmp, ec);
    throw CacheError(
        fmt::format("ftattn tuning database: cannot write '{}' ({}): check the "
                    "directory's permissions and free space",
                    tmp.string(), std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    fs::remove(tmp, ec);
    throw CacheError(fmt::format("ftattn tuning database: cannot rename '{}' to '{}' ({})",
                                 tmp.string(), path.string(), std::strerror(err)));
  }
}

void Database::update(const fs::path& path, const Database& changes) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  fs::path lock_path = path;
  lock_path += ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw CacheError(fmt::format(
        "ftattn tuning database: cannot create the lock file '{}' ({}): check the directory's "
        "permissions",
        lock_path.string(), std::strerror(errno)));
  }
  while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  try {
    Database db = load(path);
    db.merge(changes);
    db.save(path);
  } catch (...) {
    ::close(fd);  // releases the lock
    throw;
  }
  ::close(fd);
}

void Database::keep_unread(std::string entry) {
  if (std::find(unread_.begin(), unread_.end(), entry) == unread_.end())
    unread_.push_back(std::move(entry));
}

std::string Database::dump() const {
  nlohmann::ordered_json root;
  root["format"] = kFormat;
  root["entries"] = nlohmann::ordered_json::array();
  // entries_ is kept sorted (see the invariant above); entries this ftattn cannot read follow.
  for (const Entry& e : entries_) root["entries"].push_back(to_json(e));
  for (const std::string& e : unread_) root["entries"].push_back(nlohmann::ordered_json::parse(e));
  return root.dump(2) + "\n";
}

void Database::put(const Entry& entry) {
  try {
    check_entry(entry);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("cannot store tuning entry for {} {}: {}",
                                  family_string(entry.family), entry.bucket.to_string(), e.what()));
  }
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry& e) { return same_key(e, entry); });
  if (it != entries_.end()) entries_.erase(it);
  auto at =
      std::upper_bound(entries_.begin(), entries_.end(), entry,
                       [](const Entry& a, const Entry& b) { return sort_key(a) < sort_key(b); });
  entries_.insert(at, entry);
}

void Database::merge(const Database& other) {
  for (const Entry& e : other.entries_) put(e);
  for (const std::string& e : other.unread_) keep_unread(e);
}

// Matching rules:
// - An entry is usable when its GPU name, sm and ftattn version equal the device's, its family
//   equals `family`, and it was tuned with a driver no newer than the device's (an entry from a
//   newer driver may rely on code generation this driver lacks; an older one is fine). Among
//   usable entries of the same bucket, the one of the newest driver wins.
// - An exact bucket match is returned silently, even when entries of other devices exist.
// - An entry that records the heuristic default it was tuned against ("default") is usable only
//   while the heuristic still picks that for its bucket (bucket_default): once the defaults
//   change, its gain over them is unknown, and a stale entry would override the better default.
// - Otherwise, if entries for this family and bucket exist that are not usable (another GPU, sm
//   or ftattn version, a newer driver, another default), `note` is called once, for this call,
//   naming the first of them (one tuned against another default first, as it is this device's):
//   the caller learns why a tuned entry was not taken.
// - Then the nearest bucket is taken among usable entries with the same causal flag (causal and
//   full attention have different tile trade-offs, so the fallback never crosses them) whose
//   seqlen and batch_heads are each within one power of two of the bucket's (kMaxStep): the
//   heuristic's own thresholds (512, 1024, 2048 and 16384 keys; 66 batch*heads) are one to three
//   octaves apart, so a choice tuned further away was made in another regime, and the heuristic,
//   fitted to all the tuning data, is the better guess there. Among them: smallest |log2 seqlen
//   difference|, then smallest |log2 batch_heads difference|; remaining ties go to the smaller
//   bucket (a config tuned on less work keeps more CTAs in flight, the safer side), then to the
//   newest driver. Seqlen comes first because it decides the main-loop length that the tile and
//   stage choices trade against; batch*heads only changes the grid size.
std::optional<KernelConfig> Database::find(
    const DeviceKey& device, const Family& family, const Bucket& bucket,
    const std::function<void(const std::string&)>& note) const {
  const Entry* exact = nullptr;
  const Entry* nearest = nullptr;
  auto distance = [&](const Entry& e) {
    return std::tuple(std::abs(log2_of(e.bucket.seqlen) - log2_of(bucket.seqlen)),
                      std::abs(log2_of(e.bucket.batch_heads) - log2_of(bucket.batch_heads)),
                      e.bucket.seqlen, e.bucket.batch_heads, -e.device.driver_version);
  };
  const Entry* foreign = nullptr;
  int foreign_count = 0;
  const Entry* stale = nullptr;
  std::string stale_now;  // what the heuristic picks now for `stale`'s bucket
  // Called for entries that would otherwise be taken, as it runs the heuristic.
  auto tuned_against_other_default = [&](const Entry& e) {
    if (!e.default_config) return false;
    const std::string now = bucket_default(family, e.bucket).name();
    if (e.default_config->name() == now) return false;
    if (e.bucket == bucket && !stale) {
      stale = &e;
      stale_now = now;
    }
    return true;
  };
  for (const Entry& e : entries_) {
    if (e.family != family) continue;
    const bool same_device = e.device.gpu_name == device.gpu_name && e.device.sm == device.sm &&
                             e.device.ftattn_version == device.ftattn_version;
    const bool driver_ok = e.device.driver_version <= device.driver_version;
    if (!same_device || !driver_ok) {
      if (e.bucket == bucket) {
        if (!foreign) foreign = &e;
        ++foreign_count;
      }
      continue;
    }
    if (e.bucket == bucket) {
      if ((!exact || e.device.driver_version > exact->device.driver_version) &&
          !tuned_against_other_default(e))
        exact = &e;
    } else if (e.bucket.causal == bucket.causal && std::get<0>(distance(e)) <= kMaxStep &&
               std::get<1>(distance(e)) <= kMaxStep) {
      if ((!nearest || distance(e) < distance(*nearest)) && !tuned_against_other_default(e))
        nearest = &e;
    }
  }
  if (exact) return exact->best;

  if (stale && note) {
    note(fmt::format(
        "tuning entry for {} {} was tuned against the heuristic default {}, but the heuristic now "
        "picks {}; ignoring it (re-run `ftattn tune`)",
        family_string(family), bucket.to_string(), stale->default_config->name(), stale_now));
  } else if (foreign && note) {
    const DeviceKey& d = foreign->device;
    const std::string where = fmt::format("{} {}", family_string(family), bucket.to_string());
    std::string message;
    if (d.gpu_name != device.gpu_name || d.sm != device.sm ||
        d.ftattn_version != device.ftattn_version) {
      message = fmt::format(
          "tuning entry for {} was made on {} (sm {}) with ftattn {}; ignoring it (this is {} "
          "(sm {}) with ftattn {})",
          where, d.gpu_name, d.sm, d.ftattn_version, device.gpu_name, device.sm,
          device.ftattn_version);
    } else {
      message = fmt::format(
          "tuning entry for {} was made with driver {}, newer than this device's {}; ignoring it "
          "(re-run `ftattn tune` on this driver)",
          where, d.driver_version, device.driver_version);
    }
    if (foreign_count > 1) {
      message += fmt::format(" and {} other foreign entr{}", foreign_count - 1,
                             foreign_count == 2 ? "y" : "ies");
    }
    note(message);
  }
  if (nearest) return nearest->best;
  return std::nullopt;
}

// --- Shipped and user databases --------------------------------------------------------------

// Files merge in name order, a later file winning on equal keys. A file that does not parse is
// skipped with a note here; the test suite requires every shipped file to parse cleanly.
const Database& shipped() {
  static const Database db = [] {
    Database merged;
    for (const auto& [name, text] : embedded_databases()) {
      try {
        merged.merge(Database::parse(text, fmt::format("shipped tuner/db/{}", name)));
      } catch (const Error& e) {
        std::cerr << "ftattn: warning: skipping a shipped tuning database: " << e.what() << "\n";
      }
    }
    return merged;
  }();
  return db;
}

fs::path user_database_path(const fs::path& cache_dir) { return cache_dir / "tuning.json"; }

}  // namespace ftattn::tuner
