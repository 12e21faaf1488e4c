#pragma once
// The cpu backend: the reference implementation every workload has, and the backend that lets the
// whole tool run, tiny, on a machine without a GPU. Its "device" memory is host memory.
#include <memory>

#include "itera/core/backend.hpp"

namespace itera {

std::unique_ptr<backend> make_cpu_backend();

// Host memory counted by a backend's memory_tracker: what the cpu workloads allocate.
class host_buffer {
 public:
  host_buffer(std::size_t bytes, memory_tracker& tracker);
  ~host_buffer();
  host_buffer(const host_buffer&) = delete;
  host_buffer& operator=(const host_buffer&) = delete;
  void* data() { return m_data; }
  std::size_t size() const { return m_bytes; }
  template <class T> T* as() { return static_cast<T*>(m_data); }

 private:
  void* m_data = nullptr;
  std::size_t m_bytes = 0;
  memory_tracker& m_tracker;
};

}  // namespace itera
