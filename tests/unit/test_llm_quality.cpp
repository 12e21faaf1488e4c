// Quality figures (workloads/llm/quality.hpp): the comparison's arithmetic on hand-made traces, the
// teacher forcing of the reference, and the cpu reference model at two precisions.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "itera/core/backend.hpp"
#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "workloads/llm/llm_cpu.hpp"
#include "workloads/llm/model.hpp"
#include "workloads/llm/prompts.hpp"
#include "workloads/llm/quality.hpp"
#include "workloads/llm/scenarios.hpp"
#include "workloads/llm/weights.hpp"

namespace itera::llm {
namespace {

// Two sequences, a vocabulary of 3: logits are a function of the step and the fed tokens, and
// every call is recorded.
class scripted_model final : public logits_model {
 public:
  explicit scripted_model(float bias) : m_bias(bias) {}
  std::int64_t sequences() const override { return 2; }
  std::int64_t vocab() const override { return 3; }
  std::vector<float> prefill(std::span<const std::int32_t> tokens, std::int64_t prompt) override {
    prefills.emplace_back(tokens.begin(), tokens.end());
    prompt_len = prompt;
    return {1, 3 + m_bias, 2, 5, 4, 0};  // argmax 1 and 0 (the bias moves sequence 0's winner)
  }
  std::vector<float> step(std::span<const std::int32_t> tokens) override {
    fed.emplace_back(tokens.begin(), tokens.end());
    const auto a = static_cast<float>(tokens[0]), b = static_cast<float>(tokens[1]);
    return {a, 2 - a + m_bias, 1, b, 1, 2};
  }
  std::vector<std::vector<std::int32_t>> prefills, fed;
  std::int64_t prompt_len = 0;

 private:
  float m_bias;
};

TEST(LlmQuality, GreedyTraceFeedsItsOwnArgmax) {
  scripted_model m(0.0f);
  const std::vector<std::int32_t> prompts = {7, 8, 9, 10};
  const auto t = trace_logits(m, prompts, 2, 3);
  ASSERT_EQ(t.logits.size(), 3u);
  ASSERT_EQ(m.prefills.size(), 1u);
  EXPECT_EQ(m.prefills[0], prompts);
  EXPECT_EQ(m.prompt_len, 2);
  // Position 0 (prefill): argmax {1, 0}; fed to step 1, whose logits {1,1,1 | 0,1,2} give {0, 2}.
  EXPECT_EQ(t.ids[0], (std::vector<std::int32_t>{1, 0}));
  EXPECT_EQ(t.ids[1], (std::vector<std::int32_t>{0, 2}));
  ASSERT_EQ(m.fed.size(), 2u);
  EXPECT_EQ(m.fed[0], t.ids[0]);
  EXPECT_EQ(m.fed[1], t.ids[1]);
}

TEST(LlmQuality, ReferenceIsFedTheTestedTokens) {
  scripted_model tested(0.0f), reference(-2.5f);
  const std::vector<std::int32_t> prompts = {1, 2};
  const auto t = trace_logits(tested, prompts, 1, 2);
  const auto r = trace_logits(reference, prompts, 1, 2, &t);
  ASSERT_EQ(reference.fed.size(), 1u);
  EXPECT_EQ(reference.fed[0], t.ids[0]) << "the reference must see the tested model's tokens";
  EXPECT_EQ(r.ids[0], t.ids[0]);
  // Position 0: tested {1,3,2 | 5,4,0} argmax {1,0}; reference {1,0.5,2 | 5,4,0} argmax {2,0}.
  // Position 1 (fed {1,0}): tested {1,1,1 | 0,1,2} -> {0,2}; reference {1,-1.5,1 | 0,1,2} -> {0,2}.
  const auto f = compare_traces(t, r);
  EXPECT_EQ(f.positions, 4);
  EXPECT_DOUBLE_EQ(f.top1_agreement, 0.75);
  // Differences: 2.5 at two entries; reference norm^2 = 1+0.25+4+25+16 + 1+2.25+1+0+1+4 = 55.5.
  EXPECT_NEAR(f.logits_rel_error, std::sqrt(2 * 2.5 * 2.5 / 55.5), 1e-12);
}

TEST(LlmQuality, BadShapesAreRefused) {
  scripted_model m(0.0f);
  EXPECT_THROW(trace_logits(m, std::vector<std::int32_t>{1, 2, 3}, 2, 1), std::invalid_argument);
  EXPECT_THROW(trace_logits(m, std::vector<std::int32_t>{1, 2}, 1, 0), std::invalid_argument);
  const auto t = trace_logits(m, std::vector<std::int32_t>{1, 2}, 1, 1);
  EXPECT_THROW(trace_logits(m, std::vector<std::int32_t>{1, 2}, 1, 2, &t), std::invalid_argument);
  quality_trace longer = t;
  longer.logits.push_back(t.logits[0]);
  longer.ids.push_back(t.ids[0]);
  EXPECT_THROW(compare_traces(t, longer), std::invalid_argument);
}

TEST(LlmQuality, ArgmaxTakesTheFirstOfEquals) {
  EXPECT_EQ(argmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(argmax(std::vector<float>{-1}), 0);
}

// The cpu reference at two precisions on the tiny preset: bf16 against itself is exact; fp8
// against bf16 and bf16 against fp32 differ by their rounding, fp8 more than bf16, and both
// keep most greedy choices.
TEST(LlmQuality, CpuReferencePrecisions) {
  const model_config c = preset("tiny");
  constexpr std::int64_t n = 2, prompt = 12, positions = 6;
  std::vector<std::int32_t> prompts;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto p = synthetic_prompt(5, i, prompt, c.vocab);
    prompts.insert(prompts.end(), p.begin(), p.end());
  }
  const auto trace = [&](dtype d, const quality_trace* forced = nullptr) {
    auto m = reference_logits_model(random_weights(c, d, 11), n);
    return trace_logits(*m, prompts, prompt, positions, forced);
  };
  const auto bf16 = trace(dtype::bf16);
  const auto same = compare_traces(bf16, trace(dtype::bf16, &bf16));
  EXPECT_EQ(same.logits_rel_error, 0.0);
  EXPECT_EQ(same.top1_agreement, 1.0);
  EXPECT_EQ(same.positions, n * positions);

  const auto vs_fp32 = compare_traces(bf16, trace(dtype::fp32, &bf16));
  const auto fp8 = trace(dtype::fp8_e4m3);
  const auto vs_bf16 = compare_traces(fp8, trace(dtype::bf16, &fp8));
  std::printf("tiny, cpu reference: bf16 vs fp32 rel error %.3g, top-1 %.3f; fp8 vs bf16 rel error %.3g, top-1 %.3f\n",
              vs_fp32.logits_rel_error, vs_fp32.top1_agreement, vs_bf16.logits_rel_error, vs_bf16.top1_agreement);
  EXPECT_GT(vs_fp32.logits_rel_error, 0.0);
  EXPECT_LT(vs_fp32.logits_rel_error, 0.02);
  EXPECT_GT(vs_bf16.logits_rel_error, vs_fp32.logits_rel_error);
  EXPECT_LT(vs_bf16.logits_rel_error, 0.15);
  EXPECT_GE(vs_fp32.top1_agreement, 0.75);
  EXPECT_GE(vs_bf16.top1_agreement, 0.5);
}

// A reference that cannot be built (a card too small for it, say) leaves the figures out with the
// reason and does not fail the case: its timings stand.
TEST(LlmQuality, AReferenceThatCannotBeBuiltLeavesTheCaseStanding) {
  auto dev = open_backend("cpu");
  case_record record;
  const run_options options;
  const ceiling_table ceilings;
  case_state st(*dev, options, record, ceilings, dev->make_timer(), nullptr, nullptr);
  llm_case c;
  c.config = preset("tiny");
  c.batch = 2;
  c.prompt = 8;
  c.output = 4;
  c.context = 12;
  c.weights = dtype::fp8_e4m3;
  const auto tested = [&](std::int64_t n, std::int64_t) {
    return reference_logits_model(random_weights(c.config, dtype::fp8_e4m3, 1), n);
  };
  const auto unbuildable = [](std::int64_t, std::int64_t) -> std::unique_ptr<logits_model> {
    throw case_skipped("does not fit: needs 16.08 GiB, 8.00 GiB free");
  };
  EXPECT_NO_THROW(record_quality(st, c, tested, unbuildable, "bf16 weights on a card too small"));
  EXPECT_EQ(record.find_metric("quality/top1_agreement"), nullptr);
  ASSERT_EQ(record.details.count("quality.not_measured"), 1u);
  EXPECT_EQ(record.details.at("quality.not_measured"),
            "against bf16 weights on a card too small: does not fit: needs 16.08 GiB, 8.00 GiB free");
}

}  // namespace
}  // namespace itera::llm
