// Hopper warpgroup MMAs (wgmma, sm_90a) for the Hopper skeletons: shared-memory matrix
// descriptors of swizzled tiles, the fence / commit / wait protocol, and the instructions at the
// N widths the skeletons use (E4M3 and s8 for the 8-bit one, f16 and bf16 for the 16-bit one). One
// warpgroup (4 consecutive warps, 128 threads) issues each MMA for 64 rows; each warp owns 16 of
// them, with the accumulators in the m16n8 layout of mma.sync (register 4 j + i: tile j's element
// i), so the per-thread softmax code of the sm80 skeletons applies as is.
#pragma once

#include "ftattn/common/types.cuh"

namespace ftattn::sm90 {

// Byte offset of 16-byte chunk `chunk` of row `row` in a K-major tile of `RowBytes`-byte rows
// stored with the matching wgmma swizzle (RowBytes 128: SWIZZLE_128B, 64: SWIZZLE_64B): the chunk
// bits [4, 4 + log2(RowBytes / 16)) of the byte offset XOR the bits from 7 up. Tiles start at
// 1024-byte boundaries, so the pattern the tensor cores apply to absolute addresses agrees.
template <int RowBytes>
__device__ __forceinline__ u32 swizzled_offset(int row, int chunk) {
  static_assert(RowBytes == 64 || RowBytes == 128, "64- or 128-byte rows");
  const u32 linear = row * RowBytes + chunk * 16;
  return linear ^ (((linear >> 7) & (RowBytes / 16 - 1)) << 4);
}

// This thread's warpgroup, read from lane 0 so that the compiler knows it is the same across the
// warp and keeps it (and the descriptors built from it) in uniform registers, where each wgmma
// takes them without a register-to-uniform move.
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
}

// A shared-memory descriptor from its 14-bit start field (address / 16) and its fixed fields.
// Shared addresses stay below 2^18 (228 KB), so a start address fits the field as it is, and an
// offset added to the field never carries into the next: a tile's descriptor is then its base's
// plus the offset / 16, one integer add per k-step, where masking and shifting each address took
// four.
__device__ __forceinline__ u64 descriptor_of(u32 start_field, u32 fields_lo, u32 fields_hi) {
  return (static_cast<u64>(fields_hi) << 32) | (start_field + fields_lo);
}

// The descriptor of a K-major tile of `RowBytes`-byte rows at shared address `addr` + `offset`
// (the first row of the MMA's 8-row groups, advanced by 32 bytes per k32 step; `addr` and
// `offset` 16-byte aligned): start address, leading byte offset 1 (unused by swizzled layouts),
// stride byte offset 8 rows, swizzle mode.
template <int RowBytes>
__device__ __forceinline__ u64 descriptor(u32 addr, u32 offset = 0) {
  constexpr u32 layout = RowBytes == 128 ? 1 : 2;  // SWIZZLE_128B : SWIZZLE_64B
  return descriptor_of((addr >> 4) + (offset >> 4), 1u << 16, (8 * RowBytes >> 4) | (layout << 30));
}

// The swizzle atom of a tile of `RowBytes`-byte rows: 128 bytes wide where the rows are a
// multiple of 128, else 64 (rows of 64 bytes, or of 192: head dim 96 in 16 bits).
template <int RowBytes>
inline constexpr int atom_bytes = RowBytes % 128 == 0 ? 128 : 64;

// A tile of `RowBytes`-byte rows stored as swizzle atoms side by side (atom_bytes wide, each
// `rows` x atom_bytes, in that atom's swizzle) at `tile`: byte offset of row `row`, 16-byte
// chunk `chunk`.
template <int RowBytes>
__device__ __forceinline__ u32 tile_offset(int rows, int row, int chunk) {
  constexpr int atom = atom_bytes<RowBytes>, atom_chunks = atom / 16;
  static_assert(RowBytes % atom == 0, "rows of whole atoms");
  if constexpr (RowBytes > atom)
    return (chunk / atom_chunks) * rows * atom + swizzled_offset<atom>(row, chunk % atom_chunks);
  else
    return swizzled_offset<atom>(row, chunk);
}

// The descriptor of k32 step `ks` (32 bytes of each row) of such a tile, from row `row` on. The
// row goes into the address and the step into the offset: a warpgroup's rows are a runtime
// value, so its address is one per tile and each step adds a constant to it.
template <int RowBytes>
__device__ __forceinline__ u64 k_step_descriptor(u32 tile, int rows, int row, int ks) {
  constexpr int atom = atom_bytes<RowBytes>, atom_steps = atom / 32;
  return descriptor<atom>(tile + row * atom,
                          (ks / atom_steps) * rows * atom + (ks % atom_steps) * 32);
}

// The descriptor of k16 step `ks` of a 16-bit B operand stored N-major: `rows` rows of the K
// dimension (keys), each holding N elements in swizzle atoms of `Atom` bytes side by side
// (tile_offset's layout). An atom is 8 rows x Atom bytes, so a step is 16 rows, 16 Atom bytes
// on; the leading byte offset is the stride between the atom columns (rows x Atom bytes), the
// stride byte offset the 8 Atom bytes between 8-row groups. The wgmma takes it with imm-trans-b
// 1.
template <int Atom>
__device__ __forceinline__ u64 n_major_k_step_descriptor(u32 tile, int rows, int ks) {
  static_assert(Atom == 64 || Atom == 128, "64- or 128-byte swizzle atoms");
  constexpr u32 layout = Atom == 128 ? 1 : 2;  // SWIZZLE_128B : SWIZZLE_64B
  return descriptor_of((tile >> 4) + ks * (16 * Atom >> 4),
                       static_cast<u32>(rows * Atom >> 4) << 16, (8 * Atom >> 4) | (layout << 30));
}

// Orders this thread's register writes before the next wgmma reads them (accumulators, A).
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}
// Pins registers in place for the compiler: code that computes them stays before this point and
// code that reads them after it. Around a wgmma wait that leaves MMAs in flight, it keeps the
// work meant to overlap them from being moved past the wait.
template <int N>
__device__ __forceinline__ void fence_registers(float (&x)[N][4]) {
#pragma unroll
  for (int i = 0; i < N * 4; ++i) asm volatile("" : "+f"(x[i / 4][i % 4])::"memory");
}
// Shared memory written through the generic proxy (cp.async, st.shared) that wgmma reads next:
// each writing thread fences before the barrier.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The accumulator operands of one wgmma (`c` the constraint, "+f" or "+r"; `d` the array) and
// the asm string's placeholders for them, %0 up.
#define FTATTN_WG_D8(c, d, i) \
  c(d[i]), c(d[i + 1]), c(d[i + 2]), c(d[i + 3]), c(d[i + 4]), c(d[i + 5]), c(d[i + 6]), c(d[i + 7])
#define FTATTN_WG_D32(c, d) \
  FTATTN_WG_D8(c, d, 0), FTATTN_WG_D8(c, d, 8), FTATTN_WG_D8(c, d, 16), FTATTN_WG_D8(c, d, 24)
#define FTATTN_WG_D64(c, d)                                                                    \
  FTATTN_WG_D32(c, d), FTATTN_WG_D8(c, d, 32), FTATTN_WG_D8(c, d, 40), FTATTN_WG_D8(c, d, 48), \
      FTATTN_WG_D8(c, d, 56)
#define FTATTN_WG_D128(c, d)                                                                   \
  FTATTN_WG_D64(c, d), FTATTN_WG_D8(c, d, 64), FTATTN_WG_D8(c, d, 72), FTATTN_WG_D8(c, d, 80), \
      FTATTN_WG_D8(c, d, 88), FTATTN_WG_D8(c, d, 96), FTATTN_WG_D8(c, d, 104),                 \
      FTATTN_WG_D8(c, d, 112), FTATTN_WG_D8(c, d, 120)
#define FTATTN_WG_D4(c, d, i) c(d[i]), c(d[i + 1]), c(d[i + 2]), c(d[i + 3])
#define FTATTN_WG_D36(c, d) FTATTN_WG_D32(c, d), FTATTN_WG_D4(c, d, 32)
#define FTATTN_WG_D68(c, d) FTATTN_WG_D64(c, d), FTATTN_WG_D4(c, d, 64)
#define FTATTN_WG_R16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define FTATTN_WG_R32                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FTATTN_WG_R64                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define FTATTN_WG_R128                                                                             \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "    \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "     \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "     \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "     \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "     \
  "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, " \
  "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, "     \
  "%124, %125, %126, %127}"
#define FTATTN_WG_D96(c, d)                                                                    \
  FTATTN_WG_D64(c, d), FTATTN_WG_D8(c, d, 64), FTATTN_WG_D8(c, d, 72), FTATTN_WG_D8(c, d, 80), \
      FTATTN_WG_D8(c, d, 88)
#define FTATTN_WG_R96                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "  \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "  \
  "%92, %93, %94, %95}"
#define FTATTN_WG_R36                                                                          \
  "{"                                                                                          \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35}"
#define FTATTN_WG_R68                                                                          \
  "{"                                                                                          \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67}"
#define FTATTN_WG_D40(c, d) FTATTN_WG_D32(c, d), FTATTN_WG_D8(c, d, 32)
#define FTATTN_WG_D72(c, d) FTATTN_WG_D64(c, d), FTATTN_WG_D8(c, d, 64)
#define FTATTN_WG_R40                                                                     \
  "{"                                                                                     \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, " \
  "%36, %37, %38, %39}"
#define FTATTN_WG_R72                                                                     \
  "{"                                                                                     \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, " \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, " \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, " \
  "%70, %71}"
#define FTATTN_WG_D48(c, d) FTATTN_WG_D32(c, d), FTATTN_WG_D8(c, d, 32), FTATTN_WG_D8(c, d, 40)
#define FTATTN_WG_R48                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47}"
#define FTATTN_WG_D52(c, d) FTATTN_WG_D48(c, d), FTATTN_WG_D4(c, d, 48)
#define FTATTN_WG_D56(c, d) FTATTN_WG_D48(c, d), FTATTN_WG_D8(c, d, 48)
#define FTATTN_WG_R52                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51}"
#define FTATTN_WG_R56                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55}"
#define FTATTN_WG_D16(c, d) FTATTN_WG_D8(c, d, 0), FTATTN_WG_D8(c, d, 8)
#define FTATTN_WG_D20(c, d) FTATTN_WG_D16(c, d), FTATTN_WG_D4(c, d, 16)
#define FTATTN_WG_D24(c, d) FTATTN_WG_D16(c, d), FTATTN_WG_D8(c, d, 16)
#define FTATTN_WG_R20 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19}"
#define FTATTN_WG_R24                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23}"
#define FTATTN_WG_D100(c, d) FTATTN_WG_D96(c, d), FTATTN_WG_D4(c, d, 96)
#define FTATTN_WG_D104(c, d) FTATTN_WG_D96(c, d), FTATTN_WG_D8(c, d, 96)
#define FTATTN_WG_R100                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "  \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "  \
  "%92, %93, %94, %95, %96, %97, %98, %99}"
#define FTATTN_WG_R104                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "  \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "  \
  "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103}"
// One wgmma whose scale-d predicate p is set from operand `pred` (nonzero: accumulate).
#define FTATTN_WGMMA(instr, operands, pred)                                            \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " pred ", 0;\nwgmma.mma_async.sync.aligned." instr \
  " " operands ";\n}\n"

// The E4M3 MMAs; overloads by accumulator width (N / 2 floats per thread).
// D (+)= A B^T, m64n64k32 E4M3 -> FP32, A and B K-major in shared memory (descriptors).
__device__ __forceinline__ void wgmma_e4m3_ss(float (&d)[32], u64 a, u64 b, int accumulate) {
  asm volatile(FTATTN_WGMMA("m64n64k32.f32.e4m3.e4m3", FTATTN_WG_R32 ", %32, %33, p, 1, 1", "%34")
               : FTATTN_WG_D32("+f", d)
               : "l"(a), "l"(b), "r"(accumulate));
}

// D += A B^T, m64n64k32 E4M3 -> FP32, A from registers (the m16n8k32 A layout per warp), B
// K-major in shared memory.
__device__ __forceinline__ void wgmma_e4m3_rs(float (&d)[32], const u32 (&a)[4], u64 b,
                                              int accumulate = 1) {
  asm volatile(FTATTN_WGMMA("m64n64k32.f32.e4m3.e4m3",
                            FTATTN_WG_R32 ", {%32, %33, %34, %35}, %36, p, 1, 1", "%37")
               : FTATTN_WG_D32("+f", d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

// D (+)= A B^T, m64n128k32 E4M3 -> FP32, A and B K-major in shared memory (descriptors).
__device__ __forceinline__ void wgmma_e4m3_ss(float (&d)[64], u64 a, u64 b, int accumulate) {
  asm volatile(FTATTN_WGMMA("m64n128k32.f32.e4m3.e4m3", FTATTN_WG_R64 ", %64, %65, p, 1, 1", "%66")
               : FTATTN_WG_D64("+f", d)
               : "l"(a), "l"(b), "r"(accumulate));
}

// D += A B^T, m64n128k32 E4M3 -> FP32, A from registers (the m16n8k32 A layout per warp), B
// K-major in shared memory.
__device__ __forceinline__ void wgmma_e4m3_rs(float (&d)[64], const u32 (&a)[4], u64 b,
                                              int accumulate = 1) {
  asm volatile(FTATTN_WGMMA("m64n128k32.f32.e4m3.e4m3",
                            FTATTN_WG_R64 ", {%64, %65, %66, %67}, %68, p, 1, 1", "%69")
               : FTATTN_WG_D64("+f", d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

// D (+)= A B^T, m64n72k32 E4M3 -> FP32, A from registers: GEMM II's last 64 channels with
// Flash-ABFT's checksum rows below them (fp8 at head dims 64 and 128).
__device__ __forceinline__ void wgmma_e4m3_rs(float (&d)[36], const u32 (&a)[4], u64 b,
                                              int accumulate = 1) {
  asm volatile(FTATTN_WGMMA("m64n72k32.f32.e4m3.e4m3",
                            FTATTN_WG_R36 ", {%36, %37, %38, %39}, %40, p, 1, 1", "%41")
               : FTATTN_WG_D36("+f", d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

// D += A B^T, m64n256k32 E4M3 -> FP32, A from registers: GEMM II at head_dim 256.
__device__ __forceinline__ void wgmma_e4m3_rs(float (&d)[128], const u32 (&a)[4], u64 b,
                                              int accumulate = 1) {
  asm volatile(FTATTN_WGMMA("m64n256k32.f32.e4m3.e4m3",
                            FTATTN_WG_R128 ", {%128, %129, %130, %131}, %132, p, 1, 1", "%133")
               : FTATTN_WG_D128("+f", d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

// The 8-bit integer MMAs (int8): every step accumulates (GEMM I from the caller's bias, INT32
// adds wrap; GEMM II onto O's INT32 accumulators).
// D += A B^T, m64n64k32 s8 -> s32 (wrapping), A and B K-major in shared memory.
__device__ __forceinline__ void wgmma_s8_ss(int (&d)[32], u64 a, u64 b) {
  asm volatile(FTATTN_WGMMA("m64n64k32.s32.s8.s8", FTATTN_WG_R32 ", %32, %33, p", "%34")
               : FTATTN_WG_D32("+r", d)
               : "l"(a), "l"(b), "r"(1));
}

// D += A B^T, m64n64k32 u8 x s8 -> s32 (wrapping), A (int8's P, unsigned) from registers (the
// m16n8k32 A layout per warp), B K-major in shared memory.
__device__ __forceinline__ void wgmma_u8s8_rs(int (&d)[32], const u32 (&a)[4], u64 b) {
  asm volatile(
      FTATTN_WGMMA("m64n64k32.s32.u8.s8", FTATTN_WG_R32 ", {%32, %33, %34, %35}, %36, p", "%37")
      : FTATTN_WG_D32("+r", d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// D += A B^T, m64n128k32 s8 -> s32 (wrapping), A and B K-major in shared memory.
__device__ __forceinline__ void wgmma_s8_ss(int (&d)[64], u64 a, u64 b) {
  asm volatile(FTATTN_WGMMA("m64n128k32.s32.s8.s8", FTATTN_WG_R64 ", %64, %65, p", "%66")
               : FTATTN_WG_D64("+r", d)
               : "l"(a), "l"(b), "r"(1));
}

// D += A B^T, m64n128k32 u8 x s8 -> s32 (wrapping), A (int8's P, unsigned) from registers (the
// m16n8k32 A layout per warp), B K-major in shared memory.
__device__ __forceinline__ void wgmma_u8s8_rs(int (&d)[64], const u32 (&a)[4], u64 b) {
  asm volatile(
      FTATTN_WGMMA("m64n128k32.s32.u8.s8", FTATTN_WG_R64 ", {%64, %65, %66, %67}, %68, p", "%69")
      : FTATTN_WG_D64("+r", d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// D += A B^T, m64n{80, 144}k32 s8 -> s32 (wrapping), A and B K-major in shared memory: int8
// EFTA's GEMM I at 64- and 128-key blocks, with the two digit tiles of its K checksum rows below
// the keys.
__device__ __forceinline__ void wgmma_s8_ss(int (&d)[40], u64 a, u64 b) {
  asm volatile(FTATTN_WGMMA("m64n80k32.s32.s8.s8", FTATTN_WG_R40 ", %40, %41, p", "%42")
               : FTATTN_WG_D40("+r", d)
               : "l"(a), "l"(b), "r"(1));
}
__device__ __forceinline__ void wgmma_s8_ss(int (&d)[72], u64 a, u64 b) {
  asm volatile(FTATTN_WGMMA("m64n144k32.s32.s8.s8", FTATTN_WG_R72 ", %72, %73, p", "%74")
               : FTATTN_WG_D72("+r", d)
               : "l"(a), "l"(b), "r"(1));
}

// D += A B^T, m64n{80, 144}k32 u8 x s8 -> s32 (wrapping), A from registers: int8's GEMM II at
// head_dims 64 and 128 with Flash-ABFT's checksum rows below V^T's (s32 wgmmas take n in steps
// of 16 past 64, so two n8 tiles).
__device__ __forceinline__ void wgmma_u8s8_rs(int (&d)[40], const u32 (&a)[4], u64 b) {
  asm volatile(
      FTATTN_WGMMA("m64n80k32.s32.u8.s8", FTATTN_WG_R40 ", {%40, %41, %42, %43}, %44, p", "%45")
      : FTATTN_WG_D40("+r", d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
__device__ __forceinline__ void wgmma_u8s8_rs(int (&d)[72], const u32 (&a)[4], u64 b) {
  asm volatile(
      FTATTN_WGMMA("m64n144k32.s32.u8.s8", FTATTN_WG_R72 ", {%72, %73, %74, %75}, %76, p", "%77")
      : FTATTN_WG_D72("+r", d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// D += A B^T, m64n192k32 u8 x s8 -> s32 (wrapping), A from registers: int8's GEMM II at
// head_dim 192.
__device__ __forceinline__ void wgmma_u8s8_rs(int (&d)[96], const u32 (&a)[4], u64 b) {
  asm volatile(
      FTATTN_WGMMA("m64n192k32.s32.u8.s8", FTATTN_WG_R96 ", {%96, %97, %98, %99}, %100, p", "%101")
      : FTATTN_WG_D96("+r", d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// D += A B^T, m64n256k32 u8 x s8 -> s32 (wrapping), A from registers: int8's GEMM II at
// head_dim 256.
__device__ __forceinline__ void wgmma_u8s8_rs(int (&d)[128], const u32 (&a)[4], u64 b) {
  asm volatile(FTATTN_WGMMA("m64n256k32.s32.u8.s8",
                            FTATTN_WG_R128 ", {%128, %129, %130, %131}, %132, p", "%133")
               : FTATTN_WG_D128("+r", d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// The 16-bit MMAs (f16 or bf16 operands, FP32 accumulators), k16 steps: 32 bytes of each
// K-major row, as the 8-bit ones' k32. FTATTN_WGMMA_16BIT emits the instruction of `shape` for
// the element type Bf16 picks (the asm string must be a literal).
#define FTATTN_WGMMA_16BIT(shape, operands, pred, outputs, ...)                                 \
  if constexpr (Bf16)                                                                           \
    asm volatile(FTATTN_WGMMA(shape ".f32.bf16.bf16", operands, pred) : outputs : __VA_ARGS__); \
  else                                                                                          \
    asm volatile(FTATTN_WGMMA(shape ".f32.f16.f16", operands, pred) : outputs : __VA_ARGS__)

// D (+)= A B^T, m64n{64, 128}k16, A and B K-major in shared memory (descriptors): GEMM I.
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_ss(float (&d)[32], u64 a, u64 b, int accumulate) {
  FTATTN_WGMMA_16BIT("m64n64k16", FTATTN_WG_R32 ", %32, %33, p, 1, 1, 0, 0", "%34",
                     FTATTN_WG_D32("+f", d), "l"(a), "l"(b), "r"(accumulate));
}
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_ss(float (&d)[64], u64 a, u64 b, int accumulate) {
  FTATTN_WGMMA_16BIT("m64n128k16", FTATTN_WG_R64 ", %64, %65, p, 1, 1, 0, 0", "%66",
                     FTATTN_WG_D64("+f", d), "l"(a), "l"(b), "r"(accumulate));
}

// m64n{72, 136}k16: a block of 64 or 128 keys and 8 checksum rows below it (EFTA's S checksum
// tile).
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_ss(float (&d)[36], u64 a, u64 b, int accumulate) {
  FTATTN_WGMMA_16BIT("m64n72k16", FTATTN_WG_R36 ", %36, %37, p, 1, 1, 0, 0", "%38",
                     FTATTN_WG_D36("+f", d), "l"(a), "l"(b), "r"(accumulate));
}
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_ss(float (&d)[68], u64 a, u64 b, int accumulate) {
  FTATTN_WGMMA_16BIT("m64n136k16", FTATTN_WG_R68 ", %68, %69, p, 1, 1, 0, 0", "%70",
                     FTATTN_WG_D68("+f", d), "l"(a), "l"(b), "r"(accumulate));
}

// PASA's GEMM I: m64n{64, 128}k16 f16 x f16 with FP16 accumulators, A and B K-major in shared
// memory. Register j holds elements 2 j and 2 j + 1 of the FP32 layout (a row's two adjacent
// columns), as mma.sync's m16n8 f16 accumulators: tile nt's row g in 2 nt, row g + 8 in 2 nt + 1,
// which is the m16n8k16 A fragment, so P feeds GEMM II unpacked.
__device__ __forceinline__ void wgmma_f16acc_ss(u32 (&d)[16], u64 a, u64 b, int accumulate) {
  asm volatile(
      FTATTN_WGMMA("m64n64k16.f16.f16.f16", FTATTN_WG_R16 ", %16, %17, p, 1, 1, 0, 0", "%18")
      : FTATTN_WG_D8("+r", d, 0), FTATTN_WG_D8("+r", d, 8)
      : "l"(a), "l"(b), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_f16acc_ss(u32 (&d)[32], u64 a, u64 b, int accumulate) {
  asm volatile(
      FTATTN_WGMMA("m64n128k16.f16.f16.f16", FTATTN_WG_R32 ", %32, %33, p, 1, 1, 0, 0", "%34")
      : FTATTN_WG_D32("+r", d)
      : "l"(a), "l"(b), "r"(accumulate));
}

// m64n8k16, FP32 accumulators, A and B K-major in shared memory: PASA's recovery q . r_j against
// 8 copies of the shift row (every column of the tile holds it).
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_ss(float (&d)[4], u64 a, u64 b, int accumulate) {
  FTATTN_WGMMA_16BIT("m64n8k16", "{%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0", "%6",
                     FTATTN_WG_D4("+f", d, 0), "l"(a), "l"(b), "r"(accumulate));
}

// D += A B, m64n{64, 128}k16, A from registers (the m16n8k16 A layout per warp), B N-major in
// shared memory (imm-trans-b 1: V as stored, keys x channels): GEMM II. m64n{72, 136}k16: a head
// dim of 64 or 128 and one 8-wide checksum tile beside it (Flash-ABFT's P . rowsum(V),
// efta_detect's strided sums and ones); m64n{80, 144}k16: two (efta_correct's plain and weighted
// sums).
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[32], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n64k16", FTATTN_WG_R32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1", "%37",
                     FTATTN_WG_D32("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                     "r"(1));
}
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[36], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n72k16", FTATTN_WG_R36 ", {%36, %37, %38, %39}, %40, p, 1, 1, 1", "%41",
                     FTATTN_WG_D36("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                     "r"(1));
}
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[64], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n128k16", FTATTN_WG_R64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1", "%69",
                     FTATTN_WG_D64("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                     "r"(1));
}
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[68], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n136k16", FTATTN_WG_R68 ", {%68, %69, %70, %71}, %72, p, 1, 1, 1", "%73",
                     FTATTN_WG_D68("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                     "r"(1));
}
// m64n32k16: GEMM II at head dim 32 (O's 16 registers), and m64n{40, 48}k16 with one or two
// 8-wide checksum tiles beside it.
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[16], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n32k16", FTATTN_WG_R16 ", {%16, %17, %18, %19}, %20, p, 1, 1, 1", "%21",
                     FTATTN_WG_D16("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                     "r"(1));
}
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[20], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n40k16", FTATTN_WG_R20 ", {%20, %21, %22, %23}, %24, p, 1, 1, 1", "%25",
                     FTATTN_WG_D20("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                     "r"(1));
}
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[24], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n48k16", FTATTN_WG_R24 ", {%24, %25, %26, %27}, %28, p, 1, 1, 1", "%29",
                     FTATTN_WG_D24("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                     "r"(1));
}
// m64n96k16: GEMM II at head dim 96 (O's 48 registers), and m64n{104, 112}k16 with one or two
// 8-wide checksum tiles beside it.
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[48], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n96k16", FTATTN_WG_R48 ", {%48, %49, %50, %51}, %52, p, 1, 1, 1", "%53",
                     FTATTN_WG_D48("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                     "r"(1));
}
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[52], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n104k16", FTATTN_WG_R52 ", {%52, %53, %54, %55}, %56, p, 1, 1, 1", "%57",
                     FTATTN_WG_D52("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                     "r"(1));
}
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[56], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n112k16", FTATTN_WG_R56 ", {%56, %57, %58, %59}, %60, p, 1, 1, 1", "%61",
                     FTATTN_WG_D56("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                     "r"(1));
}
// m64n192k16: GEMM II at head dim 192 (O's 96 registers; unprotected).
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[96], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n192k16", FTATTN_WG_R96 ", {%96, %97, %98, %99}, %100, p, 1, 1, 1", "%101",
                     FTATTN_WG_D96("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                     "r"(1));
}
// m64n{200, 208}k16: head dim 192 and one or two 8-wide checksum tiles beside it.
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[100], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n200k16", FTATTN_WG_R100 ", {%100, %101, %102, %103}, %104, p, 1, 1, 1",
                     "%105", FTATTN_WG_D100("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),
                     "l"(b), "r"(1));
}
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[104], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n208k16", FTATTN_WG_R104 ", {%104, %105, %106, %107}, %108, p, 1, 1, 1",
                     "%109", FTATTN_WG_D104("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),
                     "l"(b), "r"(1));
}
// m64n256k16: GEMM II at head dim 256 (O's 128 registers; unprotected, so no checksum tile).
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[128], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n256k16", FTATTN_WG_R128 ", {%128, %129, %130, %131}, %132, p, 1, 1, 1",
                     "%133", FTATTN_WG_D128("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),
                     "l"(b), "r"(1));
}
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[40], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n80k16", FTATTN_WG_R40 ", {%40, %41, %42, %43}, %44, p, 1, 1, 1", "%45",
                     FTATTN_WG_D40("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                     "r"(1));
}
template <bool Bf16>
__device__ __forceinline__ void wgmma_16bit_rs(float (&d)[72], const u32 (&a)[4], u64 b) {
  FTATTN_WGMMA_16BIT("m64n144k16", FTATTN_WG_R72 ", {%72, %73, %74, %75}, %76, p, 1, 1, 1", "%77",
                     FTATTN_WG_D72("+f", d), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                     "r"(1));
}

}  // namespace ftattn::sm90
