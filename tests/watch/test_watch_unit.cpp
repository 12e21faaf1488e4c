// itera watch without the binary: the summary's arithmetic, option parsing, and starting, waiting
// for and describing processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "itera/core/errors.hpp"
#include "itera/watch/process.hpp"
#include "itera/watch/watch.hpp"

namespace {

using namespace itera;
using watch::device_summary;
using watch::sample;

sample at(double t, std::uint64_t reasons, double power_w) {
  sample s;
  s.t_s = t;
  s.clocks_event_reasons = reasons;
  s.power_w = power_w;
  return s;
}

const metric* find(const case_record& r, const std::string& name) { return r.find_metric(name); }

TEST(watch_summary, throttle_time_counts_each_samples_reasons_until_the_next_sample) {
  device_summary d(0);
  d.add(at(0.0, 0x1, 100));        // gpu_idle: benign, not throttled
  d.add(at(0.1, 0x4, 200));        // sw_power_cap holds 0.1 -> 0.2
  d.add(at(0.2, 0x4 | 0x8, 300));  // + hw_slowdown, 0.2 -> 0.3
  d.add(at(0.3, 0x0, 400));
  d.add(at(0.4, 0x4, 500));        // until the program ended at 0.45
  d.finish(0.45);
  EXPECT_NEAR(d.throttled_s(), 0.25, 1e-12);
  ASSERT_EQ(d.throttled_by_reason_s().size(), 2u);
  EXPECT_NEAR(d.throttled_by_reason_s().at("sw_power_cap"), 0.25, 1e-12);
  EXPECT_NEAR(d.throttled_by_reason_s().at("hw_slowdown"), 0.1, 1e-12);
  EXPECT_EQ(d.reasons_mask(), 0xDu);
  EXPECT_EQ(d.samples(), 5u);
  EXPECT_DOUBLE_EQ(d.power.mean(), 300.0);
  EXPECT_DOUBLE_EQ(d.power.max, 500.0);
  EXPECT_DOUBLE_EQ(d.power.min, 100.0);
  // No energy counter: the trapezoid rule over the power samples.
  std::string method;
  const auto e = d.energy_j(&method);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(method, "power_integral");
  EXPECT_NEAR(*e, 0.1 * (150 + 250 + 350 + 450), 1e-9);
}

TEST(watch_summary, a_sample_without_reasons_counts_as_not_throttled) {
  device_summary d(0);
  d.add(at(0.0, 0x4, 1));
  sample unknown;
  unknown.t_s = 0.5;  // reasons not readable
  d.add(unknown);
  d.finish(2.0);
  EXPECT_NEAR(d.throttled_s(), 0.5, 1e-12);
}

TEST(watch_summary, fill_writes_peaks_means_energy_and_the_throttle_record) {
  device_summary d(1);
  const std::uint64_t mib = 1024 * 1024;
  for (int k = 0; k < 4; ++k) {
    sample s;
    s.t_s = 0.1 * k;
    s.device = 1;
    s.memory_used_bytes = (1000 + 2000 * k) * mib;
    s.process_memory_bytes = (500 * k) * mib;
    s.processes = k == 0 ? 0 : 1;
    s.gpu_busy_pct = 25 * k;
    s.memory_busy_pct = 10;
    s.sm_clock_mhz = 1000 + 100 * k;
    s.memory_clock_mhz = 2619;
    s.power_w = 100.0 * (k + 1);
    s.energy_mj = 1000000 + 50000 * k;
    s.pcie_rx_kb_per_s = 1000 * k;
    s.pcie_tx_kb_per_s = 10;
    s.clocks_event_reasons = k == 2 ? 0x40 : 0;  // hw_thermal_slowdown
    s.temperature_c = 40 + k;
    d.add(s);
  }
  d.finish(0.35);
  case_record r;
  d.fill(r);
  const auto value = [&](const char* name) {
    const metric* m = find(r, name);
    EXPECT_NE(m, nullptr) << name;
    return m ? m->value : -1;
  };
  EXPECT_DOUBLE_EQ(value("memory/process_peak"), 1500.0 * mib);
  EXPECT_DOUBLE_EQ(value("memory/device_used_peak"), 7000.0 * mib);
  EXPECT_DOUBLE_EQ(value("memory/device_used_increase_peak"), 6000.0 * mib);
  EXPECT_DOUBLE_EQ(value("gpu/busy_mean"), 37.5);
  EXPECT_DOUBLE_EQ(value("gpu/busy_peak"), 75.0);
  EXPECT_DOUBLE_EQ(value("clock/sm_min"), 1000.0);
  EXPECT_DOUBLE_EQ(value("clock/sm_mean"), 1150.0);
  EXPECT_DOUBLE_EQ(value("power/peak"), 400.0);
  EXPECT_DOUBLE_EQ(value("energy"), 150.0);  // (1150000 - 1000000) mJ
  EXPECT_EQ(r.details.at("energy_method"), "energy_counter");
  EXPECT_DOUBLE_EQ(value("pcie/rx_peak"), 3000.0 * watch::pcie_bytes_per_kb);
  EXPECT_DOUBLE_EQ(value("pcie/rx_mean"), 1500.0 * watch::pcie_bytes_per_kb);
  EXPECT_NEAR(value("throttle/time"), 0.1, 1e-12);
  EXPECT_NEAR(value("throttle/time/hw_thermal_slowdown"), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(value("sampler/samples"), 4.0);
  EXPECT_EQ(r.details.at("interval_mean_ms"), "100.0");
  EXPECT_DOUBLE_EQ(value("temperature/peak"), 43.0);
  EXPECT_TRUE(r.throttle.available);
  EXPECT_EQ(r.throttle.reasons, std::vector<std::string>{"hw_thermal_slowdown"});
  EXPECT_EQ(r.throttle.sm_clock_mhz_min, 1000u);
  EXPECT_EQ(r.throttle.sm_clock_mhz_max, 1300u);
  EXPECT_DOUBLE_EQ(r.throttle.power_w_max, 400.0);
  EXPECT_EQ(d.processes_max, 1u);
}

TEST(watch_summary, readings_never_taken_leave_their_metrics_out) {
  device_summary d(0);
  sample s;
  s.t_s = 0;
  d.add(s);
  d.finish(1);
  case_record r;
  d.fill(r);
  EXPECT_EQ(find(r, "power/mean"), nullptr);
  EXPECT_EQ(find(r, "throttle/time"), nullptr);
  EXPECT_EQ(find(r, "energy"), nullptr);
  ASSERT_NE(find(r, "sampler/samples"), nullptr);
}

TEST(watch_sample, json_has_only_the_readings_taken) {
  sample s;
  s.t_s = 1.5;
  s.device = 2;
  s.power_w = 123.5;
  s.clocks_event_reasons = 0x5;
  const ojson j = watch::to_json(s);
  EXPECT_EQ(j["type"], "sample");
  EXPECT_EQ(j["device"], 2);
  EXPECT_EQ(j["power_w"], 123.5);
  EXPECT_FALSE(j.contains("sm_clock_mhz"));
  EXPECT_EQ(j["clocks_event_reasons_mask"], 5);
  EXPECT_EQ(j["throttle_reasons"], ojson::array({"sw_power_cap"}));  // gpu_idle is benign
}

TEST(watch_options, devices_parse_all_lists_and_refuse_out_of_range) {
  EXPECT_EQ(watch::parse_devices("all", 3), (std::vector<unsigned>{0, 1, 2}));
  EXPECT_EQ(watch::parse_devices("2,0,2", 3), (std::vector<unsigned>{2, 0}));
  EXPECT_THROW(watch::parse_devices("3", 3), usage_error);
  EXPECT_THROW(watch::parse_devices("x", 3), usage_error);
  EXPECT_THROW(watch::parse_devices("", 3), usage_error);
  EXPECT_THROW(watch::parse_devices("1,", 3), usage_error);
  try {
    watch::parse_devices("4", 2);
    FAIL();
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("NVML sees 2 GPUs (indices 0 to 1)"), std::string::npos) << e.what();
  }
}

TEST(watch_options, timeline_sits_beside_the_results) {
  EXPECT_EQ(watch::timeline_path_for("out/run.jsonl"), "out/run.timeline.jsonl");
  EXPECT_EQ(watch::timeline_path_for("run.json"), "run.json.timeline.jsonl");
}

TEST(process, signal_names_and_descriptions) {
  EXPECT_EQ(proc::signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(proc::signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(proc::signal_name(SIGRTMIN + 3).rfind("signal ", 0), 0u);
  proc::exit_info e;
  e.how = proc::exit_info::kind::signalled;
  e.signal = SIGSEGV;
  e.code = 139;
  e.core_dumped = true;
  EXPECT_EQ(e.describe(), "killed by SIGSEGV (signal 11, core dumped; exit code 139)");
}

TEST(process, exit_codes_follow_the_shell) {
  auto s = proc::spawn({"sh", "-c", "exit 3"});
  ASSERT_GT(s.pid, 0);
  auto e = proc::wait_for(s.pid);
  EXPECT_EQ(e.how, proc::exit_info::kind::exited);
  EXPECT_EQ(e.code, 3);
  s = proc::spawn({"sh", "-c", "kill -SEGV $$"});
  ASSERT_GT(s.pid, 0);
  e = proc::wait_for(s.pid);
  EXPECT_EQ(e.how, proc::exit_info::kind::signalled);
  EXPECT_EQ(e.signal, SIGSEGV);
  EXPECT_EQ(e.code, 128 + SIGSEGV);
}

TEST(process, a_program_that_cannot_start_gets_127_or_126) {
  auto s = proc::spawn({"itera-no-such-program-xyz", "--flag"});
  EXPECT_EQ(s.pid, -1);
  EXPECT_EQ(s.failure.code, 127);
  EXPECT_NE(s.failure.error.find("command not found"), std::string::npos) << s.failure.error;
  EXPECT_NE(s.failure.error.find("itera-no-such-program-xyz"), std::string::npos);

  const auto file = std::filesystem::temp_directory_path() / ("itera-not-executable-" + std::to_string(getpid()));
  std::ofstream(file) << "#!/bin/sh\nexit 0\n";
  chmod(file.c_str(), 0644);
  s = proc::spawn({file.string()});
  EXPECT_EQ(s.pid, -1);
  EXPECT_EQ(s.failure.code, 126);
  EXPECT_NE(s.failure.error.find("Permission denied"), std::string::npos) << s.failure.error;
  std::filesystem::remove(file);
}

TEST(process, tree_holds_the_child_and_its_descendants) {
  auto s = proc::spawn({"sh", "-c", "sleep 5 & sleep 5 & wait"});
  ASSERT_GT(s.pid, 0);
  std::vector<pid_t> tree;
  for (int i = 0; i < 200 && tree.size() < 3; ++i) {
    tree = proc::process_tree(s.pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(tree.size(), 3u);
  EXPECT_EQ(tree.front(), s.pid);
  EXPECT_EQ(std::count(tree.begin(), tree.end(), getpid()), 0);
  for (pid_t p : tree) kill(p, SIGKILL);
  proc::wait_for(s.pid);
  EXPECT_TRUE(proc::process_tree(s.pid).empty());
}

TEST(process, captured_runs_capture_time_out_and_name_crashes) {
  auto c = proc::run_captured({"sh", "-c", "echo out; echo err >&2; echo $ITERA_TEST_VALUE; exit 4"}, 10,
                              {{"ITERA_TEST_VALUE", "passed through"}});
  EXPECT_FALSE(c.timed_out);
  EXPECT_EQ(c.exit.code, 4);
  EXPECT_EQ(c.out, "out\npassed through\n");
  EXPECT_EQ(c.err, "err\n");

  c = proc::run_captured({"sh", "-c", "sleep 30"}, 0.3);
  EXPECT_TRUE(c.timed_out);
  EXPECT_LT(c.seconds, 5.0);
  EXPECT_EQ(c.exit.how, proc::exit_info::kind::signalled);

  c = proc::run_captured({"sh", "-c", "echo before; kill -SEGV $$"}, 10);
  EXPECT_EQ(c.exit.how, proc::exit_info::kind::signalled);
  EXPECT_EQ(c.exit.signal, SIGSEGV);
  EXPECT_EQ(c.out, "before\n");

  // A process left behind that keeps the pipes open does not hold the caller for long.
  c = proc::run_captured({"sh", "-c", "sleep 30 & echo started"}, 60);
  EXPECT_FALSE(c.timed_out);
  EXPECT_EQ(c.exit.code, 0);
  EXPECT_LT(c.seconds, 10.0);

  // A first signal before the SIGKILL: the program may say where it was (Python's faulthandler).
  c = proc::run_captured({"sh", "-c", "trap 'echo got SIGABRT; exit 7' ABRT; sleep 30 & wait"}, 0.3, {}, SIGABRT);
  EXPECT_TRUE(c.timed_out);
  EXPECT_EQ(c.out, "got SIGABRT\n");
  EXPECT_EQ(c.exit.code, 7);
  EXPECT_LT(c.seconds, 10.0);

  c = proc::run_captured({"itera-no-such-program-xyz"}, 10);
  EXPECT_EQ(c.exit.how, proc::exit_info::kind::not_started);
  EXPECT_EQ(c.exit.code, 127);
}

TEST(process, sigterm_is_passed_on_and_sigint_does_not_end_the_watcher) {
  auto s = proc::spawn({"sleep", "30"});
  ASSERT_GT(s.pid, 0);
  proc::exit_info e;
  {
    proc::forward_signals forward(s.pid);
    raise(SIGINT);  // the terminal's Ctrl-C reaches the child by itself; the watcher stays
    EXPECT_EQ(proc::forward_signals::last_signal(), SIGINT);
    EXPECT_EQ(kill(s.pid, 0), 0) << "the child must still run";
    raise(SIGTERM);  // passed on
    e = proc::wait_for(s.pid);
  }
  EXPECT_EQ(e.how, proc::exit_info::kind::signalled);
  EXPECT_EQ(e.signal, SIGTERM);
}

}  // namespace
