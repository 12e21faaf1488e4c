// The GEMM with bias and activation in its epilogue (src/kernels/vit_gemm.cuh) against an fp64
// product of the same bf16 values on random data (never zero): a partial last row tile, one and
// sixteen tiles of columns, one step of k and sixteen, each activation, and both rounding modes
// (round_sums: sum + bias rounded to bf16 before the activation, as the reference then does too).
// Every output is written (the buffer starts as NaN bits). With the grid capped at one or two
// blocks, each block walks several tiles (3-6, 16 or 3 steps of k against 3 buffers): the staging
// tile's barriers and the ring's phases across tiles, which one-tile-per-block shapes never reach.
//
// Tolerance (normalised error): the sums are fp32 over k exact products (~sqrt(k) 2^-24 relative
// from fp64), then one bf16 rounding of the result (2^-9 relative at most, ~2^-9 / sqrt(3)
// normalised) or, with round_sums, a rounding on each side of the activation, the first mirrored
// by the reference (a sum within fp32's error of a bf16 boundary can round the other way: rare).
// 4e-3 allows both; a wrong tile, column, bias or activation shows as an error of order 0.1 to 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/support/numeric_error.hpp"
#include "tests/support/random_values.hpp"
#include "workloads/gemm/numeric.hpp"

#if ITERA_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "src/kernels/launch.cuh"
#include "src/kernels/vit_gemm.cuh"
#include "tests/support/cuda_test.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(vit_gemm, matches_fp64_product) { GTEST_SKIP() << "built without the cuda backend"; }

#else

using itera::gemm::numeric::bf16_to_float;
using itera::gemm::numeric::float_to_bf16;
namespace vk = itera::kernels::vit;

class vit_gemm : public itera::test::cuda_test {};

// bf16 bits of values uniform in +-[2^-12, scale), never zero.
std::vector<std::uint16_t> random_bf16(std::size_t count, std::uint64_t seed, float scale) {
  const auto values = itera::test::nonzero_uniform(count, seed, scale);
  std::vector<std::uint16_t> out(count);
  std::transform(values.begin(), values.end(), out.begin(), float_to_bf16);
  return out;
}

double activate(vk::activation a, double x) {
  switch (a) {
    case vk::activation::quick_gelu: return x / (1.0 + std::exp(-1.702 * x));
    case vk::activation::gelu: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    case vk::activation::gelu_tanh: return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  }
  return x;
}

// A device copy of host, or nullptr (the failure recorded) when it cannot be made.
template <class T>
T* device_copy(const std::vector<T>& host) {
  void* p = nullptr;
  if (cudaMalloc(&p, host.size() * sizeof(T)) != cudaSuccess) {
    ADD_FAILURE() << "cudaMalloc of " << host.size() * sizeof(T) << " bytes failed";
    return nullptr;
  }
  if (cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess) {
    ADD_FAILURE() << "cudaMemcpy to the device failed";
    (void)cudaFree(p);
    return nullptr;
  }
  return static_cast<T*>(p);
}

TEST_F(vit_gemm, matches_fp64_product) {
  if (!itera::kernels::wgmma_available()) GTEST_SKIP() << "the fused GEMM runs on sm_90a (wgmma) only";
  struct shape {
    std::int64_t rows, n, k;
    vk::activation act;
    bool round_sums;
    int max_blocks = 0;
  };
  const shape shapes[] = {
      {300, 512, 1024, vk::activation::quick_gelu, false},
      {300, 512, 1024, vk::activation::quick_gelu, true},
      {129, 4096, 1024, vk::activation::quick_gelu, true},  // ViT-L/14's fc1 columns, two row tiles
      {77, 256, 64, vk::activation::gelu, false},           // one step of k, one tile
      {200, 768, 192, vk::activation::gelu_tanh, false},
      {300, 512, 1024, vk::activation::quick_gelu, true, 2},    // 6 tiles: three per block
      {300, 512, 1024, vk::activation::quick_gelu, false, 1},   // six tiles in one block
      {200, 768, 192, vk::activation::gelu_tanh, true, 1},      // 6 tiles of 3 steps in one block
  };
  for (const shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "rows=" << s.rows << " n=" << s.n << " k=" << s.k << " act="
                                      << static_cast<int>(s.act) << " round_sums=" << s.round_sums
                                      << " max_blocks=" << s.max_blocks);
    // Inputs at the scale of a normalised row and a Linear's weights: sums of order 1.
    const auto x = random_bf16(static_cast<std::size_t>(s.rows * s.k), 7 + static_cast<std::uint64_t>(s.rows), 2.0f);
    const auto w = random_bf16(static_cast<std::size_t>(s.n * s.k), 13 + static_cast<std::uint64_t>(s.n),
                               static_cast<float>(2.0 / std::sqrt(static_cast<double>(s.k))));
    const auto bias = random_bf16(static_cast<std::size_t>(s.n), 17, 0.5f);
    ASSERT_TRUE(vk::gemm_bias_activation_supported(s.rows, s.n, s.k));
    std::vector<float> xf(x.size()), wf(w.size()), ref(static_cast<std::size_t>(s.rows * s.n));
    for (std::size_t i = 0; i < x.size(); ++i) xf[i] = bf16_to_float(x[i]);
    for (std::size_t i = 0; i < w.size(); ++i) wf[i] = bf16_to_float(w[i]);
    for (std::int64_t r = 0; r < s.rows; ++r)
      for (std::int64_t c = 0; c < s.n; ++c) {
        double sum = bf16_to_float(bias[static_cast<std::size_t>(c)]);
        for (std::int64_t i = 0; i < s.k; ++i)
          sum += static_cast<double>(xf[static_cast<std::size_t>(r * s.k + i)]) * wf[static_cast<std::size_t>(c * s.k + i)];
        if (s.round_sums) sum = bf16_to_float(float_to_bf16(static_cast<float>(sum)));
        ref[static_cast<std::size_t>(r * s.n + c)] = static_cast<float>(activate(s.act, sum));
      }
    auto* dx = device_copy(x);
    auto* dw = device_copy(w);
    auto* db = device_copy(bias);
    ASSERT_TRUE(dx && dw && db);
    void* dout = nullptr;
    const std::size_t out_bytes = ref.size() * 2;
    ASSERT_EQ(cudaMalloc(&dout, out_bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(dout, 0xff, out_bytes), cudaSuccess);
    vk::gemm_bias_activation(reinterpret_cast<const __nv_bfloat16*>(dx), s.rows,
                             reinterpret_cast<const __nv_bfloat16*>(dw), s.n, s.k,
                             reinterpret_cast<const __nv_bfloat16*>(db), s.act, s.round_sums,
                             static_cast<__nv_bfloat16*>(dout), nullptr, s.max_blocks);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<std::uint16_t> bits(ref.size());
    ASSERT_EQ(cudaMemcpy(bits.data(), dout, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<float> got(ref.size());
    for (std::size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_float(bits[i]);
    EXPECT_LT(itera::test::normalised_error(got, ref), 4e-3);
    EXPECT_EQ(cudaFree(dx), cudaSuccess);
    EXPECT_EQ(cudaFree(dw), cudaSuccess);
    EXPECT_EQ(cudaFree(db), cudaSuccess);
    EXPECT_EQ(cudaFree(dout), cudaSuccess);
  }
}

#endif

}  // namespace
