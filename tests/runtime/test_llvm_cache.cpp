// LLVM-route cache entries and the compiler that built them: keys cannot name it (a machine
// without LLVM must find them), so each entry records it, and where a plugin can compile, an
// entry recording another compiler, or none, is compiled again and replaced. The old compiler is
// played by entries written here; the one on this machine by the real plugin or a stand-in.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "ftattn/codegen.hpp"
#include "runtime/cache_key.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/hash.hpp"
#include "runtime/kernel_builder.hpp"
#include "runtime/llvm_route.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ftattn;
namespace fs = std::filesystem;
using runtime::BuildOutcome;
using runtime::CacheEntry;
using runtime::DiskCache;
using runtime::LlvmCompiler;

namespace {

using ftattn::test::TempDir;

KernelConfig llvm_config() {
  KernelConfig c = test::tile_config(64, 64, 64, 4, 2, Arch::parse("sm_80"));
  c.backend = Backend::llvm;
  return c;
}

bool have_llvm_route() {
  if (llvm_route_built()) return true;
  WARN("built without the LLVM route: LLVM-route configs do not validate here");
  return false;
}

constexpr const char* kOldPtx = "// PTX the old compiler made\n";

// What an earlier compiler left in the cache for `config`: `recorded` its identity, none when
// null (an entry written before entries recorded it).
CacheEntry old_entry(const KernelConfig& config, const char* recorded) {
  const codegen::KernelSource source = codegen::generate(config);
  CacheEntry e;
  e.key = runtime::cache_key(source);
  e.name = source.name;
  e.source = source.text;
  e.ptx = kOldPtx;
  e.cubin = "old cubin";
  e.meta = {{"config", source.name}, {"compile_seconds", 0.5}};
  if (recorded != nullptr) {
    e.meta["compiler"] = "clang 21.1.0";
    e.meta["llvm_compiler"] = recorded;
  }
  return e;
}

BuildOutcome build(DiskCache& cache, const LlvmCompiler& here) {
  return runtime::build_kernel(llvm_config(), &cache, runtime::StoreFailure::report, here);
}

// `out` compiled afresh over the stale entry at `key`, which the cache now holds with out's PTX,
// recorded as compiled by `identity`.
void check_replaced(DiskCache& cache, const std::string& key, const BuildOutcome& out,
                    const std::string& identity) {
  CHECK(out.stale_entry);
  CHECK(out.compiled);
  CHECK(out.stored);
  CHECK_FALSE(out.disk_hit);
  CHECK(out.kernel->ptx != kOldPtx);
  const DiskCache::LoadResult now = cache.load(key);
  REQUIRE(now.status == DiskCache::LoadStatus::hit);
  CHECK(now.entry->ptx == out.kernel->ptx);
  CHECK(now.entry->meta["llvm_compiler"] == identity);
}

}  // namespace

TEST_CASE("an LLVM-route entry another LLVM compiled is compiled again and replaced",
          "[cache][llvm]") {
  if (!have_llvm_route()) return;
  const LlvmCompiler& here = runtime::llvm_compiler();
  REQUIRE_FALSE(here.identity.empty());  // this build's plugin opens
  TempDir dir;
  DiskCache cache(dir.path());
  const CacheEntry stale = old_entry(llvm_config(), "Debian clang version 21.1.0 (1~deb12u1)");
  CacheEntry bystander = stale;  // another kernel's entry must not suffer
  bystander.key = runtime::hash_hex("bystander");
  cache.store(stale);
  cache.store(bystander);

  const BuildOutcome out = runtime::build_kernel(llvm_config(), &cache);
  check_replaced(cache, stale.key, out, here.identity);
  CHECK(cache.load(stale.key).entry->meta["compiler"] == here.version);
  CHECK(cache.load(bystander.key).entry->ptx == kOldPtx);
  CHECK(fs::is_empty(dir.path() / "v1" / "tmp"));  // the old entry is gone, not left over

  // Recorded by this compiler now: served.
  const BuildOutcome again = runtime::build_kernel(llvm_config(), &cache);
  CHECK(again.disk_hit);
  CHECK_FALSE(again.compiled);
  CHECK_FALSE(again.stale_entry);
}

TEST_CASE("an LLVM-route entry that records the compiler here is served as it is",
          "[cache][llvm]") {
  if (!have_llvm_route()) return;
  TempDir dir;
  DiskCache cache(dir.path());
  cache.store(old_entry(llvm_config(), "test clang 99"));
  const BuildOutcome out = build(cache, {"clang 99.0.0", "test clang 99"});
  CHECK(out.disk_hit);
  CHECK_FALSE(out.compiled);
  CHECK_FALSE(out.stale_entry);
  CHECK(out.kernel->ptx == kOldPtx);
  CHECK(out.kernel->from_disk_cache);
}

TEST_CASE("an LLVM-route entry that records no compiler is compiled again where one is",
          "[cache][llvm]") {
  if (!have_llvm_route()) return;
  TempDir dir;
  DiskCache cache(dir.path());
  const CacheEntry unrecorded = old_entry(llvm_config(), nullptr);  // written by an older ftattn
  cache.store(unrecorded);
  const LlvmCompiler here{"clang 99.0.0", "test clang 99"};
  check_replaced(cache, unrecorded.key, build(cache, here), here.identity);
  CHECK(build(cache, here).disk_hit);
}

TEST_CASE("without a plugin, LLVM-route entries are served whatever compiler they record",
          "[cache][llvm]") {
  if (!have_llvm_route()) return;
  // A GPU machine without LLVM given a cache filled where LLVM is: nothing here could compile
  // the kernel again, so the entry is the only binary there is.
  const LlvmCompiler nothing_here;
  for (const char* recorded :
       {"Debian clang version 21.1.0 (1~deb12u1)", static_cast<const char*>(nullptr)}) {
    INFO((recorded != nullptr ? recorded : "no record"));
    TempDir dir;
    DiskCache cache(dir.path());
    const CacheEntry filled_elsewhere = old_entry(llvm_config(), recorded);
    cache.store(filled_elsewhere);
    const BuildOutcome out = build(cache, nothing_here);
    CHECK(out.disk_hit);
    CHECK_FALSE(out.compiled);
    CHECK_FALSE(out.stale_entry);
    CHECK(out.kernel->ptx == kOldPtx);
    CHECK(cache.load(filled_elsewhere.key).entry->meta == filled_elsewhere.meta);  // untouched
  }
}
