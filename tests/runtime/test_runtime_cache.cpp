// Runtime + disk cache: hit, miss, a damaged entry, many threads on one config, and keys that
// follow content.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "ftattn/codegen.hpp"
#include "ftattn/runtime.hpp"
#include "runtime/cache_key.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/kernel_builder.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ftattn;
namespace fs = std::filesystem;

namespace {

using ftattn::test::TempDir;

KernelConfig small_config() {
  KernelConfig c;
  c.head_dim = 64;
  c.precision = Precision::f16;
  c.mask = Mask::causal;
  c.arch = Arch{80, false};
  return with_defaults(c, c.arch);
}

// Where the cache keeps an entry: the cache's own answer, not a copy of its layout.
fs::path entry_dir(const fs::path& root, const std::string& key) {
  return runtime::DiskCache(root).entry_dir(key);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Changes the working directory for one scope.
class ScopedCwd {
 public:
  explicit ScopedCwd(const fs::path& dir) : old_(fs::current_path()) { fs::current_path(dir); }
  ~ScopedCwd() {
    std::error_code ec;
    fs::current_path(old_, ec);
  }
  ScopedCwd(const ScopedCwd&) = delete;
  ScopedCwd& operator=(const ScopedCwd&) = delete;

 private:
  fs::path old_;
};

}  // namespace

TEST_CASE("a second runtime on the same cache dir loads from disk without NVRTC", "[cache]") {
  TempDir dir;
  std::shared_ptr<const CompiledKernel> first, second;
  {
    Runtime rt(RuntimeOptions{dir.path(), true});
    first = rt.compile(small_config());
    CHECK(rt.stats().compiles == 1);
    CHECK(rt.stats().disk_hits == 0);
    CHECK_FALSE(first->from_disk_cache);
    // The same runtime serves it from memory afterwards.
    CHECK(rt.compile(small_config()) == first);
    CHECK(rt.stats().memory_hits == 1);
  }
  {
    Runtime rt(RuntimeOptions{dir.path(), true});
    second = rt.compile(small_config());
    CHECK(rt.stats().compiles == 0);
    CHECK(rt.stats().disk_hits == 1);
    CHECK(second->from_disk_cache);
  }
  CHECK(second->cubin == first->cubin);
  CHECK(second->ptx == first->ptx);
  CHECK(second->source == first->source);
  CHECK(second->cache_key == first->cache_key);
  CHECK(second->resources.registers == first->resources.registers);
  CHECK(second->resources.registers > 0);
  CHECK(fs::exists(entry_dir(dir.path(), first->cache_key) / "manifest.json"));
}

TEST_CASE("a truncated or altered cubin is detected and rebuilt, never loaded", "[cache]") {
  TempDir dir;
  std::string key, good_cubin;
  {
    Runtime rt(RuntimeOptions{dir.path(), true});
    auto k = rt.compile(small_config());
    key = k->cache_key;
    good_cubin = k->cubin;
  }
  const fs::path cubin = entry_dir(dir.path(), key) / "kernel.cubin";
  REQUIRE(fs::exists(cubin));

  SECTION("truncated") { fs::resize_file(cubin, fs::file_size(cubin) / 2); }
  SECTION("one byte flipped") {
    std::fstream f(cubin, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.get(c);
    f.seekp(100);
    f.put(static_cast<char>(c ^ 0x20));
  }
  SECTION("manifest missing") { fs::remove(entry_dir(dir.path(), key) / "manifest.json"); }

  {
    Runtime rt(RuntimeOptions{dir.path(), true});
    auto k = rt.compile(small_config());
    CHECK(rt.stats().corrupt_entries + rt.stats().compiles >= 1);
    CHECK(rt.stats().compiles == 1);
    CHECK(rt.stats().disk_hits == 0);
    CHECK(k->cubin == good_cubin);
  }
  {
    Runtime rt(RuntimeOptions{dir.path(), true});
    auto k = rt.compile(small_config());
    CHECK(rt.stats().disk_hits == 1);  // the rebuilt entry is whole again
    CHECK(k->cubin == good_cubin);
  }
}

TEST_CASE("many threads asking for one new config compile it once", "[cache][threads]") {
  TempDir dir;
  Runtime rt(RuntimeOptions{dir.path(), true});
  constexpr int kThreads = 8;
  std::vector<std::shared_ptr<const CompiledKernel>> got(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      got[i] = rt.compile(small_config());
    });
  for (auto& t : threads) t.join();
  CHECK(rt.stats().compiles == 1);
  CHECK(rt.stats().memory_hits == kThreads - 1);
  for (const auto& k : got) CHECK(k == got[0]);
}

TEST_CASE("two runtimes compiling the same config concurrently leave one whole entry",
          "[cache][threads]") {
  TempDir dir;
  Runtime a(RuntimeOptions{dir.path(), true}), b(RuntimeOptions{dir.path(), true});
  std::shared_ptr<const CompiledKernel> ka, kb;
  std::thread ta([&] { ka = a.compile(small_config()); });
  std::thread tb([&] { kb = b.compile(small_config()); });
  ta.join();
  tb.join();
  // The per-key lock makes the second wait and then read what the first wrote.
  CHECK(a.stats().compiles + b.stats().compiles == 1);
  CHECK(ka->cubin == kb->cubin);
  Runtime c(RuntimeOptions{dir.path(), true});
  c.compile(small_config());
  CHECK(c.stats().disk_hits == 1);
}

TEST_CASE("the cache key follows content: source, options and arch", "[cache]") {
  const KernelConfig c = small_config();
  codegen::KernelSource src = codegen::generate(c);
  const std::string key = runtime::cache_key(src);
  CHECK(key.size() == 32);
  CHECK(runtime::cache_key(codegen::generate(c)) == key);

  codegen::KernelSource edited = src;
  edited.text += "\n";
  CHECK(runtime::cache_key(edited) != key);
  codegen::KernelSource more_options = src;
  more_options.options.push_back("-G");
  CHECK(runtime::cache_key(more_options) != key);
  KernelConfig hopper = c;
  hopper.arch = Arch{90, true};
  CHECK(runtime::cache_key(codegen::generate(hopper)) != key);
}

TEST_CASE("a runtime without disk cache compiles and keeps nothing on disk", "[cache]") {
  TempDir dir;
  Runtime rt(RuntimeOptions{dir.path(), false});
  auto k = rt.compile(small_config());
  CHECK(k->cubin.size() > 0);
  CHECK(rt.stats().compiles == 1);
  CHECK(fs::is_empty(dir.path()));
}

TEST_CASE("attention without a GPU says so, and resolve refuses a head_dim the problem lacks",
          "[cache]") {
  TempDir dir;
  Runtime rt(RuntimeOptions{dir.path(), true});
  const Problem problem = Problem::bhsd(1, 2, 2, 64, 64, 64);
  KernelConfig open;
  if (!rt.has_device()) {
    // It said "no GPU to take the arch from: give KernelConfig::arch" (a ConfigError).
    CHECK_THROWS_AS(rt.attention(problem, nullptr, nullptr, nullptr, nullptr, nullptr, open),
                    NoDeviceError);
    KernelConfig d64 = open;
    d64.head_dim = 64;
    CHECK_THROWS_AS(rt.kernel(d64), NoDeviceError);
  }
  // Found before a compile and a load that the launch would refuse.
  KernelConfig other = open;
  other.head_dim = 128;
  other.arch = Arch{90, true};
  REQUIRE_CONFIG_ERROR(rt.resolve(other, &problem),
                       "problem head_dim 64 does not match the kernel config's head_dim 128");
  CHECK(rt.stats().compiles == 0);
}

TEST_CASE("compile without a GPU needs an arch and says so", "[cache]") {
  TempDir dir;
  Runtime rt(RuntimeOptions{dir.path(), true});
  if (rt.has_device()) return;  // the rule only applies on machines without a GPU
  KernelConfig c;
  c.head_dim = 128;
  CHECK_THROWS_AS(rt.compile(c), ConfigError);
  c.arch = Arch{90, true};
  auto k = rt.compile(c);
  CHECK(k->config.is_complete());
  CHECK(k->name.find("sm90a") != std::string::npos);
}

TEST_CASE("a cache that cannot be locked still serves hits and is written by nobody", "[cache]") {
  TempDir dir;
  std::string key;
  {
    Runtime rt(RuntimeOptions{dir.path(), true});
    key = rt.compile(small_config())->cache_key;
  }
  // No lock file can be opened or made: a read-only or shared prebuilt cache, in effect.
  fs::remove_all(dir.path() / "locks");
  std::ofstream(dir.path() / "locks") << "not a directory";

  Runtime rt(RuntimeOptions{dir.path(), true});
  std::shared_ptr<const CompiledKernel> k;
  REQUIRE_NOTHROW(k = rt.compile(small_config()));
  CHECK(rt.stats().disk_hits == 1);
  CHECK(rt.stats().compiles == 0);
  CHECK(k->from_disk_cache);

  // A miss compiles as usual but stores nothing, and says why.
  KernelConfig other = small_config();
  other.mask = Mask::none;
  runtime::DiskCache cache(dir.path());
  const runtime::BuildOutcome out =
      runtime::build_kernel(other, &cache, runtime::StoreFailure::report);
  CHECK(out.compiled);
  CHECK_FALSE(out.stored);
  CHECK(contains(out.store_error, (dir.path() / "locks").string()));
  CHECK_FALSE(fs::exists(entry_dir(dir.path(), out.kernel->cache_key)));

  // Nor does it remove a damaged entry it finds: that is a write too.
  const fs::path cubin = entry_dir(dir.path(), key) / "kernel.cubin";
  fs::resize_file(cubin, 10);
  const runtime::BuildOutcome damaged =
      runtime::build_kernel(small_config(), &cache, runtime::StoreFailure::report);
  CHECK(damaged.corrupt_entry);
  CHECK(damaged.compiled);
  CHECK(fs::file_size(cubin) == 10);
}

TEST_CASE("build_kernel says when the compiled kernel could not be stored", "[cache]") {
  TempDir dir;
  // A file where the cache's v1/ directory belongs: fails for root too, unlike permissions.
  std::ofstream(dir.path() / "v1") << "not a directory";
  runtime::DiskCache cache(dir.path());
  runtime::BuildOutcome out;
  REQUIRE_NOTHROW(out =
                      runtime::build_kernel(small_config(), &cache, runtime::StoreFailure::report));
  CHECK(out.compiled);
  CHECK(out.kernel->cubin.size() > 0);
  CHECK_FALSE(out.stored);
  CHECK(contains(out.store_error, (dir.path() / "v1").string()));

  fs::remove(dir.path() / "v1");
  out = runtime::build_kernel(small_config(), &cache, runtime::StoreFailure::report);
  CHECK(out.stored);
  CHECK(out.store_error.empty());
  out = runtime::build_kernel(small_config(), &cache, runtime::StoreFailure::report);
  CHECK(out.disk_hit);
}

TEST_CASE("the cache key holds the NVRTC library file, not only its major.minor", "[cache]") {
  const runtime::LibraryFile& lib = runtime::nvrtc_library();
  REQUIRE_FALSE(lib.path.empty());
  CHECK(fs::path(lib.path).is_absolute());
  CHECK(fs::is_regular_file(lib.path));  // links resolved
  CHECK(contains(fs::path(lib.path).filename().string(), "nvrtc"));
  CHECK(lib.bytes == fs::file_size(lib.path));
  CHECK(lib.mtime_ns != 0);
  CHECK(&runtime::nvrtc_library() == &lib);  // looked up once

  const codegen::KernelSource src = codegen::generate(small_config());
  const std::string identity = runtime::nvrtc_identity();
  CHECK(identity.rfind(runtime::nvrtc_version() + " ", 0) == 0);
  CHECK(contains(identity, lib.path));
  CHECK(runtime::cache_key(src) == runtime::cache_key(src, identity));
  CHECK(runtime::cache_key(src) == runtime::cache_key(src));  // stable
  // Same major.minor, another build of the library (a patch update): another key.
  const std::string patched = runtime::nvrtc_version() + " " + lib.path + " " +
                              std::to_string(lib.bytes + 1) + " " + std::to_string(lib.mtime_ns);
  CHECK(runtime::cache_key(src, patched) != runtime::cache_key(src));
}

TEST_CASE("NVRTC output is the same from any working directory", "[cache][nvrtc]") {
  TempDir a("ftattn-cwd-a"), b("ftattn-cwd-b");
  const codegen::KernelSource src = codegen::generate(small_config());
  runtime::NvrtcOutput in_a, in_b;
  {
    ScopedCwd cwd(a.path());
    in_a = runtime::compile_with_nvrtc(src);
  }
  {
    ScopedCwd cwd(b.path());
    in_b = runtime::compile_with_nvrtc(src);
  }
  // One key, one binary: shared caches hold the same bytes and no user's directory.
  CHECK(in_a.ptx == in_b.ptx);
  CHECK(in_a.cubin == in_b.cubin);
  CHECK_FALSE(contains(in_a.ptx, a.path().filename().string()));
  CHECK_FALSE(contains(in_a.cubin, a.path().filename().string()));
}

TEST_CASE("a compile error names the compiler whose log it carries", "[cache]") {
  // clang's errors on the LLVM route were printed under '--- NVRTC log ---'.
  const CompileError nvrtc("compiling k failed", "line 1: error");
  CHECK(nvrtc.compiler() == "NVRTC");
  CHECK(std::string(nvrtc.what()).find("\n--- NVRTC log ---\nline 1: error") != std::string::npos);
  const CompileError clang("compiling k failed", "k.cu:3: error", "clang (LLVM route)");
  CHECK(std::string(clang.what()).find("--- clang (LLVM route) log ---") != std::string::npos);
  CHECK(clang.log() == "k.cu:3: error");
}
