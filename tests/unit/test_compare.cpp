// The recipe gate: hardware differences compare, anything else refuses unless named with --allow;
// verdicts come from both runs' median confidence intervals.
#include <algorithm>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "itera/analysis/compare.hpp"

namespace itera {
namespace {

summary timed(double median, double ci_low, double ci_high) {
  summary s;
  s.count = 100;
  s.min = ci_low * 0.9;
  s.max = ci_high * 1.5;
  s.mean = s.median = median;
  s.median_ci_low = ci_low;
  s.median_ci_high = ci_high;
  s.relative_noise = (ci_high - ci_low) / 2 / median;
  return s;
}

case_record gemm(const std::string& format, double median_ns, double half_width_ns) {
  case_record r;
  r.workload = "gemm";
  r.workload_version = 2;
  r.backend = "cuda";
  r.axes = {{"M", "4096"}, {"N", "4096"}, {"K", "4096"}, {"format", format}};
  r.fields = {{"precision.input", format}, {"precision.accumulate", "fp32"}, {"precision.output", format}};
  r.device_stats = timed(median_ns, median_ns - half_width_ns, median_ns + half_width_ns);
  r.host_stats = timed(median_ns + 5000, median_ns + 5000 - half_width_ns, median_ns + 5000 + half_width_ns);
  return r;
}

result_set h200_run() {
  result_set s;
  s.source = "a.jsonl";
  s.context.itera_version = "0.1.0";
  s.context.git_commit = "aaaa";
  s.context.started_utc = "2025-06-01T12:00:00Z";
  s.context.backend = "cuda";
  s.context.host = {{"cpu_model", "AMD EPYC 9654"}, {"logical_cores", 32}};
  s.context.device = {{"name", "NVIDIA H200"},
                      {"memory_total_bytes", 150754820096ULL},
                      {"variant", {{"id", "h200-sxm-141gb"}, {"name", "NVIDIA H200 SXM 141GB"}}}};
  s.context.software = {{"driver", "580.65.06"}, {"cublaslt", "13.0.0"}, {"nccl", "2.27.3"}};
  s.cases = {gemm("bf16", 100e3, 1e3), gemm("fp16", 200e3, 2e3), gemm("fp32", 300e3, 3e3)};
  return s;
}

bool has_diff(const comparison& c, const std::string& field) {
  return std::any_of(c.diffs.begin(), c.diffs.end(), [&](const field_diff& d) { return d.field == field; });
}

const field_diff& diff(const comparison& c, const std::string& field) {
  auto it = std::find_if(c.diffs.begin(), c.diffs.end(), [&](const field_diff& d) { return d.field == field; });
  if (it == c.diffs.end()) throw std::runtime_error("no diff for " + field);
  return *it;
}

TEST(CompareJudge, OverlappingIntervalsAreTheSame) {
  EXPECT_EQ(judge(timed(100, 95, 105), timed(103, 99, 107)), verdict::same);
  EXPECT_EQ(judge(timed(100, 95, 105), timed(100, 95, 105)), verdict::same);
  EXPECT_EQ(judge(timed(100, 95, 105), timed(110, 105, 115)), verdict::same);  // touching counts as overlap
}

TEST(CompareJudge, DisjointIntervalsDecide) {
  EXPECT_EQ(judge(timed(100, 95, 105), timed(80, 78, 82)), verdict::faster);   // B takes less time
  EXPECT_EQ(judge(timed(100, 95, 105), timed(120, 118, 122)), verdict::slower);
}

TEST(CompareJudge, VerdictNames) {
  EXPECT_STREQ(to_string(verdict::faster), "faster");
  EXPECT_STREQ(to_string(verdict::slower), "slower");
  EXPECT_STREQ(to_string(verdict::same), "same");
}

TEST(CompareGate, IdenticalRecipesCompareWithVerdicts) {
  const result_set a = h200_run();
  result_set b = h200_run();
  b.source = "b.jsonl";
  b.context.started_utc = "2025-06-02T12:00:00Z";  // not part of the recipe
  b.context.git_commit = "bbbb";
  b.cases[0].device_stats = timed(101e3, 100e3, 102e3);  // overlaps A's 99..101 us
  b.cases[1].device_stats = timed(150e3, 149e3, 151e3);  // well below A's 198..202 us
  b.cases[2].device_stats = timed(400e3, 396e3, 404e3);  // well above
  const comparison c = compare_results(a, b, {});
  EXPECT_FALSE(c.refused);
  EXPECT_TRUE(c.diffs.empty());
  EXPECT_TRUE(c.refused_fields.empty());
  ASSERT_EQ(c.cases.size(), 3u);
  EXPECT_EQ(c.cases[0].workload, "gemm");
  EXPECT_EQ(c.cases[0].axes_key, "M=4096 N=4096 K=4096 format=bf16");
  EXPECT_EQ(c.cases[0].time_kind, "device");
  EXPECT_EQ(c.cases[0].result, verdict::same);
  EXPECT_EQ(c.cases[1].result, verdict::faster);
  EXPECT_DOUBLE_EQ(c.cases[1].ratio, 150.0 / 200.0);
  EXPECT_DOUBLE_EQ(c.cases[1].speedup, 200.0 / 150.0);
  EXPECT_EQ(c.cases[2].result, verdict::slower);
  EXPECT_TRUE(c.only_in_a.empty());
  EXPECT_TRUE(c.only_in_b.empty());
}

TEST(CompareGate, HostTimeWhenEitherSideLacksDeviceTime) {
  const result_set a = h200_run();
  result_set b = h200_run();
  b.cases[0].device_stats.reset();
  const comparison c = compare_results(a, b, {});
  ASSERT_EQ(c.cases.size(), 3u);
  EXPECT_EQ(c.cases[0].time_kind, "host");
  EXPECT_DOUBLE_EQ(c.cases[0].a_median_ns, 105e3);
  EXPECT_EQ(c.cases[1].time_kind, "device");
}

TEST(CompareGate, FailedCasesAreNotTimed) {
  const result_set a = h200_run();
  result_set b = h200_run();
  b.cases[2].status = case_status::failed;
  const comparison c = compare_results(a, b, {});
  EXPECT_FALSE(c.refused);
  EXPECT_EQ(c.cases.size(), 2u);
}

TEST(CompareGate, CasesNotOkOnBothSidesAreListedAsNotCompared) {
  result_set a = h200_run();
  result_set b = h200_run();
  a.cases[0].status = case_status::skipped;
  b.cases[2].status = case_status::failed;
  case_record ce = gemm("bf16", 100e3, 1e3);
  ce.role = "ceiling";
  ce.status = case_status::failed;
  a.cases.push_back(ce);
  b.cases.push_back(ce);
  const comparison c = compare_results(a, b, {});
  EXPECT_FALSE(c.refused);
  EXPECT_EQ(c.cases.size(), 1u);
  EXPECT_EQ(c.not_compared, (std::vector<std::string>{"gemm M=4096 N=4096 K=4096 format=bf16: A skipped, B ok",
                                                       "gemm M=4096 N=4096 K=4096 format=fp32: A ok, B failed",
                                                       "gemm M=4096 N=4096 K=4096 format=bf16 [ceiling]: A failed, B failed"}));
  // A case on one side only (allowed with --allow cases) is listed there, not here.
  b.cases.erase(b.cases.begin());
  EXPECT_EQ(compare_results(a, b, {"cases"}).not_compared.size(), 2u);
  // A refused comparison compares nothing, so lists nothing here either.
  b.context.software["cublaslt"] = "12.9.1";
  EXPECT_TRUE(compare_results(a, b, {}).not_compared.empty());
}

TEST(CompareReport, NotComparedIsRenderedFromTheComparison) {
  const result_set a = h200_run(), b = h200_run();
  comparison c = compare_results(a, b, {});
  c.not_compared = {"gemm M=1 N=1 K=1 format=a|b: A failed, B ok"};
  std::ostringstream md, json;
  write_comparison_markdown(md, c, a, b);
  EXPECT_NE(md.str().find("Not compared (not ok on both sides):\n\n- gemm M=1 N=1 K=1 format=a\\|b: A failed, B ok\n"),
            std::string::npos)
      << md.str();
  write_comparison_json(json, c);
  const ojson j = ojson::parse(json.str());
  EXPECT_EQ(j.at("not_compared"), ojson::array({"gemm M=1 N=1 K=1 format=a|b: A failed, B ok"}));
  c.not_compared.clear();
  std::ostringstream none;
  write_comparison_markdown(none, c, a, b);
  EXPECT_EQ(none.str().find("Not compared"), std::string::npos) << none.str();
}

TEST(CompareGate, DifferentGpuOnlyIsAGpuComparison) {
  const result_set a = h200_run();
  result_set b = h200_run();
  b.context.device = {{"name", "NVIDIA H100 PCIe"},
                      {"memory_total_bytes", 85520809984ULL},
                      {"variant", {{"id", "h100-pcie-80gb"}, {"name", "NVIDIA H100 PCIe 80GB"}}}};
  b.context.host["cpu_model"] = "Intel Xeon Platinum 8480+";
  const comparison c = compare_results(a, b, {});
  EXPECT_FALSE(c.refused);
  EXPECT_TRUE(c.refused_fields.empty());
  EXPECT_EQ(c.hardware_note, "GPU comparison: NVIDIA H200 SXM 141GB (A) vs NVIDIA H100 PCIe 80GB (B)");
  ASSERT_TRUE(has_diff(c, "hardware.device.name"));
  EXPECT_TRUE(diff(c, "hardware.device.name").hardware);
  EXPECT_EQ(diff(c, "hardware.device.name").a, "NVIDIA H200");
  EXPECT_EQ(diff(c, "hardware.device.name").b, "NVIDIA H100 PCIe");
  EXPECT_TRUE(has_diff(c, "hardware.device.variant.id"));
  EXPECT_TRUE(has_diff(c, "hardware.host.cpu_model"));
  for (const auto& d : c.diffs) EXPECT_TRUE(d.hardware) << d.field;
  EXPECT_EQ(c.cases.size(), 3u);
}

TEST(CompareGate, GpuNameWithoutCatalogueMatch) {
  result_set a = h200_run();
  result_set b = h200_run();
  a.context.device.erase("variant");
  b.context.device = {{"name", "NVIDIA L40S"}, {"variant", nullptr}};
  const comparison c = compare_results(a, b, {});
  EXPECT_FALSE(c.refused);
  EXPECT_EQ(c.hardware_note, "GPU comparison: NVIDIA H200 (A) vs NVIDIA L40S (B)");
}

TEST(CompareGate, BackendIsHardware) {
  const result_set a = h200_run();
  result_set b = h200_run();
  b.context.backend = "cpu";
  b.context.device = ojson::object();
  const comparison c = compare_results(a, b, {});
  EXPECT_FALSE(c.refused);
  ASSERT_TRUE(has_diff(c, "hardware.backend"));
  EXPECT_TRUE(diff(c, "hardware.backend").hardware);
  EXPECT_EQ(c.hardware_note, "Hardware comparison: NVIDIA H200 SXM 141GB (A) vs AMD EPYC 9654 (B)");
}

TEST(CompareGate, LibraryVersionRefuses) {
  const result_set a = h200_run();
  result_set b = h200_run();
  b.context.software["cublaslt"] = "12.9.1";
  const comparison c = compare_results(a, b, {});
  EXPECT_TRUE(c.refused);
  EXPECT_EQ(c.refused_fields, std::vector<std::string>{"software.cublaslt"});
  EXPECT_TRUE(c.cases.empty());
  const field_diff& d = diff(c, "software.cublaslt");
  EXPECT_EQ(d.a, "13.0.0");
  EXPECT_EQ(d.b, "12.9.1");
  EXPECT_FALSE(d.hardware);
  EXPECT_FALSE(d.allowed);
}

TEST(CompareGate, AllowByExactName) {
  const result_set a = h200_run();
  result_set b = h200_run();
  b.context.software["cublaslt"] = "12.9.1";
  const comparison c = compare_results(a, b, {"software.cublaslt"});
  EXPECT_FALSE(c.refused);
  EXPECT_TRUE(diff(c, "software.cublaslt").allowed);
  EXPECT_EQ(c.cases.size(), 3u);
}

TEST(CompareGate, AllowByPrefix) {
  const result_set a = h200_run();
  result_set b = h200_run();
  b.context.software["cublaslt"] = "12.9.1";
  b.context.software["nccl"] = "2.26.2";
  EXPECT_FALSE(compare_results(a, b, {"software.*"}).refused);
  // A prefix covers only what it names; a different, exact name does not allow another field.
  const comparison c = compare_results(a, b, {"software.nccl", "software.cub"});
  EXPECT_TRUE(c.refused);
  EXPECT_EQ(c.refused_fields, std::vector<std::string>{"software.cublaslt"});
}

TEST(CompareGate, SoftwarePresentOnOneSideRefuses) {
  const result_set a = h200_run();
  result_set b = h200_run();
  b.context.software.erase("nccl");
  const comparison c = compare_results(a, b, {});
  EXPECT_TRUE(c.refused);
  EXPECT_EQ(diff(c, "software.nccl").b, "(absent)");
}

TEST(CompareGate, PrecisionFieldOfOneCaseRefuses) {
  const result_set a = h200_run();
  result_set b = h200_run();
  b.cases[0].fields["precision.accumulate"] = "fp16";
  const comparison c = compare_results(a, b, {});
  EXPECT_TRUE(c.refused);
  const std::string field = "case[gemm M=4096 N=4096 K=4096 format=bf16].precision.accumulate";
  EXPECT_EQ(c.refused_fields, std::vector<std::string>{field});
  EXPECT_EQ(diff(c, field).a, "fp32");
  EXPECT_EQ(diff(c, field).b, "fp16");
  EXPECT_TRUE(c.cases.empty());
  EXPECT_FALSE(compare_results(a, b, {field}).refused);
  EXPECT_FALSE(compare_results(a, b, {"case[*"}).refused);
}

TEST(CompareGate, WorkloadVersionRefuses) {
  const result_set a = h200_run();
  result_set b = h200_run();
  for (auto& r : b.cases) r.workload_version = 3;
  const comparison c = compare_results(a, b, {});
  EXPECT_TRUE(c.refused);
  EXPECT_EQ(c.refused_fields, std::vector<std::string>{"workload.gemm.version"});
  EXPECT_EQ(diff(c, "workload.gemm.version").a, "2");
  EXPECT_EQ(diff(c, "workload.gemm.version").b, "3");
}

// The set of cases (shapes) is recipe: runs of other shapes refuse unless --allow cases.
TEST(CompareGate, CasesOnOneSideRefuseUnlessAllowed) {
  const result_set a = h200_run();
  result_set b = h200_run();
  b.cases.erase(b.cases.begin());                     // bf16 only in A
  b.cases.push_back(gemm("fp8_e4m3", 60e3, 1e3));     // fp8 only in B
  const comparison refused = compare_results(a, b, {});
  EXPECT_TRUE(refused.refused);
  EXPECT_EQ(refused.refused_fields, std::vector<std::string>{"cases"});
  EXPECT_TRUE(refused.cases.empty());
  const comparison c = compare_results(a, b, {"cases"});
  EXPECT_FALSE(c.refused);
  EXPECT_EQ(c.only_in_a, std::vector<std::string>{"gemm M=4096 N=4096 K=4096 format=bf16"});
  EXPECT_EQ(c.only_in_b, std::vector<std::string>{"gemm M=4096 N=4096 K=4096 format=fp8_e4m3"});
  EXPECT_EQ(c.cases.size(), 2u);
}

TEST(CompareGate, AWorkloadOnOneSideRefusesUnlessAllowed) {
  const result_set a = h200_run();
  result_set b = h200_run();
  case_record t;
  t.workload = "transfer";
  t.workload_version = 1;
  t.axes = {{"direction", "h2d"}};
  t.device_stats = timed(1e6, 0.99e6, 1.01e6);
  b.cases.push_back(t);
  EXPECT_TRUE(compare_results(a, b, {}).refused);
  const comparison c = compare_results(a, b, {"cases"});
  EXPECT_FALSE(c.refused);
  EXPECT_EQ(c.only_in_b, std::vector<std::string>{"transfer direction=h2d"});
}

TEST(CompareGate, CeilingCasesMatchOnlyCeilingCases) {
  result_set a = h200_run();
  result_set b = h200_run();
  case_record ce = gemm("bf16", 100e3, 1e3);
  ce.role = "ceiling";
  a.cases.push_back(ce);
  const comparison c = compare_results(a, b, {"cases"});
  EXPECT_EQ(c.only_in_a, std::vector<std::string>{"gemm M=4096 N=4096 K=4096 format=bf16 [ceiling]"});
  EXPECT_EQ(c.cases.size(), 3u);
}

TEST(CompareGate, EveryRefusingFieldIsListed) {
  const result_set a = h200_run();
  result_set b = h200_run();
  b.context.software["cublaslt"] = "12.9.1";
  b.context.device["name"] = "NVIDIA H100 PCIe";
  b.cases[1].fields["precision.output"] = "fp32";
  const comparison c = compare_results(a, b, {});
  EXPECT_TRUE(c.refused);
  EXPECT_EQ(c.refused_fields,
            (std::vector<std::string>{"software.cublaslt", "case[gemm M=4096 N=4096 K=4096 format=fp16].precision.output"}));
  std::ostringstream md;
  write_comparison_markdown(md, c, a, b);
  EXPECT_NE(md.str().find("refused: recipes differ in 2 fields: software.cublaslt, "
                          "case[gemm M=4096 N=4096 K=4096 format=fp16].precision.output. Re-run with a common recipe, "
                          "or name each field with --allow FIELD to compare anyway."),
            std::string::npos)
      << md.str();
}

}  // namespace
}  // namespace itera

namespace itera {
namespace {

// CUPTI spans and CUDA events differ by microseconds per sample: the timing method is recipe.
TEST(CompareGate, TimingMethodIsRecipe) {
  const result_set a = h200_run();
  result_set b = h200_run();
  for (auto& r : b.cases) r.device_time_method = "cuda_events";
  const comparison c = compare_results(a, b, {});
  EXPECT_TRUE(c.refused);
  ASSERT_FALSE(c.refused_fields.empty());
  EXPECT_NE(c.refused_fields[0].find(".device_time_method"), std::string::npos) << c.refused_fields[0];
}

// A case one card could not run (fp8 on an A100) recorded no fields: allowed, listed as not compared.
TEST(CompareGate, ACaseSkippedOnOneCardDoesNotRefuse) {
  const result_set a = h200_run();
  result_set b = h200_run();
  b.context.device["name"] = "NVIDIA A100-SXM4-80GB";
  b.cases[0].status = case_status::skipped;
  b.cases[0].fields.clear();
  const comparison c = compare_results(a, b, {});
  EXPECT_FALSE(c.refused) << (c.refused_fields.empty() ? "" : c.refused_fields[0]);
  EXPECT_EQ(c.not_compared.size(), 1u);
}

}  // namespace
}  // namespace itera
