// The user API's device side without CUDA: every session records host time, and says so.
#include <cstdint>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/user/session.hpp"
#include "src/user/device.hpp"

namespace itera::user::detail {

bool built_with_cuda() { return false; }

device_choice choose_device(int requested, const std::string& clock) {
  check_clock_choice(clock);
  if (requested < device_auto)
    throw usage_error(fmt::format("device {}: give a CUDA device index (0, 1, ...), device_auto ({}) or device_none ({})",
                                  requested, device_auto, device_none));
  device_choice c;
  c.why_host = requested == device_none ? "the session was opened without a device (device_none)"
                                        : "itera was built without CUDA";
  return c;
}

int stream_device(void*) { throw device_error("itera was built without CUDA: it cannot tell a stream's device"); }

void check_stream(void*, const device_choice&) {}

bool is_default_stream(void* stream) {
  return stream == reinterpret_cast<void*>(std::uintptr_t{1}) || stream == reinterpret_cast<void*>(std::uintptr_t{2});
}  // the stream is not used: host time, said in the results

void synchronize_stream(void*) {}

std::optional<std::uint64_t> device_memory_in_use(const device_choice& device, std::string* why) {
  if (why) *why = "not recorded: " + device.why_host;
  return std::nullopt;
}

std::unique_ptr<backend> describe_device(const device_choice&) { return open_backend("cpu"); }

std::unique_ptr<stream_clock> make_stream_clock(const device_choice&) { return nullptr; }

}  // namespace itera::user::detail
