// The llm cuda engine against the cpu reference (the oracle) on the tiny preset, its small-token
// product against fp64, and a first timing of the decode step at the llama-3.1-8b shape with a
// per-stage breakdown (printed, not a gate yet).
//
// Tolerance. Both sides multiply the same bf16 weights with fp32 accumulation; the engine also
// rounds its activations to bf16 (norm outputs, q/k/v, the cache, attention output, the SwiGLU
// product): each rounding adds a relative error of at most 2^-9 (0.2%), about 0.1% rms. Some six
// roundings per layer over two layers plus the final norm, independent, give about 0.4% rms on the
// logits, so the normalised error ||gpu - ref|| / ||ref|| should land near 5e-3; 2e-2 leaves a
// factor of four for correlated errors while an indexing or layout bug gives errors of order 1.
//
// fp16 compute (engine_options::compute) rounds the same activations to 11 significant bits where
// bf16 keeps 8: a unit roundoff eight times smaller (2^-11 against 2^-8), so its logits should
// land near 5e-3 / 8 ~ 6e-4 from the reference (fp32, the same weight values);
// fp16_logits_tolerance leaves the same factor of four over twice that. Nothing else changes
// numerically: sums, softmax and the residual are fp32 in both.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "itera/core/errors.hpp"
#include "itera/core/recorder.hpp"
#include "workloads/gemm/numeric.hpp"
#include "workloads/llm/cpu_engine.hpp"
#include "workloads/llm/llm_cpu.hpp"
#include "workloads/llm/model.hpp"
#include "workloads/llm/weights.hpp"
#include "workloads/multimodal/context.hpp"

#if ITERA_WITH_CUDA
#include <cuda_runtime_api.h>
#include <cxxabi.h>

#include <cstdlib>
#include <map>

#include "itera/cuda/cuda_backend.hpp"
#include "src/cuda/cuda_backend_impl.hpp"
#include "src/cuda/timers.hpp"
#include "tests/support/cuda_test.hpp"
#include "tests/support/numeric_error.hpp"
#include "tests/support/token_ids.hpp"
#include "src/kernels/llm_kernels.cuh"
#include "workloads/llm/llm_cuda.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(llm_cuda, matches_cpu_reference) { GTEST_SKIP() << "built without the cuda backend"; }

#else

using namespace itera::llm;

constexpr double logits_tolerance = 2e-2;
constexpr double fp16_logits_tolerance = 5e-3;

// The logits tolerance of a compute type against the cpu reference.
double tolerance_for(dtype compute) { return compute == dtype::fp16 ? fp16_logits_tolerance : logits_tolerance; }

// The weights a case of `compute` runs in the tests below: values of that type (the cpu reference
// computes with the same values in fp32).
model_weights weights_for(const model_config& c, dtype compute, std::uint64_t seed) {
  return random_weights(c, compute, seed);
}

engine_options computing(engine_options o, dtype compute) {
  o.compute = compute;
  o.weights = compute;
  o.kv = compute;
  return o;
}

double normalised_error(const float* gpu, const float* ref, std::size_t n) {
  return itera::test::normalised_error({gpu, n}, {ref, n});
}

double rms_abs_error(const float* gpu, const float* ref, std::size_t n) {
  double diff = 0;
  for (std::size_t i = 0; i < n; ++i) diff += (static_cast<double>(gpu[i]) - ref[i]) * (static_cast<double>(gpu[i]) - ref[i]);
  return std::sqrt(diff / static_cast<double>(n));
}

using itera::test::random_ids;

// The tiny preset at the head shape of a real model (hidden and intermediate scaled with it).
model_config tiny_at_head_dim(std::int64_t head_dim, std::int64_t heads, std::int64_t kv_heads) {
  model_config c = preset("tiny");
  c.head_dim = head_dim;
  c.heads = heads;
  c.kv_heads = kv_heads;
  // Two heads' width, or every head's where heads does not divide that (14 heads of 128: 1792).
  c.hidden = (2 * head_dim) % heads == 0 ? 2 * head_dim : heads * head_dim;
  c.intermediate = 4 * head_dim;
  validate(c);
  return c;
}

class llm_cuda : public itera::test::cuda_test {};

// The prefill attention's warp-specialized kernel switched on or off for a scope.
using ws_scope = itera::test::override_scope<bool, &itera::kernels::llm::override_prefill_attention_warp_specialized>;
using wide_keys_scope = itera::test::override_scope<bool, &itera::kernels::llm::override_prefill_attention_wide_keys>;

TEST_F(llm_cuda, tiny_matches_cpu_reference) {
  const model_config c = preset("tiny");
  const model_weights w = random_weights(c, dtype::bf16, 20240611);
  const reference_model ref(w);
  constexpr std::int64_t batch = 3, prompt = 7, steps = 5;
  const auto vocab = static_cast<std::size_t>(c.vocab);

  const std::vector<std::int32_t> ids = random_ids(c, batch * prompt, 7);  // never token 0

  engine_options opts;
  opts.batch = batch;
  opts.max_context = 32;
  opts.max_prompt = prompt;
  opts.all_position_logits = true;
  cuda_engine eng(*m_dev, w, opts);
  const auto mem = eng.memory();
  std::printf("tiny engine memory: weights %llu B, kv cache %llu B, activations %llu B, workspace %llu B\n",
              static_cast<unsigned long long>(mem.weights), static_cast<unsigned long long>(mem.kv_cache),
              static_cast<unsigned long long>(mem.activations), static_cast<unsigned long long>(mem.workspace));

  // (1) prefill, every position.
  const auto gpu_all = eng.prefill(ids, prompt, true);
  ASSERT_EQ(gpu_all.size(), static_cast<std::size_t>(batch * prompt) * vocab);
  std::vector<sequence> seqs;
  std::vector<float> ref_all;
  for (std::int64_t b = 0; b < batch; ++b) {
    seqs.push_back(ref.new_sequence());
    const std::span<const std::int32_t> p(ids.data() + b * prompt, static_cast<std::size_t>(prompt));
    const auto l = ref.prefill(seqs.back(), p);
    ref_all.insert(ref_all.end(), l.begin(), l.end());
  }
  const double prefill_error = normalised_error(gpu_all.data(), ref_all.data(), ref_all.size());
  std::printf("prefill logits (batch %lld x prompt %lld, all positions): normalised error %.3g (tolerance %.3g)\n",
              static_cast<long long>(batch), static_cast<long long>(prompt), prefill_error, logits_tolerance);
  EXPECT_LT(prefill_error, logits_tolerance);
  // The argmax kernel picked each sequence's last-position maximum.
  auto gpu_ids = eng.read_ids();
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::span<const float> row(gpu_all.data() + static_cast<std::size_t>((b * prompt + prompt - 1)) * vocab, vocab);
    EXPECT_EQ(gpu_ids[static_cast<std::size_t>(b)], argmax(row)) << "sequence " << b;
  }

  // (2) and (3): greedy decode, teacher-forced: both sides are fed the engine's token, so they stay
  // on one path; the engine's choice must be the reference's argmax unless the reference's own
  // margin between the two is within the noise of bf16 activations.
  std::vector<float> ref_last(batch * vocab);
  for (std::int64_t b = 0; b < batch; ++b)
    std::copy_n(ref_all.begin() + static_cast<std::ptrdiff_t>((b * prompt + prompt - 1) * c.vocab), c.vocab,
                ref_last.begin() + static_cast<std::ptrdiff_t>(b * c.vocab));
  std::vector<float> gpu_last(batch * vocab);
  for (std::int64_t b = 0; b < batch; ++b)
    std::copy_n(gpu_all.begin() + static_cast<std::ptrdiff_t>((b * prompt + prompt - 1) * c.vocab), c.vocab,
                gpu_last.begin() + static_cast<std::ptrdiff_t>(b * c.vocab));
  int agree = 0, near_ties = 0, total = 0;
  std::vector<std::vector<std::int32_t>> chosen;  // per step, the engine's ids fed next
  for (std::int64_t step = 0; step <= steps; ++step) {
    const double noise = std::max(1e-3, 4 * rms_abs_error(gpu_last.data(), ref_last.data(), ref_last.size()));
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::span<const float> r(ref_last.data() + b * c.vocab, vocab);
      const std::int32_t want = argmax(r), got = gpu_ids[static_cast<std::size_t>(b)];
      ++total;
      if (want == got) {
        ++agree;
        continue;
      }
      const double gap = static_cast<double>(r[static_cast<std::size_t>(want)]) - r[static_cast<std::size_t>(got)];
      ++near_ties;
      std::printf("step %lld sequence %lld: engine chose %d, reference %d, reference gap %.3g (allowed %.3g)\n",
                  static_cast<long long>(step), static_cast<long long>(b), got, want, gap, noise);
      EXPECT_LE(gap, noise) << "step " << step << " sequence " << b;
    }
    if (step == steps) break;
    chosen.push_back(gpu_ids);
    const auto gpu = eng.decode_step(gpu_ids);
    ASSERT_EQ(gpu.size(), batch * vocab);
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto l = ref.decode_step(seqs[static_cast<std::size_t>(b)], gpu_ids[static_cast<std::size_t>(b)]);
      std::copy(l.begin(), l.end(), ref_last.begin() + static_cast<std::ptrdiff_t>(b * c.vocab));
    }
    gpu_last = gpu;
    const double e = normalised_error(gpu.data(), ref_last.data(), ref_last.size());
    std::printf("decode step %lld: normalised error %.3g (tolerance %.3g)\n", static_cast<long long>(step + 1), e,
                logits_tolerance);
    EXPECT_LT(e, logits_tolerance) << "decode step " << step + 1;
    gpu_ids = eng.read_ids();
    for (std::int64_t b = 0; b < batch; ++b)
      EXPECT_EQ(gpu_ids[static_cast<std::size_t>(b)], argmax(std::span<const float>(gpu.data() + b * c.vocab, vocab)));
  }
  chosen.push_back(gpu_ids);
  std::printf("greedy tokens: %d of %d agree with the reference (%d within the noise margin)\n", agree, total,
              near_ties);

  // The device-driven step (ids stay on the GPU) and its CUDA graph give the same tokens as the
  // host-driven steps above. A second engine with last-position logits also exercises the strided
  // final norm of prefill.
  opts.all_position_logits = false;
  cuda_engine dev_eng(*m_dev, w, opts);
  for (const bool graph : {false, true}) {
    const auto last = dev_eng.prefill(ids, prompt);
    ASSERT_EQ(last.size(), batch * vocab);
    std::vector<float> ref_prefill_last(batch * vocab);
    for (std::int64_t b = 0; b < batch; ++b)
      std::copy_n(ref_all.begin() + static_cast<std::ptrdiff_t>((b * prompt + prompt - 1) * c.vocab), c.vocab,
                  ref_prefill_last.begin() + static_cast<std::ptrdiff_t>(b * c.vocab));
    const double last_error = normalised_error(last.data(), ref_prefill_last.data(), last.size());
    std::printf("prefill logits (last position only): normalised error %.3g\n", last_error);
    EXPECT_LT(last_error, logits_tolerance);
    EXPECT_EQ(dev_eng.read_ids(), chosen[0]);
    for (std::int64_t step = 0; step < steps; ++step) {
      graph ? dev_eng.decode_graph() : dev_eng.decode_device();
      EXPECT_EQ(dev_eng.read_ids(), chosen[static_cast<std::size_t>(step + 1)])
          << (graph ? "graph" : "device") << " decode step " << step + 1;
    }
    EXPECT_EQ(dev_eng.length(0), prompt + steps);
    if (graph) EXPECT_EQ(dev_eng.graphs_captured(), 1);
  }
}

// The small-token product (the engine's decode path for at most 4 rows) against fp64 on the same
// bf16 inputs. fp32 output: fp32 accumulation over 4096 products in 8-wide per-lane partial sums
// and a 32-lane tree gives a normalised error near 1e-7; 1e-5 leaves two orders. bf16 output: one
// rounding to bf16 per element, at most 2^-9 (1.95e-3) relative, about 1.1e-3 normalised; 2.5e-3
// bounds it. A wrong row, token or chunk gives errors of order 1; an unwritten element stays NaN.
// A continuous-batching schedule through the engine interface: prefills into single slots while
// other slots decode, a slot released mid-way and reused, decode steps over a range holding a free
// slot. Each request's tokens on the cuda engine against the cpu engine (the reference model).
std::vector<std::vector<std::int32_t>> serve_schedule(engine& eng) {
  const model_config& c = eng.config();
  const auto prompt_of = [&](std::int64_t n, std::int32_t salt) {
    std::vector<std::int32_t> p;
    for (std::int64_t i = 0; i < n; ++i) p.push_back(static_cast<std::int32_t>((salt * 37 + i * 11) % (c.vocab - 1) + 1));
    return p;
  };
  std::vector<std::vector<std::int32_t>> out(4);
  std::vector<int> in_slot(static_cast<std::size_t>(eng.slots()), -1);
  const auto take = [&](std::int64_t rows) {
    eng.record_ids(rows);
    const auto got = eng.take_recorded();
    for (std::int64_t s = 0; s < rows; ++s)
      if (in_slot[static_cast<std::size_t>(s)] >= 0)
        out[static_cast<std::size_t>(in_slot[static_cast<std::size_t>(s)])].push_back(got.at(0).at(static_cast<std::size_t>(s)));
  };
  const auto admit = [&](int request, std::int64_t slot, std::int64_t len) {
    eng.stage_prompts(prompt_of(len, request));
    eng.prefill_staged(slot, 1, len);
    in_slot[static_cast<std::size_t>(slot)] = request;
    eng.record_ids(slot + 1);
    out[static_cast<std::size_t>(request)].push_back(eng.take_recorded().at(0).at(static_cast<std::size_t>(slot)));
  };
  admit(0, 1, 5);
  take(2), eng.decode(2), take(2);  // slot 0 free inside the range
  out[0].pop_back();                // the first take repeated the prefill's token
  admit(1, 0, 9);
  for (int i = 0; i < 3; ++i) eng.decode(2), take(2);
  eng.release(1), in_slot[1] = -1;
  for (int i = 0; i < 2; ++i) eng.decode(2), take(2);
  admit(2, 2, 3);
  admit(3, 1, 12);  // the released slot reused
  for (int i = 0; i < 3; ++i) eng.decode(3), take(3);
  return out;
}

// An engine for serve_schedule: `batch` slots of 40 tokens, prompts of up to 16, one a prefill.
engine_options serving_options(std::int64_t batch) {
  engine_options o;
  o.batch = batch;
  o.max_context = 40;
  o.max_prompt = 16;
  o.prefill_batch = 1;
  return o;
}

TEST_F(llm_cuda, slots_serve_like_the_cpu_engine) {
  const model_config c = preset("tiny");
  const model_weights w = random_weights(c, dtype::bf16, 20240611);
  cuda_engine gpu(*m_dev, w, serving_options(3));
  cpu_engine_options co;
  co.slots = 3;
  co.max_context = 40;
  cpu_engine cpu(w, co);
  const auto a = serve_schedule(gpu), b = serve_schedule(cpu);
  std::size_t same = 0, total = 0;
  for (std::size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].size(), b[r].size()) << "request " << r;
    for (std::size_t i = 0; i < a[r].size(); ++i) same += a[r][i] == b[r][i], ++total;
  }
  std::printf("slots schedule: %zu of %zu tokens agree with the cpu engine\n", same, total);
  // bf16 activations against fp32 can flip a near tie and the rest of that sequence with it; a
  // slot or length bug changes nearly every token.
  EXPECT_GE(static_cast<double>(same), 0.9 * static_cast<double>(total));
  EXPECT_EQ(gpu.length(0), 9 + 8);
  EXPECT_EQ(gpu.length(1), 12 + 3);
  EXPECT_EQ(gpu.length(2), 3 + 3);
}

// The server scenario readies every row count's decode before its timed run (prepare_decode):
// one graph per row count, none captured again while serving, and the same tokens as an engine
// that captures each graph at its first step (nothing the preparation ran changes a slot's state).
// Batch 6 takes the cuBLASLt products from 5 rows. The trials pinned off: a prefill of 5 tokens
// shares its products' plans with a 5-row step, which the prepared engine's trials would have
// chosen and the other's not (the fusion test runs graphs with the trials on).
TEST_F(llm_cuda, prepared_decode_graphs_serve_the_same_tokens) {
  const itera::test::override_scope<bool, &override_split_trial> split_trial(false);
  const itera::test::override_scope<bool, &override_product_trial> product_trial(false);
  const model_config c = preset("tiny");
  const model_weights w = random_weights(c, dtype::bf16, 20240611);
  const engine_options o = serving_options(6);
  cuda_engine prepared(*m_dev, w, o), lazy(*m_dev, w, o);
  EXPECT_THROW(prepared.prepare_decode(0), itera::usage_error);
  EXPECT_THROW(prepared.prepare_decode(7), itera::usage_error);
  prepared.stage_prompts(std::vector<std::int32_t>(4, 3));
  prepared.prefill_staged(0, 1, 4);
  EXPECT_EQ(prepared.read_prefill_logits(1).size(), static_cast<std::size_t>(c.vocab));
  prepared.prepare_decode(o.batch);  // writes the logits over: reading them is refused
  EXPECT_THROW((void)prepared.read_prefill_logits(1), itera::usage_error);
  prepared.release(0);
  for (std::int64_t rows = 1; rows <= o.batch; ++rows) prepared.prepare_decode(rows);
  EXPECT_EQ(prepared.graphs_captured(), o.batch);
  EXPECT_EQ(lazy.graphs_captured(), 0);
  const auto a = serve_schedule(prepared), b = serve_schedule(lazy);
  EXPECT_EQ(a, b);
  EXPECT_EQ(prepared.graphs_captured(), o.batch);
  EXPECT_EQ(lazy.graphs_captured(), 2);  // the schedule's row counts: 2 and 3
}

// A multimodal prefill: image rows given as input vectors (stage_embeddings), from the device and
// from the host, generate what the cpu engine generates from the same rows; and they are used (the
// tokens differ from a run without them).
TEST_F(llm_cuda, image_rows_given_as_inputs_match_the_cpu_engine) {
  const model_config c = preset("tiny");
  const model_weights w = random_weights(c, dtype::bf16, 77);
  const auto ctx = itera::mm::prepare_context({.prompt_tokens = 12, .images = 2, .tokens_per_image = 9, .prefix = 4}, 2,
                                       c.vocab, 9, 64);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> values(ctx.image_rows.size() * static_cast<std::size_t>(c.hidden));
  for (auto& v : values) v = itera::gemm::numeric::float_to_bf16(normal(rng));
  void* on_device = nullptr;
  ASSERT_EQ(cudaMalloc(&on_device, values.size() * 2), cudaSuccess);
  itera::cuda::as_cuda(*m_dev).upload(on_device, values.data(), values.size() * 2);  // the engine's stream order

  const auto run = [&](engine& e, const embedding_rows* rows) {
    e.stage_prompts(ctx.ids);
    if (rows) e.stage_embeddings(*rows);
    e.prefill_staged(0, ctx.count, ctx.length());
    e.record_ids(ctx.count);
    for (int i = 0; i < 6; ++i) {
      e.decode(ctx.count);
      e.record_ids(ctx.count);
    }
    return e.take_recorded();
  };
  engine_options o;
  o.batch = 2;
  o.max_context = 64;
  o.max_prompt = ctx.length();
  o.prefill_batch = 2;
  cpu_engine_options co;
  co.slots = 2;
  co.max_context = 64;
  cpu_engine cpu(w, co);
  const embedding_rows host_rows{ctx.image_rows, values.data(), false};
  const embedding_rows device_rows{ctx.image_rows, static_cast<const std::uint16_t*>(on_device), true};
  const auto want = run(cpu, &host_rows);
  cuda_engine from_device(*m_dev, w, o), from_host(*m_dev, w, o), plain(*m_dev, w, o);
  const auto a = run(from_device, &device_rows), b = run(from_host, &host_rows), none = run(plain, nullptr);
  (void)cudaFree(on_device);
  EXPECT_EQ(a, b);
  std::size_t same = 0, total = 0, same_plain = 0;
  for (std::size_t s = 0; s < want.size(); ++s)
    for (std::size_t i = 0; i < want[s].size(); ++i) {
      same += a[s][i] == want[s][i];
      same_plain += none[s][i] == want[s][i];
      ++total;
    }
  std::printf("image rows: %zu of %zu tokens agree with the cpu engine (%zu without the rows)\n", same, total,
              same_plain);
  EXPECT_GE(static_cast<double>(same), 0.9 * static_cast<double>(total));
  EXPECT_LT(same_plain, same);
}

// The tensor-core prefill attention across several query and key tiles (64 each): a prompt of 150
// tokens (three tiles, the last partial) for two sequences, every position's logits against the
// cpu reference.
// Attention biases (Qwen's q, k and v biases) through the bias + RoPE + cache-store kernel: the
// tiny shape with biases against the cpu reference, prefill at every position and decode steps fed
// the reference's tokens.
TEST_F(llm_cuda, attention_bias_matches_cpu_reference) {
  model_config c = preset("tiny");
  c.attention_bias = true;
  const model_weights w = random_weights(c, dtype::bf16, 31337);
  const reference_model ref(w);
  constexpr std::int64_t batch = 2, prompt = 9, steps = 4;
  const auto vocab = static_cast<std::size_t>(c.vocab);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * prompt));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(1 + (i * 97 + 13) % (c.vocab - 1));
  engine_options opts;
  opts.batch = batch;
  opts.max_context = prompt + steps + 1;
  opts.max_prompt = prompt;
  opts.all_position_logits = true;
  cuda_engine eng(*m_dev, w, opts);
  const auto gpu_all = eng.prefill(ids, prompt, true);
  std::vector<sequence> seqs;
  std::vector<float> ref_all;
  for (std::int64_t b = 0; b < batch; ++b) {
    seqs.push_back(ref.new_sequence());
    const auto l = ref.prefill(seqs.back(), std::span<const std::int32_t>(ids.data() + b * prompt, prompt));
    ref_all.insert(ref_all.end(), l.begin(), l.end());
  }
  const double prefill_error = normalised_error(gpu_all.data(), ref_all.data(), ref_all.size());
  std::printf("attention bias: prefill logits normalised error %.3g\n", prefill_error);
  EXPECT_LT(prefill_error, logits_tolerance);
  for (std::int64_t step = 0; step < steps; ++step) {
    std::vector<std::int32_t> next(static_cast<std::size_t>(batch));
    for (std::int64_t b = 0; b < batch; ++b) next[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(1 + (step * 31 + b * 7) % (c.vocab - 1));
    const auto gpu = eng.decode_step(next);
    std::vector<float> want;
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto l = ref.decode_step(seqs[static_cast<std::size_t>(b)], next[static_cast<std::size_t>(b)]);
      want.insert(want.end(), l.begin(), l.end());
    }
    ASSERT_EQ(gpu.size(), batch * vocab);
    const double e = normalised_error(gpu.data(), want.data(), want.size());
    std::printf("attention bias: decode step %lld normalised error %.3g\n", static_cast<long long>(step + 1), e);
    EXPECT_LT(e, logits_tolerance) << "decode step " << step + 1;
  }
}

TEST_F(llm_cuda, long_prefill_matches_cpu_reference) {
  const model_config c = preset("tiny");
  const model_weights w = random_weights(c, dtype::bf16, 77);
  const reference_model ref(w);
  constexpr std::int64_t batch = 2, prompt = 150;
  const std::vector<std::int32_t> ids = random_ids(c, batch * prompt, 11);
  engine_options opts;
  opts.batch = batch;
  opts.max_context = prompt + 8;
  opts.max_prompt = prompt;
  opts.all_position_logits = true;
  cuda_engine eng(*m_dev, w, opts);
  const auto gpu = eng.prefill(ids, prompt, true);
  const auto vocab = static_cast<std::size_t>(c.vocab);
  for (std::int64_t b = 0; b < batch; ++b) {
    auto seq = ref.new_sequence();
    const std::vector<std::int32_t> mine(ids.begin() + b * prompt, ids.begin() + (b + 1) * prompt);
    const auto want = ref.prefill(seq, mine);
    for (std::int64_t t = 0; t < prompt; t += 37) {
      const double err = normalised_error(gpu.data() + (static_cast<std::size_t>(b * prompt + t)) * vocab,
                                          want.data() + static_cast<std::size_t>(t) * vocab, vocab);
      EXPECT_LT(err, logits_tolerance) << "sequence " << b << " position " << t;
    }
    const double last = normalised_error(gpu.data() + static_cast<std::size_t>(b * prompt + prompt - 1) * vocab,
                                         want.data() + static_cast<std::size_t>(prompt - 1) * vocab, vocab);
    std::printf("prefill of %lld tokens, sequence %lld: last-position logits normalised error %.3g\n",
                static_cast<long long>(prompt), static_cast<long long>(b), last);
    EXPECT_LT(last, logits_tolerance);
  }
}

// Decode at a batch large enough that the attention runs one block per (row, kv head), no key
// split (150 sequences x 2 kv heads): logits of a few sequences against the cpu reference.
TEST_F(llm_cuda, wide_batch_decode_matches_cpu_reference) {
  const model_config c = preset("tiny");
  const model_weights w = random_weights(c, dtype::bf16, 5);
  const reference_model ref(w);
  constexpr std::int64_t batch = 150, prompt = 9;
  const std::vector<std::int32_t> ids = random_ids(c, batch * prompt, 13);
  engine_options opts;
  opts.batch = batch;
  opts.max_context = prompt + 4;
  opts.max_prompt = prompt;
  cuda_engine eng(*m_dev, w, opts);
  (void)eng.prefill(ids, prompt);
  std::vector<std::int32_t> next(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b) next[static_cast<std::size_t>(b)] = static_cast<std::int32_t>((b * 7) % (c.vocab - 1) + 1);
  const auto gpu = eng.decode_step(next);
  const auto vocab = static_cast<std::size_t>(c.vocab);
  for (const std::int64_t b : {std::int64_t{0}, std::int64_t{77}, batch - 1}) {
    auto seq = ref.new_sequence();
    (void)ref.prefill(seq, std::vector<std::int32_t>(ids.begin() + b * prompt, ids.begin() + (b + 1) * prompt));
    const auto want = ref.decode_step(seq, next[static_cast<std::size_t>(b)]);
    const double err = normalised_error(gpu.data() + static_cast<std::size_t>(b) * vocab, want.data(), vocab);
    EXPECT_LT(err, logits_tolerance) << "sequence " << b;
  }
}

// The tensor-core kernels at the head dims of real models (the tiny preset has 16): a prefill of
// 70 tokens (two key tiles, the second partial) through the FlashAttention-style kernel, then one
// decode step at batch 150, wide enough that the decode attention runs one block per (row, kv
// head) on tensor cores; logits of the first, a middle and the last sequence against the cpu
// reference for both.
TEST_F(llm_cuda, tensor_core_attention_at_head_dims_64_and_128) {
  for (const auto& [head_dim, heads, kv_heads] : {std::tuple{64, 4, 2}, std::tuple{128, 8, 2}}) {
    const model_config c = tiny_at_head_dim(head_dim, heads, kv_heads);
    const model_weights w = random_weights(c, dtype::bf16, 31);
    const reference_model ref(w);
    constexpr std::int64_t batch = 150, prompt = 70;
    const std::vector<std::int32_t> ids = random_ids(c, batch * prompt, head_dim);
    engine_options opts;
    opts.batch = batch;
    opts.max_context = prompt + 4;
    opts.max_prompt = prompt;
    cuda_engine eng(*m_dev, w, opts);
    const auto first = eng.prefill(ids, prompt);
    std::vector<std::int32_t> next(static_cast<std::size_t>(batch));
    for (std::int64_t b = 0; b < batch; ++b) next[static_cast<std::size_t>(b)] = static_cast<std::int32_t>((b * 5) % (c.vocab - 1) + 1);
    const auto step = eng.decode_step(next);
    const auto vocab = static_cast<std::size_t>(c.vocab);
    for (const std::int64_t b : {std::int64_t{0}, std::int64_t{71}, batch - 1}) {
      auto seq = ref.new_sequence();
      const auto all = ref.prefill(seq, std::vector<std::int32_t>(ids.begin() + b * prompt, ids.begin() + (b + 1) * prompt));
      const double pe = normalised_error(first.data() + static_cast<std::size_t>(b) * vocab, all.data() + all.size() - vocab,
                                         vocab);
      const auto want = ref.decode_step(seq, next[static_cast<std::size_t>(b)]);
      const double de = normalised_error(step.data() + static_cast<std::size_t>(b) * vocab, want.data(), vocab);
      std::printf("head_dim %d, sequence %lld: prefill logits error %.3g, decode logits error %.3g (tolerance %.3g)\n",
                  head_dim, static_cast<long long>(b), pe, de, logits_tolerance);
      EXPECT_LT(pe, logits_tolerance) << "head_dim " << head_dim << " sequence " << b;
      EXPECT_LT(de, logits_tolerance) << "head_dim " << head_dim << " sequence " << b;
    }
  }
}

// The causal prefill attention through many key tiles at the head dims of real models, on each
// tensor-core kernel this device runs (attention_choice.hpp: on an H100/H200 the warp-specialized
// wgmma kernel with key tiles of 64 and, at head_dim 128, of 128, the three-block wgmma kernel
// (ITERA_PREFILL_ATTENTION_WS=0), then mma.sync): 333 tokens (six key tiles of 64, three of 128,
// the last partial, so that the kernels' rings wrap and their diagonal tiles fall mid-tile) and
// 684 (six tiles of 128: the two-stage ring's parity back to its first; a sequence's last block of
// 128 rows holds 44, so its second warpgroup has none and only releases the tiles), two
// sequences, logits of every 37th position and the last against the cpu reference, and the
// kernels' logits against the first's; in bf16 and in fp16 compute (fp16 weights and cache: the
// kernels' f16 mma.sync and wgmma instructions).
TEST_F(llm_cuda, long_causal_prefill_on_each_attention_kernel) {
  using itera::kernels::attention_kernel;
  for (const dtype compute : {dtype::bf16, dtype::fp16})
    for (const auto& [head_dim, heads, kv_heads, prompt] :
         {std::tuple{64, 4, 2, std::int64_t{333}}, std::tuple{64, 4, 2, std::int64_t{684}},
          std::tuple{128, 8, 2, std::int64_t{333}}, std::tuple{128, 8, 2, std::int64_t{684}}}) {
      SCOPED_TRACE(std::string(dtype_name(compute)) + " compute, head_dim " + std::to_string(head_dim) + ", " +
                   std::to_string(prompt) + " tokens");
      const double tolerance = tolerance_for(compute);
      model_config c = tiny_at_head_dim(head_dim, heads, kv_heads);
      c.max_position = std::max(c.max_position, prompt + 4);  // tiny holds 512: 684 tokens need more
      const model_weights w = weights_for(c, compute, 41);
      const reference_model ref(w);
      constexpr std::int64_t batch = 2;
      const std::vector<std::int32_t> ids = random_ids(c, batch * prompt, static_cast<std::uint32_t>(head_dim) + 7);
      engine_options opts;
      opts.batch = batch;
      opts.max_context = prompt + 4;
      opts.max_prompt = prompt;
      opts.all_position_logits = true;
      opts = computing(opts, compute);
      const auto vocab = static_cast<std::size_t>(c.vocab);
      std::vector<std::vector<float>> want(batch);
      for (std::int64_t b = 0; b < batch; ++b) {
        auto seq = ref.new_sequence();
        want[static_cast<std::size_t>(b)] =
            ref.prefill(seq, std::vector<std::int32_t>(ids.begin() + b * prompt, ids.begin() + (b + 1) * prompt));
      }
      const itera::kernels::llm::attention_shape shape{c.heads, c.kv_heads, c.head_dim, opts.max_context, prompt};
      std::vector<std::vector<float>> got;
      std::vector<std::string> names;
      for (const auto& [k, warp_specialized, wide_keys] :
           {std::tuple{attention_kernel::wgmma, true, false}, std::tuple{attention_kernel::wgmma, true, true},
            std::tuple{attention_kernel::wgmma, false, false}, std::tuple{attention_kernel::mma_sync, false, false}}) {
        const itera::test::attention_kernel_scope choice(k);
        const auto ran = itera::kernels::attention_kernel_for(head_dim);
        if (ran != k) continue;  // no wgmma kernel on this device: mma.sync is the other pass
        const ws_scope ws(warp_specialized);
        const wide_keys_scope wide(wide_keys);
        const bool takes = itera::kernels::llm::prefill_attention_warp_specialized(shape, batch * prompt);
        if (takes != warp_specialized) continue;  // not an sm_90a device, or this head_dim: the next pass
        if (takes && itera::kernels::llm::prefill_attention_key_tile(shape, batch * prompt) != (wide_keys ? 128 : 64))
          continue;  // 128-key tiles run at head_dim 128 only
        names.push_back(std::string(warp_specialized ? "warp-specialized " : "") +
                        (wide_keys ? "128-key-tile " : "") + itera::kernels::attention_kernel_name(ran));
        cuda_engine eng(*m_dev, w, opts);
        got.push_back(eng.prefill(ids, prompt, true));
        const auto& logits = got.back();
        std::vector<std::int64_t> positions;
        for (std::int64_t t = 0; t < prompt; t += 37) positions.push_back(t);
        positions.push_back(prompt - 1);
        double worst = 0;
        for (std::int64_t b = 0; b < batch; ++b)
          for (const std::int64_t t : positions) {
            const double e =
                normalised_error(logits.data() + static_cast<std::size_t>(b * prompt + t) * vocab,
                                 want[static_cast<std::size_t>(b)].data() + static_cast<std::size_t>(t) * vocab, vocab);
            worst = std::max(worst, e);
            EXPECT_LT(e, tolerance) << names.back() << ", sequence " << b << ", position " << t;
          }
        std::printf("causal prefill of %lld tokens, %s compute, head_dim %d, %s: worst sampled logits error %.3g "
                    "(tolerance %.3g)\n",
                    static_cast<long long>(prompt), std::string(dtype_name(compute)).c_str(), head_dim,
                    names.back().c_str(), worst, tolerance);
      }
      for (std::size_t i = 1; i < got.size(); ++i) {
        const double between = normalised_error(got[0].data(), got[i].data(), got[0].size());
        std::printf("%s compute, head_dim %d: %s against %s, all %lld positions: normalised difference %.3g\n",
                    std::string(dtype_name(compute)).c_str(), head_dim, names[0].c_str(), names[i].c_str(),
                    static_cast<long long>(batch * prompt), between);
        EXPECT_LT(between, tolerance) << names[0] << " against " << names[i];
      }
    }
}

// fp16 (the compute type of the same name): the inputs x 128, so that outputs reach the thousands
// (rms ~2700, the largest of a case ~10^4, 2^13: fp16's top binades, a factor of six below 65504);
// 16-bit output rounds each element with a relative error of at most 2^-11 (4.9e-4), which bounds
// the normalised error: 5e-4.
TEST_F(llm_cuda, small_gemm_matches_fp64) {
  constexpr std::int64_t in = 4096;
  std::mt19937 rng(20261029);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const dtype compute : {dtype::bf16, dtype::fp16}) {
    const bool half = compute == dtype::fp16;
    const auto bits = [&](std::size_t n, float scale) {
      std::vector<std::uint16_t> v(n);
      for (auto& b : v)
        b = to_16bit(compute, half ? scale * u(rng) : u(rng));
      return v;
    };
    const auto widen = [&](std::uint16_t b) { return from_16bit(compute, b); };
    for (const std::int64_t out_rows : {std::int64_t{1000}, std::int64_t{1001}})
      for (const std::int64_t tokens : {std::int64_t{1}, std::int64_t{3}, std::int64_t{4}})
        for (const int kind : {0, 1, 2}) {  // 16-bit output, fp32 output, fp32 output adding into a residual
          const bool fp32_out = kind != 0;
          const auto w = bits(static_cast<std::size_t>(out_rows * in), 1.0f);
          const auto x = bits(static_cast<std::size_t>(tokens * in), 128.0f);
          std::vector<float> init;
          if (kind == 2) {
            init.resize(static_cast<std::size_t>(out_rows * tokens));
            for (auto& v : init) v = 8.0f * u(rng);
          }
          const auto got = small_gemm(*m_dev, w, out_rows, in, x, tokens, fp32_out, init, compute);
          ASSERT_EQ(got.size(), static_cast<std::size_t>(out_rows * tokens));
          std::vector<double> ref(got.size());
          for (std::int64_t t = 0; t < tokens; ++t)
            for (std::int64_t o = 0; o < out_rows; ++o) {
              double acc = init.empty() ? 0.0 : init[static_cast<std::size_t>(t * out_rows + o)];
              for (std::int64_t i = 0; i < in; ++i)
                acc += static_cast<double>(widen(w[static_cast<std::size_t>(o * in + i)])) *
                       widen(x[static_cast<std::size_t>(t * in + i)]);
              ref[static_cast<std::size_t>(t * out_rows + o)] = acc;
            }
          double diff = 0, norm = 0;
          std::size_t unwritten = 0;
          for (std::size_t i = 0; i < got.size(); ++i) {
            if (!std::isfinite(got[i])) ++unwritten;
            diff += (got[i] - ref[i]) * (got[i] - ref[i]);
            norm += ref[i] * ref[i];
          }
          const double error = std::sqrt(diff / std::max(norm, 1e-30));
          const double tolerance = fp32_out ? 1e-5 : half ? 5e-4 : 2.5e-3;
          std::printf("small gemm %s, %lld x %lld, %lld tokens, %s: normalised error %.3g (tolerance %.3g)\n",
                      std::string(dtype_name(compute)).c_str(), static_cast<long long>(out_rows),
                      static_cast<long long>(in), static_cast<long long>(tokens),
                      kind == 0 ? "16-bit out" : (kind == 1 ? "fp32 out" : "fp32 out += residual"), error, tolerance);
          EXPECT_EQ(unwritten, 0u) << dtype_name(compute) << ", " << out_rows << " rows, " << tokens << " tokens, kind "
                                   << kind;
          EXPECT_LT(error, tolerance) << dtype_name(compute) << ", " << out_rows << " rows, " << tokens
                                      << " tokens, kind " << kind;
        }
  }
}

// fp8 e4m3 weights: the engine quantises the bf16 holder itself; the cpu reference computes with
// the same codes times their scales (random_weights in fp8_e4m3 rounds exactly as the engine
// does). Prefill (22 rows: fp8 tensor-core products, or projections dequantised to the compute
// type) and decode (2 rows: the fp8 gemv, exact codes, fp32 sums) against it; the device-generated
// fp8 weights equal the uploaded ones bit for bit (same logits). In bf16 and in fp16 compute: fp16's
// fp8 products write their sums to fp16 scaled down by fp8_sums_scale (in = 64 here: 2^-8), the
// rest of the model (bf16 values) is held in fp16.
//
// Decode after a prefill on fp8 tensor cores reads K and V that the prefill computed from
// activations rounded to e4m3: its logits carry that (measured 1.3e-2 to 1.6e-2 in bf16 on the
// H200, docs/perf/data/2026-11-30-kv-fp8/device_tests.log), whatever the compute type, so those steps
// keep logits_tolerance; where the prefill dequantises, the compute type's tolerance.
//
// All of it twice: the LM head bf16 (as fp8 checkpoints ship it), then quantised as a projection
// (model_config::fp8_lm_head, the lm_head=fp8_e4m3 axis), the reference rounding it the same way;
// the second time also the logits of every prefill position, which take the LM head above the
// gemv's rows.
TEST_F(llm_cuda, tiny_fp8_weights_match_cpu_reference) {
  for (const bool fp8_head : {false, true}) {
    SCOPED_TRACE(fp8_head ? "LM head fp8 (lm_head=fp8_e4m3)" : "LM head bf16");
    model_config c = preset("tiny");
    c.fp8_lm_head = fp8_head;
    // The second time a vocabulary past the dequantisation scratch (1000 rows of 64 inputs; the
    // scratch holds the largest projection's 16384 values): without fp8 products the LM head is
    // dequantised and multiplied in four slices of at most 256 rows.
    if (fp8_head) c.vocab = 1000;
    constexpr std::uint64_t seed = 20261129;
    const model_weights bf16_w = random_weights(c, dtype::bf16, seed);
    const model_weights fp8_w = random_weights(c, dtype::fp8_e4m3, seed);
    const reference_model ref(fp8_w);
    // Two sequences: decode steps of 2 rows run the fp8 gemv (the engine takes it for at most 2
    // rows), the 22-row prefill the fp8 products.
    constexpr std::int64_t batch = 2, prompt = 11, steps = 4;
    const auto vocab = static_cast<std::size_t>(c.vocab);
    const std::vector<std::int32_t> ids = random_ids(c, batch * prompt, 17);
    for (const dtype compute : {dtype::bf16, dtype::fp16}) {
      SCOPED_TRACE(std::string(dtype_name(compute)) + " compute");
      const double tolerance = tolerance_for(compute);
      engine_options opts;
      opts.batch = batch;
      opts.max_context = prompt + steps + 1;
      opts.max_prompt = prompt;
      opts = computing(opts, compute);
      opts.weights = dtype::fp8_e4m3;
      cuda_engine eng(*m_dev, bf16_w, opts);
      cuda_engine generated(*m_dev, c, seed, opts);
      EXPECT_LT(eng.memory().weights, cuda_engine(*m_dev, bf16_w, [&] {
                  auto o = opts;
                  o.weights = compute;
                  return o;
                }()).memory().weights);
      EXPECT_NE(eng.precision_note().find("fp8 e4m3"), std::string::npos);
      EXPECT_EQ(eng.precision_note().find("projections and LM head") != std::string::npos, fp8_head)
          << eng.precision_note();
      if (fp8_head) {  // the LM head's codes and scales in place of its bf16 values
        model_config bf16_head = c;
        bf16_head.fp8_lm_head = false;
        EXPECT_LT(eng.memory().weights, cuda_engine(*m_dev, bf16_head, seed, opts).memory().weights);
      }
      EXPECT_NE(eng.precision_note().find(std::string(dtype_name(compute)) + " activations between kernels"),
                std::string::npos)
          << eng.precision_note();

      std::vector<sequence> seqs;
      std::vector<float> want;
      for (std::int64_t b = 0; b < batch; ++b) {
        seqs.push_back(ref.new_sequence());
        const auto l = ref.prefill(seqs.back(), std::span<const std::int32_t>(ids.data() + b * prompt, prompt));
        want.insert(want.end(), l.end() - static_cast<std::ptrdiff_t>(vocab), l.end());
      }
      auto got = eng.prefill(ids, prompt);
      EXPECT_EQ(generated.prefill(ids, prompt), got) << "device-generated fp8 weights differ from the uploaded ones";
      double e = normalised_error(got.data(), want.data(), want.size());
      // Where the prefill's products run on fp8 tensor cores the activations are rounded to e4m3 too
      // (3 mantissa bits, one scale per token), which the reference does not do: a wider tolerance.
      const bool fp8_products = cuda_engine::fp8_products_available(*m_dev, compute);
      const double prefill_tolerance = fp8_products ? 0.1 : tolerance;
      std::printf("fp8 prefill logits, %s compute (%s): normalised error %.3g (tolerance %.3g)\n",
                  std::string(dtype_name(compute)).c_str(),
                  fp8_products ? "fp8 tensor-core products" : "dequantised 16-bit products", e, prefill_tolerance);
      EXPECT_LT(e, prefill_tolerance);
      if (fp8_products) {  // the other path, forced, stays within the 16-bit tolerance
        setenv("ITERA_LLM_FP8_PRODUCTS", "0", 1);
        cuda_engine dequantising(*m_dev, bf16_w, opts);
        unsetenv("ITERA_LLM_FP8_PRODUCTS");
        const auto d = dequantising.prefill(ids, prompt);
        const double de = normalised_error(d.data(), want.data(), want.size());
        std::printf("fp8 prefill logits, %s compute (dequantised 16-bit products): normalised error %.3g (tolerance "
                    "%.3g)\n",
                    std::string(dtype_name(compute)).c_str(), de, tolerance);
        EXPECT_LT(de, tolerance);
        EXPECT_NE(dequantising.precision_note(), eng.precision_note());
      }
      const double decode_tolerance = fp8_products ? logits_tolerance : tolerance;
      for (std::int64_t step = 0; step < steps; ++step) {
        std::vector<std::int32_t> next(static_cast<std::size_t>(batch));
        for (std::int64_t b = 0; b < batch; ++b)
          next[static_cast<std::size_t>(b)] = argmax(std::span<const float>(want.data() + b * c.vocab, vocab));
        got = eng.decode_step(next);
        for (std::int64_t b = 0; b < batch; ++b) {
          const auto l = ref.decode_step(seqs[static_cast<std::size_t>(b)], next[static_cast<std::size_t>(b)]);
          std::copy(l.begin(), l.end(), want.begin() + static_cast<std::ptrdiff_t>(b * c.vocab));
        }
        e = normalised_error(got.data(), want.data(), want.size());
        std::printf("fp8 decode step %lld (gemv), %s compute: normalised error %.3g (tolerance %.3g)\n",
                    static_cast<long long>(step + 1), std::string(dtype_name(compute)).c_str(), e, decode_tolerance);
        EXPECT_LT(e, decode_tolerance) << "decode step " << step + 1;
      }
    }
    if (!fp8_head) continue;
    // The LM head over every prefill position (22 rows): above the gemv's rows, on fp8 tensor cores
    // where cuBLASLt has them (the fp32 logits scaled in place), and dequantised in slices (forced
    // with ITERA_LLM_FP8_PRODUCTS=0; the only path on cards without fp8 products).
    std::vector<float> want;
    for (std::int64_t b = 0; b < batch; ++b) {
      sequence s = ref.new_sequence();
      const auto l = ref.prefill(s, std::span<const std::int32_t>(ids.data() + b * prompt, prompt));
      want.insert(want.end(), l.begin(), l.end());
    }
    for (const dtype compute : {dtype::bf16, dtype::fp16})
      for (const bool products : {true, false}) {
        const bool fp8_products = products && cuda_engine::fp8_products_available(*m_dev, compute);
        if (products && !fp8_products) continue;  // the dequantised run below is this card's only path
        SCOPED_TRACE(std::string(dtype_name(compute)) + " compute, every position");
        engine_options opts;
        opts.batch = batch;
        opts.max_context = prompt + 1;
        opts.max_prompt = prompt;
        opts.all_position_logits = true;
        opts = computing(opts, compute);
        opts.weights = dtype::fp8_e4m3;
        if (!products) setenv("ITERA_LLM_FP8_PRODUCTS", "0", 1);
        cuda_engine eng(*m_dev, bf16_w, opts);
        unsetenv("ITERA_LLM_FP8_PRODUCTS");
        const auto got = eng.prefill(ids, prompt, true);
        ASSERT_EQ(got.size(), want.size());
        const double e = normalised_error(got.data(), want.data(), want.size());
        const double t = fp8_products ? 0.1 : tolerance_for(compute);
        std::printf("fp8 weights and LM head (vocabulary %lld), prefill logits of all %lld positions, %s compute, %s: "
                    "normalised error %.3g (tolerance %.3g)\n",
                    static_cast<long long>(c.vocab), static_cast<long long>(batch * prompt),
                    std::string(dtype_name(compute)).c_str(),
                    fp8_products ? "fp8 tensor-core products" : "dequantised in slices", e, t);
        EXPECT_LT(e, t);
      }
  }
}
// ---------------------------------------------------------------------------------------------
// fp8 e4m3 KV cache (engine_options::kv): K and V rounded from fp32 to e4m3 at the cache store
// (scale 1, saturating), a prefill attending over its own bf16 rows, decode steps reading the fp8
// cache; against the cpu reference with the same cache (reference_model(w, fp8_e4m3)).
//
// Tolerance of the decode steps. Both sides store e4m3 codes, rounded from values that differ by
// the bf16 noise above (~0.3% relative): where a value lies within that of the midpoint between
// two codes, the sides store neighbouring codes, one e4m3 step (2^-3 to 2^-4 of the value) apart.
// That happens to about 0.003 / 0.09 ~ 3-5% of the values, a cache difference of ~0.2 steps rms,
// near e4m3's own rounding (a step / sqrt(12) ~ 0.29 steps rms): the noise is amplified, bounded
// by about the fp8 cache's own effect on the logits. Measured on the cpu for the shapes below
// (prompt 37, three steps): the fp8 cache moves the logits by 0.4-1.5% against an fp32 cache, and
// 0.4% noise on the attention projections (the size of bf16's) moves fp8-cache logits by 0.2-0.9%
// (0.1-0.55% with an fp32 cache). 4e-2 leaves a factor of four over the worst; codes read as
// bf16, the wrong byte of a pair or the wrong row of a tile give errors of order 1. The prefill
// does not read the cache: its logits are a bf16 cache engine's bit for bit, and within
// logits_tolerance of the reference.
constexpr double fp8_kv_tolerance = 4e-2;

engine_options with_kv(engine_options o, dtype kv) {
  o.kv = kv;
  return o;
}

// Two engines of `opts` after the same prefill: the device-driven eager step and the CUDA graph's
// give the same tokens, step after step (the first step that differs is reported and ends it).
void expect_graph_matches_eager(itera::backend& dev, const model_weights& w, const engine_options& opts,
                                const std::vector<std::int32_t>& ids, std::int64_t prompt, std::int64_t steps) {
  cuda_engine eager(dev, w, opts), graph(dev, w, opts);
  (void)eager.prefill(ids, prompt);
  (void)graph.prefill(ids, prompt);
  for (std::int64_t step = 0; step < steps; ++step) {
    eager.decode_device();
    graph.decode_graph();
    const auto from_graph = graph.read_ids(), from_eager = eager.read_ids();
    EXPECT_EQ(from_graph, from_eager) << "decode step " << step + 1 << ": the graph's tokens against the eager step's";
    if (from_graph != from_eager) return;
  }
}

// At batch 2 (the decode attention on CUDA cores, keys split over a cluster on sm_90): every
// prefill position, decode steps fed the reference's tokens, the engine's own tokens eagerly and
// through its CUDA graph, a one-token prefill; bf16 and fp8 weights. The negative checks: the fp8
// cache engine's decode logits differ from a bf16 cache engine's (the cache really is fp8), and
// its cache takes half the bytes, as planned to the byte.
TEST_F(llm_cuda, tiny_fp8_kv_cache_matches_cpu_reference) {
  const model_config c = preset("tiny");
  constexpr std::uint64_t seed = 424242;
  constexpr std::int64_t batch = 2, prompt = 13, steps = 6;
  const auto vocab = static_cast<std::size_t>(c.vocab);
  const std::vector<std::int32_t> ids = random_ids(c, batch * prompt, 23);
  const model_weights bf16_w = random_weights(c, dtype::bf16, seed);
  for (const dtype weights : {dtype::bf16, dtype::fp8_e4m3}) {
    SCOPED_TRACE(std::string("weights ") + std::string(dtype_name(weights)));
    const model_weights ref_w = weights == dtype::bf16 ? bf16_w : random_weights(c, dtype::fp8_e4m3, seed);
    const reference_model ref(ref_w, dtype::fp8_e4m3), ref_fp32_kv(ref_w);
    engine_options opts;
    opts.batch = batch;
    opts.max_context = prompt + steps + 1;
    opts.max_prompt = prompt;
    opts.all_position_logits = true;
    opts.weights = weights;
    cuda_engine eng(*m_dev, bf16_w, with_kv(opts, dtype::fp8_e4m3));
    cuda_engine bf16_kv(*m_dev, bf16_w, with_kv(opts, dtype::bf16));
    const auto mem = eng.memory(), plan = cuda_engine::plan(*m_dev, c, with_kv(opts, dtype::fp8_e4m3));
    EXPECT_EQ(2 * mem.kv_cache, bf16_kv.memory().kv_cache);
    EXPECT_EQ(plan.kv_cache, mem.kv_cache);
    EXPECT_EQ(plan.weights, mem.weights);
    EXPECT_EQ(plan.activations, mem.activations);
    EXPECT_NE(eng.precision_note().find("KV cache fp8 e4m3 (scale 1, saturating)"), std::string::npos)
        << eng.precision_note();
    EXPECT_EQ(bf16_kv.precision_note().find("KV cache fp8"), std::string::npos);

    // Prefill, every position.
    const auto got = eng.prefill(ids, prompt, true);
    EXPECT_EQ(got, bf16_kv.prefill(ids, prompt, true)) << "a prefill reads its own bf16 rows, not the cache";
    std::vector<sequence> seqs, exact_seqs;
    std::vector<float> want;
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::span<const std::int32_t> p(ids.data() + b * prompt, static_cast<std::size_t>(prompt));
      seqs.push_back(ref.new_sequence());
      exact_seqs.push_back(ref_fp32_kv.new_sequence());
      const auto l = ref.prefill(seqs.back(), p);
      (void)ref_fp32_kv.prefill(exact_seqs.back(), p);
      want.insert(want.end(), l.begin(), l.end());
    }
    // fp8 weights: prefill products on fp8 tensor cores quantise the activations too (see
    // tiny_fp8_weights_match_cpu_reference).
    const bool fp8_products = weights == dtype::fp8_e4m3 && cuda_engine::fp8_products_available(*m_dev);
    const double prefill_tolerance = fp8_products ? 0.1 : logits_tolerance;
    const double pe = normalised_error(got.data(), want.data(), want.size());
    std::printf("fp8 KV cache, %s weights: prefill logits (all positions) normalised error %.3g (tolerance %.3g)\n",
                std::string(dtype_name(weights)).c_str(), pe, prefill_tolerance);
    EXPECT_LT(pe, prefill_tolerance);

    // Decode steps fed the reference's argmax on every side.
    std::vector<float> last(batch * vocab);
    for (std::int64_t b = 0; b < batch; ++b)
      std::copy_n(want.begin() + static_cast<std::ptrdiff_t>((b * prompt + prompt - 1) * c.vocab), c.vocab,
                  last.begin() + static_cast<std::ptrdiff_t>(b * c.vocab));
    for (std::int64_t step = 0; step < steps; ++step) {
      std::vector<std::int32_t> next(static_cast<std::size_t>(batch));
      for (std::int64_t b = 0; b < batch; ++b)
        next[static_cast<std::size_t>(b)] = argmax(std::span<const float>(last.data() + b * c.vocab, vocab));
      const auto g = eng.decode_step(next), g16 = bf16_kv.decode_step(next);
      std::vector<float> exact;
      for (std::int64_t b = 0; b < batch; ++b) {
        const auto l = ref.decode_step(seqs[static_cast<std::size_t>(b)], next[static_cast<std::size_t>(b)]);
        std::copy(l.begin(), l.end(), last.begin() + static_cast<std::ptrdiff_t>(b * c.vocab));
        const auto x = ref_fp32_kv.decode_step(exact_seqs[static_cast<std::size_t>(b)], next[static_cast<std::size_t>(b)]);
        exact.insert(exact.end(), x.begin(), x.end());
      }
      const double e = normalised_error(g.data(), last.data(), last.size());
      const double from_bf16_kv = normalised_error(g.data(), g16.data(), g.size());
      const double cache_effect = normalised_error(last.data(), exact.data(), exact.size());
      std::printf("fp8 KV cache, %s weights: decode step %lld: normalised error %.3g (tolerance %.3g); against a bf16 "
                  "cache: engine %.3g, reference %.3g\n",
                  std::string(dtype_name(weights)).c_str(), static_cast<long long>(step + 1), e, fp8_kv_tolerance,
                  from_bf16_kv, cache_effect);
      EXPECT_LT(e, fp8_kv_tolerance) << "decode step " << step + 1;
      EXPECT_GT(from_bf16_kv, cache_effect / 4) << "decode step " << step + 1 << ": the engine's cache is not fp8";
    }

    // The device-driven step and its CUDA graph: the same tokens (the same kernels, fixed-order sums).
    opts.all_position_logits = false;
    expect_graph_matches_eager(*m_dev, bf16_w, with_kv(opts, dtype::fp8_e4m3), ids, prompt, steps);

    // A one-token prompt: its attention reads its own row too (the general kernel), not the cache.
    const std::vector<std::int32_t> one = {ids[0], ids[1]};
    const auto a = eng.prefill(one, 1), b = bf16_kv.prefill(one, 1);
    EXPECT_EQ(a, b) << "a one-token prefill reads its own bf16 row";
    std::vector<float> want_one;
    for (std::int64_t s = 0; s < batch; ++s) {
      auto seq = ref.new_sequence();
      const auto l = ref.prefill(seq, std::span<const std::int32_t>(one.data() + s, 1));
      want_one.insert(want_one.end(), l.begin(), l.end());
    }
    EXPECT_LT(normalised_error(a.data(), want_one.data(), want_one.size()), prefill_tolerance);
  }
}

// One decode step of all `batch` rows, row b fed token (b * per_row + step * per_step) % (vocab - 1) + 1,
// and the logits of rows `checked` against the reference's (seqs[i] holds row checked[i]'s
// sequence, advanced here): each within `tolerance`. Returns the worst normalised error.
double decode_step_against_reference(cuda_engine& eng, const reference_model& ref, std::vector<sequence>& seqs,
                                     const std::vector<std::int64_t>& checked, std::int64_t batch, std::int64_t vocab,
                                     std::int64_t step, std::int64_t per_row, std::int64_t per_step, double tolerance) {
  std::vector<std::int32_t> next(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b)
    next[static_cast<std::size_t>(b)] = static_cast<std::int32_t>((b * per_row + step * per_step) % (vocab - 1) + 1);
  const auto got = eng.decode_step(next);
  double worst = 0;
  for (std::size_t i = 0; i < checked.size(); ++i) {
    const auto b = checked[i];
    const auto want = ref.decode_step(seqs[i], next[static_cast<std::size_t>(b)]);
    const double e = normalised_error(got.data() + static_cast<std::size_t>(b * vocab), want.data(),
                                      static_cast<std::size_t>(vocab));
    worst = std::max(worst, e);
    EXPECT_LT(e, tolerance) << "decode step " << step + 1 << ", sequence " << b;
  }
  return worst;
}

// RoPE, the biases and the cache store done by the tensor-core decode attention itself
// (decode_attention_rotates: q rotated as the kernel reads it; the new key's k and v stored by the
// block whose keys hold its position, and written over that block's copy of the row): decode steps
// against the cpu reference through 42 positions from a prompt of 25 (the new key first, inside and
// last in the kernel's 32-key tiles, and in each block of a split), attention biases, a bf16 and an
// fp8 cache (the reference's cache e4m3 too): batch 8 (16 (row, kv head) pairs: a pair's keys dealt
// over a cluster of blocks) and 80 (a block a pair); then the CUDA graph's steps against the eager
// ones, token for token. Groups of 4 query heads a kv head at head_dim 128 (llama), 7 (qwen2.5:
// more q quads than the block's 64 threads, so a thread rotates a second) and 1 at head_dim 64.
TEST_F(llm_cuda, rope_in_decode_attention_matches_cpu_reference) {
  for (const auto& [head_dim, heads, kv_heads] :
       {std::tuple{128, 8, 2}, std::tuple{128, 14, 2}, std::tuple{64, 2, 2}}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim) + ", " + std::to_string(heads) + " heads, " +
                 std::to_string(kv_heads) + " kv heads");
    model_config c = tiny_at_head_dim(head_dim, heads, kv_heads);
    c.attention_bias = true;
    const model_weights w = random_weights(c, dtype::bf16, 777);
    constexpr std::int64_t prompt = 25, steps = 42;
    for (const dtype kv : {dtype::bf16, dtype::fp8_e4m3}) {
      const reference_model ref(w, kv == dtype::fp8_e4m3 ? dtype::fp8_e4m3 : dtype::fp32);
      const double tolerance = kv == dtype::fp8_e4m3 ? fp8_kv_tolerance : logits_tolerance;
      for (const std::int64_t batch : {8, 80}) {
        SCOPED_TRACE(std::string(dtype_name(kv)) + " KV cache, batch " + std::to_string(batch));
        const std::vector<std::int32_t> ids = random_ids(c, batch * prompt, static_cast<std::uint32_t>(batch + 5));
        engine_options opts;
        opts.batch = batch;
        opts.max_context = prompt + steps + 1;
        opts.max_prompt = prompt;
        opts.kv = kv;
        cuda_engine eng(*m_dev, w, opts);
        (void)eng.prefill(ids, prompt);
        const std::vector<std::int64_t> checked = {0, batch / 2 + 1, batch - 1};
        std::vector<sequence> seqs;
        for (const auto b : checked) {
          seqs.push_back(ref.new_sequence());
          (void)ref.prefill(seqs.back(),
                            std::vector<std::int32_t>(ids.begin() + b * prompt, ids.begin() + (b + 1) * prompt));
        }
        double worst = 0;
        for (std::int64_t step = 0; step < steps; ++step)
          worst = std::max(worst, decode_step_against_reference(eng, ref, seqs, checked, batch, c.vocab, step, 11, 7,
                                                                tolerance));
        std::printf("RoPE in the decode attention, head_dim %d, group %d, %s KV cache, batch %lld: worst normalised "
                    "error over %lld steps %.3g (tolerance %.3g)\n",
                    head_dim, heads / kv_heads, std::string(dtype_name(kv)).c_str(), static_cast<long long>(batch),
                    static_cast<long long>(steps), worst, tolerance);
        expect_graph_matches_eager(*m_dev, w, opts, ids, prompt, steps);
      }
    }
  }
}

// The decode kernels at the head dims of real models, for a compute type and a cache: at batch 2
// the CUDA-core kernel split over a cluster (fp8: 16 codes per 16-byte load from head_dim 32 on);
// from batch 16 (32 (row, kv head) pairs) the tensor-core kernel for head dims 64 and 128 (an fp8
// cache widened by each warp to a tile of the compute type), its keys dealt over clusters of 8
// blocks at batch 16 (a prompt of 37 tokens: two blocks hold keys, six none), 4 at batch 32 (a
// prompt of 200: every block holds keys, the last a partial tile), 2 at batch 64 (200) and one
// block a pair at batch 150 (on the H200's 132 SMs); the CUDA-core kernel for head dims 16 and 256. head_dim 256 also takes the
// general prefill kernel (the tensor-core prefill stops at 128), reading the pass's own rows. A
// prompt of 37 tokens spans two 32-key tiles of the tensor-core kernel, the second partial. Logits
// of the first, a middle and the last sequence against the cpu reference (its cache fp8 or fp32 as
// the engine's is fp8 or 16-bit), two decode steps.
void decode_kernels_match_cpu_reference(itera::backend& dev, dtype compute, dtype kv, double tolerance) {
  for (const auto& [head_dim, heads, kv_heads] :
       {std::tuple{16, 4, 2}, std::tuple{64, 4, 2}, std::tuple{128, 8, 2}, std::tuple{256, 4, 1}}) {
    const model_config c = tiny_at_head_dim(head_dim, heads, kv_heads);
    const model_weights w = weights_for(c, compute, 71 + static_cast<std::uint64_t>(head_dim));
    const reference_model ref(w, kv == dtype::fp8_e4m3 ? dtype::fp8_e4m3 : dtype::fp32);
    for (const std::int64_t batch : {2, 16, 32, 64, 150}) {
      SCOPED_TRACE(std::string(dtype_name(compute)) + " compute, " + std::string(dtype_name(kv)) + " KV cache, head_dim " +
                   std::to_string(head_dim) + ", batch " + std::to_string(batch));
      const std::int64_t prompt = batch == 32 || batch == 64 ? 200 : 37, steps = 2;
      const std::vector<std::int32_t> ids =
          random_ids(c, batch * prompt, static_cast<std::uint32_t>(head_dim * 1000 + batch));
      engine_options opts;
      opts.batch = batch;
      opts.max_context = prompt + steps + 2;
      opts.max_prompt = prompt;
      opts = computing(opts, compute);
      opts.kv = kv;
      cuda_engine eng(dev, w, opts);
      const auto first = eng.prefill(ids, prompt);
      const auto vocab = static_cast<std::size_t>(c.vocab);
      const std::vector<std::int64_t> checked =
          batch == 2 ? std::vector<std::int64_t>{0, 1} : std::vector<std::int64_t>{0, batch / 2, batch - 1};
      std::vector<sequence> seqs;
      for (const auto b : checked) {
        seqs.push_back(ref.new_sequence());
        const auto all = ref.prefill(seqs.back(), std::vector<std::int32_t>(ids.begin() + b * prompt,
                                                                            ids.begin() + (b + 1) * prompt));
        const double pe = normalised_error(first.data() + static_cast<std::size_t>(b) * vocab,
                                           all.data() + all.size() - vocab, vocab);
        EXPECT_LT(pe, tolerance_for(compute)) << "prefill, sequence " << b;
      }
      for (std::int64_t step = 0; step < steps; ++step) {
        const double worst =
            decode_step_against_reference(eng, ref, seqs, checked, batch, c.vocab, step, 5, 3, tolerance);
        std::printf("%s compute, %s KV cache, head_dim %d, batch %lld, decode step %lld: worst normalised error %.3g "
                    "(tolerance %.3g)\n",
                    std::string(dtype_name(compute)).c_str(), std::string(dtype_name(kv)).c_str(), head_dim,
                    static_cast<long long>(batch), static_cast<long long>(step + 1), worst, tolerance);
      }
    }
  }
}

TEST_F(llm_cuda, fp8_kv_cache_decode_kernels_match_cpu_reference) {
  decode_kernels_match_cpu_reference(*m_dev, dtype::bf16, dtype::fp8_e4m3, fp8_kv_tolerance);
}

// The same kernels' fp16 instances: an fp16 cache (read as fp16, widened to fp32 on CUDA cores or
// fed to the f16 mma.sync as it is) and an fp8 one widened to fp16 tiles.
TEST_F(llm_cuda, fp16_decode_kernels_match_cpu_reference) {
  decode_kernels_match_cpu_reference(*m_dev, dtype::fp16, dtype::fp16, fp16_logits_tolerance);
  decode_kernels_match_cpu_reference(*m_dev, dtype::fp16, dtype::fp8_e4m3, fp8_kv_tolerance);
}

// ---------------------------------------------------------------------------------------------
// fp16 compute (engine_options::compute = fp16) on the tiny preset.

// fp16 weights with an fp16 KV cache and with an fp8 one, against the cpu reference (fp32 with the
// same fp16 weight values; its cache fp32 or fp8 as the engine's): every prefill position, decode
// steps fed the reference's tokens, then the device-driven steps eagerly and through the CUDA
// graph; the plan equals what is allocated; the fp8-cache engine's prefill equals the fp16-cache
// one's bit for bit (a prefill reads its own rows). Then bf16 compute on the same weight values
// (converted to bf16 at load): within bf16's tolerance and further from the reference than fp16
// compute, eight times by the unit roundoffs; fp16 closer by at least half that says the fp16
// engine rounds to fp16, not to bf16, somewhere along the way.
TEST_F(llm_cuda, tiny_fp16_compute_matches_cpu_reference) {
  const model_config c = preset("tiny");
  constexpr std::uint64_t seed = 16161;
  constexpr std::int64_t batch = 3, prompt = 11, steps = 5;
  const auto vocab = static_cast<std::size_t>(c.vocab);
  const std::vector<std::int32_t> ids = random_ids(c, batch * prompt, 29);
  const model_weights w = random_weights(c, dtype::fp16, seed);
  engine_options opts;
  opts.batch = batch;
  opts.max_context = prompt + steps + 1;
  opts.max_prompt = prompt;
  opts.all_position_logits = true;
  opts = computing(opts, dtype::fp16);
  std::vector<float> want_prefill, fp16_kv_prefill;
  for (const dtype kv : {dtype::fp16, dtype::fp8_e4m3}) {
    SCOPED_TRACE(std::string(dtype_name(kv)) + " KV cache");
    const bool kv8 = kv == dtype::fp8_e4m3;
    const double decode_tolerance = kv8 ? fp8_kv_tolerance : fp16_logits_tolerance;
    const reference_model ref(w, kv8 ? dtype::fp8_e4m3 : dtype::fp32);
    cuda_engine eng(*m_dev, w, with_kv(opts, kv));
    const auto mem = eng.memory(), plan = cuda_engine::plan(*m_dev, c, with_kv(opts, kv));
    EXPECT_EQ(plan.kv_cache, mem.kv_cache);
    EXPECT_EQ(plan.weights, mem.weights);
    EXPECT_EQ(plan.activations, mem.activations);
    const std::string note = eng.precision_note();
    EXPECT_NE(note.find("fp16 activations between kernels"), std::string::npos) << note;
    EXPECT_NE(note.find(kv8 ? "fp16 weights; fp16 activations" : "fp16 weights and fp16 KV cache"), std::string::npos)
        << note;
    EXPECT_EQ(note.find("converted"), std::string::npos) << note;

    // Prefill, every position.
    const auto got = eng.prefill(ids, prompt, true);
    std::vector<sequence> seqs;
    std::vector<float> want;
    for (std::int64_t b = 0; b < batch; ++b) {
      seqs.push_back(ref.new_sequence());
      const auto l = ref.prefill(seqs.back(), std::span<const std::int32_t>(ids.data() + b * prompt, prompt));
      want.insert(want.end(), l.begin(), l.end());
    }
    const double pe = normalised_error(got.data(), want.data(), want.size());
    std::printf("fp16 compute, %s KV cache: prefill logits (all positions) normalised error %.3g (tolerance %.3g)\n",
                std::string(dtype_name(kv)).c_str(), pe, fp16_logits_tolerance);
    EXPECT_LT(pe, fp16_logits_tolerance);
    if (kv8) {
      EXPECT_EQ(got, fp16_kv_prefill) << "a prefill reads its own fp16 rows, not the cache";
    } else {
      fp16_kv_prefill = got;
      want_prefill = want;
    }

    // Decode steps fed the reference's argmax.
    std::vector<float> last(batch * vocab);
    for (std::int64_t b = 0; b < batch; ++b)
      std::copy_n(want.begin() + static_cast<std::ptrdiff_t>((b * prompt + prompt - 1) * c.vocab), c.vocab,
                  last.begin() + static_cast<std::ptrdiff_t>(b * c.vocab));
    for (std::int64_t step = 0; step < steps; ++step) {
      std::vector<std::int32_t> next(static_cast<std::size_t>(batch));
      for (std::int64_t b = 0; b < batch; ++b)
        next[static_cast<std::size_t>(b)] = argmax(std::span<const float>(last.data() + b * c.vocab, vocab));
      const auto g = eng.decode_step(next);
      for (std::int64_t b = 0; b < batch; ++b) {
        const auto l = ref.decode_step(seqs[static_cast<std::size_t>(b)], next[static_cast<std::size_t>(b)]);
        std::copy(l.begin(), l.end(), last.begin() + static_cast<std::ptrdiff_t>(b * c.vocab));
      }
      const double e = normalised_error(g.data(), last.data(), last.size());
      std::printf("fp16 compute, %s KV cache: decode step %lld normalised error %.3g (tolerance %.3g)\n",
                  std::string(dtype_name(kv)).c_str(), static_cast<long long>(step + 1), e, decode_tolerance);
      EXPECT_LT(e, decode_tolerance) << "decode step " << step + 1;
      EXPECT_EQ(eng.read_ids(), [&] {
        std::vector<std::int32_t> ids_of(static_cast<std::size_t>(batch));
        for (std::int64_t b = 0; b < batch; ++b)
          ids_of[static_cast<std::size_t>(b)] = argmax(std::span<const float>(g.data() + b * c.vocab, vocab));
        return ids_of;
      }()) << "the argmax kernel on the fp16 engine's logits";
    }

    // The device-driven step and its CUDA graph: the same tokens.
    engine_options last_only = with_kv(opts, kv);
    last_only.all_position_logits = false;
    expect_graph_matches_eager(*m_dev, w, last_only, ids, prompt, steps);
  }

  // bf16 compute on the same fp16 weight values.
  engine_options b = opts;
  b = computing(b, dtype::bf16);
  b.weights = dtype::fp16;
  cuda_engine bf16_eng(*m_dev, w, b);
  EXPECT_NE(bf16_eng.precision_note().find("fp16 values converted to bf16 at load"), std::string::npos)
      << bf16_eng.precision_note();
  const auto bf16_got = bf16_eng.prefill(ids, prompt, true);
  const double e16 = normalised_error(fp16_kv_prefill.data(), want_prefill.data(), want_prefill.size());
  const double e_bf16 = normalised_error(bf16_got.data(), want_prefill.data(), want_prefill.size());
  std::printf("prefill logits against the reference: fp16 compute %.3g, bf16 compute (fp16 weights converted) %.3g\n",
              e16, e_bf16);
  EXPECT_LT(e_bf16, logits_tolerance);
  EXPECT_LT(e16, e_bf16 / 2) << "fp16 compute should be closer to fp32 than bf16 compute";
}

// Weights generated on the device equal the host's random_weights uploaded, bit for bit, for every
// pairing of a 16-bit storage type with a compute type (the other type's values rounded a second
// time, on the device as at upload) and for fp8 weights at fp16 compute (the rest bf16 values held
// in fp16): the same logits.
TEST_F(llm_cuda, tiny_device_generated_weights_match_host_init) {
  const model_config c = preset("tiny");
  constexpr std::uint64_t seed = 606;
  const std::vector<std::int32_t> ids = {5, 17, 200, 3, 9, 101, 44, 250};
  for (const auto& [compute, weights] : {std::pair{dtype::bf16, dtype::bf16}, std::pair{dtype::fp16, dtype::fp16},
                                         std::pair{dtype::fp16, dtype::bf16},
                                         std::pair{dtype::bf16, dtype::fp16}, std::pair{dtype::fp16, dtype::fp8_e4m3}}) {
    SCOPED_TRACE(std::string(dtype_name(compute)) + " compute, " + std::string(dtype_name(weights)) + " weights");
    engine_options opts;
    opts.batch = 2;
    opts.max_context = 16;
    opts = computing(opts, compute);
    opts.weights = weights;
    cuda_engine uploaded(*m_dev, random_weights(c, weights == dtype::fp8_e4m3 ? dtype::bf16 : weights, seed), opts);
    cuda_engine generated(*m_dev, c, seed, opts);
    const auto a = uploaded.prefill(ids, 4);
    const auto b = generated.prefill(ids, 4);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(a, b);
  }
}

// Large activations in fp16: layer 0's V made 2^14 times larger and its gate and up 2^4 and 2^6
// times (powers of two: the fp16 weights stay exact), so that the values fp16 holds reach its top
// binades without passing 65504. Estimates for the tiny preset (hidden 64, weights of std 0.02, the
// norm's output of std ~1): v of std 0.16 x 2^14 ~ 2600, the largest of the prompt's 18 x 32
// values ~ 3.5 std ~ 9000 (in the cache, the prefill's rows and the attention output, a weighted
// mean of V rows); gate ~ 2.6 std and up ~ 10 std, silu(gate) x up at most a few hundred. Every
// logit finite and within the fp16 tolerance of the reference; the reference holds the same
// weights, so what is compared is fp16's relative precision at large magnitudes.
TEST_F(llm_cuda, fp16_compute_holds_large_activations) {
  const model_config c = preset("tiny");
  model_weights w = random_weights(c, dtype::fp16, 4096);
  for (auto& v : w.layers[0].v_proj) v *= 16384.0f;
  for (auto& v : w.layers[0].gate_proj) v *= 16.0f;
  for (auto& v : w.layers[0].up_proj) v *= 64.0f;
  const reference_model ref(w);
  constexpr std::int64_t batch = 2, prompt = 9, steps = 3;
  const std::vector<std::int32_t> ids = random_ids(c, batch * prompt, 41);
  engine_options opts;
  opts.batch = batch;
  opts.max_context = prompt + steps + 1;
  opts.max_prompt = prompt;
  opts = computing(opts, dtype::fp16);
  cuda_engine eng(*m_dev, w, opts);
  const auto first = eng.prefill(ids, prompt);
  std::vector<sequence> seqs;
  std::vector<float> want;
  for (std::int64_t b = 0; b < batch; ++b) {
    seqs.push_back(ref.new_sequence());
    const auto l = ref.prefill(seqs.back(), std::vector<std::int32_t>(ids.begin() + b * prompt,
                                                                      ids.begin() + (b + 1) * prompt));
    want.insert(want.end(), l.end() - c.vocab, l.end());
  }
  const auto finite = [](const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
  };
  EXPECT_TRUE(finite(first)) << "prefill logits";
  const double pe = normalised_error(first.data(), want.data(), want.size());
  std::printf("fp16 compute, large activations: prefill logits normalised error %.3g (tolerance %.3g)\n", pe,
              fp16_logits_tolerance);
  EXPECT_LT(pe, fp16_logits_tolerance);
  for (std::int64_t step = 0; step < steps; ++step) {
    const std::vector<std::int32_t> next = {static_cast<std::int32_t>(7 + step), static_cast<std::int32_t>(131 - step)};
    const auto got = eng.decode_step(next);
    std::vector<float> step_want;
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto l = ref.decode_step(seqs[static_cast<std::size_t>(b)], next[static_cast<std::size_t>(b)]);
      step_want.insert(step_want.end(), l.begin(), l.end());
    }
    EXPECT_TRUE(finite(got)) << "decode step " << step + 1;
    const double e = normalised_error(got.data(), step_want.data(), step_want.size());
    std::printf("fp16 compute, large activations: decode step %lld normalised error %.3g (tolerance %.3g)\n",
                static_cast<long long>(step + 1), e, fp16_logits_tolerance);
    EXPECT_LT(e, fp16_logits_tolerance) << "decode step " << step + 1;
  }
}

// Values past e4m3's range are stored as +-448, never NaN (__NV_SATFINITE): layer 0's V made ~8000
// times larger (a power of two: the bf16 weights stay exact) runs far past 448 in every row. The
// engine's logits stay finite and follow the reference, whose cache saturates the same way; the
// reference with an fp32 cache shows how far that is from unsaturated values.
TEST_F(llm_cuda, fp8_kv_cache_saturates_at_the_store) {
  const model_config c = preset("tiny");
  model_weights w = random_weights(c, dtype::bf16, 99);
  for (auto& v : w.layers[0].v_proj) v *= 8192.0f;
  const reference_model ref(w, dtype::fp8_e4m3), unsaturated(w);
  constexpr std::int64_t batch = 2, prompt = 9, steps = 3;  // prefill: 18 rows (the 8-wide store), decode: 2
  std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * prompt));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(1 + (i * 53 + 7) % (c.vocab - 1));
  engine_options opts;
  opts.batch = batch;
  opts.max_context = prompt + steps + 1;
  opts.max_prompt = prompt;
  opts.kv = dtype::fp8_e4m3;
  cuda_engine eng(*m_dev, w, opts);
  (void)eng.prefill(ids, prompt);
  std::vector<sequence> seqs, plain;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::vector<std::int32_t> p(ids.begin() + b * prompt, ids.begin() + (b + 1) * prompt);
    seqs.push_back(ref.new_sequence());
    plain.push_back(unsaturated.new_sequence());
    (void)ref.prefill(seqs.back(), p);
    (void)unsaturated.prefill(plain.back(), p);
  }
  for (std::int64_t step = 0; step < steps; ++step) {
    const std::vector<std::int32_t> next = {static_cast<std::int32_t>(11 + step), static_cast<std::int32_t>(200 - step)};
    const auto got = eng.decode_step(next);
    std::vector<float> want, far;
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto l = ref.decode_step(seqs[static_cast<std::size_t>(b)], next[static_cast<std::size_t>(b)]);
      const auto u = unsaturated.decode_step(plain[static_cast<std::size_t>(b)], next[static_cast<std::size_t>(b)]);
      want.insert(want.end(), l.begin(), l.end());
      far.insert(far.end(), u.begin(), u.end());
    }
    std::size_t non_finite = 0;
    for (const float v : got) non_finite += std::isfinite(v) ? 0 : 1;
    EXPECT_EQ(non_finite, 0u) << "decode step " << step + 1;
    const double e = normalised_error(got.data(), want.data(), want.size());
    const double saturation = normalised_error(want.data(), far.data(), far.size());
    std::printf("fp8 KV cache, V past 448: decode step %lld normalised error %.3g (tolerance %.3g); the saturated "
                "reference against an fp32 cache %.3g\n",
                static_cast<long long>(step + 1), e, fp8_kv_tolerance, saturation);
    EXPECT_LT(e, fp8_kv_tolerance) << "decode step " << step + 1;
    EXPECT_LT(e, saturation / 2) << "the engine follows the saturated cache, not unsaturated values";
  }
}

// A kernel's name as a stage: demangled, without its namespaces, template arguments and
// parameters (cuBLASLt's kernels keep their own names, cut to 48 characters).
std::string kernel_short_name(const std::string& raw) {
  int status = 0;
  char* d = abi::__cxa_demangle(raw.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && d ? d : raw;
  std::free(d);
  constexpr std::string_view anonymous = "(anonymous namespace)::";
  for (std::size_t at; (at = name.find(anonymous)) != std::string::npos;) name.erase(at, anonymous.size());
  std::string plain;
  int depth = 0;
  for (const char ch : name.substr(0, name.find('('))) {
    if (ch == '<') ++depth;
    else if (ch == '>') --depth;
    else if (depth == 0) plain += ch;
  }
  if (const auto at = plain.rfind("::"); at != std::string::npos) plain = plain.substr(at + 2);
  if (const auto at = plain.rfind(' '); at != std::string::npos) plain = plain.substr(at + 1);  // "void f"
  return plain.substr(0, 48);
}

// Where a CUDA graph step's time goes, from the kernels CUPTI recorded over `steps` replays (GPU
// timestamps): each kernel name's time a step, and the span less the kernels' time (a graph replays
// its kernels back to back, so the eager stage table's per-kernel costs do not all carry over:
// docs/perf/2026-12-01-mlp-chain.md; negative where kernels overlap, launched with PDL). Prints
// why not where CUPTI is not in use.
void print_graph_kernels(cuda_engine& eng, itera::backend& dev, int steps) {
  auto& cd = itera::cuda::as_cuda(dev);
  if (cd.timer_method() != "cupti_activity_span") {
    std::printf("graph step by kernel: not measured (timer %s)\n", cd.timer_method().c_str());
    return;
  }
  itera::cuda::cupti_timer t(cd.stream());
  t.keep_kernels(true);
  t.start();
  for (int i = 0; i < steps; ++i) eng.decode_graph();
  t.stop();
  const double span_ns = t.elapsed_ns();
  std::vector<itera::cuda::kernel_interval> ks = t.kernels();
  std::stable_sort(ks.begin(), ks.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  std::map<std::string, std::pair<double, std::int64_t>> by_name;  // ns, kernels
  double busy_ns = 0;
  for (const auto& k : ks) {
    auto& e = by_name[kernel_short_name(k.name)];
    e.first += static_cast<double>(k.end_ns - k.start_ns);
    ++e.second;
    busy_ns += static_cast<double>(k.end_ns - k.start_ns);
  }
  std::vector<std::pair<std::string, std::pair<double, std::int64_t>>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  const double n = steps;
  std::printf("graph step by kernel (%d replays, CUPTI): %.1f us a step, kernels %.1f us (%zu a step), between "
              "them %.1f us\n",
              steps, span_ns / 1e3 / n, busy_ns / 1e3 / n, ks.size() / static_cast<std::size_t>(steps),
              (span_ns - busy_ns) / 1e3 / n);
  std::printf("  %-48s %8s %12s\n", "kernel", "calls", "us/step");
  for (const auto& [name, v] : rows)
    std::printf("  %-48s %8.0f %12.2f\n", name.c_str(), static_cast<double>(v.second) / n, v.first / 1e3 / n);
  // In start order: the step's first 30 kernels (the head and the first layers) and its last 10,
  // each one's time and the gap before it, means over the replays (the first kernel's gap over the
  // replays after the first: the time between two replays).
  const std::size_t per_step = ks.size() / static_cast<std::size_t>(steps);
  if (per_step == 0 || ks.size() % static_cast<std::size_t>(steps) != 0) return;
  std::printf("  in order (%zu a step): position, kernel, us, gap before (us)\n", per_step);
  for (std::size_t i = 0; i < per_step; ++i) {
    if (i >= 30 && i + 10 < per_step) continue;
    double dur = 0, gap = 0;
    int gaps = 0;
    for (std::size_t s = 0; s < static_cast<std::size_t>(steps); ++s) {
      const std::size_t at = s * per_step + i;
      dur += static_cast<double>(ks[at].end_ns - ks[at].start_ns);
      if (at == 0) continue;
      gap += static_cast<double>(ks[at].start_ns) - static_cast<double>(ks[at - 1].end_ns);
      ++gaps;
    }
    std::printf("  %4zu %-48s %8.2f %8.2f\n", i, kernel_short_name(ks[i].name).c_str(), dur / 1e3 / n,
                gaps > 0 ? gap / 1e3 / gaps : 0.0);
  }
}

TEST_F(llm_cuda, decode_timing_llama_3_1_8b_shape) {
  // Not a gate: prints ms per step and the bandwidth achieved against docs/llm.md's decode bytes.
  // ITERA_LLM_TIMING_BATCH sets the batch (default 1), ITERA_LLM_TIMING_WEIGHTS and
  // ITERA_LLM_TIMING_KV the weights and the KV cache (bf16, fp16 or fp8_e4m3),
  // ITERA_LLM_TIMING_COMPUTE the compute type (bf16 or fp16; the cache follows it unless set).
  const model_config c = preset("llama-3.1-8b");
  constexpr std::int64_t context = 512, steps = 32, record_steps = 8;
  constexpr int graph_replays = 4;  // print_graph_kernels
  const char* batch_env = std::getenv("ITERA_LLM_TIMING_BATCH");
  const std::int64_t batch = batch_env ? std::max<std::int64_t>(1, std::atoll(batch_env)) : 1;
  const char* weights_env = std::getenv("ITERA_LLM_TIMING_WEIGHTS");  // bf16 (default), fp16 or fp8_e4m3
  const dtype weights = weights_env ? parse_dtype(weights_env) : dtype::bf16;
  const char* compute_env = std::getenv("ITERA_LLM_TIMING_COMPUTE");  // bf16 (default) or fp16
  const dtype compute = compute_env ? parse_dtype(compute_env) : dtype::bf16;
  const char* kv_env = std::getenv("ITERA_LLM_TIMING_KV");  // the compute type (default) or fp8_e4m3
  const dtype kv = kv_env ? parse_dtype(kv_env) : compute;
  engine_options opts;
  opts.compute = compute;
  opts.weights = weights;
  opts.kv = kv;
  opts.batch = batch;
  opts.max_context = context + 2 * steps + graph_replays + record_steps + 8;
  opts.max_prompt = context;
  const double needed = weight_bytes(c, weights) +
                        kv_bytes_per_token(c, kv) * static_cast<double>(opts.max_context * batch) +
                        4.0 * (1 << 30);
  const auto free_bytes = m_dev->memory().free_bytes;
  if (static_cast<double>(free_bytes) < needed)
    GTEST_SKIP() << "needs about " << needed / 1e9 << " GB, " << static_cast<double>(free_bytes) / 1e9 << " GB free";
  cuda_engine eng(*m_dev, c, 1, opts);
  const auto mem = eng.memory();
  std::printf("llama-3.1-8b engine memory: weights %.3f GB, kv cache %.3f GB, activations %.3f GB, workspace %.3f GB\n",
              static_cast<double>(mem.weights) / 1e9, static_cast<double>(mem.kv_cache) / 1e9,
              static_cast<double>(mem.activations) / 1e9, static_cast<double>(mem.workspace) / 1e9);
  const std::vector<std::int32_t> ids = random_ids(c, context * batch, 3);
  (void)eng.prefill(ids, context);
  eng.decode_device();  // warm: plans, first launches
  eng.synchronize();
  for (const bool graph : {false, true}) {
    const std::int64_t held = eng.length(0);
    const double ms = eng.time_decode_ms(static_cast<int>(steps), graph);
    const std::vector<std::int64_t> mid(static_cast<std::size_t>(batch), held + steps / 2);
    const auto work = decode_step_work(c, weights, kv, mid);
    const double gbps = work.bytes_moved() / (ms * 1e-3) / 1e9;
    std::printf("llama-3.1-8b %s decode, %s compute, %s KV cache, batch %lld, context ~%lld, %s: %.3f ms/step, "
                "%.1f tokens/s, %.0f GB/s (%.3g GB moved per step)\n",
                std::string(dtype_name(weights)).c_str(), std::string(dtype_name(compute)).c_str(),
                std::string(dtype_name(kv)).c_str(),
                static_cast<long long>(batch), static_cast<long long>(mid[0]), graph ? "CUDA graph" : "eager launches",
                ms, 1e3 * static_cast<double>(batch) / ms, gbps, work.bytes_moved() / 1e9);
    EXPECT_GT(ms, 0);
  }
  EXPECT_EQ(eng.read_ids().size(), static_cast<std::size_t>(batch));
  print_graph_kernels(eng, *m_dev, graph_replays);

  // Where a step's time goes: eager steps with every part in a recorder scope (device time from
  // the backend's clock). Per step: each stage's device time, the weight bytes it declares (for a
  // block, its parts' sum; attention: the cache it reads) and the bandwidth that makes.
  itera::stage_recorder rec(m_dev->clock(), &m_dev->memory_tracking());
  for (std::int64_t i = 0; i < record_steps; ++i) eng.decode_device(&rec);
  eng.synchronize();
  const auto stages = rec.finish();
  std::printf("decode step by stage (%lld eager steps, device time: %s)\n", static_cast<long long>(record_steps),
              stages.empty() ? "none" : stages.front().device_time_method.c_str());
  std::printf("  %-30s %6s %12s %12s %10s\n", "stage", "calls", "us/step", "MB/step", "GB/s");
  double total_us = 0;
  for (const auto& st : stages) {
    double bytes = 0;
    for (const auto& other : stages)
      if (other.path == st.path || other.path.rfind(st.path + "/", 0) == 0) bytes += other.bytes_read;
    const double us = st.device_ns < 0 ? -1 : st.device_ns / 1e3 / static_cast<double>(record_steps);
    const double mb = bytes / 1e6 / static_cast<double>(record_steps);
    if (st.depth == 0 && us > 0) total_us += us;
    std::printf("  %-30s %6llu %12.2f %12.3f %10.0f\n", (std::string(2 * static_cast<std::size_t>(st.depth), ' ') + st.path).c_str(),
                static_cast<unsigned long long>(st.calls / static_cast<std::uint64_t>(record_steps)), us, mb,
                us > 0 ? mb * 1e6 / (us * 1e3) : 0.0);
  }
  std::printf("  %-30s %6s %12.2f\n", "sum of top-level stages", "", total_us);
  std::printf("%s", itera::kernels::llm::decode_step_trace().c_str());  // ITERA_LLM_DECODE_STEP_TRACE=1
}

TEST_F(llm_cuda, prefill_timing_llama_3_1_8b_shape) {
  // Not a gate: where a prefill's time goes at the llama-3.1-8b shape, batch 1 (issue 3's target:
  // 2048 tokens at 80% of the bf16 GEMM ceiling). ITERA_LLM_PREFILL_TOKENS sets the prompt (default
  // 2048), ITERA_LLM_TIMING_WEIGHTS the weights, ITERA_LLM_TIMING_COMPUTE the compute type (and the
  // cache with it). Prints each stage's device time per pass and, for the products and the
  // attention, the FLOP/s it reaches.
  const model_config c = preset("llama-3.1-8b");
  const char* tokens_env = std::getenv("ITERA_LLM_PREFILL_TOKENS");
  const std::int64_t prompt = tokens_env ? std::max<std::int64_t>(2, std::atoll(tokens_env)) : 2048;
  const char* weights_env = std::getenv("ITERA_LLM_TIMING_WEIGHTS");
  const dtype weights = weights_env ? parse_dtype(weights_env) : dtype::bf16;
  const char* compute_env = std::getenv("ITERA_LLM_TIMING_COMPUTE");
  const dtype compute = compute_env ? parse_dtype(compute_env) : dtype::bf16;
  constexpr int passes = 3;
  engine_options opts;
  opts.compute = compute;
  opts.kv = compute;
  opts.weights = weights;
  opts.max_context = prompt + 8;
  opts.max_prompt = prompt;
  const double needed = weight_bytes(c, weights) + 8.0 * (1 << 30);
  if (static_cast<double>(m_dev->memory().free_bytes) < needed) GTEST_SKIP() << "needs about " << needed / 1e9 << " GB";
  cuda_engine eng(*m_dev, c, 1, opts);
  const std::vector<std::int32_t> ids = random_ids(c, prompt, 5);
  (void)eng.prefill(ids, prompt);  // warm: plans, first launches

  double best_ms = 1e30;
  for (int i = 0; i < passes; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)eng.prefill(ids, prompt);
    const auto t1 = std::chrono::steady_clock::now();
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }

  itera::stage_recorder rec(m_dev->clock(), &m_dev->memory_tracking());
  for (int i = 0; i < passes; ++i) {
    auto whole = rec.enter("pass");  // first kernel to last: the gaps between the stages' kernels too
    (void)eng.prefill(ids, prompt, false, &rec);
  }
  const auto stages = rec.finish();
  const double t = static_cast<double>(prompt), hidden = static_cast<double>(c.hidden);
  const double layers = static_cast<double>(c.layers);
  const double qkv_width = static_cast<double>(c.q_dim() + 2 * c.kv_dim());
  auto flops_of = [&](const std::string& path) -> double {
    const auto leaf = path.substr(path.rfind('/') + 1);
    if (leaf == "qkv") return 2 * t * qkv_width * hidden * layers;
    if (leaf == "o_proj") return 2 * t * hidden * static_cast<double>(c.q_dim()) * layers;
    if (leaf == "gate_up") return 2 * t * 2 * static_cast<double>(c.intermediate) * hidden * layers;
    if (leaf == "down") return 2 * t * hidden * static_cast<double>(c.intermediate) * layers;
    if (leaf == "attention")  // causal: query i sees i + 1 keys; QK^T and PV
      return 4.0 * static_cast<double>(c.heads * c.head_dim) * t * (t + 1) / 2 * layers;
    if (leaf == "lm_head") return 2 * hidden * static_cast<double>(c.vocab);
    return 0;
  };
  std::printf("llama-3.1-8b %s prefill of %lld tokens, %s compute: %.2f ms per call (host clock, best of %d, ids "
              "staged and logits read back included)\n",
              std::string(dtype_name(weights)).c_str(), static_cast<long long>(prompt),
              std::string(dtype_name(compute)).c_str(), best_ms, passes);
  std::printf("prefill by stage (%d passes, device time: %s)\n", passes,
              stages.empty() ? "none" : stages.front().device_time_method.c_str());
  std::printf("  %-30s %6s %12s %10s\n", "stage", "calls", "ms/pass", "TFLOP/s");
  double total_ms = 0, flops = 0, pass_ms = 0, leaves_ms = 0;
  for (const auto& st : stages) {
    const double ms = st.device_ns < 0 ? -1 : st.device_ns / 1e6 / passes;
    const double f = flops_of(st.path);
    if (st.depth == 1 && ms > 0) total_ms += ms;
    if (st.depth == 0) pass_ms = ms;
    const bool leaf = std::none_of(stages.begin(), stages.end(),
                                   [&](const auto& o) { return o.path.rfind(st.path + "/", 0) == 0; });
    if (leaf && ms > 0) leaves_ms += ms;
    std::printf("  %-30s %6llu %12.3f %10.1f\n",
                (std::string(2 * static_cast<std::size_t>(st.depth), ' ') + st.path).c_str(),
                static_cast<unsigned long long>(st.calls / passes), ms, f > 0 && ms > 0 ? f / (ms * 1e-3) / 1e12 : 0.0);
    flops += f;
  }
  std::printf("  %-30s %6s %12.3f %10.1f\n", "sum of the pass's stages", "", total_ms,
              total_ms > 0 ? flops / (total_ms * 1e-3) / 1e12 : 0.0);
  std::printf("  %-30s %6s %12.3f %10.1f  (the innermost stages' spans add to %.3f ms)\n", "whole pass", "", pass_ms,
              pass_ms > 0 ? flops / (pass_ms * 1e-3) / 1e12 : 0.0, leaves_ms);
  EXPECT_GT(total_ms, 0);
}

#endif

}  // namespace
