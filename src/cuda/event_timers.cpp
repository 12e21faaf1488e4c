// CUDA-event timing: the fallback device timer and the stage recorder's fallback clock.
#include <exception>
#include <optional>
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

void cuda_event_timer::wait() { ITERA_CUDA_CHECK(cudaEventSynchronize(m_stop)); }

double cuda_event_timer::elapsed_ns() {
  ITERA_CUDA_CHECK(cudaEventSynchronize(m_stop));  // R2: read only once the work has finished
  float ms = 0;
  ITERA_CUDA_CHECK(cudaEventElapsedTime(&ms, m_start, m_stop));
  return static_cast<double>(ms) * 1e6;
}

// ---------------------------------------------------------------------------------------------
// event_clock

event_clock::event_clock(int device, cudaStream_t stream, std::string method)
    : m_device(device), m_stream(stream), m_method(std::move(method)) {}

event_clock::~event_clock() {
  for (cudaEvent_t e : m_events) (void)cudaEventDestroy(e);
}

std::uint32_t event_clock::record() {
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

std::uint32_t event_clock::begin_span() {
  m_spans.push_back({record(), 0, false});
  return static_cast<std::uint32_t>(m_spans.size() - 1);
}

void event_clock::end_span(std::uint32_t span) noexcept {
  if (span >= m_spans.size() || m_spans[span].ended) return;
  try {
    m_spans[span].end = record();
    m_spans[span].ended = true;
  } catch (const std::exception& e) {
    // A scope's destructor calls this: keep the failure for interval_ns().
    if (m_failure.empty()) m_failure = e.what();
  } catch (...) {
    if (m_failure.empty()) m_failure = "unknown exception";
  }
}

std::optional<std::pair<double, double>> event_clock::interval_ns(std::uint32_t span) {
  if (!m_failure.empty()) throw std::runtime_error("event_clock: a span's end event was not recorded: " + m_failure);
  if (span >= m_spans.size())
    throw std::logic_error("event_clock::interval_ns: span " + std::to_string(span) +
                           " was not begun since the last reset (" + std::to_string(m_spans.size()) + " spans)");
  const span_events& s = m_spans[span];
  if (!s.ended) return std::nullopt;
  ITERA_CUDA_CHECK(cudaEventSynchronize(m_events[s.end]));
  // The offset from the origin is a float of milliseconds (about 1 us resolution 10 s into a case);
  // the duration is read between the span's own events, as precise as events get.
  float offset_ms = 0, duration_ms = 0;
  ITERA_CUDA_CHECK(cudaEventElapsedTime(&offset_ms, m_events[0], m_events[s.begin]));
  ITERA_CUDA_CHECK(cudaEventElapsedTime(&duration_ms, m_events[s.begin], m_events[s.end]));
  const double start = static_cast<double>(offset_ms) * 1e6;
  return std::pair{start, start + static_cast<double>(duration_ms) * 1e6};
}

void event_clock::reset() {
  m_next = 0;
  m_spans.clear();
  m_failure.clear();
}

}  // namespace itera::cuda
