// The user API's runner on the host: the offline sweep with the stopping rule, the server's Poisson
// load with latency from the scheduled arrival (a backlog shows in the tail), the single stream,
// tokens and targets, and a callback that throws: its case is written as failed with what it
// measured, and the run goes on.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "itera/core/errors.hpp"
#include "itera/user/runner.hpp"
#include "user_test_support.hpp"

namespace itera::user {
namespace {

using test::axis_of;
using test::busy_us;
using test::host_options;
using test::metric_of;
using test::scratch;
using test::stage_of;

template <class F>
std::string usage_message(F&& fn) {
  try {
    fn();
  } catch (const usage_error& e) {
    return e.what();
  }
  return "(no usage_error)";
}

TEST(user_runner, offline_sweep_times_each_batch_until_the_stopping_rule_holds) {
  session s(host_options());
  offline_options o;
  o.batches = {1, 3};
  o.axes = {{"model", "toy"}};
  o.stop.min_samples = 10;
  o.stop.min_time_s = 0.02;
  o.stop.max_time_s = 0.3;
  o.warmup_min_count = 2;
  o.warmup_min_time_s = 0;
  std::atomic<int> warm_calls{0};
  const auto summary = run_offline(s, o, [&](call& c) {
    if (c.warmup()) ++warm_calls;
    auto st = s.stage("forward");
    busy_us(200.0 * static_cast<double>(c.batch()));
    s.count(counter::images, static_cast<double>(c.batch()));
  });
  ASSERT_EQ(summary.cases.size(), 2u);
  EXPECT_EQ(summary.failed, 0u);
  for (std::size_t i = 0; i < 2; ++i) {
    const case_record& r = summary.cases[i];
    const double batch = i == 0 ? 1 : 3;
    EXPECT_EQ(r.status, case_status::ok) << r.message;
    EXPECT_EQ(r.axes_key(), i == 0 ? "model=toy scenario=offline batch=1" : "model=toy scenario=offline batch=3");
    EXPECT_GE(r.warmup_count, 2u);
    EXPECT_GE(r.host_ns.size(), 10u);
    EXPECT_TRUE(r.stop_reason == "converged" || r.stop_reason == "max_time" || r.stop_reason == "max_samples")
        << r.stop_reason;
    EXPECT_GE(r.device_stats->median, 200e3 * batch);
    EXPECT_EQ(stage_of(r, "forward")->calls, r.host_ns.size());  // warm-up stages dropped
    const double per_call_s = r.device_stats->median * 1e-9;
    EXPECT_NEAR(metric_of(r, "throughput/items_per_s"), batch / per_call_s, 1e-6 * batch / per_call_s);
    EXPECT_NEAR(metric_of(r, "throughput/images_per_s"), batch / per_call_s, 1e-6 * batch / per_call_s);
    EXPECT_EQ(metric_of(r, "count/items"), batch * static_cast<double>(r.host_ns.size()));
  }
  EXPECT_EQ(static_cast<std::size_t>(warm_calls.load()), summary.cases[0].warmup_count + summary.cases[1].warmup_count);
}

TEST(user_runner, server_latency_runs_from_the_scheduled_arrival) {
  session s(host_options());
  server_options o;
  o.rates = {20, 2000};  // a request every 50 ms on average; then every 0.5 ms against 3 ms of service
  o.requests = 24;
  o.warmup_requests = 1;
  const auto summary = run_server(s, o, [&](call& c) {
    auto st = s.stage("serve");
    EXPECT_GE(c.scheduled_s(), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  });
  ASSERT_EQ(summary.cases.size(), 2u);
  const case_record& idle = summary.cases[0];
  const case_record& busy = summary.cases[1];
  for (const auto* r : {&idle, &busy}) {
    EXPECT_EQ(r->status, case_status::ok) << r->message;
    EXPECT_EQ(r->host_ns.size(), 24u);
    EXPECT_EQ(r->device_time_method, "host_steady_clock_scheduled_arrival_to_completion");
    EXPECT_EQ(r->stop_reason, "scenario");
    EXPECT_EQ(r->warmup_count, 1u);
    EXPECT_EQ(axis_of(*r, "scenario"), "server");
    EXPECT_EQ(axis_of(*r, "batch"), "1");
    EXPECT_EQ(axis_of(*r, "requests"), "24");
    EXPECT_EQ(stage_of(*r, "serve")->calls, 24u);  // the warm-up request's stage is dropped
    EXPECT_EQ(metric_of(*r, "load/requests"), 24);
    EXPECT_EQ(metric_of(*r, "load/completed"), 24);
    EXPECT_GE(metric_of(*r, "latency/e2e/p50"), 0.003);
    EXPECT_EQ(r->find_metric("latency/ttft/p50"), nullptr);  // no tokens reported
  }
  EXPECT_EQ(axis_of(idle, "rate"), "20");
  EXPECT_EQ(axis_of(busy, "rate"), "2000");
  // Idle: each request is served on arrival. Busy: requests queue behind each other, and their
  // latency counts the wait from the scheduled arrival (24 requests x 3 ms of service against
  // ~12 ms of arrivals leaves the last ones waiting tens of milliseconds).
  EXPECT_LT(metric_of(idle, "latency/e2e/p50"), 0.025);
  EXPECT_GT(metric_of(busy, "latency/e2e/p99"), 0.030);
  EXPECT_GT(metric_of(busy, "latency/queue/p99"), 0.025);
  EXPECT_GT(metric_of(busy, "load/offered_rate"), metric_of(busy, "load/achieved_rate"));
  EXPECT_EQ(metric_of(busy, "load/meets_targets"), 1);  // no targets set
}

TEST(user_runner, tokens_give_ttft_tpot_and_output_throughput_and_targets_give_goodput) {
  session s(host_options());
  server_options o;
  o.rates = {50};
  o.concurrency = {2};
  o.requests = 12;
  o.targets.ttft_s = 1.0;
  o.targets.tpot_s = 1.0;
  o.targets.e2e_s = 1.0;
  const auto served = run_server(s, o, [&](call& c) {
    for (int t = 0; t < 5; ++t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      c.token();
    }
  });
  ASSERT_EQ(served.cases.size(), 1u);
  const case_record& r = served.cases[0];
  ASSERT_EQ(r.status, case_status::ok) << r.message;
  EXPECT_EQ(axis_of(r, "batch"), "2");
  EXPECT_EQ(axis_of(r, "ttft_ms"), "1000");
  EXPECT_GE(metric_of(r, "latency/ttft/p50"), 0.001);
  EXPECT_GE(metric_of(r, "latency/tpot/p50"), 0.0009);
  EXPECT_LT(metric_of(r, "latency/tpot/p50"), 0.02);
  EXPECT_GE(metric_of(r, "latency/itl/p50"), 0.0009);
  EXPECT_EQ(metric_of(r, "count/output_tokens"), 60);
  EXPECT_GT(metric_of(r, "throughput/output_tokens_per_s"), 0);
  EXPECT_EQ(metric_of(r, "load/meets_targets"), 1);
  EXPECT_EQ(metric_of(r, "load/meeting_targets"), 12);
  EXPECT_GT(metric_of(r, "load/goodput"), 0);

  // A 1 us end-to-end target: nobody meets it.
  single_stream_options tight;
  tight.requests = 5;
  tight.targets.e2e_s = 1e-6;
  const auto single = run_single_stream(s, tight, [&](call& c) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    c.token(2);
  });
  const case_record& q = single.cases.at(0);
  ASSERT_EQ(q.status, case_status::ok) << q.message;
  EXPECT_EQ(axis_of(q, "scenario"), "single_stream");
  EXPECT_EQ(q.host_ns.size(), 5u);
  EXPECT_EQ(q.device_time_method, "host_steady_clock_issue_to_completion");
  EXPECT_EQ(axis_of(q, "batch"), "1");
  EXPECT_EQ(q.find_metric("load/meets_targets"), nullptr);  // a single stream has no rate to hold
  EXPECT_EQ(metric_of(q, "load/meeting_targets"), 0);
  EXPECT_EQ(metric_of(q, "load/goodput"), 0);
  EXPECT_EQ(q.find_metric("latency/queue/p50"), nullptr);
  EXPECT_EQ(metric_of(q, "count/output_tokens"), 10);
}

TEST(user_runner, a_callback_that_throws_fails_its_case_which_keeps_its_samples_and_the_run_goes_on) {
  const auto path = scratch("fail.jsonl");
  session s(host_options(path.string()));
  server_options o;
  o.rates = {200, 400};
  o.requests = 20;
  const auto summary = run_server(s, o, [&](call& c) {
    busy_us(200);
    if (c.index() == 7 && s.cases().empty()) throw std::runtime_error("out of memory (simulated)");
  });
  ASSERT_EQ(summary.cases.size(), 2u);
  EXPECT_EQ(summary.failed, 1u);
  const case_record& failed = summary.cases[0];
  EXPECT_EQ(failed.status, case_status::failed);
  EXPECT_NE(failed.message.find("the callback failed on request 7"), std::string::npos) << failed.message;
  EXPECT_NE(failed.message.find("out of memory (simulated)"), std::string::npos) << failed.message;
  EXPECT_NE(failed.message.find("of 20 requests had completed"), std::string::npos) << failed.message;
  EXPECT_EQ(failed.host_ns.size(), 7u);  // requests 0 to 6 completed, one at a time
  EXPECT_FALSE(failed.device_stats.has_value());
  EXPECT_NE(summary.first_failure.find("rate=200"), std::string::npos) << summary.first_failure;
  EXPECT_EQ(summary.cases[1].status, case_status::ok) << summary.cases[1].message;

  offline_options off;
  off.batches = {2, 4};
  off.stop.max_time_s = 0.1;
  off.stop.min_time_s = 0.01;
  off.warmup_min_count = 3;
  off.warmup_min_time_s = 0;
  int calls = 0;
  const auto offline = run_offline(s, off, [&](call& c) {
    busy_us(100);
    if (c.batch() == 2 && ++calls == 12) throw std::runtime_error("bad input batch");
  });
  EXPECT_EQ(offline.failed, 1u);
  EXPECT_EQ(offline.cases[0].status, case_status::failed);
  EXPECT_NE(offline.cases[0].message.find("the callback failed on call 11 (measured): bad input batch"), std::string::npos)
      << offline.cases[0].message;
  EXPECT_EQ(offline.cases[0].host_ns.size(), 11u - offline.cases[0].warmup_count);
  EXPECT_EQ(offline.cases[1].status, case_status::ok);
  s.close();

  const result_set set = read_results(path.string());
  ASSERT_EQ(set.cases.size(), 4u);
  EXPECT_EQ(set.cases[0].status, case_status::failed);
  EXPECT_EQ(set.cases[0].host_ns.size(), 7u);
  EXPECT_EQ(set.cases[3].status, case_status::ok);
}

TEST(user_runner, a_scope_left_open_by_the_callback_fails_the_call) {
  session s(host_options());
  offline_options o;
  o.batches = {1};
  o.warmup_min_count = 1;
  o.warmup_min_time_s = 0;
  scope leaked = s.make_stage("leaked");
  const auto r = run_offline(s, o, [&](call&) { leaked.enter(); });
  ASSERT_EQ(r.failed, 1u);
  EXPECT_NE(r.cases[0].message.find("the iteration exited while stage 'leaked' inside it is still open"),
            std::string::npos)
      << r.cases[0].message;
}

TEST(user_runner, options_that_cannot_run_are_refused_before_anything_runs) {
  session s(host_options());
  const callback nothing = [](call&) {};
  offline_options off;
  EXPECT_NE(usage_message([&] { run_offline(s, off, nothing); }).find("batches is empty"), std::string::npos);
  off.batches = {0};
  EXPECT_NE(usage_message([&] { run_offline(s, off, nothing); }).find("batch size 0 is not positive"), std::string::npos);
  off.batches = {1};
  off.stop.min_samples = 50;
  off.stop.max_samples = 5;
  EXPECT_NE(usage_message([&] { run_offline(s, off, nothing); }).find("min_samples 50 is above"), std::string::npos);
  off.stop = {};
  off.axes = {{"batch", "8"}};
  EXPECT_NE(usage_message([&] { run_offline(s, off, nothing); }).find("'batch' is one the runner sets"), std::string::npos);
  EXPECT_NE(usage_message([&] { run_offline(s, offline_options{{1}}, callback{}); }).find("no callback"), std::string::npos);

  server_options srv;
  EXPECT_NE(usage_message([&] { run_server(s, srv, nothing); }).find("rates is empty"), std::string::npos);
  srv.rates = {-1};
  EXPECT_NE(usage_message([&] { run_server(s, srv, nothing); }).find("rate -1 is not a positive number"), std::string::npos);
  srv.rates = {10};
  srv.concurrency = {0};
  EXPECT_NE(usage_message([&] { run_server(s, srv, nothing); }).find("concurrency 0 is outside"), std::string::npos);
  srv.concurrency = {1};
  srv.targets.tpot_s = -0.5;
  EXPECT_NE(usage_message([&] { run_server(s, srv, nothing); }).find("target tpot_s"), std::string::npos);

  s.begin_case({{"mine", "1"}});
  single_stream_options one;
  EXPECT_NE(usage_message([&] { run_single_stream(s, one, nothing); }).find("a case is open"), std::string::npos);
  s.end_case();
  EXPECT_EQ(s.cases().size(), 1u);  // nothing else ran
}

TEST(user_runner, latency_targets_on_tokens_need_tokens) {
  session s(host_options());
  single_stream_options o;
  o.requests = 3;
  o.targets.ttft_s = 0.5;
  const auto r = run_single_stream(s, o, [](call&) {});
  ASSERT_EQ(r.failed, 1u);
  EXPECT_NE(r.cases[0].message.find("need the callback to report tokens"), std::string::npos) << r.cases[0].message;
  EXPECT_EQ(r.cases[0].host_ns.size(), 3u);
}

}  // namespace
}  // namespace itera::user
