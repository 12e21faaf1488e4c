#include "src/kernels/launch.cuh"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace itera::kernels {

namespace {

// One attribute of the current device, asked once per device (these run on every launch path).
int cached_attribute(cudaDeviceAttr attribute, std::atomic<int>* cache, int max_devices) {
  int device = 0;
  ITERA_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= max_devices) {
    int value = 0;
    ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, device));
    return value;
  }
  int value = cache[device].load(std::memory_order_relaxed);
  if (value == 0) {  // 0: not asked yet (no device has 0 SMs or compute capability 0)
    ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, device));
    cache[device].store(value, std::memory_order_relaxed);
  }
  return value;
}

constexpr int max_devices = 64;

}  // namespace

int device_compute_major() {
  static std::atomic<int> cache[max_devices] = {};
  return cached_attribute(cudaDevAttrComputeCapabilityMajor, cache, max_devices);
}

int device_multiprocessors() {
  static std::atomic<int> cache[max_devices] = {};
  return cached_attribute(cudaDevAttrMultiProcessorCount, cache, max_devices);
}

bool device_is_sm90_or_later() { return device_compute_major() >= 9; }

bool programmatic_launch_enabled() {
  static const bool allowed = [] {
    const char* v = std::getenv("ITERA_LLM_PDL");
    return v && std::strcmp(v, "1") == 0;
  }();
  return allowed && device_is_sm90_or_later();
}

bool wgmma_available() {
#if defined(ITERA_CUDA_SM90A)
  static const bool switched_off = [] {
    const char* v = std::getenv("ITERA_ATTENTION_WGMMA");
    return v && std::strcmp(v, "0") == 0;
  }();
  if (switched_off || device_compute_major() != 9) return false;
  // sm_90a code runs on compute capability 9.0 exactly (where the runtime picks it over the other
  // targets). The minor number is asked each time: 0 cannot mark "not asked" in cached_attribute.
  int device = 0, minor = 0;
  ITERA_CUDA_CHECK(cudaGetDevice(&device));
  ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return minor == 0;
#else
  return false;
#endif
}

}  // namespace itera::kernels
