// The driver loader and wrappers on a machine that may have no GPU driver: every failure path
// must throw a typed error that says what still works, never crash.
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <type_traits>

#include "runtime/driver.hpp"

using namespace ftattn;
using namespace ftattn::runtime;

namespace {

// The field types are the prototypes of the ABI versions cuda.h names: the _v2 entry points
// take size_t where the originals took unsigned int.
static_assert(std::is_same_v<decltype(DriverApi::cuMemAlloc), CUresult (*)(CUdeviceptr*, size_t)>);
static_assert(
    std::is_same_v<decltype(DriverApi::cuDeviceTotalMem), CUresult (*)(size_t*, CUdevice)>);
static_assert(std::is_same_v<decltype(DriverApi::cuMemcpyHtoD),
                             CUresult (*)(CUdeviceptr, const void*, size_t)>);

// True when the driver library driver() would open can be dlopen'ed on this machine.
bool driver_library_present() {
  void* handle = dlopen(driver_library_path().c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

// The file path of a real shared library that is not a CUDA driver (libm, else libc).
std::string non_cuda_library_path() {
  for (const char* soname : {"libm.so.6", "libc.so.6"}) {
    void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) continue;
    void* symbol = dlsym(handle, std::string(soname) == "libm.so.6" ? "cos" : "printf");
    Dl_info info{};
    std::string path;
    if (symbol != nullptr && dladdr(symbol, &info) != 0 && info.dli_fname != nullptr) {
      path = info.dli_fname;
    }
    dlclose(handle);
    if (path.find('/') != std::string::npos) return path;
  }
  return {};
}

std::string message_of_no_device(const std::function<void()>& body) {
  try {
    body();
  } catch (const NoDeviceError& e) {
    return e.what();
  }
  FAIL("expected NoDeviceError");
  return {};
}

// Sets an environment variable for a scope and restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("load_driver_from a missing file throws NoDeviceError naming it", "[runtime][driver]") {
  const std::string path = "/nonexistent-ftattn-dir/libcuda.so.1";
  std::string message = message_of_no_device([&] { load_driver_from(path); });
  CHECK_THAT(message, Catch::StartsWith("no CUDA driver: " + path + " could not be loaded ("));
  CHECK_THAT(message, Catch::Contains("compiling"));
  CHECK_THAT(message, Catch::Contains("still work"));
  CHECK_THAT(message, Catch::EndsWith("launching needs a GPU"));
  // Not cached: the same call fails the same way again.
  CHECK(message_of_no_device([&] { load_driver_from(path); }) == message);
}

TEST_CASE("load_driver_from a non-CUDA shared library throws NoDeviceError", "[runtime][driver]") {
  const std::string path = non_cuda_library_path();
  REQUIRE_FALSE(path.empty());
  std::string message = message_of_no_device([&] { load_driver_from(path); });
  CHECK_THAT(message, Catch::StartsWith("no CUDA driver: " + path));
  CHECK_THAT(message, Catch::Contains("cuGetProcAddress_v2"));
  CHECK_THAT(message, Catch::Contains("compiling"));
  CHECK_THAT(message, Catch::Contains("launching needs a GPU"));
}

TEST_CASE("load_driver_from a bare soname that does not exist", "[runtime][driver]") {
  std::string message =
      message_of_no_device([] { load_driver_from("libftattn-no-such-driver.so.1"); });
  CHECK_THAT(message, Catch::Contains("libftattn-no-such-driver.so.1"));
  CHECK_THAT(message, Catch::Contains("compiling"));
}

TEST_CASE("driver_library_path honours FTATTN_LIBCUDA", "[runtime][driver]") {
  {
    ScopedEnv env("FTATTN_LIBCUDA", nullptr);
    CHECK(driver_library_path() == "libcuda.so.1");
  }
  {
    ScopedEnv env("FTATTN_LIBCUDA", "");
    CHECK(driver_library_path() == "libcuda.so.1");
  }
  {
    ScopedEnv env("FTATTN_LIBCUDA", "/opt/somewhere/libcuda.so.1");
    CHECK(driver_library_path() == "/opt/somewhere/libcuda.so.1");
  }
}

TEST_CASE("without a driver everything that needs one throws NoDeviceError", "[runtime][driver]") {
  if (driver_library_present()) {
    WARN("a CUDA driver library is present: the no-driver assertions do not apply here");
    return;
  }
  REQUIRE_FALSE(driver_available());
  REQUIRE_FALSE(driver_available());  // cached, still false

  std::string first = message_of_no_device([] { driver(); });
  CHECK_THAT(first, Catch::StartsWith("no CUDA driver: "));
  CHECK_THAT(first, Catch::Contains(driver_library_path()));
  CHECK_THAT(first, Catch::Contains("generating, compiling and inspecting kernels still work"));
  // The failure is cached: the same message, every time.
  CHECK(message_of_no_device([] { driver(); }) == first);

  CHECK_THROWS_AS(device_info(), NoDeviceError);
  CHECK_THROWS_AS(device_info(3), NoDeviceError);
  CHECK_THROWS_AS(ensure_context(), NoDeviceError);
  CHECK_THROWS_AS(DeviceBuffer(1024), NoDeviceError);
  CHECK_THROWS_AS(DeviceBuffer(0), NoDeviceError);
  CHECK_THROWS_AS(Module(std::string_view("\x7f"
                                          "ELF not really",
                                          14)),
                  NoDeviceError);
  CHECK_THROWS_AS(EventTimer(), NoDeviceError);
  CHECK_THROWS_AS(launch(nullptr, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, nullptr, nullptr),
                  NoDeviceError);
  CHECK_THROWS_AS(launch(nullptr, Dim3{}, Dim3{}, 100 * 1024, nullptr, nullptr), NoDeviceError);
  // NoDeviceError is one of the library's errors.
  CHECK_THROWS_AS(driver(), ftattn::Error);
}

TEST_CASE("check passes success and throws DriverError with the code", "[runtime][driver]") {
  CHECK_NOTHROW(check(CUDA_SUCCESS, "nothing"));

  try {
    check(CUDA_ERROR_INVALID_VALUE, "x");
    FAIL("check did not throw");
  } catch (const DriverError& e) {
    CHECK(e.code() == 1);
    CHECK_THAT(std::string(e.what()), Catch::StartsWith("x: CUDA_ERROR_INVALID_VALUE ("));
    CHECK_THAT(std::string(e.what()), Catch::EndsWith(")"));
  }

  try {
    check(CUDA_ERROR_NO_BINARY_FOR_GPU, "cuModuleLoadData");
    FAIL("check did not throw");
  } catch (const DriverError& e) {
    CHECK(e.code() == 209);
    CHECK_THAT(std::string(e.what()), Catch::StartsWith("cuModuleLoadData: "));
    CHECK_THAT(std::string(e.what()), Catch::Contains("CUDA_ERROR_NO_BINARY_FOR_GPU"));
  }

  // A code nobody knows still produces a message with its number.
  try {
    check(static_cast<CUresult>(123457), "odd");
    FAIL("check did not throw");
  } catch (const DriverError& e) {
    CHECK(e.code() == 123457);
    CHECK_THAT(std::string(e.what()), Catch::StartsWith("odd: "));
    CHECK_THAT(std::string(e.what()), Catch::Contains("123457"));
  }

  CHECK_THROWS_AS(check(CUDA_ERROR_OUT_OF_MEMORY, "alloc"), ftattn::Error);
}

TEST_CASE("describe names common codes", "[runtime][driver]") {
  CHECK_THAT(describe(CUDA_ERROR_OUT_OF_MEMORY), Catch::StartsWith("CUDA_ERROR_OUT_OF_MEMORY"));
  CHECK_THAT(describe(CUDA_ERROR_ILLEGAL_ADDRESS), Catch::StartsWith("CUDA_ERROR_ILLEGAL_ADDRESS"));
  CHECK_THAT(describe(CUDA_ERROR_INVALID_IMAGE), Catch::StartsWith("CUDA_ERROR_INVALID_IMAGE"));
  CHECK_THAT(describe(CUDA_ERROR_NO_DEVICE), Catch::StartsWith("CUDA_ERROR_NO_DEVICE"));
  CHECK(describe(CUDA_ERROR_OUT_OF_MEMORY) != describe(CUDA_ERROR_INVALID_VALUE));
}

TEST_CASE("native_arch picks the arch-specific target on Hopper and Blackwell",
          "[runtime][driver]") {
  auto arch_of = [](int sm) {
    DeviceInfo info;
    info.sm = sm;
    return native_arch(info);
  };
  CHECK(arch_of(90).sm == 90);
  CHECK(arch_of(90).arch_specific);
  CHECK(arch_of(90).to_string() == "sm_90a");
  CHECK(arch_of(100).arch_specific);
  CHECK(arch_of(100).to_string() == "sm_100a");
  CHECK(arch_of(80).to_string() == "sm_80");
  CHECK_FALSE(arch_of(80).arch_specific);
  CHECK(arch_of(86).to_string() == "sm_86");
  CHECK(arch_of(89).to_string() == "sm_89");
  CHECK_FALSE(arch_of(89).arch_specific);
  CHECK_FALSE(arch_of(120).arch_specific);
  CHECK(arch_of(120).sm == 120);
}

TEST_CASE("empty wrappers need no driver", "[runtime][driver]") {
  DeviceBuffer buffer;
  CHECK(buffer.ptr() == 0);
  CHECK(buffer.data() == nullptr);
  CHECK(buffer.bytes() == 0);
  DeviceBuffer moved = std::move(buffer);
  CHECK(moved.bytes() == 0);
  CHECK_NOTHROW(moved.fill_bytes(0xff));
  char host[4] = {};
  CHECK_NOTHROW(moved.upload(host, 0));
  CHECK_THROWS_AS(moved.upload(host, sizeof(host)), ftattn::Error);
  CHECK_THROWS_WITH(moved.download(host, sizeof(host)), Catch::Contains("4 bytes"));

  Module module;
  CHECK_FALSE(static_cast<bool>(module));
  CHECK(module.handle() == nullptr);
  try {
    module.function("ftattn_fwd_kernel");
    FAIL("function() on an empty module did not throw");
  } catch (const DriverError& e) {
    CHECK(e.code() == CUDA_ERROR_INVALID_HANDLE);
    CHECK_THAT(std::string(e.what()), Catch::Contains("ftattn_fwd_kernel"));
  }
  Module other = std::move(module);
  CHECK_FALSE(static_cast<bool>(other));

  Dim3 dim;
  CHECK(dim.x == 1);
  CHECK(dim.y == 1);
  CHECK(dim.z == 1);
}

TEST_CASE("every entry point is asked for at the ABI version cuda.h declares",
          "[runtime][driver]") {
  std::span<const DriverSymbol> symbols = driver_symbols();
  std::set<std::string> names;
  for (const DriverSymbol& symbol : symbols) {
    INFO(symbol.name);
    CHECK(names.insert(symbol.name).second);  // no duplicates
    CHECK(symbol.version >= 2000);
    CHECK(symbol.version <= CUDA_VERSION);
    CHECK_THAT(std::string(symbol.name), Catch::StartsWith("cu"));
    // Unversioned names: cuGetProcAddress picks the version.
    CHECK_THAT(std::string(symbol.name), !Catch::Contains("_v"));
  }
  for (const char* required : {"cuInit",
                               "cuDriverGetVersion",
                               "cuDeviceGetCount",
                               "cuDeviceGet",
                               "cuDeviceGetName",
                               "cuDeviceGetAttribute",
                               "cuDeviceTotalMem",
                               "cuDevicePrimaryCtxRetain",
                               "cuDevicePrimaryCtxRelease",
                               "cuCtxSetCurrent",
                               "cuCtxGetCurrent",
                               "cuCtxSynchronize",
                               "cuModuleLoadData",
                               "cuModuleUnload",
                               "cuModuleGetFunction",
                               "cuFuncSetAttribute",
                               "cuFuncGetAttribute",
                               "cuLaunchKernel",
                               "cuTensorMapEncodeTiled",
                               "cuMemAlloc",
                               "cuMemFree",
                               "cuMemcpyHtoD",
                               "cuMemcpyDtoH",
                               "cuMemcpyDtoD",
                               "cuMemsetD8",
                               "cuMemsetD32",
                               "cuStreamCreate",
                               "cuStreamDestroy",
                               "cuStreamSynchronize",
                               "cuEventCreate",
                               "cuEventDestroy",
                               "cuEventRecord",
                               "cuEventSynchronize",
                               "cuEventElapsedTime",
                               "cuGetErrorName",
                               "cuGetErrorString"}) {
    CHECK(names.count(required) == 1);
  }
  auto version_of = [&](std::string_view name) {
    for (const DriverSymbol& symbol : symbols) {
      if (name == symbol.name) return symbol.version;
    }
    return -1;
  };
  // CUDA 13.0 added cuCtxSynchronize_v2(CUcontext) and cuCtxGetDevice_v2(CUdevice*, CUcontext);
  // asking for 13000 would hand back those, not the prototypes cuda.h declares.
  CHECK(version_of("cuCtxSynchronize") < 13000);
  CHECK(version_of("cuCtxGetDevice") < 13000);
  // The _v2 ABIs cuda.h's #defines select.
  CHECK(version_of("cuMemAlloc") >= 3020);
  CHECK(version_of("cuDevicePrimaryCtxRelease") >= 11000);
#if CUDA_VERSION >= 12080
  CHECK(version_of("cuEventElapsedTime") >= 12080);
#endif
  static_assert(std::is_same_v<decltype(DriverApi::cuCtxSynchronize), CUresult (*)()>);
  static_assert(std::is_same_v<decltype(DriverApi::cuCtxGetDevice), CUresult (*)(CUdevice*)>);
}
