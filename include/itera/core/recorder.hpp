#pragma once
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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

// Device time for the stage recorder, by span. A span opens when a stage opens and closes with it;
// the clock attributes to it the device work enqueued in between (outside the spans nested in it:
// the recorder unites those itself). The cuda backend implements it with CUPTI external
// correlation, or, without CUPTI, with CUDA events on its stream, whose interval around a span also
// covers what nested spans enqueued. Without a clock, stages carry host time only.
class device_clock {
 public:
  virtual ~device_clock() = default;
  // Called when a stage opens and closes, on the thread that opened it, in nesting order; both must
  // be cheap (bench/bench_recorder.cpp). end_span runs in a scope's destructor and must not throw:
  // a clock keeps its failure and reports it from interval_ns().
  virtual std::uint32_t begin_span() = 0;
  virtual void end_span(std::uint32_t span) = 0;
  // [start, end] in ns, on the clock's own timeline, of the device work `span` itself enqueued;
  // nullopt when it enqueued none. Waits for the device work (the first call after new spans may
  // synchronize and flush); later calls read the result. Throws when the time cannot be known.
  virtual std::optional<std::pair<double, double>> interval_ns(std::uint32_t span) = 0;
  virtual void reset() = 0;  // forget all spans
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

  // Starts the next timed repetition: spans opened from here on count toward it in their stage's
  // repetition_ns (finish()). The runner calls it before each sample; spans opened before the first
  // call belong to none, and with no call at all repetition_ns stays empty.
  void next_repetition() {
    ++m_repetition;
    m_counting = true;
  }
  // Spans opened from here on belong to no repetition (the work after the last sample).
  void end_repetitions() { m_counting = false; }

  // Resolves device times and aggregates the spans by path (in first-seen order). A span's device
  // time runs from the first start to the last end of the work it and its nested spans enqueued
  // (0 when they enqueued none). Call after the device work has finished or let it wait. Clears the
  // recorder, repetitions included.
  std::vector<stage_record> finish();

  std::size_t open_depth() const { return m_stack.size(); }

 private:
  struct span {
    std::uint32_t name_id;
    std::int32_t parent;  // index into m_spans, -1 for a root
    std::int64_t host_begin_ns, host_end_ns;
    std::uint32_t clock_span;  // the device clock's id of this span
    std::int32_t repetition;   // m_repetition when opened (-1: none)
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
  std::int32_t m_repetition = -1;  // the last repetition started; -1 before the first
  bool m_counting = false;         // spans opened now count toward m_repetition
};

}  // namespace itera
