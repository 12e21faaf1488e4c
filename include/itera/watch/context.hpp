#pragma once
// The context line of a run that observes a program (`itera watch`) or probes the software stack
// (`itera doctor`) instead of running a workload on a backend: build facts, host fingerprint, the
// NVML fingerprint of the given devices with their catalogue variant, and the driver versions.
// It opens no CUDA context and loads no CUDA library, so the observed program has the GPU to itself.
#include <string>
#include <vector>

#include "itera/core/result.hpp"

namespace itera {

// backend "cuda" with the device's facts (one device), or a "<n> GPUs: ..." device without a
// variant (several: such a run does not describe one card, R7), or backend "cpu" with a device
// {"kind": "none", "name": "no GPU sampled", "nvml": {available, reason}} when there is none.
// software holds only what is true of every program on this machine: the driver and the CUDA
// version it supports (the program's own libraries are its business; `itera doctor` reports them).
run_context observer_context(const std::string& command, const std::vector<unsigned>& nvml_devices);

}  // namespace itera
