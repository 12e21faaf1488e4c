// A recording lane: one thread's stages, iterations and counts for the open case.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "itera/core/timer.hpp"
#include "src/user/state.hpp"

namespace itera::user::detail {
namespace {

// Spans a lane keeps before folding them into totals (at a moment no scope of the lane is open):
// bounds memory and the event pool in a long run. Folding waits for the device work of the spans
// it reads (their end events), which has usually finished by then.
constexpr std::size_t fold_spans = 8192;

void merge(std::vector<stage_record>& into, stage_record r) {
  const auto it = std::find_if(into.begin(), into.end(), [&](const stage_record& s) { return s.path == r.path; });
  if (it == into.end()) {
    into.push_back(std::move(r));
    return;
  }
  it->calls += r.calls;
  it->host_ns += r.host_ns;
  if (r.device_ns >= 0) {
    it->device_ns = it->device_ns >= 0 ? it->device_ns + r.device_ns : r.device_ns;
    it->device_time_method = r.device_time_method;
  }
  it->bytes_read += r.bytes_read;
  it->bytes_written += r.bytes_written;
  it->flops += r.flops;
  it->memory_peak_bytes = std::max(it->memory_peak_bytes, r.memory_peak_bytes);
  it->memory_end_bytes = r.memory_end_bytes;
}

}  // namespace

lane::lane(session_state& owner, const device_choice& device)
    : m_owner(owner), m_device(device), m_clock(make_stream_clock(device)), m_recorder(m_clock.get(), &m_memory) {}

lane::~lane() {
  // Scopes the user never exited still hold recorder scopes: close them before the recorder goes.
  while (!m_stack.empty()) {
    if (m_stack.back().rec) m_stack.back().rec->close();
    m_stack.pop_back();
  }
}

std::int32_t lane::path_of(std::int32_t parent, const std::string& name) {
  for (std::size_t i = 0; i < m_paths.size(); ++i)
    if (m_paths[i].parent == parent && m_paths[i].name == name) return static_cast<std::int32_t>(i);
  path_node n;
  n.parent = parent;
  n.name = name;
  n.path = parent < 0 ? name : m_paths[static_cast<std::size_t>(parent)].path + "/" + name;
  m_paths.push_back(std::move(n));
  return static_cast<std::int32_t>(m_paths.size() - 1);
}

std::int32_t lane::innermost_stage() const {
  for (auto it = m_stack.rbegin(); it != m_stack.rend(); ++it)
    if (!it->iteration) return it->path;
  return -1;
}

std::string lane::label(const entry& e) const {
  if (e.iteration) return "an iteration";
  return fmt::format("stage '{}'", m_paths[static_cast<std::size_t>(e.path)].path);
}

void lane::enter(scope& sc) {
  if (sc.m_serial != 0)
    throw stage_error(fmt::format("{} is already open: exit it first, or use another scope object to nest a stage "
                                  "of the same name",
                                  sc.m_iteration ? std::string("the iteration") : fmt::format("stage '{}'", sc.m_name)));
  void* stream = sc.m_stream;
  if (stream != nullptr && stream != m_checked_stream) {
    check_stream(stream, m_device);
    // A default stream's device is the thread's current one, which may change: checked every time.
    if (!is_default_stream(stream)) m_checked_stream = stream;
  }
  if (stream != nullptr && !m_clock) m_owner.note_stream_ignored();
  void* timed_stream = m_clock ? stream : nullptr;
  if (const auto me = std::this_thread::get_id(); m_threads.empty() || m_threads.back() != me) {
    if (std::find(m_threads.begin(), m_threads.end(), me) == m_threads.end()) m_threads.push_back(me);
  }

  entry e;
  e.serial = m_next_serial;
  if (sc.m_iteration) {
    if (sc.m_warmup_mode == -1 && m_owner.runner_case())
      throw stage_error("the runner makes the iterations of its cases (one per call or request): open stages in the "
                        "callback, not iterations");
    for (const auto& x : m_stack)
      if (x.iteration)
        throw stage_error("an iteration is already open on this thread: exit it before entering the next (iterations "
                          "do not nest)");
    const bool device = timed_stream != nullptr;
    m_owner.note_iteration_kind(device);
    e.iteration = true;
    e.warmup = sc.m_warmup_mode == 1 ||
               (sc.m_warmup_mode == -1 && m_owner.next_iteration() < m_owner.warmup_iterations());
    e.times.has_device = device;
    if (device) e.times.clock_span = m_clock->begin_direct(timed_stream);
    e.times.host_begin_ns = host_now_ns();
    if (e.warmup) ++m_in_warmup;
  } else {
    e.path = path_of(innermost_stage(), sc.m_name);
    if (m_clock) m_clock->prepare(timed_stream);
    e.rec.emplace(m_recorder.enter(sc.m_name));
    if (timed_stream != nullptr)
      for (auto p = e.path; p >= 0 && !m_paths[static_cast<std::size_t>(p)].device;
           p = m_paths[static_cast<std::size_t>(p)].parent)
        m_paths[static_cast<std::size_t>(p)].device = true;
  }
  ++m_spans;
  m_stack.push_back(std::move(e));
  ++m_next_serial;
  sc.m_lane = this;
  sc.m_serial = m_stack.back().serial;
  sc.m_generation = m_generation;
  sc.m_entered_once = true;
}

void lane::close_entry(entry& e, sample* timed, bool wait, bool keep) {
  if (!e.iteration) {
    e.rec->close();
    e.rec.reset();
    return;
  }
  sample s = e.times;
  if (s.has_device && wait) {
    m_clock->end_span(s.clock_span);
    m_clock->wait(s.clock_span);
    s.host_end_ns = host_now_ns();  // after the device work: R2
  } else {
    s.host_end_ns = host_now_ns();
    if (s.has_device) m_clock->end_span(s.clock_span);
  }
  if (timed && s.has_device) {
    const auto interval = m_clock->interval_ns(s.clock_span);
    s.device_ns = interval ? interval->second - interval->first : 0.0;
    s.resolved = true;
  }
  if (e.warmup) {
    --m_in_warmup;
    if (keep) {
      ++m_warmup_count;
      m_warmup_ns += static_cast<double>(s.host_end_ns - s.host_begin_ns);
    }
  } else if (keep) {
    m_pending.push_back(s);
  }
  if (timed) *timed = s;
}

void lane::exit(scope& sc, sample* timed, bool wait) {
  const std::string what = sc.m_iteration ? std::string("the iteration") : fmt::format("stage '{}'", sc.m_name);
  if (sc.m_lane != this)
    throw stage_error(fmt::format("{} was entered on another thread: exit it on the thread that entered it", what));
  if (sc.m_generation != m_generation) {
    sc.m_serial = 0;
    throw stage_error(fmt::format("{} was still open when its case ended, and was recorded then as never exited; "
                                  "exiting it now records nothing",
                                  what));
  }
  if (m_stack.empty() || m_stack.back().serial != sc.m_serial) {
    const bool inside = std::any_of(m_stack.begin(), m_stack.end(), [&](const entry& e) { return e.serial == sc.m_serial; });
    if (inside)
      throw stage_error(fmt::format("{} exited while {} inside it is still open: exit scopes in the reverse order of "
                                    "entering them",
                                    what, label(m_stack.back())));
    sc.m_serial = 0;
    throw stage_error(fmt::format("{} is no longer open: it was closed when a scope around it was exited", what));
  }
  entry& e = m_stack.back();
  const bool warmup_iteration = e.iteration && e.warmup;
  // Whatever the clock throws (a device error while waiting), the scope is closed: pop first.
  entry closing = std::move(e);
  m_stack.pop_back();
  sc.m_serial = 0;
  close_entry(closing, timed, wait);
  if (m_stack.empty()) {
    if (warmup_iteration)
      discard();
    else if (m_spans >= fold_spans || m_pending.size() >= fold_spans)
      fold(true);
  }
}

void lane::exit_quietly(scope& sc, bool keep) noexcept {
  try {
    if (sc.m_generation != m_generation) {
      sc.m_serial = 0;
      return;
    }
    const auto at = std::find_if(m_stack.begin(), m_stack.end(), [&](const entry& e) { return e.serial == sc.m_serial; });
    sc.m_serial = 0;
    if (at == m_stack.end()) return;
    const auto index = static_cast<std::size_t>(at - m_stack.begin());
    const std::string outer = label(m_stack[index]);
    while (m_stack.size() > index + 1) {
      m_problems.push_back(fmt::format("{} was still open when {} around it was exited (scopes exited out of order); "
                                       "it was closed then",
                                       label(m_stack.back()), outer));
      entry closing = std::move(m_stack.back());
      m_stack.pop_back();
      close_entry(closing, nullptr, false);
    }
    entry closing = std::move(m_stack.back());
    m_stack.pop_back();
    const bool warmup_iteration = closing.iteration && closing.warmup;
    close_entry(closing, nullptr, false, keep);
    if (m_stack.empty() && warmup_iteration) discard();
  } catch (const std::exception& e) {
    try {
      m_problems.push_back(fmt::format("a scope could not be exited by its destructor: {}", e.what()));
    } catch (...) {
    }
  } catch (...) {
  }
}

void lane::count(counter c, double amount) {
  if (m_in_warmup > 0) return;  // warm-up counts are dropped with its stages
  m_counts[static_cast<std::size_t>(c)] += amount;
  if (c != counter::bytes_read && c != counter::bytes_written && c != counter::flops) return;
  for (auto it = m_stack.rbegin(); it != m_stack.rend(); ++it) {
    if (it->iteration) continue;
    if (c == counter::bytes_read) it->rec->add_bytes_read(amount);
    if (c == counter::bytes_written) it->rec->add_bytes_written(amount);
    if (c == counter::flops) it->rec->add_flops(amount);
    break;
  }
}

void lane::set_user_bytes(std::uint64_t bytes) {
  const std::uint64_t now = m_memory.current();
  if (bytes > now)
    m_memory.on_alloc(bytes - now);
  else
    m_memory.on_free(now - bytes);
}

void lane::fold(bool keep) {
  m_spans = 0;
  // Iterations' device times first: finish() resets the clock they were read from.
  if (m_clock) {
    for (auto& s : m_pending) {
      if (!s.has_device || s.resolved) continue;
      try {
        const auto interval = m_clock->interval_ns(s.clock_span);
        s.device_ns = interval ? interval->second - interval->first : 0.0;
        s.resolved = true;
      } catch (const std::exception& e) {
        if (!m_device_time_failed) m_problems.push_back(fmt::format("iteration device times could not be read: {}", e.what()));
        m_device_time_failed = true;
        break;
      }
    }
  }
  std::vector<stage_record> records;
  try {
    records = m_recorder.finish();
  } catch (const std::exception& e) {
    m_problems.push_back(fmt::format("stage device times could not be read: {}", e.what()));
    m_device_time_failed = true;
  }
  m_samples.insert(m_samples.end(), m_pending.begin(), m_pending.end());
  m_pending.clear();
  if (!keep) return;
  for (auto& r : records) {
    const auto node = std::find_if(m_paths.begin(), m_paths.end(), [&](const path_node& p) { return p.path == r.path; });
    if (node == m_paths.end() || !node->device) {
      // No span on this path, nor under it, had a stream: host time only.
      r.device_ns = -1;
      r.device_time_method.clear();
    }
    merge(m_stages, std::move(r));
  }
}

void lane::discard() {
  if (!m_stack.empty()) return;
  fold(false);
  (void)m_memory.exchange_peak(m_memory.current());
}

lane::harvest lane::take() {
  while (!m_stack.empty()) {
    m_problems.push_back(fmt::format("{} was never exited", label(m_stack.back())));
    entry closing = std::move(m_stack.back());
    m_stack.pop_back();
    try {
      close_entry(closing, nullptr, false);
    } catch (const std::exception& e) {
      m_problems.push_back(fmt::format("closing it failed: {}", e.what()));
    }
  }
  fold(true);
  harvest h;
  h.stages = std::move(m_stages);
  h.samples = std::move(m_samples);
  h.counts = m_counts;
  h.warmup_count = m_warmup_count;
  h.warmup_ns = m_warmup_ns;
  h.problems = std::move(m_problems);
  h.threads = std::move(m_threads);
  m_threads.clear();

  m_stages.clear();
  m_samples.clear();
  m_counts = {};
  m_warmup_count = 0;
  m_warmup_ns = 0;
  m_in_warmup = 0;
  m_problems.clear();
  m_device_time_failed = false;
  for (auto& p : m_paths) p.device = false;
  (void)m_memory.exchange_peak(m_memory.current());
  ++m_generation;
  return h;
}

}  // namespace itera::user::detail
