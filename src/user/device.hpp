#pragma once
// What the user API needs from CUDA, behind an interface free of CUDA headers: device_cuda.cpp
// implements it with the CUDA runtime when itera is built with CUDA, device_host.cpp without.
// The user's process owns the device and its streams: nothing here creates a stream, a cuBLAS
// handle or a CUPTI subscription (the cuda backend would); it records events on the streams it is
// given, reads the driver's memory figures, and describes the device for the results' context.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "itera/core/backend.hpp"
#include "itera/core/recorder.hpp"

namespace itera::user::detail {

struct device_choice {
  bool cuda = false;       // stages may take streams of device `index`
  int index = -1;
  std::string why_host;    // when !cuda: why time is host time only (results say so)
  // When cuda: the device clock of scopes given a stream, as results name it
  // ("cupti_external_correlation" or "cuda_events"), and why events when "auto" could not use
  // CUPTI ("" otherwise).
  std::string clock;
  std::string why_events;
  std::shared_ptr<void> cupti;  // holds this process's CUPTI activity collection while a copy lives
};

// device_auto: CUDA device 0 when usable, else host only with the reason; device_none: host only;
// an index: that device, usage_error naming the devices there are (or why none) when it cannot be.
// `clock` is session_options::device_clock: usage_error for an unknown one, device_error for
// "cupti" when this process cannot use CUPTI (another profiler holds it, ...), with the reason.
device_choice choose_device(int requested, const std::string& clock);

// True when this itera was built with the CUDA backend.
bool built_with_cuda();

// The device a stream belongs to. device_error when the handle is not a stream the runtime knows.
int stream_device(void* stream);

// Checks a stream given to a stage or the runner against the session's device; nullptr passes.
// usage_error for a stream given to a host-only session of a CUDA build; device_error for a stream
// of another device, naming both devices and the fix. Without CUDA any stream passes (time is host
// time, and the results say so).
void check_stream(void* stream, const device_choice& device);

// usage_error unless `clock` is "auto", "cupti" or "events" (session_options::device_clock).
void check_clock_choice(const std::string& clock);

// cudaStreamLegacy or cudaStreamPerThread: a stream whose device is the calling thread's current one.
bool is_default_stream(void* stream);

// The message for a stream on device `stream_dev` given to a session on `session_dev`.
std::string other_device_message(int stream_dev, int session_dev);

// Blocks until the work enqueued on `stream` so far has finished (no-op without CUDA).
void synchronize_stream(void* stream);

// Device memory in use on the device, driver view (total - free); nullopt with `why` when unknown.
std::optional<std::uint64_t> device_memory_in_use(const device_choice& device, std::string* why);

// The backend make_context() fingerprints: the session's device described from the CUDA runtime
// (no stream, handle or profiler of its own), or the cpu backend for host-only sessions.
std::unique_ptr<backend> describe_device(const device_choice& device);

// The stage recorder's device clock on the callers' streams: a pair of CUDA events per span, on
// the stream given for that span (spans without a stream have no device time). prepare() records
// the begin event before the recorder opens its span (so a failing stream throws before anything
// changes); begin_span() takes it.
class stream_clock : public device_clock {
 public:
  virtual void prepare(void* stream) = 0;  // device_error when the event cannot be recorded
  // A span outside the recorder (an iteration): prepare + begin_span.
  std::uint32_t begin_direct(void* stream) {
    prepare(stream);
    return begin_span();
  }
  // Blocks until the span's end event has completed (the device work before it finished).
  virtual void wait(std::uint32_t span) = 0;
  // The first failure of end_span() since reset(), or "" (end_span runs in destructors).
  virtual std::string failure() const = 0;
};

// nullptr for host-only sessions.
std::unique_ptr<stream_clock> make_stream_clock(const device_choice& device);

// Resident set size of this process, bytes (/proc/self/statm); nullopt where it cannot be read.
std::optional<std::uint64_t> host_rss_bytes();

}  // namespace itera::user::detail
