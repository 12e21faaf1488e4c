#include "itera/core/recorder.hpp"

#include <algorithm>
#include <map>

namespace itera {

stage_recorder::stage_recorder(device_clock* clock, memory_tracker* memory) : m_clock(clock), m_memory(memory) {
  m_spans.reserve(256);
  m_stack.reserve(16);
}

std::uint32_t stage_recorder::intern(std::string_view name) {
  // Few distinct stage names per workload: a linear scan beats hashing here.
  for (std::uint32_t i = 0; i < m_names.size(); ++i)
    if (m_names[i] == name) return i;
  m_names.emplace_back(name);
  return static_cast<std::uint32_t>(m_names.size() - 1);
}

stage_recorder::scope stage_recorder::enter(std::string_view name) {
  span s{};
  s.name_id = intern(name);
  s.parent = m_stack.empty() ? -1 : static_cast<std::int32_t>(m_stack.back());
  s.repetition = m_counting ? m_repetition : -1;
  if (m_memory) {
    // Each stage sees its own high-water mark: start it at what is held now, restore on close.
    s.saved_peak = m_memory->exchange_peak(m_memory->current());
  }
  s.clock_span = m_clock ? m_clock->begin_span() : 0;
  s.host_begin_ns = host_now_ns();
  const auto index = static_cast<std::uint32_t>(m_spans.size());
  m_spans.push_back(s);
  m_stack.push_back(index);
  return scope(this, index);
}

void stage_recorder::close_span(std::uint32_t index) {
  span& s = m_spans[index];
  if (s.closed) return;
  s.host_end_ns = host_now_ns();
  if (m_clock) m_clock->end_span(s.clock_span);
  if (m_memory) {
    s.memory_peak = m_memory->peak();
    s.memory_end = m_memory->current();
    m_memory->exchange_peak(std::max(s.saved_peak, s.memory_peak));
  }
  s.closed = true;
  // Scopes close in reverse order of opening; a scope closed early (close()) leaves the stack
  // consistent only if it is the innermost, which RAII use guarantees.
  if (!m_stack.empty() && m_stack.back() == index) m_stack.pop_back();
}

stage_recorder::scope::scope(scope&& other) noexcept : m_owner(other.m_owner), m_index(other.m_index) {
  other.m_owner = nullptr;
}

stage_recorder::scope::~scope() { close(); }

void stage_recorder::scope::close() {
  if (m_owner) m_owner->close_span(m_index);
  m_owner = nullptr;
}

void stage_recorder::scope::add_bytes_read(double bytes) { if (m_owner) m_owner->m_spans[m_index].bytes_read += bytes; }
void stage_recorder::scope::add_bytes_written(double bytes) { if (m_owner) m_owner->m_spans[m_index].bytes_written += bytes; }
void stage_recorder::scope::add_flops(double flops) { if (m_owner) m_owner->m_spans[m_index].flops += flops; }

std::vector<stage_record> stage_recorder::finish() {
  // Cleared however finish() ends: a clock that throws must not leave its spans to the next case.
  struct clear_on_exit {
    stage_recorder& r;
    ~clear_on_exit() {
      r.m_spans.clear();
      r.m_stack.clear();
      r.m_repetition = -1;
      r.m_counting = false;
      if (r.m_clock) r.m_clock->reset();
    }
  } clear{*this};

  // Device interval of each span's subtree: its own work united with its descendants'. Children
  // come after their parent in m_spans, so one backward pass folds every subtree into its root.
  // A span still open contributes no device time of its own.
  struct interval {
    double start = 0, end = 0;
    bool any = false;
    void add(double s, double e) {
      start = any ? std::min(start, s) : s;
      end = any ? std::max(end, e) : e;
      any = true;
    }
  };
  std::vector<interval> subtree(m_clock ? m_spans.size() : 0);
  if (m_clock) {
    for (std::size_t i = m_spans.size(); i-- > 0;) {
      const span& s = m_spans[i];
      if (s.closed)
        if (const auto own = m_clock->interval_ns(s.clock_span)) subtree[i].add(own->first, own->second);
      if (s.parent >= 0 && subtree[i].any)
        subtree[static_cast<std::size_t>(s.parent)].add(subtree[i].start, subtree[i].end);
    }
  }

  // Every stage gets one slot a repetition marked, zero where it did not run in that one: its
  // device time, or its host time where it did no device work at all (as its totals are read).
  const auto repetitions = static_cast<std::size_t>(m_repetition + 1);
  std::vector<std::vector<double>> host_repetitions;  // by stage, the host side of the same
  std::vector<stage_record> out;
  std::map<std::string, std::size_t> by_path;
  std::vector<std::string> paths(m_spans.size());
  for (std::size_t i = 0; i < m_spans.size(); ++i) {
    const span& s = m_spans[i];
    const std::string& name = m_names[s.name_id];
    paths[i] = s.parent < 0 ? name : paths[static_cast<std::size_t>(s.parent)] + "/" + name;
    int depth = 0;
    for (auto p = s.parent; p >= 0; p = m_spans[static_cast<std::size_t>(p)].parent) ++depth;

    auto [it, inserted] = by_path.try_emplace(paths[i], out.size());
    if (inserted) {
      stage_record r;
      r.path = paths[i];
      r.depth = depth;
      r.device_ns = m_clock ? 0.0 : -1.0;
      r.device_time_method = m_clock ? std::string(m_clock->method()) : "";
      r.repetition_ns.assign(repetitions, 0.0);
      out.push_back(std::move(r));
      host_repetitions.emplace_back(repetitions, 0.0);
    }
    stage_record& r = out[it->second];
    const std::int64_t host_end = s.closed ? s.host_end_ns : host_now_ns();
    const auto host = static_cast<double>(host_end - s.host_begin_ns);
    const double device = m_clock && s.closed && subtree[i].any ? subtree[i].end - subtree[i].start : 0.0;
    r.calls += 1;
    r.host_ns += host;
    r.device_ns += device;  // stays -1 without a clock: device is 0 then
    if (s.repetition >= 0) {
      r.repetition_ns[static_cast<std::size_t>(s.repetition)] += device;
      host_repetitions[it->second][static_cast<std::size_t>(s.repetition)] += host;
    }
    r.bytes_read += s.bytes_read;
    r.bytes_written += s.bytes_written;
    r.flops += s.flops;
    r.memory_peak_bytes = std::max(r.memory_peak_bytes, s.memory_peak);
    r.memory_end_bytes = s.memory_end;
  }
  for (std::size_t i = 0; i < out.size(); ++i)
    if (!(out[i].device_ns > 0)) out[i].repetition_ns = std::move(host_repetitions[i]);
  return out;
}

}  // namespace itera
