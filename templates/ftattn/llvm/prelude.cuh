// What NVRTC provides built in and clang's CUDA front end does not, when it compiles our
// templates without any CUDA header (-nocudainc): the execution-space keywords, the built-in
// index variables, and the few intrinsics and math functions the templates call. Included
// first by the LLVM route only.
#pragma once

#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))

// threadIdx, blockIdx, blockDim, gridDim (clang's resource header, no CUDA header needed).
#include <__clang_cuda_builtin_vars.h>

__device__ __forceinline__ float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
__device__ __forceinline__ int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
__device__ __forceinline__ float __uint_as_float(unsigned x) {
  return __builtin_bit_cast(float, x);
}
__device__ __forceinline__ unsigned __float_as_uint(float x) {
  return __builtin_bit_cast(unsigned, x);
}

__device__ __forceinline__ float fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
__device__ __forceinline__ float fmaxf(float a, float b) { return __builtin_fmaxf(a, b); }
__device__ __forceinline__ float fminf(float a, float b) { return __builtin_fminf(a, b); }
__device__ __forceinline__ float fabsf(float a) { return __builtin_fabsf(a); }
__device__ __forceinline__ float sqrtf(float a) { return __builtin_sqrtf(a); }
__device__ __forceinline__ float rintf(float a) { return __builtin_rintf(a); }
__device__ __forceinline__ float floorf(float a) { return __builtin_floorf(a); }
__device__ __forceinline__ float ceilf(float a) { return __builtin_ceilf(a); }
// The SFU approximations, as CUDA defines the intrinsics: log(x) = log2(x) ln 2.
__device__ __forceinline__ float __log2f(float a) { return __nvvm_lg2_approx_f(a); }
__device__ __forceinline__ float __logf(float a) {
  return __nvvm_lg2_approx_f(a) * 0.6931471805599453f;
}
__device__ __forceinline__ float __expf(float a) {
  return __nvvm_ex2_approx_f(a * 1.4426950408889634f);
}
__device__ __forceinline__ float rsqrtf(float a) { return __nvvm_rsqrt_approx_f(a); }
__device__ __forceinline__ bool isfinite(float a) { return __builtin_isfinite(a); }
__device__ __forceinline__ bool isnan(float a) { return __builtin_isnan(a); }
__device__ __forceinline__ int abs(int a) { return a < 0 ? -a : a; }
__device__ __forceinline__ int min(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int max(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
__device__ __forceinline__ unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
__device__ __forceinline__ long long min(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ long long max(long long a, long long b) { return a > b ? a : b; }

__device__ __forceinline__ float __shfl_xor_sync(unsigned mask, float x, int lane) {
  return __nvvm_shfl_sync_bfly_f32(mask, x, lane, 0x1f);
}
__device__ __forceinline__ int __shfl_xor_sync(unsigned mask, int x, int lane) {
  return __nvvm_shfl_sync_bfly_i32(mask, x, lane, 0x1f);
}
__device__ __forceinline__ unsigned __shfl_xor_sync(unsigned mask, unsigned x, int lane) {
  return __nvvm_shfl_sync_bfly_i32(mask, x, lane, 0x1f);
}
__device__ __forceinline__ float __shfl_sync(unsigned mask, float x, int lane) {
  return __nvvm_shfl_sync_idx_f32(mask, x, lane, 0x1f);
}
__device__ __forceinline__ float __fdividef(float a, float b) { return __nvvm_div_approx_f(a, b); }
__device__ __forceinline__ bool __any_sync(unsigned mask, int predicate) {
  return __nvvm_vote_any_sync(mask, predicate);
}
__device__ __forceinline__ bool __all_sync(unsigned mask, int predicate) {
  return __nvvm_vote_all_sync(mask, predicate);
}
__device__ __forceinline__ unsigned __ballot_sync(unsigned mask, int predicate) {
  return __nvvm_vote_ballot_sync(mask, predicate);
}
__device__ __forceinline__ void __syncwarp(unsigned mask = 0xffffffffu) {
  __nvvm_bar_warp_sync(mask);
}
__device__ __forceinline__ void __threadfence() { __nvvm_membar_gl(); }
__device__ __forceinline__ unsigned atomicAdd(unsigned* p, unsigned v) {
  return __nvvm_atom_add_gen_i(reinterpret_cast<int*>(p), static_cast<int>(v));
}
__device__ __forceinline__ int atomicAdd(int* p, int v) { return __nvvm_atom_add_gen_i(p, v); }
// The fault log's 64-bit counts.
__device__ __forceinline__ unsigned long long atomicAdd(unsigned long long* p,
                                                        unsigned long long v) {
  return static_cast<unsigned long long>(
      __nvvm_atom_add_gen_ll(reinterpret_cast<long long*>(p), static_cast<long long>(v)));
}
__device__ __forceinline__ float atomicAdd(float* p, float v) {
  return __nvvm_atom_add_gen_f(p, v);
}
__device__ __forceinline__ unsigned atomicSub(unsigned* p, unsigned v) {
  return atomicAdd(p, 0u - v);
}
__device__ __forceinline__ int atomicSub(int* p, int v) { return atomicAdd(p, -v); }
__device__ __forceinline__ int atomicMax(int* p, int v) { return __nvvm_atom_max_gen_i(p, v); }
__device__ __forceinline__ unsigned atomicMax(unsigned* p, unsigned v) {
  return __nvvm_atom_max_gen_ui(p, v);
}
__device__ __forceinline__ int atomicMin(int* p, int v) { return __nvvm_atom_min_gen_i(p, v); }
__device__ __forceinline__ unsigned atomicMin(unsigned* p, unsigned v) {
  return __nvvm_atom_min_gen_ui(p, v);
}
__device__ __forceinline__ unsigned long long __cvta_generic_to_shared(const void* p) {
  return (unsigned long long)(__attribute__((address_space(3))) const void*)p;
}

// NVRTC compiles with -default-device: functions without an execution space are device
// functions. Clang's equivalent: everything after this point is __host__ __device__.
#pragma clang force_cuda_host_device begin
