// The CUDA Driver API, opened at run time.
//
// libcuda is never linked: the library must load and do everything but launching on a machine
// without a GPU driver. The driver library (libcuda.so.1, or $FTATTN_LIBCUDA) is dlopen'ed on
// first use and every entry point is taken from cuGetProcAddress at the ABI version of the
// prototype the cuda.h we compile against declares, so each pointer's type (decltype(&::cuXxx))
// matches what it points at.
//
// Also here: the primary-context helper and small RAII wrappers (module, device memory, events)
// that the rest of the runtime, the tuner and the tests build on.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ftattn/config.hpp"
#include "ftattn/errors.hpp"

namespace ftattn::runtime {

// Every driver entry point the project uses: X(name, version). `name` is the API as cuda.h spells
// it (unversioned); the field gets the versioned name cuda.h #defines it to, which is invisible to
// callers because they spell it the same way: driver().cuMemAlloc(&ptr, bytes).
//
// `version` is the CUDA version cuGetProcAddress is asked for: the one whose ABI matches the
// prototype cuda.h declares for `name` (cudaTypedefs.h's PFN_<name>_v<version>; driver.cpp checks
// it at compile time). It is NOT simply CUDA_VERSION: CUDA 13.0 added cuCtxSynchronize_v2(ctx) and
// cuCtxGetDevice_v2(dev, ctx) while cuda.h still declares the one-version-older prototypes under
// the plain names, so asking for 13000 returns functions with another signature.
#define FTATTN_DRIVER_FUNCTIONS(X)                     \
  X(cuInit, 2000)                                      \
  X(cuDriverGetVersion, 2020)                          \
  X(cuGetErrorName, 6000)                              \
  X(cuGetErrorString, 6000)                            \
  X(cuDeviceGetCount, 2000)                            \
  X(cuDeviceGet, 2000)                                 \
  X(cuDeviceGetName, 2000)                             \
  X(cuDeviceGetAttribute, 2000)                        \
  X(cuDeviceTotalMem, 3020)                            \
  X(cuDevicePrimaryCtxRetain, 7000)                    \
  X(cuDevicePrimaryCtxRelease, 11000)                  \
  X(cuCtxSetCurrent, 4000)                             \
  X(cuCtxGetCurrent, 4000)                             \
  X(cuCtxGetDevice, 2000)                              \
  X(cuCtxPushCurrent, 4000)                            \
  X(cuCtxPopCurrent, 4000)                             \
  X(cuCtxSynchronize, 2000)                            \
  X(cuModuleLoadData, 2000)                            \
  X(cuModuleUnload, 2000)                              \
  X(cuModuleGetFunction, 2000)                         \
  X(cuFuncSetAttribute, 9000)                          \
  X(cuFuncGetAttribute, 2020)                          \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050) \
  X(cuLaunchKernel, 4000)                              \
  X(cuTensorMapEncodeTiled, 12000)                     \
  X(cuMemGetInfo, 3020)                                \
  X(cuMemAlloc, 3020)                                  \
  X(cuMemFree, 3020)                                   \
  X(cuMemcpyHtoD, 3020)                                \
  X(cuMemcpyDtoH, 3020)                                \
  X(cuMemcpyDtoD, 3020)                                \
  X(cuMemcpyHtoDAsync, 3020)                           \
  X(cuMemcpyDtoHAsync, 3020)                           \
  X(cuMemsetD8, 3020)                                  \
  X(cuMemsetD32, 3020)                                 \
  X(cuMemsetD8Async, 3020)                             \
  X(cuStreamCreate, 2000)                              \
  X(cuStreamDestroy, 4000)                             \
  X(cuStreamSynchronize, 2000)                         \
  X(cuEventCreate, 2000)                               \
  X(cuEventDestroy, 4000)                              \
  X(cuEventRecord, 2000)                               \
  X(cuEventSynchronize, 2000)                          \
  X(cuStreamWaitEvent, 3020)                           \
  FTATTN_DRIVER_EVENT_ELAPSED(X)

// cuda.h maps cuEventElapsedTime to cuEventElapsedTime_v2 from CUDA 12.8 on.
#if CUDA_VERSION >= 12080
#define FTATTN_DRIVER_EVENT_ELAPSED(X) X(cuEventElapsedTime, 12080)
#else
#define FTATTN_DRIVER_EVENT_ELAPSED(X) X(cuEventElapsedTime, 2000)
#endif

// The loaded driver. Pointers are never null in a DriverApi returned by driver() or
// load_driver_from().
struct DriverApi {
#define FTATTN_DRIVER_FIELD(name, version) decltype(&::name) name = nullptr;
  FTATTN_DRIVER_FUNCTIONS(FTATTN_DRIVER_FIELD)
#undef FTATTN_DRIVER_FIELD

  std::string library;     // what was dlopen'ed
  int driver_version = 0;  // cuDriverGetVersion, e.g. 13000
  int device_count = 0;    // > 0
};

// Opens `path` with dlopen, resolves every entry point, runs cuInit(0) and checks that at least
// one device exists. Throws NoDeviceError (message names `path` and the reason, and says that
// generating and compiling kernels still work). Not cached: driver() is the cached entry point;
// this one exists so the failure paths can be tested. The library stays loaded on success.
DriverApi load_driver_from(const std::string& path);

// What load_driver_from() asks cuGetProcAddress for, in FTATTN_DRIVER_FUNCTIONS order.
struct DriverSymbol {
  const char* name;  // unversioned, e.g. "cuMemAlloc"
  int version;       // e.g. 3020 (cuMemAlloc_v2)
};
std::span<const DriverSymbol> driver_symbols();

// The library driver() opens: $FTATTN_LIBCUDA when set and not empty, else "libcuda.so.1".
std::string driver_library_path();

// The process-wide driver, loaded on first call (thread-safe). A failure is cached too: every
// later call throws the same NoDeviceError without trying again.
const DriverApi& driver();

// True iff driver() succeeds.
bool driver_available() noexcept;

// Throws DriverError(code = result) with message "<what>: <CUDA_ERROR_NAME> (<description>)"
// unless result is CUDA_SUCCESS. Works without a driver (names then come from a built-in table).
void check(CUresult result, const char* what);

// "CUDA_ERROR_INVALID_VALUE (invalid argument)": the driver's words when it is loaded, else the
// built-in table's, else "CUresult 1234".
std::string describe(CUresult result);

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int sm = 0;  // compute capability major * 10 + minor: 90 for 9.0, 120 for 12.0
  int sm_count = 0;
  int max_shared_per_block_optin = 0;  // bytes
  std::size_t total_memory = 0;        // bytes
  int driver_version = 0;              // e.g. 13000
};

// Throws NoDeviceError without a driver, DriverError for a bad ordinal.
DeviceInfo device_info(int ordinal = 0);

// The arch to compile for to run on `info`'s device: sm_90a and sm_100a for Hopper and
// Blackwell (arch-specific instructions allowed), sm_XX otherwise.
Arch native_arch(const DeviceInfo& info);

// Retains device `ordinal`'s primary context (once per process; released at exit) and makes it
// current on the calling thread when none is. Cheap when it already is. Call from any thread
// before driver work. Throws NoDeviceError without a driver, and ConfigError when another context
// is current (another GPU's, or one the caller created): kernels, workspaces and the caller's
// pointers must all live in the one context ftattn runs in.
void ensure_context(int ordinal = 0);

// Compiled code loaded into device 0's primary context (made current first: ensure_context).
// Non-copyable, movable.
class Module {
 public:
  Module() = default;
  // `image`: cubin (ELF), fatbin or NUL-terminated PTX. Throws NoDeviceError without a driver,
  // DriverError naming the failure (with advice when the image does not fit this GPU).
  explicit Module(std::string_view image);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;

  // The kernel `symbol` (an extern "C" name). Throws DriverError naming the symbol.
  CUfunction function(const std::string& symbol) const;

  CUmodule handle() const { return module_; }
  explicit operator bool() const { return module_ != nullptr; }

 private:
  void reset() noexcept;

  CUmodule module_ = nullptr;
  CUcontext context_ = nullptr;
  mutable std::mutex mutex_;  // guards functions_
  mutable std::unordered_map<std::string, CUfunction> functions_;
};

// Device memory in the current context (device 0's primary context is made current first if the
// thread has none). Non-copyable, movable. A default-constructed buffer is empty.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Throws NoDeviceError without a driver, DriverError when the allocation fails. 0 bytes: empty
  // buffer (the driver is still required).
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  CUdeviceptr ptr() const { return ptr_; }
  void* data() const { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr_)); }
  std::size_t bytes() const { return bytes_; }

  // Synchronous copies of the first `bytes` bytes. Throw ftattn::Error when `bytes` exceeds the
  // buffer's size.
  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;
  // Sets every byte (cuMemsetD8): poisons outputs before a run.
  void fill_bytes(unsigned char value);

 private:
  void reset() noexcept;

  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
  CUcontext context_ = nullptr;
};

// Times work on a stream with a pair of CUDA events.
class EventTimer {
 public:
  EventTimer();  // throws NoDeviceError without a driver
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start(CUstream stream);
  void stop(CUstream stream);
  // Milliseconds between start and stop; waits for the stop event.
  float elapsed_ms();

 private:
  CUevent start_ = nullptr;
  CUevent stop_ = nullptr;
};

// Orders the uses of one set of device buffers (a kernel's workspace) across streams: work
// enqueued between before() and after() on one stream waits for the previous such work on
// another stream to finish, so two streams never share the buffers at once. The caller holds the
// lock that guards the buffers.
class StreamOrder {
 public:
  StreamOrder() = default;
  ~StreamOrder();
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

  void before(CUstream stream);  // waits for the last user's work if it was on another stream
  void after(CUstream stream);   // marks the end of this stream's work

  // before() now, after() at the end of the scope, also when the work in it throws (some of it
  // may be enqueued already).
  class Scope {
   public:
    Scope(StreamOrder* order, CUstream stream) : order_(order), stream_(stream) {
      if (order_ != nullptr) order_->before(stream_);
    }
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StreamOrder* order_;
    CUstream stream_;
  };

 private:
  CUevent done_ = nullptr;  // recorded after the last use
  CUstream last_ = nullptr;
  bool used_ = false;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// Launches `f` with `args` (cuLaunchKernel's kernelParams). When shared_bytes exceeds the 48 KiB
// default it first raises CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (once per function and
// size, thread-safe). Throws DriverError naming the launch shape.
void launch(CUfunction f, Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream stream,
            void** args);

}  // namespace ftattn::runtime
