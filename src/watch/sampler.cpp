// NVML sampling for `itera watch`: what is read each interval, and where it goes.
#include "src/watch/sampler.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "src/env/nvml_api.hpp"

namespace itera::watch {

timeline_writer::timeline_writer(const std::string& path) : m_path(path) {
  // O_EXCL: two watches started at once must not share a timeline.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST)
      throw usage_error(fmt::format("'{}' already exists; choose another --out so earlier samples are kept", path));
    throw usage_error(fmt::format("cannot create the timeline '{}': {}", path, std::strerror(errno)));
  }
  ::close(fd);
  m_file.open(path, std::ios::out | std::ios::trunc);
  if (!m_file) throw usage_error(fmt::format("cannot open the timeline '{}' for writing", path));
}

void timeline_writer::write(const ojson& line) {
  const std::string text = line.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n";
  std::lock_guard lock(m_mutex);
  if (!m_error.empty()) return;
  m_file << text;
  m_file.flush();  // a killed watch keeps every sample written so far
  if (!m_file) m_error = fmt::format("writing the timeline '{}' failed (disk full?); later samples are missing", m_path);
}

std::string timeline_writer::error() const {
  std::lock_guard lock(m_mutex);
  return m_error;
}

struct sampler::device_thread {
  device_thread(unsigned index, std::chrono::milliseconds interval, pid_t root, clock::time_point origin,
                timeline_writer& out)
      : nv(nvml::library::get()), index(index), interval(interval), root(root), origin(origin), out(out),
        summary(index) {}

  const nvml::library& nv;
  unsigned index;
  std::chrono::milliseconds interval;
  pid_t root;
  clock::time_point origin;
  timeline_writer& out;
  device_summary summary;
  std::thread thread;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  // Written by the thread only; read after join.
  std::map<std::string, std::string> refused;  // field -> why, the first time
  std::vector<nvml::process_info> processes = std::vector<nvml::process_info>(64);
  std::vector<nvml::process_utilization_sample> utilization_samples = std::vector<nvml::process_utilization_sample>(64);
  unsigned long long last_utilization_us = 0;

  template <class F, class... A>
  bool call(const char* field, F fn, const char* symbol, A... args) {
    if (fn == nullptr) {
      refused.emplace(field, fmt::format("{} is not in {}", symbol, nv.path));
      return false;
    }
    const nvml::result r = fn(args...);
    if (r != nvml::success) {
      refused.emplace(field, fmt::format("{}: {}", symbol, nv.error(r)));
      return false;
    }
    return true;
  }

  void read_processes(nvml::device dev, const std::vector<pid_t>& tree, sample& s) {
    if (nv.device_get_compute_running_processes == nullptr) {
      refused.emplace("process_memory", "nvmlDeviceGetComputeRunningProcesses_v3/_v2 are not in " + nv.path);
      return;
    }
    nvml::result r = nvml::error_insufficient_size;
    unsigned count = 0;
    for (int attempt = 0; attempt < 3 && r == nvml::error_insufficient_size; ++attempt) {
      count = static_cast<unsigned>(processes.size());
      r = nv.device_get_compute_running_processes(dev, &count, processes.data());
      if (r == nvml::error_insufficient_size) processes.resize(std::max<std::size_t>(count, processes.size()) + 16);
    }
    if (r != nvml::success) {
      refused.emplace("process_memory", fmt::format("{}: {}", nv.compute_running_processes_symbol, nv.error(r)));
      return;
    }
    std::uint64_t bytes = 0;
    unsigned found = 0, foreign = 0;
    for (unsigned i = 0; i < count && i < processes.size(); ++i) {
      const auto& p = processes[i];
      if (std::find(tree.begin(), tree.end(), static_cast<pid_t>(p.pid)) == tree.end()) {
        foreign += ::access(fmt::format("/proc/{}", p.pid).c_str(), F_OK) != 0;
        continue;
      }
      ++found;
      if (p.used_gpu_memory != nvml::value_not_available) bytes += p.used_gpu_memory;
    }
    s.process_memory_bytes = bytes;
    s.processes = found;
    if (found == 0 && foreign > 0) {
      // NVML answers with the host's PIDs; inside a container they name nothing here.
      refused.emplace("process_pids", fmt::format("{} lists PIDs that do not exist in this PID namespace (a container?): "
                                                  "the watched processes cannot be matched; "
                                                  "memory/device_used_increase_peak still counts",
                                                  nv.compute_running_processes_symbol));
    }
  }

  void read_process_utilization(nvml::device dev, const std::vector<pid_t>& tree, sample& s) {
    if (nv.device_get_process_utilization == nullptr) {
      refused.emplace("process_sm_busy", "nvmlDeviceGetProcessUtilization is not in " + nv.path);
      return;
    }
    nvml::result r = nvml::error_insufficient_size;
    unsigned count = 0;
    for (int attempt = 0; attempt < 3 && r == nvml::error_insufficient_size; ++attempt) {
      count = static_cast<unsigned>(utilization_samples.size());
      r = nv.device_get_process_utilization(dev, utilization_samples.data(), &count, last_utilization_us);
      if (r == nvml::error_insufficient_size)
        utilization_samples.resize(std::max<std::size_t>(count, utilization_samples.size()) + 16);
    }
    if (r == nvml::error_not_found) return;  // no process had a new reading since the last one
    if (r != nvml::success) {
      refused.emplace("process_sm_busy", fmt::format("nvmlDeviceGetProcessUtilization: {}", nv.error(r)));
      return;
    }
    std::map<pid_t, std::pair<unsigned long long, unsigned>> latest;  // pid -> (timestamp, sm %)
    unsigned long long newest = last_utilization_us;
    for (unsigned i = 0; i < count && i < utilization_samples.size(); ++i) {
      const auto& u = utilization_samples[i];
      newest = std::max(newest, u.timestamp_us);
      if (u.timestamp_us <= last_utilization_us) continue;
      const auto pid = static_cast<pid_t>(u.pid);
      if (std::find(tree.begin(), tree.end(), pid) == tree.end()) continue;
      auto& slot = latest[pid];
      if (u.timestamp_us >= slot.first) slot = {u.timestamp_us, u.sm_util};
    }
    last_utilization_us = newest;
    if (latest.empty()) return;
    unsigned sm = 0;
    for (const auto& [pid, v] : latest) sm += v.second;
    s.process_sm_busy_pct = std::min(100u, sm);
  }

  // One reading. nvmlDeviceGetUtilizationRates comes first: the fake library of tests/watch starts
  // its next scripted row on that call.
  sample read(nvml::device dev) {
    sample s;
    s.device = index;
    nvml::utilization util{};
    if (call("gpu_busy", nv.device_get_utilization_rates, "nvmlDeviceGetUtilizationRates", dev, &util)) {
      s.gpu_busy_pct = util.gpu;
      s.memory_busy_pct = util.memory;
    }
    nvml::memory_info mem{};
    if (call("memory_used", nv.device_get_memory_info, "nvmlDeviceGetMemoryInfo", dev, &mem)) s.memory_used_bytes = mem.used;
    const std::vector<pid_t> tree = proc::process_tree(root);
    read_processes(dev, tree, s);
    read_process_utilization(dev, tree, s);
    unsigned v = 0;
    if (call("sm_clock", nv.device_get_clock_info, "nvmlDeviceGetClockInfo", dev, nvml::clock_sm, &v)) s.sm_clock_mhz = v;
    if (call("memory_clock", nv.device_get_clock_info, "nvmlDeviceGetClockInfo", dev, nvml::clock_mem, &v))
      s.memory_clock_mhz = v;
    if (call("power", nv.device_get_power_usage, "nvmlDeviceGetPowerUsage", dev, &v)) s.power_w = v / 1000.0;
    unsigned long long energy = 0;
    if (call("energy", nv.device_get_total_energy_consumption, "nvmlDeviceGetTotalEnergyConsumption", dev, &energy))
      s.energy_mj = energy;
    // Each PCIe reading counts bytes over 20 ms inside the driver, so these two take about 40 ms.
    if (call("pcie_tx", nv.device_get_pcie_throughput, "nvmlDeviceGetPcieThroughput", dev, nvml::pcie_util_tx_bytes, &v))
      s.pcie_tx_kb_per_s = v;
    if (call("pcie_rx", nv.device_get_pcie_throughput, "nvmlDeviceGetPcieThroughput", dev, nvml::pcie_util_rx_bytes, &v))
      s.pcie_rx_kb_per_s = v;
    unsigned long long reasons = 0;
    if (call("throttle", nv.device_get_clocks_event_reasons,
             nv.clocks_event_reasons_symbol ? nv.clocks_event_reasons_symbol : "nvmlDeviceGetCurrentClocksEventReasons",
             dev, &reasons))
      s.clocks_event_reasons = reasons;
    if (call("temperature", nv.device_get_temperature, "nvmlDeviceGetTemperature", dev, nvml::temperature_gpu, &v))
      s.temperature_c = v;
    return s;
  }

  void run() {
    nvml::device dev = nullptr;
    if (const auto r = nv.device_get_handle_by_index_v2(index, &dev); r != nvml::success) {
      refused.emplace("device", fmt::format("nvmlDeviceGetHandleByIndex_v2({}): {}", index, nv.error(r)));
      return;
    }
    auto deadline = origin;
    std::unique_lock lock(mutex);
    while (!stopping) {
      lock.unlock();
      const auto taken = clock::now();
      sample s = read(dev);
      s.t_s = std::chrono::duration<double>(taken - origin).count();
      summary.add(s);
      out.write(to_json(s));
      const auto now = clock::now();
      deadline += interval;
      if (deadline <= now) {
        const auto behind = (now - deadline) / interval + 1;
        deadline += behind * interval;
      }
      lock.lock();
      wake.wait_until(lock, deadline, [this] { return stopping; });
    }
  }
};

sampler::sampler(std::vector<unsigned> nvml_devices, std::chrono::milliseconds interval, pid_t root,
                 clock::time_point origin, timeline_writer& out) {
  for (unsigned d : nvml_devices) m_threads.push_back(std::make_unique<device_thread>(d, interval, root, origin, out));
}

sampler::~sampler() {
  for (auto& t : m_threads) {
    if (!t->thread.joinable()) continue;
    {
      std::lock_guard lock(t->mutex);
      t->stopping = true;
    }
    t->wake.notify_one();
    t->thread.join();
  }
}

void sampler::start() {
  for (auto& t : m_threads) t->thread = std::thread([p = t.get()] { p->run(); });
}

std::vector<device_summary> sampler::stop(double end_s) {
  std::vector<device_summary> out;
  for (auto& t : m_threads) {
    if (t->thread.joinable()) {
      {
        std::lock_guard lock(t->mutex);
        t->stopping = true;
      }
      t->wake.notify_one();
      t->thread.join();
    }
    t->summary.finish(end_s);
    out.push_back(t->summary);
  }
  return out;
}

std::map<std::string, std::string> sampler::refused(unsigned nvml_device) const {
  for (const auto& t : m_threads)
    if (t->index == nvml_device) return t->refused;
  return {};
}

}  // namespace itera::watch
