// The skinny product on wgmma (src/kernels/skinny_gemm.cuh) against an fp64 product of the same
// bf16 values, on random data (never zero), over the shapes a decode step at batch 5-64 gives it
// and the edges of its tiling: a partial last tile of W rows, one x row, 64 x rows, every split of
// k (1 to 8 blocks per cluster), bf16 and fp32 outputs, beta 0 and 1. Then the same call twice:
// the sums are added in a fixed order, so the bits must agree.
//
// Tolerances (normalised error ||got - ref|| / ||ref||): the sums are fp32 over k products of
// bf16 values, exact products, so the accumulation alone differs from fp64: ~sqrt(k) * 2^-24
// relative, ~1e-5 at k = 14336; 1e-4 for fp32 outputs. bf16 outputs add one rounding of 2^-9
// relative at most (normalised ~2^-9 / sqrt(3)): 3e-3. A wrong row, column, slice or missing
// split shows as an error of order 1.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/support/numeric_error.hpp"
#include "workloads/gemm/numeric.hpp"

#if ITERA_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "src/kernels/launch.cuh"
#include "src/kernels/skinny_gemm.cuh"
#include "tests/support/cuda_test.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(skinny_gemm, matches_fp64_product) { GTEST_SKIP() << "built without the cuda backend"; }

#else

using itera::gemm::numeric::bf16_to_float;
using itera::gemm::numeric::float_to_bf16;

class skinny_gemm : public itera::test::cuda_test {};

// bf16 bits of values uniform in +-[2^-12, 1), never zero.
std::vector<std::uint16_t> random_bf16(std::size_t count, std::uint64_t seed) {
  std::vector<std::uint16_t> out(count);
  std::uint64_t s = seed;
  for (auto& v : out) {
    s += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = (s ^ (s >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = std::max(static_cast<float>(z >> 40) * 0x1p-24f, 0x1p-12f);
    v = float_to_bf16((z & 1) ? u : -u);
  }
  return out;
}

template <class T>
T* device_copy(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return static_cast<T*>(p);
}

struct shape {
  std::int64_t n, m, k;
  bool fp32_out;
  float beta;
};

TEST_F(skinny_gemm, matches_fp64_product_and_repeats_bit_for_bit) {
  if (!itera::kernels::wgmma_available()) GTEST_SKIP() << "the skinny product runs on sm_90a (wgmma) only";
  const shape shapes[] = {
      {5, 4096, 4096, false, 0.0f},     // qkv-like, split 4
      {64, 6144, 4096, false, 0.0f},    // a full x tile
      {64, 4096, 4096, true, 1.0f},     // o_proj into the residual, split 8
      {37, 4096, 14336, true, 1.0f},    // down, split 8, long slices
      {1, 200, 192, true, 0.0f},        // one x row, a partial W tile, three steps of k (split 1)
      {17, 28672, 4096, false, 0.0f},   // gate/up: many tiles, split 1
      {64, 1000, 4096, true, 0.0f},     // logits-like, partial last tile
  };
  for (const shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "n=" << s.n << " m=" << s.m << " k=" << s.k << (s.fp32_out ? " fp32" : " bf16")
                                      << " beta=" << s.beta);
    const auto w = random_bf16(static_cast<std::size_t>(s.m * s.k), 11 + static_cast<std::uint64_t>(s.m));
    const auto x = random_bf16(static_cast<std::size_t>(s.n * s.k), 23 + static_cast<std::uint64_t>(s.n));
    std::vector<float> prior(static_cast<std::size_t>(s.n * s.m));
    for (std::size_t i = 0; i < prior.size(); ++i) prior[i] = 0.25f + static_cast<float>(i % 7) * 0.125f;
    ASSERT_TRUE(itera::kernels::llm::skinny_gemm_supported(s.n, s.m, s.k, reinterpret_cast<void*>(256),
                                                           reinterpret_cast<void*>(256), reinterpret_cast<void*>(256)));

    // fp64 reference of the same bf16 values (+ beta * prior for fp32 outputs).
    std::vector<float> wf(w.size()), xf(x.size()), ref(static_cast<std::size_t>(s.n * s.m));
    for (std::size_t i = 0; i < w.size(); ++i) wf[i] = bf16_to_float(w[i]);
    for (std::size_t i = 0; i < x.size(); ++i) xf[i] = bf16_to_float(x[i]);
    for (std::int64_t t = 0; t < s.n; ++t)
      for (std::int64_t r = 0; r < s.m; ++r) {
        double sum = 0;
        const float* wr = wf.data() + r * s.k;
        const float* xr = xf.data() + t * s.k;
        for (std::int64_t i = 0; i < s.k; ++i) sum += static_cast<double>(wr[i]) * xr[i];
        const auto at = static_cast<std::size_t>(t * s.m + r);
        ref[at] = static_cast<float>(sum + (s.fp32_out ? s.beta * prior[at] : 0.0));
      }

    auto* dw = device_copy(w);
    auto* dx = device_copy(x);
    void* dout = nullptr;
    const std::size_t out_bytes = static_cast<std::size_t>(s.n * s.m) * (s.fp32_out ? 4 : 2);
    ASSERT_EQ(cudaMalloc(&dout, out_bytes), cudaSuccess);
    std::vector<float> got[2];
    std::vector<unsigned char> bits[2];
    for (int run = 0; run < 2; ++run) {
      if (s.fp32_out)
        ASSERT_EQ(cudaMemcpy(dout, prior.data(), out_bytes, cudaMemcpyHostToDevice), cudaSuccess);
      else
        ASSERT_EQ(cudaMemset(dout, 0xff, out_bytes), cudaSuccess);  // NaN bits: every output must be written
      itera::kernels::llm::skinny_gemm(reinterpret_cast<const __nv_bfloat16*>(dw), s.m, s.k,
                                       reinterpret_cast<const __nv_bfloat16*>(dx), s.n, dout, s.fp32_out, s.beta,
                                       nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      bits[run].resize(out_bytes);
      ASSERT_EQ(cudaMemcpy(bits[run].data(), dout, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      got[run].resize(ref.size());
      for (std::size_t i = 0; i < ref.size(); ++i) {
        if (s.fp32_out) {
          std::memcpy(&got[run][i], bits[run].data() + 4 * i, 4);
        } else {
          std::uint16_t b = 0;
          std::memcpy(&b, bits[run].data() + 2 * i, 2);
          got[run][i] = bf16_to_float(b);
        }
      }
    }
    const double error = itera::test::normalised_error(got[0], ref);
    EXPECT_LT(error, s.fp32_out ? 1e-4 : 3e-3);
    EXPECT_TRUE(bits[0] == bits[1]) << "two runs gave different bits";
    EXPECT_EQ(cudaFree(dw), cudaSuccess);
    EXPECT_EQ(cudaFree(dx), cudaSuccess);
    EXPECT_EQ(cudaFree(dout), cudaSuccess);
  }
}

#endif

}  // namespace
