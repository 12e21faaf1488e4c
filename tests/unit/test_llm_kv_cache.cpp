// An fp8 e4m3 KV cache on the cpu reference (issue 3, R6): values rounded to e4m3 at the store
// (nearest even, saturating at +-448, one scale per tensor fixed at 1), a prefill into an empty
// sequence attending over its own unrounded K and V, decode steps reading the rounded cache; the
// bytes the model, the memory plan and the workload count for it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "itera/core/errors.hpp"
#include "workloads/llm/cpu_engine.hpp"
#include "workloads/llm/llm_cpu.hpp"
#include "workloads/llm/memory_plan.hpp"
#include "workloads/llm/model.hpp"
#include "workloads/llm/scenarios.hpp"
#include "tests/support/numeric_error.hpp"

namespace itera::llm {
namespace {

using test::normalised_error;  // ||a - b||_2 / ||b||_2, the sizes checked

std::vector<std::int32_t> some_tokens(std::size_t n, std::uint32_t salt) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::int32_t>((i * 89 + salt * 37 + 3) % 255 + 1);
  return t;
}

// Every value a cache holds, all layers, K and V.
std::vector<float> cache_values(const sequence& s) {
  std::vector<float> all;
  for (const auto* part : {&s.keys, &s.values})
    for (const auto& layer : *part) all.insert(all.end(), layer.begin(), layer.end());
  return all;
}

TEST(LlmKvCache, E4m3RoundsToNearestEvenAndSaturates) {
  const auto fp8 = [](float v) { return kv_cache_value(dtype::fp8_e4m3, v); };
  EXPECT_EQ(fp8(1.0f), 1.0f);
  EXPECT_EQ(fp8(0.3f), 0.3125f);      // between 0.28125 and 0.3125, nearer the second
  EXPECT_EQ(fp8(1.0625f), 1.0f);      // the tie between 1 and 1.125 goes to the even mantissa
  EXPECT_EQ(fp8(1.1875f), 1.25f);     // and between 1.125 and 1.25 to 1.25
  EXPECT_EQ(fp8(-2.6f), -2.5f);
  EXPECT_EQ(fp8(std::ldexp(3.0f, -10)), std::ldexp(1.0f, -8));  // subnormal tie: 1.5 x 2^-9 to 2 x 2^-9
  EXPECT_EQ(fp8(std::ldexp(1.0f, -11)), 0.0f);                   // below half the smallest subnormal
  // Saturation: the largest finite value, never NaN or infinity.
  EXPECT_EQ(fp8(448.0f), 448.0f);
  EXPECT_EQ(fp8(460.0f), 448.0f);
  EXPECT_EQ(fp8(1e6f), 448.0f);
  EXPECT_EQ(fp8(-1e30f), -448.0f);
  EXPECT_EQ(fp8(std::numeric_limits<float>::infinity()), 448.0f);
  // fp32 keeps the value; a cache type the reference does not hold is refused, naming the choices.
  EXPECT_EQ(kv_cache_value(dtype::fp32, 0.3f), 0.3f);
  try {
    (void)kv_cache_value(dtype::bf16, 1.0f);
    ADD_FAILURE() << "bf16 is held in fp32 by the cpu engine, not by the reference";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("fp32 or rounds it to fp8_e4m3"), std::string::npos) << e.what();
  }
  const auto w = random_weights(preset("tiny"), dtype::bf16, 1);
  EXPECT_THROW(reference_model(w, dtype::fp16), usage_error);
}

// A prefill into empty sequences attends over its own K and V as computed: its logits are the fp32
// cache's exactly, and the cache holds the fp32 cache's values rounded to e4m3, every one of them.
// Decode steps then read the rounded cache: logits close to the fp32 cache's, not equal.
TEST(LlmKvCache, PrefillReadsItsOwnRowsDecodeReadsTheRoundedCache) {
  const auto w = random_weights(preset("tiny"), dtype::bf16, 2024);
  const reference_model exact(w), fp8(w, dtype::fp8_e4m3);
  EXPECT_EQ(fp8.kv(), dtype::fp8_e4m3);
  const auto tokens = some_tokens(20, 3);
  auto a = exact.new_sequence(), b = fp8.new_sequence();
  const auto la = exact.prefill(a, tokens), lb = fp8.prefill(b, tokens);
  EXPECT_EQ(la, lb) << "a prefill attends over its own rows: the cache precision does not enter";
  const auto va = cache_values(a), vb = cache_values(b);
  ASSERT_EQ(va.size(), vb.size());
  std::size_t changed = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    ASSERT_EQ(vb[i], kv_cache_value(dtype::fp8_e4m3, va[i])) << "value " << i;
    changed += vb[i] != va[i];
  }
  EXPECT_GT(changed, va.size() / 2) << "most fp32 values are not e4m3 values";

  double worst = 0;
  int same_top1 = 0;
  const auto next = some_tokens(6, 9);
  for (const auto t : next) {
    const auto da = exact.decode_step(a, t), db = fp8.decode_step(b, t);
    const double e = normalised_error(db, da);
    worst = std::max(worst, e);
    EXPECT_GT(e, 0.0) << "decode steps read the rounded cache";
    same_top1 += argmax(da) == argmax(db);
  }
  // e4m3 keeps 3 mantissa bits: each cached value within 2^-4 (6.25%) relative, about 2% rms;
  // attention averages over the keys and the residual stream carries the rest, so the logits move
  // by about a percent (measured 0.9% here, 0.4-1.5% on other tiny shapes). A cache stored or read
  // wrong gives errors of order 1. Random weights give flat logits: a near tie may flip.
  std::printf("fp8 KV cache, tiny: decode logits against the fp32 cache: worst normalised error %.3g, top-1 %d of %zu\n",
              worst, same_top1, next.size());
  EXPECT_LT(worst, 0.05);
  EXPECT_GE(same_top1, 4);
}

// A pass after held tokens (a chunked prefill) reads the cache, its own new rows rounded too: with
// an fp8 cache it is not the one-pass prefill (with the fp32 cache it is, within sgemm's sums).
TEST(LlmKvCache, APassAfterHeldTokensReadsTheCache) {
  const auto w = random_weights(preset("tiny"), dtype::bf16, 5);
  const auto tokens = some_tokens(12, 4);
  for (const dtype kv : {dtype::fp32, dtype::fp8_e4m3}) {
    const reference_model m(w, kv);
    auto whole = m.new_sequence(), chunked = m.new_sequence();
    const auto all = m.prefill(whole, tokens);
    (void)m.prefill(chunked, std::span(tokens).first(6));
    const auto rest = m.prefill(chunked, std::span(tokens).subspan(6));
    const auto vocab = static_cast<std::size_t>(m.config().vocab);
    const double e = normalised_error(rest, std::span(all).subspan(6 * vocab));
    if (kv == dtype::fp32)
      EXPECT_LT(e, 1e-5);
    else
      EXPECT_GT(e, 1e-4) << "the second chunk reads rounded keys and values";
  }
}

// Keys far above e4m3's range are stored as +-448, never NaN: the cache and the logits stay finite.
TEST(LlmKvCache, LargeValuesSaturateAtTheStore) {
  auto w = random_weights(preset("tiny"), dtype::bf16, 7);
  for (auto& v : w.layers[0].k_proj) v *= 1e4f;  // |k| ~ 1e3
  for (auto& v : w.layers[0].v_proj) v *= 1e4f;
  const reference_model m(w, dtype::fp8_e4m3);
  auto s = m.new_sequence();
  (void)m.prefill(s, some_tokens(10, 1));
  const auto logits = m.decode_step(s, 17);
  const auto values = cache_values(s);
  float largest = 0;
  for (const float v : values) {
    ASSERT_TRUE(std::isfinite(v));
    largest = std::max(largest, std::fabs(v));
  }
  EXPECT_EQ(largest, 448.0f) << "layer 0's K and V run past 448 and are clamped there";
  for (const float l : logits) ASSERT_TRUE(std::isfinite(l));
}

TEST(LlmKvCache, CpuEngineSaysWhatRan) {
  cpu_engine_options o;
  o.slots = 1;
  o.max_context = 16;
  o.kv = dtype::fp8_e4m3;
  const cpu_engine fp8(random_weights(preset("tiny"), dtype::bf16, 1), o);
  EXPECT_NE(fp8.precision_note().find("KV cache fp8 e4m3 (scale 1, saturating), K and V rounded at the cache store"),
            std::string::npos)
      << fp8.precision_note();
  o.kv = dtype::bf16;
  const cpu_engine bf16(random_weights(preset("tiny"), dtype::bf16, 1), o);
  EXPECT_EQ(bf16.precision_note().find("fp8"), std::string::npos) << bf16.precision_note();
  // An fp16 cache (the fp16 compute type's) is held in fp32 as a bf16 one is: the same note.
  o.kv = dtype::fp16;
  const cpu_engine fp16(random_weights(preset("tiny"), dtype::bf16, 1), o);
  EXPECT_EQ(fp16.precision_note(), bf16.precision_note());
}

// One byte per element: the bytes per token, a decode step's cache traffic and the memory plan's
// cache halve; a prefill still reads its own K and V at bf16.
TEST(LlmKvCache, BytesHalveWhereTheCacheIsRead) {
  const auto c = preset("llama-3.1-8b");
  EXPECT_EQ(kv_bytes_per_token(c, dtype::fp8_e4m3), kv_bytes_per_token(c, dtype::bf16) / 2);
  const std::vector<std::int64_t> context = {100, 300};
  const auto d16 = decode_step_work(c, dtype::bf16, dtype::bf16, context);
  const auto d8 = decode_step_work(c, dtype::bf16, dtype::fp8_e4m3, context);
  EXPECT_EQ(d8.kv_bytes_read, d16.kv_bytes_read / 2);
  EXPECT_EQ(d8.kv_bytes_written, d16.kv_bytes_written / 2);
  EXPECT_EQ(d8.weight_bytes_read, d16.weight_bytes_read);
  EXPECT_EQ(d8.flops, d16.flops);
  const auto p16 = prefill_work(c, dtype::bf16, dtype::bf16, context);
  const auto p8 = prefill_work(c, dtype::bf16, dtype::fp8_e4m3, context);
  EXPECT_EQ(p8.kv_bytes_written, p16.kv_bytes_written / 2);
  EXPECT_EQ(p8.kv_bytes_read, p16.kv_bytes_read) << "the prefill's attention reads its own bf16 rows";

  llm_case lc;
  lc.config = preset("tiny");
  lc.batch = 4;
  lc.prompt = 32;
  lc.output = 16;
  lc.context = 48;
  const auto bf16_plan = plan_memory(memory_needs(lc, 1 << 20, held_as::case_precision));
  lc.kv = dtype::fp8_e4m3;
  const auto need = memory_needs(lc, 1 << 20, held_as::case_precision);
  EXPECT_EQ(need.kv, dtype::fp8_e4m3);
  const auto fp8_plan = plan_memory(need);
  EXPECT_EQ(fp8_plan.bytes_of("kv cache"), bf16_plan.bytes_of("kv cache") / 2);
  EXPECT_EQ(fp8_plan.bytes_of("kv cache"), 4u * 48 * 2 * 2 * 32);  // batch x context x (K, V) x layers x kv_dim
  EXPECT_EQ(fp8_plan.bytes_of("activations"), bf16_plan.bytes_of("activations"));
  // The cpu engine holds the cache widened to fp32 whatever it rounds to: its plan says so.
  EXPECT_EQ(memory_needs(lc, 0, held_as::fp32).kv, dtype::fp32);
}

}  // namespace
}  // namespace itera::llm
