// Peak rate of the mma.sync shapes the sm80 skeletons use, on the GPU at hand: the ceiling for
// the 8-bit kernels' speed-up over f16 (issue 5). Each warp keeps 8 independent MMAs in flight
// on register operands, so only the tensor pipe limits; median of 20 CUDA-event-timed launches.
// On sm_90 ptxas emulates the e4m3 shape (an F2FP unpack of the operands to f16, then f16 MMAs),
// so its figure includes the conversions.
//   nvcc -O3 -arch=sm_90a -o mma_rate bench/mma_rate.cu && ./mma_rate
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <type_traits>
#include <vector>

namespace {

constexpr int kChains = 8;  // independent accumulators per warp
constexpr int kIters = 4096;

enum class Shape { f16, bf16, s8, e4m3 };

template <Shape S>
using Acc = std::conditional_t<S == Shape::s8, int, float>;

template <Shape S>
__device__ __forceinline__ void mma(Acc<S> (&c)[4], const unsigned (&a)[4], unsigned b0,
                                    unsigned b1) {
  if constexpr (S == Shape::f16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if constexpr (S == Shape::bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if constexpr (S == Shape::s8) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

template <Shape S>
__global__ void spin(float* out, unsigned seed) {
  unsigned a[4], b0 = seed * 7u + threadIdx.x, b1 = seed ^ threadIdx.x;
  for (int i = 0; i < 4; ++i) a[i] = seed + i * 0x01010101u + threadIdx.x;
  Acc<S> c[kChains][4] = {};
  for (int it = 0; it < kIters; ++it) {
    b0 ^= it;  // a new B every iteration: nothing to hoist (an e4m3 B must be re-converted)
#pragma unroll
    for (int k = 0; k < kChains; ++k) mma<S>(c[k], a, b0, b1);
  }
  float sum = 0.f;  // (int accumulators convert)
  for (int k = 0; k < kChains; ++k)
    for (int i = 0; i < 4; ++i) sum += c[k][i];
  if (sum == 1.2345f) out[threadIdx.x] = sum;  // keeps the MMAs alive
}

template <Shape S>
double tops(const char* name, int k, int sms, float* out) {
  const int blocks = sms * 8, threads = 128;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  spin<S><<<blocks, threads>>>(out, 1);  // warm-up
  std::vector<float> ms;
  for (int r = 0; r < 20; ++r) {
    cudaEventRecord(e0);
    spin<S><<<blocks, threads>>>(out, r + 2);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t = 0.f;
    cudaEventElapsedTime(&t, e0, e1);
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double ops = 2.0 * 16 * 8 * k * double(kChains) * kIters * (double(blocks) * threads / 32);
  const double t = ms[ms.size() / 2] * 1e-3;
  std::printf("%-5s m16n8k%-2d %8.1f TOPS  (median %.3f ms)\n", name, k, ops / t * 1e-12,
              ms[ms.size() / 2]);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ops / t;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::printf("no CUDA device: nothing was launched\n");
    return 1;
  }
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  float* out = nullptr;
  cudaMalloc(&out, 1024 * sizeof(float));
  const double f16 = tops<Shape::f16>("f16", 16, prop.multiProcessorCount, out);
  tops<Shape::bf16>("bf16", 16, prop.multiProcessorCount, out);
  const double s8 = tops<Shape::s8>("s8", 32, prop.multiProcessorCount, out);
  const double e4 = tops<Shape::e4m3>("e4m3", 32, prop.multiProcessorCount, out);
  std::printf("s8 / f16 = %.2f, e4m3 / f16 = %.2f\n", s8 / f16, e4 / f16);
  cudaFree(out);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
