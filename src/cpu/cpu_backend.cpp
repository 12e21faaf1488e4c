#include "itera/cpu/cpu_backend.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "itera/core/recorder.hpp"
#include "itera/env/fingerprint.hpp"

extern "C" char* openblas_get_config(void);
extern "C" int openblas_get_num_threads(void);

namespace itera {
namespace {

// On the cpu backend the work is synchronous: the host clock around it is its device time.
class host_clock_timer final : public device_timer {
 public:
  void start() override { m_begin = host_now_ns(); }
  void stop() override { m_end = host_now_ns(); }
  void wait() override {}  // the work was synchronous
  double elapsed_ns() override { return static_cast<double>(m_end - m_begin); }
  std::string_view method() const override { return "host_clock"; }

 private:
  std::int64_t m_begin = 0, m_end = 0;
};

class cpu_backend final : public backend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::string device_name() const override {
    const auto host = host_fingerprint();
    return host.value("cpu_model", std::string("cpu"));
  }
  std::unique_ptr<device_timer> make_timer() override { return std::make_unique<host_clock_timer>(); }
  device_memory memory() const override {
    const auto host = host_fingerprint();
    return {host.value("memory_total_bytes", std::uint64_t{0}), host.value("memory_available_bytes", std::uint64_t{0})};
  }
  void synchronize() override {}
  memory_tracker& memory_tracking() override { return m_memory; }
  nlohmann::ordered_json describe() const override {
    return {{"kind", "cpu"},
            {"name", device_name()},
            {"blas", openblas_get_config()},
            {"blas_threads", openblas_get_num_threads()}};
  }

 private:
  memory_tracker m_memory;
};

}  // namespace

std::unique_ptr<backend> make_cpu_backend() { return std::make_unique<cpu_backend>(); }

host_buffer::host_buffer(std::size_t bytes, memory_tracker& tracker) : m_bytes(bytes), m_tracker(tracker) {
  // 64-byte alignment for vector loads; round the size up as aligned_alloc requires.
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  m_data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!m_data) throw std::bad_alloc();
  m_tracker.on_alloc(m_bytes);
}

host_buffer::~host_buffer() {
  std::free(m_data);
  m_tracker.on_free(m_bytes);
}

}  // namespace itera
