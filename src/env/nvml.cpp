// NVML through dlopen: the GPU half of the fingerprint (R7) and the throttle monitor the runner
// keeps beside each case. No NVML or CUDA header is included (see nvml_api.hpp).
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <thread>

#include "itera/core/runner.hpp"
#include "itera/env/fingerprint.hpp"
#include "itera/env/versions.hpp"
#include "nvml_api.hpp"

namespace itera::nvml {

namespace {

template <class F>
void bind(void* handle, F& fn, const char* symbol) {
  fn = reinterpret_cast<F>(dlsym(handle, symbol));
}

}  // namespace

library::library() {
  // ITERA_NVML_LIBRARY names another file to open: the scripted fake of tests/watch, or a driver
  // installed outside the loader's path.
  const char* override_path = std::getenv("ITERA_NVML_LIBRARY");
  const bool overridden = override_path != nullptr && override_path[0] != '\0';
  path = overridden ? override_path : "libnvidia-ml.so.1";
  dlerror();
  m_handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (m_handle == nullptr) {
    const char* e = dlerror();
    reason = (overridden ? "cannot load " + path + " (named by ITERA_NVML_LIBRARY): "
                         : std::string("cannot load libnvidia-ml.so.1 (no NVIDIA driver on this machine?): ")) +
             (e != nullptr ? e : "unknown dlopen error");
    return;
  }
  bind(m_handle, init_v2, "nvmlInit_v2");
  bind(m_handle, shutdown, "nvmlShutdown");
  bind(m_handle, error_string, "nvmlErrorString");
  bind(m_handle, system_get_driver_version, "nvmlSystemGetDriverVersion");
  bind(m_handle, system_get_cuda_driver_version_v2, "nvmlSystemGetCudaDriverVersion_v2");
  bind(m_handle, device_get_count_v2, "nvmlDeviceGetCount_v2");
  bind(m_handle, device_get_handle_by_index_v2, "nvmlDeviceGetHandleByIndex_v2");
  bind(m_handle, device_get_name, "nvmlDeviceGetName");
  bind(m_handle, device_get_uuid, "nvmlDeviceGetUUID");
  bind(m_handle, device_get_pci_info_v3, "nvmlDeviceGetPciInfo_v3");
  bind(m_handle, device_get_memory_info, "nvmlDeviceGetMemoryInfo");
  bind(m_handle, device_get_memory_bus_width, "nvmlDeviceGetMemoryBusWidth");
  bind(m_handle, device_get_max_clock_info, "nvmlDeviceGetMaxClockInfo");
  bind(m_handle, device_get_clock_info, "nvmlDeviceGetClockInfo");
  bind(m_handle, device_get_power_management_limit, "nvmlDeviceGetPowerManagementLimit");
  bind(m_handle, device_get_power_management_default_limit, "nvmlDeviceGetPowerManagementDefaultLimit");
  bind(m_handle, device_get_power_management_limit_constraints,
       "nvmlDeviceGetPowerManagementLimitConstraints");
  bind(m_handle, device_get_power_usage, "nvmlDeviceGetPowerUsage");
  bind(m_handle, device_get_curr_pcie_link_generation, "nvmlDeviceGetCurrPcieLinkGeneration");
  bind(m_handle, device_get_max_pcie_link_generation, "nvmlDeviceGetMaxPcieLinkGeneration");
  bind(m_handle, device_get_curr_pcie_link_width, "nvmlDeviceGetCurrPcieLinkWidth");
  bind(m_handle, device_get_max_pcie_link_width, "nvmlDeviceGetMaxPcieLinkWidth");
  bind(m_handle, device_get_nvlink_state, "nvmlDeviceGetNvLinkState");
  bind(m_handle, device_get_ecc_mode, "nvmlDeviceGetEccMode");
  bind(m_handle, device_get_mig_mode, "nvmlDeviceGetMigMode");
  bind(m_handle, device_get_temperature, "nvmlDeviceGetTemperature");
  bind(m_handle, device_get_clocks_event_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
  clocks_event_reasons_symbol = "nvmlDeviceGetCurrentClocksEventReasons";
  if (device_get_clocks_event_reasons == nullptr) {
    bind(m_handle, device_get_clocks_event_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    clocks_event_reasons_symbol = "nvmlDeviceGetCurrentClocksThrottleReasons";
  }
  bind(m_handle, device_get_utilization_rates, "nvmlDeviceGetUtilizationRates");
  bind(m_handle, device_get_pcie_throughput, "nvmlDeviceGetPcieThroughput");
  bind(m_handle, device_get_total_energy_consumption, "nvmlDeviceGetTotalEnergyConsumption");
  bind(m_handle, device_get_process_utilization, "nvmlDeviceGetProcessUtilization");
  bind(m_handle, device_get_compute_running_processes, "nvmlDeviceGetComputeRunningProcesses_v3");
  compute_running_processes_symbol = "nvmlDeviceGetComputeRunningProcesses_v3";
  if (device_get_compute_running_processes == nullptr) {
    bind(m_handle, device_get_compute_running_processes, "nvmlDeviceGetComputeRunningProcesses_v2");
    compute_running_processes_symbol = "nvmlDeviceGetComputeRunningProcesses_v2";
  }

  if (init_v2 == nullptr || device_get_count_v2 == nullptr || device_get_handle_by_index_v2 == nullptr) {
    reason = path + " lacks nvmlInit_v2, nvmlDeviceGetCount_v2 or nvmlDeviceGetHandleByIndex_v2 "
             "(driver too old)";
    return;
  }
  const result r = init_v2();
  if (r != success) {
    reason = "nvmlInit_v2 failed: " + error(r);
    return;
  }
  m_initialised = true;
  available = true;
}

library::~library() {
  // The handle stays open: unloading a driver library during static destruction gains nothing and
  // can race with anything else still tearing down.
  if (m_initialised && shutdown != nullptr) shutdown();
}

const library& library::get() {
  static const library instance;  // C++ guarantees one thread-safe initialisation
  return instance;
}

std::string library::error(result r) const {
  if (error_string != nullptr) {
    if (const char* s = error_string(r); s != nullptr) return s;
  }
  return "NVML error " + std::to_string(r);
}

namespace {

// Parses "dddd:bb:dd.f" (any digit counts, hex) into its four numbers.
std::optional<std::array<unsigned long, 4>> parse_pci_bus_id(const std::string& s) {
  std::array<unsigned long, 4> parts{};
  std::size_t part = 0;
  const char* p = s.data();
  const char* end = s.data() + s.size();
  while (p < end && part < 4) {
    unsigned long v = 0;
    auto [next, ec] = std::from_chars(p, end, v, 16);
    if (ec != std::errc() || next == p) return std::nullopt;
    parts[part++] = v;
    p = next;
    if (p < end && (*p == ':' || *p == '.')) ++p;
  }
  if (part != 4) return std::nullopt;
  return parts;
}

// CUDA's PCI bus id for a device ordinal, read from the driver API only when libcuda is already
// loaded and initialised in this process: asking never initialises CUDA as a side effect.
std::optional<std::string> cuda_pci_bus_id(int cuda_ordinal) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return std::nullopt;
  using get_bus_id_fn = int (*)(char*, int, int);  // cuDeviceGetPCIBusId(char*, int, CUdevice)
  auto fn = reinterpret_cast<get_bus_id_fn>(dlsym(h, "cuDeviceGetPCIBusId"));
  char buf[64] = {};
  const int rc = fn != nullptr ? fn(buf, static_cast<int>(sizeof buf), cuda_ordinal) : -1;
  dlclose(h);  // balances the reference RTLD_NOLOAD took
  if (rc != 0) return std::nullopt;  // CUDA_ERROR_NOT_INITIALIZED when this process has not used CUDA
  return std::string(buf);
}

}  // namespace

bool same_pci_bus_id(const std::string& a, const std::string& b) {
  const auto pa = parse_pci_bus_id(a);
  const auto pb = parse_pci_bus_id(b);
  return pa && pb && *pa == *pb;
}

std::optional<device_match> nvml_index_for_cuda_device(int cuda_ordinal) {
  const library& nv = library::get();
  if (!nv.available || cuda_ordinal < 0) return std::nullopt;
  unsigned count = 0;
  if (nv.device_get_count_v2(&count) != success) return std::nullopt;
  if (const auto bus_id = cuda_pci_bus_id(cuda_ordinal); bus_id && nv.device_get_pci_info_v3 != nullptr) {
    for (unsigned i = 0; i < count; ++i) {
      device d = nullptr;
      pci_info pci{};
      if (nv.device_get_handle_by_index_v2(i, &d) == success && nv.device_get_pci_info_v3(d, &pci) == success &&
          same_pci_bus_id(*bus_id, pci.bus_id)) {
        return device_match{i, "pci_bus_id"};
      }
    }
  }
  if (static_cast<unsigned>(cuda_ordinal) < count) {
    return device_match{static_cast<unsigned>(cuda_ordinal), "assumed_same_index"};
  }
  return std::nullopt;
}

}  // namespace itera::nvml

namespace itera {

namespace {

using nvml::library;

std::string hex32(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string pci_vendor_device(unsigned pci_device_id) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04x:%04x", pci_device_id & 0xffffu, pci_device_id >> 16);
  return buf;
}

ojson reason_names(std::uint64_t mask) {
  ojson names = ojson::array();
  std::uint64_t known = 0;
  for (const auto& rb : nvml::reason_bits) {
    known |= rb.bit;
    if ((mask & rb.bit) != 0) names.push_back(rb.name);
  }
  for (std::uint64_t rest = mask & ~known; rest != 0; rest &= rest - 1) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "bit_0x%llx", static_cast<unsigned long long>(rest & (~rest + 1)));
    names.push_back(buf);
  }
  return names;
}

// Calls one NVML entry point for one field; on a missing symbol or an NVML error it records why
// under "unavailable" and the caller leaves the field out.
class field_reader {
 public:
  field_reader(const library& nv, ojson& unavailable) : m_nv(nv), m_unavailable(unavailable) {}

  template <class F, class... A>
  bool read(const char* field, F fn, const char* symbol, A... args) {
    if (fn == nullptr) {
      m_unavailable[field] = std::string(symbol) + " is not in this libnvidia-ml";
      return false;
    }
    const nvml::result r = fn(args...);
    if (r != nvml::success) {
      m_unavailable[field] = std::string(symbol) + ": " + m_nv.error(r);
      return false;
    }
    return true;
  }

 private:
  const library& m_nv;
  ojson& m_unavailable;
};

ojson device_facts(const library& nv, unsigned index) {
  ojson d;
  d["index"] = index;
  nvml::device dev = nullptr;
  if (const auto r = nv.device_get_handle_by_index_v2(index, &dev); r != nvml::success) {
    d["error"] = "nvmlDeviceGetHandleByIndex_v2: " + nv.error(r);
    return d;
  }
  ojson unavailable = ojson::object();
  // Readings that change from one second to the next, apart from the facts that identify the
  // board and its configuration, so that comparing two fingerprints does not trip over them.
  ojson state = ojson::object();
  field_reader f(nv, unavailable);

  char text[nvml::name_buffer] = {};
  if (f.read("name", nv.device_get_name, "nvmlDeviceGetName", dev, text, nvml::name_buffer)) d["name"] = text;
  char uuid[nvml::uuid_buffer] = {};
  if (f.read("uuid", nv.device_get_uuid, "nvmlDeviceGetUUID", dev, uuid, nvml::uuid_buffer)) d["uuid"] = uuid;
  nvml::pci_info pci{};
  if (f.read("pci_bus_id", nv.device_get_pci_info_v3, "nvmlDeviceGetPciInfo_v3", dev, &pci)) {
    d["pci_bus_id"] = pci.bus_id;
    d["pci_device_id"] = pci_vendor_device(pci.pci_device_id);
    d["pci_subsystem_id"] = hex32(pci.pci_subsystem_id);
  }

  nvml::memory_info mem{};
  if (f.read("memory", nv.device_get_memory_info, "nvmlDeviceGetMemoryInfo", dev, &mem)) {
    d["memory_total_bytes"] = mem.total;
    state["memory_free_bytes"] = mem.free;
    state["memory_used_bytes"] = mem.used;
  }
  unsigned bus_width = 0, mem_clock_max = 0, mem_clock = 0;
  const bool have_width = f.read("memory_bus_width_bits", nv.device_get_memory_bus_width,
                                 "nvmlDeviceGetMemoryBusWidth", dev, &bus_width);
  if (have_width) d["memory_bus_width_bits"] = bus_width;
  const bool have_mem_clock = f.read("memory_clock_max_mhz", nv.device_get_max_clock_info,
                                     "nvmlDeviceGetMaxClockInfo", dev, nvml::clock_mem, &mem_clock_max);
  if (have_mem_clock) d["memory_clock_max_mhz"] = mem_clock_max;
  if (f.read("memory_clock_mhz", nv.device_get_clock_info, "nvmlDeviceGetClockInfo", dev, nvml::clock_mem,
             &mem_clock)) {
    state["memory_clock_mhz"] = mem_clock;
  }
  if (have_width && have_mem_clock) {
    // NVML's memory clock is half the per-pin data rate on HBM and GDDR boards alike (H100 SXM:
    // 2619 MHz x 5120 bits -> 3352 GB/s; L4: 6251 MHz x 192 bits -> 300 GB/s), hence the 2.
    const double bytes_per_s = 2.0 * mem_clock_max * 1e6 * bus_width / 8.0;
    d["bandwidth_theoretical_gbs"] = bytes_per_s / 1e9;
    d["bandwidth_formula"] = "2 (DDR) * memory_clock_max_mhz * 1e6 * memory_bus_width_bits / 8 / 1e9";
  } else {
    unavailable["bandwidth_theoretical_gbs"] = "needs memory_bus_width_bits and memory_clock_max_mhz";
  }

  unsigned sm_clock = 0, sm_clock_max = 0;
  if (f.read("sm_clock_mhz", nv.device_get_clock_info, "nvmlDeviceGetClockInfo", dev, nvml::clock_sm, &sm_clock)) {
    state["sm_clock_mhz"] = sm_clock;
  }
  if (f.read("sm_clock_max_mhz", nv.device_get_max_clock_info, "nvmlDeviceGetMaxClockInfo", dev, nvml::clock_sm,
             &sm_clock_max)) {
    d["sm_clock_max_mhz"] = sm_clock_max;
  }

  unsigned mw = 0, mw_min = 0, mw_max = 0;
  if (f.read("power_limit_w", nv.device_get_power_management_limit, "nvmlDeviceGetPowerManagementLimit", dev, &mw)) {
    d["power_limit_w"] = mw / 1000.0;
  }
  if (f.read("power_limit_default_w", nv.device_get_power_management_default_limit,
             "nvmlDeviceGetPowerManagementDefaultLimit", dev, &mw)) {
    d["power_limit_default_w"] = mw / 1000.0;
  }
  if (f.read("power_limit_max_w", nv.device_get_power_management_limit_constraints,
             "nvmlDeviceGetPowerManagementLimitConstraints", dev, &mw_min, &mw_max)) {
    d["power_limit_min_w"] = mw_min / 1000.0;
    d["power_limit_max_w"] = mw_max / 1000.0;
  }
  if (f.read("power_draw_w", nv.device_get_power_usage, "nvmlDeviceGetPowerUsage", dev, &mw)) {
    state["power_draw_w"] = mw / 1000.0;
  }

  // The current PCIe generation and width drop while the link idles (power saving); the max values
  // are what the slot and card negotiate under load.
  unsigned v = 0;
  if (f.read("pcie_gen_current", nv.device_get_curr_pcie_link_generation, "nvmlDeviceGetCurrPcieLinkGeneration",
             dev, &v)) {
    state["pcie_gen_current"] = v;
  }
  if (f.read("pcie_gen_max", nv.device_get_max_pcie_link_generation, "nvmlDeviceGetMaxPcieLinkGeneration", dev,
             &v)) {
    d["pcie_gen_max"] = v;
  }
  if (f.read("pcie_width_current", nv.device_get_curr_pcie_link_width, "nvmlDeviceGetCurrPcieLinkWidth", dev,
             &v)) {
    state["pcie_width_current"] = v;
  }
  if (f.read("pcie_width_max", nv.device_get_max_pcie_link_width, "nvmlDeviceGetMaxPcieLinkWidth", dev, &v)) {
    d["pcie_width_max"] = v;
  }

  if (nv.device_get_nvlink_state == nullptr) {
    unavailable["nvlink_links_active"] = "nvmlDeviceGetNvLinkState is not in this libnvidia-ml";
  } else {
    unsigned active = 0, answered = 0;
    nvml::result first_error = nvml::success;
    for (unsigned link = 0; link < nvml::max_nvlinks; ++link) {
      int state = 0;
      const nvml::result r = nv.device_get_nvlink_state(dev, link, &state);
      if (r == nvml::success) {
        ++answered;
        if (state == nvml::feature_enabled) ++active;
      } else if (first_error == nvml::success) {
        first_error = r;
      }
    }
    if (answered > 0) {
      d["nvlink_links_active"] = active;
      d["nvlink_links"] = answered;
    } else {
      // A PCIe card without a bridge answers "Not Supported" for every link.
      unavailable["nvlink_links_active"] = "nvmlDeviceGetNvLinkState: " + nv.error(first_error);
    }
  }

  int ecc = 0, ecc_pending = 0;
  if (f.read("ecc_enabled", nv.device_get_ecc_mode, "nvmlDeviceGetEccMode", dev, &ecc, &ecc_pending)) {
    d["ecc_enabled"] = ecc == nvml::feature_enabled;
    d["ecc_pending_enabled"] = ecc_pending == nvml::feature_enabled;
  }
  unsigned mig = 0, mig_pending = 0;
  if (f.read("mig_enabled", nv.device_get_mig_mode, "nvmlDeviceGetMigMode", dev, &mig, &mig_pending)) {
    d["mig_enabled"] = mig == 1;  // NVML_DEVICE_MIG_ENABLE
    d["mig_pending_enabled"] = mig_pending == 1;
  }

  unsigned long long reasons = 0;
  if (f.read("clocks_event_reasons", nv.device_get_clocks_event_reasons,
             nv.clocks_event_reasons_symbol != nullptr ? nv.clocks_event_reasons_symbol
                                                       : "nvmlDeviceGetCurrentClocksEventReasons",
             dev, &reasons)) {
    state["clocks_event_reasons_mask"] = reasons;
    state["clocks_event_reasons"] = reason_names(reasons);
  }
  unsigned temp = 0;
  if (f.read("temperature_c", nv.device_get_temperature, "nvmlDeviceGetTemperature", dev, nvml::temperature_gpu,
             &temp)) {
    state["temperature_c"] = temp;
  }
  d["state"] = std::move(state);
  if (!unavailable.empty()) d["unavailable"] = std::move(unavailable);
  return d;
}

// Polls one device on its own thread: the thread that runs the case never calls NVML and never
// takes a lock between begin() and end().
class nvml_monitor final : public throttle_monitor {
 public:
  nvml_monitor(const library& nv, nvml::device dev) : m_nv(nv), m_device(dev) {}
  ~nvml_monitor() override { stop(); }

  void begin() override {
    stop();
    m_mask = 0;
    m_sm_min = std::numeric_limits<unsigned>::max();
    m_sm_max = 0;
    m_temp_max = 0;
    m_power_max_mw = 0;
    m_stop = false;
    m_thread = std::thread([this] { poll(); });
  }

  throttle_sample end() override {
    stop();
    throttle_sample s;
    s.available = true;
    s.reasons_mask = m_mask;
    for (const auto& rb : nvml::reason_bits) {
      if ((m_mask & rb.bit) != 0 && (rb.bit & nvml::benign_reasons) == 0) s.reasons.emplace_back(rb.name);
    }
    s.sm_clock_mhz_min = m_sm_max > 0 ? m_sm_min : 0;
    s.sm_clock_mhz_max = m_sm_max;
    s.temperature_c_max = m_temp_max;
    s.power_w_max = m_power_max_mw / 1000.0;
    return s;
  }

 private:
  static constexpr auto period = std::chrono::milliseconds(20);

  void stop() {
    if (!m_thread.joinable()) return;
    {
      std::lock_guard lock(m_mutex);
      m_stop = true;
    }
    m_wake.notify_one();
    m_thread.join();  // the join publishes the thread's aggregates to the caller
  }

  void poll() {
    std::unique_lock lock(m_mutex);
    for (;;) {
      lock.unlock();
      sample();  // once at begin, every period, and once more when asked to stop
      lock.lock();
      if (m_stop) return;
      m_wake.wait_for(lock, period, [this] { return m_stop; });
    }
  }

  void sample() {
    unsigned long long reasons = 0;
    if (m_nv.device_get_clocks_event_reasons != nullptr &&
        m_nv.device_get_clocks_event_reasons(m_device, &reasons) == nvml::success) {
      m_mask |= reasons;
    }
    unsigned v = 0;
    if (m_nv.device_get_clock_info != nullptr &&
        m_nv.device_get_clock_info(m_device, nvml::clock_sm, &v) == nvml::success) {
      m_sm_min = std::min(m_sm_min, v);
      m_sm_max = std::max(m_sm_max, v);
    }
    if (m_nv.device_get_temperature != nullptr &&
        m_nv.device_get_temperature(m_device, nvml::temperature_gpu, &v) == nvml::success) {
      m_temp_max = std::max(m_temp_max, v);
    }
    if (m_nv.device_get_power_usage != nullptr && m_nv.device_get_power_usage(m_device, &v) == nvml::success) {
      m_power_max_mw = std::max(m_power_max_mw, v);
    }
  }

  const library& m_nv;
  nvml::device m_device;
  std::thread m_thread;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stop = false;
  // Written by the polling thread only; read by the caller after join().
  std::uint64_t m_mask = 0;
  unsigned m_sm_min = 0, m_sm_max = 0, m_temp_max = 0, m_power_max_mw = 0;
};

}  // namespace

ojson nvml_fingerprint() {
  const library& nv = library::get();
  ojson out;
  if (!nv.available) {
    out["available"] = false;
    out["reason"] = nv.reason;
    return out;
  }
  ojson versions = ojson::object();
  char driver[nvml::driver_version_buffer] = {};
  if (nv.system_get_driver_version != nullptr &&
      nv.system_get_driver_version(driver, nvml::driver_version_buffer) == nvml::success) {
    versions["driver_version"] = driver;
  }
  int cuda_driver = 0;
  if (nv.system_get_cuda_driver_version_v2 != nullptr &&
      nv.system_get_cuda_driver_version_v2(&cuda_driver) == nvml::success) {
    versions["cuda_driver_version"] = cuda_version_string(cuda_driver);
  }
  unsigned count = 0;
  if (const auto r = nv.device_get_count_v2(&count); r != nvml::success || count == 0) {
    out["available"] = false;
    out["reason"] = r != nvml::success ? "nvmlDeviceGetCount_v2: " + nv.error(r) : "NVML sees no GPU";
    out.update(versions);
    return out;
  }
  out["available"] = true;
  out.update(versions);
  out["device_count"] = count;
  ojson devices = ojson::array();
  for (unsigned i = 0; i < count; ++i) devices.push_back(device_facts(nv, i));
  out["devices"] = std::move(devices);
  return out;
}

std::unique_ptr<throttle_monitor> make_nvml_monitor(int device_index) {
  const library& nv = library::get();
  if (!nv.available) return nullptr;
  const auto match = nvml::nvml_index_for_cuda_device(device_index);
  if (!match) return nullptr;
  nvml::device dev = nullptr;
  if (nv.device_get_handle_by_index_v2(match->nvml_index, &dev) != nvml::success) return nullptr;
  return std::make_unique<nvml_monitor>(nv, dev);
}

}  // namespace itera
