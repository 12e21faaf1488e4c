#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/cuda/check.hpp"
#include "itera/env/versions.hpp"
#include "src/cuda/cuda_backend_impl.hpp"

namespace itera {
namespace cuda {
namespace {

std::string uuid_string(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  return fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                     b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                     b[15]);
}

// An attribute the device may not report (clock rates are optional in recent runtimes); a failed
// query is not an error of the run, and its last-error state is cleared so no later check sees it.
bool optional_attribute(int device, cudaDeviceAttr attr, int& value) {
  if (cudaDeviceGetAttribute(&value, attr, device) == cudaSuccess) return true;
  (void)cudaGetLastError();
  return false;
}

}  // namespace

cuda_backend::cuda_backend(int device_index) : m_device(device_index) {
  int count = 0;
  ITERA_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device_index < 0 || device_index >= count)
    throw usage_error(fmt::format("cuda device index {} is out of range: {} device(s) found", device_index, count));

  // CUPTI first, before this thread creates the device's context, so that activity collection is
  // in place from the context's first launch.
  const char* forced = std::getenv("ITERA_TIMER");
  const std::string choice = forced && *forced ? forced : "cupti";
  if (choice == "cuda_events") {
    m_timer_method = "cuda_events";
  } else if (choice == "cupti") {
    const std::string reason = cupti_acquire();
    m_use_cupti = reason.empty();
    if (!m_use_cupti) m_timer_method = "cuda_events (cupti unavailable: " + reason + ")";
  } else {
    throw usage_error("ITERA_TIMER=" + choice + " is not a timer: choose cupti or cuda_events");
  }

  try {
    ITERA_CUDA_CHECK(cudaSetDevice(m_device));
    ITERA_CUDA_CHECK(cudaGetDeviceProperties(&m_properties, m_device));
    // Non-blocking: work on the legacy default stream (by libraries or other code in the process)
    // does not serialise with the measured work.
    if (const auto limit = sm_limit_from_env()) {
      // A deliberately limited card (src/cuda/sm_limit.hpp): all of the backend's work runs on a
      // green context of `limit` SMs; describe() records it.
      m_limited = make_sm_limited_stream(m_device, *limit);
      m_stream = m_limited.stream;
    } else {
      ITERA_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
    }
    ITERA_CUBLAS_CHECK(cublasLtCreate(&m_lt));
    m_workspace = device_buffer(lt_workspace_bytes, &m_memory);
  } catch (...) {
    m_workspace = device_buffer();
    if (m_lt) (void)cublasLtDestroy(m_lt);
    if (m_limited.stream) destroy(m_limited);
    else if (m_stream) (void)cudaStreamDestroy(m_stream);
    if (m_use_cupti) cupti_release();
    throw;
  }

  if (m_use_cupti) {
    // One small region now, so that a CUPTI that initialises but delivers nothing usable (as under
    // some attached tools) is found here and replaced by events, not in every case.
    try {
      cupti_timer probe(m_stream);
      probe.start();
      ITERA_CUDA_CHECK(cudaMemsetAsync(m_workspace.data(), 0, 4096, m_stream));
      probe.stop();
      (void)probe.elapsed_ns();
      m_timer_method = "cupti_activity_span";
    } catch (const std::exception& e) {
      cupti_release();
      m_use_cupti = false;
      m_timer_method = std::string("cuda_events (cupti unavailable: ") + e.what() + ")";
    }
  }

  // The stage clock. With CUPTI, one probe span around a memset must get that memset's record back
  // through external correlation; otherwise (or without CUPTI) CUDA events, saying why.
  std::string stage_clock_reason;
  if (m_use_cupti) {
    try {
      auto clock = std::make_unique<cupti_stage_clock>(m_device);
      const std::uint32_t span = clock->begin_span();
      const cudaError_t launched = cudaMemsetAsync(m_workspace.data(), 0, 4096, m_stream);
      clock->end_span(span);
      ITERA_CUDA_CHECK(launched);
      const auto interval = clock->interval_ns(span);
      if (!interval)
        throw std::runtime_error("a probe span's memset came back without its external correlation");
      clock->reset();
      m_clock = std::move(clock);
    } catch (const std::exception& e) {
      stage_clock_reason = e.what();
    }
  }
  if (!m_clock) {
    m_clock = std::make_unique<event_clock>(
        m_device, m_stream,
        m_use_cupti ? "cuda_events (cupti external correlation unavailable: " + stage_clock_reason + ")"
                    : m_timer_method);
  }
}

cuda_backend::~cuda_backend() {
  // Nothing here may throw; a failure now means the context is already broken and was reported.
  (void)cudaSetDevice(m_device);
  (void)cudaStreamSynchronize(m_stream);
  m_clock.reset();  // before CUPTI is released: the CUPTI clock hands back its collection
  if (m_use_cupti) cupti_release();
  m_workspace = device_buffer();
  (void)cublasLtDestroy(m_lt);
  if (m_limited.stream) destroy(m_limited);
  else (void)cudaStreamDestroy(m_stream);
}

void cuda_backend::make_current() const { ITERA_CUDA_CHECK(cudaSetDevice(m_device)); }

device_buffer cuda_backend::allocate(std::size_t bytes) {
  make_current();
  return device_buffer(bytes, &m_memory);
}

void cuda_backend::upload(void* dst, const void* src, std::size_t bytes) const {
  if (bytes == 0) return;
  make_current();
  ITERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, m_stream));
  ITERA_CUDA_CHECK(cudaStreamSynchronize(m_stream));
}

void cuda_backend::fill(void* dst, int byte, std::size_t bytes) const {
  if (bytes == 0) return;
  make_current();
  ITERA_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, m_stream));
  ITERA_CUDA_CHECK(cudaStreamSynchronize(m_stream));
}

device_buffer cuda_backend::allocate_evictable(std::size_t bytes) {
  make_current();
  return device_buffer(bytes, &m_memory, evictable);
}

std::unique_ptr<device_timer> cuda_backend::make_event_timer(std::string method) {
  make_current();
  return std::make_unique<cuda_event_timer>(m_stream, std::move(method));
}

std::unique_ptr<device_timer> cuda_backend::make_timer() {
  make_current();
  if (m_use_cupti) return std::make_unique<cupti_timer>(m_stream);
  return std::make_unique<cuda_event_timer>(m_stream, m_timer_method);
}

device_memory cuda_backend::memory() const {
  make_current();
  std::size_t free_bytes = 0, total_bytes = 0;
  ITERA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return {total_bytes, free_bytes};
}

void cuda_backend::synchronize() {
  make_current();
  // The whole device, not only the stream: after a failed case, whatever it left anywhere.
  ITERA_CUDA_CHECK(cudaDeviceSynchronize());
}

nlohmann::ordered_json cuda_backend::describe() const {
  make_current();
  const cudaDeviceProp& p = m_properties;
  nlohmann::ordered_json d;
  d["kind"] = "cuda";
  d["name"] = p.name;
  d["device_index"] = m_device;
  d["uuid"] = uuid_string(p.uuid);
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, m_device) == cudaSuccess)
    d["pci_bus_id"] = bus_id;
  else
    (void)cudaGetLastError();
  d["compute_capability"] = fmt::format("{}.{}", p.major, p.minor);
  d["compute_capability_x10"] = compute_capability_x10();
  d["multiprocessor_count"] = p.multiProcessorCount;
  if (m_limited.stream) {
    // A deliberately limited run: the work ran on this many SMs only (ITERA_CUDA_SM_LIMIT).
    d["sm_limit"] = m_limited.granted;
    d["sm_limit_requested"] = m_limited.requested;
  }
  d["l2_cache_bytes"] = p.l2CacheSize;
  d["shared_memory_per_block_optin_bytes"] = p.sharedMemPerBlockOptin;
  d["memory_total_bytes"] = p.totalGlobalMem;
  d["memory_bus_width_bits"] = p.memoryBusWidth;
  int khz = 0;
  if (optional_attribute(m_device, cudaDevAttrClockRate, khz)) d["sm_clock_max_khz"] = khz;
  if (optional_attribute(m_device, cudaDevAttrMemoryClockRate, khz)) d["memory_clock_max_khz"] = khz;
  d["ecc_enabled"] = p.ECCEnabled != 0;
  d["integrated"] = p.integrated != 0;
  d["async_engine_count"] = p.asyncEngineCount;
  int runtime = 0, driver = 0;
  ITERA_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  ITERA_CUDA_CHECK(cudaDriverGetVersion(&driver));
  d["cuda_runtime_version"] = cuda_version_string(runtime);
  d["cuda_driver_version"] = cuda_version_string(driver);
  d["cublaslt_version"] = cublaslt_version_string(cublasLtGetVersion());
  d["timer_method"] = m_timer_method;
  d["stage_clock_method"] = std::string(m_clock->method());
  return d;
}

cuda_backend& as_cuda(backend& dev) {
  auto* c = dynamic_cast<cuda_backend*>(&dev);
  if (!c)
    throw std::invalid_argument(fmt::format("the cuda code path was given the {} backend", dev.name()));
  return *c;
}

void* native_stream(backend& dev) { return as_cuda(dev).stream(); }

std::unique_ptr<device_timer> make_event_timer(backend& dev) { return as_cuda(dev).make_event_timer(); }

}  // namespace cuda

std::unique_ptr<backend> make_cuda_backend(int device_index) {
  return std::make_unique<cuda::cuda_backend>(device_index);
}

backend_availability cuda_availability() {
  backend_availability a;
  a.name = "cuda";
  a.compiled = true;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    a.reason = cudaGetErrorString(status);
    // Without a driver the runtime says "driver version is insufficient": say what is missing.
    if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL); driver == nullptr)
      a.reason = "no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded); the runtime says: " + a.reason;
    else
      dlclose(driver);
    return a;
  }
  if (count == 0) {
    a.reason = "no CUDA device found";
    return a;
  }
  a.usable = true;
  return a;
}

}  // namespace itera
