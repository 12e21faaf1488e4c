// A fake libnvidia-ml for the tests of itera watch and itera doctor: the NVML entry points itera
// binds, answering from fake_nvml_script.hpp. Loaded with ITERA_NVML_LIBRARY=<this .so>.
//
// - Devices: FAKE_NVML_DEVICE_COUNT (default 1), each an "NVIDIA H100 PCIe" with its own sample count.
// - The process list of a device: every child of the process that loaded this library (itera's
//   watched command) with the row's child_mib, every grandchild with grandchild_mib, and PID 1
//   (never in a watched tree) with stranger_mib.
// - FAKE_NVML_CUDA_VERSION sets the CUDA version the "driver" supports (default 12040, 12.4);
//   FAKE_NVML_INIT_ERROR makes nvmlInit_v2 return that nvmlReturn_t; FAKE_NVML_HOST_PIDS lists one
//   process under a PID that does not exist here, as NVML does inside a container.
// Entry points not defined here (NVLink, ECC, MIG, bus width) are absent, as on an old driver.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fake_nvml_script.hpp"

namespace {

constexpr int success = 0, invalid_argument = 2, not_supported = 3, not_found = 6, insufficient_size = 7;
constexpr unsigned max_devices = 8;
constexpr unsigned long long mib = 1024ULL * 1024ULL;

struct fake_device {
  unsigned index;
  std::atomic<long long> samples{0};  // nvmlDeviceGetUtilizationRates calls so far
};
fake_device g_devices[max_devices] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};

unsigned device_count() {
  const char* e = std::getenv("FAKE_NVML_DEVICE_COUNT");
  const int n = e != nullptr ? std::atoi(e) : 1;
  return static_cast<unsigned>(std::clamp(n, 0, static_cast<int>(max_devices)));
}

const fake_nvml::row& current(const fake_device* d) {
  const long long k = std::max(0LL, d->samples.load() - 1);
  return fake_nvml::script[std::min<long long>(k, fake_nvml::rows - 1)];
}

fake_device* dev(void* handle) { return static_cast<fake_device*>(handle); }

// Children of `parent`, from /proc/<pid>/stat.
std::vector<int> children_of(int parent) {
  std::vector<int> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    std::ifstream f("/proc/" + std::string(e->d_name) + "/stat");
    std::string line;
    if (!std::getline(f, line)) continue;
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    int ppid = 0;
    if (rest >> state >> ppid && ppid == parent) out.push_back(static_cast<int>(pid));
  }
  closedir(d);
  return out;
}

struct process_info {  // nvmlProcessInfo_t
  unsigned pid;
  unsigned long long used;
  unsigned gi, ci;
};
struct process_sample {  // nvmlProcessUtilizationSample_t
  unsigned pid;
  unsigned long long ts;
  unsigned sm, mem, enc, dec;
};
struct pci_info {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

int copy_text(char* out, unsigned size, const std::string& s) {
  if (out == nullptr || size <= s.size()) return insufficient_size;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return success;
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  const char* e = std::getenv("FAKE_NVML_INIT_ERROR");
  return e != nullptr ? std::atoi(e) : success;
}
int nvmlShutdown() { return success; }
const char* nvmlErrorString(int r) {
  switch (r) {
    case success: return "Success";
    case not_supported: return "Not Supported";
    case not_found: return "Not Found";
    case insufficient_size: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}
int nvmlSystemGetDriverVersion(char* out, unsigned size) { return copy_text(out, size, fake_nvml::driver_version); }
int nvmlSystemGetCudaDriverVersion_v2(int* v) {
  const char* e = std::getenv("FAKE_NVML_CUDA_VERSION");
  *v = e != nullptr ? std::atoi(e) : fake_nvml::cuda_driver_version;
  return success;
}
int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = device_count();
  return success;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** handle) {
  if (i >= device_count()) return invalid_argument;
  *handle = &g_devices[i];
  return success;
}
int nvmlDeviceGetName(void* h, char* out, unsigned size) {
  (void)h;
  return copy_text(out, size, fake_nvml::device_name);
}
int nvmlDeviceGetUUID(void* h, char* out, unsigned size) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-fa4e0000-0000-0000-0000-00000000000%u", dev(h)->index);
  return copy_text(out, size, buf);
}
int nvmlDeviceGetPciInfo_v3(void* h, pci_info* p) {
  std::memset(p, 0, sizeof *p);
  p->bus = 0x10 + dev(h)->index;
  p->pci_device_id = 0x233110deU;
  std::snprintf(p->bus_id, sizeof p->bus_id, "00000000:%02X:00.0", p->bus);
  std::snprintf(p->bus_id_legacy, sizeof p->bus_id_legacy, "0000:%02X:00.0", p->bus);
  return success;
}
int nvmlDeviceGetMemoryInfo(void* h, unsigned long long* m) {  // nvmlMemory_t: total, free, used
  const auto& r = current(dev(h));
  m[0] = fake_nvml::memory_total_mib * mib;
  m[2] = r.used_mib * mib;
  m[1] = m[0] - m[2];
  return success;
}
int nvmlDeviceGetClockInfo(void* h, int type, unsigned* v) {
  const auto& r = current(dev(h));
  if (type == 1) *v = r.sm_mhz;
  else if (type == 2) *v = r.memory_mhz;
  else *v = r.sm_mhz;
  return success;
}
int nvmlDeviceGetMaxClockInfo(void* h, int type, unsigned* v) {
  (void)h;
  *v = type == 2 ? 2619 : 1755;
  return success;
}
int nvmlDeviceGetPowerUsage(void* h, unsigned* mw) {
  *mw = current(dev(h)).power_mw;
  return success;
}
int nvmlDeviceGetPowerManagementLimit(void* h, unsigned* mw) {
  (void)h;
  *mw = fake_nvml::power_limit_mw;
  return success;
}
int nvmlDeviceGetPowerManagementDefaultLimit(void* h, unsigned* mw) { return nvmlDeviceGetPowerManagementLimit(h, mw); }
int nvmlDeviceGetPowerManagementLimitConstraints(void* h, unsigned* lo, unsigned* hi) {
  (void)h;
  *lo = 200000;
  *hi = fake_nvml::power_limit_mw;
  return success;
}
int nvmlDeviceGetTotalEnergyConsumption(void* h, unsigned long long* mj) {
  const long long k = std::max(0LL, dev(h)->samples.load() - 1);
  *mj = fake_nvml::energy_base_mj + static_cast<unsigned long long>(k) * fake_nvml::energy_step_mj;
  return success;
}
int nvmlDeviceGetUtilizationRates(void* h, unsigned* u) {  // nvmlUtilization_t: gpu, memory
  dev(h)->samples.fetch_add(1);
  const auto& r = current(dev(h));
  u[0] = r.gpu_pct;
  u[1] = r.memory_pct;
  return success;
}
int nvmlDeviceGetCurrentClocksEventReasons(void* h, unsigned long long* reasons) {
  *reasons = current(dev(h)).reasons;
  return success;
}
int nvmlDeviceGetPcieThroughput(void* h, int counter, unsigned* kb) {
  const auto& r = current(dev(h));
  if (counter == 0) *kb = r.pcie_tx_kb;
  else if (counter == 1) *kb = r.pcie_rx_kb;
  else return invalid_argument;
  return success;
}
int nvmlDeviceGetTemperature(void* h, int sensor, unsigned* c) {
  (void)sensor;
  *c = current(dev(h)).temperature_c;
  return success;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void* h, unsigned* count, process_info* infos) {
  const auto& r = current(dev(h));
  std::vector<process_info> list;
  if (std::getenv("FAKE_NVML_HOST_PIDS") != nullptr) {
    // As seen from a container: the host's PIDs, which name nothing in this PID namespace.
    list.push_back({static_cast<unsigned>(fake_nvml::host_pid), r.child_mib * mib, 0, 0});
    if (*count < list.size() || infos == nullptr) {
      *count = static_cast<unsigned>(list.size());
      return insufficient_size;
    }
    std::copy(list.begin(), list.end(), infos);
    *count = static_cast<unsigned>(list.size());
    return success;
  }
  for (int child : children_of(getpid())) {
    list.push_back({static_cast<unsigned>(child), r.child_mib * mib, 0, 0});
    for (int grandchild : children_of(child))
      list.push_back({static_cast<unsigned>(grandchild), fake_nvml::grandchild_mib * mib, 0, 0});
  }
  list.push_back({1, fake_nvml::stranger_mib * mib, 0, 0});
  if (*count < list.size() || infos == nullptr) {
    *count = static_cast<unsigned>(list.size());
    return insufficient_size;
  }
  std::copy(list.begin(), list.end(), infos);
  *count = static_cast<unsigned>(list.size());
  return success;
}
int nvmlDeviceGetProcessUtilization(void* h, process_sample* out, unsigned* count, unsigned long long last_seen) {
  const long long k = dev(h)->samples.load();
  const auto stamp = static_cast<unsigned long long>(k) * 1000ULL;  // microseconds
  if (stamp <= last_seen) return not_found;
  std::vector<process_sample> list;
  for (int child : children_of(getpid())) list.push_back({static_cast<unsigned>(child), stamp, current(dev(h)).gpu_pct, 0, 0, 0});
  if (list.empty()) return not_found;
  if (out == nullptr || *count < list.size()) {
    *count = static_cast<unsigned>(list.size());
    return insufficient_size;
  }
  std::copy(list.begin(), list.end(), out);
  *count = static_cast<unsigned>(list.size());
  return success;
}

}  // extern "C"
