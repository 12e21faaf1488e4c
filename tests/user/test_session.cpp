// The user API's session on the host: what a case records (stages, samples, counters, memory), that
// the results file reads back as the built-in workloads' do, and every misuse giving a clear error
// while what was recorded is kept.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "itera/core/errors.hpp"
#include "itera/core/result.hpp"
#include "itera/user/session.hpp"
#include "src/user/device.hpp"
#include "user_test_support.hpp"

namespace itera::user {
namespace {

using test::axis_of;
using test::busy_us;
using test::detail_of;
using test::host_options;
using test::metric_of;
using test::scratch;
using test::stage_of;

// Runs `fn`, expecting `E` with `part` in its message.
template <class E, class F>
void expect_error(F&& fn, const std::string& part) {
  try {
    fn();
    FAIL() << "no exception; expected one saying: " << part;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "message: " << e.what();
  }
}

TEST(user_session, case_with_nested_stages_reads_back_as_itera_results) {
  const auto path = scratch("run.jsonl");
  auto o = host_options(path.string());
  o.fields = {{"model", "toy"}};
  o.label = "nightly profile";
  {
    session s(o);
    s.begin_case({{"batch", "4"}, {"loop", "end_to_end"}}, 2);
    s.set_case_field("precision.compute", "fp32");
    for (int i = 0; i < 2 + 6; ++i) {
      auto it = s.iteration();
      {
        auto prepare = s.stage("prepare");
        auto read = s.stage("read");
        s.count(counter::bytes_read, 1000);
        busy_us(200);
      }
      {
        auto compute = s.stage("compute");
        s.count(counter::flops, 5e6);
        busy_us(1000);
      }
      s.count(counter::items, 4);
    }
    const case_record r = s.end_case();
    EXPECT_EQ(r.status, case_status::ok) << r.message;
  }
  const result_set set = read_results(path.string());
  EXPECT_EQ(set.context.schema, "itera.result/1");
  EXPECT_EQ(set.context.backend, "cpu");
  EXPECT_EQ(set.context.command, "nightly profile");  // the label, never argv (R18)
  ASSERT_EQ(set.cases.size(), 1u);
  const case_record& r = set.cases[0];
  EXPECT_EQ(r.workload, "app");
  EXPECT_EQ(r.workload_version, 1);
  EXPECT_EQ(r.backend, "cpu");
  EXPECT_EQ(r.axes_key(), "batch=4 loop=end_to_end");
  EXPECT_EQ(r.fields.at("model"), "toy");
  EXPECT_EQ(r.fields.at("precision.compute"), "fp32");
  EXPECT_EQ(r.warmup_count, 2u);
  EXPECT_GT(r.warmup_ns, 2 * 1.2e6);
  EXPECT_EQ(r.stop_reason, "user_loop");
  EXPECT_EQ(r.device_time_method, "host_clock (the session was opened without a device (device_none))");
  ASSERT_EQ(r.host_ns.size(), 6u);
  ASSERT_EQ(r.device_ns.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_GE(r.host_ns[i], 1.2e6);  // 200 us + 1 ms of work in each iteration
    EXPECT_EQ(r.device_ns[i], r.host_ns[i]);
  }
  ASSERT_TRUE(r.device_stats && r.host_stats);
  EXPECT_EQ(r.device_stats->count, 6u);

  // Stages: warm-up iterations dropped, paths nested, host time only.
  ASSERT_EQ(r.stages.size(), 3u);
  const auto* prepare = stage_of(r, "prepare");
  const auto* read = stage_of(r, "prepare/read");
  const auto* compute = stage_of(r, "compute");
  ASSERT_TRUE(prepare && read && compute);
  EXPECT_EQ(prepare->depth, 0);
  EXPECT_EQ(read->depth, 1);
  EXPECT_EQ(read->calls, 6u);
  EXPECT_EQ(compute->calls, 6u);
  EXPECT_GE(compute->host_ns / 6, 1e6);
  EXPECT_GE(read->host_ns / 6, 2e5);
  EXPECT_GE(prepare->host_ns, read->host_ns);
  EXPECT_EQ(compute->device_ns, -1);  // no stream: no device time
  EXPECT_EQ(read->bytes_read, 6000);
  EXPECT_EQ(prepare->bytes_read, 0);  // counted in the innermost stage
  EXPECT_EQ(compute->flops, 30e6);

  // Work per iteration and the rates derived from it (per repetition over the median).
  EXPECT_DOUBLE_EQ(r.bytes_read, 1000);
  EXPECT_DOUBLE_EQ(r.flops, 5e6);
  EXPECT_DOUBLE_EQ(metric_of(r, "count/items"), 24);
  const double median_s = r.device_stats->median * 1e-9;
  EXPECT_NEAR(metric_of(r, "throughput/items_per_s"), 4 / median_s, 1e-6 * 4 / median_s);
  EXPECT_NEAR(metric_of(r, "throughput/flops"), 5e6 / median_s, 1e-3);
  EXPECT_GT(metric_of(r, "memory/host_rss"), 1e6);
  EXPECT_NE(detail_of(r, "memory.device_in_use").find("not recorded"), std::string::npos);
  EXPECT_EQ(detail_of(r, "recorded_by"), "itera user API");
}

TEST(user_session, a_case_is_begun_by_the_first_scope_and_cases_must_differ) {
  session s(host_options());
  { auto st = s.stage("load"); }
  const case_record first = s.end_case();
  EXPECT_TRUE(first.axes.empty());
  EXPECT_EQ(first.stages.size(), 1u);
  EXPECT_TRUE(first.host_ns.empty());  // no iteration: no samples
  EXPECT_EQ(first.stop_reason, "");
  expect_error<usage_error>([&] { auto st = s.stage("load"); }, "a case with no axes was already recorded");
  s.begin_case({{"batch", "1"}});
  expect_error<usage_error>([&] { s.begin_case({{"batch", "2"}}); }, "a case is already open (batch=1)");
  s.end_case();
  expect_error<usage_error>([&] { s.begin_case({{"batch", "1"}}); }, "axes batch=1 was already recorded");
  expect_error<usage_error>([&] { s.begin_case({{"a", "1"}, {"a", "2"}}); }, "axis 'a' is given twice");
  expect_error<usage_error>([&] { s.end_case(); }, "no case is open");
  EXPECT_EQ(s.cases().size(), 2u);
}

TEST(user_session, scopes_used_out_of_order_give_stage_errors) {
  session s(host_options());
  auto outer = s.make_stage("outer");
  auto inner = s.make_stage("inner");
  expect_error<stage_error>([&] { outer.exit(); }, "stage 'outer' exited before it was entered");
  outer.enter();
  expect_error<stage_error>([&] { outer.enter(); }, "stage 'outer' is already open");
  inner.enter();
  expect_error<stage_error>([&] { outer.exit(); }, "stage 'outer' exited while stage 'outer/inner' inside it is still open");
  inner.exit();
  expect_error<stage_error>([&] { inner.exit(); }, "stage 'inner' exited twice");
  outer.exit();
  // Entered on one thread, exited on another.
  outer.enter();
  std::thread other([&] { expect_error<stage_error>([&] { outer.exit(); }, "entered on another thread"); });
  other.join();
  outer.exit();
  // Iterations do not nest.
  auto it = s.iteration();
  expect_error<stage_error>([&] { auto again = s.iteration(); }, "an iteration is already open");
  it.exit();
  const case_record r = s.end_case();
  EXPECT_EQ(r.status, case_status::ok) << r.message;  // the refused calls changed nothing
  EXPECT_EQ(stage_of(r, "outer")->calls, 2u);
  EXPECT_EQ(stage_of(r, "outer/inner")->calls, 1u);
  EXPECT_EQ(r.host_ns.size(), 1u);
}

TEST(user_session, a_stage_never_exited_fails_its_case_which_is_written_with_what_it_measured) {
  const auto path = scratch("open.jsonl");
  session s(host_options(path.string()));
  s.begin_case({{"batch", "1"}});
  for (int i = 0; i < 3; ++i) {
    auto it = s.iteration();
    busy_us(100);
  }
  auto forgotten = s.stage("decode");
  busy_us(300);
  expect_error<stage_error>([&] { s.end_case(); }, "stage 'decode' was never exited");
  // The scope belongs to an ended case now.
  expect_error<stage_error>([&] { forgotten.exit(); }, "still open when its case ended");
  s.begin_case({{"batch", "2"}});
  { auto ok = s.stage("decode"); }
  s.end_case();
  s.close();
  const result_set set = read_results(path.string());
  ASSERT_EQ(set.cases.size(), 2u);
  const case_record& failed = set.cases[0];
  EXPECT_EQ(failed.status, case_status::failed);
  EXPECT_NE(failed.message.find("stage 'decode' was never exited"), std::string::npos);
  EXPECT_EQ(failed.host_ns.size(), 3u);  // the samples taken are kept
  const auto* decode = stage_of(failed, "decode");
  ASSERT_NE(decode, nullptr);
  EXPECT_GE(decode->host_ns, 3e5);  // timed up to the end of the case
  EXPECT_FALSE(failed.device_stats.has_value());  // no derived figures for a failed case
  EXPECT_EQ(set.cases[1].status, case_status::ok);
}

TEST(user_session, fail_case_writes_the_case_as_failed_with_the_reason_and_what_it_measured) {
  const auto path = scratch("failed.jsonl");
  session s(host_options(path.string()));
  EXPECT_FALSE(s.case_open());
  expect_error<usage_error>([&] { s.fail_case("nothing open"); }, "no case is open to fail");
  s.begin_case({{"batch", "8"}}, 1);
  EXPECT_TRUE(s.case_open());
  for (int i = 0; i < 1 + 3; ++i) {
    auto it = s.iteration();
    auto decode = s.stage("decode");
    s.count(counter::images, 8);
    busy_us(100);
  }
  s.mark_memory("buffers", 4096);
  expect_error<usage_error>([&] { s.fail_case(""); }, "fail_case needs a reason");
  EXPECT_TRUE(s.case_open());  // refused: the case stays open, nothing written
  const case_record r = s.fail_case("RuntimeError: the decoder returned garbage");
  EXPECT_FALSE(s.case_open());
  EXPECT_EQ(r.status, case_status::failed);
  EXPECT_EQ(r.message, "RuntimeError: the decoder returned garbage");
  EXPECT_EQ(r.host_ns.size(), 3u);  // the samples taken are kept (warm-up excluded)
  EXPECT_EQ(r.warmup_count, 1u);
  EXPECT_EQ(r.stop_reason, "user_loop");
  EXPECT_EQ(stage_of(r, "decode")->calls, 3u);
  EXPECT_EQ(metric_of(r, "count/images"), 24.0);
  EXPECT_EQ(metric_of(r, "memory/mark/buffers/allocator"), 4096.0);
  EXPECT_FALSE(r.device_stats.has_value());  // no derived figures for a failed case
  EXPECT_EQ(r.find_metric("throughput/images_per_s"), nullptr);
  expect_error<usage_error>([&] { s.fail_case("again"); }, "no case is open to fail");
  expect_error<usage_error>([&] { s.begin_case({{"batch", "8"}}); }, "already recorded");  // it was recorded
  // A count begins a case with no axes: open again.
  s.count(counter::items, 1);
  EXPECT_TRUE(s.case_open());
  EXPECT_EQ(s.end_case().status, case_status::ok);
  s.close();
  EXPECT_FALSE(s.case_open());
  const result_set set = read_results(path.string());
  ASSERT_EQ(set.cases.size(), 2u);
  EXPECT_EQ(set.cases[0].status, case_status::failed);
  EXPECT_EQ(set.cases[0].message, r.message);
  EXPECT_EQ(set.cases[0].host_ns.size(), 3u);
  EXPECT_EQ(set.cases[1].status, case_status::ok);
}

TEST(user_session, fail_case_names_a_stage_left_open_after_the_reason_without_throwing) {
  session s(host_options());
  s.begin_case({{"batch", "2"}});
  { auto it = s.iteration(); }
  auto forgotten = s.stage("decode");
  busy_us(200);
  case_record r;
  EXPECT_NO_THROW(r = s.fail_case("out of memory"));
  EXPECT_EQ(r.status, case_status::failed);
  // The same path as end_case's "never exited" failure: the reason first, then the problem.
  EXPECT_EQ(r.message.rfind("out of memory; and ", 0), 0u) << r.message;
  EXPECT_NE(r.message.find("stage 'decode' was never exited"), std::string::npos) << r.message;
  const auto* decode = stage_of(r, "decode");
  ASSERT_NE(decode, nullptr);
  EXPECT_GE(decode->host_ns, 2e5);  // closed and timed up to the end of the case
  expect_error<stage_error>([&] { forgotten.exit(); }, "still open when its case ended");
  EXPECT_EQ(s.cases().size(), 1u);
}

TEST(user_session, destroying_an_outer_scope_first_closes_the_inner_one_and_fails_the_case) {
  session s(host_options());
  auto* outer = new scope(s.stage("outer"));
  scope inner = s.stage("inner");
  delete outer;  // out of order: the destructor closes both and says so
  expect_error<stage_error>([&] { inner.exit(); }, "stage 'inner' is no longer open");
  expect_error<stage_error>([&] { s.end_case(); }, "stage 'outer/inner' was still open when stage 'outer' around it");
  EXPECT_EQ(s.cases().back().status, case_status::failed);
  EXPECT_EQ(stage_of(s.cases().back(), "outer/inner")->calls, 1u);
}

TEST(user_session, misuse_of_names_counts_and_files_is_refused_with_the_fix) {
  const auto path = scratch("exists.jsonl");
  std::ofstream(path) << "keep me\n";
  expect_error<usage_error>([&] { session s(host_options(path.string())); }, "already exists");
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "keep me");  // never overwritten
  expect_error<usage_error>([&] { session s(host_options((path.parent_path() / "no/such/dir.jsonl").string())); },
                            "check that the folder exists");
  auto unnamed = host_options();
  unnamed.name.clear();
  expect_error<usage_error>([&] { session s(unnamed); }, "session name is empty");
  auto bad_device = host_options();
  bad_device.device = -7;
  expect_error<usage_error>([&] { session s(bad_device); }, "device -7");
  auto bad_clock = host_options();
  bad_clock.device_clock = "nvtx";
  expect_error<usage_error>([&] { session s(bad_clock); }, "device_clock 'nvtx': give \"auto\"");

  session s(host_options());
  expect_error<usage_error>([&] { auto st = s.stage("a/b"); }, "contains '/'");
  expect_error<usage_error>([&] { auto st = s.stage(""); }, "stage name is empty");
  expect_error<usage_error>([&] { s.count(counter::items, -1); }, "not a finite number >= 0");
  expect_error<usage_error>([&] { s.count(counter::bytes_read, std::nan("")); }, "not a finite number >= 0");
  expect_error<usage_error>([&] { s.count(static_cast<counter>(42), 1); }, "counter 42 does not exist");
  expect_error<usage_error>([&] { s.mark_memory("kv/cache"); }, "contains '/'");
  expect_error<usage_error>([&] { s.mark_memory("kv", -5); }, "negative");
  s.close();
  expect_error<usage_error>([&] { auto st = s.stage("late"); }, "is closed");
  expect_error<usage_error>([&] { s.begin_case(); }, "is closed");
}

TEST(user_session, warm_up_iterations_drop_their_stages_and_counts) {
  session s(host_options());
  s.begin_case({}, 3);
  for (int i = 0; i < 8; ++i) {
    auto it = s.iteration();
    auto st = s.stage("step");
    s.count(counter::images, 2);
    s.count(counter::bytes_written, 100);
  }
  const case_record r = s.end_case();
  EXPECT_EQ(r.warmup_count, 3u);
  EXPECT_EQ(r.host_ns.size(), 5u);
  EXPECT_EQ(stage_of(r, "step")->calls, 5u);
  EXPECT_EQ(stage_of(r, "step")->bytes_written, 500);
  EXPECT_EQ(metric_of(r, "count/images"), 10);
  EXPECT_DOUBLE_EQ(r.bytes_written, 100);
}

TEST(user_session, threads_record_into_their_own_lanes_and_the_case_merges_them) {
  session s(host_options());
  s.begin_case({{"threads", "4"}});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        auto st = s.stage("work");
        auto inner = s.stage("inner");
        s.count(counter::items, 1);
      }
    });
  for (auto& t : threads) t.join();
  const case_record r = s.end_case();
  EXPECT_EQ(r.status, case_status::ok) << r.message;
  EXPECT_EQ(stage_of(r, "work")->calls, 400u);
  EXPECT_EQ(stage_of(r, "work/inner")->calls, 400u);
  EXPECT_EQ(metric_of(r, "count/items"), 400);
  EXPECT_EQ(detail_of(r, "threads"), "4");
  // The threads have exited: a new thread takes a lane over instead of adding one.
  s.begin_case({{"threads", "1"}});
  std::thread([&] { auto st = s.stage("work"); }).join();
  EXPECT_EQ(stage_of(s.end_case(), "work")->calls, 1u);
}

TEST(user_session, long_runs_fold_spans_without_losing_any) {
  session s(host_options());
  s.begin_case();
  for (int i = 0; i < 20000; ++i) {
    auto it = s.iteration();
    auto st = s.stage("tick");
    s.count(counter::bytes_read, 8);
  }
  const case_record r = s.end_case();
  EXPECT_EQ(r.host_ns.size(), 20000u);
  EXPECT_EQ(stage_of(r, "tick")->calls, 20000u);
  EXPECT_EQ(stage_of(r, "tick")->bytes_read, 160000);
}

TEST(user_session, memory_marks_keep_peaks_per_label_and_stage_peaks_from_user_bytes) {
  session s(host_options());
  s.mark_memory("weights", 1000);
  {
    auto fwd = s.stage("forward");
    s.mark_memory("activations", 5000);
    s.mark_memory("activations", 3000);
  }
  s.mark_memory("host_only");
  const case_record r = s.end_case();
  EXPECT_EQ(metric_of(r, "memory/measured_peak"), 5000);
  EXPECT_EQ(metric_of(r, "memory/mark/weights/allocator"), 1000);
  EXPECT_EQ(metric_of(r, "memory/mark/activations/allocator"), 5000);
  EXPECT_GT(metric_of(r, "memory/mark/host_only/host_rss"), 0);
  EXPECT_EQ(r.find_metric("memory/mark/host_only/allocator"), nullptr);
  EXPECT_EQ(r.find_metric("memory/device_in_use"), nullptr);
  EXPECT_EQ(detail_of(r, "memory.device_in_use"),
            "not recorded: the session was opened without a device (device_none)");
  const auto* fwd = stage_of(r, "forward");
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(fwd->memory_peak_bytes, 5000u);
  EXPECT_EQ(fwd->memory_end_bytes, 3000u);
}

TEST(user_session, streams_on_a_host_only_session) {
  session s(host_options());
  void* not_a_real_stream = reinterpret_cast<void*>(0x1234);
  if (detail::built_with_cuda()) {
    // The handle is refused before CUDA sees it: the session has no device.
    expect_error<usage_error>([&] { auto st = s.stage("x", not_a_real_stream); }, "records host time only");
  } else {
    { auto st = s.stage("x", not_a_real_stream); }
    const case_record r = s.end_case();
    EXPECT_EQ(stage_of(r, "x")->device_ns, -1);
    EXPECT_NE(detail_of(r, "streams").find("built without CUDA"), std::string::npos);
  }
}

TEST(user_session, stream_of_another_device_names_both_devices_and_the_fix) {
  const std::string m = detail::other_device_message(1, 0);
  EXPECT_NE(m.find("CUDA device 1"), std::string::npos) << m;
  EXPECT_NE(m.find("records device 0"), std::string::npos) << m;
  EXPECT_NE(m.find("open a session on device 1"), std::string::npos) << m;
}

TEST(user_session, device_auto_without_a_usable_gpu_records_host_time_and_says_why) {
  if (detail::choose_device(device_auto, "events").cuda) GTEST_SKIP() << "a GPU is usable here: the device tests cover it";
  auto o = host_options();
  o.device = device_auto;
  session s(o);
  EXPECT_EQ(s.backend_name(), "cpu");
  EXPECT_FALSE(s.host_only_reason().empty());
  { auto it = s.iteration(); }
  const case_record r = s.end_case();
  EXPECT_EQ(r.device_time_method, "host_clock (" + s.host_only_reason() + ")");
  if (detail::built_with_cuda()) {
    o.device = 0;  // an explicit device that cannot be used is an error, not a silent fallback
    expect_error<usage_error>([&] { session t(o); }, "no usable CUDA device");
  }
}

TEST(user_session, the_results_hold_labels_and_numbers_only) {
  // R18: nothing of the process (its command line, its files) enters the results unless passed as a label.
  const auto path = scratch("private-customer-prompts.jsonl");
  {
    session s(host_options(path.string()));
    auto st = s.stage("decode");
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().find("private-customer-prompts"), std::string::npos);
  EXPECT_EQ(text.str().find("itera_user_tests"), std::string::npos);  // argv[0]
  EXPECT_NE(text.str().find("\"decode\""), std::string::npos);
}

}  // namespace
}  // namespace itera::user
