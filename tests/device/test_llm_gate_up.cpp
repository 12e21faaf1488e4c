// The prefill's gate/up product with SwiGLU in its epilogue (src/kernels/llm_gate_up.cu) against
// an fp64 product of the same 16-bit values on random data (never zero), in bf16 and fp16: a
// partial last row tile, one row, one and several groups of row tiles (the tile order walks m
// fastest inside groups of 16), one step of k and many, and grids capped at one or two blocks so
// that a block walks several tiles (the ring's phases and the staging tile's barriers across
// tiles). Every output is written (the buffer starts as NaN bits).
//
// Reference: gate and up as fp64 sums, each rounded to the 16-bit type (the kernel rounds its fp32
// sums, as cuBLASLt's output is rounded before the SwiGLU pass), then silu(g) u in fp64. The
// kernel's fp32 sums differ from fp64 by ~sqrt(k) 2^-24 relative, which can move a sum across a
// rounding boundary (rare); the fast exponential and division are a few ulp of fp32; the result's
// rounding is 2^-9 (bf16) or 2^-12 (fp16) relative at most. 4e-3 normalised error allows all of
// them; a wrong tile, column, gate/up pairing or row shows as an error of order 0.1 to 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/support/numeric_error.hpp"
#include "tests/support/random_values.hpp"
#include "workloads/gemm/numeric.hpp"

#if ITERA_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "src/kernels/launch.cuh"
#include "src/kernels/llm_kernels.cuh"
#include "tests/support/cuda_test.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(llm_gate_up, matches_fp64_product) { GTEST_SKIP() << "built without the cuda backend"; }

#else

namespace numeric = itera::gemm::numeric;
namespace lk = itera::kernels::llm;

class llm_gate_up : public itera::test::cuda_test {};

struct codec {
  bool fp16;
  float decode(std::uint16_t b) const { return fp16 ? numeric::fp16_to_float(b) : numeric::bf16_to_float(b); }
  std::uint16_t encode(float f) const { return fp16 ? numeric::float_to_fp16(f) : numeric::float_to_bf16(f); }
};

struct shape {
  std::int64_t rows, inter, hidden;
  int max_blocks = 0;
};

// The kernel's output for one shape and type, with the reference beside it; false when a CUDA
// call failed (recorded).
bool run_shape(const shape& s, const codec& cd, std::vector<float>& got, std::vector<float>& ref) {
  const auto values = [&](std::size_t count, std::uint64_t seed, float scale) {
    const auto v = itera::test::nonzero_uniform(count, seed, scale);
    std::vector<std::uint16_t> bits(count);
    std::transform(v.begin(), v.end(), bits.begin(), [&](float f) { return cd.encode(f); });
    return bits;
  };
  // A normalised row's scale and a Linear's: sums of order 1, silu over its curved part.
  const auto x = values(static_cast<std::size_t>(s.rows * s.hidden), 7 + static_cast<std::uint64_t>(s.rows), 2.0f);
  const auto w = values(static_cast<std::size_t>(2 * s.inter * s.hidden), 13 + static_cast<std::uint64_t>(s.inter),
                        static_cast<float>(2.0 / std::sqrt(static_cast<double>(s.hidden))));
  std::vector<double> xf(x.size()), wf(w.size());
  for (std::size_t i = 0; i < x.size(); ++i) xf[i] = cd.decode(x[i]);
  for (std::size_t i = 0; i < w.size(); ++i) wf[i] = cd.decode(w[i]);
  ref.assign(static_cast<std::size_t>(s.rows * s.inter), 0.0f);
  for (std::int64_t r = 0; r < s.rows; ++r)
    for (std::int64_t c = 0; c < s.inter; ++c) {
      double g = 0, u = 0;
      const double* xr = xf.data() + r * s.hidden;
      const double* wg = wf.data() + c * s.hidden;
      const double* wu = wf.data() + (s.inter + c) * s.hidden;
      for (std::int64_t i = 0; i < s.hidden; ++i) g += xr[i] * wg[i], u += xr[i] * wu[i];
      g = cd.decode(cd.encode(static_cast<float>(g)));
      u = cd.decode(cd.encode(static_cast<float>(u)));
      ref[static_cast<std::size_t>(r * s.inter + c)] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
    }
  void *dx = nullptr, *dw = nullptr, *dact = nullptr;
  const std::size_t act_bytes = ref.size() * 2;
  bool ok = cudaMalloc(&dx, x.size() * 2) == cudaSuccess && cudaMalloc(&dw, w.size() * 2) == cudaSuccess &&
            cudaMalloc(&dact, act_bytes) == cudaSuccess &&
            cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
            cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
            cudaMemset(dact, 0xff, act_bytes) == cudaSuccess;
  if (!ok) ADD_FAILURE() << "device buffers for the shape could not be made";
  std::vector<std::uint16_t> bits(ref.size());
  if (ok) {
    if (cd.fp16)
      lk::gate_up_swiglu(static_cast<const lk::fp16*>(dx), s.rows, static_cast<const lk::fp16*>(dw), s.inter, s.hidden,
                         static_cast<lk::fp16*>(dact), nullptr, s.max_blocks);
    else
      lk::gate_up_swiglu(static_cast<const lk::bf16*>(dx), s.rows, static_cast<const lk::bf16*>(dw), s.inter, s.hidden,
                         static_cast<lk::bf16*>(dact), nullptr, s.max_blocks);
    ok = cudaDeviceSynchronize() == cudaSuccess &&
         cudaMemcpy(bits.data(), dact, act_bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
    if (!ok) ADD_FAILURE() << "the kernel or the copy back failed";
  }
  (void)cudaFree(dx), (void)cudaFree(dw), (void)cudaFree(dact);
  got.resize(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) got[i] = cd.decode(bits[i]);
  return ok;
}

TEST_F(llm_gate_up, matches_fp64_product) {
  if (!itera::kernels::wgmma_available()) GTEST_SKIP() << "the fused gate/up product runs on sm_90a (wgmma) only";
  const shape shapes[] = {
      {300, 256, 512},       // a partial last row tile, two column tiles
      {1, 128, 64},          // one row, one step of k
      {2100, 384, 256},      // 17 row tiles: a full group of 16 and a group of one
      {129, 1024, 4096, 0},  // llama's hidden: 64 steps of k
      {300, 256, 512, 2},    // 6 tiles, three a block
      {520, 256, 128, 1},    // 10 tiles of 2 steps in one block: the ring and the staging tile wrap
  };
  for (const bool fp16 : {false, true}) {
    for (const shape& s : shapes) {
      SCOPED_TRACE(::testing::Message() << (fp16 ? "fp16" : "bf16") << " rows=" << s.rows << " inter=" << s.inter
                                        << " hidden=" << s.hidden << " max_blocks=" << s.max_blocks);
      ASSERT_TRUE(lk::gate_up_swiglu_supported(s.rows, s.inter, s.hidden));
      std::vector<float> got, ref;
      if (!run_shape(s, codec{fp16}, got, ref)) continue;
      EXPECT_LT(itera::test::normalised_error(got, ref), 4e-3);
      std::size_t nonfinite = 0;
      for (const float v : got) nonfinite += std::isfinite(v) ? 0 : 1;
      EXPECT_EQ(nonfinite, 0u) << "outputs never written (NaN bits) or overflowed";
    }
  }
  EXPECT_FALSE(lk::gate_up_swiglu_supported(128, 200, 4096)) << "an intermediate size not a multiple of 128";
  EXPECT_FALSE(lk::gate_up_swiglu_supported(128, 256, 100)) << "a hidden size not a multiple of 64";
}

#endif

}  // namespace
