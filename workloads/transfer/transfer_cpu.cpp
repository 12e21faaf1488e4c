// transfer on the cpu backend: memcpy between two host buffers. The cpu backend's "device" memory
// is host memory, so every direction is the same memcpy; the fields say so.
#include <cstring>

#include <fmt/format.h>

#include "itera/core/runner.hpp"
#include "itera/cpu/cpu_backend.hpp"
#include "workloads/transfer/transfer.hpp"

namespace itera::transfer {

void run_cpu(case_state& state) {
  const auto direction = state.get_string("direction");
  const auto bytes = static_cast<std::size_t>(state.get_int("bytes"));
  if (const auto free = state.device().memory().free_bytes; free > 0 && 2 * bytes > free)
    state.skip(fmt::format("does not fit: needs {:.2f} GiB of host memory, {:.2f} GiB available",
                           2.0 * static_cast<double>(bytes) / (1 << 30), static_cast<double>(free) / (1 << 30)));
  memory_tracker& mem = state.device().memory_tracking();
  host_buffer src(bytes, mem), dst(bytes, mem);
  // Touch every page of both buffers first so page faults are not timed; non-zero, varied bytes.
  auto* s = src.as<unsigned char>();
  for (std::size_t i = 0; i < bytes; ++i) s[i] = static_cast<unsigned char>((i * 131u + 7u) >> 3);
  std::memset(dst.data(), 0, bytes);

  state.set_field("memory.actual", "host memory (the cpu backend has no device memory)");
  state.set_field("copy_engine", "memcpy");
  std::memcpy(dst.data(), src.data(), bytes);
  const bool same = std::memcmp(dst.data(), src.data(), bytes) == 0;
  state.set_verification(same, same ? 0.0 : 1.0, 0.0, "memcmp of the whole destination");
  if (!same) throw std::runtime_error("transfer verification failed: destination differs from source");

  // Bandwidth counts read + write for d2d (as the copy ceiling does) and the bytes moved once otherwise.
  if (direction == "d2d") state.set_work(0, static_cast<double>(bytes), static_cast<double>(bytes));
  else state.set_work(0, static_cast<double>(bytes), 0);
  state.set_ceiling_key(direction == "d2d" ? "copy.d2d" : fmt::format("copy.{}.{}", direction, state.get_string("memory")));
  state.exec([&] { std::memcpy(dst.data(), src.data(), bytes); });
}

}  // namespace itera::transfer
