#pragma once
// The formulas the llm kernels share, so that a fused kernel rounds as the unfused pair does:
// rms_norm's scale and element, SwiGLU before its rounding, and a KV cache element stored and read
// back, and the fp16 operands of fp8 products on tensor cores (llm_kernels.cu, llm_decode_step.cu).
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
// SwiGLU before its rounding to A: silu(g) * u. The batch-1 decode step (llm_decode_step.cu)
// forms it with expf and an IEEE division; the elementwise and fused-product kernels
// (llm_kernels.cu) with silu_times_fast.
__device__ __forceinline__ float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }
// The same on the fast exponential and division (ex2.approx, rcp.approx: a few ulp of fp32, below
// the rounding to A that follows; as g -> -inf the divisor becomes inf and the quotient 0, silu's
// limit). With silu_times (~30 instructions a value) the 2048-token prefill's SwiGLU pass was
// bound by its arithmetic, 1.62 ms a pass on the H200; with this one (and no 64-bit division) by
// its bytes, 1.29 ms. Inside the decode step it made the step slower (fp8 2.502 -> 2.515 ms, bf16
// 3.930 -> 3.937; the step forms 14336 values a layer, so presumably the code's layout, not the
// arithmetic): docs/perf/2026-12-01-prefill-balance.md.
__device__ __forceinline__ float silu_times_fast(float g, float u) { return __fdividef(g, 1.0f + __expf(-g)) * u; }

// A value as the cache of element C stores it: bf16 or fp16 rounded to nearest even, or the e4m3
// code (nearest even, saturating at +-448: a finite value never becomes NaN).
template <class C>
__device__ __forceinline__ C to_cache(float v) {
  if constexpr (sizeof(C) == 2)
    return from_float<C>(v);
  else
    return static_cast<fp8_code>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// RoPE (rotate_half): the angle of inverse frequency inv_freq at `pos` in fp32, its cosine and
// sine by sincosf (the reference rounds double ones: within an ulp or two), and the pair
// (x[i], x[i + half]) rotated by them. Every kernel that rotates q or k calls these, so that the
// unfused, fused and one-kernel decode paths give the same bits.
template <class I>
__device__ __forceinline__ float2 rope_cos_sin(I pos, float inv_freq) {
  float sn = 0, c = 0;
  sincosf(static_cast<float>(pos) * inv_freq, &sn, &c);
  return make_float2(c, sn);
}
__device__ __forceinline__ float2 rope_rotate(float x1, float x2, float2 cs) {
  return make_float2(x1 * cs.x - x2 * cs.y, x2 * cs.x + x1 * cs.y);
}

// Row t's position and sequence in a pass of per_seq rows a sequence, sequence i starting at
// start[i].
__device__ __forceinline__ std::int64_t row_position(const std::int32_t* start, std::int64_t t, std::int64_t per_seq,
                                                     std::int64_t* seq) {
  *seq = t / per_seq;
  return static_cast<std::int64_t>(start[*seq]) + t % per_seq;
}

// Four values of A from one 8-byte load, as float.
template <class A>
__device__ __forceinline__ void load4(const A* p, float* f) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);  // one 8-byte load (through a reference: two 4-byte ones)
  unpack4<A>(v, f);
}

// Four values in one 8-byte store (16-bit C), or four e4m3 codes in one 4-byte store, the first
// value in the lowest byte.
template <class C>
__device__ __forceinline__ void store4(C* p, const float* f) {
  if constexpr (sizeof(C) == 2) {
    *reinterpret_cast<uint2*>(p) = make_uint2(pack2<C>(f[0], f[1]), pack2<C>(f[2], f[3]));
  } else {
    unsigned word = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) word |= static_cast<unsigned>(to_cache<fp8_code>(f[j])) << (8 * j);
    *reinterpret_cast<unsigned*>(p) = word;
  }
}

// A cache element as float: the 16-bit types through to_float, an fp8 e4m3 code exactly through fp16.
template <class C>
__device__ __forceinline__ float cache_value(C v) {
  if constexpr (std::is_same_v<C, fp8_code>)
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3)));
  else
    return to_float(v);
}

// fp8 weights on tensor cores (llm_kernels.cu's gemv, llm_decode_step.cu): the fp16 pair of two
// e4m3 codes (the low byte first), as the mma's A or B register.
__device__ __forceinline__ unsigned fp16_pair_of_codes(unsigned two_codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes), __NV_E4M3);
  return static_cast<unsigned>(h.x) | (static_cast<unsigned>(h.y) << 16);
}

// An activation as the fp8 weights' tensor cores take it: saturated at fp16's largest finite value.
__device__ __forceinline__ float fp16_saturated(float x) { return fminf(fmaxf(x, -65504.0f), 65504.0f); }

// Eight values of A (a 16-byte chunk) as eight fp16, saturated at +-65504.
template <class A>
__device__ __forceinline__ uint4 fp16_chunk(const uint4& v) {
  if constexpr (is_fp16<A>) {
    return v;
  } else {
    float f[8];
    unpack8<A>(v, f);
    unsigned w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = pack2<fp16>(fp16_saturated(f[2 * j]), fp16_saturated(f[2 * j + 1]));
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

}  // namespace itera::kernels::llm
