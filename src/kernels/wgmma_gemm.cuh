#pragma once
// What the GEMMs on TMA and wgmma share (vit_gemm.cu, llm_fused_products.cu): a consumer
// warpgroup's pass over one tile's steps of k through the producer's ring, and the tensor map of
// an operand. Their stages hold x's box ([128][64], or [64][64] with one consumer), then 256 (or
// 224) rows of w, one box or two,
// in the 128-byte swizzle layout of wgmma.cuh (gate_up_swiglu_norm's stages hold fp32 boxes of x
// after w's, and its consumers take their own pass: llm_fused_products.cu); each stage has a
// `full` barrier (the producer's bytes) and an `empty` one (one arrival per consumer warpgroup), 8
// bytes apart.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "src/kernels/tma.cuh"
#include "src/kernels/wgmma.cuh"

namespace itera::kernels::wgmma {

constexpr int gemm_tile_k = 64;  // k a stage

// The producer's stage for its g-th step: waited for until the consumers freed it (from its
// second use on), its full barrier armed for StageBytes; its address, and its barrier in `bar`.
template <int Stages, unsigned StageBytes>
__device__ __forceinline__ unsigned fill_stage(unsigned ring, unsigned full, unsigned empty, int g, unsigned& bar) {
  const int s = g % Stages, use = g / Stages;
  if (use > 0) tma::barrier_wait(empty + 8 * s, static_cast<unsigned>((use - 1) & 1));
  bar = full + 8 * s;
  const unsigned base = ring + static_cast<unsigned>(s) * StageBytes;
  tma::barrier_expect_bytes(bar, StageBytes);
  return base;
}

// Consumer warpgroup c's (rows 64 c .. 64 c + 63 of x's box) products of one tile: d = x w^T over
// `ksteps` stages, g the block's running count of stages (advanced by ksteps); w's rows are 8 N of
// them (N = 32: 256 rows, N = 28: 224). The previous step's products are waited for before its
// buffer is freed (one step in flight); the last buffer is freed once all are done. Each tile's
// first product overwrites d (accumulate false).
template <class A, int Stages, unsigned StageBytes, unsigned XBytes, int N>
__device__ __forceinline__ void multiply_tile(float (&d)[N][4], unsigned ring, unsigned full, unsigned empty, int& g,
                                              int ksteps, int c, bool leader) {
  static_assert(N == 32 || N == 28, "w tiles of 256 or 224 rows");
  for (int j = 0; j < ksteps; ++j, ++g) {
    const int s = g % Stages;
    tma::barrier_wait(full + 8 * s, static_cast<unsigned>((g / Stages) & 1));
    const unsigned base = ring + static_cast<unsigned>(s) * StageBytes;
    const std::uint64_t a = descriptor(base + static_cast<unsigned>(c) * (XBytes / 2), 16, 1024);
    const std::uint64_t b = descriptor(base + XBytes, 16, 1024);
    fence();
#pragma unroll
    for (int kk = 0; kk < gemm_tile_k / 16; ++kk)
      if constexpr (N == 32)
        mma_64x256_ss<A>(d, advance(a, static_cast<unsigned>(kk) * 32), advance(b, static_cast<unsigned>(kk) * 32),
                         j > 0 || kk > 0);
      else
        mma_64x224_ss<A>(d, advance(a, static_cast<unsigned>(kk) * 32), advance(b, static_cast<unsigned>(kk) * 32),
                         j > 0 || kk > 0);
    commit();
    wait<1>();  // the previous step's products are done: its buffer is free
    if (j > 0 && leader) tma::barrier_arrive(empty + 8 * ((g - 1) % Stages));
  }
  wait<0>();
  fence_operands(d);
  if (leader) tma::barrier_arrive(empty + 8 * ((g - 1) % Stages));  // the tile's last buffer
}

// A row-major [rows][k] matrix of A (bf16 or fp16) read as [box_rows][64] boxes, 128-byte swizzle;
// boxes past the last row are filled with zeros. Throws std::runtime_error naming `who`.
template <class A>
CUtensorMap gemm_operand_map(const A* base, std::int64_t rows, std::int64_t k, unsigned box_rows, const char* who) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {gemm_tile_k, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const auto type = std::is_same_v<A, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult r = tma::encode_tiled()(&map, type, 2, const_cast<A*>(base), dims, strides, box, element_strides,
                                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error(std::string(who) + ": cuTensorMapEncodeTiled failed (error " +
                             std::to_string(static_cast<int>(r)) + ") for a [" + std::to_string(rows) + "][" +
                             std::to_string(k) + "] matrix");
  return map;
}

}  // namespace itera::kernels::wgmma
