#pragma once
// Warpgroup matrix multiply (wgmma, sm_90a): the Hopper tensor-core instructions that a warpgroup
// of four warps issues together, asynchronously, with B (and here A for Q K^T) read straight from
// shared memory through a descriptor. Only the shapes the attention kernel of
// flash_attention_wgmma.cuh and the GEMMs of vit_gemm.cu and llm_fused_products.cu use are here.
//
// Inputs are bf16 or fp16 (common.cuh: the compute type A; the instruction's type names change,
// the layouts do not), accumulators fp32.
//
// Shared memory layout: 128-byte swizzle. A tile of R rows x 64 16-bit elements (128 bytes a row) is stored
// row after row, 16-byte chunk c of row r at chunk (c ^ (r % 8)) (mma.cuh: swizzle<64>), the tile
// starting on a 1024-byte boundary; a row of 128 elements is two such tiles, one after the other.
//   K-major operand (Q and K in Q K^T: the reduction dimension contiguous): one 8-row group after
//     another, SBO = 1024 bytes; LBO unused. Step k (16 columns) starts 32 bytes further in.
//   N-major operand (V in P V: N, the head dimension, contiguous; the instruction transposes):
//     LBO = the bytes between 64-column halves, SBO = 1024 bytes between 8-row (key) groups.
//     Step k (16 keys) starts 16 rows, 2048 bytes, further in.
// Descriptor bits (PTX ISA, "Matrix Descriptor Format"): start address >> 4 in 0-13, LBO >> 4 in
// 16-29, SBO >> 4 in 32-45, base offset 0 (1024-byte aligned tiles), swizzle mode 1 (128 B) in 62-63.
//
// Accumulators: for m64nN, warp w of the warpgroup holds rows 16w .. 16w + 15 as the mma.sync
// m16n8 C fragments, d[j] for columns 8j .. 8j + 7: the layout of mma.cuh's fragments, so the
// FlashAttention-2 softmax code runs on them unchanged.
#include <cstdint>

#include "src/kernels/common.cuh"

namespace itera::kernels::wgmma {

__device__ __forceinline__ std::uint64_t descriptor(unsigned smem_address, unsigned lbo_bytes, unsigned sbo_bytes) {
  return static_cast<std::uint64_t>((smem_address & 0x3FFFFu) >> 4) |
         (static_cast<std::uint64_t>((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (static_cast<std::uint64_t>((sbo_bytes >> 4) & 0x3FFFu) << 32) | (std::uint64_t{1} << 62);
}

// The descriptor of a tile `bytes` further on: the start address field holds address >> 4 in 14
// bits and a tile's steps never carry out of it (shared memory ends below 2^18 bytes), so the
// offset adds to the descriptor itself: one integer add instead of rebuilding it.
__device__ __forceinline__ std::uint64_t advance(std::uint64_t desc, unsigned bytes) { return desc + (bytes >> 4); }

// Before the first wgmma that reads or writes registers other instructions touched.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed groups are still running.
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared memory written through the generic proxy (st.shared, cp.async) made visible to wgmma's
// async proxy: each writing thread, after its writes landed and before the barrier.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keeps the compiler from moving reads of the accumulators above wait() (or writes below fence()):
// the asm statements of the instructions name them, the wait does not.
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

// Each instruction is written once as a macro of its input type's name ("bf16" or "f16"), so that
// both types' asm statements have the same operands; the function picks the type from A.
//
// d (+)= A B^T over k = 16: A [64][16] and B [64][16], both K-major in shared memory
// (descriptors). accumulate false: d = A B^T.
#define ITERA_WGMMA_64X64_SS(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]) \
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)))

template <class A>
__device__ __forceinline__ void mma_64x64_ss(float (&d)[8][4], std::uint64_t a, std::uint64_t b, bool accumulate) {
  if constexpr (is_fp16<A>)
    ITERA_WGMMA_64X64_SS("f16");
  else
    ITERA_WGMMA_64X64_SS("bf16");
}

// d += A B over k = 16: A [64][16] in registers (each warp's 16 rows as the mma.sync
// m16n8k16 A fragment), B [16][64] N-major in shared memory (descriptor, imm-trans-b 1).
#define ITERA_WGMMA_64X64_RS(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n" \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1))

template <class A>
__device__ __forceinline__ void mma_64x64_rs(float (&d)[8][4], const unsigned (&a)[4], std::uint64_t b) {
  if constexpr (is_fp16<A>)
    ITERA_WGMMA_64X64_RS("f16");
  else
    ITERA_WGMMA_64X64_RS("bf16");
}

// The accumulators of an m64n128 instruction as asm operands %0 .. %63 (both 64x128 forms below,
// and the first 16 rows of ITERA_WGMMA_D28 and D32).
#define ITERA_WGMMA_D16 \
        "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), \
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), \
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), \
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), \
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), \
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), \
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
// The same for m64n224 (%0 .. %111) and m64n256 (%0 .. %127).
#define ITERA_WGMMA_D28 ITERA_WGMMA_D16, \
        "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]), \
        "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]), \
        "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), \
        "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]), \
        "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]), \
        "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]), \
        "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]), \
        "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]), \
        "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), \
        "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]), \
        "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]), \
        "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3])
#define ITERA_WGMMA_D32 ITERA_WGMMA_D28, \
        "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]), \
        "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]), \
        "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]), \
        "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]), "+f"(d[31][3])

// d += A B over k = 16: A [64][16] in registers (each warp's 16 rows as the mma.sync
// m16n8k16 A fragment), B [16][128] N-major in shared memory (descriptor, imm-trans-b 1).
#define ITERA_WGMMA_64X128_RS(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n" \
      : ITERA_WGMMA_D16 \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1))

template <class A>
__device__ __forceinline__ void mma_64x128_rs(float (&d)[16][4], const unsigned (&a)[4], std::uint64_t b) {
  if constexpr (is_fp16<A>)
    ITERA_WGMMA_64X128_RS("f16");
  else
    ITERA_WGMMA_64X128_RS("bf16");
}

// d (+)= A B^T over k = 16: A [64][16] and B [128][16], both K-major in shared memory
// (descriptors); the scores of the Hopper prefill attention's 128-key tiles (llm_prefill_attention.cu).
#define ITERA_WGMMA_64X128_SS(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n" \
      : ITERA_WGMMA_D16 \
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)))

template <class A>
__device__ __forceinline__ void mma_64x128_ss(float (&d)[16][4], std::uint64_t a, std::uint64_t b, bool accumulate) {
  if constexpr (is_fp16<A>)
    ITERA_WGMMA_64X128_SS("f16");
  else
    ITERA_WGMMA_64X128_SS("bf16");
}

// d (+)= A B^T over k = 16: A [64][16] and B [256][16], both K-major in shared memory
// (descriptors); the GEMM of vit_gemm.cu. accumulate false: d = A B^T (a tile's first step, so
// that its 128 accumulators need no zeroing).
#define ITERA_WGMMA_64X256_SS(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n" \
      : ITERA_WGMMA_D32 \
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)))

template <class A>
__device__ __forceinline__ void mma_64x256_ss(float (&d)[32][4], std::uint64_t a, std::uint64_t b, bool accumulate) {
  if constexpr (is_fp16<A>)
    ITERA_WGMMA_64X256_SS("f16");
  else
    ITERA_WGMMA_64X256_SS("bf16");
}

// d (+)= A B^T over k = 16 with B [224][16]: the decode-sized gate/up tiles of
// llm_fused_products.cu (112 gate and 112 up rows), otherwise as mma_64x256_ss.
#define ITERA_WGMMA_64X224_SS(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %114, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n224k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111}, %112, %113, p, 1, 1, 0, 0;\n}\n" \
      : ITERA_WGMMA_D28 \
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)))

template <class A>
__device__ __forceinline__ void mma_64x224_ss(float (&d)[28][4], std::uint64_t a, std::uint64_t b, bool accumulate) {
  if constexpr (is_fp16<A>)
    ITERA_WGMMA_64X224_SS("f16");
  else
    ITERA_WGMMA_64X224_SS("bf16");
}

// d (+)= A B^T over k = 16: A [64][16] in registers (each warp's 16 rows as the mma.sync m16n8k16 A
// fragment), B [N][16] K-major in shared memory (descriptor, as mma_64x256_ss's and
// mma_64x224_ss's B); the first product of a sum with accumulate false. The fused gate/up that
// forms its x operand from the fp32 residual in registers (llm_fused_products.cu).
#define ITERA_WGMMA_64X256_RS_ACC(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n" \
      : ITERA_WGMMA_D32 \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)))

template <class A>
__device__ __forceinline__ void mma_64x256_rs(float (&d)[32][4], const unsigned (&a)[4], std::uint64_t b,
                                              bool accumulate) {
  if constexpr (is_fp16<A>)
    ITERA_WGMMA_64X256_RS_ACC("f16");
  else
    ITERA_WGMMA_64X256_RS_ACC("bf16");
}

#define ITERA_WGMMA_64X224_RS_ACC(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %117, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n224k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111}, {%112, %113, %114, %115}, %116, p, 1, 1, 0;\n}\n" \
      : ITERA_WGMMA_D28 \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)))

template <class A>
__device__ __forceinline__ void mma_64x224_rs(float (&d)[28][4], const unsigned (&a)[4], std::uint64_t b,
                                              bool accumulate) {
  if constexpr (is_fp16<A>)
    ITERA_WGMMA_64X224_RS_ACC("f16");
  else
    ITERA_WGMMA_64X224_RS_ACC("bf16");
}

#undef ITERA_WGMMA_64X64_SS
#undef ITERA_WGMMA_64X256_SS
#undef ITERA_WGMMA_64X224_SS
#undef ITERA_WGMMA_64X64_RS
#undef ITERA_WGMMA_64X128_RS
#undef ITERA_WGMMA_64X128_SS
#undef ITERA_WGMMA_D16
#undef ITERA_WGMMA_D28
#undef ITERA_WGMMA_D32
#undef ITERA_WGMMA_64X256_RS_ACC
#undef ITERA_WGMMA_64X224_RS_ACC

}  // namespace itera::kernels::wgmma
