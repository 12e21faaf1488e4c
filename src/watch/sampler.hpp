#pragma once
// The NVML side of `itera watch` (internal): one sampling thread per device, and the timeline file
// they append to.
#include <sys/types.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "itera/watch/watch.hpp"

namespace itera::watch {

// The timeline: JSON lines, one flushed write per line, shared by the sampling threads. A failed
// write (disk full) stops further writes and is reported by error(); the program is not stopped.
class timeline_writer {
 public:
  // Creates `path`; an existing file is refused (usage_error).
  explicit timeline_writer(const std::string& path);
  void write(const ojson& line);
  std::string error() const;
  const std::string& path() const { return m_path; }

 private:
  std::string m_path;
  mutable std::mutex m_mutex;
  std::ofstream m_file;
  std::string m_error;
};

// Samples each device on its own thread at fixed deadlines (origin + k * interval; a deadline that
// has already passed is skipped, so a slow reading never makes samples bunch up).
class sampler {
 public:
  using clock = std::chrono::steady_clock;
  sampler(std::vector<unsigned> nvml_devices, std::chrono::milliseconds interval, pid_t root, clock::time_point origin,
          timeline_writer& out);
  ~sampler();
  sampler(const sampler&) = delete;
  sampler& operator=(const sampler&) = delete;

  void start();
  // Stops and joins the threads; each summary is finished at end_s (when the program ended).
  std::vector<device_summary> stop(double end_s);
  // Readings NVML refused, once per field, of one device: {"pcie_tx", "nvmlDeviceGetPcieThroughput: Not Supported"}.
  std::map<std::string, std::string> refused(unsigned nvml_device) const;

 private:
  struct device_thread;
  std::vector<std::unique_ptr<device_thread>> m_threads;
};

}  // namespace itera::watch
