#pragma once
// Small pieces the kernel files share: the grid of a grid-stride loop, sums and maxima over a
// warp and over a block, the 16-bit compute types' conversions, and bf16, fp16 and fp8 e4m3
// chunks widened to fp32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace itera::kernels {

// The 16-bit floating-point types a kernel may compute in (its activations and tensor-core
// inputs; the template parameter A of the llm kernels): bf16 (8 significant bits, fp32's range)
// or fp16 (11 significant bits, largest finite value 65504). What differs between the two is in
// the overloads and templates below, so that each kernel is written once.
using bf16 = __nv_bfloat16;
using fp16 = __half;

template <class A>
inline constexpr bool is_fp16 = std::is_same_v<A, fp16>;

// *p = v with the L2's evict_last priority for its line (sm_80 on): the line stays in the L2 while
// lines of normal priority stream through it (a layer's weights), so that the next read hits it.
__device__ __forceinline__ void store_evict_last(float4* p, float4 v) {
  std::uint64_t policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w), "l"(policy)
               : "memory");
}

__device__ __forceinline__ float to_float(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(fp16 v) { return __half2float(v); }
__device__ __forceinline__ float2 to_float2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ __forceinline__ float2 to_float2(__half2 v) { return __half22float2(v); }

// v rounded to nearest even in A (fp16: past 65504, infinity).
template <class A>
__device__ __forceinline__ A from_float(float v) {
  if constexpr (is_fp16<A>)
    return __float2half_rn(v);
  else
    return __float2bfloat16_rn(v);
}

// Two values of A side by side (lo in the low half), as one 32-bit word holds them.
template <class A>
using pair_of = std::conditional_t<is_fp16<A>, __half2, __nv_bfloat162>;
template <class A>
__device__ __forceinline__ pair_of<A> pair_from_float(float lo, float hi) {
  if constexpr (is_fp16<A>)
    return __floats2half2_rn(lo, hi);
  else
    return __floats2bfloat162_rn(lo, hi);
}
template <class A>
__device__ __forceinline__ pair_of<A> make_pair(A lo, A hi) {
  if constexpr (is_fp16<A>)
    return __halves2half2(lo, hi);
  else
    return __halves2bfloat162(lo, hi);
}
template <class A>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  const pair_of<A> v = pair_from_float<A>(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}

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

// Eight fp16 (one 16-byte chunk) widened to fp32.
__device__ __forceinline__ void unpack8_fp16(const uint4& v, float* f) {
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&words[j]));
    f[2 * j] = p.x;
    f[2 * j + 1] = p.y;
  }
}

// Eight values of A (one 16-byte chunk) widened to fp32; bf16 through unpack8 above.
template <class A>
__device__ __forceinline__ void unpack8(const uint4& v, float* f) {
  if constexpr (is_fp16<A>)
    unpack8_fp16(v, f);
  else
    unpack8(v, f);
}

// Two values of A (a 32-bit word, the first in the low half) widened to fp32.
template <class A>
__device__ __forceinline__ void unpack2(unsigned v, float* f) {
  if constexpr (is_fp16<A>) {
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&v));
    f[0] = a.x;
    f[1] = a.y;
  } else {
    f[0] = __uint_as_float(v << 16);
    f[1] = __uint_as_float(v & 0xffff0000u);
  }
}

// Four values of A (8 bytes) widened to fp32.
template <class A>
__device__ __forceinline__ void unpack4(const uint2& v, float* f) {
  if constexpr (is_fp16<A>) {
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&v.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&v.y));
    f[0] = a.x;
    f[1] = a.y;
    f[2] = b.x;
    f[3] = b.y;
  } else {
    f[0] = __uint_as_float(v.x << 16);
    f[1] = __uint_as_float(v.x & 0xffff0000u);
    f[2] = __uint_as_float(v.y << 16);
    f[3] = __uint_as_float(v.y & 0xffff0000u);
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

// The special function unit's approximations, subnormal results and inputs flushed to zero: 2^x (at
// most 2 ulp; one instruction, where exp2f adds range fix-ups) and 1 / x (at most 1 ulp). What the
// flush does to a result is each caller's to say (flash_attention.cuh: softmax_tile, activation.cuh).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace itera::kernels
