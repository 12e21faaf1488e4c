// Which of cuBLASLt's algorithms reads the batch-64 decode products' weights fastest (issue 3's
// batch-64 target, docs/perf/llm-decode-ledger.md "Batch 64"): the products of llama-3.1-8b at 64
// tokens (qkv, o_proj, gate/up, down: bf16 weights and activations, fp32 sums; o_proj and down add
// into an fp32 residual, beta 1, as the engine runs them), each of up to 64 of the heuristic's
// candidates and each candidate again with split-K 2, 4 and 8 where cuBLASLt accepts it, timed
// over copies of the weights that together overflow the L2 (so every launch streams them from
// DRAM), each candidate's output checked against the heuristic's first. Prints each product's ten
// fastest with their tile, stages, split-K and the weights' read rate, and where the heuristic's
// first pick ranks, and that pick's time on one copy relaunched (its weights L2-resident where
// they fit). Then the same products with their k range in 2-14 parts run as one strided batch
// (the engine's residual products in parts: k::add_rms_norm). Searches, not checks of the engine:
// they run only with ITERA_LLM_PRODUCTS_SEARCH=1 (a minute on an H200). ITERA_LLM_SEARCH_TOKENS
// sets the first search's tokens (64 unless given; 2048 for a prefill's products: run 4 of
// docs/perf/2026-12-02-prefetch-tma-search.md); the split search stays at 64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/support/random_values.hpp"

#if ITERA_WITH_CUDA
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "src/cuda/cublaslt_util.hpp"
#include "src/cuda/cuda_backend_impl.hpp"
#include "src/kernels/launch.cuh"
#include "tests/support/cuda_test.hpp"
#include "tests/support/numeric_error.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(llm_products_timing, batch64_cublaslt_search) { GTEST_SKIP() << "built without the cuda backend"; }

#else

// Searches, run on request only.
class llm_products_timing : public itera::test::cuda_test {
 protected:
  void SetUp() override {
    const char* asked = std::getenv("ITERA_LLM_PRODUCTS_SEARCH");
    if (!asked || std::string(asked) != "1")
      GTEST_SKIP() << "a search of cuBLASLt's algorithms: ITERA_LLM_PRODUCTS_SEARCH=1 runs it";
    itera::test::cuda_test::SetUp();
  }
};

struct product_shape {
  const char* name;
  std::int64_t m, k;  // weight rows (outputs) and inputs
  bool residual;      // fp32 output added into (beta 1), else bf16 output
};

// llama-3.1-8b's layer products.
constexpr product_shape llama_8b_products[] = {{"qkv", 6144, 4096, false},
                                               {"o_proj", 4096, 4096, true},
                                               {"gate_up", 28672, 4096, false},
                                               {"down", 4096, 14336, true}};

struct candidate {
  itera::cuda::lt_algorithm algo;
  std::size_t workspace = 0;
  int id = 0, tile = 0, stages = 0, split_k = 1;
  double us = 0;
  bool from_heuristic = false;
  int heuristic_rank = -1;
};

int config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  std::uint32_t v = 0;
  std::size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &v, sizeof v, &written) != CUBLAS_STATUS_SUCCESS)
    return -1;
  return static_cast<int>(v);
}

// Test values (tests/support/random_values.hpp) rounded to bf16.
std::vector<__nv_bfloat16> bf16_values(std::size_t count, std::uint64_t seed, float scale) {
  const std::vector<float> f = itera::test::nonzero_uniform(count, seed, scale);
  std::vector<__nv_bfloat16> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = __float2bfloat16(f[i]);
  return out;
}

// A product's operands: copies of its weights past twice the L2 (each launch reads a copy the last
// ones evicted), the activations and an output of `out_floats` floats, filled with test values.
struct product_operands {
  int copies = 0;
  std::uint64_t w_bytes = 0;  // one copy
  itera::cuda::device_buffer w, x, out;
};

product_operands operands_for(itera::cuda::cuda_backend& dev, const product_shape& sh, std::int64_t n,
                              std::size_t out_floats, std::uint64_t seed) {
  product_operands o;
  o.w_bytes = static_cast<std::uint64_t>(sh.m * sh.k) * 2;
  int l2 = 0;
  ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  o.copies = static_cast<int>(std::max<std::uint64_t>(4, 2 * static_cast<std::uint64_t>(l2) / o.w_bytes + 2));
  o.w = dev.allocate(o.w_bytes * static_cast<std::size_t>(o.copies));
  o.x = dev.allocate(static_cast<std::size_t>(n * sh.k) * 2);
  o.out = dev.allocate(out_floats * 4);
  const auto hw = bf16_values(static_cast<std::size_t>(sh.m * sh.k), seed, 0.02f);
  for (int c = 0; c < o.copies; ++c)
    dev.upload(o.w.as<__nv_bfloat16>() + static_cast<std::size_t>(c) * sh.m * sh.k, hw.data(), o.w_bytes);
  const auto hx = bf16_values(static_cast<std::size_t>(n * sh.k), seed + 1, 1.0f);
  dev.upload(o.x.data(), hx.data(), hx.size() * 2);
  return o;
}

// As the engine's plan_for: W [m][k] used transposed, activations [n][k], out [n][m]; fp32 compute.
itera::cuda::matmul_desc engine_op() {
  cublasLtMatmulDesc_t raw = nullptr;
  ITERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  itera::cuda::matmul_desc op(raw);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  ITERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  ITERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  return op;
}

TEST_F(llm_products_timing, batch64_cublaslt_search) {
  auto& dev = itera::cuda::as_cuda(*m_dev);
  dev.make_current();
  const cudaStream_t s = dev.stream();
  // Tokens: 64, or ITERA_LLM_SEARCH_TOKENS (a prefill's 2048, say: the same products, bound by
  // their arithmetic there; the TB/s column is then the weights' bytes over the time, not a limit).
  const std::int64_t n =
      itera::kernels::env_count("ITERA_LLM_SEARCH_TOKENS", 64, "give a count of tokens, 1 to 65536");
  ASSERT_TRUE(n >= 1 && n <= 65536) << "ITERA_LLM_SEARCH_TOKENS=" << n << ": give a count of tokens, 1 to 65536";
  for (const product_shape& sh : llama_8b_products) {
    SCOPED_TRACE(sh.name);
    const product_operands ops = operands_for(dev, sh, n, static_cast<std::size_t>(n * sh.m), 11);
    const std::uint64_t w_bytes = ops.w_bytes;
    const int copies = ops.copies;
    auto* const w = ops.w.as<__nv_bfloat16>();
    auto* const x = ops.x.as<__nv_bfloat16>();
    void* const out = ops.out.data();
    const itera::cuda::matmul_desc op = engine_op();
    const cudaDataType_t d_type = sh.residual ? CUDA_R_32F : CUDA_R_16BF;
    const auto a = itera::cuda::make_layout(CUDA_R_16BF, sh.k, sh.m, sh.k);
    const auto b = itera::cuda::make_layout(CUDA_R_16BF, sh.k, n, sh.k);
    const auto d = itera::cuda::make_layout(d_type, sh.m, n, sh.m);
    const auto pref = itera::cuda::make_preference(dev.lt_workspace_size());
    std::vector<cublasLtMatmulHeuristicResult_t> results(64);
    int returned = 0;
    ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(dev.lt_handle(), op.get(), a.get(), b.get(), d.get(), d.get(), pref.get(),
                                             static_cast<int>(results.size()), results.data(), &returned),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_GT(returned, 0) << "no algorithm for this product";
    std::vector<candidate> cands;
    for (int i = 0; i < returned; ++i) {
      if (results[static_cast<std::size_t>(i)].state != CUBLAS_STATUS_SUCCESS) continue;
      const cublasLtMatmulAlgo_t base = results[static_cast<std::size_t>(i)].algo;
      for (const int split : {0, 2, 4, 8}) {  // 0: as the heuristic gave it
        candidate c;
        c.algo.algo = base;
        if (split > 0) {
          if (config(base, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) == split) continue;
          const std::uint32_t k_split = static_cast<std::uint32_t>(split);
          const std::uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
          if (cublasLtMatmulAlgoConfigSetAttribute(&c.algo.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &k_split,
                                                   sizeof k_split) != CUBLAS_STATUS_SUCCESS ||
              cublasLtMatmulAlgoConfigSetAttribute(&c.algo.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                   sizeof scheme) != CUBLAS_STATUS_SUCCESS)
            continue;
        }
        cublasLtMatmulHeuristicResult_t check = {};
        if (cublasLtMatmulAlgoCheck(dev.lt_handle(), op.get(), a.get(), b.get(), d.get(), d.get(), &c.algo.algo,
                                    &check) != CUBLAS_STATUS_SUCCESS ||
            check.state != CUBLAS_STATUS_SUCCESS || check.workspaceSize > dev.lt_workspace_size())
          continue;
        c.workspace = check.workspaceSize;
        c.id = config(c.algo.algo, CUBLASLT_ALGO_CONFIG_ID);
        c.tile = config(c.algo.algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
        c.stages = config(c.algo.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
        c.split_k = std::max(1, config(c.algo.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
        c.from_heuristic = split == 0;
        c.heuristic_rank = split == 0 ? i : -1;
        cands.push_back(c);
      }
    }
    ASSERT_FALSE(cands.empty());
    const float alpha = 1.0f, beta = sh.residual ? 1.0f : 0.0f;
    const auto run = [&](const candidate& c, int copy) {
      const __nv_bfloat16* wc = w + static_cast<std::size_t>(copy) * sh.m * sh.k;
      return cublasLtMatmul(dev.lt_handle(), op.get(), &alpha, wc, a.get(), x, b.get(), &beta, out, d.get(), out,
                            d.get(), &c.algo.algo, dev.lt_workspace(), dev.lt_workspace_size(), s);
    };
    // Each candidate's output from a zeroed residual against the first's (the heuristic's pick).
    const std::size_t out_bytes = static_cast<std::size_t>(n * sh.m) * (sh.residual ? 4 : 2);
    std::vector<float> first_out;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
    constexpr int launches = 24;
    for (candidate& c : cands) {
      ASSERT_EQ(cudaMemsetAsync(out, 0, out_bytes, s), cudaSuccess);
      ASSERT_EQ(run(c, 0), CUBLAS_STATUS_SUCCESS) << "algo " << c.id << " split " << c.split_k;
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      std::vector<float> values(static_cast<std::size_t>(n * sh.m));
      if (sh.residual) {
        ASSERT_EQ(cudaMemcpy(values.data(), out, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      } else {
        std::vector<__nv_bfloat16> h(values.size());
        ASSERT_EQ(cudaMemcpy(h.data(), out, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        for (std::size_t i = 0; i < h.size(); ++i) values[i] = __bfloat162float(h[i]);
      }
      if (first_out.empty()) {
        first_out = values;
      } else {
        const double e = itera::test::normalised_error(values, first_out);
        EXPECT_LT(e, 1e-2) << "algo " << c.id << " tile " << c.tile << " split " << c.split_k
                           << ": its output against the heuristic's first pick";
      }
      for (int i = 0; i < 4; ++i) ASSERT_EQ(run(c, i % copies), CUBLAS_STATUS_SUCCESS);  // warm-up
      ASSERT_EQ(cudaEventRecord(e0, s), cudaSuccess);
      for (int i = 0; i < launches; ++i) ASSERT_EQ(run(c, i % copies), CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(cudaEventRecord(e1, s), cudaSuccess);
      ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
      float ms = 0;
      ASSERT_EQ(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
      c.us = 1e3 * ms / launches;
    }
    // The heuristic's pick again on one copy of the weights, launch after launch: as fast as the
    // product runs where its weights are in the L2 (all of them where they fit: o_proj's 33.5 MB),
    // which says what an L2 prefetch ahead of it could gain.
    float warm_ms = 0;
    {
      const candidate& first = cands.front();
      for (int i = 0; i < 4; ++i) ASSERT_EQ(run(first, 0), CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(cudaEventRecord(e0, s), cudaSuccess);
      for (int i = 0; i < launches; ++i) ASSERT_EQ(run(first, 0), CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(cudaEventRecord(e1, s), cudaSuccess);
      ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
      ASSERT_EQ(cudaEventElapsedTime(&warm_ms, e0, e1), cudaSuccess);
    }
    (void)cudaEventDestroy(e0);
    (void)cudaEventDestroy(e1);
    std::vector<const candidate*> order;
    for (const candidate& c : cands) order.push_back(&c);
    std::sort(order.begin(), order.end(), [](const candidate* l, const candidate* r) { return l->us < r->us; });
    std::printf("%s (M=%lld N=%lld K=%lld, %s out, %d weight copies): %zu candidates\n", sh.name,
                static_cast<long long>(sh.m), static_cast<long long>(n), static_cast<long long>(sh.k),
                sh.residual ? "fp32 residual" : "bf16", copies, cands.size());
    std::printf("  the heuristic's first on one copy, launch after launch (L2-warm where it fits): %.1f us\n",
                1e3 * warm_ms / launches);
    for (std::size_t r = 0; r < order.size(); ++r) {
      const candidate& c = *order[r];
      const bool show = r < 10 || c.heuristic_rank == 0;
      if (!show) continue;
      std::printf("  %3zu  %8.1f us  %5.2f TB/s  %6.1f TFLOP/s  algo %3d tile %3d stages %3d split-K %d%s\n", r + 1,
                  c.us, static_cast<double>(w_bytes) / (c.us * 1e-6) / 1e12,
                  2.0 * static_cast<double>(sh.m * n * sh.k) / (c.us * 1e-6) / 1e12, c.id, c.tile, c.stages, c.split_k,
                  c.heuristic_rank == 0 ? "  <- the heuristic's first (the engine's)"
                  : c.from_heuristic ? (" (heuristic #" + std::to_string(c.heuristic_rank + 1) + ")").c_str()
                                     : "");
    }
  }
}

// The same products with their k range cut into `parts` slices run as one strided batch (slice i:
// weights columns [i k/parts, (i+1) k/parts), the same columns of the activations), each slice's
// fp32 sums written apart ([parts][n][m]) for a kernel of ours to add up with what follows the
// product (the residual and the next norm; RoPE). Against it, the engine's product, and for the
// residual products cuBLASLt's own in-place split (its parts added in the output, no reduction
// kernel). Each configuration's best of the heuristic's first eight candidates, timed over copies
// past the L2; the parts' sum checked against the engine's product. Runs with
// ITERA_LLM_PRODUCTS_SEARCH=1.
TEST_F(llm_products_timing, batch64_split_k_as_batch) {
  auto& dev = itera::cuda::as_cuda(*m_dev);
  dev.make_current();
  const cudaStream_t s = dev.stream();
  constexpr std::int64_t n = 64;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
  for (const product_shape& sh : llama_8b_products) {
    SCOPED_TRACE(sh.name);
    constexpr int most_parts = 14;
    const product_operands ops = operands_for(dev, sh, n, static_cast<std::size_t>(n * sh.m) * most_parts, 21);
    const std::uint64_t w_bytes = ops.w_bytes;
    const int copies = ops.copies;
    auto* const w = ops.w.as<__nv_bfloat16>();
    auto* const x = ops.x.as<__nv_bfloat16>();
    void* const out = ops.out.data();
    const itera::cuda::matmul_desc op = engine_op();

    // One configuration: `parts` slices (1: the whole product, as the engine's layouts), fp32 or
    // bf16 output, beta, the reduction schemes the heuristic may pick. Returns the best time (us)
    // and leaves that candidate's output (from zeros) in `values` as fp32, parts summed.
    const auto measure = [&](int parts, bool fp32_out, float beta, std::uint32_t schemes, std::vector<float>& values,
                             std::string& what) -> double {
      const std::int64_t ks = sh.k / parts;
      auto a = itera::cuda::make_layout(CUDA_R_16BF, ks, sh.m, sh.k);
      auto b = itera::cuda::make_layout(CUDA_R_16BF, ks, n, sh.k);
      auto d = itera::cuda::make_layout(fp32_out ? CUDA_R_32F : CUDA_R_16BF, sh.m, n, sh.m);
      if (parts > 1) {
        const std::int32_t count = parts;
        const std::int64_t ab_stride = ks, d_stride = sh.m * n;
        for (auto* l : {a.get(), b.get(), d.get()})
          EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                    CUBLAS_STATUS_SUCCESS);
        for (auto* l : {a.get(), b.get()})
          EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &ab_stride,
                                                     sizeof ab_stride),
                    CUBLAS_STATUS_SUCCESS);
        EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(d.get(), CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &d_stride,
                                                   sizeof d_stride),
                  CUBLAS_STATUS_SUCCESS);
      }
      const auto pref = itera::cuda::make_preference(dev.lt_workspace_size());
      EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                     sizeof schemes),
                CUBLAS_STATUS_SUCCESS);
      std::vector<cublasLtMatmulHeuristicResult_t> results(8);
      int returned = 0;
      if (cublasLtMatmulAlgoGetHeuristic(dev.lt_handle(), op.get(), a.get(), b.get(), d.get(), d.get(), pref.get(),
                                         static_cast<int>(results.size()), results.data(), &returned) !=
              CUBLAS_STATUS_SUCCESS ||
          returned == 0)
        return -1;
      const float alpha = 1.0f;
      double best = -1;
      std::string every;  // each candidate's time, in the heuristic's order
      const std::size_t element = fp32_out ? 4 : 2;
      const std::size_t out_bytes = static_cast<std::size_t>(n * sh.m) * element * static_cast<std::size_t>(parts);
      for (int i = 0; i < returned; ++i) {
        const cublasLtMatmulAlgo_t* algo = &results[static_cast<std::size_t>(i)].algo;
        if (results[static_cast<std::size_t>(i)].state != CUBLAS_STATUS_SUCCESS) continue;
        const auto run = [&](int copy) {
          const __nv_bfloat16* wc = w + static_cast<std::size_t>(copy) * sh.m * sh.k;
          return cublasLtMatmul(dev.lt_handle(), op.get(), &alpha, wc, a.get(), x, b.get(), &beta, out, d.get(), out,
                                d.get(), algo, dev.lt_workspace(), dev.lt_workspace_size(), s);
        };
        EXPECT_EQ(cudaMemsetAsync(out, 0, out_bytes, s), cudaSuccess);
        if (run(0) != CUBLAS_STATUS_SUCCESS) continue;
        EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        std::vector<float> got(static_cast<std::size_t>(n * sh.m), 0.0f);
        std::vector<unsigned char> raw_out(out_bytes);
        EXPECT_EQ(cudaMemcpy(raw_out.data(), out, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        for (std::size_t p = 0; p < static_cast<std::size_t>(parts); ++p)
          for (std::size_t e = 0; e < got.size(); ++e) {
            const std::size_t at = p * got.size() + e;
            got[e] += fp32_out ? reinterpret_cast<const float*>(raw_out.data())[at]
                               : __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(raw_out.data())[at]);
          }
        for (int r = 0; r < 4; ++r) EXPECT_EQ(run(r % copies), CUBLAS_STATUS_SUCCESS);
        constexpr int launches = 24;
        EXPECT_EQ(cudaEventRecord(e0, s), cudaSuccess);
        for (int r = 0; r < launches; ++r) EXPECT_EQ(run(r % copies), CUBLAS_STATUS_SUCCESS);
        EXPECT_EQ(cudaEventRecord(e1, s), cudaSuccess);
        EXPECT_EQ(cudaEventSynchronize(e1), cudaSuccess);
        float ms = 0;
        EXPECT_EQ(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
        const double us = 1e3 * ms / launches;
        char one[32];
        std::snprintf(one, sizeof one, "%s#%d %.1f", every.empty() ? "" : ", ", i + 1, us);
        every += one;
        if (best < 0 || us < best) {
          best = us;
          values = std::move(got);
          what = "heuristic #" + std::to_string(i + 1) + " tile " +
                 std::to_string(config(*algo, CUBLASLT_ALGO_CONFIG_TILE_ID)) + " split-K " +
                 std::to_string(std::max(1, config(*algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM))) + " scheme " +
                 std::to_string(config(*algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME));
        }
      }
      what += " (" + every + ")";
      return best;
    };
    const auto report = [&](const char* label, double us, const std::string& what) {
      if (us < 0) {
        std::printf("  %-34s no candidate\n", label);
        return;
      }
      std::printf("  %-34s %7.1f us  %5.2f TB/s  %s\n", label, us, static_cast<double>(w_bytes) / (us * 1e-6) / 1e12,
                  what.c_str());
    };
    std::printf("%s (M=%lld N=%lld K=%lld, %d weight copies)\n", sh.name, static_cast<long long>(sh.m),
                static_cast<long long>(n), static_cast<long long>(sh.k), copies);
    std::vector<float> reference;
    std::string what;
    const double engine = measure(1, sh.residual, sh.residual ? 1.0f : 0.0f, CUBLASLT_REDUCTION_SCHEME_MASK, reference, what);
    ASSERT_GT(engine, 0);
    report(sh.residual ? "engine's form (fp32 += residual)" : "engine's form (bf16 out)", engine, what);
    if (sh.residual) {
      std::vector<float> v;
      const double inplace = measure(1, true, 1.0f, CUBLASLT_REDUCTION_SCHEME_INPLACE, v, what);
      report("split in place only", inplace, what);
      if (inplace > 0) EXPECT_LT(itera::test::normalised_error(v, reference), 1e-5);
      const double none = measure(1, true, 1.0f, CUBLASLT_REDUCTION_SCHEME_NONE, v, what);
      report("no split", none, what);
    }
    {
      std::vector<float> v;
      const double whole = measure(1, true, 0.0f, CUBLASLT_REDUCTION_SCHEME_MASK, v, what);
      report("fp32 out, beta 0 (1 part)", whole, what);
    }
    for (const int parts : {2, 3, 4, 6, 7, 8, 14}) {
      if (sh.k % parts != 0 || (sh.k / parts) % 64 != 0) continue;
      std::vector<float> v;
      const double us = measure(parts, true, 0.0f, CUBLASLT_REDUCTION_SCHEME_NONE, v, what);
      const std::string label = std::to_string(parts) + " parts as a batch, fp32";
      report(label.c_str(), us, what);
      if (us > 0) EXPECT_LT(itera::test::normalised_error(v, reference), sh.residual ? 1e-5 : 1e-2) << label;
    }
  }
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
}

#endif

}  // namespace
