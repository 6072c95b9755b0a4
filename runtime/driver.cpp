#include "runtime/driver.hpp"

#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace ftattn::runtime {
namespace {

// Each field's type (cuda.h's prototype) must be the ABI of the version we ask the driver for.
#define FTATTN_CHECK_ABI(name, version)                                     \
  static_assert(std::is_same_v<decltype(&::name), PFN_##name##_v##version>, \
                #name ": cuda.h's prototype is not the ABI of CUDA " #version);
FTATTN_DRIVER_FUNCTIONS(FTATTN_CHECK_ABI)
FTATTN_CHECK_ABI(cuGetProcAddress, 12000)
#undef FTATTN_CHECK_ABI

constexpr DriverSymbol kDriverSymbols[] = {
#define FTATTN_SYMBOL(name, version) {#name, version},
    FTATTN_DRIVER_FUNCTIONS(FTATTN_SYMBOL)
#undef FTATTN_SYMBOL
};

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

constexpr const char* kStillWorks =
    "; generating, compiling and inspecting kernels still work, launching needs a GPU";

[[noreturn]] void throw_no_driver(const std::string& reason) {
  throw NoDeviceError("no CUDA driver: " + reason + kStillWorks);
}

[[noreturn]] void throw_no_device(const std::string& reason) {
  throw NoDeviceError("no CUDA device: " + reason + kStillWorks);
}

std::string last_dl_error() {
  const char* text = dlerror();
  return text != nullptr ? std::string(text) : std::string("unknown dlerror");
}

// Names and short descriptions of the CUresult codes one is likely to meet, for when the driver
// (and so cuGetErrorName/cuGetErrorString) is not loaded.
struct KnownResult {
  CUresult code;
  const char* name;
  const char* description;
};

#define FTATTN_KNOWN(code, text) \
  { code, #code, text }
constexpr KnownResult kKnownResults[] = {
    FTATTN_KNOWN(CUDA_SUCCESS, "no error"),
    FTATTN_KNOWN(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    FTATTN_KNOWN(CUDA_ERROR_OUT_OF_MEMORY, "out of device memory"),
    FTATTN_KNOWN(CUDA_ERROR_NOT_INITIALIZED, "the driver has not been initialized"),
    FTATTN_KNOWN(CUDA_ERROR_DEINITIALIZED, "the driver is shutting down"),
    FTATTN_KNOWN(CUDA_ERROR_STUB_LIBRARY, "the loaded libcuda is a stub, not a real driver"),
    FTATTN_KNOWN(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "the call needs a newer driver"),
    FTATTN_KNOWN(CUDA_ERROR_DEVICE_UNAVAILABLE, "the device is busy or unavailable"),
    FTATTN_KNOWN(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device was found"),
    FTATTN_KNOWN(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    FTATTN_KNOWN(CUDA_ERROR_INVALID_IMAGE, "the module image is not valid"),
    FTATTN_KNOWN(CUDA_ERROR_INVALID_CONTEXT, "no valid context is current"),
    FTATTN_KNOWN(CUDA_ERROR_NO_BINARY_FOR_GPU, "the image has no code for this device"),
    FTATTN_KNOWN(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error"),
    FTATTN_KNOWN(CUDA_ERROR_INVALID_PTX, "the PTX could not be compiled"),
    FTATTN_KNOWN(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "the PTX JIT compiler is not available"),
    FTATTN_KNOWN(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the PTX is newer than this driver"),
    FTATTN_KNOWN(CUDA_ERROR_INVALID_SOURCE, "invalid source"),
    FTATTN_KNOWN(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
    FTATTN_KNOWN(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed"),
    FTATTN_KNOWN(CUDA_ERROR_OPERATING_SYSTEM, "an operating system call failed"),
    FTATTN_KNOWN(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    FTATTN_KNOWN(CUDA_ERROR_ILLEGAL_STATE, "the resource is in an illegal state"),
    FTATTN_KNOWN(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    FTATTN_KNOWN(CUDA_ERROR_NOT_READY, "the work has not completed yet"),
    FTATTN_KNOWN(CUDA_ERROR_ILLEGAL_ADDRESS, "a kernel accessed an illegal memory address"),
    FTATTN_KNOWN(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    FTATTN_KNOWN(CUDA_ERROR_LAUNCH_TIMEOUT, "the kernel ran past the watchdog timeout"),
    FTATTN_KNOWN(CUDA_ERROR_CONTEXT_IS_DESTROYED, "the context has been destroyed"),
    FTATTN_KNOWN(CUDA_ERROR_ASSERT, "a device-side assert fired"),
    FTATTN_KNOWN(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error"),
    FTATTN_KNOWN(CUDA_ERROR_ILLEGAL_INSTRUCTION, "a kernel executed an illegal instruction"),
    FTATTN_KNOWN(CUDA_ERROR_MISALIGNED_ADDRESS, "a kernel made a misaligned memory access"),
    FTATTN_KNOWN(CUDA_ERROR_INVALID_ADDRESS_SPACE, "invalid address space"),
    FTATTN_KNOWN(CUDA_ERROR_INVALID_PC, "invalid program counter"),
    FTATTN_KNOWN(CUDA_ERROR_LAUNCH_FAILED, "the kernel failed"),
    FTATTN_KNOWN(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "cooperative launch is too large"),
    FTATTN_KNOWN(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    FTATTN_KNOWN(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    FTATTN_KNOWN(CUDA_ERROR_SYSTEM_NOT_READY, "the system is not ready for CUDA"),
    FTATTN_KNOWN(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "the driver and kernel module versions differ"),
    FTATTN_KNOWN(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
                 "forward compatibility is not supported on this device"),
    FTATTN_KNOWN(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "not allowed while a stream is captured"),
    FTATTN_KNOWN(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "the stream capture was invalidated"),
    FTATTN_KNOWN(CUDA_ERROR_TIMEOUT, "wait timed out"),
    FTATTN_KNOWN(CUDA_ERROR_INVALID_CLUSTER_SIZE, "invalid cluster size"),
    FTATTN_KNOWN(CUDA_ERROR_FUNCTION_NOT_LOADED, "the function is not loaded"),
    FTATTN_KNOWN(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef FTATTN_KNOWN

const KnownResult* find_known(CUresult result) {
  for (const KnownResult& known : kKnownResults) {
    if (known.code == result) return &known;
  }
  return nullptr;
}

// Words for `result` from `api` when given, else from the table.
std::string describe_with(const DriverApi* api, CUresult result) {
  if (api != nullptr) {
    const char* name = nullptr;
    const char* text = nullptr;
    if (api->cuGetErrorName(result, &name) == CUDA_SUCCESS && name != nullptr) {
      std::string out = name;
      if (api->cuGetErrorString(result, &text) == CUDA_SUCCESS && text != nullptr) {
        out += " (" + std::string(text) + ")";
      }
      return out;
    }
  }
  if (const KnownResult* known = find_known(result)) {
    return std::string(known->name) + " (" + known->description + ")";
  }
  return "CUresult " + std::to_string(static_cast<int>(result));
}

// The process-wide load, successful or not. Constructed once (a function-local static is
// thread-safe); a NoDeviceError is kept as its message so later calls throw it again cheaply.
struct LoadedDriver {
  std::optional<DriverApi> api;
  std::string error;
};

// Set once driver() has succeeded: lets describe() and destructors reach the driver without
// triggering a load.
std::atomic<const DriverApi*> g_loaded{nullptr};

const LoadedDriver& loaded_driver() {
  static const LoadedDriver loaded = [] {
    LoadedDriver result;
    try {
      result.api = load_driver_from(driver_library_path());
    } catch (const NoDeviceError& e) {
      result.error = e.what();
    }
    return result;
  }();
  if (loaded.api) g_loaded.store(&*loaded.api, std::memory_order_release);
  return loaded;
}

const DriverApi* loaded_api() noexcept { return g_loaded.load(std::memory_order_acquire); }

// Makes `context` current for the scope when another one (or none) is; for destructors and
// copies that may run on a thread other than the one that created the object.
class ScopedContext {
 public:
  ScopedContext(const DriverApi& api, CUcontext context) noexcept : api_(api) {
    CUcontext current = nullptr;
    if (context != nullptr && api.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current != context &&
        api.cuCtxPushCurrent(context) == CUDA_SUCCESS) {
      pushed_ = true;
    }
  }
  ~ScopedContext() {
    if (pushed_) {
      CUcontext popped = nullptr;
      api_.cuCtxPopCurrent(&popped);
    }
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  const DriverApi& api_;
  bool pushed_ = false;
};

// Primary contexts retained by ensure_context(), released when the process exits. Constructed
// after the driver is loaded, so destroyed before anything the driver registered for exit.
struct ContextRegistry {
  std::mutex mutex;
  std::vector<std::pair<CUdevice, CUcontext>> by_ordinal;  // index: ordinal; null: not retained

  ~ContextRegistry() {
    const DriverApi* api = loaded_api();
    if (api == nullptr) return;
    for (const auto& [device, context] : by_ordinal) {
      if (context != nullptr) api->cuDevicePrimaryCtxRelease(device);  // errors ignored at exit
    }
  }
};

ContextRegistry& context_registry() {
  static ContextRegistry registry;
  return registry;
}

CUdevice device_handle(const DriverApi& api, int ordinal) {
  if (ordinal < 0 || ordinal >= api.device_count) {
    throw DriverError("CUDA device ordinal " + std::to_string(ordinal) +
                          " does not exist: this machine has " + std::to_string(api.device_count) +
                          " CUDA device(s), 0 to " + std::to_string(api.device_count - 1),
                      CUDA_ERROR_INVALID_DEVICE);
  }
  CUdevice device = 0;
  check(api.cuDeviceGet(&device, ordinal),
        ("cuDeviceGet(" + std::to_string(ordinal) + ")").c_str());
  return device;
}

CUcontext primary_context(const DriverApi& api, int ordinal) {
  CUdevice device = device_handle(api, ordinal);
  ContextRegistry& registry = context_registry();
  std::lock_guard lock(registry.mutex);
  if (registry.by_ordinal.size() <= static_cast<std::size_t>(ordinal)) {
    registry.by_ordinal.resize(ordinal + 1, {0, nullptr});
  }
  auto& slot = registry.by_ordinal[ordinal];
  if (slot.second == nullptr) {
    CUcontext context = nullptr;
    check(api.cuDevicePrimaryCtxRetain(&context, device),
          ("cuDevicePrimaryCtxRetain(device " + std::to_string(ordinal) + ")").c_str());
    slot = {device, context};
  }
  return slot.second;
}

// Device 0's primary context, made current on the calling thread (ensure_context's rules).
CUcontext require_context(const DriverApi& api) {
  ensure_context(0);
  CUcontext current = nullptr;
  check(api.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  return current;
}

// The arch of the current context's device, "" when it cannot be told (for messages only).
std::string current_arch_text(const DriverApi& api) noexcept {
  try {
    CUdevice device = 0;
    int major = 0, minor = 0;
    if (api.cuCtxGetDevice(&device) != CUDA_SUCCESS ||
        api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) !=
            CUDA_SUCCESS ||
        api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device) !=
            CUDA_SUCCESS) {
      return {};
    }
    DeviceInfo info;
    info.sm = major * 10 + minor;
    return native_arch(info).to_string();
  } catch (...) {
    return {};
  }
}

// Dynamic shared memory limit raised per function by launch(): function -> bytes set.
struct SharedLimitCache {
  std::mutex mutex;
  std::unordered_map<CUfunction, unsigned> raised_to;
};

SharedLimitCache& shared_limit_cache() {
  static SharedLimitCache cache;
  return cache;
}

// Drops `function` from the cache: its handle may be reused once its module is unloaded.
void forget_function(CUfunction function) noexcept {
  SharedLimitCache& cache = shared_limit_cache();
  std::lock_guard lock(cache.mutex);
  cache.raised_to.erase(function);
}

std::string shape(Dim3 d) {
  return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Loading

std::string driver_library_path() {
  const char* env = std::getenv("FTATTN_LIBCUDA");
  if (env != nullptr && env[0] != '\0') return env;
  return "libcuda.so.1";
}

DriverApi load_driver_from(const std::string& path) {
  dlerror();  // clear any stale error
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw_no_driver(path + " could not be loaded (" + last_dl_error() + ")");
  }

  // cuGetProcAddress_v2 is the entry point that hands out every other one at a chosen ABI
  // version; cuda.h #defines cuGetProcAddress to it, so the decltype below is its prototype.
  using GetProcAddress = decltype(&::cuGetProcAddress);
  void* get_proc_symbol = dlsym(handle, "cuGetProcAddress_v2");
  if (get_proc_symbol == nullptr) {
    std::string reason =
        path + " is not a usable CUDA driver library (cuGetProcAddress_v2: " + last_dl_error() +
        "; a CUDA 12.0 or newer driver is needed)";
    dlclose(handle);  // nothing of it was used
    throw_no_driver(reason);
  }
  auto get_proc = reinterpret_cast<GetProcAddress>(get_proc_symbol);

  DriverApi api;
  api.library = path;
  auto resolve = [&](const char* name, int version, auto& field) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult result = get_proc(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (result != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || fn == nullptr) {
      // The library stays open: the driver may already hold state we must not unmap.
      std::string why = status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            ? "it needs a driver for CUDA " + cuda_version_text(version) +
                                  " or newer; update the driver"
                            : describe_with(nullptr, result) + ", symbol status " +
                                  std::to_string(static_cast<int>(status));
      throw_no_driver(path + " does not provide " + name + " (" + why + ")");
    }
    field = reinterpret_cast<std::remove_reference_t<decltype(field)>>(fn);
  };
  // #name is the unversioned API name cuGetProcAddress expects; api.name is the field cuda.h's
  // versioned #define gives it.
#define FTATTN_RESOLVE(name, version) resolve(#name, version, api.name);
  FTATTN_DRIVER_FUNCTIONS(FTATTN_RESOLVE)
#undef FTATTN_RESOLVE

  CUresult init = api.cuInit(0);
  if (init == CUDA_ERROR_NO_DEVICE) {
    throw_no_device("the driver (" + path + ") found no GPU: " + describe_with(&api, init));
  }
  if (init != CUDA_SUCCESS) {
    throw_no_driver("cuInit failed in " + path + ": " + describe_with(&api, init));
  }
  CUresult version = api.cuDriverGetVersion(&api.driver_version);
  if (version != CUDA_SUCCESS) {
    throw_no_driver("cuDriverGetVersion failed in " + path + ": " + describe_with(&api, version));
  }
  CUresult count = api.cuDeviceGetCount(&api.device_count);
  if (count != CUDA_SUCCESS) {
    throw_no_device("cuDeviceGetCount failed in " + path + ": " + describe_with(&api, count));
  }
  if (api.device_count <= 0) {
    throw_no_device("the driver (" + path + ") reports no GPU");
  }
  return api;
}

std::span<const DriverSymbol> driver_symbols() { return kDriverSymbols; }

const DriverApi& driver() {
  const LoadedDriver& loaded = loaded_driver();
  if (!loaded.api) throw NoDeviceError(loaded.error);
  return *loaded.api;
}

bool driver_available() noexcept {
  try {
    return loaded_driver().api.has_value();
  } catch (...) {
    return false;
  }
}

// ---------------------------------------------------------------------------------------------
// Errors

std::string describe(CUresult result) { return describe_with(loaded_api(), result); }

void check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  throw DriverError(
      std::string(what != nullptr ? what : "CUDA driver call") + ": " + describe(result),
      static_cast<int>(result));
}

// ---------------------------------------------------------------------------------------------
// Devices and contexts

DeviceInfo device_info(int ordinal) {
  const DriverApi& api = driver();
  CUdevice device = device_handle(api, ordinal);
  auto attribute = [&](CUdevice_attribute which, const char* what) {
    int value = 0;
    check(api.cuDeviceGetAttribute(&value, which, device), what);
    return value;
  };

  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  check(api.cuDeviceGetName(name, static_cast<int>(sizeof(name)) - 1, device), "cuDeviceGetName");
  info.name = name;
  int major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  int minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  info.sm = major * 10 + minor;
  info.sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                            "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  info.max_shared_per_block_optin =
      attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
  std::size_t total = 0;
  check(api.cuDeviceTotalMem(&total, device), "cuDeviceTotalMem");
  info.total_memory = total;
  info.driver_version = api.driver_version;
  return info;
}

Arch native_arch(const DeviceInfo& info) {
  Arch arch;
  arch.sm = info.sm;
  arch.arch_specific = info.sm == 90 || info.sm == 100;
  return arch;
}

void ensure_context(int ordinal) {
  const DriverApi& api = driver();
  CUcontext context = primary_context(api, ordinal);
  CUcontext current = nullptr;
  check(api.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current == context) return;
  // Switching would leave the caller's thread on our GPU, and their pointers, streams and our
  // kernels in different contexts.
  if (current != nullptr)
    throw ConfigError(fmt::format(
        "another CUDA context is current on this thread (another GPU's, or one created with "
        "cuCtxCreate): ftattn runs in GPU {}'s primary context, as the CUDA runtime and PyTorch "
        "do on that GPU; make it current (cudaSetDevice({})) before calling ftattn",
        ordinal, ordinal));
  check(api.cuCtxSetCurrent(context), "cuCtxSetCurrent");
}

// ---------------------------------------------------------------------------------------------
// Module

Module::Module(std::string_view image) {
  const DriverApi& api = driver();
  if (image.empty()) {
    throw DriverError("cuModuleLoadData: the image is empty (was the kernel compiled?)",
                      CUDA_ERROR_INVALID_IMAGE);
  }
  context_ = require_context(api);
  CUresult result = api.cuModuleLoadData(&module_, image.data());
  if (result == CUDA_SUCCESS) return;
  module_ = nullptr;

  std::string message = "cuModuleLoadData: " + describe(result);
  std::string arch = current_arch_text(api);
  std::string this_gpu = arch.empty() ? "this GPU" : "this GPU (" + arch + ")";
  switch (result) {
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_IMAGE:
      message += "; the image holds no code " + this_gpu + " can run: compile for this GPU's arch" +
                 (arch.empty() ? "" : " " + arch);
      break;
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
      message += "; the driver could not JIT the PTX for " + this_gpu +
                 ": compile a cubin for this GPU's arch, or update the driver";
      break;
    default:
      break;
  }
  throw DriverError(message, static_cast<int>(result));
}

Module::~Module() { reset(); }

Module::Module(Module&& other) noexcept {
  std::lock_guard lock(other.mutex_);
  module_ = std::exchange(other.module_, nullptr);
  context_ = std::exchange(other.context_, nullptr);
  functions_ = std::move(other.functions_);
  other.functions_.clear();
}

Module& Module::operator=(Module&& other) noexcept {
  if (this != &other) {
    reset();
    std::scoped_lock lock(mutex_, other.mutex_);
    module_ = std::exchange(other.module_, nullptr);
    context_ = std::exchange(other.context_, nullptr);
    functions_ = std::move(other.functions_);
    other.functions_.clear();
  }
  return *this;
}

void Module::reset() noexcept {
  std::lock_guard lock(mutex_);
  if (module_ == nullptr) return;
  for (const auto& entry : functions_) forget_function(entry.second);
  functions_.clear();
  if (const DriverApi* api = loaded_api()) {
    ScopedContext scope(*api, context_);
    api->cuModuleUnload(module_);  // nothing to do about a failure in a destructor
  }
  module_ = nullptr;
  context_ = nullptr;
}

CUfunction Module::function(const std::string& symbol) const {
  std::lock_guard lock(mutex_);
  if (module_ == nullptr) {
    throw DriverError("cuModuleGetFunction(\"" + symbol + "\"): the module is empty",
                      CUDA_ERROR_INVALID_HANDLE);
  }
  if (auto it = functions_.find(symbol); it != functions_.end()) return it->second;
  const DriverApi& api = driver();
  CUfunction function = nullptr;
  CUresult result = api.cuModuleGetFunction(&function, module_, symbol.c_str());
  if (result != CUDA_SUCCESS) {
    std::string message = "cuModuleGetFunction(\"" + symbol + "\"): " + describe(result);
    if (result == CUDA_ERROR_NOT_FOUND) {
      message += "; the module has no kernel named \"" + symbol +
                 "\" (check the name and that the kernel is extern \"C\")";
    }
    throw DriverError(message, static_cast<int>(result));
  }
  functions_.emplace(symbol, function);
  return function;
}

// ---------------------------------------------------------------------------------------------
// DeviceBuffer

DeviceBuffer::DeviceBuffer(std::size_t bytes) {
  const DriverApi& api = driver();
  if (bytes == 0) return;
  context_ = require_context(api);
  CUdeviceptr ptr = 0;
  check(api.cuMemAlloc(&ptr, bytes), ("cuMemAlloc(" + std::to_string(bytes) + " bytes)").c_str());
  ptr_ = ptr;
  bytes_ = bytes;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      context_(std::exchange(other.context_, nullptr)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    context_ = std::exchange(other.context_, nullptr);
  }
  return *this;
}

void DeviceBuffer::reset() noexcept {
  if (ptr_ != 0) {
    if (const DriverApi* api = loaded_api()) {
      ScopedContext scope(*api, context_);
      api->cuMemFree(ptr_);  // nothing to do about a failure in a destructor
    }
  }
  ptr_ = 0;
  bytes_ = 0;
  context_ = nullptr;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  if (bytes > bytes_) {
    throw Error("DeviceBuffer::upload: " + std::to_string(bytes) + " bytes do not fit in a " +
                std::to_string(bytes_) + "-byte buffer");
  }
  if (bytes == 0) return;
  const DriverApi& api = driver();
  ScopedContext scope(api, context_);
  check(api.cuMemcpyHtoD(ptr_, host, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* host, std::size_t bytes) const {
  if (bytes > bytes_) {
    throw Error("DeviceBuffer::download: " + std::to_string(bytes) + " bytes asked for from a " +
                std::to_string(bytes_) + "-byte buffer");
  }
  if (bytes == 0) return;
  const DriverApi& api = driver();
  ScopedContext scope(api, context_);
  check(api.cuMemcpyDtoH(host, ptr_, bytes), "cuMemcpyDtoH");
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  if (bytes_ == 0) return;
  const DriverApi& api = driver();
  ScopedContext scope(api, context_);
  check(api.cuMemsetD8(ptr_, value, bytes_), "cuMemsetD8");
}

// ---------------------------------------------------------------------------------------------
// EventTimer

StreamOrder::~StreamOrder() {
  if (done_ == nullptr) return;
  if (const DriverApi* api = loaded_api()) api->cuEventDestroy(done_);
}

void StreamOrder::before(CUstream stream) {
  if (used_ && stream != last_)
    check(driver().cuStreamWaitEvent(stream, done_, 0), "cuStreamWaitEvent");
}

void StreamOrder::after(CUstream stream) {
  const DriverApi& api = driver();
  if (done_ == nullptr) check(api.cuEventCreate(&done_, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  check(api.cuEventRecord(done_, stream), "cuEventRecord");
  last_ = stream;
  used_ = true;
}

StreamOrder::Scope::~Scope() {
  if (order_ == nullptr) return;
  try {
    order_->after(stream_);
  } catch (const Error&) {  // a failing driver fails the next call too, which reports it
  }
}

EventTimer::EventTimer() {
  const DriverApi& api = driver();
  require_context(api);
  check(api.cuEventCreate(&start_, CU_EVENT_DEFAULT), "cuEventCreate");
  CUresult result = api.cuEventCreate(&stop_, CU_EVENT_DEFAULT);
  if (result != CUDA_SUCCESS) {
    api.cuEventDestroy(start_);
    start_ = nullptr;
    stop_ = nullptr;
    check(result, "cuEventCreate");
  }
}

EventTimer::~EventTimer() {
  if (const DriverApi* api = loaded_api()) {
    if (start_ != nullptr) api->cuEventDestroy(start_);
    if (stop_ != nullptr) api->cuEventDestroy(stop_);
  }
}

void EventTimer::start(CUstream stream) {
  check(driver().cuEventRecord(start_, stream), "cuEventRecord(start)");
}

void EventTimer::stop(CUstream stream) {
  check(driver().cuEventRecord(stop_, stream), "cuEventRecord(stop)");
}

float EventTimer::elapsed_ms() {
  const DriverApi& api = driver();
  check(api.cuEventSynchronize(stop_), "cuEventSynchronize(stop)");
  float ms = 0.0f;
  check(api.cuEventElapsedTime(&ms, start_, stop_), "cuEventElapsedTime");
  return ms;
}

// ---------------------------------------------------------------------------------------------
// Launch

void launch(CUfunction f, Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream stream,
            void** args) {
  const DriverApi& api = driver();
  constexpr unsigned kDefaultSharedLimit = 48u * 1024u;
  if (shared_bytes > kDefaultSharedLimit) {
    SharedLimitCache& cache = shared_limit_cache();
    std::lock_guard lock(cache.mutex);
    auto it = cache.raised_to.find(f);
    if (it == cache.raised_to.end() || it->second < shared_bytes) {
      check(api.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                   static_cast<int>(shared_bytes)),
            ("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, " + std::to_string(shared_bytes) +
             ") (more shared memory than this GPU allows per block?)")
                .c_str());
      cache.raised_to[f] = shared_bytes;
    }
  }
  CUresult result = api.cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                       shared_bytes, stream, args, nullptr);
  if (result != CUDA_SUCCESS) {
    check(result, ("cuLaunchKernel(grid " + shape(grid) + ", block " + shape(block) + ", " +
                   std::to_string(shared_bytes) + " bytes shared)")
                      .c_str());
  }
}

}  // namespace ftattn::runtime
