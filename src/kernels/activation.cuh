#pragma once
// The vision encoder's activations on the device (vit_kernels.cuh: activation), shared by the
// bias + activation kernels (vit_kernels.cu) and the GEMM that applies them in its epilogue
// (vit_gemm.cu), so that both compute the same expression.
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

// The same expressions with the hardware's approximate exponential and division (__expf: at most
// 2 + floor(1.173 |x|) ulp, about 2^-16 relative at the largest arguments that do not saturate;
// __fdividef): a few instructions instead of ~40 for expf and an IEEE division, still well below
// the bf16 rounding (2^-9) that follows. erf has no such form: gelu is the exact one.
__device__ __forceinline__ float activate_fast(activation a, float x) {
  switch (a) {
    case activation::quick_gelu: return __fdividef(x, 1.0f + __expf(-1.702f * x));
    case activation::gelu: return activate(a, x);
    case activation::gelu_tanh: {
      const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return __fdividef(x, 1.0f + __expf(-2.0f * inner));
    }
  }
  return x;
}

}  // namespace itera::kernels::vit
