#pragma once
// The formulas the llm kernels share, so that a fused kernel rounds as the unfused pair does:
// rms_norm's scale and element, SwiGLU before its rounding, and a KV cache element stored and read
// back (llm_kernels.cu, llm_decode_step.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "src/kernels/common.cuh"

namespace itera::kernels::llm {

// rms_norm's scale from a row's sum of squares, and one element of its output.
__device__ __forceinline__ float rms_scale(float sum_squares, std::int64_t hidden, float eps) {
  return rsqrtf(sum_squares / static_cast<float>(hidden) + eps);
}
template <class A>
__device__ __forceinline__ A rms_apply(float weight, float value, float scale) {
  return from_float<A>(weight * (value * scale));
}
// SwiGLU before its rounding to A: silu(g) * u.
__device__ __forceinline__ float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// A value as the cache of element C stores it: bf16 or fp16 rounded to nearest even, or the e4m3
// code (nearest even, saturating at +-448: a finite value never becomes NaN).
template <class C>
__device__ __forceinline__ C to_cache(float v) {
  if constexpr (sizeof(C) == 2)
    return from_float<C>(v);
  else
    return static_cast<fp8_code>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// A cache element as float: the 16-bit types through to_float, an fp8 e4m3 code exactly through fp16.
template <class C>
__device__ __forceinline__ float cache_value(C v) {
  if constexpr (std::is_same_v<C, fp8_code>)
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3)));
  else
    return to_float(v);
}

}  // namespace itera::kernels::llm
