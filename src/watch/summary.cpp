// The watch summary: peaks, means and time throttled per device, and the timeline's sample lines.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <set>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/watch/watch.hpp"
#include "src/env/nvml_api.hpp"

namespace itera::watch {

namespace {

// Names of the throttle bits, idle and application-clock settings left out: neither slows work
// that is running (the same rule as the runner's throttle monitor).
std::vector<std::string> throttle_names(std::uint64_t mask) {
  std::vector<std::string> names;
  std::uint64_t known = 0;
  for (const auto& rb : nvml::reason_bits) {
    known |= rb.bit;
    if ((mask & rb.bit) != 0 && (rb.bit & nvml::benign_reasons) == 0) names.emplace_back(rb.name);
  }
  for (std::uint64_t rest = mask & ~known; rest != 0; rest &= rest - 1) {
    names.push_back(fmt::format("bit_0x{:x}", rest & (~rest + 1)));
  }
  return names;
}

}  // namespace

ojson to_json(const sample& s) {
  ojson j;
  j["type"] = "sample";
  j["t_s"] = s.t_s;
  j["device"] = s.device;
  const auto put = [&j](const char* key, const auto& v) {
    if (v) j[key] = *v;
  };
  put("memory_used_bytes", s.memory_used_bytes);
  put("process_memory_bytes", s.process_memory_bytes);
  put("processes", s.processes);
  put("gpu_busy_pct", s.gpu_busy_pct);
  put("memory_busy_pct", s.memory_busy_pct);
  put("process_sm_busy_pct", s.process_sm_busy_pct);
  put("sm_clock_mhz", s.sm_clock_mhz);
  put("memory_clock_mhz", s.memory_clock_mhz);
  put("power_w", s.power_w);
  put("energy_mj", s.energy_mj);
  put("pcie_tx_kb_per_s", s.pcie_tx_kb_per_s);
  put("pcie_rx_kb_per_s", s.pcie_rx_kb_per_s);
  if (s.clocks_event_reasons) {
    j["clocks_event_reasons_mask"] = *s.clocks_event_reasons;
    j["throttle_reasons"] = throttle_names(*s.clocks_event_reasons);
  }
  put("temperature_c", s.temperature_c);
  return j;
}

void running_stat::add(double v) {
  if (count == 0) {
    min = max = v;
  } else {
    min = std::min(min, v);
    max = std::max(max, v);
  }
  sum += v;
  ++count;
}

void device_summary::add(const sample& s) {
  if (m_samples == 0) first_t = s.t_s;
  // The previous sample's reasons held from its time to this one's.
  if (m_pending_mask) {
    const double held = std::max(0.0, s.t_s - m_pending_t);
    const auto names = throttle_names(*m_pending_mask);
    if (!names.empty()) m_throttled_s += held;
    for (const auto& n : names) m_reason_s[n] += held;
  }
  m_pending_mask = s.clocks_event_reasons;
  m_pending_t = s.t_s;
  if (s.clocks_event_reasons) {
    m_mask |= *s.clocks_event_reasons;
    m_reasons_read = true;
  }
  last_t = s.t_s;
  ++m_samples;

  if (s.process_memory_bytes) process_memory.add(static_cast<double>(*s.process_memory_bytes));
  if (s.processes) processes_max = std::max(processes_max, *s.processes);
  if (s.memory_used_bytes) {
    if (!memory_used_first) memory_used_first = *s.memory_used_bytes;
    memory_used.add(static_cast<double>(*s.memory_used_bytes));
  }
  if (s.gpu_busy_pct) gpu_busy.add(*s.gpu_busy_pct);
  if (s.memory_busy_pct) memory_busy.add(*s.memory_busy_pct);
  if (s.process_sm_busy_pct) process_sm_busy.add(*s.process_sm_busy_pct);
  if (s.sm_clock_mhz) sm_clock.add(*s.sm_clock_mhz);
  if (s.memory_clock_mhz) memory_clock.add(*s.memory_clock_mhz);
  if (s.power_w) {
    power.add(*s.power_w);
    if (m_last_power) {
      m_power_integral_j += 0.5 * (m_last_power->second + *s.power_w) * (s.t_s - m_last_power->first);
      m_have_integral = true;
    }
    m_last_power = std::make_pair(s.t_s, *s.power_w);
  }
  if (s.energy_mj) {
    if (!m_energy_first) m_energy_first = *s.energy_mj;
    m_energy_last = *s.energy_mj;
  }
  if (s.pcie_tx_kb_per_s) pcie_tx.add(*s.pcie_tx_kb_per_s * pcie_bytes_per_kb);
  if (s.pcie_rx_kb_per_s) pcie_rx.add(*s.pcie_rx_kb_per_s * pcie_bytes_per_kb);
  if (s.temperature_c) temperature.add(*s.temperature_c);
}

void device_summary::finish(double end_s) {
  if (m_pending_mask) {
    const double held = std::max(0.0, end_s - m_pending_t);
    const auto names = throttle_names(*m_pending_mask);
    if (!names.empty()) m_throttled_s += held;
    for (const auto& n : names) m_reason_s[n] += held;
  }
  m_pending_mask.reset();
}

std::optional<double> device_summary::energy_j(std::string* method) const {
  if (m_energy_first && m_energy_last && m_samples > 1 && *m_energy_last >= *m_energy_first) {
    if (method) *method = "energy_counter";
    return static_cast<double>(*m_energy_last - *m_energy_first) / 1000.0;
  }
  if (m_have_integral) {
    if (method) *method = "power_integral";
    return m_power_integral_j;
  }
  return std::nullopt;
}

void device_summary::fill(case_record& r) const {
  const auto add = [&r](std::string name, double value, std::string unit) {
    r.metrics.push_back(metric{std::move(name), value, std::move(unit)});
  };
  if (process_memory.count) add("memory/process_peak", process_memory.max, "B");
  if (memory_used.count) {
    add("memory/device_used_peak", memory_used.max, "B");
    add("memory/device_used_increase_peak",
        std::max(0.0, memory_used.max - static_cast<double>(memory_used_first.value_or(0))), "B");
  }
  if (gpu_busy.count) {
    add("gpu/busy_mean", gpu_busy.mean(), "%");
    add("gpu/busy_peak", gpu_busy.max, "%");
  }
  if (memory_busy.count) add("gpu/memory_busy_mean", memory_busy.mean(), "%");
  if (process_sm_busy.count) add("process/sm_busy_peak", process_sm_busy.max, "%");
  if (sm_clock.count) {
    add("clock/sm_mean", sm_clock.mean(), "MHz");
    add("clock/sm_min", sm_clock.min, "MHz");  // the maximum is in the throttle record
  }
  if (memory_clock.count) add("clock/memory_mean", memory_clock.mean(), "MHz");
  if (power.count) {
    add("power/mean", power.mean(), "W");
    add("power/peak", power.max, "W");
  }
  std::string energy_method;
  if (const auto e = energy_j(&energy_method)) add("energy", *e, "J");
  if (pcie_rx.count) {
    add("pcie/rx_mean", pcie_rx.mean(), "B/s");
    add("pcie/rx_peak", pcie_rx.max, "B/s");
  }
  if (pcie_tx.count) {
    add("pcie/tx_mean", pcie_tx.mean(), "B/s");
    add("pcie/tx_peak", pcie_tx.max, "B/s");
  }
  if (temperature.count) add("temperature/peak", temperature.max, "C");
  if (m_reasons_read) {
    add("throttle/time", m_throttled_s, "s");
    for (const auto& [name, s] : m_reason_s) add("throttle/time/" + name, s, "s");
  }
  add("sampler/samples", static_cast<double>(m_samples), "");
  if (m_samples > 1)
    r.details["interval_mean_ms"] = fmt::format("{:.1f}", 1e3 * (last_t - first_t) / static_cast<double>(m_samples - 1));

  r.throttle.available = m_samples > 0;
  r.throttle.reasons_mask = m_mask;
  r.throttle.reasons = throttle_names(m_mask);
  if (sm_clock.count) {
    r.throttle.sm_clock_mhz_min = static_cast<unsigned>(sm_clock.min);
    r.throttle.sm_clock_mhz_max = static_cast<unsigned>(sm_clock.max);
  }
  if (temperature.count) r.throttle.temperature_c_max = static_cast<unsigned>(temperature.max);
  if (power.count) r.throttle.power_w_max = power.max;
  if (!energy_method.empty()) r.details["energy_method"] = energy_method;
}

std::vector<unsigned> parse_devices(const std::string& text, unsigned count) {
  std::vector<unsigned> out;
  if (text == "all") {
    for (unsigned i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    unsigned v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size())
      throw usage_error(fmt::format("--device '{}': '{}' is not a device index; write all, or NVML indices such as "
                                    "0 or 0,2 (nvidia-smi's numbering)",
                                    text, item));
    if (v >= count)
      throw usage_error(fmt::format("--device {}: NVML sees {} GPU{} (indices 0 to {})", v, count, count == 1 ? "" : "s",
                                    count == 0 ? 0 : count - 1));
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string timeline_path_for(const std::string& results_path) {
  const std::string suffix = ".jsonl";
  if (results_path.size() > suffix.size() &&
      results_path.compare(results_path.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return results_path.substr(0, results_path.size() - suffix.size()) + ".timeline.jsonl";
  }
  return results_path + ".timeline.jsonl";
}

}  // namespace itera::watch
