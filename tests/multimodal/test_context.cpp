// Context preparation (workloads/multimodal/context.hpp) and the language model's input rows
// (llm::engine::stage_embeddings) on the cpu engine, the oracle the cuda engine is checked against
// (tests/device/test_llm_device.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "itera/core/errors.hpp"
#include "workloads/gemm/numeric.hpp"
#include "workloads/llm/cpu_engine.hpp"
#include "workloads/llm/weights.hpp"
#include "workloads/multimodal/context.hpp"

namespace itera::mm {
namespace {

template <typename E, typename F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Context, ImageBlocksSitAfterThePrefixInRequestOrder) {
  const context_shape shape{.prompt_tokens = 10, .images = 2, .tokens_per_image = 4, .prefix = 3};
  const auto c = prepare_context(shape, 3, 1000, 7, 4096);
  ASSERT_EQ(c.length(), 18);
  ASSERT_EQ(c.ids.size(), 3u * 18u);
  ASSERT_EQ(c.image_rows.size(), 3u * 8u);
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t r = 0; r < 18; ++r) {
      const bool image = r >= 3 && r < 11;
      const std::int32_t id = c.ids[static_cast<std::size_t>(i * 18 + r)];
      if (image) {
        EXPECT_EQ(id, image_placeholder_id);
      } else {
        EXPECT_GE(id, 1);
        EXPECT_LT(id, 1000);
      }
    }
  // Rows: prompt by prompt, image by image, strictly increasing.
  EXPECT_EQ(c.image_rows.front(), 3);
  EXPECT_EQ(c.image_rows[8], 18 + 3);
  EXPECT_TRUE(std::is_sorted(c.image_rows.begin(), c.image_rows.end()));
  EXPECT_EQ(std::adjacent_find(c.image_rows.begin(), c.image_rows.end()), c.image_rows.end());
  // Deterministic, and prompts differ from each other.
  EXPECT_EQ(prepare_context(shape, 3, 1000, 7, 4096).ids, c.ids);
  EXPECT_NE(std::vector<std::int32_t>(c.ids.begin(), c.ids.begin() + 3),
            std::vector<std::int32_t>(c.ids.begin() + 18, c.ids.begin() + 21));
}

TEST(Context, PrefixLongerThanThePromptPutsTheImagesLast) {
  const auto c = prepare_context({.prompt_tokens = 2, .images = 1, .tokens_per_image = 3, .prefix = 50}, 1, 10, 1, 64);
  EXPECT_EQ(c.image_rows, (std::vector<std::int64_t>{2, 3, 4}));
}

TEST(Context, BadShapesNameTheFieldAndTheFix) {
  expect_error<usage_error>([] { prepare_context({.prompt_tokens = 0, .images = 1, .tokens_per_image = 1}, 1, 10, 1, 64); },
                            "prompt_tokens is 0");
  expect_error<usage_error>([] { prepare_context({.prompt_tokens = 1, .images = 0, .tokens_per_image = 1}, 1, 10, 1, 64); },
                            "images per request is 0");
  expect_error<usage_error>([] { prepare_context({.prompt_tokens = 1, .images = 1, .tokens_per_image = 1}, 1, 1, 1, 64); },
                            "vocabulary of 1 ids");
  expect_error<usage_error>(
      [] { prepare_context({.prompt_tokens = 100, .images = 2, .tokens_per_image = 576}, 1, 10, 1, 1024); },
      "100 text tokens + 2 images x 576 tokens = 1252 tokens, longer than the language model's context of 1024");
}

// The cpu engine with input rows: a row given its own token's embedding runs exactly as the token
// (the embedding table holds bf16 values, so the bf16 input is the same vector); other vectors
// change what the model generates.
class ContextEngine : public ::testing::Test {
 protected:
  ContextEngine() : m_weights(llm::random_weights(llm::preset("tiny"), llm::dtype::bf16, 3)) {}
  llm::cpu_engine make() {
    llm::cpu_engine_options o;
    o.slots = 2;
    o.max_context = 64;
    return llm::cpu_engine(m_weights, o);
  }
  std::vector<std::uint16_t> row_of(std::int32_t token) const {
    const auto hidden = m_weights.config.hidden;
    std::vector<std::uint16_t> out(static_cast<std::size_t>(hidden));
    for (std::int64_t j = 0; j < hidden; ++j)
      out[static_cast<std::size_t>(j)] =
          gemm::numeric::float_to_bf16(m_weights.embedding[static_cast<std::size_t>(token * hidden + j)]);
    return out;
  }
  std::vector<std::vector<std::int32_t>> generate(llm::cpu_engine& e, const prepared_context& c,
                                                  const llm::embedding_rows* rows, int steps) {
    e.stage_prompts(c.ids);
    if (rows) e.stage_embeddings(*rows);
    e.prefill_staged(0, c.count, c.length());
    e.record_ids(c.count);
    for (int i = 0; i < steps; ++i) {
      e.decode(c.count);
      e.record_ids(c.count);
    }
    return e.take_recorded();
  }
  llm::model_weights m_weights;
};

TEST_F(ContextEngine, AnInputRowEqualToItsTokensEmbeddingChangesNothing) {
  auto c = prepare_context({.prompt_tokens = 6, .images = 1, .tokens_per_image = 3, .prefix = 2}, 2, m_weights.config.vocab, 5, 64);
  // Give the image rows real token ids, and the same tokens' embeddings as their input vectors.
  std::vector<std::uint16_t> values;
  for (const auto row : c.image_rows) {
    c.ids[static_cast<std::size_t>(row)] = static_cast<std::int32_t>(10 + row);
    const auto v = row_of(static_cast<std::int32_t>(10 + row));
    values.insert(values.end(), v.begin(), v.end());
  }
  auto plain = make(), given = make();
  const auto a = generate(plain, c, nullptr, 4);
  const llm::embedding_rows rows{c.image_rows, values.data(), false};
  const auto b = generate(given, c, &rows, 4);
  EXPECT_EQ(a, b);

  // Other vectors (scaled up: a real image token is far from any text embedding) change the output.
  for (auto& v : values) v = gemm::numeric::float_to_bf16(gemm::numeric::bf16_to_float(v) * -40.0f);
  auto other = make();
  const llm::embedding_rows changed{c.image_rows, values.data(), false};
  EXPECT_NE(generate(other, c, &changed, 4), a);
}

TEST_F(ContextEngine, InputRowsAreForOnePrefillAndChecked) {
  const auto c = prepare_context({.prompt_tokens = 4, .images = 1, .tokens_per_image = 2}, 1, m_weights.config.vocab, 1, 64);
  auto e = make();
  e.stage_prompts(c.ids);
  std::vector<std::uint16_t> values(static_cast<std::size_t>(2 * m_weights.config.hidden), 0x3f80);
  const std::vector<std::int64_t> outside{0, 6};
  expect_error<usage_error>([&] { e.stage_embeddings({outside, values.data(), false}); },
                            "embedding row 6 is outside the 6 staged prompt rows");
  const std::vector<std::int64_t> backwards{3, 1};
  expect_error<usage_error>([&] { e.stage_embeddings({backwards, values.data(), false}); },
                            "strictly increasing; row 1 follows 3");
  expect_error<usage_error>([&] { e.stage_embeddings({c.image_rows, values.data(), true}); },
                            "on a device were given to the cpu engine");
  // Staging prompts again forgets given rows: the same as a plain run.
  e.stage_embeddings({c.image_rows, values.data(), false});
  auto plain = make();
  EXPECT_EQ(generate(e, c, nullptr, 2), generate(plain, c, nullptr, 2));
}

}  // namespace
}  // namespace itera::mm
