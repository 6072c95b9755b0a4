// The Runtime facade: in-memory caches in front of the disk cache, one compile per config no
// matter how many threads ask at once.
#include "ftattn/runtime.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <future>
#include <mutex>
#include <unordered_map>

#include "ftattn/tuner.hpp"
#include "runtime/driver.hpp"
#include "runtime/kernel_builder.hpp"
#include "runtime/loaded_kernel.hpp"
#include "runtime/prepared_kv.hpp"
#include "runtime/protected_launch.hpp"

namespace ftattn {
namespace {

// Single-flight map: the first caller for a key runs `make`, later callers wait for its result.
// A failure is handed to every waiter and then forgotten, so a later call may try again.
template <class Value>
class OnceMap {
 public:
  template <class Make>
  Value get(const KernelConfig& key, Make&& make, bool* was_cached) {
    std::promise<Value> promise;
    std::shared_future<Value> future;
    bool owner = false;
    {
      std::lock_guard lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) {
        future = it->second;
      } else {
        future = promise.get_future().share();
        map_.emplace(key, future);
        owner = true;
      }
    }
    *was_cached = !owner;
    if (!owner) return future.get();
    try {
      promise.set_value(make());
    } catch (...) {
      promise.set_exception(std::current_exception());
      std::lock_guard lock(mu_);
      map_.erase(key);
    }
    return future.get();
  }

 private:
  std::mutex mu_;
  std::unordered_map<KernelConfig, std::shared_future<Value>> map_;
};

}  // namespace

struct Runtime::Impl {
  RuntimeOptions options;
  std::filesystem::path cache_dir;
  std::unique_ptr<runtime::DiskCache> disk;
  OnceMap<std::shared_ptr<const CompiledKernel>> compiled;
  OnceMap<std::shared_ptr<const Kernel>> loaded;
  mutable std::mutex stats_mu;
  Stats stats;

  std::once_flag arch_once;
  Arch arch;

  // The tuning DBs and this GPU's key, read once on first use.
  std::once_flag tuning_once;
  tuner::Database tuning;
  tuner::DeviceKey device_key;
  void load_tuning() {
    std::call_once(tuning_once, [&] {
      const runtime::DeviceInfo info = runtime::device_info(0);
      device_key = tuner::DeviceKey{info.name, info.sm, info.driver_version};
      tuning = tuner::shipped();
      try {
        tuning.merge(tuner::Database::load(tuner::user_database_path(cache_dir)));
      } catch (const CacheError& e) {  // a broken user DB must not stop attention from running
        std::fprintf(stderr, "ftattn: warning: %s\n", e.what());
      }
    });
  }
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->cache_dir = impl_->options.cache_dir.empty() ? runtime::DiskCache::default_root()
                                                      : impl_->options.cache_dir;
  if (impl_->options.disk_cache)
    impl_->disk = std::make_unique<runtime::DiskCache>(impl_->cache_dir);
}

Runtime::~Runtime() = default;

bool Runtime::has_device() const { return runtime::driver_available(); }

Arch Runtime::device_arch() const {
  // Asked on every attention() call: read the device once.
  std::call_once(impl_->arch_once,
                 [&] { impl_->arch = runtime::native_arch(runtime::device_info(0)); });
  return impl_->arch;
}

const std::filesystem::path& Runtime::cache_dir() const { return impl_->cache_dir; }

Runtime::Stats Runtime::stats() const {
  std::lock_guard lock(impl_->stats_mu);
  return impl_->stats;
}

FaultReport Kernel::run(const Problem& problem, const void* q, const void* k, const void* v,
                        void* o, float* lse, CUstream stream, const unsigned char* block_mask,
                        const ProtectOptions& protect) const {
  if (protect.inject)
    throw ConfigError(config().name() +
                      " takes no fault plan: only 16-bit kernels built with "
                      "fault_injection do");
  runtime::check_protect_options(config(), protect);
  launch(problem, q, k, v, o, lse, stream, block_mask, protect);
  return {};
}

PreparedKv Kernel::prepare_kv(const Problem&, const void*, const void*, CUstream) const {
  runtime::require_preparable(config());
  throw ConfigError(config().name() + " has nothing to prepare");
}

KernelConfig Runtime::resolve(KernelConfig config, const Problem* problem) const {
  if (problem != nullptr) {
    if (config.head_dim == 0) config.head_dim = problem->head_dim;
    // Before a compile and a load that the launch would then refuse.
    if (config.head_dim != problem->head_dim)
      throw ConfigError(
          fmt::format("problem head_dim {} does not match the kernel config's head_dim {}: leave "
                      "KernelConfig::head_dim at 0 to take the problem's, or give {}",
                      problem->head_dim, config.head_dim, problem->head_dim));
  }
  const Arch device = config.arch.is_auto() && has_device() ? device_arch() : Arch{};
  const bool tiles_open =
      config.block_m == 0 && config.block_n == 0 && config.num_warps == 0 && config.num_stages == 0;
  if (impl_->options.tuning_db && problem != nullptr && tiles_open && config.head_dim > 0 &&
      !is_block_sparse(config.mask) && has_device()) {
    impl_->load_tuning();
    const Arch arch = config.arch.is_auto() ? device : config.arch;
    const tuner::Family family{arch, config.precision, config.protection, config.head_dim,
                               config.mask};
    static std::once_flag noted;
    auto note = [](const std::string& text) {
      std::call_once(noted, [&] { std::fprintf(stderr, "ftattn: note: %s\n", text.c_str()); });
    };
    if (auto tuned = impl_->tuning.find(impl_->device_key, family,
                                        tuner::Bucket::of(*problem, config.mask), note)) {
      // The DB holds tiles: what is not a tile (route, IR passes, injection) stays the caller's.
      KernelConfig chosen = *tuned;
      chosen.fault_injection = config.fault_injection;
      chosen.backend = config.backend;
      chosen.ir_inject = config.ir_inject;
      chosen.ir_harden = config.ir_harden;
      // A tuned tile need not suit the caller's other knobs (the LLVM route takes no three
      // consumer warpgroups): then the heuristic decides, as it would without the DB.
      try {
        validate(chosen);
        validate(*problem, chosen);
        return chosen;
      } catch (const ConfigError&) {
      }
    }
  }
  return with_defaults(config, device, problem);
}

std::shared_ptr<const CompiledKernel> Runtime::compile(const KernelConfig& config) {
  const KernelConfig full = config.is_complete() ? config : resolve(config);
  bool cached = false;
  auto kernel = impl_->compiled.get(
      full,
      [&] {
        runtime::BuildOutcome out = runtime::build_kernel(full, impl_->disk.get());
        std::lock_guard lock(impl_->stats_mu);
        impl_->stats.compiles += out.compiled;
        impl_->stats.disk_hits += out.disk_hit;
        impl_->stats.corrupt_entries += out.corrupt_entry;
        return out.kernel;
      },
      &cached);
  if (cached) {
    std::lock_guard lock(impl_->stats_mu);
    ++impl_->stats.memory_hits;
  }
  return kernel;
}

std::shared_ptr<const Kernel> Runtime::kernel(const KernelConfig& config) {
  // Loading needs a GPU: say so (NoDeviceError), not that the arch is open.
  if (config.arch.is_auto()) (void)device_arch();
  const KernelConfig full = config.is_complete() ? config : resolve(config);
  bool cached = false;
  auto kernel = impl_->loaded.get(
      full, [&] { return runtime::load_kernel(compile(full)); }, &cached);
  return kernel;
}

FaultReport Runtime::attention(const Problem& problem, const void* q, const void* k, const void* v,
                               void* o, CUstream stream, KernelConfig config, float* lse,
                               const unsigned char* block_mask, const ProtectOptions& protect) {
  // Without a GPU, say so (NoDeviceError with the reason), not that the arch is open.
  if (config.arch.is_auto()) (void)device_arch();
  const KernelConfig full = resolve(config, &problem);
  return kernel(full)->run(problem, q, k, v, o, lse, stream, block_mask, protect);
}

}  // namespace ftattn
