#pragma once
// `itera watch -- CMD ARGS...`: runs any program and samples NVML for it (docs/watch.md).
//
// A sampling thread per watched GPU reads, every interval: the device memory of the program's
// process tree (nvmlDeviceGetComputeRunningProcesses), the device memory used in all, GPU and memory
// busy percentages, SM and memory clocks, power, the energy counter, PCIe throughput in both
// directions, the clock event (throttle) reasons and the temperature. Each sample is appended to a
// timeline file (JSON lines, flushed per line) as it is taken; when the program ends, one case per
// device with the summary (peaks, means, time throttled) goes to an itera results file. Nothing of
// the program is recorded beyond its command line (or --label instead).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "itera/core/result.hpp"
#include "itera/watch/process.hpp"

namespace itera::watch {

inline constexpr const char* timeline_schema = "itera.watch_timeline/1";
inline constexpr int workload_version = 1;

struct options {
  std::vector<std::string> command;  // the program and its arguments
  unsigned interval_ms = 100;
  std::string devices = "all";       // "all" or NVML indices "0,2"
  std::string out;                   // results file; empty: results/watch-<UTC time>.jsonl
  std::string label;                 // recorded instead of the command when not empty
  std::string command_line;          // itera's own command line, recorded when there is no label
};

// One reading of one device; a field NVML could not give is empty.
struct sample {
  double t_s = 0;  // since the program started
  unsigned device = 0;
  std::optional<std::uint64_t> memory_used_bytes;     // the whole device, every process
  std::optional<std::uint64_t> process_memory_bytes;  // the watched process tree
  std::optional<unsigned> processes;                  // of the tree in NVML's process list
  std::optional<unsigned> gpu_busy_pct, memory_busy_pct;
  std::optional<unsigned> process_sm_busy_pct;  // the tree's, when NVML had a new reading
  std::optional<unsigned> sm_clock_mhz, memory_clock_mhz;
  std::optional<double> power_w;
  std::optional<std::uint64_t> energy_mj;  // the board's counter since the driver loaded
  std::optional<unsigned> pcie_tx_kb_per_s, pcie_rx_kb_per_s;  // as NVML reports them
  std::optional<std::uint64_t> clocks_event_reasons;
  std::optional<unsigned> temperature_c;
};

// NVML reports PCIe throughput in "KB/s"; itera reads KB as 1024 bytes (docs/watch.md).
inline constexpr double pcie_bytes_per_kb = 1024.0;

ojson to_json(const sample& s);

// Count, sum, min and max of one reading.
struct running_stat {
  std::size_t count = 0;
  double sum = 0, min = 0, max = 0;
  void add(double v);
  double mean() const { return count ? sum / static_cast<double>(count) : 0.0; }
};

// Peaks, means and time throttled over one device's samples, built as they arrive. Means are over
// the samples (taken at fixed deadlines, so they weigh time equally); a sample's clock event
// reasons are taken to hold until the next sample, and the last one until the program ended.
class device_summary {
 public:
  explicit device_summary(unsigned device = 0) : m_device(device) {}
  void add(const sample& s);
  void finish(double end_s);  // the program ended at end_s

  unsigned device() const { return m_device; }
  std::size_t samples() const { return m_samples; }
  double throttled_s() const { return m_throttled_s; }
  const std::map<std::string, double>& throttled_by_reason_s() const { return m_reason_s; }
  std::uint64_t reasons_mask() const { return m_mask; }
  // Joules: the energy counter's difference between the first and last sample when the board has
  // one ("energy_counter"), else the trapezoid rule over the power samples ("power_integral").
  std::optional<double> energy_j(std::string* method = nullptr) const;

  running_stat process_memory, memory_used, gpu_busy, memory_busy, process_sm_busy, sm_clock, memory_clock, power,
      pcie_tx, pcie_rx, temperature;
  std::optional<std::uint64_t> memory_used_first;  // before the program allocated much: the baseline
  unsigned processes_max = 0;
  double first_t = 0, last_t = 0;

  // The summary as metrics, throttle and details of `r`.
  void fill(case_record& r) const;

 private:
  unsigned m_device;
  std::size_t m_samples = 0;
  std::optional<std::uint64_t> m_pending_mask;
  double m_pending_t = 0;
  double m_throttled_s = 0;
  std::map<std::string, double> m_reason_s;
  std::uint64_t m_mask = 0;
  bool m_reasons_read = false;
  std::optional<std::uint64_t> m_energy_first, m_energy_last;
  std::optional<std::pair<double, double>> m_last_power;  // (t, W)
  double m_power_integral_j = 0;
  bool m_have_integral = false;
};

// "all" or "0,2" against the devices NVML counts; usage_error naming the range otherwise.
std::vector<unsigned> parse_devices(const std::string& text, unsigned count);

// "run.jsonl" -> "run.timeline.jsonl"; any other name gets ".timeline.jsonl" appended.
std::string timeline_path_for(const std::string& results_path);

// Runs the watch: checks the options and output files, writes the context, starts the command,
// samples until it ends, writes one case per device and prints the summary on stderr. Returns the
// exit code to pass on: the program's own, 128 + N when killed by signal N, 127 / 126 when it could
// not be started. Throws usage_error for bad options before starting anything.
int run(const options& o);

}  // namespace itera::watch
