// Smoke runs of every built-in workload on the cpu backend at tiny sizes (nvbench runs its examples
// with tiny limits): each case verifies against its reference and produces numbers.
#include <gtest/gtest.h>

#include "itera/core/runner.hpp"
#include "itera/suite.hpp"
#include "tests/support/quick_run.hpp"
#include "workloads/gemm/gemm.hpp"

namespace itera {
namespace {

TEST(CpuWorkloads, GemmVerifiesAndTimes) {
  auto dev = open_backend("cpu");
  runner r(*dev, test::quick_run_options(), nullptr);
  const auto& w = builtin_workloads().get("gemm");
  const auto recs = r.run(w, expand_cases(w, {{"M", "33,64"}, {"N", "17"}, {"K", "40"}, {"format", "fp32,bf16,fp8_e4m3"}}));
  ASSERT_EQ(recs.size(), 6u);
  for (const auto& rec : recs) {
    const auto format = rec.axes.back().second;
    if (format == "fp8_e4m3") {
      EXPECT_EQ(rec.status, case_status::skipped) << rec.message;
      EXPECT_NE(rec.message.find("cuda backend"), std::string::npos);
      continue;
    }
    ASSERT_EQ(rec.status, case_status::ok) << rec.message;
    EXPECT_TRUE(rec.check.checked && rec.check.passed) << rec.check.error;
    EXPECT_LT(rec.check.error, 1e-5) << "fp32 arithmetic on the cpu";
    EXPECT_EQ(rec.fields.at("precision.accumulate"), "fp32");
    EXPECT_EQ(rec.flops, 2.0 * std::stod(rec.axes[0].second) * 17 * 40);
    EXPECT_NE(rec.find_metric("throughput/flops"), nullptr);
  }
  EXPECT_EQ(recs[1].fields.at("precision.input_a"), "bf16 values in fp32 storage") << "R6: what really ran";
}

TEST(CpuWorkloads, TransferEveryDirection) {
  auto dev = open_backend("cpu");
  runner r(*dev, test::quick_run_options(), nullptr);
  const auto& w = builtin_workloads().get("transfer");
  const auto recs = r.run(w, expand_cases(w, {{"bytes", "4Ki,1Mi"}}));
  ASSERT_EQ(recs.size(), 10u);
  for (const auto& rec : recs) {
    ASSERT_EQ(rec.status, case_status::ok) << rec.message;
    EXPECT_TRUE(rec.check.passed);
    const auto* bw = rec.find_metric("throughput/bytes");
    ASSERT_NE(bw, nullptr);
    EXPECT_GT(bw->value, 1e6);
  }
}

TEST(CpuWorkloads, CeilingsAreMeasuredAndUsed) {
  auto dev = open_backend("cpu");
  runner r(*dev, test::quick_run_options(), nullptr);
  measure_ceilings(r, {"fp32"});
  EXPECT_TRUE(r.ceilings().contains("copy.d2d"));
  EXPECT_TRUE(r.ceilings().contains("copy.h2d.pinned"));
  EXPECT_TRUE(r.ceilings().contains("gemm.fp32"));
  const auto& w = builtin_workloads().get("gemm");
  const auto rec = r.run_one(w, expand_cases(w, {{"M", "128"}, {"N", "128"}, {"K", "128"}, {"format", "fp32"}})[0]);
  EXPECT_NE(rec.find_metric("utilisation/gemm.fp32"), nullptr);
}

TEST(CpuWorkloads, FormatsTableNeverClaimsWithoutARun) {
  auto dev = open_backend("cpu");
  const auto table = formats_table(dev.get());
  ASSERT_EQ(table.size(), gemm::all_formats().size());
  for (const auto& row : table) EXPECT_TRUE(row.at("runs").is_null()) << row.dump();
}

}  // namespace
}  // namespace itera
