// The stage recorder's device times on the cuda backend: each stage gets the device work it and its
// nested stages enqueued, on any stream, from the GPU's own timestamps (CUPTI external correlation),
// and a stage that enqueued nothing gets 0.
//
// Bounds come from the spin kernel: a spin of N ns runs at least N ns (it waits for %globaltimer to
// advance N), and on an H200 a 100 us spin runs 101.4 us by Nsight Compute (CUPTI reads ~0.9 us
// less; docs/perf/2026-11-29-h200-foundation.md); launches queued back to back on one stream leave
// gaps of a few microseconds. Counting host time instead (a few launches' worth, tens of us) fails
// the lower bounds; missing a nested stage's work in its parent fails them too; counting the launch
// path or other stages' work fails the upper ones.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "itera/core/recorder.hpp"

#if ITERA_WITH_CUDA
#include <cuda_runtime_api.h>

#include "itera/cuda/cuda_backend.hpp"
#include "src/kernels/spin.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(stage_clock, nested_stages_on_the_device) { GTEST_SKIP() << "built without the cuda backend"; }

#else

constexpr double spin_target_ns = 100'000;       // what each launch asks for
constexpr double spin_ncu_ns = 101'408;          // Nsight Compute's duration of that spin on an H200
constexpr double back_to_back_slack_ns = 20'000;  // gaps between queued launches, per stage
constexpr int repetitions = 5;

struct stage_times {
  std::uint64_t calls = 0;
  double device_ns = -1;
  std::string method;
};

std::map<std::string, stage_times> by_path(const std::vector<itera::stage_record>& stages) {
  std::map<std::string, stage_times> out;
  for (const auto& s : stages) out[s.path] = {s.calls, s.device_ns, s.device_time_method};
  return out;
}

class stage_clock : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto availability = itera::cuda_availability();
    if (!availability.usable) GTEST_SKIP() << "no usable CUDA device: " << availability.reason;
    m_dev = itera::make_cuda_backend(0);
    m_stream = itera::cuda::native_stream(*m_dev);
    ASSERT_NE(m_dev->clock(), nullptr) << "the cuda backend always has a stage clock";
    const auto d = m_dev->describe();
    m_timer_method = d.at("timer_method").get<std::string>();
    m_clock_method = d.at("stage_clock_method").get<std::string>();
    m_cupti = m_clock_method == "cupti_external_correlation";
    for (int i = 0; i < 3; ++i) itera::kernels::launch_spin(m_stream, 10'000);  // module load, clocks
    m_dev->synchronize();
    std::printf("timer %s, stage clock %s\n", m_timer_method.c_str(), m_clock_method.c_str());
    RecordProperty("stage_clock_method", m_clock_method);
  }

  void spin() { itera::kernels::launch_spin(m_stream, static_cast<std::uint64_t>(spin_target_ns)); }

  std::unique_ptr<itera::backend> m_dev;
  void* m_stream = nullptr;
  std::string m_timer_method, m_clock_method;
  bool m_cupti = false;
};

TEST_F(stage_clock, cupti_clock_whenever_cupti_times_the_cases) {
  if (m_timer_method == "cupti_activity_span")
    EXPECT_EQ(m_clock_method, "cupti_external_correlation") << "CUPTI times the cases, so it must time the stages";
  else
    EXPECT_EQ(m_clock_method.rfind("cuda_events", 0), 0u) << m_clock_method;
}

// outer { spin; inner { spin; spin }; spin; host_only {} }  wrapper { child { spin } }, five times.
TEST_F(stage_clock, nested_stages_get_their_own_and_their_nested_work) {
  itera::stage_recorder rec(m_dev->clock(), &m_dev->memory_tracking());
  for (int i = 0; i < repetitions; ++i) {
    {
      auto outer = rec.enter("outer");
      spin();
      {
        auto inner = rec.enter("inner");
        spin();
        spin();
      }
      spin();
      { auto host_only = rec.enter("host_only"); }
    }
    {
      auto wrapper = rec.enter("wrapper");
      auto child = rec.enter("child");
      spin();
    }
  }
  const auto stages = by_path(rec.finish());
  ASSERT_EQ(stages.size(), 5u);
  for (const auto& [path, s] : stages) {
    EXPECT_EQ(s.calls, static_cast<std::uint64_t>(repetitions)) << path;
    EXPECT_EQ(s.method, m_clock_method) << path;
    std::printf("%-18s calls %llu  device %10.2f us per call\n", path.c_str(),
                static_cast<unsigned long long>(s.calls), s.device_ns / repetitions / 1e3);
    RecordProperty(path + "_device_ns_per_call", std::to_string(s.device_ns / repetitions));
  }
  const double inner = stages.at("outer/inner").device_ns / repetitions;
  const double outer = stages.at("outer").device_ns / repetitions;
  const double wrapper = stages.at("wrapper").device_ns / repetitions;
  const double child = stages.at("wrapper/child").device_ns / repetitions;

  // Lower bounds hold for any clock that sees the work; upper ones for CUPTI's kernel timestamps
  // (CUDA events also count the launch path to an idle GPU: hundreds of us on the H200 VM).
  EXPECT_GE(inner, 2 * spin_target_ns) << "inner's two spins";
  EXPECT_GE(outer, inner + 2 * spin_target_ns) << "outer's own two spins around inner's";
  EXPECT_GE(child, spin_target_ns);
  EXPECT_GE(wrapper, child) << "no work of its own: its child's extent";
  if (m_cupti) {
    EXPECT_LE(inner, 2 * spin_ncu_ns + back_to_back_slack_ns);
    EXPECT_LE(outer, 4 * spin_ncu_ns + 2 * back_to_back_slack_ns);
    EXPECT_LE(child, spin_ncu_ns + back_to_back_slack_ns);
    EXPECT_DOUBLE_EQ(wrapper, child) << "a stage with no work of its own spans exactly its child's";
    EXPECT_EQ(stages.at("outer/host_only").device_ns, 0) << "no device work: 0";
  }
}

TEST_F(stage_clock, a_stage_without_device_work_reads_zero) {
  if (!m_cupti) GTEST_SKIP() << "CUDA events time the gap between two events even around nothing: " << m_clock_method;
  itera::stage_recorder rec(m_dev->clock(), &m_dev->memory_tracking());
  for (int i = 0; i < repetitions; ++i) {
    auto s = rec.enter("sleep");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto stages = rec.finish();
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_EQ(stages[0].calls, static_cast<std::uint64_t>(repetitions));
  EXPECT_EQ(stages[0].device_ns, 0);
  EXPECT_GE(stages[0].host_ns, repetitions * 1e6);
}

// Work on a stream other than the backend's is the stage's too.
TEST_F(stage_clock, work_on_another_stream_counts) {
  if (!m_cupti) GTEST_SKIP() << "CUDA events mark the backend's stream only: " << m_clock_method;
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  itera::stage_recorder rec(m_dev->clock(), &m_dev->memory_tracking());
  for (int i = 0; i < repetitions; ++i) {
    auto s = rec.enter("other_stream");
    itera::kernels::launch_spin(other, static_cast<std::uint64_t>(spin_target_ns));
  }
  const auto stages = rec.finish();
  ASSERT_EQ(cudaStreamDestroy(other), cudaSuccess);
  ASSERT_EQ(stages.size(), 1u);
  const double per_call = stages[0].device_ns / repetitions;
  EXPECT_GE(per_call, spin_target_ns);
  EXPECT_LE(per_call, spin_ncu_ns + back_to_back_slack_ns);
}

// As in a case: the runner's CUPTI timer region (flushes at start and at elapsed_ns) around
// launches in stages. Both read the same spins; neither takes the other's records.
TEST_F(stage_clock, stages_inside_a_timed_region) {
  auto timer = m_dev->make_timer();
  itera::stage_recorder rec(m_dev->clock(), &m_dev->memory_tracking());
  double timed_ns = 0;
  for (int i = 0; i < repetitions; ++i) {
    timer->start();
    {
      auto s = rec.enter("step");
      spin();
      spin();
    }
    timer->stop();
    timed_ns += timer->elapsed_ns();
  }
  const auto stages = rec.finish();
  ASSERT_EQ(stages.size(), 1u);
  const double stage_per_call = stages[0].device_ns / repetitions;
  const double timer_per_call = timed_ns / repetitions;
  std::printf("step: stage %.2f us, timer (%s) %.2f us per call\n", stage_per_call / 1e3,
              std::string(timer->method()).c_str(), timer_per_call / 1e3);
  EXPECT_GE(stage_per_call, 2 * spin_target_ns);
  if (m_cupti) {
    EXPECT_LE(stage_per_call, 2 * spin_ncu_ns + back_to_back_slack_ns);
    // Same records, same span: equal to the nanosecond.
    EXPECT_DOUBLE_EQ(stage_per_call, timer_per_call) << "the stage and the region read the same two kernels";
  }
}

#endif

}  // namespace
