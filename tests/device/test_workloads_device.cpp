// gemm and transfer on the cuda backend: every format the card supports runs and matches the fp64
// reference; every transfer direction runs through the runner, verified, with a bandwidth.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "itera/core/runner.hpp"
#include "itera/core/workload.hpp"
#include "workloads/gemm/gemm.hpp"

#if ITERA_WITH_CUDA
#include "itera/cuda/cuda_backend.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(cuda_workloads, gemm_and_transfer) { GTEST_SKIP() << "built without the cuda backend"; }

#else

class cuda_workloads : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto availability = itera::cuda_availability();
    if (!availability.usable) GTEST_SKIP() << "no usable CUDA device: " << availability.reason;
    m_dev = itera::make_cuda_backend(0);
    m_options.quiet = true;
    m_options.warmup_min_time_s = 0.01;
    m_options.stop.min_samples = 10;
    m_options.stop.min_time_s = 0.05;
    m_options.stop.max_time_s = 1.0;
  }

  itera::case_record run(const std::string& workload, const itera::axis_overrides& overrides) {
    itera::runner r(*m_dev, m_options, nullptr);
    const auto& w = itera::builtin_workloads().get(workload);
    const auto cases = itera::expand_cases(w, overrides);
    EXPECT_EQ(cases.size(), 1u);
    return r.run_one(w, cases.at(0));
  }

  int compute_capability_x10() const { return m_dev->describe().at("compute_capability_x10").get<int>(); }

  std::unique_ptr<itera::backend> m_dev;
  itera::run_options m_options;
};

TEST_F(cuda_workloads, every_supported_gemm_format_matches_the_reference) {
  const int cc = compute_capability_x10();
  for (const auto& t : itera::gemm::all_formats()) {
    const auto probe = itera::gemm::probe_cuda(*m_dev, t.id);
    std::printf("%-10s ran=%d passed=%d error=%.3g tolerance=%.3g  %s\n", std::string(t.name).c_str(), probe.ran,
                probe.passed, probe.error, probe.tolerance, probe.message.c_str());
    RecordProperty("probe_" + std::string(t.name), probe.ran ? std::to_string(probe.error) : probe.message);
    if (cc >= t.min_compute_capability) {
      EXPECT_TRUE(probe.ran) << t.name << ": " << probe.message;
      EXPECT_TRUE(probe.passed) << t.name << ": error " << probe.error << ", " << probe.message;
    } else {
      EXPECT_FALSE(probe.ran) << t.name;
      EXPECT_NE(probe.message.find("compute capability"), std::string::npos) << probe.message;
    }
  }
}

TEST_F(cuda_workloads, gemm_case_is_verified_then_timed) {
  const auto r = run("gemm", {{"M", "1024"}, {"N", "1024"}, {"K", "1024"}, {"format", "bf16"}});
  ASSERT_EQ(r.status, itera::case_status::ok) << r.message;
  EXPECT_TRUE(r.check.checked && r.check.passed) << r.check.error;
  ASSERT_TRUE(r.device_stats.has_value());
  EXPECT_GT(r.device_stats->median, 0);
  const auto* flops = r.find_metric("throughput/flops");
  ASSERT_NE(flops, nullptr);
  EXPECT_GT(flops->value, 0);
  for (const char* field : {"precision.input_a", "precision.input_b", "precision.output", "precision.compute",
                            "precision.accumulate", "library"})
    EXPECT_TRUE(r.fields.count(field)) << field;
  // The algorithm autotuning chose is how it ran, not recipe: a detail, so compare never refuses on it.
  for (const char* detail : {"algo.heuristic_rank", "algo.count_tried"}) EXPECT_TRUE(r.details.count(detail)) << detail;
  EXPECT_EQ(r.device_time_method, m_dev->describe().at("timer_method").get<std::string>());
  std::printf("gemm bf16 1024^3: %.1f TFLOP/s by %s\n", flops->value / 1e12, r.device_time_method.c_str());
}

TEST_F(cuda_workloads, gemm_shape_the_kernels_reject_is_skipped_with_the_rule) {
  const auto r = run("gemm", {{"M", "1000"}, {"N", "1024"}, {"K", "1024"}, {"format", "fp8_e4m3"}});
  EXPECT_EQ(r.status, itera::case_status::skipped) << r.message;
  if (compute_capability_x10() >= itera::gemm::traits(itera::gemm::format::fp8_e4m3).min_compute_capability)
    EXPECT_NE(r.message.find("multiples of 16"), std::string::npos) << r.message;
}

TEST_F(cuda_workloads, gemm_that_does_not_fit_is_skipped) {
  const auto r = run("gemm", {{"M", "1048576"}, {"N", "1048576"}, {"K", "1048576"}, {"format", "fp32"}});
  EXPECT_EQ(r.status, itera::case_status::skipped) << r.message;
  EXPECT_NE(r.message.find("does not fit"), std::string::npos) << r.message;
}

TEST_F(cuda_workloads, every_transfer_direction_runs_verified) {
  const std::pair<const char*, const char*> combos[] = {
      {"h2d", "pinned"}, {"h2d", "pageable"}, {"d2h", "pinned"}, {"d2h", "pageable"}, {"d2d", "device"}};
  for (const auto& [direction, memory] : combos) {
    const auto r = run("transfer", {{"direction", direction}, {"memory", memory}, {"bytes", "67108864"}});
    ASSERT_EQ(r.status, itera::case_status::ok) << direction << " " << memory << ": " << r.message;
    EXPECT_TRUE(r.check.checked && r.check.passed) << direction << " " << memory;
    const auto* bandwidth = r.find_metric("throughput/bytes");
    ASSERT_NE(bandwidth, nullptr) << direction << " " << memory;
    EXPECT_GT(bandwidth->value, 0);
    const auto* link = r.find_metric("link/theoretical");
    std::printf("transfer %s %-8s 64 MiB: %.2f GB/s (link %s) by %s\n", direction, memory, bandwidth->value / 1e9,
                link ? std::to_string(link->value / 1e9).c_str() : "unknown", r.device_time_method.c_str());
  }
}

#endif

}  // namespace
