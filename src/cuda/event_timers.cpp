// CUDA-event timing: the fallback device timer and the stage recorder's stream clock.
#include <stdexcept>
#include <string>
#include <utility>

#include "itera/cuda/check.hpp"
#include "src/cuda/timers.hpp"

namespace itera::cuda {

// ---------------------------------------------------------------------------------------------
// cuda_event_timer

cuda_event_timer::cuda_event_timer(cudaStream_t stream, std::string method)
    : m_stream(stream), m_method(std::move(method)) {
  ITERA_CUDA_CHECK(cudaEventCreate(&m_start));
  const cudaError_t status = cudaEventCreate(&m_stop);
  if (status != cudaSuccess) {
    (void)cudaEventDestroy(m_start);
    ITERA_CUDA_CHECK(status);
  }
}

cuda_event_timer::~cuda_event_timer() {
  (void)cudaEventDestroy(m_start);
  (void)cudaEventDestroy(m_stop);
}

void cuda_event_timer::start() { ITERA_CUDA_CHECK(cudaEventRecord(m_start, m_stream)); }

void cuda_event_timer::stop() { ITERA_CUDA_CHECK(cudaEventRecord(m_stop, m_stream)); }

double cuda_event_timer::elapsed_ns() {
  ITERA_CUDA_CHECK(cudaEventSynchronize(m_stop));  // R2: read only once the work has finished
  float ms = 0;
  ITERA_CUDA_CHECK(cudaEventElapsedTime(&ms, m_start, m_stop));
  return static_cast<double>(ms) * 1e6;
}

// ---------------------------------------------------------------------------------------------
// event_clock

event_clock::event_clock(int device, cudaStream_t stream) : m_device(device), m_stream(stream) {}

event_clock::~event_clock() {
  for (cudaEvent_t e : m_events) (void)cudaEventDestroy(e);
}

std::uint32_t event_clock::mark() {
  if (m_next == m_events.size()) {
    // Events belong to the device current at creation: make it ours, the caller's thread may have
    // another one current.
    ITERA_CUDA_CHECK(cudaSetDevice(m_device));
    cudaEvent_t e = nullptr;
    ITERA_CUDA_CHECK(cudaEventCreate(&e));
    m_events.push_back(e);
  }
  ITERA_CUDA_CHECK(cudaEventRecord(m_events[m_next], m_stream));
  return m_next++;
}

double event_clock::elapsed_ns(std::uint32_t from, std::uint32_t to) {
  if (from >= m_next || to >= m_next)
    throw std::logic_error("event_clock::elapsed_ns: mark " + std::to_string(from >= m_next ? from : to) +
                           " was not recorded since the last reset (" + std::to_string(m_next) + " marks)");
  ITERA_CUDA_CHECK(cudaEventSynchronize(m_events[to]));
  float ms = 0;
  ITERA_CUDA_CHECK(cudaEventElapsedTime(&ms, m_events[from], m_events[to]));
  return static_cast<double>(ms) * 1e6;
}

}  // namespace itera::cuda
