#include "itera/suite.hpp"

#include <ctime>

#include <fmt/format.h>

#include "itera/core/build_info.hpp"
#include "itera/env/fingerprint.hpp"
#include "workloads/gemm/gemm.hpp"

namespace itera {

run_context make_context(backend& dev, const std::string& command) {
  run_context c;
  const auto& b = this_build();
  c.itera_version = std::string(b.version);
  c.git_commit = std::string(b.git_commit);
  c.build_type = std::string(b.build_type);
  c.cuda_architectures = std::string(b.cuda_architectures);
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
  c.started_utc = stamp;
  c.command = command;
  c.backend = std::string(dev.name());
  c.host = host_fingerprint();
  c.device = device_fingerprint(dev);
  c.software = software_fingerprint(dev);
  return c;
}

void measure_ceilings(runner& r, const std::vector<std::string>& gemm_formats) {
  const auto& workloads = builtin_workloads();
  const bool cpu = r.device().name() == "cpu";
  const auto& transfer = workloads.get("transfer");
  const std::string copy_bytes = cpu ? "256Mi" : "1Gi";
  const axis_overrides copies[] = {
      {{"direction", "d2d"}, {"memory", "device"}, {"bytes", copy_bytes}},
      {{"direction", "h2d"}, {"memory", "pinned"}, {"bytes", copy_bytes}},
      {{"direction", "d2h"}, {"memory", "pinned"}, {"bytes", copy_bytes}},
  };
  std::vector<axis_values> copy_cases;
  for (const auto& o : copies)
    for (auto& c : expand_cases(transfer, o)) copy_cases.push_back(std::move(c));
  r.run(transfer, copy_cases, "ceiling");

  const auto& gemm = workloads.get("gemm");
  const std::string n = cpu ? "512" : "8192";
  std::vector<axis_values> gemm_cases;
  for (const auto& f : gemm_formats)
    for (auto& c : expand_cases(gemm, {{"M", n}, {"N", n}, {"K", n}, {"format", f}})) gemm_cases.push_back(std::move(c));
  if (gemm_cases.empty()) return;
  r.run(gemm, gemm_cases, "ceiling");
  // What the card sustains (a power cap binds dense matrix work, not copies): batches of launches
  // back to back, keys sustained_key("gemm.<format>").
  r.run(gemm, gemm_cases, "sustained_ceiling");
}

namespace {

// Compute capability x10 of the device, from the backend's own description.
int compute_capability(backend& dev) {
  const auto d = dev.describe();
  if (d.contains("compute_capability_x10")) return d.at("compute_capability_x10").get<int>();
  return 0;
}

bool archs_cover(std::string_view archs, int cc) {
  // "80;89;90a": real architectures run on a device of the same major version and >= minor.
  std::size_t pos = 0;
  while (pos < archs.size()) {
    const auto end = archs.find(';', pos);
    const auto item = archs.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    const int arch = std::atoi(std::string(item).c_str());
    if (arch / 10 == cc / 10 && arch <= cc) return true;
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  return false;
}

}  // namespace

ojson formats_table(backend* dev) {
  const auto& b = this_build();
  const bool cuda = dev && dev->name() == "cuda";
  const int cc = cuda ? compute_capability(*dev) : 0;
  ojson rows = ojson::array();
  for (const auto& t : gemm::all_formats()) {
    ojson row = {{"format", t.name},
                 {"input_a", t.input_a},
                 {"input_b", t.input_b},
                 {"output", t.output},
                 {"compute", t.compute},
                 {"accumulate", t.accumulate},
                 {"min_compute_capability", fmt::format("{}.{}", t.min_compute_capability / 10, t.min_compute_capability % 10)}};
    if (!cuda) {
      row["hardware_supported"] = nullptr;
      row["compiled"] = b.cuda_enabled;
      row["runs"] = nullptr;
      row["note"] = dev ? "no GPU in use: the cpu backend runs fp32 and bf16 only" : "no GPU";
      rows.push_back(row);
      continue;
    }
    const bool hw = cc >= t.min_compute_capability;
    // GEMMs come from cuBLASLt's own kernels; this binary's kernels must also cover the device.
    const bool compiled = b.cuda_enabled && archs_cover(b.cuda_architectures, cc);
    row["hardware_supported"] = hw;
    row["compiled"] = compiled;
    if (!hw) {
      row["runs"] = false;
      row["note"] = fmt::format("needs compute capability {}.{}; this device has {}.{}: not tried",
                                t.min_compute_capability / 10, t.min_compute_capability % 10, cc / 10, cc % 10);
    } else {
#if ITERA_WITH_CUDA
      const auto probe = gemm::probe_cuda(*dev, t.id);
      row["runs"] = probe.ran && probe.passed;
      if (probe.ran) {
        row["error"] = probe.error;
        row["tolerance"] = probe.tolerance;
      }
      row["note"] = probe.ran ? (probe.passed ? "256^3 GEMM ran and matched the cpu reference" : "ran but did not match: " + probe.message)
                              : probe.message;
#else
      row["runs"] = false;
      row["note"] = "built without CUDA";
#endif
    }
    rows.push_back(row);
  }
  return rows;
}

suite_summary run_default_suite(runner& r) {
  suite_summary s;
  const bool cpu = r.device().name() == "cpu";
  measure_ceilings(r, cpu ? std::vector<std::string>{"fp32", "bf16"}
                          : std::vector<std::string>{"fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8"});
  for (const auto& w : builtin_workloads().all()) {
    std::vector<axis_values> cases;
    const auto groups = w.suite ? w.suite(r.device()) : std::vector<axis_overrides>{{}};
    for (const auto& g : groups)
      for (auto& c : expand_cases(w, g)) cases.push_back(std::move(c));
    auto records = r.run(w, cases);
    for (auto& rec : records) s.records.push_back(std::move(rec));
  }
  s.failed = r.failed_count();
  return s;
}

}  // namespace itera
