#pragma once
// The device fingerprint (R7): what `itera env` prints and every result's context carries.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace itera {

using ojson = nlohmann::ordered_json;
class backend;

// Host: cpu model, logical cores, memory, os, kernel (from /proc and uname).
ojson host_fingerprint();

// NVML, loaded at run time with dlopen("libnvidia-ml.so.1"); no NVML headers are used.
// Returns {"available": false, "reason": ...} when NVML cannot be loaded or has no device.
// Otherwise per device: name, uuid, pci bus id, memory total/free, bus width, max memory clock and
// theoretical bandwidth, power limit (current, default, max), SM clock (current, max), PCIe
// generation and width (current and max), NVLink links up, ECC mode, MIG mode, clocks event
// (throttle) reasons, temperature; driver and CUDA driver versions.
ojson nvml_fingerprint();

// The catalogue entry of one NVML device of nvml_fingerprint(), as `itera env` matches it: name,
// memory and the board's power limit (maximum, else default, else current). {"id": null, "why":
// ...} when nothing matches.
ojson catalogue_variant(const ojson& nvml_device);

// Library versions found at run time: cuBLASLt, NCCL (dlopen, ncclGetVersion), nvJPEG availability,
// CUPTI. Each entry says "not found" rather than being left out.
ojson library_versions();

// Everything `itera env` reports. `dev` is the opened backend (cuda adds compute capability, SM
// count and runtime versions through backend::describe()); pass nullptr for host-only.
ojson environment(backend* dev);

// The device group of a result's context: the fingerprint of the device a run used, with the
// catalogue match (exact variant) under "variant".
ojson device_fingerprint(backend& dev);

// "OpenBLAS 0.3.21": the BLAS the cpu backend runs, read from the library loaded at run time.
std::string blas_version();

// The software group (part of the recipe): driver, CUDA driver/runtime, cuBLASLt, NCCL.
ojson software_fingerprint(backend& dev);

}  // namespace itera
