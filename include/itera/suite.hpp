#pragma once
// The library's entry points above the core: what the CLI, and later the Python package and C API,
// call. Lives in itera_lib (src/lib), the layer that knows which backends were built.
#include <string>
#include <vector>

#include "itera/core/runner.hpp"

namespace itera {

// The run's context: build facts, host, device fingerprint and software versions.
run_context make_context(backend& dev, const std::string& command);

// Measures the ceilings of DESIGN.md (Definitions: Utilisation) on this device: a large
// device-to-device copy, pinned host-to-device and device-to-host copies, and a large GEMM per
// format in `gemm_formats` (8192^3 on cuda, 512^3 on cpu). Each is a case with role "ceiling"
// (one launch a sample); each GEMM again with role "sustained_ceiling" (batches of launches back to
// back, run_options::ceiling_batch_s: what a power-capped card sustains; "gemm.<format>.sustained").
void measure_ceilings(runner& r, const std::vector<std::string>& gemm_formats);

// Formats table (R14): per format, supported by the hardware, compiled into this binary, and
// runs in the engine (a small GEMM really executed and matched the cpu reference).
ojson formats_table(backend* dev);

// `itera run`: ceilings, then every workload's suite at sizes chosen from the device found.
struct suite_summary {
  std::vector<case_record> records;
  std::size_t failed = 0;
};
suite_summary run_default_suite(runner& r);

}  // namespace itera
