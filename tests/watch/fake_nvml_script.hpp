#pragma once
// What the fake libnvidia-ml (fake_nvml.cpp) answers, shared with the tests that check itera watch
// read it right. Row k answers the k-th sample of a device (a sample begins with
// nvmlDeviceGetUtilizationRates); samples past the last row repeat it.
namespace fake_nvml {

struct row {
  unsigned gpu_pct, memory_pct;
  unsigned sm_mhz, memory_mhz;
  unsigned power_mw;
  unsigned pcie_tx_kb, pcie_rx_kb;  // KB/s, as nvmlDeviceGetPcieThroughput answers
  unsigned long long reasons;       // nvmlClocksEventReasons bits
  unsigned long long used_mib;      // nvmlDeviceGetMemoryInfo used
  unsigned long long child_mib;     // each child of the process that loaded the library
  unsigned temperature_c;
};

inline constexpr row script[] = {
    // gpu mem   sm     mem   power_mw  tx    rx      reasons     used   child  temp
    {0, 0, 345, 2619, 70000, 0, 0, 0x1, 1000, 0, 30},            // idle (a benign reason)
    {10, 5, 1980, 2619, 150000, 1000, 200000, 0x1, 3000, 2000, 35},
    {90, 40, 1980, 2619, 300000, 2000, 50000, 0x0, 9000, 8000, 45},
    {100, 60, 1755, 2619, 350000, 500, 10000, 0x4, 9000, 8000, 60},    // sw_power_cap
    {100, 60, 1650, 2619, 349000, 500, 10000, 0xC, 9000, 8000, 70},    // sw_power_cap + hw_slowdown
    {100, 55, 1700, 2619, 348000, 500, 10000, 0x4, 9000, 8000, 68},    // sw_power_cap
    {80, 30, 1980, 2619, 250000, 3000, 2000, 0x0, 5000, 4000, 55},
    {40, 10, 1980, 2619, 120000, 100, 100, 0x0, 5000, 4000, 50},
};
inline constexpr unsigned rows = sizeof(script) / sizeof(script[0]);
inline constexpr unsigned first_throttled_row = 3, last_throttled_row = 5;

inline constexpr unsigned long long grandchild_mib = 100;    // each grandchild of that process
inline constexpr unsigned long long stranger_mib = 7000;     // PID 1, never part of a watched tree
inline constexpr int host_pid = 2000000000;                   // FAKE_NVML_HOST_PIDS: above any pid_max
inline constexpr unsigned long long energy_base_mj = 5000000000ULL;
inline constexpr unsigned long long energy_step_mj = 100000;  // the energy counter's increase per sample
inline constexpr unsigned long long memory_total_mib = 81559;  // an H100 PCIe 80GB
inline constexpr unsigned power_limit_mw = 350000;
inline constexpr int cuda_driver_version = 12040;  // FAKE_NVML_CUDA_VERSION overrides it
inline constexpr const char* driver_version = "550.00-fake";
inline constexpr const char* device_name = "NVIDIA H100 PCIe";

}  // namespace fake_nvml
