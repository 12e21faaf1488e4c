// Projection: PCIe parsing, classification against the ridge point, scaling by the binding
// resource, work attribution from the llm metrics, and the measured H200 offline sweep.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "itera/analysis/projection.hpp"
#include "itera/core/errors.hpp"

namespace {

using namespace itera;

TEST(Projection, PcieFromInterconnectText) {
  EXPECT_NEAR(*pcie_bytes_per_s("NVLink 4 900 GB/s; PCIe Gen5 x16 128 GB/s"), 32e9 / 8 * 128 / 130 * 16, 1);
  EXPECT_NEAR(*pcie_bytes_per_s("PCIe Gen4 x16 64 GB/s; no NVLink"), 16e9 / 8 * 128 / 130 * 16, 1);
  EXPECT_NEAR(*pcie_bytes_per_s("PCIe Gen3 x8"), 8e9 / 8 * 128 / 130 * 8, 1);
  EXPECT_FALSE(pcie_bytes_per_s("NVLink 5 1.8 TB/s").has_value());
}

// A case on the H200 SXM with two declared stages: one compute-bound, one bandwidth-bound.
result_set synthetic_set() {
  result_set s;
  s.source = "synthetic";
  s.context.backend = "cuda";
  s.context.device = {{"variant", {{"id", "h200-sxm-141gb"}}}};
  s.ceilings = {{"copy.d2d", 4.0e12, "B/s", ""}, {"gemm.bf16", 800e12, "FLOP/s", ""}};
  case_record r;
  r.workload = "toy";
  r.axes = {{"batch", "4"}};
  r.fields = {{"precision.weights", "bf16"}};
  r.device_ns = {30e6, 30e6};
  r.host_ns = r.device_ns;
  r.device_stats = summarize(r.device_ns);
  stage_record a;  // 8e12 FLOP over 1e9 bytes per rep: 8000 FLOP/B, far above the ridge (200)
  a.path = "gemm";
  a.calls = 2;
  a.device_ns = 2 * 20e6;
  a.flops = 2 * 8e12;
  a.bytes_read = 2 * 1e9;
  stage_record b;  // 4e10 bytes, 4e10 FLOP: 1 FLOP/B
  b.path = "stream";
  b.calls = 2;
  b.device_ns = 2 * 10e6;
  b.flops = 2 * 4e10;
  b.bytes_read = 2 * 4e10;
  stage_record h;
  h.path = "read";
  h.calls = 2;
  h.host_ns = 2 * 5e6;
  r.stages = {a, b, h};
  s.cases = {r};
  return s;
}

TEST(Projection, ScalesEachStageByItsBindingResource) {
  const auto set = synthetic_set();
  projection_options o;
  o.cards = {"h100-pcie-80gb", "h200-sxm-141gb"};
  const auto rep = project_results(set, catalogue::builtin(), o);
  ASSERT_EQ(rep.cases.size(), 1u);
  const auto& c = rep.cases[0];
  ASSERT_EQ(c.stages.size(), 3u);
  EXPECT_EQ(c.stages[0].bound, stage_bound::compute);
  EXPECT_EQ(c.stages[1].bound, stage_bound::bandwidth);
  EXPECT_EQ(c.stages[2].bound, stage_bound::host);
  EXPECT_DOUBLE_EQ(c.stages[0].time_ns, 20e6);
  EXPECT_NEAR(c.stages[0].achieved, 400e12, 1e6);
  const auto& h100 = c.cards[0];
  // compute: 20 ms x 800 / 756.5 (measured bf16 ceiling over the H100 PCIe's datasheet bf16)
  EXPECT_NEAR(h100.stages[0].time_ns, 20e6 * 800.0 / 756.5, 1);
  // bandwidth: 10 ms x 4.0 TB/s / 2.0 TB/s
  EXPECT_NEAR(h100.stages[1].time_ns, 20e6, 1);
  EXPECT_DOUBLE_EQ(h100.stages[2].time_ns, 5e6);  // host stage unchanged
  // Case time: projected device stages (the host stage is not in the device time).
  EXPECT_NEAR(h100.case_time_ns, 20e6 * 800.0 / 756.5 + 20e6, 1);
  // Validation on the H200 itself: measured ceilings against its catalogue peaks.
  EXPECT_NEAR(c.self_error[0], 800.0 / 989.5 - 1, 1e-9);
  EXPECT_NEAR(c.self_error[1], 4.0 / 4.8 - 1, 1e-9);
  EXPECT_NEAR(c.roofline_fraction[1], 4e10 / 4.8e12 / 10e-3, 1e-9);
}

TEST(Projection, ClearErrors) {
  auto set = synthetic_set();
  projection_options o;
  o.cards = {"no-such-card"};
  EXPECT_THROW(project_results(set, catalogue::builtin(), o), usage_error);
  set.context.device = ojson::object();
  try {
    project_results(set, catalogue::builtin(), {});
    FAIL() << "no catalogue match accepted";
  } catch (const input_error& e) {
    EXPECT_NE(std::string(e.what()).find("--source-card"), std::string::npos);
  }
  set.cases[0].stages.clear();
  EXPECT_THROW(project_results(set, catalogue::builtin(), {{}, "h200-sxm-141gb"}), input_error);
}

// The measured offline sweep: prefill and decode declare no work of their own; it comes from the
// workload's rates and the case's declared totals.
TEST(Projection, MeasuredH200Offline) {
  const auto set = read_results(std::string(ITERA_SOURCE_DIR) + "/docs/perf/data/2026-11-29-llm-scenarios-4/offline.jsonl");
  projection_options o;
  o.cards = {"h200-sxm-141gb", "l40s-48gb"};
  const auto rep = project_results(set, catalogue::builtin(), o);
  ASSERT_EQ(rep.cases.size(), 6u);
  for (const auto& c : rep.cases) {
    const case_record* r = nullptr;
    for (const auto& x : set.cases)
      if (x.axes_key() == c.case_key) r = &x;
    ASSERT_NE(r, nullptr);
    double flops = 0, bytes = 0, staged = 0;
    for (const auto& s : c.stages) {
      if (s.bound == stage_bound::compute || s.bound == stage_bound::bandwidth) {
        flops += s.flops;
        bytes += s.bytes;
        staged += s.time_ns;
      }
      if (s.path == "prefill") EXPECT_EQ(s.bound, stage_bound::compute) << c.case_key;
      if (s.path == "decode") EXPECT_EQ(s.bound, stage_bound::bandwidth) << c.case_key;
    }
    EXPECT_NEAR(flops, r->flops, 1e-6 * r->flops) << "all of the case's declared FLOPs are attributed";
    EXPECT_NEAR(bytes, r->bytes_read + r->bytes_written, 1e-6 * bytes);
    EXPECT_NEAR(staged, c.measured_time_ns, 0.01 * c.measured_time_ns) << "the stages cover the case's device time";
    // Self-projection error is the measured-ceiling / datasheet gap: between -25% and 0.
    EXPECT_LT(c.self_total_error, 0);
    EXPECT_GT(c.self_total_error, -0.25);
    // The L40S has a lower bandwidth and bf16 peak than the H200: every stage is slower there.
    for (std::size_t i = 0; i < c.stages.size(); ++i)
      if (c.stages[i].bound == stage_bound::compute || c.stages[i].bound == stage_bound::bandwidth)
        EXPECT_GT(c.cards[1].stages[i].time_ns, c.stages[i].time_ns);
  }
  std::ostringstream md;
  write_projection_markdown(md, rep, catalogue::builtin());
  EXPECT_NE(md.str().find("projected (validation)"), std::string::npos);
  std::ostringstream js;
  write_projection_json(js, rep);
  EXPECT_EQ(nlohmann::json::parse(js.str())["schema"], "itera.projection/1");
}

}  // namespace

namespace {

// A limited run of the synthetic case: half the SMs, so half the compute ceiling and time twice as
// long in the compute stage; the memory system is the same card's.
result_set limited_twin() {
  auto s = synthetic_set();
  s.source = "limited";
  s.context.device["runtime"] = {{"multiprocessor_count", 132}, {"sm_limit", 66}};
  s.ceilings = {{"copy.d2d", 4.0e12, "B/s", ""}, {"gemm.bf16", 400e12, "FLOP/s", ""}};
  auto& r = s.cases[0];
  r.stages[0].device_ns *= 2;  // the compute stage: 40 ms a repetition
  r.device_ns = {50e6, 50e6};
  r.host_ns = r.device_ns;
  r.device_stats = summarize(r.device_ns);
  return s;
}

}  // namespace

TEST(ProjectionCheck, LimitedRunProjectedOntoTheFullCard) {
  const auto full = synthetic_set();
  const auto v = validate_projection(limited_twin(), full, catalogue::builtin());
  EXPECT_EQ(v.target_card, "h200-sxm-141gb");
  EXPECT_NE(v.source_device.find("66 of 132 SMs"), std::string::npos) << v.source_device;
  ASSERT_EQ(v.cases.size(), 1u);
  const auto& c = v.cases[0];
  EXPECT_DOUBLE_EQ(c.source_ns, 50e6);
  EXPECT_DOUBLE_EQ(c.measured_ns, 30e6);
  // compute: 40 ms x 400 / 989.5 (limited ceiling to the H200's datasheet); bandwidth: 10 ms x 4.0 / 4.8
  const double compute = 40e6 * 400.0 / 989.5, stream = 10e6 * 4.0 / 4.8;
  ASSERT_EQ(c.stages.size(), 2u);  // the host stage is not compared
  EXPECT_NEAR(c.stages[0].projected_ns, compute, 1);
  EXPECT_NEAR(c.stages[0].measured_ns, 20e6, 1);
  EXPECT_NEAR(c.stages[0].error, compute / 20e6 - 1, 1e-9);
  EXPECT_NEAR(c.projected_ns, compute + stream, 1);
  EXPECT_NEAR(c.error, (compute + stream) / 30e6 - 1, 1e-9);
  EXPECT_NEAR(v.mean_abs_error, std::fabs(c.error), 1e-12);
  ASSERT_EQ(v.ceilings.size(), 2u);

  std::ostringstream md, js;
  write_validation_markdown(md, v);
  write_validation_json(js, v);
  EXPECT_NE(md.str().find("| gemm.bf16 |"), std::string::npos) << md.str();
  EXPECT_NE(md.str().find(fmt::format("{:+.1f}%", c.error * 100)), std::string::npos) << md.str();
  EXPECT_EQ(ojson::parse(js.str())["schema"], "itera.projection_check/1");
}

TEST(ProjectionCheck, NothingInCommonIsAnError) {
  auto other = synthetic_set();
  other.cases[0].axes = {{"batch", "8"}};
  try {
    validate_projection(limited_twin(), other, catalogue::builtin());
    FAIL() << "expected input_error";
  } catch (const input_error& e) {
    EXPECT_NE(std::string(e.what()).find("no case was measured in both"), std::string::npos) << e.what();
  }
  other = synthetic_set();
  other.context.device = ojson::object();
  EXPECT_THROW(validate_projection(limited_twin(), other, catalogue::builtin()), input_error);
}

TEST(ProjectionCheck, AtTheTargetsMeasuredCeilings) {
  // The full card measured 800 TFLOP/s and 4.0 TB/s: scaled to those instead of the datasheet's
  // 989.5 and 4.8, the limited run projects the full card's stage times exactly.
  const auto v = validate_projection(limited_twin(), synthetic_set(), catalogue::builtin());
  const auto& c = v.cases.at(0);
  ASSERT_EQ(c.stages.size(), 2u);
  ASSERT_TRUE(c.stages[0].at_ceilings_ns && c.stages[1].at_ceilings_ns);
  EXPECT_NEAR(*c.stages[0].at_ceilings_ns, 20e6, 1);  // 40 ms x 400 / 800
  EXPECT_NEAR(*c.stages[1].at_ceilings_ns, 10e6, 1);  // 10 ms x 4.0 / 4.0
  ASSERT_TRUE(c.at_ceilings_error && v.mean_abs_error_at_ceilings);
  EXPECT_NEAR(*c.at_ceilings_error, 0, 1e-9);
  EXPECT_NEAR(*v.mean_abs_error_at_ceilings, 0, 1e-9);
}
