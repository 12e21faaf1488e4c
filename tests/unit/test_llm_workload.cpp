// The llm workload end to end on the cpu backend, through the real runner: the offline compute and
// end-to-end loops, the server and single-stream scenarios, the figures each records, and the
// errors a bad axis value or prompts file gives (a clear failure or usage error, never a crash).
// Everything runs the "tiny" preset with short prompts and a small stopping rule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "itera/core/workload.hpp"
#include "tests/support/quick_run.hpp"
#include "workloads/llm/cpu_engine.hpp"
#include "workloads/llm/llm.hpp"
#include "workloads/llm/llm_cpu.hpp"
#include "workloads/llm/model.hpp"
#include "workloads/llm/prompts.hpp"
#include "workloads/llm/weights.hpp"

namespace itera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const workload_decl& llm_workload() { return builtin_workloads().get("llm"); }

// Runs the single case the overrides give (tiny unless they say otherwise) on the cpu backend.
case_record run_llm(axis_overrides overrides) {
  bool has_model = false;
  for (const auto& [k, v] : overrides) has_model = has_model || k == "model";
  if (!has_model) overrides.insert(overrides.begin(), {"model", "tiny"});
  return test::run_single_case(llm_workload(), overrides);
}

double metric_value(const case_record& r, const std::string& name) {
  const auto* m = r.find_metric(name);
  if (!m) {
    ADD_FAILURE() << "metric " << name << " missing";
    return std::numeric_limits<double>::quiet_NaN();
  }
  return m->value;
}

bool has_stage(const case_record& r, const std::string& path) {
  for (const auto& s : r.stages)
    if (s.path == path) return true;
  return false;
}

std::string stage_list(const case_record& r) {
  std::string s;
  for (const auto& st : r.stages) s += st.path + " ";
  return s;
}

// The message of the usage_error `fn` throws; fails the test when it throws nothing or another type.
std::string usage_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const usage_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected usage_error, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected usage_error, nothing thrown";
  return {};
}

// A folder of the test's own, removed at the end.
class LlmWorkloadFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    m_dir = fs::temp_directory_path() /
            ("itera_llm_workload_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(m_dir);
    fs::create_directories(m_dir);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(m_dir, ec);
  }
  fs::path write(const std::string& name, const std::string& text) {
    const auto path = m_dir / name;
    std::ofstream out(path, std::ios::binary);
    out << text;
    return path;
  }
  fs::path m_dir;
};

// ---------------------------------------------------------------------------------------------
// 1. Offline, compute-only loop

TEST(LlmWorkloadOffline, ComputeLoopRecordsLatencyThroughputAndPlan) {
  const auto rec = run_llm({{"batch", "2"}, {"prompt", "16"}, {"output", "8"}});
  ASSERT_EQ(rec.status, case_status::ok) << rec.message;
  EXPECT_GE(rec.device_ns.size(), 3u);
  for (const char* name : {"latency/ttft", "latency/tpot", "throughput/decode_tokens_per_s",
                           "throughput/prefill_tokens_per_s"}) {
    const double v = metric_value(rec, name);
    EXPECT_TRUE(std::isfinite(v)) << name;
    EXPECT_GT(v, 0) << name;
  }
  EXPECT_TRUE(has_stage(rec, "prefill")) << stage_list(rec);
  EXPECT_TRUE(has_stage(rec, "decode")) << stage_list(rec);
  EXPECT_FALSE(has_stage(rec, "d2h")) << "the compute loop copies nothing back";
  // TTFT and TPOT: the median repetition's stage time, as the case's own rate; the means beside.
  const double reps = static_cast<double>(rec.device_ns.size());
  for (const auto& [stage, latency, per] : {std::tuple{"prefill", "latency/ttft", 1.0},
                                           std::tuple{"decode", "latency/tpot", 7.0}}) {
    const stage_record* s = rec.find_stage(stage);
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(s->repetition_ns.size(), rec.device_ns.size()) << stage << ": one time a repetition";
    EXPECT_DOUBLE_EQ(metric_value(rec, latency), summarize(s->repetition_ns).median / per * 1e-9) << stage;
    const double total = s->device_ns >= 0 ? s->device_ns : s->host_ns;
    EXPECT_DOUBLE_EQ(metric_value(rec, std::string(latency) + "_mean"), total / reps / per * 1e-9) << stage;
  }
  EXPECT_EQ(rec.fields.at("precision.weights"), "bf16");
  EXPECT_EQ(rec.fields.at("model"), "tiny");
  EXPECT_EQ(rec.fields.at("context"), "24") << "prompt + output";
  EXPECT_GT(metric_value(rec, "memory/plan/total"), 0);
  EXPECT_GE(metric_value(rec, "memory/largest_batch"), 2);
  EXPECT_EQ(metric_value(rec, "work/requests"), 2);
  EXPECT_EQ(metric_value(rec, "work/output_tokens"), 16);
}

// Quality beside the timings (R6, R10): bf16 weights against fp32 and fp8 against bf16 on the cpu
// reference, with the reference and the positions compared named.
TEST(LlmWorkloadOffline, QualityFiguresBesideTheTimings) {
  const auto bf16 = run_llm({{"batch", "2"}, {"prompt", "16"}, {"output", "8"}});
  ASSERT_EQ(bf16.status, case_status::ok) << bf16.message;
  const auto fp8 = run_llm({{"batch", "2"}, {"prompt", "16"}, {"output", "8"}, {"weights", "fp8_e4m3"}});
  ASSERT_EQ(fp8.status, case_status::ok) << fp8.message;
  EXPECT_EQ(fp8.fields.at("precision.weights"), "fp8_e4m3");
  EXPECT_EQ(bf16.details.at("quality.reference"), "fp32 weights on the cpu reference");
  EXPECT_EQ(fp8.details.at("quality.reference"), "bf16 weights on the cpu reference");
  EXPECT_THAT(fp8.details.at("quality.positions"), StartsWith("16 (2 sequences x 8 positions"));
  const double e16 = metric_value(bf16, "quality/logits_rel_error"), e8 = metric_value(fp8, "quality/logits_rel_error");
  EXPECT_GT(e16, 0);
  EXPECT_LT(e16, 0.02);
  EXPECT_GT(e8, e16) << "fp8 rounds more than bf16";
  EXPECT_LT(e8, 0.15);
  for (const auto* r : {&bf16, &fp8}) {
    const double top1 = metric_value(*r, "quality/top1_agreement");
    EXPECT_GE(top1, 0.5);
    EXPECT_LE(top1, 1.0);
  }
}

// lm_head=fp8_e4m3 (fp8 weights only): the LM head quantised as a projection, recorded as the
// case's LM head precision and said in what ran; its quality against bf16 weights moves from the
// plain fp8 case's (the reference is the same, the case rounds more). A 16-bit LM head is the
// weights' type.
TEST(LlmWorkloadOffline, Fp8LmHeadIsRecordedAndMovesTheQuality) {
  const axis_overrides base = {{"batch", "2"}, {"prompt", "16"}, {"output", "8"}, {"weights", "fp8_e4m3"}};
  const auto plain = run_llm(base);
  ASSERT_EQ(plain.status, case_status::ok) << plain.message;
  auto with_head = base;
  with_head.push_back({"lm_head", "fp8_e4m3"});
  const auto head = run_llm(with_head);
  ASSERT_EQ(head.status, case_status::ok) << head.message;
  EXPECT_EQ(plain.fields.at("precision.lm_head"), "bf16");
  EXPECT_EQ(head.fields.at("precision.lm_head"), "fp8_e4m3");
  EXPECT_THAT(head.details.at("precision.as_run"), StartsWith("fp8_e4m3 weight values (the LM head's too)"));
  EXPECT_THAT(plain.details.at("precision.as_run"), StartsWith("fp8_e4m3 weight values widened"));
  EXPECT_EQ(head.details.at("quality.reference"), "bf16 weights on the cpu reference");
  EXPECT_NE(metric_value(head, "quality/logits_rel_error"), metric_value(plain, "quality/logits_rel_error"));
  EXPECT_LT(metric_value(head, "quality/logits_rel_error"), 0.15);
  const auto bf16 = run_llm({{"batch", "1"}, {"prompt", "8"}, {"output", "2"}, {"weights", "fp16"}, {"compute", "fp16"},
                             {"kv", "fp16"}});
  ASSERT_EQ(bf16.status, case_status::ok) << bf16.message;
  EXPECT_EQ(bf16.fields.at("precision.lm_head"), "fp16");
}

// An fp8 e4m3 KV cache (R6): recorded as the case's cache precision, said in what ran, the quality
// against the cache a bf16 case holds beside the timings under its own names, and the weights'
// quality (bf16 against fp32) measured with the case's fp8 cache on both sides.
TEST(LlmWorkloadOffline, Fp8KvCacheReportsItsQuality) {
  const auto rec = run_llm({{"batch", "2"}, {"prompt", "16"}, {"output", "8"}, {"kv", "fp8_e4m3"}});
  ASSERT_EQ(rec.status, case_status::ok) << rec.message;
  EXPECT_EQ(rec.fields.at("precision.kv_cache"), "fp8_e4m3");
  EXPECT_THAT(rec.details.at("precision.as_run"), HasSubstr("KV cache fp8 e4m3 (scale 1, saturating)"));
  EXPECT_EQ(rec.details.at("quality.kv_cache.reference"), "bf16 KV cache on the cpu reference (held there in fp32)");
  EXPECT_THAT(rec.details.at("quality.kv_cache.positions"), StartsWith("16 (2 sequences x 8 positions"));
  const double err = metric_value(rec, "quality/kv_cache/logits_rel_error");
  EXPECT_GT(err, 0) << "decode steps read the rounded cache";
  EXPECT_LT(err, 0.05);
  EXPECT_GE(metric_value(rec, "quality/kv_cache/top1_agreement"), 0.5);
  EXPECT_EQ(rec.details.at("quality.reference"), "fp32 weights on the cpu reference (fp8 e4m3 KV cache, as the case's)");
  EXPECT_GT(metric_value(rec, "quality/logits_rel_error"), 0);
  // A bf16 cache has no cache figures; a cache type the workload does not offer is refused.
  const auto bf16 = run_llm({{"batch", "2"}, {"prompt", "16"}, {"output", "8"}});
  ASSERT_EQ(bf16.status, case_status::ok) << bf16.message;
  EXPECT_EQ(bf16.find_metric("quality/kv_cache/logits_rel_error"), nullptr);
  EXPECT_EQ(bf16.details.count("quality.kv_cache.reference"), 0u);
  // The cpu engine holds either cache in fp32: the same plan.
  EXPECT_EQ(metric_value(rec, "memory/plan/kv_cache"), metric_value(bf16, "memory/plan/kv_cache"));
  const auto msg = usage_message([] { (void)expand_cases(llm_workload(), {{"model", "tiny"}, {"kv", "fp32"}}); });
  EXPECT_THAT(msg, HasSubstr("axis kv: unknown value 'fp32'; choose from bf16, fp16, fp8_e4m3"));
}

// fp16 compute (issue 3's precision section): the compute type is a recipe field of its own, bf16
// unless asked; the cpu engine is the fp32 oracle of both types, so an fp16 case runs there in
// fp32 (what ran says so) with fp16 weights and an fp16 cache (held in fp32), and reports the
// weights' quality against fp32 as a bf16 case does.
TEST(LlmWorkloadOffline, Fp16ComputeIsRecordedAndRunsInFp32OnTheCpu) {
  const auto& w = llm_workload();
  const axis_decl* compute = nullptr;
  for (const auto& a : w.axes)
    if (a.name == "compute") compute = &a;
  ASSERT_NE(compute, nullptr);
  EXPECT_EQ(compute->defaults, "bf16");
  EXPECT_EQ(compute->choices, (std::vector<std::string>{"bf16", "fp16"}));
  const auto bf16 = run_llm({{"batch", "2"}, {"prompt", "16"}, {"output", "8"}});
  ASSERT_EQ(bf16.status, case_status::ok) << bf16.message;
  EXPECT_EQ(bf16.fields.at("precision.compute"), "bf16");
  const auto rec =
      run_llm({{"batch", "2"}, {"prompt", "16"}, {"output", "8"}, {"compute", "fp16"}, {"weights", "fp16"}, {"kv", "fp16"}});
  ASSERT_EQ(rec.status, case_status::ok) << rec.message;
  EXPECT_EQ(rec.fields.at("precision.compute"), "fp16");
  EXPECT_EQ(rec.fields.at("precision.weights"), "fp16");
  EXPECT_EQ(rec.fields.at("precision.kv_cache"), "fp16");
  EXPECT_EQ(rec.details.at("precision.as_run"),
            "fp16 weight values widened to fp32; fp32 activations, KV cache and accumulation (OpenBLAS sgemm)");
  EXPECT_EQ(rec.details.at("quality.reference"), "fp32 weights on the cpu reference");
  const double err = metric_value(rec, "quality/logits_rel_error");
  EXPECT_GT(err, 0);
  EXPECT_LT(err, metric_value(bf16, "quality/logits_rel_error")) << "fp16 weights round less than bf16";
  // The cuda engine's comparison of fp16 against bf16 compute has no cpu counterpart.
  EXPECT_EQ(rec.find_metric("quality/compute/logits_rel_error"), nullptr);
  // The cpu engine holds any cache in fp32: the same plan as a bf16 case's.
  EXPECT_EQ(metric_value(rec, "memory/plan/kv_cache"), metric_value(bf16, "memory/plan/kv_cache"));
}

// ---------------------------------------------------------------------------------------------
// 2. Offline, end-to-end loop from a real prompts file

TEST_F(LlmWorkloadFiles, EndToEndFromAPromptsFileMatchesTheReference) {
  constexpr std::int64_t seed = 5, default_output = 6;
  // Lines 3 (id 300 outside tiny's vocabulary of 256) and 6 (600 > tiny's 512 positions) are bad.
  // With batch 2 the good lines run in waves {1, 2} (lengths 5 and 9: prefilled one by one),
  // {4, 5} (both 7: one staged prefill, outputs 3 and 6) and {7} (alone).
  const std::string text =
      "{\"tokens\": [1, 2, 3, 4, 5], \"output_len\": 4}\n"
      "{\"prompt_len\": 9}\n"
      "{\"tokens\": [10, 300]}\n"
      "{\"prompt_len\": 7, \"output_len\": 3}\n"
      "{\"prompt_len\": 7}\n"
      "{\"prompt_len\": 600}\n"
      "{\"tokens\": [7, 8, 9, 200, 100, 50, 25, 12, 6, 3, 1], \"output_len\": 5}\n";
  const auto prompts = write("prompts.jsonl", text);
  struct expected_request {
    std::int64_t line;
    std::vector<std::int32_t> tokens;
    std::int64_t output;
  };
  const auto tiny = llm::preset("tiny");
  const std::vector<expected_request> good = {
      {1, {1, 2, 3, 4, 5}, 4},
      {2, llm::synthetic_prompt(seed, 2, 9, tiny.vocab), default_output},
      {4, llm::synthetic_prompt(seed, 4, 7, tiny.vocab), 3},
      {5, llm::synthetic_prompt(seed, 5, 7, tiny.vocab), default_output},
      {7, {7, 8, 9, 200, 100, 50, 25, 12, 6, 3, 1}, 5},
  };

  const auto rec = run_llm({{"loop", "end_to_end"},
                            {"batch", "2"},
                            {"output", std::to_string(default_output)},
                            {"prompts", prompts.string()},
                            {"seed", std::to_string(seed)}});
  ASSERT_EQ(rec.status, case_status::ok) << rec.message;
  ASSERT_TRUE(rec.details.contains("prompts.bad_lines"));
  EXPECT_EQ(rec.details.at("prompts.bad_lines"), "2");
  EXPECT_EQ(rec.details.at("prompts.rejected_too_long"), "1");
  EXPECT_THAT(rec.details.at("prompts.first_errors"), HasSubstr("line 3"));
  EXPECT_THAT(rec.details.at("prompts.first_errors"), HasSubstr("line 6"));
  EXPECT_EQ(metric_value(rec, "prompts/good_lines"), static_cast<double>(good.size()));
  EXPECT_EQ(metric_value(rec, "prompts/bad_lines"), 2);
  for (const char* stage : {"read", "parse", "prefill", "decode", "d2h", "write"})
    EXPECT_TRUE(has_stage(rec, stage)) << stage << " missing; stages: " << stage_list(rec);
  EXPECT_TRUE(has_stage(rec, "h2d")) << "the wave of two 7-token prompts is staged; stages: " << stage_list(rec);
  EXPECT_GT(metric_value(rec, "latency/ttft"), 0);
  EXPECT_GT(metric_value(rec, "latency/tpot"), 0);

  // The generations file: one line per good request, in file order, each with its output length.
  ASSERT_TRUE(rec.details.contains("files.generations"));
  const fs::path generations = rec.details.at("files.generations");
  ASSERT_TRUE(fs::exists(generations)) << generations;
  std::ifstream in(generations);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), good.size());

  // Greedy generation is deterministic on the cpu: the workload's ids are the reference model's.
  const auto weights = llm::random_weights(tiny, llm::dtype::bf16, static_cast<std::uint64_t>(seed));
  const llm::reference_model ref(weights);
  for (std::size_t i = 0; i < good.size(); ++i) {
    SCOPED_TRACE("line " + std::to_string(good[i].line));
    EXPECT_EQ(lines[i].at("line").get<std::int64_t>(), good[i].line);
    EXPECT_EQ(lines[i].at("prompt_tokens").get<std::size_t>(), good[i].tokens.size());
    const auto ids = lines[i].at("tokens").get<std::vector<std::int32_t>>();
    EXPECT_EQ(static_cast<std::int64_t>(ids.size()), good[i].output);
    EXPECT_EQ(ids, ref.generate(good[i].tokens, good[i].output));
  }
}

// ---------------------------------------------------------------------------------------------
// 3, 4. Server and single stream

TEST(LlmWorkloadServing, ServerRecordsOneSamplePerRequestAndMeetsLooseTargets) {
  const auto rec = run_llm({{"scenario", "server"},
                            {"batch", "2"},
                            {"prompt", "16"},
                            {"output", "8"},
                            {"rate", "200"},
                            {"requests", "12"},
                            {"ttft_ms", "100000"},
                            {"tpot_ms", "100000"}});
  ASSERT_EQ(rec.status, case_status::ok) << rec.message;
  EXPECT_EQ(rec.device_ns.size(), 12u);
  EXPECT_EQ(rec.host_ns.size(), 12u);
  EXPECT_THAT(rec.device_time_method, HasSubstr("host"));
  EXPECT_THAT(rec.device_time_method, HasSubstr("clock"));
  for (double ns : rec.device_ns) EXPECT_GT(ns, 0);
  EXPECT_GT(metric_value(rec, "latency/ttft/p99"), 0);
  EXPECT_GT(metric_value(rec, "latency/e2e/p50"), 0);
  EXPECT_LE(metric_value(rec, "latency/ttft/p99"), metric_value(rec, "latency/e2e/p99"));
  EXPECT_GT(metric_value(rec, "load/goodput"), 0);
  EXPECT_EQ(metric_value(rec, "load/meets_targets"), 1);
  EXPECT_EQ(metric_value(rec, "load/requests"), 12);
  EXPECT_EQ(metric_value(rec, "load/completed"), 12);
  EXPECT_EQ(metric_value(rec, "load/meeting_targets"), 12);
}

TEST(LlmWorkloadServing, SingleStreamRecordsOneSamplePerRequest) {
  const auto rec = run_llm({{"scenario", "single_stream"}, {"prompt", "16"}, {"output", "8"}, {"requests", "5"}});
  ASSERT_EQ(rec.status, case_status::ok) << rec.message;
  EXPECT_EQ(rec.device_ns.size(), 5u);
  EXPECT_EQ(metric_value(rec, "load/completed"), 5);
  EXPECT_EQ(rec.find_metric("latency/queue/p50"), nullptr) << "single stream has no queue";
  EXPECT_GT(metric_value(rec, "latency/e2e/p50"), 0);
}

// ---------------------------------------------------------------------------------------------
// 5. Bad input: a clear failure or usage error, not a crash

TEST(LlmWorkloadErrors, RateMustBeAPositiveNumber) {
  for (const char* rate : {"0", "-1", "abc"}) {
    SCOPED_TRACE(rate);
    const auto rec = run_llm({{"scenario", "server"}, {"prompt", "4"}, {"output", "2"}, {"requests", "2"},
                              {"rate", rate}});
    EXPECT_EQ(rec.status, case_status::failed);
    EXPECT_THAT(rec.message, HasSubstr("rate"));
    EXPECT_THAT(rec.message, HasSubstr(rate));
  }
}

TEST(LlmWorkloadErrors, BatchZeroIsAUsageErrorNamingTheAxis) {
  const auto msg = usage_message([] { (void)expand_cases(llm_workload(), {{"model", "tiny"}, {"batch", "0"}}); });
  EXPECT_THAT(msg, HasSubstr("batch"));
}

TEST(LlmWorkloadErrors, PromptAndOutputPastTheContext) {
  const auto rec = run_llm({{"prompt", "16"}, {"output", "8"}, {"context", "20"}});
  EXPECT_EQ(rec.status, case_status::failed);
  EXPECT_THAT(rec.message, HasSubstr("exceed the context"));
}

TEST_F(LlmWorkloadFiles, PromptsFileWithNoGoodLine) {
  const auto prompts = write("bad.jsonl", "{\"tokens\": [999]}\n{\"prompt\": \"hello\"}\nnot json\n");
  const auto rec = run_llm({{"loop", "end_to_end"}, {"prompts", prompts.string()}, {"output", "4"}});
  EXPECT_EQ(rec.status, case_status::failed);
  EXPECT_THAT(rec.message, HasSubstr("no usable line"));
  EXPECT_THAT(rec.message, HasSubstr("3 bad"));
}

TEST_F(LlmWorkloadFiles, ComputeLoopRefusesAPromptsFile) {
  const auto prompts = write("p.jsonl", "{\"prompt_len\": 4}\n");
  const auto rec = run_llm({{"loop", "compute"}, {"prompts", prompts.string()}, {"output", "4"}});
  EXPECT_EQ(rec.status, case_status::failed);
  EXPECT_THAT(rec.message, HasSubstr("end_to_end"));
}

TEST(LlmWorkloadErrors, BadShapeNamesTheShapeAxis) {
  for (const char* shape : {"layers=x", "depth=4", "layers"}) {
    SCOPED_TRACE(shape);
    const auto rec = run_llm({{"shape", shape}, {"prompt", "4"}, {"output", "2"}});
    EXPECT_EQ(rec.status, case_status::failed);
    EXPECT_THAT(rec.message, HasSubstr("shape"));
  }
}

TEST(LlmWorkloadErrors, ShapeThatDoesNotFitIsSkipped) {
  // About 870 GB of bf16 weights: more than any host this runs on has free.
  const auto rec = run_llm({{"model", "llama-3.1-8b"}, {"shape", "layers=2000"}, {"prompt", "16"}, {"output", "8"}});
  EXPECT_EQ(rec.status, case_status::skipped) << rec.message;
  EXPECT_THAT(rec.message, StartsWith("does not fit: needs"));
  EXPECT_GT(metric_value(rec, "memory/plan/total"), metric_value(rec, "memory/free_before"));
  EXPECT_EQ(metric_value(rec, "memory/largest_batch"), 0);
}

// The cpu engine holds weights and KV cache in fp32 whatever the storage precision: its plan must
// count them so (a bf16 plan once let llama-3.1-8b pass the check and then allocate twice the
// memory it planned). On tiny: the plan covers what the engine reports holding.
TEST(LlmWorkloadMemory, CpuPlanCoversWhatTheCpuEngineHolds) {
  const auto rec = run_llm({{"batch", "2"}, {"prompt", "16"}, {"output", "8"}});
  ASSERT_EQ(rec.status, case_status::ok) << rec.message;
  llm::cpu_engine_options o;
  o.slots = 2;
  o.max_context = 24;
  llm::cpu_engine eng(llm::random_weights(llm::preset("tiny"), llm::dtype::bf16, 1), o);
  eng.stage_prompts(std::vector<std::int32_t>(2 * 16, 1));
  eng.prefill_staged(0, 2, 16);
  for (int s = 1; s < 8; ++s) eng.decode(2);  // a whole generation: 16 + 7 tokens cached per slot
  EXPECT_GE(metric_value(rec, "memory/plan/weights"), static_cast<double>(eng.memory().weights));
  EXPECT_GE(metric_value(rec, "memory/plan/kv_cache"), static_cast<double>(eng.memory().kv_cache));
}

// ---------------------------------------------------------------------------------------------
// 6. Combinations the workload rejects

TEST(LlmWorkloadReject, EndToEndOnlyForOffline) {
  const auto& w = llm_workload();
  const auto cases = expand_cases(w, {{"model", "tiny"},
                                      {"scenario", "offline,server,single_stream"},
                                      {"loop", "compute,end_to_end"}});
  ASSERT_EQ(cases.size(), 4u) << "server and single stream with end_to_end are left out";
  for (const auto& c : cases) {
    std::map<std::string, std::string> v(c.begin(), c.end());
    EXPECT_TRUE(v.at("scenario") == "offline" || v.at("loop") == "compute") << v.at("scenario") << " " << v.at("loop");
  }
  const auto msg = usage_message(
      [&] { (void)expand_cases(w, {{"model", "tiny"}, {"scenario", "server"}, {"loop", "end_to_end"}}); });
  EXPECT_THAT(msg, HasSubstr("loop=end_to_end applies to scenario=offline"));
}

// A 16-bit KV cache holds the compute type: of compute x kv, the pairs of two different 16-bit types
// are left out, and asking for one alone says what to write instead.
TEST(LlmWorkloadReject, SixteenBitCacheIsTheComputeType) {
  const auto& w = llm_workload();
  const auto cases =
      expand_cases(w, {{"model", "tiny"}, {"compute", "bf16,fp16"}, {"kv", "bf16,fp16,fp8_e4m3"}});
  std::vector<std::pair<std::string, std::string>> kept;
  for (const auto& c : cases) {
    std::map<std::string, std::string> v(c.begin(), c.end());
    kept.emplace_back(v.at("compute"), v.at("kv"));
  }
  EXPECT_EQ(kept, (std::vector<std::pair<std::string, std::string>>{
                      {"bf16", "bf16"}, {"bf16", "fp8_e4m3"}, {"fp16", "fp16"}, {"fp16", "fp8_e4m3"}}));
  EXPECT_THAT(usage_message([&] { (void)expand_cases(w, {{"model", "tiny"}, {"compute", "fp16"}}); }),
              HasSubstr("kv=bf16 with compute=fp16: a 16-bit KV cache holds the compute type; write kv=fp16 (or "
                        "kv=fp8_e4m3)"));
  EXPECT_THAT(usage_message([&] { (void)expand_cases(w, {{"model", "tiny"}, {"kv", "fp16"}}); }),
              HasSubstr("kv=fp16 with compute=bf16: a 16-bit KV cache holds the compute type; write kv=bf16 (or "
                        "kv=fp8_e4m3)"));
  EXPECT_THAT(usage_message([&] { (void)expand_cases(w, {{"model", "tiny"}, {"compute", "fp32"}}); }),
              HasSubstr("axis compute: unknown value 'fp32'; choose from bf16, fp16"));
}

// lm_head=fp8_e4m3 quantises the LM head as fp8 weights' projections are: with 16-bit weights it
// is left out of a sweep and refused alone; a tied model's table cannot take it (its case fails,
// saying so).
TEST(LlmWorkloadReject, Fp8LmHeadNeedsFp8Weights) {
  const auto& w = llm_workload();
  const auto cases = expand_cases(w, {{"model", "tiny"}, {"weights", "bf16,fp8_e4m3"}, {"lm_head", "16bit,fp8_e4m3"}});
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_THAT(usage_message([&] { (void)expand_cases(w, {{"model", "tiny"}, {"lm_head", "fp8_e4m3"}}); }),
              HasSubstr("lm_head=fp8_e4m3 with weights=bf16: the LM head is quantised as fp8 weights' projections "
                        "are; write weights=fp8_e4m3 (or lm_head=16bit)"));
  const auto tied = run_llm({{"model", "llama-3.2-1b"},
                             {"shape", "layers=1;hidden=64;heads=4;kv_heads=2;intermediate=128;vocab=256"},
                             {"weights", "fp8_e4m3"},
                             {"lm_head", "fp8_e4m3"},
                             {"prompt", "4"},
                             {"output", "1"}});
  EXPECT_NE(tied.status, case_status::ok);
  EXPECT_THAT(tied.message, HasSubstr("its LM head is the embedding table (tied)"));
}

TEST(LlmWorkloadReject, SingleStreamNeedsBatchOne) {
  const auto& w = llm_workload();
  const auto cases = expand_cases(w, {{"model", "tiny"}, {"scenario", "single_stream"}, {"batch", "1,4"}});
  ASSERT_EQ(cases.size(), 1u);
  std::map<std::string, std::string> v(cases[0].begin(), cases[0].end());
  EXPECT_EQ(v.at("batch"), "1");
  const auto msg =
      usage_message([&] { (void)expand_cases(w, {{"model", "tiny"}, {"scenario", "single_stream"}, {"batch", "4"}}); });
  EXPECT_THAT(msg, HasSubstr("batch must be 1"));
}

}  // namespace
}  // namespace itera
