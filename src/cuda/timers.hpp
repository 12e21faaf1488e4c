#pragma once
// Device timers and the stage clocks of the cuda backend.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "itera/core/recorder.hpp"
#include "itera/core/timer.hpp"

namespace itera::cuda {

// A pair of CUDA events around the work on the stream. Reads about 5 us high for one short kernel
// (issue 2: 16.2 us for an 11.4 us kernel): the events' own cost lands inside the interval.
class cuda_event_timer final : public device_timer {
 public:
  // `method` names the number in results: "cuda_events", or why CUPTI was not used.
  cuda_event_timer(cudaStream_t stream, std::string method);
  ~cuda_event_timer() override;
  cuda_event_timer(const cuda_event_timer&) = delete;
  cuda_event_timer& operator=(const cuda_event_timer&) = delete;

  void start() override;
  void stop() override;
  void wait() override;
  double elapsed_ns() override;
  std::string_view method() const override { return m_method; }

 private:
  cudaStream_t m_stream;
  cudaEvent_t m_start = nullptr;
  cudaEvent_t m_stop = nullptr;
  std::string m_method;
};

// A kernel CUPTI recorded in a cupti_timer region kept with keep_kernels(): its name as the
// driver gives it (mangled for C++ kernels) and its start and end, GPU timestamps in ns.
struct kernel_interval {
  std::string name;
  std::uint64_t start_ns = 0, end_ns = 0;
};

// The span of the kernel, memcpy and memset activity records CUPTI produced on the stream between
// start() and the end of the work: from the earliest start to the latest end, in the GPU's own
// timestamps, which is what Nsight tools report as a kernel's duration. Requires a successful
// cupti_acquire(); one CUPTI-timed region at a time per process.
class cupti_timer final : public device_timer {
 public:
  explicit cupti_timer(cudaStream_t stream);
  ~cupti_timer() override;
  cupti_timer(const cupti_timer&) = delete;
  cupti_timer& operator=(const cupti_timer&) = delete;

  void start() override;
  void stop() override;
  void wait() override;
  double elapsed_ns() override;
  std::string_view method() const override { return "cupti_activity_span"; }
  // Before start(): also keep each kernel record of the region (a CUDA graph's replays included),
  // read by kernels() after elapsed_ns(). Costs a string a kernel; off by default.
  void keep_kernels(bool keep) { m_keep_kernels = keep; }
  const std::vector<kernel_interval>& kernels() const { return m_kernels; }

 private:
  cudaStream_t m_stream;
  bool m_keep_kernels = false;
  std::vector<kernel_interval> m_kernels;
  std::uint32_t m_device_id = 0;  // CUPTI's device id of the stream's context
  std::uint32_t m_stream_id = 0;  // CUPTI's stream id
  bool m_open = false;            // between start() and elapsed_ns()
};

// Starts CUPTI activity collection for this process (kernels, memcpy, memset; and for the stage
// clock, API and external-correlation records) or joins it. Returns an empty string on success,
// otherwise why CUPTI cannot be used (another profiler holds it, insufficient privileges, ...).
// Every successful acquire needs one cupti_release().
std::string cupti_acquire();
void cupti_release() noexcept;
// After a successful cupti_acquire(): empty when cupti_stage_clock can be used, else why not (the
// API or external-correlation activity kinds could not be enabled).
std::string cupti_stage_support();

// The stage recorder's clock from CUPTI's own records, without enqueuing anything: begin_span()
// pushes an external correlation id (a per-generation tag in the high 32 bits, the span index in
// the low 32) on the calling thread's CUPTI stack and end_span() pops it, so CUPTI tags every CUDA
// API call made in between, and through its correlation id the kernels, copies and memsets that
// call enqueued, on any stream. A span's interval is [first start, last end] of those records, in
// the GPU's own timestamps: the span's own work, idle time between its launches included, work of
// spans nested in it excluded. Requires a successful cupti_acquire() and an empty
// cupti_stage_support(). Spans of one clock begin and end on one thread (CUPTI's stack is per
// thread); work launched by other threads is not attributed.
class cupti_stage_clock final : public device_clock {
 public:
  explicit cupti_stage_clock(int device);
  ~cupti_stage_clock() override;
  cupti_stage_clock(const cupti_stage_clock&) = delete;
  cupti_stage_clock& operator=(const cupti_stage_clock&) = delete;

  std::uint32_t begin_span() override;
  void end_span(std::uint32_t span) noexcept override;
  // The first call after new spans waits for the whole device and force-flushes CUPTI.
  std::optional<std::pair<double, double>> interval_ns(std::uint32_t span) override;
  void reset() override;
  std::string_view method() const override { return "cupti_external_correlation"; }

 private:
  void arm();
  void resolve();
  void push(std::uint32_t span) noexcept;
  void pop(std::uint32_t span) noexcept;
  void note_failure(const std::string& what) noexcept;

  int m_device;
  std::uint32_t m_tag = 0;          // this generation's tag; 0 until the first span after reset()
  std::uint32_t m_next_span = 0;    // spans begun since reset()
  std::vector<std::uint32_t> m_open;  // spans begun and not ended, innermost last: CUPTI's stack
  bool m_resolved = false;          // m_work holds every span begun so far
  std::vector<std::pair<std::uint64_t, std::uint64_t>> m_work;  // by span, CUPTI ns; end 0: none
  std::uint64_t m_origin_ns = 0;    // CUPTI timestamp of the clock's 0 (the first work seen)
  bool m_has_origin = false;
  std::string m_failure;            // first push/pop failure since reset(), thrown by interval_ns()
};

// The stage recorder's clock from CUDA events on the backend's stream: a pair of events per span,
// from a growing pool. A span's interval runs from its begin event to its end event, so it includes
// what nested spans enqueued and the launch path between the events (events cost host time:
// docs/perf/2026-11-29-h200-foundation.md). The fallback when CUPTI cannot be used.
class event_clock final : public device_clock {
 public:
  // `method` names the numbers in results: "cuda_events", or why CUPTI was not used.
  event_clock(int device, cudaStream_t stream, std::string method = "cuda_events");
  ~event_clock() override;
  event_clock(const event_clock&) = delete;
  event_clock& operator=(const event_clock&) = delete;

  std::uint32_t begin_span() override;
  void end_span(std::uint32_t span) noexcept override;
  std::optional<std::pair<double, double>> interval_ns(std::uint32_t span) override;
  void reset() override;
  std::string_view method() const override { return m_method; }

 private:
  std::uint32_t record();  // records the next pool event on the stream, returns its index

  struct span_events {
    std::uint32_t begin = 0, end = 0;
    bool ended = false;
  };
  int m_device;
  cudaStream_t m_stream;
  std::string m_method;
  std::vector<cudaEvent_t> m_events;  // kept across reset(): creating events is the slow part
  std::uint32_t m_next = 0;           // events recorded since reset(); m_events[0] is the origin
  std::vector<span_events> m_spans;
  std::string m_failure;              // an end_span() that could not record, thrown by interval_ns()
};

}  // namespace itera::cuda
