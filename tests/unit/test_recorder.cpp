#include <gtest/gtest.h>

#include <thread>

#include "itera/core/recorder.hpp"

namespace itera {
namespace {

TEST(Recorder, NestedSpansAggregateByPath) {
  stage_recorder rec;
  for (int i = 0; i < 3; ++i) {
    auto step = rec.enter("decode");
    {
      auto attn = rec.enter("attention");
      attn.add_bytes_read(100);
      attn.add_flops(1000);
    }
    {
      auto mlp = rec.enter("mlp");
      mlp.add_bytes_written(7);
    }
    EXPECT_EQ(rec.open_depth(), 1u);
  }
  EXPECT_EQ(rec.open_depth(), 0u);
  const auto stages = rec.finish();
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_EQ(stages[0].path, "decode");
  EXPECT_EQ(stages[0].depth, 0);
  EXPECT_EQ(stages[1].path, "decode/attention");
  EXPECT_EQ(stages[1].depth, 1);
  EXPECT_EQ(stages[2].path, "decode/mlp");
  for (const auto& s : stages) EXPECT_EQ(s.calls, 3u);
  EXPECT_EQ(stages[1].bytes_read, 300);
  EXPECT_EQ(stages[1].flops, 3000);
  EXPECT_EQ(stages[2].bytes_written, 21);
  EXPECT_EQ(stages[0].device_ns, -1) << "no device clock: no device time";
  EXPECT_GE(stages[0].host_ns, stages[1].host_ns + stages[2].host_ns) << "a parent spans its children";
  EXPECT_TRUE(rec.finish().empty()) << "finish clears";
}

TEST(Recorder, HostTimeCoversTheSpan) {
  stage_recorder rec;
  {
    auto s = rec.enter("sleep");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto stages = rec.finish();
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_GE(stages[0].host_ns, 20e6);
  EXPECT_LT(stages[0].host_ns, 200e6);
}

TEST(Recorder, EachStageSeesItsOwnMemoryPeak) {
  memory_tracker mem;
  mem.on_alloc(1000);  // held before any stage
  stage_recorder rec(nullptr, &mem);
  {
    auto load = rec.enter("load");
    mem.on_alloc(5000);
    mem.on_free(5000);
  }
  {
    auto run = rec.enter("run");
    {
      auto inner = rec.enter("inner");
      mem.on_alloc(200);
    }
    mem.on_free(200);
  }
  const auto stages = rec.finish();
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_EQ(stages[0].memory_peak_bytes, 6000u) << "load";
  EXPECT_EQ(stages[1].memory_peak_bytes, 1200u) << "run: not load's 6000";
  EXPECT_EQ(stages[2].memory_peak_bytes, 1200u) << "run/inner";
  EXPECT_EQ(stages[2].memory_end_bytes, 1200u);
  EXPECT_EQ(stages[1].memory_end_bytes, 1000u);
  EXPECT_EQ(mem.peak(), 6000u) << "the global high-water mark is restored";
}

TEST(Recorder, CloseEndsASpanEarlyOnce) {
  stage_recorder rec;
  auto s = rec.enter("a");
  s.close();
  s.close();
  EXPECT_EQ(rec.open_depth(), 0u);
  EXPECT_EQ(rec.finish().size(), 1u);
}

// A clock whose marks are 1 us apart: device time of a span = (marks between) us.
class fake_clock final : public device_clock {
 public:
  std::uint32_t mark() override { return m_next++; }
  double elapsed_ns(std::uint32_t from, std::uint32_t to) override { return (to - from) * 1000.0; }
  void reset() override { m_next = 0; }
  std::string_view method() const override { return "fake"; }

 private:
  std::uint32_t m_next = 0;
};

TEST(Recorder, DeviceTimeFromTheClock) {
  fake_clock clock;
  stage_recorder rec(&clock);
  {
    auto outer = rec.enter("outer");  // mark 0
    auto inner = rec.enter("inner");  // mark 1, closes at 2
  }                                   // outer closes at 3
  const auto stages = rec.finish();
  EXPECT_EQ(stages[0].device_ns, 3000);
  EXPECT_EQ(stages[1].device_ns, 1000);
  EXPECT_EQ(stages[1].device_time_method, "fake");
}

}  // namespace
}  // namespace itera
