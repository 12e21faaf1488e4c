#pragma once
// The cuda backend's class, for code that needs its stream, cuBLASLt handle and workspace (the
// cuda sides of the workloads). Includes CUDA headers: only itera_cuda and device tests see it.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "itera/core/backend.hpp"
#include "itera/core/recorder.hpp"
#include "itera/cuda/cuda_backend.hpp"
#include "src/cuda/memory.hpp"
#include "src/cuda/sm_limit.hpp"
#include "src/cuda/timers.hpp"

namespace itera::cuda {

inline constexpr std::size_t lt_workspace_bytes = std::size_t{64} << 20;

class cuda_backend final : public backend {
 public:
  explicit cuda_backend(int device_index);
  ~cuda_backend() override;
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  // backend
  std::string_view name() const override { return "cuda"; }
  std::string device_name() const override { return m_properties.name; }
  int device_index() const override { return m_device; }
  std::unique_ptr<device_timer> make_timer() override;
  device_memory memory() const override;
  void synchronize() override;
  device_clock* clock() override { return m_clock.get(); }
  memory_tracker& memory_tracking() override { return m_memory; }
  nlohmann::ordered_json describe() const override;

  // What the cuda sides of the workloads use.
  cudaStream_t stream() const { return m_stream; }
  cublasLtHandle_t lt_handle() const { return m_lt; }
  void* lt_workspace() const { return m_workspace.data(); }
  std::size_t lt_workspace_size() const { return m_workspace.bytes(); }
  const cudaDeviceProp& properties() const { return m_properties; }
  int compute_capability_x10() const { return m_properties.major * 10 + m_properties.minor; }
  // Device memory counted by this backend's tracker. Makes the device current first.
  device_buffer allocate(std::size_t bytes);
  // Host bytes into device memory, and device memory set to a byte, in this backend's stream order,
  // returning when done. The stream is non-blocking: a plain cudaMemcpy or cudaMemset runs on the
  // legacy stream, which the kernels on this one do not wait for, and a cudaMemcpy from pageable
  // memory returns before its DMA has finished (a prefill read its weights half uploaded:
  // docs/perf/2026-12-01-prefetch-windows.md).
  void upload(void* dst, const void* src, std::size_t bytes) const;
  void fill(void* dst, int byte, std::size_t bytes) const;
  // The same as an evictable buffer (memory.hpp): its physical memory can be given back and mapped
  // again at the same address.
  device_buffer allocate_evictable(std::size_t bytes);
  // Makes this backend's device current on the calling thread (cheap when it already is).
  void make_current() const;
  std::unique_ptr<device_timer> make_event_timer(std::string method = "cuda_events");
  // The method make_timer() uses: "cupti_activity_span", or "cuda_events" with why not CUPTI.
  const std::string& timer_method() const { return m_timer_method; }

 private:
  int m_device;
  cudaDeviceProp m_properties{};
  memory_tracker m_memory;
  cudaStream_t m_stream = nullptr;
  sm_limited_stream m_limited;  // ITERA_CUDA_SM_LIMIT: m_stream is m_limited.stream
  cublasLtHandle_t m_lt = nullptr;
  device_buffer m_workspace;
  // The stage recorder's clock: cupti_stage_clock when CUPTI is in use and its probe span got its
  // records back, else event_clock (its method says why).
  std::unique_ptr<device_clock> m_clock;
  bool m_use_cupti = false;
  std::string m_timer_method;
};

}  // namespace itera::cuda
