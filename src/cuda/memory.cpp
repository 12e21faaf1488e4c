#include "src/cuda/memory.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include <unistd.h>

#include "itera/cuda/check.hpp"

namespace itera::cuda {

std::string format_gib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// ---------------------------------------------------------------------------------------------
// device_buffer

device_buffer::device_buffer(std::size_t bytes, memory_tracker* tracker) : m_bytes(bytes), m_tracker(tracker) {
  if (bytes == 0) return;
  const cudaError_t status = cudaMalloc(&m_data, bytes);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so the next launch check does not see it
    m_data = nullptr;
    throw out_of_memory("cudaMalloc of " + format_gib(bytes) + " failed: out of device memory");
  }
  ITERA_CUDA_CHECK(status);
  if (m_tracker) m_tracker->on_alloc(m_bytes);
}

device_buffer::~device_buffer() { release(); }

void device_buffer::release() noexcept {
  if (!m_data) return;
  // A destructor cannot throw; a failing cudaFree here means the context is already broken and
  // the error has been (or will be) reported by the call that broke it.
  (void)cudaFree(m_data);
  if (m_tracker) m_tracker->on_free(m_bytes);
  m_data = nullptr;
}

device_buffer::device_buffer(device_buffer&& other) noexcept
    : m_data(std::exchange(other.m_data, nullptr)),
      m_bytes(std::exchange(other.m_bytes, 0)),
      m_tracker(std::exchange(other.m_tracker, nullptr)) {}

device_buffer& device_buffer::operator=(device_buffer&& other) noexcept {
  if (this != &other) {
    release();
    m_data = std::exchange(other.m_data, nullptr);
    m_bytes = std::exchange(other.m_bytes, 0);
    m_tracker = std::exchange(other.m_tracker, nullptr);
  }
  return *this;
}

// ---------------------------------------------------------------------------------------------
// pinned_buffer

pinned_buffer::pinned_buffer(std::size_t bytes) : m_bytes(bytes) {
  if (bytes == 0) return;
  const cudaError_t status = cudaHostAlloc(&m_data, bytes, cudaHostAllocDefault);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    m_data = nullptr;
    throw out_of_memory("cudaHostAlloc of " + format_gib(bytes) + " failed: cannot pin that much host memory");
  }
  ITERA_CUDA_CHECK(status);
}

pinned_buffer::~pinned_buffer() { release(); }

void pinned_buffer::release() noexcept {
  if (!m_data) return;
  (void)cudaFreeHost(m_data);
  m_data = nullptr;
}

pinned_buffer::pinned_buffer(pinned_buffer&& other) noexcept
    : m_data(std::exchange(other.m_data, nullptr)), m_bytes(std::exchange(other.m_bytes, 0)) {}

pinned_buffer& pinned_buffer::operator=(pinned_buffer&& other) noexcept {
  if (this != &other) {
    release();
    m_data = std::exchange(other.m_data, nullptr);
    m_bytes = std::exchange(other.m_bytes, 0);
  }
  return *this;
}

// ---------------------------------------------------------------------------------------------
// pageable_buffer

pageable_buffer::pageable_buffer(std::size_t bytes) : m_bytes(bytes) {
  if (bytes == 0) return;
  const long page_size = sysconf(_SC_PAGESIZE);
  const std::size_t page = page_size > 0 ? static_cast<std::size_t>(page_size) : 4096;
  const std::size_t rounded = (bytes + page - 1) / page * page;
  m_data = std::aligned_alloc(page, rounded);
  if (!m_data) throw out_of_memory("allocation of " + format_gib(bytes) + " of pageable host memory failed");
  // First touch: one write per page maps every page now, outside any timed copy.
  auto* bytes_ptr = static_cast<unsigned char*>(m_data);
  for (std::size_t offset = 0; offset < rounded; offset += page) bytes_ptr[offset] = 0;
}

pageable_buffer::~pageable_buffer() { std::free(m_data); }

pageable_buffer::pageable_buffer(pageable_buffer&& other) noexcept
    : m_data(std::exchange(other.m_data, nullptr)), m_bytes(std::exchange(other.m_bytes, 0)) {}

pageable_buffer& pageable_buffer::operator=(pageable_buffer&& other) noexcept {
  if (this != &other) {
    std::free(m_data);
    m_data = std::exchange(other.m_data, nullptr);
    m_bytes = std::exchange(other.m_bytes, 0);
  }
  return *this;
}

}  // namespace itera::cuda
