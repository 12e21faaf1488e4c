#pragma once
// `itera doctor` (R14): checks the software stack against the card and says what really works.
// Each item is tried, not only imported: the Python items run in their own interpreter process
// (src/doctor/probes.py, compiled into the binary) with a timeout each, so one crash or hang costs
// that item only; the driver item reads NVML and libcuda through dlopen. docs/doctor.md.
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "itera/core/result.hpp"
#include "itera/watch/process.hpp"

namespace itera::doctor {

inline constexpr int workload_version = 1;

enum class verdict { works, fails, absent, skipped };
const char* to_string(verdict v);

struct item_result {
  std::string item;
  verdict v = verdict::fails;
  std::string version;  // of the package the item tries; "" when none applies
  std::string detail;   // how it was tried and what came out, or why not
  ojson facts = ojson::object();
  verification check;   // a numerical comparison against a reference, when the item made one
  double seconds = 0;
};

// Every item, in the order they run and are shown: python, torch, driver, arch, bf16, fp8,
// flash-attn, xformers, bitsandbytes, triton, transformer-engine.
const std::vector<std::string>& item_names();

// "--require torch,fp8,flash_attn": canonical names, in the order given ("all": every item).
// usage_error naming the items for an unknown one.
std::vector<std::string> parse_required(const std::vector<std::string>& names);

// The probe program (src/doctor/probes.py), as compiled into the binary.
std::string_view probes_source();

// One probe's outcome from its captured run: the ITERA_DOCTOR_RESULT line when it printed one;
// otherwise fails, naming the timeout or the signal and quoting the last line of its stderr.
item_result parse_probe_output(const std::string& item, const proc::captured& run, double timeout_s);

// What the driver says about itself: NVML (driver version, the CUDA version it supports) and
// libcuda (cuDriverGetVersion, cuInit), each optional with the reason it is missing.
struct driver_facts {
  std::optional<std::string> driver_version;  // nvmlSystemGetDriverVersion
  std::optional<int> nvml_cuda_version;       // nvmlSystemGetCudaDriverVersion_v2, 1000*major + 10*minor
  std::string nvml_reason;
  std::optional<int> libcuda_version;         // cuDriverGetVersion
  std::optional<int> cuinit_result;           // cuInit(0): 0 is CUDA_SUCCESS
  std::string cuinit_error;                   // cuGetErrorName of a failed cuInit
  std::string libcuda_path;                   // libcuda.so.1, or $ITERA_CUDA_LIBRARY
  std::string libcuda_reason;
};
driver_facts read_driver();

// The driver item: the CUDA version the driver supports against the runtime torch was built with
// ("13.0"; empty when unknown, `why_unknown` says why).
item_result driver_verdict(const driver_facts& d, const std::string& runtime_cuda, const std::string& why_unknown);

// The verdict table and the required items' outcome, as markdown.
void write_markdown(std::ostream& out, const std::vector<item_result>& results, const std::vector<std::string>& required,
                    const std::string& heading);

// The required items that do not work (any verdict but works), in the order required.
std::vector<std::string> not_working(const std::vector<item_result>& results, const std::vector<std::string>& required);

// The results-file case of an item: workload "doctor", axis item, status ok (works), failed
// (fails) or skipped (absent, skipped) with the detail as message.
case_record to_case(const item_result& r, const std::string& backend);

struct options {
  std::string python = "python3";
  bool python_given = false;  // --python named it: a python that cannot run is a usage error
  std::vector<std::string> require;
  std::string out;            // results file, "" for none
  double timeout_s = 300;
  std::string command_line;
};

// Runs every item, prints the table on stdout, writes the results file when asked. Returns 0, or
// exit_code::cases_failed when a required item does not work.
int run(const options& o);

}  // namespace itera::doctor
