// `itera watch`: the run from options to results (docs/watch.md).
#include "itera/watch/watch.hpp"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "itera/core/build_info.hpp"
#include "itera/core/errors.hpp"
#include "itera/core/stats.hpp"
#include "itera/env/fingerprint.hpp"
#include "itera/watch/context.hpp"
#include "src/env/nvml_api.hpp"
#include "src/report/text_format.hpp"
#include "src/watch/sampler.hpp"

namespace itera {

namespace {

std::string utc_now(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[40];
  std::strftime(stamp, sizeof stamp, format, &utc);
  return stamp;
}

}  // namespace

run_context observer_context(const std::string& command, const std::vector<unsigned>& nvml_devices) {
  run_context c;
  const auto& b = this_build();
  c.itera_version = std::string(b.version);
  c.git_commit = std::string(b.git_commit);
  c.build_type = std::string(b.build_type);
  c.cuda_architectures = std::string(b.cuda_architectures);
  c.started_utc = utc_now("%Y-%m-%dT%H:%M:%SZ");
  c.command = command;
  c.host = host_fingerprint();
  const ojson gpu = nvml_fingerprint();
  std::vector<ojson> facts;
  if (gpu.value("available", false)) {
    for (unsigned i : nvml_devices) {
      if (i >= gpu["devices"].size()) continue;
      ojson d = ojson::object();
      d["kind"] = "cuda";
      for (const auto& [key, value] : gpu["devices"][i].items()) d[key == "index" ? "nvml_index" : key] = value;
      d["driver_version"] = gpu.value("driver_version", std::string("not found"));
      d["variant"] = catalogue_variant(gpu["devices"][i]);
      facts.push_back(std::move(d));
    }
    c.software["driver"] = gpu.value("driver_version", std::string("not found"));
    c.software["cuda_driver"] = gpu.value("cuda_driver_version", std::string("not found"));
  }
  if (facts.empty()) {
    c.backend = "cpu";
    c.device = ojson{{"kind", "none"},
                     {"name", "no GPU sampled"},
                     {"nvml", ojson{{"available", gpu.value("available", false)},
                                    {"reason", gpu.value("reason", std::string("no device selected"))}}}};
  } else if (facts.size() == 1) {
    c.backend = "cuda";
    c.device = std::move(facts.front());
  } else {
    // Several boards: the run does not describe one card (R7), so no single variant is claimed.
    c.backend = "cuda";
    std::vector<std::string> names;
    for (const auto& d : facts) names.push_back(d.value("name", std::string("?")));
    c.device = ojson::object();
    c.device["kind"] = "cuda";
    c.device["name"] = fmt::format("{} GPUs: {}", facts.size(), report::joined(names, ", "));
    c.device["devices"] = facts;
  }
  return c;
}

namespace watch {

namespace {

using clock = std::chrono::steady_clock;

std::string quoted_command(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    const bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\$`*?[]{}()<>|&;#~") == std::string::npos;
    if (plain) {
      s += a;
    } else {
      s += '\'';
      for (char ch : a) s += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      s += '\'';
    }
  }
  return s;
}

case_record base_case(const options& o, const std::string& recorded, const std::string& timeline_name,
                      bool sampled) {
  case_record r;
  r.workload = "watch";
  r.workload_version = workload_version;
  r.backend = sampled ? "cuda" : "cpu";  // what the context says: a GPU was sampled, or none
  r.fields[o.label.empty() ? "command" : "label"] = recorded;
  r.details["timeline"] = timeline_name;
  r.details["interval_ms"] = std::to_string(o.interval_ms);
  r.device_time_method = "";
  return r;
}

void add_outcome(case_record& r, const proc::exit_info& e, double wall_s) {
  r.details["exit"] = e.describe();
  r.metrics.insert(r.metrics.begin(), metric{"process/exit_code", static_cast<double>(e.code), ""});
  r.host_ns = {wall_s * 1e9};
  r.host_stats = summarize(r.host_ns);
  r.stop_reason = "";
}

std::string or_dash(bool have, const std::string& text) { return have ? text : "-"; }

// PCIe rates read best in MB/s below 1 GB/s.
std::string pcie_rate(double bytes_per_s) {
  return bytes_per_s >= 1e9 ? report::sig3(bytes_per_s / 1e9) + " GB/s" : report::sig3(bytes_per_s / 1e6) + " MB/s";
}

void print_summary(std::ostream& err, const std::string& what, const proc::exit_info& e, double wall_s,
                   const std::vector<device_summary>& sums, unsigned interval_ms) {
  err << fmt::format("itera watch: {} {} after {}\n", what, e.describe(), report::human_time_ns(wall_s * 1e9));
  if (sums.empty()) return;
  report::md_table t;
  for (const char* h : {"device", "samples", "process memory peak", "device used peak", "GPU busy mean / peak",
                        "SM clock mean (min)", "power mean / peak", "energy", "PCIe rx mean / peak",
                        "PCIe tx mean / peak", "throttled"})
    t.column(h, std::string(h) != "device");
  for (const auto& s : sums) {
    std::string energy_method;
    const auto energy = s.energy_j(&energy_method);
    std::vector<std::string> throttled;
    for (const auto& [name, secs] : s.throttled_by_reason_s()) throttled.push_back(fmt::format("{} {}", name, report::human_time_ns(secs * 1e9)));
    t.rows.push_back({
        std::to_string(s.device()),
        fmt::format("{} every {} ms", s.samples(), interval_ms),
        or_dash(s.process_memory.count > 0, report::human_bytes(s.process_memory.max)),
        or_dash(s.memory_used.count > 0, report::human_bytes(s.memory_used.max)),
        or_dash(s.gpu_busy.count > 0, fmt::format("{:.0f}% / {:.0f}%", s.gpu_busy.mean(), s.gpu_busy.max)),
        or_dash(s.sm_clock.count > 0, fmt::format("{:.0f} MHz ({:.0f})", s.sm_clock.mean(), s.sm_clock.min)),
        or_dash(s.power.count > 0, fmt::format("{} W / {} W", report::sig3(s.power.mean()), report::sig3(s.power.max))),
        or_dash(energy.has_value(), energy ? report::sig3(*energy) + " J" : ""),
        or_dash(s.pcie_rx.count > 0, pcie_rate(s.pcie_rx.mean()) + " / " + pcie_rate(s.pcie_rx.max)),
        or_dash(s.pcie_tx.count > 0, pcie_rate(s.pcie_tx.mean()) + " / " + pcie_rate(s.pcie_tx.max)),
        throttled.empty() ? std::string("no") : report::human_time_ns(s.throttled_s() * 1e9) + " (" +
                                                    report::joined(throttled, ", ") + ")",
    });
  }
  t.write(err);
}

}  // namespace

int run(const options& o) {
  namespace fs = std::filesystem;
  if (o.command.empty() || o.command.front().empty())
    throw usage_error("no command to watch: put it after --, e.g. itera watch -- python3 train.py");
  if (o.interval_ms < 10 || o.interval_ms > 60000)
    throw usage_error(fmt::format("--interval {}: give milliseconds from 10 to 60000 (NVML's own readings refresh "
                                  "every 20 ms to 1 s)",
                                  o.interval_ms));

  // Outputs: checked before anything starts, so a bad --out never costs a run.
  std::string out = o.out;
  if (out.empty()) out = (fs::path("results") / utc_now("watch-%Y%m%d-%H%M%S.jsonl")).string();
  const std::string timeline = timeline_path_for(out);
  for (const auto& p : {out, timeline}) {
    if (fs::exists(p))
      throw usage_error(fmt::format("'{}' already exists; choose another --out so earlier results are kept", p));
  }
  if (const fs::path parent = fs::path(out).parent_path(); !parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) throw usage_error(fmt::format("cannot create the folder of --out '{}': {}", out, ec.message()));
  }

  // What to sample. Without NVML the program still runs: its wall time and exit code are recorded.
  const nvml::library& nv = nvml::library::get();
  std::vector<unsigned> devices;
  std::string why_nothing;
  if (!nv.available) {
    why_nothing = nv.reason;
  } else {
    unsigned count = 0;
    if (const auto r = nv.device_get_count_v2(&count); r != nvml::success) {
      why_nothing = "nvmlDeviceGetCount_v2: " + nv.error(r);
    } else if (count == 0) {
      why_nothing = "NVML sees no GPU";
    } else {
      devices = parse_devices(o.devices, count);
    }
  }

  // R18: the command line is all that is recorded of the program, or the label instead.
  const std::string recorded = o.label.empty() ? quoted_command(o.command) : o.label;
  const std::string context_command = o.label.empty() ? o.command_line : "itera watch --label " + quoted_command({o.label});
  result_stream results(out);
  results.write(observer_context(context_command, devices));
  timeline_writer tl(timeline);
  ojson header;
  header["type"] = "header";
  header["schema"] = timeline_schema;
  header["results"] = fs::path(out).filename().string();
  header["interval_ms"] = o.interval_ms;
  header["devices"] = devices;
  header["pcie_bytes_per_kb"] = pcie_bytes_per_kb;
  if (!why_nothing.empty()) header["not_sampled"] = why_nothing;
  tl.write(header);
  const std::string timeline_name = fs::path(timeline).filename().string();

  proc::forward_signals forward;  // before the program starts: no SIGTERM slips in between
  const auto origin = clock::now();
  const proc::spawned child = proc::spawn(o.command);
  if (child.pid < 0) {
    std::cerr << "itera: error: " << child.failure.error << '\n';
    case_record r = base_case(o, recorded, timeline_name, !devices.empty());
    r.axes = {{"device", devices.empty() ? "none" : std::to_string(devices.front())}};
    r.status = case_status::failed;
    r.message = child.failure.error;
    r.details["exit"] = child.failure.describe();
    r.metrics.push_back(metric{"process/exit_code", static_cast<double>(child.failure.code), ""});
    results.write(r);
    tl.write(ojson{{"type", "end"}, {"t_s", 0.0}, {"exit", child.failure.describe()}, {"exit_code", child.failure.code}});
    std::cerr << fmt::format("itera watch: results in {} (status failed)\n", out);
    return child.failure.code;
  }

  proc::exit_info exit;
  double wall_s = 0;
  std::vector<device_summary> sums;
  std::map<unsigned, std::map<std::string, std::string>> refused;
  forward.set_child(child.pid);
  {
    sampler s(devices, std::chrono::milliseconds(o.interval_ms), child.pid, origin, tl);
    s.start();
    exit = proc::wait_for(child.pid);
    wall_s = std::chrono::duration<double>(clock::now() - origin).count();
    sums = s.stop(wall_s);
    for (unsigned dev : devices) refused[dev] = s.refused(dev);
  }
  tl.write(ojson{{"type", "end"}, {"t_s", wall_s}, {"exit", exit.describe()}, {"exit_code", exit.code}});

  if (sums.empty()) {
    case_record r = base_case(o, recorded, timeline_name, !devices.empty());
    r.axes = {{"device", "none"}};
    r.details["not_sampled"] = why_nothing;
    add_outcome(r, exit, wall_s);
    results.write(r);
  }
  for (const auto& s : sums) {
    case_record r = base_case(o, recorded, timeline_name, !devices.empty());
    r.axes = {{"device", std::to_string(s.device())}};
    s.fill(r);
    add_outcome(r, exit, wall_s);
    for (const auto& [field, why] : refused[s.device()]) r.details["not_read." + field] = why;
    if (s.samples() > 0 && s.processes_max == 0 && s.process_memory.count > 0) {
      r.details["process_memory_note"] =
          "no process of the watched tree was in NVML's process list (it did not use this GPU; or itera runs in a "
          "container whose PIDs differ from the host's, see memory/device_used_increase_peak)";
    }
    results.write(r);
  }

  const std::string what = o.label.empty() ? recorded : o.label + " (label)";
  print_summary(std::cerr, what, exit, wall_s, sums, o.interval_ms);
  if (!why_nothing.empty()) std::cerr << "itera watch: nothing was sampled: " << why_nothing << '\n';
  for (const auto& [dev, fields] : refused)
    for (const auto& [field, why] : fields)
      std::cerr << fmt::format("itera watch: device {}: not read: {}: {}\n", dev, field, why);
  for (const auto& s : sums) {
    if (s.samples() > 0 && s.processes_max == 0 && s.process_memory.count > 0)
      std::cerr << fmt::format("itera watch: device {}: the watched processes never appeared in NVML's process list "
                               "(no GPU use there, or PIDs seen from a container differ from the host's); device "
                               "memory used is recorded regardless\n",
                               s.device());
  }
  if (const auto e = tl.error(); !e.empty()) std::cerr << "itera watch: " << e << '\n';
  std::cerr << fmt::format("itera watch: results in {}, timeline in {}\n", out, timeline);
  if (exit.how == proc::exit_info::kind::signalled)
    std::cerr << fmt::format("itera watch: the command was {}\n", exit.describe());
  return exit.code;
}

}  // namespace watch
}  // namespace itera
