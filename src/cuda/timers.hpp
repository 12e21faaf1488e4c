#pragma once
// Device timers and the stream clock of the cuda backend.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>
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
  double elapsed_ns() override;
  std::string_view method() const override { return m_method; }

 private:
  cudaStream_t m_stream;
  cudaEvent_t m_start = nullptr;
  cudaEvent_t m_stop = nullptr;
  std::string m_method;
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
  double elapsed_ns() override;
  std::string_view method() const override { return "cupti_activity_span"; }

 private:
  cudaStream_t m_stream;
  std::uint32_t m_device_id = 0;  // CUPTI's device id of the stream's context
  std::uint32_t m_stream_id = 0;  // CUPTI's stream id
  bool m_open = false;            // between start() and elapsed_ns()
};

// Starts CUPTI activity collection for this process (kernels, memcpy, memset) or joins it.
// Returns an empty string on success, otherwise why CUPTI cannot be used (another profiler holds
// it, insufficient privileges, ...). Every successful acquire needs one cupti_release().
std::string cupti_acquire();
void cupti_release() noexcept;

// Stream markers for the stage recorder: a growing pool of CUDA events, recorded on the stream.
class event_clock final : public device_clock {
 public:
  event_clock(int device, cudaStream_t stream);
  ~event_clock() override;
  event_clock(const event_clock&) = delete;
  event_clock& operator=(const event_clock&) = delete;

  std::uint32_t mark() override;
  double elapsed_ns(std::uint32_t from, std::uint32_t to) override;
  void reset() override { m_next = 0; }
  std::string_view method() const override { return "cuda_events"; }

 private:
  int m_device;
  cudaStream_t m_stream;
  std::vector<cudaEvent_t> m_events;  // kept across reset(): creating events is the slow part
  std::uint32_t m_next = 0;
};

}  // namespace itera::cuda
