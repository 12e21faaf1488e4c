#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "itera/core/timer.hpp"

namespace itera {

class device_clock;
class memory_tracker;

struct device_memory {
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;  // driver view
};

// What NVML (or nothing) saw during a case: clock-event (throttle) reasons and clocks.
struct throttle_sample {
  bool available = false;
  std::uint64_t reasons_mask = 0;  // NVML clocks_event_reasons bits, OR-ed over the case
  std::vector<std::string> reasons;  // names of the bits, idle and app-clock settings excluded
  unsigned sm_clock_mhz_min = 0, sm_clock_mhz_max = 0;
  unsigned temperature_c_max = 0;
  double power_w_max = 0;
};

// A device backend: where workloads run. The cuda backend lives in src/cuda and is the only code
// that includes CUDA headers; the cpu backend is the reference and runs everywhere.
class backend {
 public:
  virtual ~backend() = default;
  virtual std::string_view name() const = 0;         // "cuda" | "cpu"
  virtual std::string device_name() const = 0;       // "NVIDIA H200", host CPU model
  virtual int device_index() const { return 0; }
  virtual std::unique_ptr<device_timer> make_timer() = 0;
  virtual device_memory memory() const = 0;
  virtual void synchronize() = 0;
  // Stream markers for the stage recorder's device times; nullptr when the backend has none.
  virtual device_clock* clock() { return nullptr; }
  // The backend allocator's bytes in use and high-water mark.
  virtual memory_tracker& memory_tracking() = 0;
  // Device facts only this backend can read (cuda: compute capability, SMs, runtime versions).
  virtual nlohmann::ordered_json describe() const = 0;
};

// The functions below live in itera_lib (src/lib), the layer that knows which backends were built.

// Backends compiled into this binary, and whether each can run here (cuda needs a device).
struct backend_availability {
  std::string name;
  bool compiled = false;
  bool usable = false;
  std::string reason;  // why not usable
};
std::vector<backend_availability> available_backends();

// Opens a backend by name; throws usage_error naming the choices when it cannot.
std::unique_ptr<backend> open_backend(std::string_view name, int device_index = 0);

// "cuda" when a GPU is usable here, else "cpu".
std::string default_backend_name();

}  // namespace itera
