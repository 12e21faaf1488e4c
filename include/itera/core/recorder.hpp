#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "itera/core/result.hpp"
#include "itera/core/timer.hpp"

namespace itera {

// Bytes a backend's allocator holds, with a resettable high-water mark, so that nested stages each
// see their own peak. Backends update it on every allocation and free.
class memory_tracker {
 public:
  void on_alloc(std::uint64_t bytes) {
    const auto now = m_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    auto peak = m_peak.load(std::memory_order_relaxed);
    while (now > peak && !m_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
  }
  void on_free(std::uint64_t bytes) { m_current.fetch_sub(bytes, std::memory_order_relaxed); }
  std::uint64_t current() const { return m_current.load(std::memory_order_relaxed); }
  std::uint64_t peak() const { return m_peak.load(std::memory_order_relaxed); }
  // Sets the high-water mark to `value` and returns what it was.
  std::uint64_t exchange_peak(std::uint64_t value) { return m_peak.exchange(value, std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> m_current{0};
  std::atomic<std::uint64_t> m_peak{0};
};

// Marks on a device stream, resolved into durations once the work has finished. The cuda backend
// implements it with a pool of CUDA events; without one, stages carry host time only.
class device_clock {
 public:
  virtual ~device_clock() = default;
  virtual std::uint32_t mark() = 0;                              // enqueue a marker, cheap
  virtual double elapsed_ns(std::uint32_t from, std::uint32_t to) = 0;  // waits for `to`
  virtual void reset() = 0;                                      // forget all marks
  virtual std::string_view method() const = 0;
};

// Nested named spans with host time, device time, declared bytes and FLOPs, and allocator peaks.
// Opening and closing a scope costs two clock reads and a push (bench/bench_recorder.cpp pins it
// under 1 us); aggregation happens in finish(), outside the timed region.
class stage_recorder {
 public:
  explicit stage_recorder(device_clock* clock = nullptr, memory_tracker* memory = nullptr);

  class scope {
   public:
    scope(scope&& other) noexcept;
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    scope& operator=(scope&&) = delete;
    ~scope();
    void add_bytes_read(double bytes);
    void add_bytes_written(double bytes);
    void add_flops(double flops);
    void close();  // ends the span early; the destructor then does nothing

   private:
    friend class stage_recorder;
    scope(stage_recorder* owner, std::uint32_t index) : m_owner(owner), m_index(index) {}
    stage_recorder* m_owner;
    std::uint32_t m_index;
  };

  // Opens a span named `name` under the innermost open span.
  [[nodiscard]] scope enter(std::string_view name);

  // Resolves device times and aggregates the spans by path (in first-seen order). Call after the
  // device work has finished or let it wait. Clears the recorder.
  std::vector<stage_record> finish();

  std::size_t open_depth() const { return m_stack.size(); }

 private:
  struct span {
    std::uint32_t name_id;
    std::int32_t parent;  // index into m_spans, -1 for a root
    std::int64_t host_begin_ns, host_end_ns;
    std::uint32_t mark_begin, mark_end;
    double bytes_read, bytes_written, flops;
    std::uint64_t saved_peak, memory_peak, memory_end;
    bool closed;
  };
  void close_span(std::uint32_t index);
  std::uint32_t intern(std::string_view name);

  device_clock* m_clock;
  memory_tracker* m_memory;
  std::vector<std::string> m_names;
  std::vector<span> m_spans;
  std::vector<std::uint32_t> m_stack;
};

}  // namespace itera
