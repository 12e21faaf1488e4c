// The environment fingerprint: host facts always, GPU facts when NVML is there and a clear reason
// when it is not, every library listed, and no exception on a machine without a GPU.
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "itera/core/backend.hpp"
#include "itera/core/recorder.hpp"
#include "itera/core/runner.hpp"
#include "itera/env/fingerprint.hpp"

namespace {

using itera::ojson;

// A backend that claims a name and device, to reach the cpu and cuda branches of the fingerprint
// without opening a real device.
class named_backend final : public itera::backend {
 public:
  named_backend(std::string name, std::string device, std::uint64_t total_bytes)
      : m_name(std::move(name)), m_device(std::move(device)), m_total(total_bytes) {}
  std::string_view name() const override { return m_name; }
  std::string device_name() const override { return m_device; }
  std::unique_ptr<itera::device_timer> make_timer() override { return nullptr; }
  itera::device_memory memory() const override { return {m_total, m_total}; }
  void synchronize() override {}
  itera::memory_tracker& memory_tracking() override { return m_tracker; }
  nlohmann::ordered_json describe() const override { return {{"compute_capability", 90}}; }

 private:
  std::string m_name, m_device;
  std::uint64_t m_total;
  itera::memory_tracker m_tracker;
};

bool nvml_here() { return itera::nvml_fingerprint().value("available", false); }

TEST(HostFingerprint, HasCpuCoresMemoryAndNoHostname) {
  const ojson h = itera::host_fingerprint();
  ASSERT_TRUE(h.contains("cpu_model"));
  EXPECT_FALSE(h["cpu_model"].get<std::string>().empty());
  EXPECT_GT(h.value("logical_cores", 0), 0);
  EXPECT_GT(h.value("memory_total_bytes", 0ULL), 0ULL);
  EXPECT_GT(h.value("memory_available_bytes", 0ULL), 0ULL);
  EXPECT_LE(h["memory_available_bytes"].get<std::uint64_t>(), h["memory_total_bytes"].get<std::uint64_t>());
  EXPECT_FALSE(h.value("os", std::string()).empty());
  EXPECT_FALSE(h.value("kernel", std::string()).empty());
  EXPECT_FALSE(h.contains("hostname"));  // R18
}

TEST(NvmlFingerprint, NeverThrowsAndExplainsAbsence) {
  ojson gpu;
  ASSERT_NO_THROW(gpu = itera::nvml_fingerprint());
  ASSERT_TRUE(gpu.contains("available"));
  if (!gpu["available"].get<bool>()) {
    EXPECT_FALSE(gpu.value("reason", std::string()).empty());
    EXPECT_FALSE(gpu.contains("devices"));
    return;
  }
  ASSERT_GT(gpu["devices"].size(), 0u);
  for (const auto& d : gpu["devices"]) {
    EXPECT_FALSE(d.value("name", std::string()).empty());
    EXPECT_GT(d.value("memory_total_bytes", 0ULL), 0ULL);
    if (d.contains("bandwidth_theoretical_gbs")) {
      EXPECT_GT(d["bandwidth_theoretical_gbs"].get<double>(), 0);
      EXPECT_TRUE(d.contains("bandwidth_formula"));
    }
  }
}

TEST(NvmlMonitor, NullWithoutNvmlElseSamples) {
  auto monitor = itera::make_nvml_monitor(0);
  if (!nvml_here()) {
    EXPECT_EQ(monitor, nullptr);
    return;
  }
  ASSERT_NE(monitor, nullptr);
  monitor->begin();
  const itera::throttle_sample s = monitor->end();
  EXPECT_TRUE(s.available);
  EXPECT_GT(s.sm_clock_mhz_max, 0u);
  for (const auto& r : s.reasons) {
    EXPECT_NE(r, "gpu_idle");
    EXPECT_NE(r, "applications_clocks_setting");
  }
}

TEST(LibraryVersions, EveryLibraryHasAnEntry) {
  const ojson libs = itera::library_versions();
  for (const char* name : {"cudart", "cublaslt", "nccl", "nvjpeg", "cupti"}) {
    ASSERT_TRUE(libs.contains(name)) << name;
    const std::string v = libs[name].value("version", std::string());
    EXPECT_FALSE(v.empty()) << name;
    if (v == "not found") {
      EXPECT_FALSE(libs[name].value("reason", std::string()).empty()) << name;
    }
  }
  EXPECT_TRUE(libs["nvjpeg"].contains("available"));
}

TEST(Environment, HostOnlyStillReportsEverything) {
  const ojson env = itera::environment(nullptr);
  for (const char* key : {"itera", "host", "gpu", "libraries"}) EXPECT_TRUE(env.contains(key)) << key;
  EXPECT_TRUE(env["itera"].contains("git_commit"));
  EXPECT_TRUE(env["itera"].contains("cuda_architectures"));
  if (!env["gpu"]["available"].get<bool>()) {
    EXPECT_FALSE(env["gpu"].value("reason", std::string()).empty());
  } else {
    for (const auto& d : env["gpu"]["devices"]) EXPECT_TRUE(d.contains("variant"));
  }
}

TEST(DeviceFingerprint, CpuBackendIsTheHostCpu) {
  named_backend cpu("cpu", "whatever", 0);
  const ojson d = itera::device_fingerprint(cpu);
  EXPECT_EQ(d["kind"], "cpu");
  EXPECT_EQ(d["name"], itera::host_fingerprint()["cpu_model"]);
  const ojson s = itera::software_fingerprint(cpu);
  EXPECT_NE(s.value("openblas", std::string()).find("OpenBLAS"), std::string::npos) << s.dump();
  EXPECT_TRUE(s.contains("compiler"));
}

TEST(DeviceFingerprint, CudaWithoutNvmlMatchesByNameAndMemory) {
  if (nvml_here()) GTEST_SKIP() << "NVML present: the device comes from NVML, not from the backend's name";
  named_backend pcie("cuda", "NVIDIA H100 PCIe", 81559ULL << 20);
  ojson d = itera::device_fingerprint(pcie);
  EXPECT_EQ(d["kind"], "cuda");
  EXPECT_FALSE(d["nvml"]["available"].get<bool>());
  EXPECT_EQ(d["variant"]["id"], "h100-pcie-80gb");
  EXPECT_EQ(d["runtime"]["compute_capability"], 90);

  // Two H200 boards share the name; without NVML's power limit nothing separates them.
  named_backend h200("cuda", "NVIDIA H200", 143771ULL << 20);
  d = itera::device_fingerprint(h200);
  EXPECT_TRUE(d["variant"]["id"].is_null());
  EXPECT_NE(d["variant"]["why"].get<std::string>().find("ambiguous"), std::string::npos);
}

TEST(SoftwareFingerprint, CudaHasVersionsOnly) {
  named_backend cuda("cuda", "NVIDIA H200", 0);
  const ojson s = itera::software_fingerprint(cuda);
  for (const char* key : {"driver", "cuda_driver", "cuda_runtime", "cublaslt", "nccl", "cupti"}) {
    ASSERT_TRUE(s.contains(key)) << key;
    EXPECT_TRUE(s[key].is_string()) << key;
  }
  EXPECT_EQ(s.size(), 6u) << s.dump();  // part of the recipe: nothing that varies run to run
}

}  // namespace
