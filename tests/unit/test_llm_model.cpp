// The llm model definition: published preset shapes and their parameter counts, the bytes and
// FLOPs of a decode step (DESIGN.md: 16.06 GB of bf16 weights, about 15.0 GB read per step at
// batch 1), validation errors and shape overrides from axes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "itera/core/errors.hpp"
#include "workloads/llm/model.hpp"

namespace itera::llm {
namespace {

template <class F>
std::string usage_message(F&& f) {
  try {
    f();
  } catch (const usage_error& e) {
    return e.what();
  }
  return "(no usage_error)";
}

TEST(LlmModel, PresetShapesAreThePublishedOnes) {
  const auto l8 = preset("llama-3.1-8b");
  EXPECT_EQ(l8.layers, 32);
  EXPECT_EQ(l8.hidden, 4096);
  EXPECT_EQ(l8.heads, 32);
  EXPECT_EQ(l8.kv_heads, 8);
  EXPECT_EQ(l8.head_dim, 128);
  EXPECT_EQ(l8.intermediate, 14336);
  EXPECT_EQ(l8.vocab, 128256);
  EXPECT_EQ(l8.rope_theta, 500000.0);
  EXPECT_EQ(l8.max_position, 131072);
  EXPECT_FALSE(l8.tie_embeddings);
  ASSERT_TRUE(l8.rope_scaling.has_value());
  EXPECT_EQ(l8.rope_scaling->factor, 8.0);
  EXPECT_EQ(l8.rope_scaling->original_max_position, 8192);

  const auto l1 = preset("llama-3.2-1b");
  EXPECT_TRUE(l1.tie_embeddings);
  EXPECT_EQ(l1.head_dim, 64);
  EXPECT_EQ(l1.rope_scaling->factor, 32.0);

  const auto q = preset("qwen2.5-7b");
  EXPECT_TRUE(q.attention_bias);
  EXPECT_EQ(q.kv_heads, 4);
  EXPECT_EQ(q.vocab, 152064);
  EXPECT_EQ(q.rms_norm_eps, 1e-6);
  EXPECT_FALSE(q.rope_scaling.has_value());

  const auto m = preset("mistral-7b");
  EXPECT_EQ(m.vocab, 32768);  // v0.3
  EXPECT_EQ(m.rope_theta, 1e6);

  const auto t = preset("tiny");
  EXPECT_EQ(t.layers, 2);
  EXPECT_EQ(t.hidden, 64);
  EXPECT_EQ(t.heads, 4);
  EXPECT_EQ(t.kv_heads, 2);
  EXPECT_EQ(t.intermediate, 128);
  EXPECT_EQ(t.vocab, 256);
  EXPECT_EQ(t.max_position, 512);

  for (const auto& name : preset_names()) EXPECT_NO_THROW(validate(preset(name))) << name;
  EXPECT_NE(usage_message([] { preset("llama-9"); }).find("llama-3.1-8b"), std::string::npos);
}

TEST(LlmModel, ParameterCountsMatchThePublishedSizes) {
  EXPECT_EQ(count_params(preset("llama-3.1-8b")).total(), 8'030'261'248);
  EXPECT_EQ(count_params(preset("llama-3.2-1b")).total(), 1'235'814'400);  // tied: the table counted once
  const auto q = count_params(preset("qwen2.5-7b"));
  EXPECT_EQ(q.total(), 7'615'616'512);
  EXPECT_EQ(q.total() - q.embedding - q.lm_head, 6'525'621'760);  // Qwen's "6.53B non-embedding"
  EXPECT_EQ(count_params(preset("mistral-7b")).total(), 7'248'023'552);
}

TEST(LlmModel, WeightBytesPerPrecision) {
  const auto c = preset("llama-3.1-8b");
  EXPECT_EQ(weight_bytes(c, dtype::bf16), 16'060'522'496.0);  // DESIGN.md: 16.06 GB
  EXPECT_EQ(weight_bytes(c, dtype::fp16), 16'060'522'496.0);
  EXPECT_EQ(weight_bytes(c, dtype::fp32), 32'121'044'992.0);
  // fp8: 6,979,321,856 projection bytes + 1,376,256 fp32 channel scales + the rest in bf16.
  EXPECT_EQ(weight_bytes(c, dtype::fp8_e4m3), 6'979'321'856.0 + 1'376'256.0 * 4 + 1'050'939'392.0 * 2);
  // lm_head=fp8_e4m3: the LM head's 525,336,576 weights move from bf16 to codes, with 128,256 more
  // scales; a 16-bit model ignores the flag.
  auto head = c;
  head.fp8_lm_head = true;
  EXPECT_EQ(weight_bytes(head, dtype::fp8_e4m3), (6'979'321'856.0 + 525'336'576.0) + (1'376'256.0 + 128'256.0) * 4 +
                                                     (1'050'939'392.0 - 525'336'576.0) * 2);
  EXPECT_EQ(weight_bytes(head, dtype::bf16), 16'060'522'496.0);
  const std::vector<std::int64_t> context = {0};
  EXPECT_EQ(decode_step_work(c, dtype::fp8_e4m3, dtype::bf16, context).weight_bytes_read -
                decode_step_work(head, dtype::fp8_e4m3, dtype::bf16, context).weight_bytes_read,
            525'336'576.0 - 128'256.0 * 4)
      << "a decode step reads the LM head's codes and scales instead of its bf16 values";
  EXPECT_EQ(kv_bytes_per_token(c, dtype::bf16), 131072.0);  // 2 x 32 layers x 8 x 128 x 2 bytes
  EXPECT_EQ(kv_bytes_per_token(c, dtype::fp8_e4m3), 65536.0);
}

// A tied table is the embedding lookup's as well as the LM head: quantising it is refused.
TEST(LlmModel, Fp8LmHeadNeedsAnUntiedTable) {
  auto c = preset("llama-3.2-1b");
  ASSERT_TRUE(c.tie_embeddings);
  c.fp8_lm_head = true;
  EXPECT_EQ(usage_message([&] { validate(c); }),
            "model llama-3.2-1b: its LM head is the embedding table (tied); an fp8 LM head would quantise the table "
            "the embedding lookup reads: choose lm_head=16bit for this model");
  auto untied = preset("llama-3.1-8b");
  untied.fp8_lm_head = true;
  EXPECT_NO_THROW(validate(untied));
}

TEST(LlmModel, DecodeStepReadsAllWeightsButTheEmbeddingTable) {
  const auto c = preset("llama-3.1-8b");
  const std::vector<std::int64_t> empty_context = {0};
  const auto w = decode_step_work(c, dtype::bf16, dtype::bf16, empty_context);
  EXPECT_EQ(w.weight_bytes_read, 16'060'522'496.0 - 1'050'673'152.0 + 8192.0);
  EXPECT_NEAR(w.weight_bytes_read / 1e9, 15.0, 0.02);  // DESIGN.md: about 15.0 GB
  EXPECT_EQ(w.kv_bytes_read, 131072.0);                 // the new token's own K and V
  EXPECT_EQ(w.kv_bytes_written, 131072.0);
  // 2 x (projections + LM head) + attention over one key.
  EXPECT_EQ(w.flops, 2.0 * (6'979'321'856.0 + 525'336'576.0) + 4.0 * 32 * 32 * 128);
  EXPECT_GE(4.23e12 / w.bytes_read(), 280.0);  // DESIGN.md: at most ~3.55 ms per token on the H200
  EXPECT_LT(4.23e12 / w.bytes_read(), 285.0);

  // A batch reads the weights once, one embedding row and its own cache per sequence.
  const std::vector<std::int64_t> context = {10, 20};
  const auto b = decode_step_work(c, dtype::bf16, dtype::bf16, context);
  EXPECT_EQ(b.weight_bytes_read, w.weight_bytes_read + 8192.0);
  EXPECT_EQ(b.kv_bytes_read, (11 + 21) * 131072.0);
  EXPECT_EQ(b.kv_bytes_written, 2 * 131072.0);
  EXPECT_EQ(b.tokens, 2);

  // Tied: the table is the LM head, read whole.
  const auto t = preset("llama-3.2-1b");
  const auto tw = decode_step_work(t, dtype::bf16, dtype::bf16, empty_context);
  EXPECT_EQ(tw.weight_bytes_read, weight_bytes(t, dtype::bf16) + 2.0 * 2048);

  const std::vector<std::int64_t> too_long = {c.max_position};
  EXPECT_THROW(decode_step_work(c, dtype::bf16, dtype::bf16, too_long), usage_error);
}

TEST(LlmModel, PrefillWorkCountsCausalPairsAndOneLogitsRow) {
  const auto c = preset("tiny");
  const std::vector<std::int64_t> prompts = {5, 3};
  const auto w = prefill_work(c, dtype::bf16, dtype::bf16, prompts);
  const double projections = 2.0 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128);  // per layer
  const double head = 256.0 * 64;
  const double attention_pairs = 5 * 6 / 2 + 3 * 4 / 2;
  EXPECT_EQ(w.tokens, 8);
  EXPECT_EQ(w.flops, 2.0 * projections * 8 + 2.0 * head * 2 + 4.0 * 2 * 4 * 16 * attention_pairs);
  EXPECT_EQ(w.kv_bytes_written, 8 * kv_bytes_per_token(c, dtype::bf16));
  EXPECT_EQ(w.weight_bytes_read, weight_bytes(c, dtype::bf16) - 256.0 * 64 * 2 + 8 * 64 * 2.0);
}

TEST(LlmModel, ValidationNamesTheBrokenConstraint) {
  const auto tiny = preset("tiny");
  EXPECT_NE(usage_message([&] { apply_shape_axes(tiny, {{"hidden", "66"}}); }).find("hidden 66 is not divisible by heads 4"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { apply_shape_axes(tiny, {{"kv_heads", "3"}}); }).find("heads 4 is not divisible by kv_heads 3"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { apply_shape_axes(tiny, {{"head_dim", "15"}}); }).find("head_dim 15 must be even"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { apply_shape_axes(tiny, {{"layers", "0"}}); }).find("layers must be at least 1, got 0"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { apply_shape_axes(tiny, {{"vocab", "many"}}); }).find("vocab='many' is not a whole number"),
            std::string::npos);
  auto bad = tiny;
  bad.rope_scaling = rope_scaling_llama3{8.0, 4.0, 1.0, 8192};
  EXPECT_NE(usage_message([&] { validate(bad); }).find("low_freq_factor < high_freq_factor"), std::string::npos);
  bad = tiny;
  bad.rope_theta = 0;
  EXPECT_NE(usage_message([&] { validate(bad); }).find("rope_theta"), std::string::npos);
}

TEST(LlmModel, ShapeAxesOverrideThePreset) {
  const auto base = preset("llama-3.1-8b");
  const auto c = apply_shape_axes(base, {{"batch", "8"}, {"layers", "4"}, {"hidden", "2048"}, {"vocab", "preset"}});
  EXPECT_EQ(c.layers, 4);
  EXPECT_EQ(c.hidden, 2048);
  EXPECT_EQ(c.head_dim, 64) << "head_dim follows hidden / heads when not given";
  EXPECT_EQ(c.vocab, base.vocab);
  EXPECT_EQ(c.kv_heads, base.kv_heads);
  EXPECT_NE(c.name.find("llama-3.1-8b"), std::string::npos);

  const auto explicit_dim = apply_shape_axes(base, {{"hidden", "2048"}, {"head_dim", "128"}, {"heads", "16"}});
  EXPECT_EQ(explicit_dim.head_dim, 128);
  EXPECT_EQ(apply_shape_axes(base, {{"batch", "8"}}).name, base.name) << "no shape change, the preset's name";
}

TEST(LlmModel, DtypeNames) {
  EXPECT_EQ(parse_dtype("bf16"), dtype::bf16);
  EXPECT_EQ(parse_dtype("fp8_e4m3"), dtype::fp8_e4m3);
  EXPECT_EQ(dtype_name(dtype::fp16), "fp16");
  EXPECT_NE(usage_message([] { parse_dtype("int4"); }).find("bf16"), std::string::npos);
}

}  // namespace
}  // namespace itera::llm
