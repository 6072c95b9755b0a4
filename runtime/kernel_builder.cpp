#include "runtime/kernel_builder.hpp"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ftattn/codegen.hpp"
#include "ftattn/errors.hpp"
#include "runtime/cache_key.hpp"
#include "runtime/llvm_route.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace ftattn::runtime {
namespace {

nlohmann::json resources_json(const ResourceUsage& r) {
  return {{"registers", r.registers},
          {"spill_stores", r.spill_stores},
          {"spill_loads", r.spill_loads},
          {"stack_frame", r.stack_frame},
          {"static_shared_bytes", r.static_shared_bytes},
          {"dynamic_shared_bytes", r.dynamic_shared_bytes},
          {"threads_per_block", r.threads_per_block}};
}

std::shared_ptr<CompiledKernel> skeleton(const KernelConfig& config,
                                         const codegen::KernelSource& source,
                                         const std::string& key) {
  auto k = std::make_shared<CompiledKernel>();
  k->config = config;
  k->name = source.name;
  k->symbol = source.symbol;
  k->source = source.text;
  k->options = source.options;
  k->cache_key = key;
  return k;
}

void finish_resources(CompiledKernel& k) {
  k.resources = parse_ptxas_log(k.compile_log, k.symbol);
  k.resources.dynamic_shared_bytes = k.config.shared_memory_bytes();
  k.resources.threads_per_block = launch_threads(k.config);
}

// Why a hit on an LLVM-route entry must not be served: it records another compiler than the
// one `here`, or none (written before entries recorded it). Empty when it is current, and
// wherever nothing can compile it (no plugin): there it is the only binary there is, as on a GPU
// machine given a cache filled where LLVM is.
std::string stale_reason(const nlohmann::json& meta, const LlvmCompiler& here) {
  if (here.identity.empty()) return {};
  const auto recorded = meta.is_object() ? meta.find("llvm_compiler") : meta.end();
  if (recorded == meta.end() || !recorded->is_string()) {
    return "it does not record which LLVM compiled it";
  }
  if (*recorded == here.identity) return {};
  return fmt::format("it was compiled by {}, and this machine compiles with {}",
                     recorded->get<std::string>(), here.identity);
}

}  // namespace

BuildOutcome build_kernel(const KernelConfig& config, DiskCache* disk,
                          StoreFailure on_store_failure) {
  // Only LLVM-route kernels ask: that may open the plugin.
  return build_kernel(config, disk, on_store_failure,
                      config.backend == Backend::llvm ? llvm_compiler() : LlvmCompiler{});
}

BuildOutcome build_kernel(const KernelConfig& config, DiskCache* disk,
                          StoreFailure on_store_failure, const LlvmCompiler& llvm) {
  const codegen::KernelSource source = codegen::generate(config);
  const std::string key = cache_key(source);
  BuildOutcome outcome;

  DiskCache::KeyLock lock;  // one compile per key across processes
  if (disk != nullptr) {
    lock = disk->lock(key, source.name);
    if (!lock.owns_lock()) {
      // A read-only or shared cache: hits still serve, but nothing may be written. Said once,
      // not once per kernel.
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        std::cerr << fmt::format(
            "ftattn: warning: cannot lock the disk cache in {} ({}); reading it but not writing "
            "to it\n",
            disk->root().string(), lock.failure());
      }
    }
    DiskCache::LoadResult hit = disk->load(
        key, lock.owns_lock() ? DiskCache::OnDamage::discard : DiskCache::OnDamage::keep);
    std::string stale;
    if (hit.status == DiskCache::LoadStatus::hit && source.backend == Backend::llvm) {
      stale = stale_reason(hit.entry->meta, llvm);
    }
    if (!stale.empty()) {
      outcome.stale_entry = true;
      std::cerr << fmt::format("ftattn: cache entry {} for {} is stale ({}); recompiling\n", key,
                               source.name, stale);
    } else if (hit.status == DiskCache::LoadStatus::hit && hit.entry->source == source.text) {
      auto k = skeleton(config, source, key);
      k->ptx = std::move(hit.entry->ptx);
      k->cubin = std::move(hit.entry->cubin);
      k->compile_log = std::move(hit.entry->log);
      k->compile_seconds = hit.entry->meta.value("compile_seconds", 0.0);
      k->from_disk_cache = true;
      finish_resources(*k);
      outcome.kernel = std::move(k);
      outcome.disk_hit = true;
      return outcome;
    }
    if (hit.status == DiskCache::LoadStatus::corrupt) {
      outcome.corrupt_entry = true;
      std::cerr << fmt::format("ftattn: cache entry {} for {} was damaged ({}); recompiling\n", key,
                               source.name, hit.reason);
    } else if (!hit.reason.empty()) {
      // Unreadable is not damaged: the entry stays for whoever can read it.
      std::cerr << fmt::format(
          "ftattn: warning: cache entry {} for {} was not used ({}); compiling\n", key, source.name,
          hit.reason);
    }
  }

  NvrtcOutput out = source.backend == Backend::llvm ? compile_with_llvm(source).binary
                                                    : compile_with_nvrtc(source);
  auto k = skeleton(config, source, key);
  k->ptx = std::move(out.ptx);
  k->cubin = std::move(out.cubin);
  k->compile_log = std::move(out.log);
  k->compile_seconds = out.seconds;
  finish_resources(*k);
  outcome.compiled = true;

  if (disk != nullptr && !lock.owns_lock()) {
    outcome.store_error = "the disk cache could not be locked (" + lock.failure() +
                          "), so nothing is written to it; to fill a cache, choose one you can "
                          "write with FTATTN_CACHE_DIR, ftattn --cache-dir or "
                          "RuntimeOptions::cache_dir";
  } else if (disk != nullptr) {
    CacheEntry entry;
    entry.key = key;
    entry.name = k->name;
    entry.source = k->source;
    entry.ptx = k->ptx;
    entry.cubin = k->cubin;
    entry.log = k->compile_log;
    entry.meta = {{"config", k->name},
                  {"ftattn_version", FTATTN_VERSION},
                  {"options", k->options},
                  {"compile_seconds", k->compile_seconds},
                  {"cubin_bytes", k->cubin.size()},
                  {"ptx_bytes", k->ptx.size()},
                  {"written_unix", std::chrono::duration_cast<std::chrono::seconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count()},
                  {"resources", resources_json(k->resources)}};
    if (source.backend == Backend::llvm) {
      entry.meta["compiler"] = llvm.version;
      entry.meta["llvm_compiler"] = llvm.identity;  // what a later hit is checked against
    } else {
      entry.meta["compiler"] = "NVRTC " + nvrtc_version();
      entry.meta["nvrtc_version"] = nvrtc_version();
      entry.meta["nvrtc_library"] = nvrtc_library().path;
    }
    try {
      // A stale entry is ours to replace: we hold its lock and compiled its successor.
      disk->store(entry,
                  outcome.stale_entry ? DiskCache::Existing::replace : DiskCache::Existing::keep);
      outcome.stored = true;
    } catch (const CacheError& e) {
      outcome.store_error = e.what();
      // The kernel is good; only persisting it failed. Say so and carry on.
      if (on_store_failure == StoreFailure::warn) {
        std::cerr << "ftattn: warning: " << e.what() << "\n";
      }
    }
  }
  outcome.kernel = std::move(k);
  return outcome;
}

}  // namespace ftattn::runtime
