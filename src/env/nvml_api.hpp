#pragma once
// The few NVML types and entry points itera uses, declared here so that the code builds without
// nvml.h or a CUDA toolkit. Layouts and values follow nvml.h (NVML API version 12/13):
// nvmlPciInfo_t, nvmlMemory_t (v1), nvmlClockType_t, nvmlTemperatureSensors_t, nvmlEnableState_t,
// nvmlReturn_t, nvmlUtilization_t, nvmlProcessInfo_t, nvmlProcessUtilizationSample_t,
// nvmlPcieUtilCounter_t and the nvmlClocksEventReasons bits. Private to src/env and src/watch
// (`itera watch` samples through the same library object).
#include <cstdint>
#include <optional>
#include <string>

namespace itera::nvml {

// nvmlReturn_t and the other NVML enums are C enums: int-sized on every platform NVML supports.
using result = int;
inline constexpr result success = 0;                // NVML_SUCCESS
inline constexpr result error_invalid_argument = 2;  // NVML_ERROR_INVALID_ARGUMENT
inline constexpr result error_not_supported = 3;     // NVML_ERROR_NOT_SUPPORTED
inline constexpr result error_not_found = 6;         // NVML_ERROR_NOT_FOUND
inline constexpr result error_insufficient_size = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
inline constexpr result error_function_not_found = 13;  // NVML_ERROR_FUNCTION_NOT_FOUND

struct device_st;
using device = device_st*;  // nvmlDevice_t

struct memory_info {  // nvmlMemory_t (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct pci_info {  // nvmlPciInfo_t, filled by nvmlDeviceGetPciInfo_v3
  char bus_id_legacy[16];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;     // device id << 16 | vendor id
  unsigned int pci_subsystem_id;
  char bus_id[32];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE, "00000000:65:00.0"
};
static_assert(sizeof(pci_info) == 68, "nvmlPciInfo_t is 16 + 5*4 + 32 bytes");
static_assert(sizeof(memory_info) == 24, "nvmlMemory_t is three unsigned long long");

struct utilization {  // nvmlUtilization_t: percent of the last sample period (1/6 s to 1 s)
  unsigned int gpu;     // one or more kernels were executing
  unsigned int memory;  // device memory was being read or written
};

// nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses_v3 (and _v2) fill it.
struct process_info {
  unsigned int pid;
  unsigned long long used_gpu_memory;  // bytes; value_not_available when the driver cannot say
  unsigned int gpu_instance_id;        // MIG only
  unsigned int compute_instance_id;    // MIG only
};
static_assert(sizeof(process_info) == 24, "nvmlProcessInfo_t is 4 (+4 padding) + 8 + 4 + 4 bytes");

struct process_utilization_sample {  // nvmlProcessUtilizationSample_t
  unsigned int pid;
  unsigned long long timestamp_us;  // CPU timestamp in microseconds
  unsigned int sm_util;
  unsigned int mem_util;
  unsigned int enc_util;
  unsigned int dec_util;
};
static_assert(sizeof(process_utilization_sample) == 32, "nvmlProcessUtilizationSample_t is 32 bytes");

// NVML_VALUE_NOT_AVAILABLE, as an unsigned long long field holds it.
inline constexpr unsigned long long value_not_available = ~0ULL;
// nvmlPcieUtilCounter_t
inline constexpr int pcie_util_tx_bytes = 0;  // NVML_PCIE_UTIL_TX_BYTES
inline constexpr int pcie_util_rx_bytes = 1;  // NVML_PCIE_UTIL_RX_BYTES

// nvmlClockType_t
inline constexpr int clock_graphics = 0;
inline constexpr int clock_sm = 1;
inline constexpr int clock_mem = 2;
// nvmlTemperatureSensors_t
inline constexpr int temperature_gpu = 0;
// nvmlEnableState_t
inline constexpr int feature_enabled = 1;
// NVML_NVLINK_MAX_LINKS
inline constexpr unsigned max_nvlinks = 18;
// Buffer sizes large enough for any NVML version (NVML_DEVICE_NAME_V2_BUFFER_SIZE,
// NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE).
inline constexpr unsigned name_buffer = 96;
inline constexpr unsigned uuid_buffer = 96;
inline constexpr unsigned driver_version_buffer = 80;

// nvmlClocksEventReasons (formerly nvmlClocksThrottleReasons): bit and the name itera reports.
struct reason_bit {
  std::uint64_t bit;
  const char* name;
};
inline constexpr reason_bit reason_bits[] = {
    {0x0000000000000001ULL, "gpu_idle"},
    {0x0000000000000002ULL, "applications_clocks_setting"},
    {0x0000000000000004ULL, "sw_power_cap"},
    {0x0000000000000008ULL, "hw_slowdown"},
    {0x0000000000000010ULL, "sync_boost"},
    {0x0000000000000020ULL, "sw_thermal_slowdown"},
    {0x0000000000000040ULL, "hw_thermal_slowdown"},
    {0x0000000000000080ULL, "hw_power_brake_slowdown"},
    {0x0000000000000100ULL, "display_clock_setting"},
};
// Bits that say nothing about a measurement being slowed: an idle GPU between launches, and clocks
// the operator pinned on purpose.
inline constexpr std::uint64_t benign_reasons = 0x1ULL | 0x2ULL;

// libnvidia-ml.so.1 (or the file the environment variable ITERA_NVML_LIBRARY names: tests load a
// scripted fake that way), opened and initialised once per process (thread-safe, on first use) and
// shut down at exit. Every entry point is nullptr when this libnvidia-ml lacks it, so a caller can
// leave one field out instead of failing the whole fingerprint.
struct library {
  bool available = false;
  std::string reason;  // why not available
  std::string path;    // what was opened: "libnvidia-ml.so.1" or $ITERA_NVML_LIBRARY

  result (*init_v2)() = nullptr;
  result (*shutdown)() = nullptr;
  const char* (*error_string)(result) = nullptr;
  result (*system_get_driver_version)(char*, unsigned) = nullptr;
  result (*system_get_cuda_driver_version_v2)(int*) = nullptr;
  result (*device_get_count_v2)(unsigned*) = nullptr;
  result (*device_get_handle_by_index_v2)(unsigned, device*) = nullptr;
  result (*device_get_name)(device, char*, unsigned) = nullptr;
  result (*device_get_uuid)(device, char*, unsigned) = nullptr;
  result (*device_get_pci_info_v3)(device, pci_info*) = nullptr;
  result (*device_get_memory_info)(device, memory_info*) = nullptr;
  result (*device_get_memory_bus_width)(device, unsigned*) = nullptr;
  result (*device_get_max_clock_info)(device, int, unsigned*) = nullptr;
  result (*device_get_clock_info)(device, int, unsigned*) = nullptr;
  result (*device_get_power_management_limit)(device, unsigned*) = nullptr;
  result (*device_get_power_management_default_limit)(device, unsigned*) = nullptr;
  result (*device_get_power_management_limit_constraints)(device, unsigned*, unsigned*) = nullptr;
  result (*device_get_power_usage)(device, unsigned*) = nullptr;
  result (*device_get_curr_pcie_link_generation)(device, unsigned*) = nullptr;
  result (*device_get_max_pcie_link_generation)(device, unsigned*) = nullptr;
  result (*device_get_curr_pcie_link_width)(device, unsigned*) = nullptr;
  result (*device_get_max_pcie_link_width)(device, unsigned*) = nullptr;
  result (*device_get_nvlink_state)(device, unsigned, int*) = nullptr;
  result (*device_get_ecc_mode)(device, int*, int*) = nullptr;
  result (*device_get_mig_mode)(device, unsigned*, unsigned*) = nullptr;
  // nvmlDeviceGetCurrentClocksEventReasons, or the older nvmlDeviceGetCurrentClocksThrottleReasons
  // (same signature, same bits) on drivers before the rename.
  result (*device_get_clocks_event_reasons)(device, unsigned long long*) = nullptr;
  const char* clocks_event_reasons_symbol = nullptr;
  result (*device_get_temperature)(device, int, unsigned*) = nullptr;
  // Sampled by `itera watch`.
  result (*device_get_utilization_rates)(device, utilization*) = nullptr;
  result (*device_get_pcie_throughput)(device, int, unsigned*) = nullptr;  // KB/s over 20 ms
  result (*device_get_total_energy_consumption)(device, unsigned long long*) = nullptr;  // mJ
  // nvmlDeviceGetComputeRunningProcesses_v3, or _v2 (same nvmlProcessInfo_t) on older drivers.
  result (*device_get_compute_running_processes)(device, unsigned*, process_info*) = nullptr;
  const char* compute_running_processes_symbol = nullptr;
  result (*device_get_process_utilization)(device, process_utilization_sample*, unsigned*,
                                           unsigned long long) = nullptr;

  std::string error(result r) const;  // nvmlErrorString, or the number when that is missing
  ~library();

  static const library& get();

 private:
  library();
  void* m_handle = nullptr;
  bool m_initialised = false;
};

// The NVML device a CUDA device ordinal refers to. NVML enumerates every GPU in PCI order and
// ignores CUDA_VISIBLE_DEVICES, while CUDA ordinals follow the visible set and CUDA_DEVICE_ORDER,
// so the two are matched by PCI bus id when the CUDA runtime is already loaded in this process;
// otherwise NVML index == CUDA ordinal is assumed and `how` says so.
struct device_match {
  unsigned nvml_index = 0;
  std::string how;  // "pci_bus_id" | "assumed_same_index"
};
std::optional<device_match> nvml_index_for_cuda_device(int cuda_ordinal);

// "0000:65:00.0" and "00000000:65:00.0" name the same device: compares the numbers.
bool same_pci_bus_id(const std::string& a, const std::string& b);

}  // namespace itera::nvml
