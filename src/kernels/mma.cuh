#pragma once
// Building blocks of the tensor-core kernels (sm_80 and later): asynchronous copies into shared
// memory, a bank-conflict-free tile layout for ldmatrix, ldmatrix itself, and the mma.sync
// m16n8k16 on bf16 or fp16 inputs (common.cuh: the compute type A) with fp32 accumulators. The
// copies and ldmatrix move 16-bit elements whatever they hold. Fragment layouts are the PTX ISA's: for lane l, g = l / 4 and
// t = l % 4; A (16 x 16) a0 = (g, 2t..2t+1), a1 = (g + 8, ..), a2 = (g, 2t + 8..), a3 = (g + 8, 2t + 8..);
// B (16 x 8) b0 = (k 2t..2t+1, n g), b1 = (k 2t + 8.., n g); C (16 x 8) c0, c1 = (g, 2t..), c2, c3 = (g + 8, 2t..).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "src/kernels/common.cuh"

namespace itera::kernels {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared; src_bytes 0 zero-fills the destination (src must still be a
// valid address).
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Byte offset of 16-byte chunk c of row r in a [rows][D] tile of 16-bit elements, arranged so that the eight
// rows an ldmatrix reads at one column (rows 8i .. 8i + 7) fall in distinct banks. D / 8 a power
// of two: chunks XOR-swizzled within groups of up to eight. D = 80 (ten chunks, the padded head
// dimension 72): a row starts two chunks further along the 128-byte bank line than the one before,
// so rows 8i .. 8i + 3 start at even chunks mod 8 and 8i + 4 .. 8i + 7 at the same ones again;
// flipping the chunk's lowest bit in the second four moves them to the odd chunks.
template <int D>
__device__ __forceinline__ unsigned swizzle(int r, int c) {
  constexpr int chunks = D / 8;
  if constexpr ((chunks & (chunks - 1)) == 0) {
    constexpr int group = chunks < 8 ? chunks : 8;
    return static_cast<unsigned>(r * chunks + (c ^ (r % group))) * 16u;
  } else {
    static_assert(chunks == 10, "swizzle: D / 8 must be a power of two, or D = 80");
    return static_cast<unsigned>(r * chunks + (c ^ ((r >> 2) & 1))) * 16u;
  }
}

__device__ __forceinline__ void ldmatrix_x4(unsigned addr, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned addr, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// Four 8x8 matrices of 16-bit values to shared memory (sm_90): lane l gives the address of row
// l % 8 of matrix l / 8 and holds, of each matrix i, the pair in row l / 4, columns 2 (l % 4) and
// the one after, in r[i] (the layout of an mma accumulator fragment's pair).
__device__ __forceinline__ void stmatrix_x4(unsigned addr, const unsigned (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}

// d += a b: m16n8k16, inputs of A (bf16 or fp16; the fragments' layout is the same), fp32
// accumulators.
template <class A>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (is_fp16<A>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Accumulator fragments c[n] (each the m16n8 C fragment of columns 8n ..) times a per row: a_lo for
// the thread's row g (c0, c1), a_hi for row g + 8 (c2, c3). The online softmax's O rescale.
template <int N>
__device__ __forceinline__ void scale_rows(float (&c)[N][4], float a_lo, float a_hi) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
    c[n][0] *= a_lo;
    c[n][1] *= a_lo;
    c[n][2] *= a_hi;
    c[n][3] *= a_hi;
  }
}

// `count` rows of D 16-bit elements E from src (row stride `stride` elements) into a swizzled
// tile, rows at or past `valid` zero-filled, the 16-byte chunks dealt over `threads` threads.
template <int D, int threads, class E>
__device__ __forceinline__ void load_tile(unsigned char* dst, const E* src, std::int64_t stride, int count, int valid) {
  static_assert(sizeof(E) == 2, "rows of 16-bit elements");
  constexpr int chunks = D / 8;
  for (int i = static_cast<int>(threadIdx.x); i < count * chunks; i += threads) {
    const int r = i / chunks, c = i % chunks;
    const bool ok = r < valid;
    cp_async16(smem_addr(dst + swizzle<D>(r, c)), ok ? src + r * stride + c * 8 : src, ok ? 16 : 0);
  }
}

// The same for rows of D elements held as DP (D rounded up to a multiple of 16) in the tile:
// chunks at or past D / 8 are zero-filled too.
template <int D, int DP, int threads, class E>
__device__ __forceinline__ void load_tile_padded(unsigned char* dst, const E* src, std::int64_t stride, int count,
                                                 int valid) {
  if constexpr (D == DP) {
    load_tile<D, threads>(dst, src, stride, count, valid);
  } else {
    constexpr int chunks = DP / 8, real = D / 8;
    for (int i = static_cast<int>(threadIdx.x); i < count * chunks; i += threads) {
      const int r = i / chunks, c = i % chunks;
      const bool ok = r < valid && c < real;
      cp_async16(smem_addr(dst + swizzle<DP>(r, c)), ok ? src + r * stride + c * 8 : src, ok ? 16 : 0);
    }
  }
}

}  // namespace itera::kernels
