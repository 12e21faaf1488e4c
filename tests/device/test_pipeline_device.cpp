// The multimodal pipeline workload on the device: fp8 language weights report their quality
// against bf16 weights on the same contexts and image tokens (R6, R10), and a SigLIP-family encoder
// runs end to end with its own image processor.
#include <gtest/gtest.h>

#include <string>

#include "itera/core/workload.hpp"

#if ITERA_WITH_CUDA
#include "itera/cuda/cuda_backend.hpp"
#include "tests/support/cuda_test.hpp"
#include "tests/support/quick_run.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(pipeline_device, fp8_quality) { GTEST_SKIP() << "built without the cuda backend"; }

#else

using namespace itera;

class pipeline_device : public test::cuda_test {
 protected:
  static case_record run(axis_overrides extra) {
    const axis_overrides base = {{"encoder", "tiny"}, {"model", "tiny"}, {"resolution", "48"},
                                 {"batch", "3"},      {"prompt", "6"},   {"output", "8"}};
    return test::run_single_case(builtin_workloads().get("multimodal"), test::merged(base, extra), "cuda");
  }
  static double metric(const case_record& r, const std::string& name) {
    const auto* m = r.find_metric(name);
    return m ? m->value : -1.0;
  }
};

// bf16 weights report no quality figures (they are the reference); fp8 weights report both, in
// range, over 3 requests x 8 positions; staged residency gives the same figures (the image tokens
// are read where the encoder left them, after it gave its memory back).
TEST_F(pipeline_device, fp8_language_weights_report_quality_against_bf16) {
  const auto bf16 = run({});
  ASSERT_EQ(bf16.status, case_status::ok) << bf16.message;
  EXPECT_EQ(bf16.find_metric("quality/top1_agreement"), nullptr);
  const auto fp8 = run({{"weights", "fp8_e4m3"}});
  ASSERT_EQ(fp8.status, case_status::ok) << fp8.message;
  ASSERT_EQ(fp8.details.count("quality.not_measured"), 0u) << fp8.details.at("quality.not_measured");
  const double err = metric(fp8, "quality/logits_rel_error"), top1 = metric(fp8, "quality/top1_agreement");
  std::printf("tiny, fp8_e4m3 against bf16 weights: logits error %.4f, top-1 agreement %.3f (%s)\n", err, top1,
              fp8.details.at("quality.positions").c_str());
  EXPECT_GT(err, 0.0);  // fp8 rounding changes the logits...
  EXPECT_LT(err, 0.5);  // ...but not into noise
  EXPECT_GE(top1, 0.0);
  EXPECT_LE(top1, 1.0);
  EXPECT_EQ(fp8.fields.at("precision.weights"), "fp8_e4m3");
  const auto staged = run({{"weights", "fp8_e4m3"}, {"residency", "staged"}});
  ASSERT_EQ(staged.status, case_status::ok) << staged.message;
  EXPECT_EQ(metric(staged, "quality/logits_rel_error"), err);
  EXPECT_EQ(metric(staged, "quality/top1_agreement"), top1);
}

// An fp8 KV cache in the pipeline's language model: its quality against bf16 weights and a bf16
// cache reported, in range; its allocation and its plan both count one byte per cached element
// (the case's kv cache half a bf16 case's, the plan smaller by the difference).
TEST_F(pipeline_device, fp8_kv_cache_reports_quality_and_halves_the_cache) {
  const auto bf16 = run({});
  ASSERT_EQ(bf16.status, case_status::ok) << bf16.message;
  const auto fp8 = run({{"kv", "fp8_e4m3"}});
  ASSERT_EQ(fp8.status, case_status::ok) << fp8.message;
  ASSERT_EQ(fp8.details.count("quality.not_measured"), 0u) << fp8.details.at("quality.not_measured");
  EXPECT_EQ(fp8.fields.at("precision.kv"), "fp8_e4m3");
  EXPECT_EQ(fp8.details.at("quality.reference"), "bf16 weights and KV cache on the cuda engine");
  const double err = metric(fp8, "quality/logits_rel_error"), top1 = metric(fp8, "quality/top1_agreement");
  std::printf("tiny, fp8_e4m3 against a bf16 KV cache: logits error %.4f, top-1 agreement %.3f\n", err, top1);
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 0.5);
  EXPECT_GE(top1, 0.0);
  EXPECT_LE(top1, 1.0);
  EXPECT_EQ(metric(fp8, "memory/engine/kv_cache") * 2, metric(bf16, "memory/engine/kv_cache"));
  // The plan follows: what the bf16 case plans, less the cache bytes the fp8 one saves.
  EXPECT_EQ(metric(bf16, "memory/plan/total") - metric(fp8, "memory/plan/total"), metric(fp8, "memory/engine/kv_cache"));
}

TEST_F(pipeline_device, siglip_encoder_runs_end_to_end_with_its_processor) {
  const auto r = run({{"encoder", "tiny-siglip"}, {"loop", "end_to_end"}, {"decode", "cpu"}});
  ASSERT_EQ(r.status, case_status::ok) << r.message;
  EXPECT_EQ(r.fields.at("preprocess").rfind("siglip:", 0), 0u) << r.fields.at("preprocess");
  EXPECT_GT(metric(r, "throughput/images_per_s"), 0);
}

#endif

}  // namespace
