#pragma once
// Small pieces the kernel files share: the grid of a grid-stride loop, sums and maxima over a
// warp and over a block, and bf16 and fp8 e4m3 chunks widened to fp32.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace itera::kernels {

constexpr int block_threads = 256;  // the elementwise kernels' block

// Blocks for `work` items at `per_block` per block, at least 1, at most what a grid-stride loop
// needs to fill any GPU (65535 x 32).
inline unsigned blocks_for(std::uint64_t work, std::uint64_t per_block = block_threads) {
  const std::uint64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<std::uint64_t>(blocks, 1, 65535ull * 32));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Reductions over a block of at most 1024 threads; `scratch` holds 32 floats. Every thread gets
// the result. Ends with a barrier so scratch can be reused at once.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < warps; ++w) m = fmaxf(m, scratch[w]);
  __syncthreads();
  return m;
}

// Eight bf16 (one 16-byte chunk) widened to fp32: a bf16 is the high half of its fp32.
__device__ __forceinline__ void unpack8(const uint4& v, float* f) {
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f[2 * j] = __uint_as_float(words[j] << 16);
    f[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
  }
}

// An fp8 e4m3 value as stored (a KV cache's element, a weight code).
using fp8_code = std::uint8_t;

// Four fp8 e4m3 codes (one 32-bit word, the lowest byte first) widened to fp32, exactly: two at a
// time through fp16, which holds every e4m3 value.
__device__ __forceinline__ void unpack4_fp8(unsigned word, float* f) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const auto pair = static_cast<__nv_fp8x2_storage_t>(word >> (16 * h));
    const float2 f2 = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
    f[2 * h] = f2.x;
    f[2 * h + 1] = f2.y;
  }
}

// Sixteen fp8 e4m3 codes (one 16-byte chunk) widened to fp32.
__device__ __forceinline__ void unpack16_fp8(const uint4& v, float* f) {
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) unpack4_fp8(words[j], f + 4 * j);
}

}  // namespace itera::kernels
