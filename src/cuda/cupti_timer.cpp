// Device time from CUPTI activity records: the GPU's own start and end timestamps of the kernels,
// copies and memsets a timed region ran, as Nsight tools read them. A pair of CUDA events adds its
// own overhead to the interval (about 5 us on an H200, 40% of a 10 us kernel); these records do not.
//
// Collection strategy. Activity kinds are enabled once, when the first cuda backend opens
// (cupti_acquire), and stay enabled until the last one closes, rather than being toggled around each
// region: toggling costs host time on every repetition, and CUPTI does not document when a toggle
// takes effect for launches already on their way, so a missed record would silently shorten the
// span. Always-on collection costs some launch overhead, which shows in host time and between
// kernels, never inside a kernel's own [start, end]. Records are attributed to a region by stream
// order instead: start() waits for the stream and force-flushes, so every record delivered before
// it belongs to earlier work and is dropped; after that, records of this device and stream are
// aggregated until elapsed_ns() waits for the stream again and force-flushes once more.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "itera/cuda/check.hpp"
#include "src/cuda/timers.hpp"

namespace itera::cuda {
namespace {

constexpr std::size_t activity_buffer_bytes = std::size_t{1} << 20;
constexpr std::size_t activity_record_alignment = 8;  // CUPTI requires 8-byte aligned buffers

constexpr CUpti_ActivityKind collected_kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,
};

std::string cupti_failure(const char* call, CUptiResult r) {
  return std::string(call) + ": " + detail::cupti_error_name(r) + " (" + detail::cupti_error_text(r) + ")";
}

struct region_span {
  std::uint64_t first_start = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t last_end = 0;
  std::size_t records = 0;     // complete records of the region's device and stream
  std::size_t incomplete = 0;  // records without timestamps, or a buffer that did not parse
  std::size_t dropped = 0;     // records CUPTI could not store while the region was open
};

// The process's one CUPTI activity client. Two mutexes: m_region_mutex serialises regions and is
// held across cuptiActivityFlushAll; m_records_mutex guards the aggregate and is the only one the
// buffer callbacks take, because CUPTI may deliver buffers from its own worker thread while a
// flush on our thread waits for it.
class cupti_session {
 public:
  static cupti_session& instance() {
    // Never destroyed: at exit CUPTI tears itself down in its own order, and a destructor that
    // disabled activities after that would call into a finalised library.
    static cupti_session* const session = new cupti_session();
    return *session;
  }

  std::string acquire() {
    std::lock_guard lock(m_users_mutex);
    if (m_users > 0) {
      ++m_users;
      return {};
    }
    if (!m_callbacks_registered) {
      const CUptiResult r = cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed);
      if (r != CUPTI_SUCCESS) return cupti_failure("cuptiActivityRegisterCallbacks", r);
      m_callbacks_registered = true;
    }
    for (std::size_t i = 0; i < std::size(collected_kinds); ++i) {
      const CUptiResult r = cuptiActivityEnable(collected_kinds[i]);
      if (r != CUPTI_SUCCESS) {
        for (std::size_t j = 0; j < i; ++j) (void)cuptiActivityDisable(collected_kinds[j]);
        return cupti_failure("cuptiActivityEnable", r);
      }
    }
    ++m_users;
    return {};
  }

  void release() noexcept {
    std::lock_guard lock(m_users_mutex);
    if (m_users == 0 || --m_users > 0) return;
    for (const CUpti_ActivityKind kind : collected_kinds) (void)cuptiActivityDisable(kind);
    // Hand back the buffers CUPTI still holds; their records belong to no region.
    (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }

  void begin_region(const void* owner, std::uint32_t device_id, std::uint32_t stream_id) {
    std::lock_guard region(m_region_mutex);
    if (m_owner && m_owner != owner)
      throw std::logic_error(
          "two CUPTI-timed regions at once: this process times one region at a time with CUPTI "
          "(finish the other timer's elapsed_ns() first)");
    {
      std::lock_guard records(m_records_mutex);
      m_collecting = false;
    }
    m_owner = nullptr;
    // The caller has waited for the stream: every record of earlier work on it is complete and
    // this flush delivers it, uncollected. FORCED, because a default flush keeps back any buffer
    // that also holds an unfinished record of another stream.
    ITERA_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    {
      std::lock_guard records(m_records_mutex);
      m_span = region_span{};
      m_device_id = device_id;
      m_stream_id = stream_id;
      m_collecting = true;
    }
    m_owner = owner;
  }

  region_span end_region(const void* owner) {
    std::lock_guard region(m_region_mutex);
    if (m_owner != owner) throw std::logic_error("cupti_timer: elapsed_ns() without a matching start()");
    struct close_region {
      cupti_session& s;
      ~close_region() {
        std::lock_guard records(s.m_records_mutex);
        s.m_collecting = false;
        s.m_owner = nullptr;
      }
    } closer{*this};
    // The caller has waited for the stream, so the region's records are complete.
    ITERA_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    std::lock_guard records(m_records_mutex);
    return m_span;
  }

  void abandon(const void* owner) noexcept {
    std::lock_guard region(m_region_mutex);
    if (m_owner != owner) return;
    std::lock_guard records(m_records_mutex);
    m_collecting = false;
    m_owner = nullptr;
  }

 private:
  cupti_session() = default;

  // CUPTI asks for a buffer inside the first launch after every flush, so a fresh allocation there
  // (mmap, then a page fault per 4 KiB as CUPTI writes) lands in the launch path: measured on an
  // H200 at about 370 us per launch with 4 MiB buffers from aligned_alloc. Buffers are therefore
  // recycled through a pool and touched once when first made.
  static void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
    *buffer = instance().take_buffer();
    // A null buffer makes CUPTI drop records; the dropped count then fails the region.
    *size = *buffer ? activity_buffer_bytes : 0;
    *max_records = 0;  // as many as fit
  }

  static void CUPTIAPI buffer_completed(CUcontext context, std::uint32_t stream_id, std::uint8_t* buffer,
                                        std::size_t /*size*/, std::size_t valid_size) {
    instance().consume(context, stream_id, buffer, valid_size);
    instance().give_back(buffer);
  }

  std::uint8_t* take_buffer() noexcept {
    {
      std::lock_guard lock(m_pool_mutex);
      if (!m_pool.empty()) {
        std::uint8_t* b = m_pool.back();
        m_pool.pop_back();
        return b;
      }
    }
    auto* b = static_cast<std::uint8_t*>(std::aligned_alloc(activity_record_alignment, activity_buffer_bytes));
    if (b) std::memset(b, 0, activity_buffer_bytes);
    return b;
  }

  void give_back(std::uint8_t* buffer) noexcept {
    if (!buffer) return;
    std::lock_guard lock(m_pool_mutex);
    try {
      m_pool.push_back(buffer);
    } catch (...) {
      std::free(buffer);
    }
  }

  void consume(CUcontext context, std::uint32_t stream_id, std::uint8_t* buffer, std::size_t valid_size) noexcept {
    std::size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) != CUPTI_SUCCESS) dropped = 0;
    std::lock_guard records(m_records_mutex);
    if (!m_collecting) return;
    m_span.dropped += dropped;
    if (!buffer || valid_size == 0) return;
    CUpti_Activity* record = nullptr;
    for (;;) {
      const CUptiResult r = cuptiActivityGetNextRecord(buffer, valid_size, &record);
      if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
      if (r != CUPTI_SUCCESS) {
        ++m_span.incomplete;  // an unreadable buffer: the region cannot be trusted
        break;
      }
      std::uint64_t start = 0, end = 0;
      std::uint32_t device_id = 0, record_stream = 0;
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
          start = k->start, end = k->end, device_id = k->deviceId, record_stream = k->streamId;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
          start = m->start, end = m->end, device_id = m->deviceId, record_stream = m->streamId;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
          start = m->start, end = m->end, device_id = m->deviceId, record_stream = m->streamId;
          break;
        }
        default:
          continue;
      }
      if (device_id != m_device_id || record_stream != m_stream_id) continue;
      if (start == 0 || end == 0 || end < start) {
        ++m_span.incomplete;
        continue;
      }
      m_span.first_start = std::min(m_span.first_start, start);
      m_span.last_end = std::max(m_span.last_end, end);
      ++m_span.records;
    }
  }

  std::mutex m_users_mutex;
  int m_users = 0;
  bool m_callbacks_registered = false;

  std::mutex m_region_mutex;
  const void* m_owner = nullptr;

  std::mutex m_records_mutex;
  bool m_collecting = false;
  std::uint32_t m_device_id = 0, m_stream_id = 0;
  region_span m_span;

  std::mutex m_pool_mutex;  // guards m_pool: activity buffers handed back by CUPTI, for reuse
  std::vector<std::uint8_t*> m_pool;
};

}  // namespace

std::string cupti_acquire() { return cupti_session::instance().acquire(); }
void cupti_release() noexcept { cupti_session::instance().release(); }

// ---------------------------------------------------------------------------------------------
// cupti_timer

cupti_timer::cupti_timer(cudaStream_t stream) : m_stream(stream) {
  // Both ids as CUPTI writes them into records; the backend has made its device current.
  ITERA_CUPTI_CHECK(cuptiGetStreamIdEx(nullptr, m_stream, 0, &m_stream_id));
  ITERA_CUPTI_CHECK(cuptiGetDeviceId(nullptr, &m_device_id));
}

cupti_timer::~cupti_timer() {
  if (m_open) cupti_session::instance().abandon(this);
}

void cupti_timer::start() {
  ITERA_CUDA_CHECK(cudaStreamSynchronize(m_stream));
  cupti_session::instance().begin_region(this, m_device_id, m_stream_id);
  m_open = true;
}

void cupti_timer::stop() {
  // Nothing to enqueue: the region ends with the last record of the work launched before
  // elapsed_ns(). The check keeps the start/stop/elapsed protocol honest.
  if (!m_open) throw std::logic_error("cupti_timer: stop() without start()");
}

double cupti_timer::elapsed_ns() {
  if (!m_open) throw std::logic_error("cupti_timer: elapsed_ns() without start()");
  ITERA_CUDA_CHECK(cudaStreamSynchronize(m_stream));  // R2: the work has finished
  m_open = false;
  const region_span span = cupti_session::instance().end_region(this);
  if (span.dropped > 0)
    throw std::runtime_error("CUPTI dropped " + std::to_string(span.dropped) +
                             " activity records during a timed region: its device time is unknown");
  if (span.incomplete > 0)
    throw std::runtime_error("CUPTI delivered " + std::to_string(span.incomplete) +
                             " activity records without timestamps for a timed region: its device time is unknown");
  if (span.records == 0)
    throw std::runtime_error(
        "CUPTI delivered no kernel, memcpy or memset record for the timed region on this stream: "
        "the work was not enqueued on the backend's stream, or enqueued nothing");
  return static_cast<double>(span.last_end - span.first_start);
}

}  // namespace itera::cuda
