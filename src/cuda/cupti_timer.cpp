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
//
// Stage spans (cupti_stage_clock) are attributed by correlation instead, independent of any region:
// each span pushes an external correlation id; CUPTI writes an external-correlation record beside
// every API record made while it is on the thread's stack, carrying the id and the API call's
// correlation id, which the kernel, memcpy and memset records of that call carry too. The session
// joins the two while a stage clock is armed; the clock reads the result after a device-wide wait
// and a forced flush. External-correlation records exist only beside API records, so the runtime
// API kind is enabled as well: a record per runtime call of the process, which adds to every
// call's host time (ITERA_CUPTI_API_KINDS chooses the kinds; docs/perf measures the cost).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
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

// The API kinds the stage clock's external-correlation records need. Runtime and driver by
// default: with CUDA 13, cuBLASLt launches some of its kernels through the driver API, and with
// runtime records alone those kernels carried no correlation (an llm decode step's cuBLASLt
// products read 0 us in the stage table, H200, 2026-11-29); with both kinds they are timed. Driver
// records alone do not carry the runtime launches' correlation (docs/perf/2026-11-29-h200-
// foundation.md). Each enabled kind writes a record for every call of the process, in a stage or
// not: both cost 7.27 us per launch against 7.04 us for runtime alone (4.85 us with CUPTI off).
// ITERA_CUPTI_API_KINDS=runtime keeps the runtime kind only.
std::vector<CUpti_ActivityKind> stage_kinds() {
  const char* choice = std::getenv("ITERA_CUPTI_API_KINDS");
  const std::string api = choice && *choice ? choice : "runtime+driver";
  std::vector<CUpti_ActivityKind> kinds;
  if (api == "runtime" || api == "runtime+driver") kinds.push_back(CUPTI_ACTIVITY_KIND_RUNTIME);
  if (api == "driver" || api == "runtime+driver") kinds.push_back(CUPTI_ACTIVITY_KIND_DRIVER);
  if (kinds.empty()) return {};  // an unknown choice: no stage clock, cupti_stage_support() says why
  kinds.push_back(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  return kinds;
}

// One stage span's external correlation id: the clock generation's tag above, the span below.
constexpr std::uint64_t external_id(std::uint32_t tag, std::uint32_t span) {
  return (std::uint64_t{tag} << 32) | span;
}

std::string cupti_failure(const char* call, CUptiResult r) {
  return std::string(call) + ": " + detail::cupti_error_name(r) + " (" + detail::cupti_error_text(r) + ")";
}

struct region_span {
  std::uint64_t first_start = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t last_end = 0;
  std::size_t records = 0;     // complete records of the region's device and stream
  std::size_t incomplete = 0;  // records without timestamps, or a buffer that did not parse
  std::size_t dropped = 0;     // records CUPTI could not store while the region was open
  bool keep_kernels = false;   // the region's kernel records kept one by one (cupti_timer::keep_kernels)
  std::vector<kernel_interval> kernels;
};

// Device work attributed to one stage span: [first start, last end] in CUPTI ns.
struct work_span {
  std::uint64_t start = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t end = 0;
  std::size_t incomplete = 0;  // records without timestamps
  bool empty() const { return end == 0; }
  void add(const work_span& w) {
    incomplete += w.incomplete;
    if (w.empty()) return;
    start = std::min(start, w.start);
    end = std::max(end, w.end);
  }
};

// What a stage clock's generation collected.
struct stage_collection {
  std::uint32_t tag = 0;
  std::unordered_map<std::uint32_t, std::uint32_t> span_of;  // CUPTI correlation id -> span
  std::vector<work_span> spans;                              // by span
  std::size_t incomplete = 0;  // records of its spans without timestamps, or unreadable buffers
  std::size_t dropped = 0;     // records CUPTI could not store while it was armed
  void add(std::uint32_t span, const work_span& w) {
    if (span >= spans.size()) spans.resize(std::size_t{span} + 1);
    spans[span].add(w);
    incomplete += w.incomplete;
  }
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
    // The stage clock's kinds are optional: without them the region timer still works.
    m_stage_kinds = stage_kinds();
    m_stage_failure.clear();
    if (m_stage_kinds.empty())
      m_stage_failure = "ITERA_CUPTI_API_KINDS is not runtime, driver or runtime+driver";
    for (std::size_t i = 0; i < m_stage_kinds.size(); ++i) {
      const CUptiResult r = cuptiActivityEnable(m_stage_kinds[i]);
      if (r != CUPTI_SUCCESS) {
        for (std::size_t j = 0; j < i; ++j) (void)cuptiActivityDisable(m_stage_kinds[j]);
        m_stage_kinds.clear();
        m_stage_failure = cupti_failure("cuptiActivityEnable", r);
        break;
      }
    }
    ++m_users;
    return {};
  }

  std::string stage_support() {
    std::lock_guard lock(m_users_mutex);
    if (m_users == 0) return "CUPTI is not in use";
    return m_stage_failure;
  }

  void release() noexcept {
    std::lock_guard lock(m_users_mutex);
    if (m_users == 0 || --m_users > 0) return;
    for (const CUpti_ActivityKind kind : collected_kinds) (void)cuptiActivityDisable(kind);
    for (const CUpti_ActivityKind kind : m_stage_kinds) (void)cuptiActivityDisable(kind);
    m_stage_kinds.clear();
    // Hand back the buffers CUPTI still holds; their records belong to no region.
    (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }

  void begin_region(const void* owner, std::uint32_t device_id, std::uint32_t stream_id, bool keep_kernels) {
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
      m_span.keep_kernels = keep_kernels;
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
    return std::move(m_span);
  }

  void abandon(const void* owner) noexcept {
    std::lock_guard region(m_region_mutex);
    if (m_owner != owner) return;
    std::lock_guard records(m_records_mutex);
    m_collecting = false;
    m_owner = nullptr;
  }

  // A stage clock's generation starts collecting: from now on, external-correlation records with
  // its tag and the work records they name are kept for it.
  void arm_stages(std::uint32_t tag) {
    std::lock_guard records(m_records_mutex);
    for (const stage_collection& c : m_stages)
      if (c.tag == tag) return;
    m_stages.emplace_back().tag = tag;
  }

  // Forgets a generation; records with its tag that arrive later are dropped.
  void disarm_stages(std::uint32_t tag) noexcept {
    std::lock_guard records(m_records_mutex);
    for (std::size_t i = 0; i < m_stages.size(); ++i) {
      if (m_stages[i].tag != tag) continue;
      std::swap(m_stages[i], m_stages.back());
      m_stages.pop_back();
      break;
    }
    if (m_stages.empty()) m_unattributed = {};  // releases the memory, not only the elements
  }

  // Everything collected for `tag` so far. The caller has waited for the device, so every record of
  // the generation's work is complete and this flush delivers it.
  stage_collection collect_stages(std::uint32_t tag) {
    std::lock_guard region(m_region_mutex);  // one flush at a time, as the regions do
    ITERA_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    std::lock_guard records(m_records_mutex);
    for (const stage_collection& c : m_stages) {
      if (c.tag != tag) continue;
      stage_collection out;
      out.tag = c.tag;
      out.spans = c.spans;
      out.incomplete = c.incomplete;
      out.dropped = c.dropped;
      return out;
    }
    throw std::logic_error("cupti_stage_clock: collecting a generation that is not armed");
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
    const bool region = m_collecting;
    const bool stages = !m_stages.empty();
    if (!region && !stages) return;
    if (region) m_span.dropped += dropped;
    if (stages)
      for (stage_collection& c : m_stages) c.dropped += dropped;
    if (!buffer || valid_size == 0) return;
    CUpti_Activity* record = nullptr;
    for (;;) {
      const CUptiResult r = cuptiActivityGetNextRecord(buffer, valid_size, &record);
      if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
      if (r != CUPTI_SUCCESS) {
        // An unreadable buffer: neither the region nor the stages can be trusted.
        if (region) ++m_span.incomplete;
        if (stages)
          for (stage_collection& c : m_stages) ++c.incomplete;
        break;
      }
      std::uint64_t start = 0, end = 0;
      std::uint32_t device_id = 0, record_stream = 0, correlation = 0;
      const char* kernel_name = nullptr;  // kernels only
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
          start = k->start, end = k->end, device_id = k->deviceId, record_stream = k->streamId;
          correlation = k->correlationId;
          kernel_name = k->name ? k->name : "(unnamed kernel)";
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
          start = m->start, end = m->end, device_id = m->deviceId, record_stream = m->streamId;
          correlation = m->correlationId;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
          start = m->start, end = m->end, device_id = m->deviceId, record_stream = m->streamId;
          correlation = m->correlationId;
          break;
        }
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
          if (stages) note_external(*reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record));
          continue;
        default:
          continue;
      }
      const bool complete = start != 0 && end != 0 && end >= start;
      if (stages) note_work(correlation, complete ? work_span{start, end, 0} : work_span{.incomplete = 1});
      if (!region || device_id != m_device_id || record_stream != m_stream_id) continue;
      if (!complete) {
        ++m_span.incomplete;
        continue;
      }
      m_span.first_start = std::min(m_span.first_start, start);
      m_span.last_end = std::max(m_span.last_end, end);
      ++m_span.records;
      if (kernel_name && m_span.keep_kernels) {
        try {
          m_span.kernels.push_back(kernel_interval{kernel_name, start, end});
        } catch (...) {
          ++m_span.incomplete;  // out of memory: the kept list would be short, so the region fails
        }
      }
    }
  }

  stage_collection* find_stages(std::uint32_t tag) {
    for (stage_collection& c : m_stages)
      if (c.tag == tag) return &c;
    return nullptr;
  }

  // Under m_records_mutex. The work records of a call and its external-correlation record come in
  // different buffers, in either order: whichever comes second completes the join.
  void note_external(const CUpti_ActivityExternalCorrelation& x) noexcept {
    if (x.externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) return;
    stage_collection* c = find_stages(static_cast<std::uint32_t>(x.externalId >> 32));
    if (!c) return;  // a generation since reset, or another tool's id
    const auto span = static_cast<std::uint32_t>(x.externalId & 0xffffffffu);
    try {
      c->span_of.emplace(x.correlationId, span);
      if (const auto it = m_unattributed.find(x.correlationId); it != m_unattributed.end()) {
        c->add(span, it->second);
        m_unattributed.erase(it);
      }
    } catch (...) {
      ++c->incomplete;  // out of memory: the span's time cannot be trusted
    }
  }

  // Under m_records_mutex. Work of a call that no armed generation has claimed (yet) waits in
  // m_unattributed: its external-correlation record may still come, or it was launched outside
  // every span. Kept until the last generation is disarmed: how CUPTI orders the two kinds of
  // record across buffers is not documented, so nothing here guesses that one can no longer come.
  void note_work(std::uint32_t correlation, const work_span& w) noexcept {
    for (stage_collection& c : m_stages) {
      const auto it = c.span_of.find(correlation);
      if (it == c.span_of.end()) continue;
      try {
        c.add(it->second, w);
      } catch (...) {
        ++c.incomplete;
      }
      return;
    }
    try {
      m_unattributed[correlation].add(w);
    } catch (...) {
      for (stage_collection& c : m_stages) ++c.incomplete;
    }
  }

  std::mutex m_users_mutex;
  int m_users = 0;
  bool m_callbacks_registered = false;
  std::vector<CUpti_ActivityKind> m_stage_kinds;  // enabled for the stage clock
  std::string m_stage_failure;                    // why they are not, when they are not

  std::mutex m_region_mutex;
  const void* m_owner = nullptr;

  std::mutex m_records_mutex;
  bool m_collecting = false;
  std::uint32_t m_device_id = 0, m_stream_id = 0;
  region_span m_span;
  std::vector<stage_collection> m_stages;  // one per armed stage-clock generation
  std::unordered_map<std::uint32_t, work_span> m_unattributed;  // correlation id -> work, unclaimed

  std::mutex m_pool_mutex;  // guards m_pool: activity buffers handed back by CUPTI, for reuse
  std::vector<std::uint8_t*> m_pool;
};

}  // namespace

std::string cupti_acquire() { return cupti_session::instance().acquire(); }
void cupti_release() noexcept { cupti_session::instance().release(); }
std::string cupti_stage_support() { return cupti_session::instance().stage_support(); }

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
  m_kernels.clear();
  cupti_session::instance().begin_region(this, m_device_id, m_stream_id, m_keep_kernels);
  m_open = true;
}

void cupti_timer::stop() {
  // Nothing to enqueue: the region ends with the last record of the work launched before
  // elapsed_ns(). The check keeps the start/stop/elapsed protocol honest.
  if (!m_open) throw std::logic_error("cupti_timer: stop() without start()");
}

void cupti_timer::wait() {
  if (!m_open) throw std::logic_error("cupti_timer: wait() without start()");
  ITERA_CUDA_CHECK(cudaStreamSynchronize(m_stream));
}

double cupti_timer::elapsed_ns() {
  if (!m_open) throw std::logic_error("cupti_timer: elapsed_ns() without start()");
  ITERA_CUDA_CHECK(cudaStreamSynchronize(m_stream));  // R2: the work has finished
  m_open = false;
  region_span span = cupti_session::instance().end_region(this);
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
  m_kernels = std::move(span.kernels);
  return static_cast<double>(span.last_end - span.first_start);
}

// ---------------------------------------------------------------------------------------------
// cupti_stage_clock

namespace {
// Tags of stage-clock generations, process-wide so that no two clocks, nor two generations of one,
// share one: a late record of a forgotten generation then matches nothing. 0 means "not armed".
std::atomic<std::uint32_t> next_stage_tag{1};
}  // namespace

cupti_stage_clock::cupti_stage_clock(int device) : m_device(device) {
  const std::string reason = cupti_stage_support();
  if (!reason.empty()) throw std::runtime_error("cupti_stage_clock: " + reason);
  m_open.reserve(32);
}

cupti_stage_clock::~cupti_stage_clock() { reset(); }

void cupti_stage_clock::arm() {
  std::uint32_t tag = next_stage_tag.fetch_add(1, std::memory_order_relaxed);
  if (tag == 0) tag = next_stage_tag.fetch_add(1, std::memory_order_relaxed);  // after 2^32 generations
  cupti_session::instance().arm_stages(tag);
  m_tag = tag;
}

void cupti_stage_clock::note_failure(const std::string& what) noexcept {
  if (!m_failure.empty()) return;
  try {
    m_failure = what;
  } catch (...) {
  }
}

void cupti_stage_clock::push(std::uint32_t span) noexcept {
  const CUptiResult r =
      cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, external_id(m_tag, span));
  if (r != CUPTI_SUCCESS) note_failure(cupti_failure("cuptiActivityPushExternalCorrelationId", r));
}

void cupti_stage_clock::pop(std::uint32_t span) noexcept {
  std::uint64_t id = 0;
  const CUptiResult r = cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
  if (r != CUPTI_SUCCESS)
    note_failure(cupti_failure("cuptiActivityPopExternalCorrelationId", r) +
                 " (a stage ended on another thread than the one that opened it?)");
  else if (id != external_id(m_tag, span))
    note_failure("cuptiActivityPopExternalCorrelationId returned external id " + std::to_string(id) + ", not " +
                 std::to_string(external_id(m_tag, span)) + ": something else pushed CUSTOM0 ids on this thread");
}

std::uint32_t cupti_stage_clock::begin_span() {
  if (m_tag == 0) arm();  // the first span since reset(): one locked call per generation
  const std::uint32_t span = m_next_span++;
  m_resolved = false;
  m_open.push_back(span);
  push(span);
  return span;
}

void cupti_stage_clock::end_span(std::uint32_t span) noexcept {
  if (!m_open.empty() && m_open.back() == span) {
    pop(span);
    m_open.pop_back();
    return;
  }
  // Not the innermost open span (a scope closed early while one nested in it is still open): pop
  // down to it and push back the ones above it, so that CUPTI's stack again holds exactly the open
  // spans and the nested one keeps its work.
  const auto it = std::find(m_open.begin(), m_open.end(), span);
  if (it == m_open.end()) return;  // ended already, or begun before reset()
  const auto at = static_cast<std::size_t>(it - m_open.begin());
  for (std::size_t i = m_open.size(); i-- > at;) pop(m_open[i]);
  for (std::size_t i = at + 1; i < m_open.size(); ++i) push(m_open[i]);
  m_open.erase(m_open.begin() + static_cast<std::ptrdiff_t>(at));
}

void cupti_stage_clock::resolve() {
  // Stages may launch on any stream of the device: wait for all of it.
  ITERA_CUDA_CHECK(cudaSetDevice(m_device));
  ITERA_CUDA_CHECK(cudaDeviceSynchronize());
  stage_collection c = cupti_session::instance().collect_stages(m_tag);
  if (c.dropped > 0)
    throw std::runtime_error("CUPTI dropped " + std::to_string(c.dropped) +
                             " activity records while stages were timed: their device times are unknown");
  if (c.incomplete > 0)
    throw std::runtime_error("CUPTI delivered " + std::to_string(c.incomplete) +
                             " activity records without timestamps (or an unreadable buffer) for timed stages: "
                             "their device times are unknown");
  m_work.assign(c.spans.size(), {0, 0});
  std::uint64_t first_start = std::numeric_limits<std::uint64_t>::max();
  for (std::size_t i = 0; i < c.spans.size(); ++i) {
    if (c.spans[i].empty()) continue;
    m_work[i] = {c.spans[i].start, c.spans[i].end};
    first_start = std::min(first_start, c.spans[i].start);
  }
  // Fixed once per generation, so that intervals read before and after a later resolve() agree.
  if (!m_has_origin && first_start != std::numeric_limits<std::uint64_t>::max()) {
    m_origin_ns = first_start;
    m_has_origin = true;
  }
  m_resolved = true;
}

std::optional<std::pair<double, double>> cupti_stage_clock::interval_ns(std::uint32_t span) {
  if (!m_failure.empty()) throw std::runtime_error("cupti_stage_clock: " + m_failure);
  if (span >= m_next_span)
    throw std::logic_error("cupti_stage_clock::interval_ns: span " + std::to_string(span) +
                           " was not begun since the last reset (" + std::to_string(m_next_span) + " spans)");
  if (!m_resolved) resolve();
  if (span >= m_work.size() || m_work[span].second == 0) return std::nullopt;
  // Relative to the clock's origin before the conversion: CUPTI's timestamps are ~1e18 ns, where a
  // double resolves only 256 ns.
  const auto relative = [this](std::uint64_t t) {
    return static_cast<double>(static_cast<std::int64_t>(t - m_origin_ns));
  };
  return std::pair{relative(m_work[span].first), relative(m_work[span].second)};
}

void cupti_stage_clock::reset() {
  // Spans still open (finish() with a scope open) would tag later work with a forgotten id.
  for (std::size_t i = m_open.size(); i-- > 0;) pop(m_open[i]);
  m_open.clear();
  if (m_tag != 0) cupti_session::instance().disarm_stages(m_tag);
  m_tag = 0;
  m_next_span = 0;
  m_resolved = false;
  m_work.clear();
  m_has_origin = false;
  m_origin_ns = 0;
  m_failure.clear();
}

}  // namespace itera::cuda
