#include "src/kernels/launch.cuh"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace itera::kernels {

bool device_is_sm90_or_later() {
  constexpr int max_devices = 64;
  static std::atomic<int> major[max_devices] = {};  // 0: not asked yet
  int device = 0;
  ITERA_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= max_devices) return false;
  int m = major[device].load(std::memory_order_relaxed);
  if (m == 0) {
    ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, device));
    major[device].store(m, std::memory_order_relaxed);
  }
  return m >= 9;
}

bool programmatic_launch_enabled() {
  static const bool allowed = [] {
    const char* v = std::getenv("ITERA_LLM_PDL");
    return v && std::strcmp(v, "1") == 0;
  }();
  return allowed && device_is_sm90_or_later();
}

}  // namespace itera::kernels
