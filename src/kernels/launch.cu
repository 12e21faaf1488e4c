#include "src/kernels/launch.cuh"

#include <atomic>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "itera/core/errors.hpp"

namespace itera::kernels {

namespace {

// One attribute of the current device, asked once per device (these run on every launch path).
// The cache holds value + 1: 0 marks "not asked yet", whatever the attribute's values.
int cached_attribute(cudaDeviceAttr attribute, std::atomic<int>* cache, int max_devices) {
  int device = 0;
  ITERA_CUDA_CHECK(cudaGetDevice(&device));
  int value = 0;
  if (device < 0 || device >= max_devices) {
    ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, device));
    return value;
  }
  const int known = cache[device].load(std::memory_order_relaxed);
  if (known != 0) return known - 1;
  ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, device));
  cache[device].store(value + 1, std::memory_order_relaxed);
  return value;
}

constexpr int max_devices = 64;

}  // namespace

int device_compute_major() {
  static std::atomic<int> cache[max_devices] = {};
  return cached_attribute(cudaDevAttrComputeCapabilityMajor, cache, max_devices);
}

int device_compute_minor() {
  static std::atomic<int> cache[max_devices] = {};
  return cached_attribute(cudaDevAttrComputeCapabilityMinor, cache, max_devices);
}

int device_multiprocessors() {
  static std::atomic<int> cache[max_devices] = {};
  return cached_attribute(cudaDevAttrMultiProcessorCount, cache, max_devices);
}

int device_l2_bytes() {
  static std::atomic<int> cache[max_devices] = {};
  return cached_attribute(cudaDevAttrL2CacheSize, cache, max_devices);
}

bool device_is_sm90_or_later() { return device_compute_major() >= 9; }

bool env_switch(const char* name, bool unset) {
  const char* v = std::getenv(name);
  if (!v || !*v) return unset;
  if (std::strcmp(v, "1") == 0) return true;
  if (std::strcmp(v, "0") == 0) return false;
  throw usage_error(std::string(name) + "='" + v + "': give 1 (on) or 0 (off), or leave it unset");
}

std::int64_t env_count(const char* name, std::int64_t unset, const char* meaning) {
  const char* v = std::getenv(name);
  if (!v || !*v) return unset;
  std::int64_t n = 0;
  const char* end = v + std::strlen(v);
  const auto [ptr, ec] = std::from_chars(v, end, n);
  if (ec != std::errc() || ptr != end || n < 0)
    throw usage_error(std::string(name) + "='" + v + "': " + meaning);
  return n;
}

bool overridable_switch::on() {
  if (const int forced = m_forced.load(std::memory_order_relaxed); forced >= 0) return forced == 1;
  std::call_once(m_read, [this] { m_from_env = env_switch(m_name, m_unset); });
  return m_from_env;
}

void allow_dynamic_shared(const void* kernel, std::size_t bytes) {
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, std::size_t> allowed;  // the attribute as last set
  int device = 0;
  ITERA_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard lock(mutex);
  std::size_t& now = allowed[{device, kernel}];
  if (bytes <= now) return;  // a larger opt-in covers a smaller launch
  ITERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  now = bytes;
}

bool programmatic_launch_enabled() {
  static const bool allowed = env_switch("ITERA_LLM_PDL", false);
  return allowed && device_is_sm90_or_later();
}

bool wgmma_available() {
#if defined(ITERA_CUDA_SM90A)
  // sm_90a code runs on compute capability 9.0 exactly (where the runtime picks it over the other
  // targets).
  static std::atomic<int> minor_cache[max_devices] = {};
  return device_compute_major() == 9 &&
         cached_attribute(cudaDevAttrComputeCapabilityMinor, minor_cache, max_devices) == 0;
#else
  return false;
#endif
}

namespace {
// -1: the environment decides; otherwise an attention_kernel a test asked for.
std::atomic<int> attention_override{-1};

bool wgmma_allowed_by_environment() {
  static const bool allowed = env_switch("ITERA_ATTENTION_WGMMA", true);
  return allowed;
}
}  // namespace

attention_kernel attention_kernel_for(std::int64_t head_dim) {
  if (head_dim != 64 && head_dim != 128) return attention_kernel::mma_sync;
  const int forced = attention_override.load(std::memory_order_relaxed);
  const bool allowed = forced >= 0 ? forced == static_cast<int>(attention_kernel::wgmma) : wgmma_allowed_by_environment();
  return allowed && wgmma_available() ? attention_kernel::wgmma : attention_kernel::mma_sync;
}

const char* attention_kernel_name(attention_kernel k) {
  return k == attention_kernel::wgmma ? "wgmma (sm_90a)" : "mma.sync";
}

void override_attention_kernel(std::optional<attention_kernel> choice) {
  attention_override.store(choice ? static_cast<int>(*choice) : -1, std::memory_order_relaxed);
}

}  // namespace itera::kernels
