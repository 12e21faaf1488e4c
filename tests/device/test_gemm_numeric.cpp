// The host decoders the gemm verification reads device bytes with, against CUDA's own conversions
// (host-callable in the toolkit headers): every code of every 8- and 16-bit format, and the
// encoders on random floats. Needs the toolkit headers, not a GPU.
#include <gtest/gtest.h>

#if ITERA_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstring>
#include <random>

#include "workloads/gemm/numeric.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(gemm_numeric, decoders_match_cuda) { GTEST_SKIP() << "built without the cuda backend (no toolkit headers)"; }

#else

namespace nu = itera::gemm::numeric;

float half_raw_to_float(__half_raw r) { return __half2float(__half(r)); }

bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

TEST(gemm_numeric, decoders_match_cuda_for_every_code) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    EXPECT_TRUE(same(nu::fp8_e4m3_to_float(code), half_raw_to_float(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)))) << c;
    EXPECT_TRUE(same(nu::fp8_e5m2_to_float(code), half_raw_to_float(__nv_cvt_fp8_to_halfraw(code, __NV_E5M2)))) << c;
  }
  for (int c = 0; c < 16; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    EXPECT_TRUE(same(nu::fp4_e2m1_to_float(code), half_raw_to_float(__nv_cvt_fp4_to_halfraw(code, __NV_E2M1)))) << c;
  }
  for (int c = 0; c < 65536; ++c) {
    const auto code = static_cast<std::uint16_t>(c);
    __half_raw h;
    h.x = code;
    __nv_bfloat16_raw b;
    b.x = code;
    ASSERT_TRUE(same(nu::fp16_to_float(code), half_raw_to_float(h))) << c;
    ASSERT_TRUE(same(nu::bf16_to_float(code), __bfloat162float(__nv_bfloat16(b)))) << c;
  }
}

TEST(gemm_numeric, encoders_match_cuda_rounding) {
  std::mt19937 rng(12345);
  std::vector<float> xs = {0.f, -0.f, 448.f, 449.f, 464.f, 480.f, 57344.f, 61440.f, 65504.f, 65519.f, 65520.f,
                           6.f, 7.f, 0.25f, 0.75f, 2.5f, 5.f, 1e-9f, -1e-9f, INFINITY, -INFINITY};
  for (int i = 0; i < 200000; ++i) {
    const int e = static_cast<int>(rng() % 60) - 40;
    const float m = std::ldexp(static_cast<float>(rng() % (1u << 24)) / (1u << 24) + 0.5f, e);
    xs.push_back(rng() & 1 ? m : -m);
  }
  for (const float x : xs) {
    ASSERT_EQ(nu::float_to_fp8_e4m3(x), __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)) << x;
    ASSERT_EQ(nu::float_to_fp8_e5m2(x), __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2)) << x;
    ASSERT_EQ(nu::float_to_fp4_e2m1(x), __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)) << x;
    ASSERT_EQ(nu::float_to_fp16(x), static_cast<__half_raw>(__float2half_rn(x)).x) << x;
    ASSERT_EQ(nu::float_to_bf16(x), static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x) << x;
  }
}

#endif

}  // namespace
