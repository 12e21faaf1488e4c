// The prefill's fused products (src/kernels/llm_fused_products.cu) against fp64 on random data
// (never zero), in bf16 and fp16.
//
// gate_up_swiglu against an fp64 product of the same 16-bit values: a
// partial last row tile, one row, one and several groups of row tiles (the tile order walks m
// fastest inside groups of 16), one step of k and many, and grids capped at one or two blocks so
// that a block walks several tiles (the ring's phases and the staging tile's barriers across
// tiles); tiles of 128 act columns and of 112 (a decode's, 224 rows of w a wgmma: one row, a
// batch of 64 over llama's hidden, two row tiles over two blocks), of 64 rows (at most 64 rows:
// one consumer warpgroup, five stages) and of 128. Every output is written (the
// buffer starts as NaN bits).
//
// Reference: gate and up as fp64 sums, each rounded to the 16-bit type (the kernel rounds its fp32
// sums, as cuBLASLt's output is rounded before the SwiGLU pass), then silu(g) u in fp64. The
// kernel's fp32 sums differ from fp64 by ~sqrt(k) 2^-24 relative, which can move a sum across a
// rounding boundary (rare); the fast exponential and division are a few ulp of fp32; the result's
// rounding is 2^-9 (bf16) or 2^-12 (fp16) relative at most. 4e-3 normalised error allows all of
// them; a wrong tile, column, gate/up pairing or row shows as an error of order 0.1 to 1.
//
// qkv_rope_store against the product in fp64 rounded to the 16-bit type, then bias_rope_store's
// steps (bias, rotation by angle float(pos) * inv_freq[i], in fp64 here): the qkv rows and both
// caches, for two sequences that start at positions 0 and 7 (rows past a sequence's cached part
// untouched), head_dim 64 and 128, with and without a bias, a 16-bit and an fp8 cache. The same
// 4e-3 holds for the rows and a 16-bit cache (one more rounding, of the rotation); an fp8 cache
// rounds to 3 mantissa bits (2^-4 relative): 4e-2, as the engine's fp8-cache tests allow.
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
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "src/kernels/launch.cuh"
#include "src/kernels/llm_kernels.cuh"
#include "tests/support/cuda_test.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(llm_fused_products, gate_up_swiglu_matches_fp64) { GTEST_SKIP() << "built without the cuda backend"; }
TEST(llm_fused_products, qkv_rope_store_matches_fp64) { GTEST_SKIP() << "built without the cuda backend"; }
TEST(llm_fused_products, gate_up_swiglu_norm_matches_fp64_and_the_norm_kernel) {
  GTEST_SKIP() << "built without the cuda backend";
}

#else

namespace numeric = itera::gemm::numeric;
namespace lk = itera::kernels::llm;

class llm_fused_products : public itera::test::cuda_test {};

struct codec {
  bool fp16;
  float decode(std::uint16_t b) const { return fp16 ? numeric::fp16_to_float(b) : numeric::bf16_to_float(b); }
  std::uint16_t encode(float f) const { return fp16 ? numeric::float_to_fp16(f) : numeric::float_to_bf16(f); }
};

struct shape {
  std::int64_t rows, inter, hidden;
  int max_blocks = 0;
  int cols = 0;  // a tile's act columns (0: the rule)
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
                         static_cast<lk::fp16*>(dact), nullptr, s.max_blocks, s.cols);
    else
      lk::gate_up_swiglu(static_cast<const lk::bf16*>(dx), s.rows, static_cast<const lk::bf16*>(dw), s.inter, s.hidden,
                         static_cast<lk::bf16*>(dact), nullptr, s.max_blocks, s.cols);
    ok = cudaDeviceSynchronize() == cudaSuccess &&
         cudaMemcpy(bits.data(), dact, act_bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
    if (!ok) ADD_FAILURE() << "the kernel or the copy back failed";
  }
  (void)cudaFree(dx), (void)cudaFree(dw), (void)cudaFree(dact);
  got.resize(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) got[i] = cd.decode(bits[i]);
  return ok;
}

TEST_F(llm_fused_products, gate_up_swiglu_matches_fp64) {
  if (!itera::kernels::wgmma_available()) GTEST_SKIP() << "the fused gate/up product runs on sm_90a (wgmma) only";
  const shape shapes[] = {
      {300, 256, 512},       // a partial last row tile, two column tiles
      {1, 128, 64},          // one row, one step of k
      {2100, 384, 256},      // 17 row tiles: a full group of 16 and a group of one
      {129, 1024, 4096, 0},  // llama's hidden: 64 steps of k
      {300, 256, 512, 2},    // 6 tiles, three a block
      {520, 256, 128, 1},    // 10 tiles of 2 steps in one block: the ring and the staging tile wrap
      {1, 896, 64, 1, 112},     // 112-column tiles: one row, 8 tiles in one block
      {64, 1792, 4096, 0, 112},  // a batch of 64 over llama's hidden, 16 tiles
      {130, 896, 512, 2, 112},  // two row tiles, 16 tiles over two blocks
      {40, 512, 256, 1},        // 64-row tiles of 128 columns: 4 tiles of 4 steps in one block
  };
  for (const bool fp16 : {false, true}) {
    for (const shape& s : shapes) {
      SCOPED_TRACE(::testing::Message() << (fp16 ? "fp16" : "bf16") << " rows=" << s.rows << " inter=" << s.inter
                                        << " hidden=" << s.hidden << " max_blocks=" << s.max_blocks
                                        << " cols=" << s.cols);
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
  // The rule: 112 columns where one row tile's tiles fill the grid better (llama-3.1-8b's 14336:
  // 128 tiles of 112 fill 64 SMs twice, 112 tiles of 128 leave 16 of the second pass idle; on 56
  // SMs the 128-column tiles fill two passes, the 112-column ones 128 of three passes' 168). Grids
  // below every sm_90a part's SM count, so that the cap is what the rule sees.
  EXPECT_EQ(lk::gate_up_swiglu_cols(64, 14336, 64), 112);
  EXPECT_EQ(lk::gate_up_swiglu_cols(64, 14336, 56), 128);
  EXPECT_EQ(lk::gate_up_swiglu_cols(2048, 14336, 64), 128) << "many row tiles: 128 columns";
  EXPECT_EQ(lk::gate_up_swiglu_cols(64, 8192, 64), 128) << "112 does not divide the intermediate size";
  EXPECT_FALSE(lk::gate_up_swiglu_supported(128, 256, 100)) << "a hidden size not a multiple of 64";
}

// A device buffer holding host's bytes (NaN bits where host is empty: count elements of 2 bytes),
// or nullptr with the failure recorded.
void* device_bytes(const void* host, std::size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    ADD_FAILURE() << "cudaMalloc of " << bytes << " bytes failed";
    return nullptr;
  }
  const bool ok = host ? cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess
                       : cudaMemset(p, 0xff, bytes) == cudaSuccess;
  if (!ok) ADD_FAILURE() << "filling a device buffer failed";
  return p;
}

TEST_F(llm_fused_products, qkv_rope_store_matches_fp64) {
  if (!itera::kernels::wgmma_available()) GTEST_SKIP() << "the fused qkv product runs on sm_90a (wgmma) only";
  struct shape {
    std::int64_t head_dim, heads, kv_heads, hidden;
    bool bias;
    lk::kv_storage kv;
    int max_blocks = 0;
  };
  constexpr std::int64_t seqs = 2, per_seq = 150, max_context = 170;
  const std::int32_t starts[seqs] = {0, 7};
  const std::int64_t rows = seqs * per_seq;
  for (const bool fp16 : {false, true}) {
    const codec cd{fp16};
    const lk::kv_storage same = fp16 ? lk::kv_storage::fp16 : lk::kv_storage::bf16;
    const shape shapes[] = {
        {128, 4, 2, 256, false, same},
        {64, 8, 4, 128, true, same},
        {128, 4, 2, 512, true, lk::kv_storage::fp8_e4m3},
        {128, 4, 2, 256, false, same, 1},  // 3 x 4 tiles in one block
    };
    for (const shape& sh : shapes) {
      const bool fp8 = sh.kv == lk::kv_storage::fp8_e4m3;
      SCOPED_TRACE(::testing::Message() << (fp16 ? "fp16" : "bf16") << " head_dim=" << sh.head_dim << " heads="
                                        << sh.heads << " kv_heads=" << sh.kv_heads << " bias=" << sh.bias
                                        << (fp8 ? " fp8 cache" : " 16-bit cache") << " max_blocks=" << sh.max_blocks);
      lk::attention_shape s;
      s.heads = sh.heads, s.kv_heads = sh.kv_heads, s.head_dim = sh.head_dim, s.max_context = max_context;
      s.rows_per_seq = per_seq, s.kv = sh.kv;
      ASSERT_TRUE(lk::qkv_rope_store_supported(rows, sh.hidden, s));
      const std::int64_t hd = sh.head_dim, half = hd / 2, q_dim = sh.heads * hd, kv_dim = sh.kv_heads * hd;
      const std::int64_t width = q_dim + 2 * kv_dim;
      const auto values = [&](std::size_t count, std::uint64_t seed, float scale) {
        const auto v = itera::test::nonzero_uniform(count, seed, scale);
        std::vector<std::uint16_t> bits(count);
        std::transform(v.begin(), v.end(), bits.begin(), [&](float f) { return cd.encode(f); });
        return bits;
      };
      const auto x = values(static_cast<std::size_t>(rows * sh.hidden), 3, 2.0f);
      const auto w = values(static_cast<std::size_t>(width * sh.hidden), 5,
                            static_cast<float>(2.0 / std::sqrt(static_cast<double>(sh.hidden))));
      const auto bias = values(static_cast<std::size_t>(width), 9, 0.5f);
      std::vector<float> inv_freq(static_cast<std::size_t>(half));
      for (std::int64_t i = 0; i < half; ++i)
        inv_freq[static_cast<std::size_t>(i)] =
            static_cast<float>(std::pow(500000.0, -2.0 * static_cast<double>(i) / static_cast<double>(hd)));
      // The reference: rows, then each sequence's cached positions.
      std::vector<float> want_rows(static_cast<std::size_t>(rows * width));
      const std::size_t cache_elems = static_cast<std::size_t>(seqs * sh.kv_heads * max_context * hd);
      std::vector<float> want_k(cache_elems, NAN), want_v(cache_elems, NAN);
      for (std::int64_t t = 0; t < rows; ++t) {
        const std::int64_t seq = t / per_seq, pos = starts[seq] + t % per_seq;
        std::vector<double> v(static_cast<std::size_t>(width));
        for (std::int64_t col = 0; col < width; ++col) {
          double sum = 0;
          for (std::int64_t i = 0; i < sh.hidden; ++i)
            sum += static_cast<double>(cd.decode(x[static_cast<std::size_t>(t * sh.hidden + i)])) *
                   cd.decode(w[static_cast<std::size_t>(col * sh.hidden + i)]);
          v[static_cast<std::size_t>(col)] = cd.decode(cd.encode(static_cast<float>(sum))) +
                                             (sh.bias ? cd.decode(bias[static_cast<std::size_t>(col)]) : 0.0);
        }
        for (std::int64_t head = 0; head < sh.heads + sh.kv_heads; ++head) {
          const std::int64_t col = head * hd;
          for (std::int64_t i = 0; i < half; ++i) {
            const double angle = static_cast<float>(pos) * inv_freq[static_cast<std::size_t>(i)];
            const double x1 = v[static_cast<std::size_t>(col + i)], x2 = v[static_cast<std::size_t>(col + i + half)];
            v[static_cast<std::size_t>(col + i)] = x1 * std::cos(angle) - x2 * std::sin(angle);
            v[static_cast<std::size_t>(col + i + half)] = x2 * std::cos(angle) + x1 * std::sin(angle);
          }
        }
        for (std::int64_t col = 0; col < width; ++col)
          want_rows[static_cast<std::size_t>(t * width + col)] = static_cast<float>(v[static_cast<std::size_t>(col)]);
        for (std::int64_t kvh = 0; kvh < sh.kv_heads; ++kvh)
          for (std::int64_t d = 0; d < hd; ++d) {
            const auto at = static_cast<std::size_t>(((seq * sh.kv_heads + kvh) * max_context + pos) * hd + d);
            want_k[at] = static_cast<float>(v[static_cast<std::size_t>(q_dim + kvh * hd + d)]);
            want_v[at] = static_cast<float>(v[static_cast<std::size_t>(q_dim + kv_dim + kvh * hd + d)]);
          }
      }
      const std::size_t cache_bytes = cache_elems * (fp8 ? 1 : 2);
      void* dx = device_bytes(x.data(), x.size() * 2);
      void* dw = device_bytes(w.data(), w.size() * 2);
      void* db = device_bytes(bias.data(), bias.size() * 2);
      void* df = device_bytes(inv_freq.data(), inv_freq.size() * 4);
      void* ds = device_bytes(starts, sizeof starts);
      void* dk = device_bytes(nullptr, cache_bytes);
      void* dv = device_bytes(nullptr, cache_bytes);
      void* dq = device_bytes(nullptr, want_rows.size() * 2);
      ASSERT_TRUE(dx && dw && db && df && ds && dk && dv && dq);
      const auto run = [&](auto a) {
        using A = decltype(a);
        lk::qkv_rope_store(static_cast<const A*>(dx), rows, sh.hidden, static_cast<const A*>(dw),
                           sh.bias ? static_cast<const A*>(db) : nullptr, static_cast<const float*>(df),
                           static_cast<const std::int32_t*>(ds), s, dk, dv, static_cast<A*>(dq), nullptr,
                           sh.max_blocks);
      };
      if (fp16) run(lk::fp16{});
      else run(lk::bf16{});
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<std::uint16_t> row_bits(want_rows.size());
      std::vector<std::uint8_t> k_bytes(cache_bytes), v_bytes(cache_bytes);
      ASSERT_EQ(cudaMemcpy(row_bits.data(), dq, row_bits.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(k_bytes.data(), dk, cache_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(v_bytes.data(), dv, cache_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      for (void* p : {dx, dw, db, df, ds, dk, dv, dq}) EXPECT_EQ(cudaFree(p), cudaSuccess);
      std::vector<float> got_rows(row_bits.size());
      for (std::size_t i = 0; i < row_bits.size(); ++i) got_rows[i] = cd.decode(row_bits[i]);
      EXPECT_LT(itera::test::normalised_error(got_rows, want_rows), 4e-3) << "the qkv rows";
      // The caches at each sequence's positions; every other slot keeps its fill (NaN bits for a
      // 16-bit cache, 0xff for fp8: e4m3's NaN).
      const auto cache_value = [&](const std::vector<std::uint8_t>& b, std::size_t i) {
        if (fp8) return numeric::fp8_e4m3_to_float(b[i]);
        std::uint16_t bits;
        std::memcpy(&bits, b.data() + 2 * i, 2);
        return cd.decode(bits);
      };
      for (const auto* which : {&want_k, &want_v}) {
        const auto& bytes = which == &want_k ? k_bytes : v_bytes;
        std::vector<float> got, want;
        std::size_t written_outside = 0;
        for (std::size_t i = 0; i < cache_elems; ++i) {
          const float g = cache_value(bytes, i);
          if (std::isnan((*which)[i])) {
            written_outside += std::isnan(g) ? 0 : 1;
            continue;
          }
          got.push_back(g), want.push_back((*which)[i]);
        }
        EXPECT_EQ(got.size(), static_cast<std::size_t>(rows * kv_dim));
        EXPECT_EQ(written_outside, 0u) << (which == &want_k ? "k" : "v") << " cache slots past the sequences written";
        EXPECT_LT(itera::test::normalised_error(got, want), fp8 ? 4e-2 : 4e-3) << (which == &want_k ? "k" : "v")
                                                                               << " cache";
      }
    }
  }
  lk::attention_shape odd;
  odd.heads = 3, odd.kv_heads = 1, odd.head_dim = 128, odd.rows_per_seq = 1, odd.max_context = 8;
  EXPECT_FALSE(lk::qkv_rope_store_supported(128, 256, odd)) << "a q width not a multiple of 256";
}

// gate_up_swiglu_norm (the residual x in fp32, its rows normalised inside the kernel) against
// (1) fp64: rms_norm(x, weight) exactly, its products with w in fp64, gate and up rounded to the
// 16-bit type, silu(g) u; (2) the path it replaces on the GPU, rms_norm then gate_up_swiglu. The
// kernel rounds A(weight * x) as its operand and scales the fp32 sums by the row's rms_scale where
// rms_norm rounds A(weight * x * scale): either operand is within 2^-9 (bf16) of the exact one.
// On these rows (weights up to 1.5, sums up to a few units) the pair itself measured 4.1-4.2e-3
// against fp64 and the kernel 4.1-5.4e-3 (6.6e-3 against the pair at one step of k, where 64 terms
// average the roundings less; H200, docs/perf/2026-12-02-gate-up-norm.md): 8e-3 allows both.
// Rows of different scales (a row's scale applied to another's sums is off by up to 5x), a partial
// row tile, one step of k, tiles of 112 and 128
// columns, and grids of one block walking several tiles (the sums of squares start again each
// tile; the ring wraps).
TEST_F(llm_fused_products, gate_up_swiglu_norm_matches_fp64_and_the_norm_kernel) {
  if (!itera::kernels::wgmma_available()) GTEST_SKIP() << "the fused gate/up product runs on sm_90a (wgmma) only";
  const shape shapes[] = {
      {64, 1792, 4096, 0, 112},  // a batch of 64 over llama's hidden: 16 tiles
      {5, 256, 512},             // 5 rows of a 64-row tile, 128-column tiles, 8 steps of k
      {1, 896, 64, 1, 112},      // one row, one step of k, 8 tiles in one block
      {40, 512, 256, 1},         // 4 tiles of 4 steps in one block
      {64, 896, 1024, 3, 112},   // 8 tiles over 3 blocks
  };
  constexpr float eps = 1e-5f;
  for (const bool fp16 : {false, true}) {
    const codec cd{fp16};
    for (const shape& s : shapes) {
      SCOPED_TRACE(::testing::Message() << (fp16 ? "fp16" : "bf16") << " rows=" << s.rows << " inter=" << s.inter
                                        << " hidden=" << s.hidden << " max_blocks=" << s.max_blocks
                                        << " cols=" << s.cols);
      ASSERT_TRUE(lk::gate_up_swiglu_norm_supported(s.rows, s.inter, s.hidden));
      const auto n = static_cast<std::size_t>(s.rows * s.hidden);
      std::vector<float> x = itera::test::nonzero_uniform(n, 41 + static_cast<std::uint64_t>(s.rows), 2.0f);
      for (std::int64_t r = 0; r < s.rows; ++r)
        for (std::int64_t i = 0; i < s.hidden; ++i) x[static_cast<std::size_t>(r * s.hidden + i)] *= 1.0f + r % 5;
      const auto bits_of = [&](const std::vector<float>& v) {
        std::vector<std::uint16_t> b(v.size());
        std::transform(v.begin(), v.end(), b.begin(), [&](float f) { return cd.encode(f); });
        return b;
      };
      const auto weight = bits_of(itera::test::nonzero_uniform(static_cast<std::size_t>(s.hidden), 43, 1.5f));
      const auto w = bits_of(itera::test::nonzero_uniform(static_cast<std::size_t>(2 * s.inter * s.hidden),
                                                          47 + static_cast<std::uint64_t>(s.inter),
                                                          static_cast<float>(2.0 / std::sqrt(s.hidden))));
      // (1) fp64
      std::vector<double> hn(n), wf(w.size());
      for (std::size_t i = 0; i < w.size(); ++i) wf[i] = cd.decode(w[i]);
      for (std::int64_t r = 0; r < s.rows; ++r) {
        double ss = 0;
        for (std::int64_t i = 0; i < s.hidden; ++i) {
          const double v = x[static_cast<std::size_t>(r * s.hidden + i)];
          ss += v * v;
        }
        const double scale = 1.0 / std::sqrt(ss / static_cast<double>(s.hidden) + eps);
        for (std::int64_t i = 0; i < s.hidden; ++i)
          hn[static_cast<std::size_t>(r * s.hidden + i)] =
              cd.decode(weight[static_cast<std::size_t>(i)]) * x[static_cast<std::size_t>(r * s.hidden + i)] * scale;
      }
      std::vector<float> ref(static_cast<std::size_t>(s.rows * s.inter));
      for (std::int64_t r = 0; r < s.rows; ++r)
        for (std::int64_t col = 0; col < s.inter; ++col) {
          double g = 0, u = 0;
          const double* hr = hn.data() + r * s.hidden;
          const double* wg = wf.data() + col * s.hidden;
          const double* wu = wf.data() + (s.inter + col) * s.hidden;
          for (std::int64_t i = 0; i < s.hidden; ++i) g += hr[i] * wg[i], u += hr[i] * wu[i];
          g = cd.decode(cd.encode(static_cast<float>(g)));
          u = cd.decode(cd.encode(static_cast<float>(u)));
          ref[static_cast<std::size_t>(r * s.inter + col)] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
        }
      // (2) on the GPU: the kernel, then rms_norm + gate_up_swiglu.
      const std::size_t act_bytes = ref.size() * 2;
      void* dx = device_bytes(x.data(), n * 4);
      void* dweight = device_bytes(weight.data(), weight.size() * 2);
      void* dw = device_bytes(w.data(), w.size() * 2);
      void* dh = device_bytes(nullptr, n * 2);
      void* dact = device_bytes(nullptr, act_bytes);
      void* dact2 = device_bytes(nullptr, act_bytes);
      std::vector<std::uint16_t> got_bits(ref.size()), pair_bits(ref.size());
      if (dx && dweight && dw && dh && dact && dact2) {
        const auto run = [&](auto tag) {
          using T = decltype(tag);
          lk::gate_up_swiglu_norm(static_cast<const float*>(dx), s.rows, static_cast<const T*>(dweight), eps,
                                  static_cast<const T*>(dw), s.inter, s.hidden, static_cast<T*>(dact), nullptr,
                                  s.max_blocks, s.cols);
          lk::rms_norm(static_cast<const float*>(dx), 1, 0, static_cast<const T*>(dweight), static_cast<T*>(dh), s.rows,
                       s.hidden, eps, nullptr);
          lk::gate_up_swiglu(static_cast<const T*>(dh), s.rows, static_cast<const T*>(dw), s.inter, s.hidden,
                             static_cast<T*>(dact2), nullptr, s.max_blocks, s.cols);
        };
        if (fp16) run(lk::fp16{});
        else run(lk::bf16{});
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(cudaMemcpy(got_bits.data(), dact, act_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(cudaMemcpy(pair_bits.data(), dact2, act_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      }
      for (void* p : {dx, dweight, dw, dh, dact, dact2}) (void)cudaFree(p);
      std::vector<float> got(ref.size()), pair(ref.size());
      std::size_t nonfinite = 0;
      for (std::size_t i = 0; i < ref.size(); ++i) {
        got[i] = cd.decode(got_bits[i]);
        pair[i] = cd.decode(pair_bits[i]);
        nonfinite += std::isfinite(got[i]) ? 0 : 1;
      }
      EXPECT_EQ(nonfinite, 0u) << "outputs never written (NaN bits) or overflowed";
      EXPECT_LT(itera::test::normalised_error(got, ref), 8e-3) << "against fp64";
      EXPECT_LT(itera::test::normalised_error(got, pair), 8e-3) << "against rms_norm + gate_up_swiglu";
      EXPECT_LT(itera::test::normalised_error(pair, ref), 8e-3) << "the pair itself against fp64";
    }
  }
  EXPECT_FALSE(lk::gate_up_swiglu_norm_supported(65, 256, 512)) << "more than one row tile";
  EXPECT_THROW(lk::gate_up_swiglu_norm<lk::bf16>(nullptr, 65, nullptr, eps, nullptr, 256, 512, nullptr, nullptr),
               std::invalid_argument);
}

#endif

}  // namespace
