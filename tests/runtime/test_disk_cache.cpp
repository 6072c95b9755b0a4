#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <latch>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "ftattn/errors.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/hash.hpp"
#include "tests/support/temp_dir.hpp"

namespace fs = std::filesystem;
using ftattn::CacheError;
using ftattn::runtime::CacheEntry;
using ftattn::runtime::DiskCache;
using ftattn::runtime::hash_hex;
using Status = DiskCache::LoadStatus;

namespace {

using ftattn::test::TempDir;

// Sets or unsets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

CacheEntry make_entry(const std::string& seed) {
  CacheEntry e;
  e.key = hash_hex(seed);
  e.name = "ftattn_fwd_sm80_f16_d128_m128n64_w4s2_causal_none_" + seed;
  e.source = "extern \"C\" __global__ void k() {} // " + seed + "\n";
  e.ptx = ".version 8.0\n.target sm_80\n// " + seed + "\n";
  e.cubin = std::string(
                "\x7f"
                "ELF\0\0\x01\x02\0",
                9) +
            seed + std::string(3, '\0') + "\xff\xfe";
  e.log = "ptxas info    : Used 128 registers, " + seed + "\n";
  e.meta = {{"config", seed},
            {"compile_seconds", 1.25},
            {"registers", 128},
            {"options", {"--gpu-architecture=sm_80", "-O3"}}};
  return e;
}

void require_same(const CacheEntry& a, const CacheEntry& b) {
  CHECK(a.key == b.key);
  CHECK(a.name == b.name);
  CHECK(a.source == b.source);
  CHECK(a.ptx == b.ptx);
  CHECK(a.cubin == b.cubin);
  CHECK(a.log == b.log);
  CHECK(a.meta == b.meta);
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& p, const std::string& data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << data;
  REQUIRE(out.good());
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string os_error(int err) { return std::error_code(err, std::generic_category()).message(); }

// Runs `body` in a forked child (for process-wide limits the test must not leave behind) and
// returns its exit code, -1 if it did not exit normally.
template <class Body>
int in_child(Body&& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (...) {
    }
    ::_exit(code);  // no Catch2 or TempDir teardown in the child
  }
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// In a child: caps its descriptors at 64 and takes every one, so the next open fails with
// EMFILE, for root too. 0 when it did, else an exit code for in_child (10, 11).
int take_every_descriptor() {
  const rlimit limit{64, 64};
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return 10;
  while (::dup(0) >= 0) {
  }
  return errno == EMFILE ? 0 : 11;
}

// What the process writes to stderr (fd 2) while `body` runs.
template <class Body>
std::string capture_stderr(Body&& body) {
  TempDir tmp("ftattn-stderr");
  const fs::path file = tmp.path() / "stderr.txt";
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(saved >= 0);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  ::close(fd);
  try {
    body();
  } catch (...) {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    throw;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  return read_all(file);
}

}  // namespace

TEST_CASE("DiskCache store then load round-trips every field", "[disk_cache]") {
  TempDir tmp;
  const fs::path root = tmp.path() / "cache";  // does not exist yet: created on store
  DiskCache cache(root);
  CHECK(cache.root() == root);
  const CacheEntry e = make_entry("roundtrip");
  REQUIRE(e.cubin.find('\0') != std::string::npos);

  cache.store(e);
  const fs::path dir = root / "v1" / e.key.substr(0, 2) / e.key;
  CHECK(cache.entry_dir(e.key) == dir);
  for (const char* f :
       {"kernel.cu", "kernel.ptx", "kernel.cubin", "compile.log", "meta.json", "manifest.json"}) {
    CHECK(fs::is_regular_file(dir / f));
  }
  CHECK(read_all(dir / "kernel.cubin") == e.cubin);

  const DiskCache::LoadResult r = cache.load(e.key);
  REQUIRE(r.status == Status::hit);
  REQUIRE(r.entry.has_value());
  require_same(*r.entry, e);

  // A second cache object on the same root (another process, in effect) sees it too.
  const DiskCache::LoadResult r2 = DiskCache(root).load(e.key);
  REQUIRE(r2.status == Status::hit);
  require_same(*r2.entry, e);
}

TEST_CASE("DiskCache round-trips empty fields and large binaries", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  CacheEntry e;
  e.key = hash_hex("empty");
  cache.store(e);  // everything empty, meta null
  auto r = cache.load(e.key);
  REQUIRE(r.status == Status::hit);
  require_same(*r.entry, e);

  CacheEntry big = make_entry("big");
  std::mt19937 rng(7);
  big.cubin.resize(3 << 20);
  for (auto& c : big.cubin) c = static_cast<char>(rng());
  cache.store(big);
  r = cache.load(big.key);
  REQUIRE(r.status == Status::hit);
  CHECK(r.entry->cubin == big.cubin);
}

TEST_CASE("DiskCache load of an unknown key is a miss", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path() / "never_created");
  const auto r = cache.load(hash_hex("unknown"));
  CHECK(r.status == Status::miss);
  CHECK_FALSE(r.entry.has_value());
  CHECK_FALSE(fs::exists(tmp.path() / "never_created"));  // load creates nothing

  cache.store(make_entry("other"));
  CHECK(cache.load(hash_hex("unknown")).status == Status::miss);
}

TEST_CASE("DiskCache detects and removes damaged entries", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  const CacheEntry e = make_entry("victim");
  cache.store(e);
  const fs::path dir = cache.entry_dir(e.key);
  REQUIRE(cache.load(e.key).status == Status::hit);

  SECTION("truncated cubin") { fs::resize_file(dir / "kernel.cubin", e.cubin.size() - 1); }
  SECTION("one flipped byte in cubin") {
    std::string bytes = read_all(dir / "kernel.cubin");
    bytes[bytes.size() / 2] ^= 0x01;
    write_all(dir / "kernel.cubin", bytes);
  }
  SECTION("missing cubin") { fs::remove(dir / "kernel.cubin"); }
  SECTION("altered meta.json") {
    std::string text = read_all(dir / "meta.json");
    text.replace(text.find("1.25"), 4, "9.25");
    write_all(dir / "meta.json", text);
  }
  SECTION("missing manifest") { fs::remove(dir / "manifest.json"); }
  SECTION("manifest with bad JSON") {
    std::string text = read_all(dir / "manifest.json");
    write_all(dir / "manifest.json", text.substr(0, text.size() / 2));
  }
  SECTION("manifest of another key") {
    const CacheEntry other = make_entry("other");
    cache.store(other);
    fs::copy_file(cache.entry_dir(other.key) / "manifest.json", dir / "manifest.json",
                  fs::copy_options::overwrite_existing);
  }
  SECTION("manifest naming another key, file records intact") {
    auto manifest = nlohmann::json::parse(read_all(dir / "manifest.json"));
    manifest["key"] = hash_hex("someone else");
    write_all(dir / "manifest.json", manifest.dump());
  }
  SECTION("entry is a file, not a directory") {
    fs::remove_all(dir);
    write_all(dir, "junk");
  }

  const auto r = cache.load(e.key);
  CHECK(r.status == Status::corrupt);
  CHECK_FALSE(r.entry.has_value());
  CHECK_FALSE(r.reason.empty());
  CHECK_FALSE(fs::exists(dir));
  CHECK(cache.load(e.key).status == Status::miss);

  // And it can be rebuilt.
  cache.store(e);
  const auto again = cache.load(e.key);
  REQUIRE(again.status == Status::hit);
  require_same(*again.entry, e);
}

TEST_CASE("DiskCache store replaces nothing but heals a damaged entry", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  const CacheEntry e = make_entry("heal");
  cache.store(e);
  // Same key stored again: the existing sound entry is kept, no error.
  cache.store(e);
  REQUIRE(cache.load(e.key).status == Status::hit);
  // A damaged entry in the way of store() is replaced rather than kept.
  fs::resize_file(cache.entry_dir(e.key) / "kernel.cubin", 1);
  cache.store(e);
  const auto r = cache.load(e.key);
  REQUIRE(r.status == Status::hit);
  require_same(*r.entry, e);
}

TEST_CASE("DiskCache store with Existing::replace puts ours in the old entry's place",
          "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  const CacheEntry old_entry = make_entry("replaced");
  const CacheEntry other = make_entry("bystander");
  cache.store(old_entry);
  cache.store(other);
  CacheEntry fresh = old_entry;  // same key, another compiler's output
  fresh.ptx += "// recompiled\n";
  fresh.cubin += "new";
  fresh.meta["compiler"] = "another";

  cache.store(fresh);  // keep: the entry there stays
  require_same(*cache.load(old_entry.key).entry, old_entry);
  cache.store(fresh, DiskCache::Existing::replace);
  const auto r = cache.load(old_entry.key);
  REQUIRE(r.status == Status::hit);
  require_same(*r.entry, fresh);
  const auto untouched = cache.load(other.key);
  REQUIRE(untouched.status == Status::hit);
  require_same(*untouched.entry, other);
  CHECK(cache.list().size() == 2);
  CHECK(fs::is_empty(tmp.path() / "v1" / "tmp"));  // the old entry went with our temp dir

  // Nothing there, or a damaged entry there: published all the same.
  const CacheEntry first = make_entry("first");
  cache.store(first, DiskCache::Existing::replace);
  require_same(*cache.load(first.key).entry, first);
  fs::resize_file(cache.entry_dir(fresh.key) / "kernel.cubin", 1);
  cache.store(old_entry, DiskCache::Existing::replace);
  require_same(*cache.load(old_entry.key).entry, old_entry);
  CHECK(fs::is_empty(tmp.path() / "v1" / "tmp"));
}

TEST_CASE("DiskCache readers of an entry being replaced see the old or the new, whole",
          "[disk_cache]") {
  TempDir tmp;
  CacheEntry a = make_entry("swapped");
  CacheEntry b = a;
  b.ptx = std::string(1 << 16, 'b');  // big enough that reads and swaps overlap
  b.meta["compiler"] = "b";
  DiskCache(tmp.path()).store(a);
  // Where the file system cannot swap directories, store() removes the old entry first, and a
  // reader may find nothing for a moment; it must still never find a mixture or damage.
  const fs::path x = tmp.path() / "x", y = tmp.path() / "y";
  fs::create_directories(x);
  fs::create_directories(y);
  const bool swaps = ::renameat2(AT_FDCWD, x.c_str(), AT_FDCWD, y.c_str(), RENAME_EXCHANGE) == 0;
  if (!swaps) WARN("this file system cannot swap directories: misses are allowed");

  std::atomic<bool> done{false};
  std::atomic<int> hits{0}, misses{0}, bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      DiskCache cache(tmp.path());
      while (!done) {
        const auto r = cache.load(a.key);  // OnDamage::discard: a false alarm would remove it
        if (r.status == Status::hit) {
          ++hits;
          if (r.entry->ptx != a.ptx && r.entry->ptx != b.ptx) ++bad;
        } else if (r.status == Status::miss) {
          ++misses;
        } else {
          ++bad;
        }
      }
    });
  }
  DiskCache writer(tmp.path());
  for (int i = 0; i < 300; ++i) writer.store(i % 2 == 0 ? b : a, DiskCache::Existing::replace);
  done = true;
  for (auto& t : readers) t.join();
  INFO(hits << " hits, " << misses << " misses");
  CHECK(bad == 0);
  if (swaps) CHECK(misses == 0);
  require_same(*writer.load(a.key).entry, a);
  CHECK(fs::is_empty(tmp.path() / "v1" / "tmp"));
}

TEST_CASE("DiskCache ignores and clears temp dirs of crashed writers", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  const CacheEntry kept = make_entry("kept");
  cache.store(kept);

  // What a writer killed mid-store leaves: a temp dir with some files and no manifest, plus an
  // entry dir that never got its manifest.
  const std::string crashed_key = hash_hex("crashed");
  const fs::path stray = tmp.path() / "v1" / "tmp" / (crashed_key + ".12345.deadbeefdeadbeef");
  fs::create_directories(stray);
  write_all(stray / "kernel.cu", "partial");
  const fs::path half = cache.entry_dir(hash_hex("half"));
  fs::create_directories(half);
  write_all(half / "kernel.cu", "partial");

  std::size_t leftovers = 0;
  const auto listed = cache.list(&leftovers);
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].key == kept.key);
  CHECK(leftovers == 2);  // the temp dir and the manifest-less entry
  CHECK(cache.load(crashed_key).status == Status::miss);

  // Counted as list() counts them, so `cache clear` agrees with `cache ls`.
  const DiskCache::Cleared cleared = cache.clear();
  CHECK(cleared.entries == 1);
  CHECK(cleared.leftovers == 2);
  CHECK_FALSE(fs::exists(stray));
  CHECK_FALSE(fs::exists(half));
  CHECK(fs::is_empty(tmp.path() / "v1" / "tmp"));
  CHECK(cache.list().empty());
}

TEST_CASE("DiskCache list and clear", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  CHECK(cache.list().empty());  // no root yet
  CHECK(cache.clear().entries == 0);

  const std::vector<CacheEntry> entries = {make_entry("c"), make_entry("a"), make_entry("b")};
  for (const auto& e : entries) cache.store(e);

  const auto listed = cache.list();
  REQUIRE(listed.size() == 3);
  CHECK(listed[0].name == entries[1].name);  // sorted by name
  CHECK(listed[1].name == entries[2].name);
  CHECK(listed[2].name == entries[0].name);
  CHECK(listed[0].key == entries[1].key);
  CHECK(listed[0].meta == entries[1].meta);
  CHECK(listed[0].bytes > entries[1].cubin.size() + entries[1].source.size());
  CHECK(listed[0].written.time_since_epoch().count() != 0);

  const DiskCache::Cleared cleared = cache.clear();
  CHECK(cleared.entries == 3);
  CHECK(cleared.leftovers == 0);
  CHECK(cache.list().empty());
  for (const auto& e : entries) CHECK(cache.load(e.key).status == Status::miss);
  CHECK(cache.clear().entries == 0);
}

TEST_CASE("DiskCache clear never follows links out of the cache and leaves what it did not make",
          "[disk_cache]") {
  TempDir tmp;
  const fs::path root = tmp.path() / "cache";
  DiskCache cache(root);
  const CacheEntry e = make_entry("kept apart");
  cache.store(e);
  // Someone's files outside the cache, with the names clear() looks for.
  const fs::path victim = tmp.path() / "victim";
  const std::string stray_name = hash_hex("stray") + ".12345.deadbeefdeadbeef";
  fs::create_directories(victim / "d");
  fs::create_directories(victim / stray_name);
  write_all(victim / "d" / "f", "x");
  write_all(victim / stray_name / "f", "x");
  const std::string linked_key = "ab" + hash_hex("linked").substr(2);
  fs::create_directories(victim / linked_key);
  write_all(victim / linked_key / "f", "x");

  std::vector<fs::path> odd;  // what clear() must name and leave
  SECTION("v1/tmp is a link") {
    fs::remove_all(root / "v1" / "tmp");
    fs::create_directory_symlink(victim, root / "v1" / "tmp");
    odd.push_back(root / "v1" / "tmp");
  }
  SECTION("a shard is a link") {
    fs::create_directory_symlink(victim, root / "v1" / "ab");
    odd.push_back(root / "v1" / "ab");
  }
  SECTION("an entry is a link") {
    fs::create_directories(root / "v1" / "ab");
    fs::create_directory_symlink(victim / linked_key, root / "v1" / "ab" / linked_key);
    odd.push_back(root / "v1" / "ab" / linked_key);
  }
  SECTION("tmp holds names and kinds ftattn never makes") {
    const fs::path t = root / "v1" / "tmp";
    fs::create_directories(t / "notes");
    write_all(t / "notes" / "f", "x");
    write_all(t / stray_name, "a file by a temp dir's name");
    fs::create_directory_symlink(victim / stray_name,
                                 t / (hash_hex("link") + ".1.0123456789abcdef"));
    odd = {t / "notes", t / stray_name, t / (hash_hex("link") + ".1.0123456789abcdef")};
  }

  std::size_t leftovers = 99;
  CHECK(cache.list(&leftovers).size() == 1);
  CHECK(leftovers == 0);  // ls says clear removes leftovers: these it does not
  const DiskCache::Cleared cleared = cache.clear();
  CHECK(cleared.entries == 1);
  CHECK(cleared.leftovers == 0);
  std::vector<fs::path> left;
  for (const auto& item : cleared.left) {
    INFO(item.path << ": " << item.reason);
    CHECK(contains(item.reason, "left alone"));
    left.push_back(item.path);
  }
  std::sort(left.begin(), left.end());
  std::sort(odd.begin(), odd.end());
  CHECK(left == odd);
  for (const fs::path& p : odd) CHECK(fs::exists(fs::symlink_status(p)));
  CHECK(read_all(victim / "d" / "f") == "x");
  CHECK(read_all(victim / stray_name / "f") == "x");
  CHECK(read_all(victim / linked_key / "f") == "x");
  CHECK(cache.load(e.key).status == Status::miss);
}

TEST_CASE("DiskCache clear moves a writer's temp dir away before removing it", "[disk_cache]") {
  // A writer may rename its temp dir into place at any moment. Removed under that name,
  // remove_all (which deletes through an open directory) would follow the rename and empty the
  // published entry. Renamed first, the writer's own rename fails and its store() retries.
  TempDir tmp;
  DiskCache cache(tmp.path());
  const CacheEntry e = make_entry("in flight");
  cache.store(e);
  const fs::path t = tmp.path() / "v1" / "tmp";
  const std::string writing = e.key + ".4242.0123456789abcdef";
  fs::create_directories(t / writing);
  write_all(t / writing / "kernel.cu", e.source);

  const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::inotify_add_watch(fd, t.c_str(), IN_MOVED_FROM | IN_DELETE) >= 0);
  const DiskCache::Cleared cleared = cache.clear();
  std::vector<std::string> events;  // "moved <name>" or "deleted <name>", in order
  alignas(inotify_event) char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
    for (char* p = buf; p < buf + n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(p);
      if (ev->len > 0) {
        events.push_back(std::string((ev->mask & IN_MOVED_FROM) != 0 ? "moved " : "deleted ") +
                         ev->name);
      }
      p += sizeof(inotify_event) + ev->len;
    }
  }
  ::close(fd);
  INFO("events: " << events.size());
  for (const auto& ev : events) UNSCOPED_INFO(ev);
  CHECK(std::find(events.begin(), events.end(), "moved " + writing) != events.end());
  CHECK(std::find(events.begin(), events.end(), "deleted " + writing) == events.end());
  CHECK(cleared.entries == 1);
  CHECK(cleared.leftovers == 1);
  CHECK(cleared.left.empty());
  CHECK(fs::is_empty(t));
}

TEST_CASE("DiskCache store racing clear publishes whole entries or none", "[disk_cache]") {
  TempDir tmp;
  const CacheEntry e = make_entry("raced");
  std::atomic<bool> done{false};
  std::atomic<int> corrupt{0};
  std::thread clearer([&] {
    DiskCache cache(tmp.path());
    while (!done) cache.clear();
  });
  DiskCache cache(tmp.path());
  int failed = 0;
  for (int round = 0; round < 300; ++round) {
    try {
      cache.store(e);
    } catch (const CacheError&) {
      ++failed;  // cleared away three times in a row: an error, but never a bad entry
    }
    // Either clear() has removed it since (a miss) or it is whole: never damaged.
    const auto r = cache.load(e.key, DiskCache::OnDamage::keep);
    if (r.status == Status::corrupt) ++corrupt;
  }
  done = true;
  clearer.join();
  INFO("stores that gave up: " << failed);
  CHECK(corrupt == 0);
}

TEST_CASE("DiskCache list and clear report a cache they cannot read", "[disk_cache]") {
  TempDir tmp;
  const CacheEntry e = make_entry("behind a limit");
  DiskCache(tmp.path()).store(e);
  // Every descriptor taken: v1/ cannot be opened (EMFILE), for root too. That is an error, not
  // an empty cache. In a child, so the limit does not outlive the test.
  const int code = in_child([&] {
    if (const int failed = take_every_descriptor()) return failed;
    DiskCache cache(tmp.path());
    const auto says_why = [&](const CacheError& err) {
      return contains(err.what(), (tmp.path() / "v1").string()) &&
             contains(err.what(), os_error(EMFILE));
    };
    try {
      cache.list();
      return 1;
    } catch (const CacheError& err) {
      if (!says_why(err)) return 2;
    }
    try {
      cache.clear();
      return 3;
    } catch (const CacheError& err) {
      if (!says_why(err)) return 4;
    }
    return 0;
  });
  CHECK(code == 0);  // 1, 3: an unreadable cache passed for an empty one
  CHECK(DiskCache(tmp.path()).load(e.key).status == Status::hit);
}

TEST_CASE("DiskCache clear reports an entry it could not remove", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  const CacheEntry e = make_entry("not yours");
  cache.store(e);
  const fs::path dir = cache.entry_dir(e.key);
  // Neither the shard nor the entry writable: the entry can be neither moved nor emptied. Root
  // could still, so a root run tries as user nobody, in a child.
  fs::permissions(dir.parent_path(), fs::perms(0555));
  fs::permissions(dir, fs::perms(0555));
  const int code = in_child([&] {
    if (::geteuid() == 0 &&
        (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)) {
      return 10;
    }
    const DiskCache::Cleared cleared = DiskCache(tmp.path()).clear();
    if (cleared.entries != 0) return 1;  // the failure counted as a removal
    if (cleared.left.size() != 1 || cleared.left[0].path != dir) return 2;
    return contains(cleared.left[0].reason, os_error(EACCES)) ? 0 : 3;
  });
  fs::permissions(dir.parent_path(), fs::perms(0755));
  fs::permissions(dir, fs::perms(0755));
  CHECK(code == 0);
  const auto r = cache.load(e.key);
  REQUIRE(r.status == Status::hit);
  require_same(*r.entry, e);
}

TEST_CASE("DiskCache concurrent stores of the same key", "[disk_cache]") {
  TempDir tmp;
  const CacheEntry e = make_entry("contended");
  constexpr int kThreads = 8;
  for (int round = 0; round < 5; ++round) {
    DiskCache(tmp.path()).clear();
    std::latch start(kThreads);
    std::atomic<int> errors{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        DiskCache cache(tmp.path());  // one object per thread, as separate processes would
        start.arrive_and_wait();
        try {
          cache.store(e);
          if (cache.load(e.key).status != Status::hit) ++errors;
        } catch (...) {
          ++errors;
        }
      });
    }
    for (auto& t : threads) t.join();
    CHECK(errors == 0);
    DiskCache cache(tmp.path());
    const auto r = cache.load(e.key);
    REQUIRE(r.status == Status::hit);
    require_same(*r.entry, e);
    CHECK(cache.list().size() == 1);
    CHECK(fs::is_empty(tmp.path() / "v1" / "tmp"));  // losers cleaned up after themselves
  }
}

TEST_CASE("DiskCache concurrent stores of different keys", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  constexpr int kThreads = 8;
  constexpr int kPerThread = 10;
  std::latch start(kThreads);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < kPerThread; ++i) {
        try {
          cache.store(make_entry(std::to_string(t) + "_" + std::to_string(i)));
        } catch (...) {
          ++errors;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(errors == 0);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      const CacheEntry e = make_entry(std::to_string(t) + "_" + std::to_string(i));
      const auto r = cache.load(e.key);
      REQUIRE(r.status == Status::hit);
      require_same(*r.entry, e);
    }
  }
  CHECK(cache.list().size() == kThreads * kPerThread);
}

TEST_CASE("DiskCache::default_root honours the environment", "[disk_cache]") {
  TempDir tmp;
  const fs::path custom = tmp.path() / "custom cache";
  {
    ScopedEnv env("FTATTN_CACHE_DIR", custom.c_str());
    CHECK(DiskCache::default_root() == custom);
  }
  {
    ScopedEnv env("FTATTN_CACHE_DIR", "");
    ScopedEnv xdg("XDG_CACHE_HOME", tmp.path().c_str());
    CHECK(DiskCache::default_root() == tmp.path() / "ftattn");
  }
  {
    ScopedEnv env("FTATTN_CACHE_DIR", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv home("HOME", tmp.path().c_str());
    CHECK(DiskCache::default_root() == tmp.path() / ".cache" / "ftattn");
  }
  {
    ScopedEnv env("FTATTN_CACHE_DIR", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv home("HOME", nullptr);
    ScopedEnv tmpdir("TMPDIR", tmp.path().c_str());
    const fs::path root = DiskCache::default_root();
    CHECK(fs::equivalent(root.parent_path(), fs::temp_directory_path()));
    CHECK(root.filename().string().rfind("ftattn", 0) == 0);
  }
}

TEST_CASE("DiskCache::default_root trusts only a private fallback dir in the temp dir",
          "[disk_cache]") {
  TempDir tmp;
  ScopedEnv env("FTATTN_CACHE_DIR", nullptr);
  ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv home("HOME", nullptr);
  ScopedEnv tmpdir("TMPDIR", tmp.path().c_str());
  const fs::path expected = tmp.path() / ("ftattn-cache-" + std::to_string(::getuid()));

  // Created at once, for this user only.
  REQUIRE(DiskCache::default_root() == expected);
  struct stat st {};
  REQUIRE(::lstat(expected.c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(st.st_uid == ::getuid());
  CHECK(DiskCache::default_root() == expected);  // and accepted the next time

  // What another user of the temp dir could have put there first.
  fs::remove_all(expected);
  const fs::path elsewhere = tmp.path() / "attacker";
  fs::create_directories(elsewhere);
  SECTION("a symbolic link to their directory") {
    fs::create_directory_symlink(elsewhere, expected);
  }
  SECTION("a directory others can write") {
    fs::create_directories(expected);
    fs::permissions(expected, fs::perms::all);
  }
  SECTION("a file") { write_all(expected, "x"); }
  SECTION("a directory of another user") {
    if (::geteuid() != 0) {
      WARN("not root: cannot make a directory of another user, so this case is not checked");
      return;
    }
    fs::create_directories(expected);
    fs::permissions(expected, fs::perms::owner_all);
    REQUIRE(::chown(expected.c_str(), ::getuid() + 1, ::getgid()) == 0);
  }
  try {
    DiskCache::default_root();
    FAIL("default_root accepted " << expected);
  } catch (const CacheError& e) {
    CHECK(contains(e.what(), expected.string()));
    CHECK(contains(e.what(), "FTATTN_CACHE_DIR"));
  }
}

TEST_CASE("DiskCache rejects invalid keys", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path() / "root");
  CacheEntry e = make_entry("bad");
  const std::string good = e.key;
  for (const std::string& bad :
       {std::string("../x"), std::string("ABC"), good.substr(0, 31), good + "0",
        std::string(32, 'A'), "../" + good.substr(3), std::string(), good.substr(0, 30) + "/."}) {
    INFO("key: " << bad);
    CHECK_THROWS_AS(cache.load(bad), CacheError);
    CHECK_THROWS_AS(cache.lock(bad), CacheError);
    CHECK_THROWS_AS(cache.entry_dir(bad), CacheError);
    e.key = bad;
    CHECK_THROWS_AS(cache.store(e), CacheError);
  }
  // Nothing was written anywhere, inside or outside the root.
  CHECK_FALSE(fs::exists(tmp.path() / "root"));
  CHECK(fs::is_empty(tmp.path()));
}

TEST_CASE("DiskCache store into an unwritable root throws CacheError", "[disk_cache]") {
  TempDir tmp;
  // A regular file where a directory should be: fails even for root, unlike chmod.
  write_all(tmp.path() / "file", "x");
  DiskCache cache(tmp.path() / "file" / "cache");
  const CacheEntry e = make_entry("nowhere");
  try {
    cache.store(e);
    FAIL("store did not throw");
  } catch (const CacheError& err) {
    const std::string what = err.what();
    CHECK(contains(what, (tmp.path() / "file").string()));
    CHECK(contains(what, os_error(ENOTDIR)));
    // The hint names every real way out: no CLI switch turns the cache off.
    CHECK(contains(what, "FTATTN_CACHE_DIR"));
    CHECK(contains(what, "--cache-dir"));
    CHECK(contains(what, "RuntimeOptions::cache_dir"));
    CHECK(contains(what, "RuntimeOptions::disk_cache = false"));
    CHECK_FALSE(contains(what, "turn the disk cache off"));
  }
  // No lock to be had is not an error: the caller reads without writing.
  DiskCache::KeyLock lock;
  REQUIRE_NOTHROW(lock = cache.lock(e.key));
  CHECK_FALSE(lock.owns_lock());
  CHECK(contains(lock.failure(), (tmp.path() / "file").string()));
  CHECK(cache.load(e.key).status == Status::miss);
}

TEST_CASE("DiskCache store on a full disk says to free space, not to find a writable dir",
          "[disk_cache]") {
  TempDir tmp;
  CacheEntry e = make_entry("too big");
  e.cubin.assign(1 << 20, 'x');
  // RLIMIT_FSIZE makes writes past 64 KiB fail with EFBIG, as a full disk fails with ENOSPC,
  // even for root. In a child, so the limit does not outlive the test.
  const fs::path message_file = tmp.path() / "message.txt";
  const int code = in_child([&] {
    const std::string message = [&] {
      std::signal(SIGXFSZ, SIG_IGN);
      const rlimit limit{64 << 10, 64 << 10};
      if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return std::string("setrlimit failed");
      try {
        DiskCache(tmp.path() / "cache").store(e);
        return std::string("store did not throw");
      } catch (const CacheError& err) {
        return std::string(err.what());
      }
    }();
    std::FILE* f = std::fopen(message_file.c_str(), "w");
    if (f == nullptr) return 2;
    std::fputs(message.substr(0, 4000).c_str(), f);  // well under the limit
    std::fclose(f);
    return 0;
  });
  REQUIRE(code == 0);
  const std::string what = read_all(message_file);
  INFO(what);
  CHECK(contains(what, os_error(EFBIG)));
  CHECK(contains(what, "free space"));
  CHECK(contains(what, "--cache-dir"));
  CHECK_FALSE(contains(what, "you can write"));
  CHECK_FALSE(contains(what, "disk_cache = false"));
}

TEST_CASE("DiskCache load keeps an entry it cannot read and reports a miss", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  const CacheEntry e = make_entry("unreadable");
  cache.store(e);
  const fs::path dir = cache.entry_dir(e.key);

  // A directory where a file should be: reading it fails with EISDIR, for root too, like any
  // read error that is not a missing file (EACCES, EMFILE, EIO...).
  const std::string name =
      GENERATE(as<std::string>{}, "kernel.cubin", "manifest.json", "meta.json");
  const std::string saved = read_all(dir / name);
  fs::remove(dir / name);
  fs::create_directory(dir / name);

  const auto r = cache.load(e.key);
  CHECK(r.status == Status::miss);
  CHECK_FALSE(r.entry.has_value());
  CHECK(contains(r.reason, name));
  CHECK(contains(r.reason, os_error(EISDIR)));
  CHECK(fs::exists(dir / "kernel.cu"));  // not discarded
  CHECK(fs::is_directory(dir / name));

  // store() does not replace what it cannot judge either, and says why.
  try {
    cache.store(e);
    FAIL("store replaced an entry it could not read");
  } catch (const CacheError& err) {
    CHECK(contains(err.what(), "cannot be read"));
    CHECK(contains(err.what(), name));
  }
  CHECK(fs::is_directory(dir / name));

  // Once readable again it is a hit: nothing was lost.
  fs::remove(dir / name);
  write_all(dir / name, saved);
  const auto again = cache.load(e.key);
  REQUIRE(again.status == Status::hit);
  require_same(*again.entry, e);
}

TEST_CASE("DiskCache load with too many open files is a miss and the entry survives",
          "[disk_cache]") {
  TempDir tmp;
  const CacheEntry e = make_entry("emfile");
  DiskCache(tmp.path()).store(e);
  // The audit's repro, `ulimit -n 4`, in a child: every descriptor used, then load().
  const int code = in_child([&] {
    if (const int failed = take_every_descriptor()) return failed;
    const DiskCache::LoadResult r = DiskCache(tmp.path()).load(e.key);
    if (r.status == Status::corrupt) return 1;
    if (r.status == Status::hit) return 2;
    return contains(r.reason, os_error(EMFILE)) ? 0 : 3;
  });
  CHECK(code == 0);  // 1: taken for damage (and deleted)
  DiskCache cache(tmp.path());
  const auto r = cache.load(e.key);
  REQUIRE(r.status == Status::hit);
  require_same(*r.entry, e);
}

TEST_CASE("DiskCache load that may not discard reports damage and keeps the entry",
          "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  const CacheEntry e = make_entry("kept damaged");
  cache.store(e);
  const fs::path cubin = cache.entry_dir(e.key) / "kernel.cubin";
  fs::resize_file(cubin, 1);
  CHECK(cache.load(e.key, DiskCache::OnDamage::keep).status == Status::corrupt);
  CHECK(fs::exists(cubin));
  CHECK(cache.load(e.key).status == Status::corrupt);
  CHECK_FALSE(fs::exists(cubin));
}

TEST_CASE("DiskCache::KeyLock excludes holders of the same key only", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  const std::string key_a = hash_hex("a");
  const std::string key_b = hash_hex("b");

  SECTION("same key: mutually exclusive") {
    std::atomic<int> inside{0};
    std::atomic<int> overlaps{0};
    std::atomic<int> not_owned{0};
    // Read and written as two separate steps: updates get lost unless the lock excludes.
    std::atomic<int> unguarded{0};
    constexpr int kThreads = 4;
    constexpr int kIters = 100;
    const auto worker = [&] {  // no Catch2 assertions here: Catch2 is not thread-safe
      DiskCache own(tmp.path());
      for (int i = 0; i < kIters; ++i) {
        auto lock = own.lock(key_a);
        if (!lock.owns_lock()) ++not_owned;
        if (inside.fetch_add(1) != 0) ++overlaps;
        const int seen = unguarded.load();
        std::this_thread::sleep_for(std::chrono::microseconds(20));  // widen the window
        unguarded.store(seen + 1);
        inside.fetch_sub(1);
      }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    CHECK(not_owned == 0);
    CHECK(overlaps == 0);
    CHECK(unguarded == kThreads * kIters);
    // Lock files stay, in their own directory.
    CHECK(fs::exists(tmp.path() / "locks" / (key_a + ".lock")));
  }

  SECTION("same key: a second locker waits until release") {
    auto held = cache.lock(key_a);
    auto waiter = std::async(std::launch::async, [&] { return DiskCache(tmp.path()).lock(key_a); });
    CHECK(waiter.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
    held.unlock();
    CHECK_FALSE(held.owns_lock());
    REQUIRE(waiter.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    CHECK(waiter.get().owns_lock());
  }

  SECTION("different keys do not block") {
    auto held = cache.lock(key_a);
    auto other = std::async(std::launch::async, [&] { return cache.lock(key_b).owns_lock(); });
    const bool finished = other.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    held.unlock();  // lets a wrongly blocked waiter finish so the test cannot hang
    CHECK(finished);
    CHECK(other.get());
  }

  SECTION("moving a lock transfers ownership") {
    DiskCache::KeyLock moved;
    CHECK_FALSE(moved.owns_lock());
    {
      auto lock = cache.lock(key_a);
      moved = std::move(lock);
      CHECK_FALSE(lock.owns_lock());
    }  // the moved-from lock's destructor must not release
    CHECK(moved.owns_lock());
    auto waiter = std::async(std::launch::async, [&] { return DiskCache(tmp.path()).lock(key_a); });
    CHECK(waiter.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
    moved = DiskCache::KeyLock();  // releases
    REQUIRE(waiter.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  }
}

TEST_CASE("DiskCache::lock makes lock files others can use and locks read-only ones",
          "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  const std::string key = hash_hex("shared");
  const fs::path file = tmp.path() / "locks" / (key + ".lock");
  {
    const auto lock = cache.lock(key);
    REQUIRE(lock.owns_lock());
    CHECK(lock.failure().empty());
  }
  // Made for everyone whatever the umask, so another user of a shared cache can lock it.
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0666);

  // A prebuilt cache nobody may write: flock() needs only a read-only descriptor.
  fs::permissions(file, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(tmp.path() / "locks", fs::perms::owner_read | fs::perms::owner_exec |
                                            fs::perms::group_read | fs::perms::group_exec |
                                            fs::perms::others_read | fs::perms::others_exec);
  if (const int fd = ::open(file.c_str(), O_RDWR); fd >= 0) {
    ::close(fd);
    WARN(
        "running as root, where permissions do not stop writes: only the non-root run shows "
        "that the lock file is opened read-only");
  }
  {
    const auto lock = cache.lock(key);
    CHECK(lock.owns_lock());
    CHECK(lock.failure().empty());
  }
  fs::permissions(tmp.path() / "locks", fs::perms::owner_all);
}

TEST_CASE("DiskCache::lock without any lock to be had owns nothing and says why", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  const std::string key = hash_hex("nolock");
  SECTION("locks is a file") { write_all(tmp.path() / "locks", "x"); }
  SECTION("the lock file is a FIFO, which must not hang the open") {
    fs::create_directories(tmp.path() / "locks");
    REQUIRE(::mkfifo((tmp.path() / "locks" / (key + ".lock")).c_str(), 0600) == 0);
  }
  SECTION("the lock file is a dangling symbolic link") {
    fs::create_directories(tmp.path() / "locks");
    fs::create_symlink(tmp.path() / "nowhere", tmp.path() / "locks" / (key + ".lock"));
  }
  auto pending = std::async(std::launch::async, [&] { return cache.lock(key); });
  REQUIRE(pending.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  const DiskCache::KeyLock lock = pending.get();
  CHECK_FALSE(lock.owns_lock());
  CHECK(contains(lock.failure(), (tmp.path() / "locks").string()));
  CHECK_FALSE(fs::exists(tmp.path() / "nowhere"));
}

TEST_CASE("DiskCache::lock says what it waits for when the lock is busy", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  const std::string key = hash_hex("busy");
  const fs::path file = tmp.path() / "locks" / (key + ".lock");

  const std::string free_err = capture_stderr([&] { CHECK(cache.lock(key, "k").owns_lock()); });
  CHECK(free_err.empty());  // no noise when nobody holds it

  auto held = cache.lock(key);
  const std::string err = capture_stderr([&] {
    auto waiter = std::async(std::launch::async,
                             [&] { return DiskCache(tmp.path()).lock(key, "ftattn_fwd_test"); });
    const bool blocked =
        waiter.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout;
    held.unlock();
    REQUIRE(waiter.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    CHECK(blocked);
    CHECK(waiter.get().owns_lock());
  });
  CHECK(err == "ftattn: waiting for another process compiling ftattn_fwd_test (lock " +
                   file.string() + ")\n");

  // Without a name, the key names it.
  held = cache.lock(key);
  const std::string by_key = capture_stderr([&] {
    auto waiter = std::async(std::launch::async, [&] { return DiskCache(tmp.path()).lock(key); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    held.unlock();
    REQUIRE(waiter.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  });
  CHECK(contains(by_key, "compiling " + key + " (lock "));
}
