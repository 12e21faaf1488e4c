#pragma once
// The vision encoder's activations on the device (vit_kernels.cuh: activation), shared by the
// bias + activation kernels (vit_kernels.cu) and the GEMM that applies them in its epilogue
// (vit_gemm.cu), so that both compute the same expression.
#include "src/kernels/common.cuh"
#include "src/kernels/vit_kernels.cuh"

namespace itera::kernels::vit {

// In forms without cancellation for negative x, where 1 + erf and 1 + tanh lose every bit in fp32
// (the reference computes the textbook forms in double): 1 + erf(z) = erfc(-z) and
// 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)).
__device__ __forceinline__ float activate(activation a, float x) {
  switch (a) {
    case activation::quick_gelu: return x / (1.0f + expf(-1.702f * x));
    case activation::gelu: return 0.5f * x * erfcf(-x * 0.7071067811865476f);
    case activation::gelu_tanh: {
      const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return x / (1.0f + expf(-2.0f * inner));
    }
  }
  return x;
}

// The same expressions on common.cuh's exp2_approx and rcp_approx (without .ftz, __expf compiles
// to a range test and two conditional multiplies around the same instruction: 3 of the ~13
// instructions per value of the fused fc1's epilogue, docs/perf/2026-11-30-vit-tails.md), the
// exponential's factor folded with log2(e) into one constant: x / (1 + 2^(c x)). Relative error
// about 2^-16.5 at most where the exponential does not saturate (the constant's and the argument's
// roundings, |c x| ln 2 2^-24 each for |c x| < 126, then 2 + 1 ulp), far below the bf16 rounding
// (2^-9) that follows. The flush: an exponential below 2^-126 is added to 1 (no change), and a
// denominator past 2^126 flushes the quotient to zero, for quick_gelu at x below about -51 (gelu_tanh
// -10) where the exact value is below 2^-120: zero, as __fdividef gave too. erf has no such form:
// gelu is the exact one.
__device__ __forceinline__ float activate_fast(activation a, float x) {
  constexpr float quick = static_cast<float>(-1.702 * 1.4426950408889634);
  constexpr float tanh_form = static_cast<float>(-2.0 * 1.4426950408889634);
  switch (a) {
    case activation::quick_gelu: return x * rcp_approx(1.0f + exp2_approx(quick * x));
    case activation::gelu: return activate(a, x);
    case activation::gelu_tanh: {
      const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return x * rcp_approx(1.0f + exp2_approx(tanh_form * inner));
    }
  }
  return x;
}

}  // namespace itera::kernels::vit
