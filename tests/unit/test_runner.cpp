#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"

namespace itera {
namespace {

run_options quick() {
  run_options o;
  o.warmup_min_count = 2;
  o.warmup_min_time_s = 0;
  o.stop.min_samples = 5;
  o.stop.min_time_s = 0;
  o.stop.max_time_s = 0.5;
  o.quiet = true;
  return o;
}

workload_decl toy(case_fn fn) {
  workload_decl w;
  w.name = "toy";
  w.version = 3;
  w.axes = {{"n", axis_kind::integer, "1", "", {}, 1, 100}};
  w.backends["cpu"] = std::move(fn);
  return w;
}

TEST(Runner, WarmupIsCountedApartFromSamples) {
  int launches = 0;
  auto w = toy([&](case_state& st) {
    st.set_work(1000, 10, 0);
    st.exec([&] { ++launches; });
  });
  auto dev = open_backend("cpu");
  runner r(*dev, quick(), nullptr);
  const auto rec = r.run_one(w, {{"n", "1"}});
  EXPECT_EQ(rec.status, case_status::ok);
  EXPECT_EQ(rec.warmup_count, 2u);
  EXPECT_EQ(rec.device_ns.size() + rec.warmup_count, static_cast<std::size_t>(launches));
  EXPECT_EQ(rec.device_ns.size(), rec.host_ns.size());
  EXPECT_GE(rec.device_ns.size(), 5u);
  ASSERT_TRUE(rec.device_stats);
  EXPECT_EQ(rec.device_stats->count, rec.device_ns.size());
  EXPECT_EQ(rec.device_time_method, "host_clock");
  EXPECT_FALSE(rec.stop_reason.empty());
  ASSERT_NE(rec.find_metric("throughput/flops"), nullptr);
  EXPECT_GT(rec.find_metric("throughput/flops")->value, 0);
  EXPECT_NE(rec.find_metric("throughput/bytes"), nullptr);
  EXPECT_EQ(rec.workload_version, 3);
}

TEST(Runner, SamplesTimeTheWork) {
  auto w = toy([](case_state& st) { st.exec([] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }); });
  auto dev = open_backend("cpu");
  auto o = quick();
  o.stop.max_samples = 8;
  runner r(*dev, o, nullptr);
  const auto rec = r.run_one(w, {{"n", "1"}});
  ASSERT_TRUE(rec.device_stats);
  EXPECT_GE(rec.device_stats->min, 2e6);
  EXPECT_LT(rec.device_stats->median, 50e6);
  EXPECT_LE(rec.device_ns.size(), 8u);
}

TEST(Runner, FailingCaseIsRecordedAndTheRunGoesOn) {
  auto w = toy([](case_state& st) {
    if (st.get_int("n") == 2) throw std::runtime_error("kernel exploded");
    if (st.get_int("n") == 3) st.skip("format not on this card");
    st.exec([] {});
  });
  auto dev = open_backend("cpu");
  runner r(*dev, quick(), nullptr);
  const auto recs = r.run(w, expand_cases(w, {{"n", "1-4"}}));
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[0].status, case_status::ok);
  EXPECT_EQ(recs[1].status, case_status::failed);
  EXPECT_EQ(recs[1].message, "kernel exploded");
  EXPECT_FALSE(recs[1].device_stats);
  EXPECT_EQ(recs[2].status, case_status::skipped);
  EXPECT_EQ(recs[2].message, "format not on this card");
  EXPECT_EQ(recs[3].status, case_status::ok);
  EXPECT_EQ(r.failed_count(), 1u) << "a skip is not a failure";
}

TEST(Runner, CaseThatNeverTimesIsAFailure) {
  auto w = toy([](case_state&) {});
  auto dev = open_backend("cpu");
  runner r(*dev, quick(), nullptr);
  EXPECT_EQ(r.run_one(w, {{"n", "1"}}).status, case_status::failed);
}

TEST(Runner, MissingBackendIsSkippedWithTheReason) {
  workload_decl w;
  w.name = "gpu_only";
  w.axes = {{"n", axis_kind::integer, "1", "", {}, 1, 100}};
  w.backends["cuda"] = [](case_state&) {};
  auto dev = open_backend("cpu");
  runner r(*dev, quick(), nullptr);
  const auto rec = r.run_one(w, {{"n", "1"}});
  EXPECT_EQ(rec.status, case_status::skipped);
  EXPECT_NE(rec.message.find("no cpu implementation"), std::string::npos);
}

TEST(Runner, UtilisationAgainstACeilingMeasuredInTheRun) {
  auto w = toy([](case_state& st) {
    st.set_work(0, 1e6, 1e6);
    st.set_ceiling_key("copy.d2d");
    st.exec([] {});
  });
  auto dev = open_backend("cpu");
  runner r(*dev, quick(), nullptr);
  r.run_one(w, {{"n", "1"}}, "ceiling");
  ASSERT_TRUE(r.ceilings().contains("copy.d2d"));
  EXPECT_EQ(r.ceilings().at("copy.d2d").unit, "B/s");
  const auto rec = r.run_one(w, {{"n", "1"}});
  const auto* u = rec.find_metric("utilisation/copy.d2d");
  ASSERT_NE(u, nullptr);
  EXPECT_GT(u->value, 0.05);
  EXPECT_LT(u->value, 20);
}

// A sustained ceiling's sample is a batch of launches back to back (run_options::ceiling_batch_s),
// its times divided by their count, under the key with ".sustained": the card loaded as a long
// workload loads it. A ceiling and other cases: one launch a sample; cases are set against both.
TEST(Runner, SustainedCeilingSamplesAreBatchesOfLaunches) {
  std::size_t launches = 0;
  auto w = toy([&](case_state& st) {
    st.set_work(1e6, 0, 0);
    st.set_ceiling_key("gemm.fp32");
    st.exec([&] {
      ++launches;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  });
  auto dev = open_backend("cpu");
  auto o = quick();
  o.ceiling_batch_s = 0.01;
  o.stop.max_samples = 6;
  runner r(*dev, o, nullptr);
  const auto c = r.run_one(w, {{"n", "1"}}, "sustained_ceiling");
  ASSERT_EQ(c.status, case_status::ok) << c.message;
  EXPECT_TRUE(c.is_ceiling());
  ASSERT_TRUE(c.details.contains("sample.launches"));
  const std::size_t batch = std::stoul(c.details.at("sample.launches"));
  EXPECT_GE(batch, 3u) << "about 10 ms of 1 ms launches";
  EXPECT_LE(batch, 10u);
  EXPECT_EQ(launches, c.warmup_count + batch * c.device_ns.size());
  ASSERT_TRUE(c.device_stats);
  EXPECT_GE(c.device_stats->min, 1e6) << "the time a launch, not a batch";
  EXPECT_LT(c.device_stats->median, 5e6);
  ASSERT_TRUE(r.ceilings().contains("gemm.fp32.sustained"));
  EXPECT_FALSE(r.ceilings().contains("gemm.fp32"));
  EXPECT_NE(r.ceilings().at("gemm.fp32.sustained").how.find(c.details.at("sample.launches") + " launches back to back"),
            std::string::npos)
      << r.ceilings().at("gemm.fp32.sustained").how;

  launches = 0;
  const auto peak = r.run_one(w, {{"n", "1"}}, "ceiling");
  EXPECT_FALSE(peak.details.contains("sample.launches"));
  EXPECT_EQ(launches, peak.warmup_count + peak.device_ns.size()) << "a ceiling: one launch a sample";
  ASSERT_TRUE(r.ceilings().contains("gemm.fp32"));

  launches = 0;
  const auto plain = r.run_one(w, {{"n", "1"}});
  EXPECT_FALSE(plain.details.contains("sample.launches"));
  EXPECT_EQ(launches, plain.warmup_count + plain.device_ns.size()) << "a case: one launch a sample";
  EXPECT_NE(plain.find_metric("utilisation/gemm.fp32"), nullptr);
  EXPECT_NE(plain.find_metric("utilisation/gemm.fp32.sustained"), nullptr) << "against both ceilings";

  o.ceiling_batch_s = 0;
  runner one(*dev, o, nullptr);
  launches = 0;
  const auto unbatched = one.run_one(w, {{"n", "1"}}, "sustained_ceiling");
  EXPECT_FALSE(unbatched.details.contains("sample.launches"));
  EXPECT_EQ(launches, unbatched.warmup_count + unbatched.device_ns.size());
}

TEST(Runner, EveryFinishedCaseIsOnDiskBeforeTheNextStarts) {
  const auto path = std::filesystem::temp_directory_path() / "itera_runner_stream.jsonl";
  std::filesystem::remove(path);  // a leftover from an interrupted run: result_stream refuses to overwrite
  std::size_t lines_seen_by_case3 = 0;
  auto w = toy([&](case_state& st) {
    if (st.get_int("n") == 3) {
      std::ifstream in(path);
      std::string line;
      while (std::getline(in, line)) ++lines_seen_by_case3;
    }
    st.exec([] {});
  });
  auto dev = open_backend("cpu");
  {
    result_stream out(path.string());
    run_context ctx;
    ctx.backend = "cpu";
    out.write(ctx);
    runner r(*dev, quick(), &out);
    r.run(w, expand_cases(w, {{"n", "1-3"}}));
  }
  EXPECT_EQ(lines_seen_by_case3, 3u) << "context + 2 finished cases, flushed";
  const auto set = read_results(path.string());
  EXPECT_EQ(set.cases.size(), 3u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace itera
