// The vision_encoder workload on the cpu backend through the real runner: its axes and suite, the
// stage names the cuda engine records, the input patches, the figures a case records, and the
// errors bad axis values give (a failed case with a message that says what to change).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "itera/core/stats.hpp"
#include "itera/core/workload.hpp"
#include "tests/support/quick_run.hpp"
#include "vit_test_support.hpp"
#include "workloads/multimodal/vision_encoder.hpp"
#include "workloads/multimodal/vit_gpu.hpp"
#include "workloads/multimodal/vit_weights.hpp"

namespace itera::mm {
namespace {

using test::expect_usage_error;
using test::temp_dir;

const workload_decl& workload() { return builtin_workloads().get("vision_encoder"); }

// The single case the overrides give, tiny at batch 2 unless they say otherwise, on the cpu backend.
case_record run_case(axis_overrides overrides) {
  const auto has = [&](const char* name) {
    return std::any_of(overrides.begin(), overrides.end(), [&](const auto& kv) { return kv.first == name; });
  };
  if (!has("preset")) overrides.emplace_back("preset", "tiny");
  if (!has("batch")) overrides.emplace_back("batch", "2");
  return itera::test::run_single_case(workload(), overrides);
}

double metric(const case_record& r, const std::string& name) {
  const auto* m = r.find_metric(name);
  if (!m) {
    ADD_FAILURE() << "metric " << name << " missing";
    return std::numeric_limits<double>::quiet_NaN();
  }
  return m->value;
}

std::string field(const case_record& r, const std::string& key) {
  const auto it = r.fields.find(key);
  return it == r.fields.end() ? std::string() : it->second;
}

TEST(VitWorkload, DeclaresItsAxesAndSuite) {
  const auto& w = workload();
  EXPECT_TRUE(w.backends.contains("cpu"));
  std::vector<std::string> names;
  for (const auto& a : w.axes) names.push_back(a.name);
  for (const char* axis : {"preset", "shape", "checkpoint", "batch", "weights", "activations", "check_images", "stages",
                           "graph", "fc1_sums", "seed"})
    EXPECT_NE(std::find(names.begin(), names.end(), axis), names.end()) << axis;
  // Defaults: ViT-L/14 at 224, batches 1, 32 and 128.
  const auto cases = expand_cases(w, {});
  ASSERT_EQ(cases.size(), 3u);
  for (const auto& c : cases) {
    const auto preset = std::find_if(c.begin(), c.end(), [](const auto& kv) { return kv.first == "preset"; });
    ASSERT_NE(preset, c.end());
    EXPECT_EQ(preset->second, "clip-vit-large-patch14");
  }
  // The cpu suite runs the tiny presets only.
  auto dev = open_backend("cpu");
  for (const auto& group : w.suite(*dev))
    for (const auto& c : expand_cases(w, group))
      for (const auto& [k, v] : c)
        if (k == "preset") {
          EXPECT_TRUE(v == "tiny" || v == "tiny-siglip") << v;
        }
  EXPECT_THROW(expand_cases(w, {{"preset", "clip-vit-huge"}}), usage_error);
  EXPECT_THROW(expand_cases(w, {{"stages", "all"}}), usage_error);
  EXPECT_THROW(expand_cases(w, {{"batch", "0"}}), usage_error);
}

TEST(VitWorkload, StageNames) {
  const auto c = vit_preset("tiny");
  const auto stages = vit_stages(c, dtype::bf16, dtype::bf16);
  const auto find = [&](const std::string& name) {
    return *std::find_if(stages.begin(), stages.end(), [&](const vit_stage& s) { return s.name == name; });
  };
  EXPECT_EQ(stage_path(find("layer.1.fc1"), vit_stage_names::kinds), "layers/fc1");
  EXPECT_EQ(stage_path(find("layer.1.fc1"), vit_stage_names::layers), "layer.1.fc1");
  EXPECT_EQ(stage_path(find("patch_embed"), vit_stage_names::kinds), "patch_embed");
  EXPECT_EQ(stage_path(find("projector.fc2"), vit_stage_names::kinds), "projector.fc2");
  EXPECT_EQ(stage_path(find("pre_norm"), vit_stage_names::layers), "pre_norm");
  EXPECT_EQ(parse_stage_names("layers"), vit_stage_names::layers);
  expect_usage_error([] { (void)parse_stage_names("per-layer"); }, {"per-layer", "kinds", "layers"});
}

TEST(VitWorkload, PatchesOfAnImageDoNotDependOnTheBatch) {
  const auto c = vit_preset("tiny");
  const auto one = random_patches(c, 1, 3), three = random_patches(c, 3, 3);
  const auto per = static_cast<std::size_t>(c.patches() * c.patch_dim());
  ASSERT_EQ(one.size(), per);
  ASSERT_EQ(three.size(), 3 * per);
  EXPECT_TRUE(std::equal(one.begin(), one.end(), three.begin()));
  EXPECT_NE(random_patches(c, 1, 4), one);
  for (const float v : three) {
    EXPECT_GE(v, -2.0f);
    EXPECT_LT(v, 2.0f);
  }
}

// bf16 activations on the cpu: checked against fp32 activations, within the tolerance but not
// equal (the check can fail); the declared work is vit_stages' for the batch.
TEST(VitWorkload, CpuCaseRunsAndChecksItsDrift) {
  const auto r = run_case({});
  ASSERT_EQ(r.status, case_status::ok) << r.message;
  ASSERT_TRUE(r.check.checked);
  EXPECT_TRUE(r.check.passed);
  EXPECT_GT(r.check.error, 1e-4);
  EXPECT_LT(r.check.error, vit_tolerance);
  EXPECT_DOUBLE_EQ(r.check.tolerance, vit_tolerance);
  EXPECT_NE(r.check.method.find("first 2 image(s)"), std::string::npos) << r.check.method;
  EXPECT_GT(metric(r, "verification/features_error"), 0);
  EXPECT_GT(metric(r, "throughput/images_per_s"), 0);
  const auto c = vit_preset("tiny");
  const auto w = sum_work(vit_stages(c, dtype::bf16, dtype::bf16), 2);
  EXPECT_DOUBLE_EQ(r.flops, w.flops());
  EXPECT_DOUBLE_EQ(std::stod(r.details.at("work.attention_flops")), w.attention_flops);
  EXPECT_DOUBLE_EQ(std::stod(r.details.at("work.encoder_gemm_flops")),
                   sum_work(vit_stages(c, dtype::bf16, dtype::bf16), 2, vit_part::encoder).gemm_flops);
  EXPECT_EQ(field(r, "model"), "tiny");
  EXPECT_EQ(field(r, "tokens"), "17");
  EXPECT_EQ(field(r, "precision.activations"), "bf16");
}

TEST(VitWorkload, CpuCaseInFp32HasNothingToCheckAgainst) {
  const auto r = run_case({{"preset", "tiny-siglip"}, {"activations", "fp32"}, {"weights", "fp32"}, {"batch", "1"}});
  ASSERT_EQ(r.status, case_status::ok) << r.message;
  EXPECT_FALSE(r.check.checked);
  EXPECT_EQ(field(r, "precision.weights"), "fp32");
}

TEST(VitWorkload, CheckpointFolder) {
  temp_dir dir;
  const auto c = vit_preset("tiny-siglip");
  write_vit_checkpoint(dir.path() / "m", random_vit_weights(c, dtype::bf16, 4), dtype::bf16);
  const auto r = run_case({{"preset", "tiny-siglip"}, {"checkpoint", (dir.path() / "m").string()}});
  ASSERT_EQ(r.status, case_status::ok) << r.message;
  EXPECT_TRUE(r.check.passed);
  EXPECT_EQ(field(r, "tokens"), "25");
}

// The figures from the stages the cuda engine records: the encoder GEMMs' FLOP/s over the time of
// their stages (patch_embed, qkv, out, fc1, fc2; the projector's left out), the attention's, and
// the GEMMs' share of the bf16 ceiling. Stage totals cover every repetition.
TEST(VitWorkload, FiguresFromTheStages) {
  vit_case c;
  c.config = vit_preset("tiny");
  c.batch = 4;
  for (const auto names : {vit_stage_names::kinds, vit_stage_names::layers}) {
    c.stages = names;
    case_record r;
    r.device_ns = {2e6, 2e6, 2e6};  // three repetitions of 2 ms
    r.device_stats = summarize(r.device_ns);
    const auto stages = vit_stages(c.config, dtype::bf16, dtype::bf16);
    double gemm_s = 0, attention_s = 0, projector_s = 0;
    for (const auto& s : stages) {
      const std::string path = stage_path(s, names);
      // 10 us per stage per repetition, 20 us for the attention; once per path.
      const double per = s.kind == vit_stage_kind::attention ? 20e-6 : 10e-6;
      auto it = std::find_if(r.stages.begin(), r.stages.end(), [&](const stage_record& x) { return x.path == path; });
      if (it == r.stages.end()) {
        r.stages.push_back({});
        it = r.stages.end() - 1;
        it->path = path;
        it->device_ns = 0;
      }
      it->device_ns += 3 * per * 1e9;
      const bool projector = s.kind == vit_stage_kind::projector_fc1 || s.kind == vit_stage_kind::projector_fc2;
      if (s.kind == vit_stage_kind::attention) attention_s += per;
      else if (projector) projector_s += per;
      else if (s.gemm_m > 0) gemm_s += per;
    }
    r.stages.push_back({});
    r.stages.back().path = "layers";  // the parent under kinds: not counted
    r.stages.back().device_ns = 3e9;
    ceiling_table ceilings;
    ceilings["gemm.bf16"] = {"gemm.bf16", 1e12, "FLOP/s", ""};
    add_vit_metrics(r, ceilings, c);
    const auto w = sum_work(vit_stages(c.config, dtype::bf16, dtype::bf16), 4, vit_part::encoder);
    EXPECT_NEAR(metric(r, "throughput/images_per_s"), 4 / 2e-3, 1e-6);
    EXPECT_NEAR(metric(r, "throughput/encoder_gemm_flops"), w.gemm_flops / gemm_s, 1e-6 * w.gemm_flops / gemm_s);
    EXPECT_NEAR(metric(r, "throughput/attention_flops"), w.attention_flops / attention_s,
                1e-6 * w.attention_flops / attention_s);
    EXPECT_NEAR(metric(r, "utilisation/encoder_gemm/gemm.bf16"), w.gemm_flops / gemm_s / 1e12, 1e-9);
    EXPECT_NEAR(metric(r, "time/encoder_gemm_share"), gemm_s / 2e-3, 1e-9);
    EXPECT_NEAR(metric(r, "throughput/encoder_images_per_s"), 4 / (2e-3 - projector_s), 1e-6);
  }
  // Without stages (a CUDA graph, the cpu backend): images/s only.
  case_record r;
  r.device_ns = {1e6};
  r.device_stats = summarize(r.device_ns);
  add_vit_metrics(r, {}, c);
  EXPECT_EQ(r.metrics.size(), 1u);
}

// With repetition times (the runner's), the stages' figures take the median repetition, as the
// case's rate and the ceiling do: a throttled repetition does not count against the GEMMs alone.
TEST(VitWorkload, StageFiguresFromTheMedianRepetition) {
  vit_case c;
  c.config = vit_preset("tiny");
  c.batch = 4;
  c.stages = vit_stage_names::kinds;
  case_record r;
  r.device_ns = {2e6, 2e6, 6e6};  // the third repetition throttled
  r.device_stats = summarize(r.device_ns);
  double gemm_s = 0;
  const auto all = vit_stages(c.config, dtype::bf16, dtype::bf16);
  for (const auto& s : all) {
    const std::string path = stage_path(s, c.stages);
    if (r.find_stage(path)) continue;  // one record a path; its calls in a repetition added
    const double per_ns = 10e3;
    const auto calls = static_cast<double>(
        std::count_if(all.begin(), all.end(), [&](const auto& x) { return stage_path(x, c.stages) == path; }));
    stage_record st;
    st.path = path;
    st.repetition_ns = {calls * per_ns, calls * per_ns, 3 * calls * per_ns};
    st.device_ns = 5 * calls * per_ns;
    r.stages.push_back(st);
    const bool projector = s.kind == vit_stage_kind::projector_fc1 || s.kind == vit_stage_kind::projector_fc2;
    if (s.kind != vit_stage_kind::attention && !projector && s.gemm_m > 0) gemm_s += calls * per_ns * 1e-9;
  }
  ceiling_table ceilings;
  ceilings["gemm.bf16"] = {"gemm.bf16", 1e12, "FLOP/s", ""};
  add_vit_metrics(r, ceilings, c);
  const auto w = sum_work(all, 4, vit_part::encoder);
  ASSERT_GT(gemm_s, 0);
  EXPECT_NEAR(metric(r, "throughput/encoder_gemm_flops"), w.gemm_flops / gemm_s, 1e-6 * w.gemm_flops / gemm_s)
      << "the median repetition's GEMM time, not the mean's (5/3 of it)";
  EXPECT_NEAR(metric(r, "time/encoder_gemm_share"), gemm_s / 2e-3, 1e-9);
}

// fc1_sums: bf16 (the default, as PyTorch rounds a bf16 Linear's output before its activation) or
// fp32; the cpu reference follows either and records which. SigLIP's fc1 runs in cuBLASLt's
// epilogue whatever the axis says: its field records fp32.
TEST(VitWorkload, Fc1SumsAxis) {
  const auto twice = run_case({{"fc1_sums", "bf16"}});
  ASSERT_EQ(twice.status, case_status::ok) << twice.message;
  EXPECT_EQ(field(twice, "precision.fc1_sums"), "bf16");
  const auto once = run_case({{"fc1_sums", "fp32"}});
  ASSERT_EQ(once.status, case_status::ok) << once.message;
  EXPECT_EQ(field(once, "precision.fc1_sums"), "fp32");
  const auto siglip = run_case({{"preset", "tiny-siglip"}, {"fc1_sums", "bf16"}, {"batch", "1"}});
  ASSERT_EQ(siglip.status, case_status::ok) << siglip.message;
  EXPECT_EQ(field(siglip, "precision.fc1_sums"), "fp32");
}

TEST(VitWorkload, BadAxesFailTheCaseSayingWhatToChange) {
  const auto shape_over_checkpoint = run_case({{"checkpoint", "/"}, {"shape", "layers=1"}});
  EXPECT_EQ(shape_over_checkpoint.status, case_status::failed);
  EXPECT_NE(shape_over_checkpoint.message.find("a checkpoint brings its own shape"), std::string::npos)
      << shape_over_checkpoint.message;
  const auto missing = run_case({{"checkpoint", "/nonexistent/vit"}});
  EXPECT_EQ(missing.status, case_status::failed);
  EXPECT_NE(missing.message.find("is not a folder"), std::string::npos) << missing.message;
  const auto bad_shape = run_case({{"shape", "heads=5"}});
  EXPECT_EQ(bad_shape.status, case_status::failed);
  EXPECT_NE(bad_shape.message.find("not divisible by heads 5"), std::string::npos) << bad_shape.message;
}

}  // namespace
}  // namespace itera::mm
