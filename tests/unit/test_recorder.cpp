#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

// A clock whose spans did the device work a test assigns them: `own[id]` is span `id`'s own
// [start, end]; ids count up from 0 in the order spans open, and restart after reset().
class fake_clock final : public device_clock {
 public:
  std::map<std::uint32_t, std::pair<double, double>> own;
  std::vector<std::uint32_t> ended;  // end_span calls, in order

  std::uint32_t begin_span() override { return m_next++; }
  void end_span(std::uint32_t span) override { ended.push_back(span); }
  std::optional<std::pair<double, double>> interval_ns(std::uint32_t span) override {
    EXPECT_LT(span, m_next) << "only spans begun since the last reset";
    const auto it = own.find(span);
    if (it == own.end()) return std::nullopt;
    return it->second;
  }
  void reset() override {
    m_next = 0;
    ++resets;
  }
  std::string_view method() const override { return "fake"; }
  int resets = 0;

 private:
  std::uint32_t m_next = 0;
};

TEST(Recorder, DeviceTimeFromTheClock) {
  fake_clock clock;
  clock.own[0] = {0, 3000};     // outer
  clock.own[1] = {1000, 2000};  // inner
  stage_recorder rec(&clock);
  {
    auto outer = rec.enter("outer");  // span 0
    auto inner = rec.enter("inner");  // span 1
  }
  EXPECT_EQ(clock.ended, (std::vector<std::uint32_t>{1, 0})) << "spans end innermost first";
  const auto stages = rec.finish();
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].device_ns, 3000);
  EXPECT_EQ(stages[1].device_ns, 1000);
  EXPECT_EQ(stages[1].device_time_method, "fake");
  EXPECT_EQ(clock.resets, 1) << "finish resets the clock";
}

TEST(Recorder, DeviceTimeSpansTheSubtree) {
  fake_clock clock;
  // Span ids in opening order:
  //   0 idle        (no own work)
  //   1   a         [100, 200]
  //   2   b         [300, 500]
  //   3 wrap        own work before and after its child: [1000, 5000]
  //   4   inner     [2000, 3000]
  //   5 lead        own work before its child only: [10000, 10500]
  //   6   late      [11000, 12000]
  //   7 root        (no own work)
  //   8   mid       (no own work)
  //   9     leaf    [20000, 20010]
  //  10 host_only   (no work at all, no children)
  clock.own = {{1, {100, 200}},       {2, {300, 500}},       {3, {1000, 5000}}, {4, {2000, 3000}},
               {5, {10000, 10500}},   {6, {11000, 12000}},   {9, {20000, 20010}}};
  stage_recorder rec(&clock);
  {
    auto idle = rec.enter("idle");
    { auto a = rec.enter("a"); }
    { auto b = rec.enter("b"); }
  }
  {
    auto wrap = rec.enter("wrap");
    auto inner = rec.enter("inner");
  }
  {
    auto lead = rec.enter("lead");
    auto late = rec.enter("late");
  }
  {
    auto root = rec.enter("root");
    auto mid = rec.enter("mid");
    auto leaf = rec.enter("leaf");
  }
  { auto host_only = rec.enter("host_only"); }
  const auto stages = rec.finish();
  std::map<std::string, double> device;
  for (const auto& s : stages) device[s.path] = s.device_ns;
  EXPECT_EQ(device["idle"], 400) << "no own work: from its first child's start to its last child's end";
  EXPECT_EQ(device["idle/a"], 100);
  EXPECT_EQ(device["idle/b"], 200);
  EXPECT_EQ(device["wrap"], 4000) << "own work before and after the child spans both";
  EXPECT_EQ(device["wrap/inner"], 1000);
  EXPECT_EQ(device["lead"], 2000) << "the child's work extends the parent's";
  EXPECT_EQ(device["lead/late"], 1000);
  EXPECT_EQ(device["root"], 10) << "a grandchild's work reaches the root";
  EXPECT_EQ(device["root/mid"], 10);
  EXPECT_EQ(device["root/mid/leaf"], 10);
  EXPECT_EQ(device["host_only"], 0) << "a clock, but no device work: 0, not -1";
}

TEST(Recorder, DeviceTimeSumsOverCalls) {
  fake_clock clock;
  // Two calls of step { kernel } : spans 0 (step), 1 (kernel), 2 (step), 3 (kernel).
  clock.own = {{1, {0, 700}}, {3, {1000, 1300}}};
  stage_recorder rec(&clock);
  for (int i = 0; i < 2; ++i) {
    auto step = rec.enter("step");
    auto kernel = rec.enter("kernel");
  }
  const auto stages = rec.finish();
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].calls, 2u);
  EXPECT_EQ(stages[0].device_ns, 1000) << "700 + 300, not the extent over both calls";
  EXPECT_EQ(stages[1].device_ns, 1000);
}

TEST(Recorder, RepetitionTimesSplitTheTotals) {
  fake_clock clock;
  // Before any repetition: warm (span 0). Repetition 0: step { kernel } twice (spans 1-4);
  // repetition 1: step { kernel } once (5, 6) and a stage of its own (7); repetition 2: nothing.
  clock.own = {{0, {0, 50}},         {2, {100, 400}}, {4, {500, 600}},
               {6, {1000, 1700}},    {7, {2000, 2005}}};
  stage_recorder rec(&clock);
  { auto warm = rec.enter("warm"); }
  rec.next_repetition();
  for (int i = 0; i < 2; ++i) {
    auto step = rec.enter("step");
    auto kernel = rec.enter("kernel");
  }
  rec.next_repetition();
  {
    auto step = rec.enter("step");
    auto kernel = rec.enter("kernel");
  }
  { auto once = rec.enter("once"); }
  rec.next_repetition();
  const auto stages = rec.finish();
  std::map<std::string, const stage_record*> by;
  for (const auto& s : stages) by[s.path] = &s;
  ASSERT_EQ(stages.size(), 4u);
  EXPECT_EQ(by["step"]->repetition_ns, (std::vector<double>{400, 700, 0})) << "every call of a repetition added";
  EXPECT_EQ(by["step/kernel"]->repetition_ns, (std::vector<double>{400, 700, 0}));
  EXPECT_EQ(by["once"]->repetition_ns, (std::vector<double>{0, 5, 0})) << "zero where the stage did not run";
  EXPECT_EQ(by["warm"]->repetition_ns, (std::vector<double>{0, 0, 0})) << "opened before the first repetition";
  EXPECT_EQ(by["warm"]->device_ns, 50) << "it still counts in the total";
  EXPECT_EQ(by["step"]->device_ns, 1100);
  EXPECT_EQ(by["step"]->per_repetition_ns(3), 400) << "the median repetition";

  { auto after = rec.enter("after"); }
  const auto next = rec.finish();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_TRUE(next[0].repetition_ns.empty()) << "finish clears the repetitions";
}

TEST(Recorder, RepetitionTimesOfHostOnlyStagesAndAfterTheLast) {
  fake_clock clock;
  clock.own = {{1, {0, 100}}};  // repetition 0: read (span 0, no device work), kernel (span 1)
  stage_recorder rec(&clock);
  rec.next_repetition();
  {
    auto read = rec.enter("read");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  { auto kernel = rec.enter("kernel"); }
  rec.end_repetitions();
  { auto kernel = rec.enter("kernel"); }  // span 2: after the last sample, in no repetition
  const auto stages = rec.finish();
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].device_ns, 0);
  ASSERT_EQ(stages[0].repetition_ns.size(), 1u);
  EXPECT_EQ(stages[0].repetition_ns[0], stages[0].host_ns) << "no device work at all: its host time";
  EXPECT_GE(stages[0].repetition_ns[0], 2e6);
  EXPECT_EQ(stages[1].calls, 2u);
  EXPECT_EQ(stages[1].repetition_ns, (std::vector<double>{100})) << "the span after end_repetitions counts in none";
}

TEST(Recorder, RepetitionTimesFallBackToHostWithoutAClock) {
  stage_recorder rec;
  rec.next_repetition();
  {
    auto s = rec.enter("sleep");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const auto stages = rec.finish();
  ASSERT_EQ(stages.size(), 1u);
  ASSERT_EQ(stages[0].repetition_ns.size(), 1u);
  EXPECT_EQ(stages[0].repetition_ns[0], stages[0].host_ns);
  EXPECT_EQ(stages[0].per_repetition_ns(1), stages[0].host_ns);
}

TEST(Recorder, PerRepetitionIsTheMeanWhereNoneWereMarked) {
  stage_record s;
  s.device_ns = 900;
  s.host_ns = 5000;
  EXPECT_EQ(s.per_repetition_ns(3), 300) << "device total over the repetitions";
  s.device_ns = -1;
  EXPECT_EQ(s.per_repetition_ns(2), 2500) << "no device clock: the host total";
  s.device_ns = 0;
  EXPECT_EQ(s.per_repetition_ns(2), 2500) << "no device work: the host total";
  EXPECT_EQ(s.per_repetition_ns(0), -1);
}

}  // namespace
}  // namespace itera
