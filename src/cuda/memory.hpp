#pragma once
// Owning buffers for the cuda backend. Device allocations go through the backend's memory_tracker
// so that stages see the allocator's peak; host buffers (pinned, pageable) are host memory and are
// kept out of that device figure (DESIGN.md: never one number under an ambiguous name).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "itera/core/recorder.hpp"

namespace itera::cuda {

// cudaMalloc or cudaHostAlloc said there is not enough memory. Workloads turn it into a skip
// ("does not fit") rather than a failure.
struct out_of_memory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Device memory on the current device: cudaMalloc (256-byte aligned), or (evictable) an address
// range of its own whose physical memory can be given back and mapped again at the same address
// (CUDA virtual memory management: cuMemAddressReserve, cuMemCreate, cuMemMap), so that kernels'
// pointers and captured CUDA graphs stay valid across an eviction. What an evicted buffer held is
// lost; a restored one holds undefined bytes. The tracker counts the requested bytes while mapped.
struct evictable_t {
  explicit evictable_t() = default;
};
inline constexpr evictable_t evictable{};

// Why this device cannot map evictable buffers ("" when it can): no virtual memory management,
// or the driver's entry points are missing.
std::string evictable_unavailable_reason(int device);

class device_buffer {
 public:
  device_buffer() = default;
  device_buffer(std::size_t bytes, memory_tracker* tracker);
  // out_of_memory as above; std::runtime_error naming the reason when the device cannot
  // (evictable_unavailable_reason).
  device_buffer(std::size_t bytes, memory_tracker* tracker, evictable_t);
  ~device_buffer();
  device_buffer(device_buffer&& other) noexcept;
  device_buffer& operator=(device_buffer&& other) noexcept;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  void* data() const { return m_data; }
  template <typename T>
  T* as() const { return static_cast<T*>(m_data); }
  std::size_t bytes() const { return m_bytes; }

  bool is_evictable() const { return m_reserved != 0; }
  // Mapped (always, for a cudaMalloc buffer).
  bool resident() const { return !is_evictable() || m_handle != 0; }
  // Evictable buffers only (std::logic_error otherwise). evict() unmaps and releases the physical
  // memory: the caller must have waited for every use of it (a stream synchronize). restore() maps
  // new physical memory at the same address (out_of_memory when there is none). Both do nothing
  // when already in that state.
  void evict();
  void restore();

 private:
  void release() noexcept;
  void map();
  void* m_data = nullptr;
  std::size_t m_bytes = 0;
  memory_tracker* m_tracker = nullptr;
  // Evictable: the reserved range (m_bytes rounded up to the allocation granularity), the device,
  // and the physical allocation while mapped (0 when evicted).
  std::size_t m_reserved = 0;
  int m_device = 0;
  unsigned long long m_handle = 0;
};

// Page-locked host memory (cudaHostAlloc): what DMA engines read and write directly.
class pinned_buffer {
 public:
  pinned_buffer() = default;
  explicit pinned_buffer(std::size_t bytes);
  ~pinned_buffer();
  pinned_buffer(pinned_buffer&& other) noexcept;
  pinned_buffer& operator=(pinned_buffer&& other) noexcept;
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;

  void* data() const { return m_data; }
  std::size_t bytes() const { return m_bytes; }

 private:
  void release() noexcept;
  void* m_data = nullptr;
  std::size_t m_bytes = 0;
};

// Ordinary (pageable) host memory, page aligned and touched once at allocation so that first-touch
// page faults happen here and not inside a timed copy.
class pageable_buffer {
 public:
  pageable_buffer() = default;
  explicit pageable_buffer(std::size_t bytes);
  ~pageable_buffer();
  pageable_buffer(pageable_buffer&& other) noexcept;
  pageable_buffer& operator=(pageable_buffer&& other) noexcept;
  pageable_buffer(const pageable_buffer&) = delete;
  pageable_buffer& operator=(const pageable_buffer&) = delete;

  void* data() const { return m_data; }
  std::size_t bytes() const { return m_bytes; }

 private:
  void* m_data = nullptr;
  std::size_t m_bytes = 0;
};

// "1.50 GiB": sizes in messages.
std::string format_gib(std::uint64_t bytes);

}  // namespace itera::cuda
