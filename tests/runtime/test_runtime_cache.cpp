// Runtime + disk cache: hit, miss, a damaged entry, many threads on one config, and keys that
// follow content.
#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "ftattn/codegen.hpp"
#include "ftattn/runtime.hpp"
#include "runtime/cache_key.hpp"
#include "runtime/disk_cache.hpp"
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
