// Fusions of the llm decode step at 5-64 rows (issue 3's batch-64 target), each against the path
// it replaces and the cpu reference: the residual products in parts, k::add_rms_norm against a
// host computation of the same sums, and an engine whose o_proj and down run in two k-parts
// against the cpu reference and against the same engine with the split switched off.
//
// Tolerances. add_rms_norm adds the parts to x in part order in fp32, as the host loop does: x
// comes back bit for bit. The normalised rows are rounded to bf16 once: at most half an ulp (2^-9
// relative) apart from the host's product of the same fp32 values, except where the scale's last
// bit differs (the block's sum of squares in another order): one ulp, so 2^-8 relative bounds
// every element. The engine's logits: the tolerance of test_llm_device.cpp (2e-2 against the cpu
// reference); split against unsplit differ by the order of fp32 sums and one bf16
// rounding fewer (no 16-bit product output between them), far below that.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "itera/core/recorder.hpp"
#include "tests/support/random_values.hpp"
#include "workloads/llm/cpu_engine.hpp"
#include "workloads/llm/llm_cpu.hpp"
#include "workloads/llm/model.hpp"
#include "workloads/llm/weights.hpp"

#if ITERA_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "src/cuda/cuda_backend_impl.hpp"
#include "src/kernels/llm_kernels.cuh"
#include "tests/support/cuda_test.hpp"
#include "tests/support/device_copies.hpp"
#include "tests/support/numeric_error.hpp"
#include "tests/support/token_ids.hpp"
#include "workloads/llm/llm_cuda.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(llm_decode_fusions, add_rms_norm_matches_host) { GTEST_SKIP() << "built without the cuda backend"; }

#else

using namespace itera::llm;
namespace k = itera::kernels::llm;

class llm_decode_fusions : public itera::test::cuda_test {};

using split_scope = itera::test::override_scope<bool, &override_split_residual>;
using trial_scope = itera::test::override_scope<bool, &override_split_trial>;
using product_trial_scope = itera::test::override_scope<bool, &override_product_trial>;
using gate_up_norm_scope = itera::test::override_scope<bool, &override_gate_up_norm>;

using itera::test::download;
using itera::test::upload;

// hidden 4096 and 8200 take the kernel's float4 path (8200 at 5 rows, 512 threads: two chunks past
// the 2048 a block keeps in registers, read again), 1002 the scalar one; 2 and 3 parts; with the
// norm and without (the add alone).
TEST_F(llm_decode_fusions, add_rms_norm_matches_host) {
  auto& dev = itera::cuda::as_cuda(*m_dev);
  dev.make_current();
  constexpr std::int64_t rows = 5;
  constexpr float eps = 1e-5f;
  for (const std::int64_t hidden : {4096, 8200, 1002})
    for (const int parts : {2, 3})
      for (const bool with_norm : {true, false}) {
        SCOPED_TRACE(testing::Message() << "hidden " << hidden << ", " << parts << " parts"
                                        << (with_norm ? ", normalised" : ", add alone"));
        const auto n = static_cast<std::size_t>(rows * hidden);
        const std::int64_t stride = rows * hidden + 8;  // parts apart by more than the rows
        const std::vector<float> x = itera::test::nonzero_uniform(n, 31, 2.0f);
        const std::vector<float> sums =
            itera::test::nonzero_uniform(static_cast<std::size_t>(stride * parts), 32, 0.5f);
        const std::vector<float> wf = itera::test::nonzero_uniform(static_cast<std::size_t>(hidden), 33, 1.5f);
        std::vector<__nv_bfloat16> weight(wf.size());
        for (std::size_t i = 0; i < wf.size(); ++i) weight[i] = __float2bfloat16(wf[i]);
        // In the backend's stream order: add_rms_norm runs on dev.stream(), which does not wait for
        // the legacy stream.
        const itera::cuda::device_buffer dx = upload(dev, x), dsums = upload(dev, sums), dw = upload(dev, weight),
                                         dout = dev.allocate(n * 2);
        dev.fill(dout.data(), 0xff, n * 2);  // NaN where unwritten
        k::add_rms_norm<__nv_bfloat16>(dx.as<float>(), k::residual_parts{dsums.as<float>(), parts, stride},
                                       with_norm ? dw.as<__nv_bfloat16>() : nullptr, dout.as<__nv_bfloat16>(), rows,
                                       hidden, eps, dev.stream());
        ASSERT_EQ(cudaStreamSynchronize(dev.stream()), cudaSuccess);
        const auto got_x = download<float>(dx);
        const auto got = download<__nv_bfloat16>(dout);
        int x_equal = 0, out_bad = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
          std::vector<float> want(static_cast<std::size_t>(hidden));
          double ss = 0;
          for (std::int64_t i = 0; i < hidden; ++i) {
            float v = x[static_cast<std::size_t>(r * hidden + i)];
            for (int p = 0; p < parts; ++p) v += sums[static_cast<std::size_t>(p * stride + r * hidden + i)];
            want[static_cast<std::size_t>(i)] = v;
            ss += static_cast<double>(v) * v;
            x_equal += got_x[static_cast<std::size_t>(r * hidden + i)] == v;
          }
          if (!with_norm) continue;
          const double scale = 1.0 / std::sqrt(ss / static_cast<double>(hidden) + eps);
          for (std::int64_t i = 0; i < hidden; ++i) {
            const double ref = static_cast<double>(__bfloat162float(weight[static_cast<std::size_t>(i)])) *
                               want[static_cast<std::size_t>(i)] * scale;
            const double g = __bfloat162float(got[static_cast<std::size_t>(r * hidden + i)]);
            if (!(std::abs(g - ref) <= std::abs(ref) * 0x1p-8 + 1e-30)) ++out_bad;
          }
        }
        EXPECT_EQ(x_equal, rows * hidden) << "x with the parts added, bit for bit";
        EXPECT_EQ(out_bad, 0) << "normalised elements past one bf16 ulp of the host's";
        if (!with_norm) {
          int untouched = 0;
          for (const auto v : got) untouched += std::isnan(__bfloat162float(v));
          EXPECT_EQ(untouched, static_cast<int>(n)) << "the add alone writes no normalised rows";
        }
      }
  EXPECT_THROW(k::add_rms_norm<__nv_bfloat16>(nullptr, k::residual_parts{nullptr, 2, 10}, nullptr, nullptr, rows,
                                              4096, eps, dev.stream()),
               std::invalid_argument);
}

// A shape whose o_proj (k = 256) and down (k = 512) both split: 40 sequences decode (above the
// gemv's 4 rows, so cuBLASLt runs the products; above the 32 from which the gate/up normalises x
// itself), host-driven and as a CUDA graph; the logits of
// each step against the cpu reference, the split engine's against the unsplit one's, the graph's
// tokens against the host-driven steps' (the trials pinned off: the graph would otherwise run the
// algorithms its trials picked, the eager steps cuBLASLt's first), a graph with the trials on
// agreeing with them but for near ties, and a recorded step's scopes (the split's residual_norm, or
// the norms). A third engine lets the fused gate/up normalise x itself (on sm_90a: o_proj unsplit,
// no norm kernel before the gate/up, down still in parts; elsewhere the same as in parts).
TEST_F(llm_decode_fusions, engine_in_parts_matches_cpu_reference) {
  model_config c = preset("tiny");
  c.hidden = 256;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.intermediate = 512;
  c.vocab = 512;
  validate(c);
  const model_weights w = random_weights(c, dtype::bf16, 77);
  const reference_model ref(w);
  constexpr std::int64_t batch = 40, prompt = 9, steps = 3;
  const auto vocab = static_cast<std::size_t>(c.vocab);
  const std::vector<std::int32_t> ids = itera::test::random_ids(c, batch * prompt, 5);
  engine_options opts;
  opts.batch = batch;
  opts.max_context = prompt + steps + 1;
  opts.max_prompt = prompt;
  const char* const names[] = {"unsplit", "in parts", "gate/up norm"};
  std::vector<std::vector<float>> logits[3];  // [mode][step]
  std::vector<std::vector<std::int32_t>> tokens[3];
  for (const int mode : {0, 1, 2}) {
    const bool split = mode > 0;
    const char* const name = names[mode];
    const split_scope scope(split);
    const gate_up_norm_scope norm_in_gate_up(mode == 2);
    // (Scopes restore the environment's choice, not an outer scope's: set anew each round.)
    const trial_scope same_split_algorithm(false);
    const product_trial_scope same_algorithm(false);
    cuda_engine eng(*m_dev, w, opts);
    std::vector<sequence> seqs;
    for (std::int64_t b = 0; b < batch; ++b) {
      seqs.push_back(ref.new_sequence());
      (void)ref.prefill(seqs.back(), std::vector<std::int32_t>(ids.begin() + b * prompt, ids.begin() + (b + 1) * prompt));
    }
    (void)eng.prefill(ids, prompt);
    std::vector<std::int32_t> next = eng.read_ids();
    tokens[mode].push_back(next);
    for (std::int64_t step = 0; step < steps; ++step) {
      const auto gpu = eng.decode_step(next);
      ASSERT_EQ(gpu.size(), batch * vocab);
      std::vector<float> want;
      for (std::int64_t b = 0; b < batch; ++b) {
        const auto l = ref.decode_step(seqs[static_cast<std::size_t>(b)], next[static_cast<std::size_t>(b)]);
        want.insert(want.end(), l.begin(), l.end());
      }
      const double e = itera::test::normalised_error(gpu, want);
      std::printf("%s: decode step %lld, normalised error %.3g against the cpu reference (tolerance 2e-2)\n", name,
                  static_cast<long long>(step + 1), e);
      EXPECT_LT(e, 2e-2) << name << ", step " << step + 1;
      logits[mode].push_back(gpu);
      next = eng.read_ids();
      tokens[mode].push_back(next);
    }
    // One more step, recorded: the split's add-and-norm scopes, or the norms.
    itera::stage_recorder rec(m_dev->clock(), &m_dev->memory_tracking());
    eng.decode_device(&rec);
    eng.synchronize();
    const auto stages = rec.finish();
    const auto has = [&](const std::string& path) {
      return std::any_of(stages.begin(), stages.end(), [&](const auto& st) { return st.path == path; });
    };
    const bool norm_in_kernel = mode == 2 && k::gate_up_swiglu_norm_supported(batch, c.intermediate, c.hidden);
    EXPECT_EQ(has("attention_block/residual_norm"), split && !norm_in_kernel) << name;
    EXPECT_EQ(has("mlp_block/residual_norm"), split) << name;
    EXPECT_EQ(has("mlp_block/norm"), !split) << name;
    EXPECT_TRUE(has("mlp_block/gate_up")) << name;
    // The same steps on the device, captured once and replayed.
    cuda_engine graph_eng(*m_dev, w, opts);
    (void)graph_eng.prefill(ids, prompt);
    for (std::int64_t step = 0; step < steps; ++step) {
      graph_eng.decode_graph();
      EXPECT_EQ(graph_eng.read_ids(), tokens[mode][static_cast<std::size_t>(step + 1)])
          << name << ", graph step " << step + 1;
    }
    // With the trials on (their picks may round differently: a near tie may flip, and the rest of
    // that sequence with it; a wrong product changes nearly every token).
    const trial_scope split_trial(true);
    const product_trial_scope product_trial(true);
    cuda_engine tried_eng(*m_dev, w, opts);
    (void)tried_eng.prefill(ids, prompt);
    std::size_t same = 0;
    for (std::int64_t step = 0; step < steps; ++step) {
      tried_eng.decode_graph();
      const auto got = tried_eng.read_ids();
      const auto& want = tokens[mode][static_cast<std::size_t>(step + 1)];
      for (std::size_t b = 0; b < got.size(); ++b) same += got[b] == want[b];
    }
    std::printf("%s: graph with the trials, %zu of %lld tokens as the eager steps'\n", name, same,
                static_cast<long long>(batch * steps));
    EXPECT_GE(static_cast<double>(same), 0.9 * static_cast<double>(batch * steps));
  }
  for (const int mode : {1, 2})
    for (std::int64_t step = 0; step < steps; ++step) {
      const double e = itera::test::normalised_error(logits[mode][static_cast<std::size_t>(step)],
                                                     logits[0][static_cast<std::size_t>(step)]);
      std::printf("decode step %lld: %s against unsplit, normalised difference %.3g\n",
                  static_cast<long long>(step + 1), names[mode], e);
      EXPECT_LT(e, 1e-2) << names[mode] << ", step " << step + 1;
    }
}

#endif

}  // namespace
