#pragma once
#include <chrono>
#include <cstdint>
#include <string_view>

namespace itera {

// Host steady clock in nanoseconds.
inline std::int64_t host_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Times device work (R2). start() and stop() enqueue markers on the backend's stream around the
// work; elapsed_ns() waits until the work between them has finished, then returns its duration.
// Implementations: cuda events, CUPTI activity records (cuda backend), host clock (cpu backend).
class device_timer {
 public:
  virtual ~device_timer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
  // Blocks until the timed work has finished, and nothing more: the runner reads the host clock
  // right after, so the timer's own bookkeeping (a CUPTI flush) stays out of host time.
  virtual void wait() = 0;
  // Blocks until the timed work has finished. Returns the time of the timed region in ns.
  virtual double elapsed_ns() = 0;
  // How the number was produced: "cupti_activity_span", "cuda_events", "host_clock", ...
  virtual std::string_view method() const = 0;
};

}  // namespace itera
