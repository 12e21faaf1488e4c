// The parts of the user API's device side that do not depend on CUDA.
#include <unistd.h>

#include <fstream>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "src/user/device.hpp"

namespace itera::user::detail {

std::string other_device_message(int stream_dev, int session_dev) {
  return fmt::format("the stream belongs to CUDA device {}, but the session records device {}: open a session on "
                     "device {} for that stream (session_options::device), or pass a stream of device {}",
                     stream_dev, session_dev, stream_dev, session_dev);
}

void check_clock_choice(const std::string& clock) {
  if (clock == "auto" || clock == "cupti" || clock == "events") return;
  throw usage_error(fmt::format("device_clock '{}': give \"auto\" (CUPTI when this process can use it, else CUDA "
                                "events), \"cupti\" or \"events\"",
                                clock));
}

std::optional<std::uint64_t> host_rss_bytes() {
  // statm: size resident shared text lib data dt, in pages.
  std::ifstream in("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return std::nullopt;
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return std::nullopt;
  return resident * static_cast<std::uint64_t>(page);
}

}  // namespace itera::user::detail
