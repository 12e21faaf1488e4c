// The user API's device side with the CUDA runtime (built when itera has its cuda backend).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/cuda/cuda_backend.hpp"
#include "itera/env/versions.hpp"
#include "itera/user/session.hpp"
#include "src/cuda/timers.hpp"
#include "src/user/device.hpp"

#if CUDART_VERSION < 12080
#error "the user API needs CUDA 12.8 or later (cudaStreamGetDevice)"
#endif

namespace itera::user::detail {
namespace {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();  // a non-sticky error must not surface in the user's next call
  throw device_error(fmt::format("CUDA error {} ({}) in {}", cudaGetErrorName(status), cudaGetErrorString(status), what));
}

// Makes `device` current for a scope and puts back what the caller's thread had: the user's
// thread may have another device current, and we must not change it under them.
class device_guard {
 public:
  explicit device_guard(int device) {
    check(cudaGetDevice(&m_previous), "cudaGetDevice");
    if (m_previous != device) {
      check(cudaSetDevice(device), "cudaSetDevice");
      m_switched = true;
    }
  }
  ~device_guard() {
    if (m_switched) (void)cudaSetDevice(m_previous);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int m_previous = 0;
  bool m_switched = false;
};

std::string uuid_text(const cudaUUID_t& u) {
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    s += fmt::format("{:02x}", static_cast<unsigned char>(u.bytes[i]));
    if (i == 3 || i == 5 || i == 7 || i == 9) s += '-';
  }
  return s;
}

// The session's device as the fingerprint sees it: facts read from the runtime, nothing created.
class described_device final : public backend {
 public:
  described_device(int device, std::string clock) : m_device(device), m_clock(std::move(clock)) {
    check(cudaGetDeviceProperties(&m_properties, device), "cudaGetDeviceProperties");
  }
  std::string_view name() const override { return "cuda"; }
  std::string device_name() const override { return m_properties.name; }
  int device_index() const override { return m_device; }
  std::unique_ptr<device_timer> make_timer() override {
    throw std::logic_error("the user API times the caller's streams (stages and iterations), not a stream of its own");
  }
  device_memory memory() const override {
    device_guard g(m_device);
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return {total, free};
  }
  void synchronize() override {
    device_guard g(m_device);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  memory_tracker& memory_tracking() override { return m_tracker; }
  nlohmann::ordered_json describe() const override {
    const cudaDeviceProp& p = m_properties;
    nlohmann::ordered_json d;
    d["kind"] = "cuda";
    d["name"] = p.name;
    d["device_index"] = m_device;
    d["uuid"] = uuid_text(p.uuid);
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, m_device) == cudaSuccess)
      d["pci_bus_id"] = bus_id;
    else
      (void)cudaGetLastError();
    d["compute_capability"] = fmt::format("{}.{}", p.major, p.minor);
    d["compute_capability_x10"] = p.major * 10 + p.minor;
    d["multiprocessor_count"] = p.multiProcessorCount;
    d["l2_cache_bytes"] = p.l2CacheSize;
    d["memory_total_bytes"] = p.totalGlobalMem;
    d["memory_bus_width_bits"] = p.memoryBusWidth;
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, m_device) == cudaSuccess)
      d["sm_clock_max_khz"] = khz;
    else
      (void)cudaGetLastError();
    d["ecc_enabled"] = p.ECCEnabled != 0;
    int runtime = 0, driver = 0;
    if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) d["cuda_runtime_version"] = cuda_version_string(runtime);
    if (cudaDriverGetVersion(&driver) == cudaSuccess) d["cuda_driver_version"] = cuda_version_string(driver);
    d["stage_clock_method"] = m_clock + " on the caller's streams";
    return d;
  }

 private:
  int m_device;
  std::string m_clock;
  cudaDeviceProp m_properties{};
  memory_tracker m_tracker;
};

// Pairs of events from a pool that grows and is kept across reset(); each span's events go on the
// stream given for it.
class event_stream_clock final : public stream_clock {
 public:
  explicit event_stream_clock(int device) : m_device(device) {}
  ~event_stream_clock() override {
    for (cudaEvent_t e : m_events) (void)cudaEventDestroy(e);
  }
  event_stream_clock(const event_stream_clock&) = delete;
  event_stream_clock& operator=(const event_stream_clock&) = delete;

  void prepare(void* stream) override {
    m_prepared_stream = static_cast<cudaStream_t>(stream);
    m_prepared_device = stream != nullptr;
    if (m_prepared_device) m_prepared_event = record(m_prepared_stream);
    m_prepared = true;
  }

  std::uint32_t begin_span() override {
    span s;
    if (m_prepared && m_prepared_device) {
      s.device = true;
      s.stream = m_prepared_stream;
      s.begin = m_prepared_event;
    }
    m_prepared = false;
    m_spans.push_back(s);
    return static_cast<std::uint32_t>(m_spans.size() - 1);
  }

  void end_span(std::uint32_t id) noexcept override {
    if (id >= m_spans.size()) return;
    span& s = m_spans[id];
    if (!s.device || s.ended) return;
    try {
      s.end = record(s.stream);
      s.ended = true;
    } catch (const std::exception& e) {
      if (m_failure.empty()) m_failure = e.what();
    } catch (...) {
      if (m_failure.empty()) m_failure = "unknown exception recording a CUDA event";
    }
  }

  std::optional<std::pair<double, double>> interval_ns(std::uint32_t id) override {
    if (!m_failure.empty()) throw device_error("a stage's end event could not be recorded: " + m_failure);
    if (id >= m_spans.size())
      throw std::logic_error(fmt::format("event_stream_clock: span {} was not begun since the last reset", id));
    const span& s = m_spans[id];
    if (!s.device || !s.ended) return std::nullopt;
    check(cudaEventSynchronize(m_events[s.end]), "cudaEventSynchronize (a stage's end)");
    check(cudaEventSynchronize(m_events[0]), "cudaEventSynchronize (the clock's origin)");
    float offset_ms = 0, duration_ms = 0;
    check(cudaEventElapsedTime(&offset_ms, m_events[0], m_events[s.begin]), "cudaEventElapsedTime");
    check(cudaEventElapsedTime(&duration_ms, m_events[s.begin], m_events[s.end]), "cudaEventElapsedTime");
    const double start = static_cast<double>(offset_ms) * 1e6;
    return std::pair{start, start + static_cast<double>(duration_ms) * 1e6};
  }

  void wait(std::uint32_t id) override {
    if (id >= m_spans.size() || !m_spans[id].device || !m_spans[id].ended) return;
    check(cudaEventSynchronize(m_events[m_spans[id].end]), "cudaEventSynchronize");
  }

  void reset() override {
    m_next = 0;
    m_spans.clear();
    m_failure.clear();
    m_prepared = false;
  }

  std::string_view method() const override { return "cuda_events"; }
  std::string failure() const override { return m_failure; }

 private:
  struct span {
    std::uint32_t begin = 0, end = 0;
    cudaStream_t stream = nullptr;
    bool device = false, ended = false;
  };

  std::uint32_t record(cudaStream_t stream) {
    if (m_next == m_events.size()) grow();
    check(cudaEventRecord(m_events[m_next], stream), "cudaEventRecord on the given stream");
    return m_next++;
  }

  void grow() {
    // Events belong to the device current when they are created: the session's.
    device_guard g(m_device);
    const std::size_t more = m_events.empty() ? 64 : m_events.size();
    for (std::size_t i = 0; i < more; ++i) {
      cudaEvent_t e = nullptr;
      check(cudaEventCreate(&e), "cudaEventCreate");
      m_events.push_back(e);
    }
  }

  int m_device;
  std::vector<cudaEvent_t> m_events;
  std::uint32_t m_next = 0;  // events recorded since reset(); m_events[0] is the origin
  std::vector<span> m_spans;
  bool m_prepared = false, m_prepared_device = false;
  cudaStream_t m_prepared_stream = nullptr;
  std::uint32_t m_prepared_event = 0;
  std::string m_failure;
};


// Device time from CUPTI's activity records (cuda::cupti_stage_clock): a scope given a stream
// pushes an external correlation id on its thread, so the kernels, copies and memsets of every
// CUDA call made inside it are attributed to it, whatever stream they ran on, and nothing is put on
// the stream. A span's interval is [first start, last end] of the work of the span and of every
// span begun while it was open (its nested scopes), in the GPU's own timestamps. Reading an
// interval waits for the whole device and flushes CUPTI once per batch of new spans: the lane does
// that when it folds (every few thousand spans, and at the end of a case), and the runner after
// each call, outside the call's own time.
class cupti_stream_clock final : public stream_clock {
 public:
  explicit cupti_stream_clock(int device) : m_device(device), m_inner(device) {}

  void prepare(void* stream) override {
    m_prepared_stream = static_cast<cudaStream_t>(stream);
    m_prepared = true;
  }

  std::uint32_t begin_span() override {
    span s;
    if (m_prepared && m_prepared_stream != nullptr) {
      s.device = true;
      s.stream = m_prepared_stream;
      s.inner = m_inner.begin_span();
    }
    m_prepared = false;
    m_spans.push_back(s);
    return static_cast<std::uint32_t>(m_spans.size() - 1);
  }

  void end_span(std::uint32_t id) noexcept override {
    if (id >= m_spans.size()) return;
    span& s = m_spans[id];
    if (!s.device || s.ended) return;
    m_inner.end_span(s.inner);
    s.ended = true;
    s.after_last = static_cast<std::uint32_t>(m_spans.size());
  }

  std::optional<std::pair<double, double>> interval_ns(std::uint32_t id) override {
    if (id >= m_spans.size())
      throw std::logic_error(fmt::format("cupti_stream_clock: span {} was not begun since the last reset", id));
    const span& s = m_spans[id];
    if (!s.device || !s.ended) return std::nullopt;
    // The inner clock makes the session's device current to wait for it: put the caller's back.
    device_guard g(m_device);
    std::optional<std::pair<double, double>> out;
    for (std::uint32_t i = id; i < s.after_last; ++i) {
      const span& n = m_spans[i];
      if (!n.device) continue;
      try {
        const auto own = m_inner.interval_ns(n.inner);
        if (!own) continue;
        out = out ? std::pair{std::min(out->first, own->first), std::max(out->second, own->second)} : *own;
      } catch (const std::runtime_error& e) {
        (void)cudaGetLastError();
        throw device_error(fmt::format("device times from CUPTI could not be read: {}", e.what()));
      }
    }
    return out;
  }

  void wait(std::uint32_t id) override {
    if (id >= m_spans.size() || !m_spans[id].device || !m_spans[id].ended) return;
    check(cudaStreamSynchronize(m_spans[id].stream), "cudaStreamSynchronize (an iteration's stream)");
  }

  void reset() override {
    m_inner.reset();
    m_spans.clear();
    m_prepared = false;
  }

  std::string_view method() const override { return m_inner.method(); }
  std::string failure() const override { return {}; }  // the inner clock's failures throw from interval_ns()

 private:
  struct span {
    std::uint32_t inner = 0;       // the inner clock's span
    std::uint32_t after_last = 0;  // spans begun before this one ended: it and its nested ones are below
    cudaStream_t stream = nullptr;
    bool device = false, ended = false;
  };
  int m_device;
  cuda::cupti_stage_clock m_inner;
  std::vector<span> m_spans;
  bool m_prepared = false;
  cudaStream_t m_prepared_stream = nullptr;
};

}  // namespace

bool built_with_cuda() { return true; }

device_choice choose_device(int requested, const std::string& clock) {
  check_clock_choice(clock);
  device_choice c;
  if (requested == device_none) {
    c.why_host = "the session was opened without a device (device_none)";
    return c;
  }
  if (requested < device_auto)
    throw usage_error(fmt::format("device {}: give a CUDA device index (0, 1, ...), device_auto ({}) or device_none ({})",
                                  requested, device_auto, device_none));
  const backend_availability a = cuda_availability();
  if (!a.usable) {
    if (requested == device_auto) {
      c.why_host = "no usable CUDA device: " + a.reason;
      return c;
    }
    throw usage_error(fmt::format("device {}: no usable CUDA device here ({}); open the session with device_auto or "
                                  "device_none to record host time only",
                                  requested, a.reason));
  }
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  const int index = requested == device_auto ? 0 : requested;
  if (index >= count)
    throw usage_error(fmt::format("device {} does not exist: this machine has {} CUDA device(s), 0 to {}", index, count,
                                  count - 1));
  c.cuda = true;
  c.index = index;
  if (clock == "events") {
    c.clock = "cuda_events";
    return c;
  }
  // CUPTI's activity collection is process-wide: acquired once per session, shared with the cuda
  // backend when it runs in this process too, released when the last copy of the choice goes.
  std::string why = cuda::cupti_acquire();
  if (why.empty()) {
    why = cuda::cupti_stage_support();
    if (why.empty())
      c.cupti = std::shared_ptr<void>(nullptr, [](void*) { cuda::cupti_release(); });
    else
      cuda::cupti_release();
  }
  if (why.empty()) {
    c.clock = "cupti_external_correlation";
    return c;
  }
  if (clock == "cupti")
    throw device_error(fmt::format("device_clock \"cupti\": this process cannot use CUPTI ({}); another profiler "
                                   "(Nsight Systems, torch.profiler) may hold it. Use \"events\", or \"auto\" to fall "
                                   "back by itself",
                                   why));
  c.clock = "cuda_events";
  c.why_events = "CUPTI could not be used: " + why;
  return c;
}

int stream_device(void* stream) {
  int device = -1;
  const cudaError_t status = cudaStreamGetDevice(static_cast<cudaStream_t>(stream), &device);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw device_error(fmt::format("the stream handle {} is not a CUDA stream the runtime knows ({}: {}); pass a "
                                   "cudaStream_t (torch: torch.cuda.current_stream().cuda_stream) or none",
                                   stream, cudaGetErrorName(status), cudaGetErrorString(status)));
  }
  return device;
}

void check_stream(void* stream, const device_choice& device) {
  if (stream == nullptr) return;
  if (!device.cuda)
    throw usage_error(fmt::format("a stream was given to a session that records host time only ({}); open the session "
                                  "on the stream's device (session_options::device) or pass no stream",
                                  device.why_host));
  if (is_default_stream(stream)) {
    // The legacy and per-thread default streams belong to whatever device is current on the
    // calling thread when work is launched on them.
    int current = -1;
    check(cudaGetDevice(&current), "cudaGetDevice");
    if (current != device.index)
      throw device_error(fmt::format("the default stream given is the one of CUDA device {} (current on this thread), "
                                     "but the session records device {}: call cudaSetDevice({}) "
                                     "(torch.cuda.set_device({})) on this thread first, or open the session on device {}",
                                     current, device.index, device.index, device.index, current));
    return;
  }
  const int d = stream_device(stream);
  if (d != device.index) throw device_error(other_device_message(d, device.index));
}

bool is_default_stream(void* stream) {
  return stream == static_cast<void*>(cudaStreamLegacy) || stream == static_cast<void*>(cudaStreamPerThread);
}

void synchronize_stream(void* stream) {
  if (stream == nullptr) return;
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
}

std::optional<std::uint64_t> device_memory_in_use(const device_choice& device, std::string* why) {
  if (!device.cuda) {
    if (why) *why = "not recorded: " + device.why_host;
    return std::nullopt;
  }
  device_guard g(device.index);
  std::size_t free = 0, total = 0;
  const cudaError_t status = cudaMemGetInfo(&free, &total);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = fmt::format("not recorded: cudaMemGetInfo failed ({})", cudaGetErrorString(status));
    return std::nullopt;
  }
  return static_cast<std::uint64_t>(total - free);
}

std::unique_ptr<backend> describe_device(const device_choice& device) {
  if (!device.cuda) return open_backend("cpu");
  return std::make_unique<described_device>(device.index, device.clock);
}

std::unique_ptr<stream_clock> make_stream_clock(const device_choice& device) {
  if (!device.cuda) return nullptr;
  if (device.clock == "cupti_external_correlation") return std::make_unique<cupti_stream_clock>(device.index);
  return std::make_unique<event_stream_clock>(device.index);
}

}  // namespace itera::user::detail
