// itera watch end to end: the binary against the fake libnvidia-ml (fake_nvml.cpp), checking the
// sampled numbers against the script, the summary against the samples, and the exit codes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "e2e_support.hpp"
#include "fake_nvml_script.hpp"
#include "itera/core/result.hpp"

namespace {

using namespace itera;
using namespace itera::test;
constexpr double mib = 1024.0 * 1024.0;

env_list fake_env(env_list extra = {}) {
  extra.emplace_back("ITERA_NVML_LIBRARY", ITERA_FAKE_NVML);
  return extra;
}

std::vector<ojson> read_lines(const std::string& path) {
  std::vector<ojson> lines;
  std::istringstream in(read_text(path));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(ojson::parse(line));
  return lines;
}

double metric_value(const case_record& r, const std::string& name) {
  const metric* m = r.find_metric(name);
  EXPECT_NE(m, nullptr) << "no metric " << name;
  return m != nullptr ? m->value : -1;
}

bool throttling(const ojson& s) {
  return s.contains("clocks_event_reasons_mask") && (s["clocks_event_reasons_mask"].get<std::uint64_t>() & ~0x3ULL) != 0;
}

TEST(watch_e2e, samples_follow_the_script_and_the_summary_follows_the_samples) {
  scratch d;
  const auto r = run_itera({"watch", "--interval", "20", "--out", d / "w.jsonl", "--", "sh", "-c", "sleep 1 & wait"},
                           fake_env());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("exited with code 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sw_power_cap"), std::string::npos) << r.err;

  const result_set set = read_results(d / "w.jsonl");
  EXPECT_EQ(set.context.backend, "cuda");
  EXPECT_EQ(set.context.device.value("name", ""), fake_nvml::device_name);
  EXPECT_EQ(set.context.device.value("nvml_index", 99), 0);
  EXPECT_EQ(set.context.software.value("driver", ""), fake_nvml::driver_version);
  EXPECT_EQ(set.context.software.value("cuda_driver", ""), "12.4");
  EXPECT_NE(set.context.command.find("sleep 1 & wait"), std::string::npos) << set.context.command;
  ASSERT_EQ(set.cases.size(), 1u);
  const case_record& c = set.cases.front();
  EXPECT_EQ(c.workload, "watch");
  EXPECT_EQ(c.status, case_status::ok);
  EXPECT_EQ(c.axes, (std::vector<std::pair<std::string, std::string>>{{"device", "0"}}));
  EXPECT_EQ(c.fields.at("command"), "sh -c 'sleep 1 & wait'");
  EXPECT_EQ(c.details.at("timeline"), "w.timeline.jsonl");
  EXPECT_EQ(c.details.at("exit"), "exited with code 0");

  const auto lines = read_lines(d / "w.timeline.jsonl");
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines.front()["type"], "header");
  EXPECT_EQ(lines.front()["schema"], "itera.watch_timeline/1");
  EXPECT_EQ(lines.back()["type"], "end");
  EXPECT_EQ(lines.back()["exit_code"], 0);
  const double end_s = lines.back()["t_s"].get<double>();
  EXPECT_GE(end_s, 1.0);
  const std::vector<ojson> samples(lines.begin() + 1, lines.end() - 1);
  // Enough samples to have passed every row of the script, throttled ones included.
  ASSERT_GE(samples.size(), fake_nvml::rows + 1) << "too few samples in 1 s at 20 ms";

  bool grandchild_seen = false;
  for (std::size_t k = 0; k < samples.size(); ++k) {
    const ojson& s = samples[k];
    const auto& row = fake_nvml::script[std::min<std::size_t>(k, fake_nvml::rows - 1)];
    SCOPED_TRACE("sample " + std::to_string(k) + ": " + s.dump());
    EXPECT_EQ(s["device"], 0);
    EXPECT_EQ(s["gpu_busy_pct"], row.gpu_pct);
    EXPECT_EQ(s["memory_busy_pct"], row.memory_pct);
    EXPECT_EQ(s["sm_clock_mhz"], row.sm_mhz);
    EXPECT_EQ(s["memory_clock_mhz"], row.memory_mhz);
    EXPECT_DOUBLE_EQ(s["power_w"].get<double>(), row.power_mw / 1000.0);
    EXPECT_EQ(s["pcie_tx_kb_per_s"], row.pcie_tx_kb);
    EXPECT_EQ(s["pcie_rx_kb_per_s"], row.pcie_rx_kb);
    EXPECT_EQ(s["clocks_event_reasons_mask"], row.reasons);
    EXPECT_EQ(s["memory_used_bytes"].get<double>(), row.used_mib * mib);
    EXPECT_EQ(s["energy_mj"], fake_nvml::energy_base_mj + k * fake_nvml::energy_step_mj);
    EXPECT_EQ(s["temperature_c"], row.temperature_c);
    // The tree is sh and, once forked, its sleep; PID 1's memory in the same list is never counted.
    const unsigned processes = s["processes"].get<unsigned>();
    if (processes == 0) {
      // Only the last sample may find the program already gone.
      EXPECT_EQ(k + 1, samples.size());
      EXPECT_EQ(s["process_memory_bytes"], 0);
    } else {
      ASSERT_TRUE(processes == 1 || processes == 2);
      grandchild_seen = grandchild_seen || processes == 2;
      EXPECT_EQ(s["process_memory_bytes"].get<double>(),
                (row.child_mib + (processes - 1) * fake_nvml::grandchild_mib) * mib);
    }
    if (k > 0) {
      EXPECT_GT(s["t_s"].get<double>(), samples[k - 1]["t_s"].get<double>());
    }
  }
  EXPECT_TRUE(grandchild_seen) << "the watched command's child never counted";
  // Fixed deadlines every 20 ms: never more samples than deadlines, however late a wake-up was.
  EXPECT_LE(samples.size(), static_cast<std::size_t>(end_s / 0.020) + 1);

  // The summary, recomputed from the timeline.
  double power_sum = 0, power_peak = 0, memory_peak = 0, rx_peak = 0, throttled = 0, hw_slowdown = 0;
  for (std::size_t k = 0; k < samples.size(); ++k) {
    const double p = samples[k]["power_w"].get<double>();
    power_sum += p;
    power_peak = std::max(power_peak, p);
    memory_peak = std::max(memory_peak, samples[k]["process_memory_bytes"].get<double>());
    rx_peak = std::max(rx_peak, samples[k]["pcie_rx_kb_per_s"].get<double>() * 1024.0);
    const double until = k + 1 < samples.size() ? samples[k + 1]["t_s"].get<double>() : end_s;
    const double held = until - samples[k]["t_s"].get<double>();
    if (throttling(samples[k])) throttled += held;
    if ((samples[k]["clocks_event_reasons_mask"].get<std::uint64_t>() & 0x8) != 0) hw_slowdown += held;
  }
  const double n = static_cast<double>(samples.size());
  EXPECT_DOUBLE_EQ(metric_value(c, "sampler/samples"), n);
  EXPECT_NEAR(metric_value(c, "power/mean"), power_sum / n, 1e-9);
  EXPECT_DOUBLE_EQ(metric_value(c, "power/peak"), 350.0);
  EXPECT_DOUBLE_EQ(power_peak, 350.0);
  EXPECT_DOUBLE_EQ(metric_value(c, "memory/process_peak"), memory_peak);
  EXPECT_GE(memory_peak, 8000 * mib);
  EXPECT_DOUBLE_EQ(metric_value(c, "memory/device_used_peak"), 9000 * mib);
  EXPECT_DOUBLE_EQ(metric_value(c, "memory/device_used_increase_peak"), 8000 * mib);
  EXPECT_DOUBLE_EQ(metric_value(c, "gpu/busy_peak"), 100);
  EXPECT_DOUBLE_EQ(metric_value(c, "process/sm_busy_peak"), 100);
  EXPECT_DOUBLE_EQ(metric_value(c, "clock/sm_min"), 345);
  EXPECT_EQ(c.throttle.sm_clock_mhz_max, 1980u);
  EXPECT_EQ(c.throttle.temperature_c_max, 70u);
  EXPECT_DOUBLE_EQ(metric_value(c, "temperature/peak"), 70);
  EXPECT_DOUBLE_EQ(metric_value(c, "pcie/rx_peak"), rx_peak);
  EXPECT_DOUBLE_EQ(metric_value(c, "pcie/rx_peak"), 200000 * 1024.0);
  EXPECT_DOUBLE_EQ(metric_value(c, "energy"), (n - 1) * fake_nvml::energy_step_mj / 1000.0);
  EXPECT_EQ(c.details.at("energy_method"), "energy_counter");
  EXPECT_NEAR(metric_value(c, "throttle/time"), throttled, 1e-9);
  EXPECT_NEAR(metric_value(c, "throttle/time/sw_power_cap"), throttled, 1e-9);
  EXPECT_NEAR(metric_value(c, "throttle/time/hw_slowdown"), hw_slowdown, 1e-9);
  // Rows 3 to 5 are throttled: at least three intervals, and far less than the whole run.
  EXPECT_GE(throttled, 3 * 0.019);
  EXPECT_LT(throttled, 0.9);
  EXPECT_EQ(c.throttle.reasons, (std::vector<std::string>{"sw_power_cap", "hw_slowdown"}));
  EXPECT_DOUBLE_EQ(metric_value(c, "process/exit_code"), 0);
  ASSERT_TRUE(c.host_stats.has_value());
  EXPECT_NEAR(c.host_stats->median / 1e9, end_s, 1e-6);

  // itera report shows it.
  const auto rep = run_itera({"report", d / "w.jsonl"});
  EXPECT_EQ(rep.code, 0) << rep.err;
  EXPECT_NE(rep.out.find("### watch (version 1)"), std::string::npos) << rep.out;
  EXPECT_NE(rep.out.find("throttled: sw_power_cap, hw_slowdown"), std::string::npos) << rep.out;
}

struct exit_case {
  std::vector<std::string> command;
  int code;
  const char* says;
};

TEST(watch_e2e, the_exit_code_is_passed_on) {
  const exit_case cases[] = {
      {{"sh", "-c", "exit 0"}, 0, "exited with code 0"},
      {{"sh", "-c", "exit 3"}, 3, "exited with code 3"},
      {{"sh", "-c", "kill -SEGV $$"}, 139, "killed by SIGSEGV (signal 11"},
      {{"sh", "-c", "kill -KILL $$"}, 137, "killed by SIGKILL (signal 9"},
  };
  for (const auto& ec : cases) {
    scratch d;
    std::vector<std::string> args = {"watch", "--interval", "20", "--out", d / "w.jsonl", "--"};
    args.insert(args.end(), ec.command.begin(), ec.command.end());
    const auto r = run_itera(args, fake_env());
    EXPECT_EQ(r.code, ec.code) << r.err;
    EXPECT_NE(r.err.find(ec.says), std::string::npos) << r.err;
    const result_set set = read_results(d / "w.jsonl");
    ASSERT_EQ(set.cases.size(), 1u);
    EXPECT_EQ(set.cases[0].details.at("exit").rfind(ec.says, 0), 0u) << set.cases[0].details.at("exit");
    EXPECT_DOUBLE_EQ(metric_value(set.cases[0], "process/exit_code"), ec.code);
    const auto lines = read_lines(d / "w.timeline.jsonl");
    EXPECT_EQ(lines.back()["exit_code"], ec.code);
  }
}

TEST(watch_e2e, a_command_that_does_not_exist_is_a_clear_error_with_127) {
  scratch d;
  const auto r = run_itera({"watch", "--out", d / "w.jsonl", "--", "itera-no-such-command", "--x"}, fake_env());
  EXPECT_EQ(r.code, 127);
  EXPECT_NE(r.err.find("itera: error: cannot run 'itera-no-such-command': command not found"), std::string::npos)
      << r.err;
  const result_set set = read_results(d / "w.jsonl");
  ASSERT_EQ(set.cases.size(), 1u);
  EXPECT_EQ(set.cases[0].status, case_status::failed);
  EXPECT_NE(set.cases[0].message.find("command not found"), std::string::npos);
  const auto lines = read_lines(d / "w.timeline.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines.back()["exit_code"], 127);

  const auto dir = run_itera({"watch", "--out", d / "x.jsonl", "--", d.dir().string()}, fake_env());
  EXPECT_EQ(dir.code, 126) << dir.err;
}

TEST(watch_e2e, without_nvml_the_program_still_runs_and_the_reason_is_said) {
  scratch d;
  auto r = run_itera({"watch", "--out", d / "w.jsonl", "--", "sh", "-c", "sleep 0.3; exit 5"},
                     {{"ITERA_NVML_LIBRARY", d / "missing-libnvidia-ml.so"}});
  EXPECT_EQ(r.code, 5);
  EXPECT_NE(r.err.find("nothing was sampled: cannot load"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ITERA_NVML_LIBRARY"), std::string::npos) << r.err;
  result_set set = read_results(d / "w.jsonl");
  EXPECT_EQ(set.context.backend, "cpu");
  EXPECT_EQ(set.context.device.value("name", ""), "no GPU sampled");
  ASSERT_EQ(set.cases.size(), 1u);
  EXPECT_EQ(set.cases[0].axes[0].second, "none");
  EXPECT_NE(set.cases[0].details.at("not_sampled").find("cannot load"), std::string::npos);
  ASSERT_TRUE(set.cases[0].host_stats.has_value());
  EXPECT_GE(set.cases[0].host_stats->median, 0.3e9);
  EXPECT_DOUBLE_EQ(metric_value(set.cases[0], "process/exit_code"), 5);

  r = run_itera({"watch", "--out", d / "v.jsonl", "--", "true"}, fake_env({{"FAKE_NVML_INIT_ERROR", "9"}}));
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.err.find("nothing was sampled: nvmlInit_v2 failed: Driver Not Loaded"), std::string::npos) << r.err;
}

TEST(watch_e2e, a_label_replaces_the_command_line_everywhere) {
  scratch d;
  const auto r = run_itera({"watch", "--interval", "20", "--label", "nightly-train", "--out", d / "w.jsonl", "--", "sh",
                            "-c", "sleep 0.1", "--token=SECRET123"},
                           fake_env());
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* f : {"w.jsonl", "w.timeline.jsonl"}) {
    const std::string text = read_text(d / f);
    EXPECT_EQ(text.find("SECRET123"), std::string::npos) << f << ": " << text;
    EXPECT_EQ(text.find("sleep"), std::string::npos) << f;
  }
  EXPECT_EQ(r.err.find("SECRET123"), std::string::npos) << r.err;
  const result_set set = read_results(d / "w.jsonl");
  EXPECT_EQ(set.context.command, "itera watch --label nightly-train");
  EXPECT_EQ(set.cases.at(0).fields.at("label"), "nightly-train");
  EXPECT_EQ(set.cases.at(0).fields.count("command"), 0u);
}

TEST(watch_e2e, bad_options_are_refused_before_the_command_runs) {
  scratch d;
  const std::string marker = d / "ran";
  std::ofstream(d / "taken.jsonl") << "x\n";
  auto r = run_itera({"watch", "--out", d / "taken.jsonl", "--", "touch", marker}, fake_env());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  std::ofstream(d / "t.timeline.jsonl") << "x\n";
  r = run_itera({"watch", "--out", d / "t.jsonl", "--", "touch", marker}, fake_env());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("t.timeline.jsonl' already exists"), std::string::npos) << r.err;
  r = run_itera({"watch", "--interval", "5", "--out", d / "a.jsonl", "--", "touch", marker}, fake_env());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--interval 5"), std::string::npos) << r.err;
  r = run_itera({"watch", "--device", "2", "--out", d / "b.jsonl", "--", "touch", marker},
                fake_env({{"FAKE_NVML_DEVICE_COUNT", "2"}}));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("NVML sees 2 GPUs"), std::string::npos) << r.err;
  r = run_itera({"watch", "--out", d / "e.jsonl", "touch", "-c", marker}, fake_env());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("'-c' is not an option of itera watch; put the command to watch after --"), std::string::npos)
      << r.err;
  r = run_itera({"watch", "--out", d / "c.jsonl"}, fake_env());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no command to watch"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(marker)) << "the command ran although the options were refused";
}

TEST(watch_e2e, devices_are_chosen_by_nvml_index) {
  scratch d;
  auto r = run_itera({"watch", "--interval", "20", "--device", "1", "--out", d / "one.jsonl", "--", "sleep", "0.2"},
                     fake_env({{"FAKE_NVML_DEVICE_COUNT", "2"}}));
  ASSERT_EQ(r.code, 0) << r.err;
  result_set set = read_results(d / "one.jsonl");
  ASSERT_EQ(set.cases.size(), 1u);
  EXPECT_EQ(set.cases[0].axes[0].second, "1");
  EXPECT_EQ(set.context.device.value("nvml_index", 99), 1);
  for (const auto& line : read_lines(d / "one.timeline.jsonl")) {
    if (line["type"] == "sample") {
      EXPECT_EQ(line["device"], 1);
    }
  }

  r = run_itera({"watch", "--interval", "20", "--out", d / "all.jsonl", "--", "sleep", "0.2"},
                fake_env({{"FAKE_NVML_DEVICE_COUNT", "2"}}));
  ASSERT_EQ(r.code, 0) << r.err;
  set = read_results(d / "all.jsonl");
  ASSERT_EQ(set.cases.size(), 2u);
  EXPECT_EQ(set.context.device.value("name", ""), "2 GPUs: NVIDIA H100 PCIe, NVIDIA H100 PCIe");
  EXPECT_FALSE(set.context.device.contains("variant"));  // two boards are not one card (R7)
}

// Polls until the timeline holds `n` samples.
bool wait_for_samples(const std::string& path, std::size_t n) {
  for (int i = 0; i < 500; ++i) {
    std::size_t count = 0;
    std::istringstream in(read_text(path));
    std::string line;
    while (std::getline(in, line)) count += line.find("\"type\":\"sample\"") != std::string::npos;
    if (count >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(watch_e2e, a_killed_watch_keeps_its_samples_and_sigterm_reaches_the_program) {
  scratch d;
  const std::string pid_file = d / "child.pid";
  const std::vector<std::string> cmd = {"sh", "-c", "echo $$ > " + pid_file + "; exec sleep 30"};
  // SIGKILL of itera: the samples written so far stay readable.
  std::vector<std::string> argv = {ITERA_BINARY, "watch", "--interval", "20", "--out", d / "k.jsonl", "--"};
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  ::setenv("ITERA_NVML_LIBRARY", ITERA_FAKE_NVML, 1);
  proc::spawned w = proc::spawn(argv);
  ::unsetenv("ITERA_NVML_LIBRARY");
  ASSERT_GT(w.pid, 0);
  ASSERT_TRUE(wait_for_samples(d / "k.timeline.jsonl", 3));
  kill(w.pid, SIGKILL);
  proc::wait_for(w.pid);
  const auto lines = read_lines(d / "k.timeline.jsonl");  // every line parses
  EXPECT_GE(lines.size(), 4u);
  EXPECT_EQ(lines.back()["type"], "sample");
  const result_set killed = read_results(d / "k.jsonl");
  EXPECT_TRUE(killed.cases.empty());
  const pid_t orphan = std::stoi(read_text(pid_file));
  kill(orphan, SIGKILL);

  // SIGTERM to itera is passed on to the program; itera still writes the summary and exits 143.
  argv[5] = d / "t.jsonl";
  ::setenv("ITERA_NVML_LIBRARY", ITERA_FAKE_NVML, 1);
  w = proc::spawn(argv);
  ::unsetenv("ITERA_NVML_LIBRARY");
  ASSERT_GT(w.pid, 0);
  ASSERT_TRUE(wait_for_samples(d / "t.timeline.jsonl", 3));
  kill(w.pid, SIGTERM);
  const proc::exit_info e = proc::wait_for(w.pid);
  EXPECT_EQ(e.how, proc::exit_info::kind::exited);
  EXPECT_EQ(e.code, 128 + SIGTERM);
  const result_set termed = read_results(d / "t.jsonl");
  ASSERT_EQ(termed.cases.size(), 1u);
  EXPECT_EQ(termed.cases[0].details.at("exit").rfind("killed by SIGTERM", 0), 0u);
}

TEST(watch_e2e, pids_from_another_namespace_are_reported_not_guessed) {
  scratch d;
  const auto r = run_itera({"watch", "--interval", "20", "--out", d / "w.jsonl", "--", "sleep", "0.2"},
                           fake_env({{"FAKE_NVML_HOST_PIDS", "1"}}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("lists PIDs that do not exist in this PID namespace"), std::string::npos) << r.err;
  const result_set set = read_results(d / "w.jsonl");
  const case_record& c = set.cases.at(0);
  EXPECT_NE(c.details.at("not_read.process_pids").find("a container?"), std::string::npos);
  EXPECT_EQ(c.details.count("process_memory_note"), 1u);
  EXPECT_DOUBLE_EQ(metric_value(c, "memory/process_peak"), 0);
  EXPECT_GT(metric_value(c, "memory/device_used_increase_peak"), 0);
}

TEST(watch_e2e, itera_env_reads_the_library_named_by_itera_nvml_library) {
  const auto r = run_itera({"env", "--format", "json", "--no-formats"}, fake_env());
  ASSERT_EQ(r.code, 0) << r.err;
  const ojson env = ojson::parse(r.out);
  ASSERT_TRUE(env["gpu"]["available"].get<bool>()) << env["gpu"].dump();
  EXPECT_EQ(env["gpu"]["devices"][0]["name"], fake_nvml::device_name);
  EXPECT_EQ(env["gpu"]["driver_version"], fake_nvml::driver_version);
}

}  // namespace
