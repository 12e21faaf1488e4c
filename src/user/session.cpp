// The user API's session: lanes per thread, cases, and the case record each case becomes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "itera/core/stats.hpp"
#include "itera/core/timer.hpp"
#include "itera/suite.hpp"
#include "src/user/state.hpp"

namespace itera::user {

const char* to_string(counter c) {
  switch (c) {
    case counter::bytes_read: return "bytes_read";
    case counter::bytes_written: return "bytes_written";
    case counter::flops: return "flops";
    case counter::items: return "items";
    case counter::tokens: return "tokens";
    case counter::output_tokens: return "output_tokens";
    case counter::images: return "images";
    case counter::steps: return "steps";
  }
  return "?";
}

namespace detail {
namespace {

std::atomic<std::uint64_t> g_next_session_id{1};

// The lanes a thread holds, given back when the thread exits so that a later thread can take them
// over (a runner's worker threads come and go): weak, as a session may end first.
struct thread_lanes {
  std::vector<std::pair<std::weak_ptr<session_state>, lane*>> held;
  ~thread_lanes() {
    for (auto& [owner, l] : held)
      if (auto s = owner.lock()) s->release_lane(l);
  }
};
thread_local thread_lanes t_lanes;

const char* counter_unit(counter c) {
  switch (c) {
    case counter::bytes_read:
    case counter::bytes_written: return "B";
    case counter::flops: return "FLOP";
    case counter::items: return "items";
    case counter::tokens:
    case counter::output_tokens: return "tokens";
    case counter::images: return "images";
    case counter::steps: return "steps";
  }
  return "";
}

void check_label(std::string_view what, std::string_view label) {
  if (label.empty()) throw usage_error(fmt::format("{} is empty: give it a name", what));
  if (label.find('/') != std::string_view::npos)
    throw usage_error(fmt::format("{} '{}' contains '/', which separates nested names in the results: use another "
                                  "character{}",
                                  what, label, what == "stage name" ? ", or nest the stages" : ""));
  for (const char ch : label)
    if (static_cast<unsigned char>(ch) < 0x20)
      throw usage_error(fmt::format("{} contains a control character (a line break?): give a plain label", what));
}

}  // namespace

thread_local session_state::lane_cache session_state::t_cache;

std::string axes_text(const axis_list& axes) {
  if (axes.empty()) return "(no axes)";
  std::string s;
  for (const auto& [k, v] : axes) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

session_state::session_state(session_options options)
    : m_options(std::move(options)), m_id(g_next_session_id.fetch_add(1)) {
  check_label("session name", m_options.name);
  for (const auto& [k, v] : m_options.fields)
    if (k.empty()) throw usage_error("session_options::fields has an empty key: name every recipe field");
  m_device = choose_device(m_options.device, m_options.device_clock);
  m_backend = m_device.cuda ? "cuda" : "cpu";
  // R18: the context's command is the label the user gave, never the process's command line.
  m_context = make_context(*describe_device(m_device), m_options.label);
  if (!m_options.results_path.empty()) {
    m_out = std::make_unique<result_stream>(m_options.results_path);  // usage_error: exists, unwritable
    try {
      m_out->write(m_context);
    } catch (const usage_error&) {
      throw;
    } catch (const std::runtime_error& e) {
      throw io_error(e.what());
    }
  }
}

session_state::~session_state() = default;

void session_state::check_usable() const {
  if (m_closed.load(std::memory_order_acquire))
    throw usage_error(fmt::format("session '{}' is closed: open a new session to record more", m_options.name));
}

lane& session_state::find_lane() {
  const std::lock_guard lock(m_mutex);
  const auto me = std::this_thread::get_id();
  lane* found = nullptr;
  for (auto& l : m_lanes)
    if (!l->released && l->owner == me) found = l.get();
  if (!found)
    for (auto& l : m_lanes)
      if (l->released && l->open_depth() == 0) {
        found = l.get();
        found->released = false;
        found->owner = me;
        break;
      }
  if (!found) {
    m_lanes.push_back(std::make_unique<lane>(*this, m_device));
    found = m_lanes.back().get();
    found->owner = me;
  }
  auto& held = t_lanes.held;
  held.erase(std::remove_if(held.begin(), held.end(), [](const auto& h) { return h.first.expired(); }), held.end());
  if (std::none_of(held.begin(), held.end(), [&](const auto& h) { return h.second == found; }))
    held.emplace_back(weak_from_this(), found);
  t_cache = {m_id, found};
  return *found;
}

void session_state::release_lane(lane* l) {
  const std::lock_guard lock(m_mutex);
  for (auto& x : m_lanes)
    if (x.get() == l) x->released = true;
}

void session_state::open_implicit_case() {
  const std::lock_guard lock(m_mutex);
  if (m_case_open.load(std::memory_order_relaxed)) return;
  check_usable();
  begin_case_locked({}, 0, false);
}

void session_state::begin_case(axis_list axes, std::size_t warmup, bool runner) {
  const std::lock_guard lock(m_mutex);
  check_usable();
  if (m_case_open.load(std::memory_order_relaxed))
    throw usage_error(fmt::format("a case is already open ({}): end it (end_case) before beginning another",
                                  axes_text(m_case.axes)));
  begin_case_locked(std::move(axes), warmup, runner);
}

void session_state::begin_case_locked(axis_list axes, std::size_t warmup, bool runner) {
  for (std::size_t i = 0; i < axes.size(); ++i) {
    check_label("axis name", axes[i].first);
    for (std::size_t j = 0; j < i; ++j)
      if (axes[j].first == axes[i].first)
        throw usage_error(fmt::format("axis '{}' is given twice: each axis of a case once", axes[i].first));
  }
  case_record probe;
  probe.axes = axes;
  if (m_keys.count(probe.axes_key()))
    throw usage_error(fmt::format("a case with {} was already recorded by this session: give each case axes that "
                                  "tell it apart (begin_case)",
                                  axes.empty() ? std::string("no axes") : "axes " + axes_text(axes)));
  m_case = open_case{};
  m_case.axes = std::move(axes);
  m_case.warmup = warmup;
  m_case.runner = runner;
  m_case.begin_ns = host_now_ns();
  m_iterations.store(0, std::memory_order_relaxed);
  m_iteration_kind.store(0, std::memory_order_relaxed);
  m_streams_ignored.store(false, std::memory_order_relaxed);
  m_case_open.store(true, std::memory_order_release);
}

void session_state::set_case_field(const std::string& key, const std::string& value) {
  if (key.empty()) throw usage_error("a recipe field needs a name (the key is empty)");
  ensure_case();
  const std::lock_guard lock(m_mutex);
  m_case.fields[key] = value;
}

void session_state::set_field(const std::string& key, const std::string& value) {
  if (key.empty()) throw usage_error("a recipe field needs a name (the key is empty)");
  const std::lock_guard lock(m_mutex);
  check_usable();
  m_options.fields[key] = value;
}

void session_state::note_iteration_kind(bool device) {
  const int want = device ? 2 : 1;
  int seen = 0;
  if (!m_iteration_kind.compare_exchange_strong(seen, want) && seen != want)
    throw stage_error(fmt::format("iterations of one case must all be given a stream or none: this one {}, an earlier "
                                  "one {}",
                                  device ? "has a stream" : "has none", device ? "had none" : "had one"));
}

void session_state::add_problem(std::string what) {
  const std::lock_guard lock(m_mutex);
  m_problems.push_back(std::move(what));
}

void session_state::mark_memory(std::string_view label, std::int64_t user_bytes) {
  check_label("memory mark label", label);
  if (user_bytes < -1)
    throw usage_error(fmt::format("memory mark '{}': user bytes {} is negative (give -1 for none)", label, user_bytes));
  ensure_case();
  lane& mine = current_lane();
  if (user_bytes >= 0) mine.set_user_bytes(static_cast<std::uint64_t>(user_bytes));
  const std::lock_guard lock(m_mutex);
  mark_locked(label, user_bytes);
}

void session_state::mark_locked(std::string_view label, std::int64_t user_bytes) {
  std::string why;
  const auto device = device_memory_in_use(m_device, &why);
  if (!device) m_case.device_memory_why = why;
  const auto rss = host_rss_bytes();
  auto it = std::find_if(m_case.marks.begin(), m_case.marks.end(), [&](const mark& m) { return m.label == label; });
  if (it == m_case.marks.end()) {
    m_case.marks.push_back({std::string(label), {}, {}, {}});
    it = m_case.marks.end() - 1;
  }
  const auto keep_max = [](std::optional<std::uint64_t>& into, std::optional<std::uint64_t> v) {
    if (v) into = into ? std::max(*into, *v) : *v;
  };
  keep_max(it->device_in_use, device);
  keep_max(it->host_rss, rss);
  if (user_bytes >= 0) keep_max(it->user_bytes, static_cast<std::uint64_t>(user_bytes));
}

void session_state::write(const case_record& r) {
  if (!m_out) return;
  try {
    m_out->write(r);
  } catch (const std::runtime_error& e) {
    throw io_error(e.what());
  }
}

case_record session_state::fail_case(std::string reason) {
  if (reason.empty())
    throw usage_error(fmt::format("session '{}': fail_case needs a reason (the case's message): say why it failed, "
                                  "e.g. the exception's type and message",
                                  m_options.name));
  if (!case_open())
    throw usage_error(fmt::format("session '{}': no case is open to fail (fail_case ends the open case as failed)",
                                  m_options.name));
  return end_case(nullptr, &reason);
}

case_record session_state::end_case(const case_finish* finish, const std::string* failure) {
  const std::lock_guard lock(m_mutex);
  if (!m_case_open.load(std::memory_order_relaxed))
    throw usage_error(fmt::format("session '{}': no case is open to end", m_options.name));
  const std::int64_t end_ns = host_now_ns();
  mark_locked("case_end", -1);

  case_record r;
  r.workload = m_options.name;
  r.workload_version = m_options.version;
  r.backend = m_backend;
  r.role = "case";
  r.axes = m_case.axes;
  r.fields = m_options.fields;
  for (const auto& [k, v] : m_case.fields) r.fields[k] = v;
  r.details["recorded_by"] = "itera user API";
  if (!m_device.cuda) r.details["device_time"] = "host clock only: " + m_device.why_host;
  if (!m_device.why_events.empty()) r.details["device_clock"] = "cuda_events: " + m_device.why_events;
  if (m_streams_ignored.load(std::memory_order_relaxed))
    r.details["streams"] = "streams were given, but itera was built without CUDA: host time only";

  // Every lane's stages, samples and counts.
  std::vector<std::string> problems;
  std::vector<sample> samples;
  std::array<double, counter_count> counts{};
  std::size_t warmup_count = 0;
  std::vector<std::thread::id> threads;
  double warmup_ns = 0;
  for (auto& l : m_lanes) {
    auto h = l->take();
    for (const auto& id : h.threads)
      if (std::find(threads.begin(), threads.end(), id) == threads.end()) threads.push_back(id);
    for (auto& s : h.stages) {
      const auto it = std::find_if(r.stages.begin(), r.stages.end(), [&](const stage_record& x) { return x.path == s.path; });
      if (it == r.stages.end()) {
        r.stages.push_back(std::move(s));
        continue;
      }
      it->calls += s.calls;
      it->host_ns += s.host_ns;
      if (s.device_ns >= 0) {
        it->device_ns = it->device_ns >= 0 ? it->device_ns + s.device_ns : s.device_ns;
        it->device_time_method = s.device_time_method;
      }
      it->bytes_read += s.bytes_read;
      it->bytes_written += s.bytes_written;
      it->flops += s.flops;
      it->memory_peak_bytes = std::max(it->memory_peak_bytes, s.memory_peak_bytes);
      it->memory_end_bytes = std::max(it->memory_end_bytes, s.memory_end_bytes);
    }
    samples.insert(samples.end(), h.samples.begin(), h.samples.end());
    for (std::size_t i = 0; i < counter_count; ++i) counts[i] += h.counts[i];
    warmup_count += h.warmup_count;
    warmup_ns += h.warmup_ns;
    for (auto& p : h.problems) problems.push_back(std::move(p));
  }
  for (auto& p : m_problems) problems.push_back(std::move(p));
  m_problems.clear();
  if (threads.size() > 1) r.details["threads"] = std::to_string(threads.size());  // stages summed over them

  // Samples: the runner's own (server, single stream), or one per measured iteration.
  if (finish && finish->own_samples) {
    r.host_ns = finish->samples_ns;
    r.device_ns = finish->samples_ns;
    r.device_time_method = finish->method;
    r.stop_reason = finish->stop_reason;
  } else {
    std::sort(samples.begin(), samples.end(),
              [](const sample& a, const sample& b) { return a.host_begin_ns < b.host_begin_ns; });
    bool unresolved = false;
    for (const auto& s : samples) {
      const double host = static_cast<double>(s.host_end_ns - s.host_begin_ns);
      r.host_ns.push_back(host);
      r.device_ns.push_back(s.has_device ? s.device_ns : host);
      unresolved = unresolved || (s.has_device && !s.resolved);
    }
    if (unresolved) r.device_ns.clear();  // the device times are unknown (problems say why)
    const int kind = m_iteration_kind.load(std::memory_order_relaxed);
    if (kind == 2)
      r.device_time_method = m_device.clock;
    else if (kind == 1)
      r.device_time_method = fmt::format("host_clock ({})", m_device.cuda ? "no stream given" : m_device.why_host);
    if (finish)
      r.stop_reason = finish->stop_reason;
    else
      r.stop_reason = samples.empty() ? "" : "user_loop";
  }
  r.warmup_count = finish && finish->has_warmup ? finish->warmup_count : warmup_count;
  r.warmup_ns = finish && finish->has_warmup ? finish->warmup_ns : warmup_ns;

  if (finish && finish->failed) {
    r.status = case_status::failed;
    r.message = finish->message;
  }
  if (failure) {
    r.status = case_status::failed;
    r.message = *failure;
  }
  if (!problems.empty()) {
    std::string text;
    for (const auto& p : problems) text += (text.empty() ? "" : "; ") + p;
    r.status = case_status::failed;
    r.message = r.message.empty() ? text : r.message + "; and " + text;
  }

  // Figures. A failed case keeps what it measured (samples, counts, memory) but no derived numbers.
  const std::size_t n = r.host_ns.size();
  if (r.status == case_status::ok) {
    if (finish) r.metrics = finish->metrics;
    if (n > 0) {
      r.device_stats = summarize(r.device_ns);
      r.host_stats = summarize(r.host_ns);
      r.flops = counts[static_cast<std::size_t>(counter::flops)] / static_cast<double>(n);
      r.bytes_read = counts[static_cast<std::size_t>(counter::bytes_read)] / static_cast<double>(n);
      r.bytes_written = counts[static_cast<std::size_t>(counter::bytes_written)] / static_cast<double>(n);
    }
    // Units per second: over the run's window (server), else per repetition over the median
    // repetition (the built-in runner's throughput), else over the case's wall time.
    const double median_s = r.device_stats ? r.device_stats->median * 1e-9 : 0.0;
    const double case_s = static_cast<double>(end_ns - m_case.begin_ns) * 1e-9;
    const auto rate = [&](double total) -> std::optional<double> {
      if (finish && finish->window_s > 0) return total / finish->window_s;
      if (n > 0) return median_s > 0 ? std::optional<double>(total / static_cast<double>(n) / median_s) : std::nullopt;
      return case_s > 0 ? std::optional<double>(total / case_s) : std::nullopt;
    };
    const double flops = counts[static_cast<std::size_t>(counter::flops)];
    const double bytes = counts[static_cast<std::size_t>(counter::bytes_read)] +
                         counts[static_cast<std::size_t>(counter::bytes_written)];
    if (flops > 0)
      if (const auto v = rate(flops)) r.metrics.push_back({"throughput/flops", *v, "FLOP/s"});
    if (bytes > 0)
      if (const auto v = rate(bytes)) r.metrics.push_back({"throughput/bytes", *v, "B/s"});
    for (counter c : {counter::items, counter::tokens, counter::output_tokens, counter::images, counter::steps}) {
      const double total = counts[static_cast<std::size_t>(c)];
      if (total > 0)
        if (const auto v = rate(total))
          r.metrics.push_back({fmt::format("throughput/{}_per_s", to_string(c)), *v, std::string(counter_unit(c)) + "/s"});
    }
  }
  for (std::size_t i = 0; i < counter_count; ++i)
    if (counts[i] > 0)
      r.metrics.push_back({fmt::format("count/{}", to_string(static_cast<counter>(i))), counts[i],
                           counter_unit(static_cast<counter>(i))});

  // Memory: the largest of each figure over every mark, then per label the user gave.
  std::optional<std::uint64_t> device, rss, user;
  const auto keep_max = [](std::optional<std::uint64_t>& into, std::optional<std::uint64_t> v) {
    if (v) into = into ? std::max(*into, *v) : *v;
  };
  for (const auto& m : m_case.marks) {
    keep_max(device, m.device_in_use);
    keep_max(rss, m.host_rss);
    keep_max(user, m.user_bytes);
  }
  if (device) r.metrics.push_back({"memory/device_in_use", static_cast<double>(*device), "B"});
  if (user) r.metrics.push_back({"memory/measured_peak", static_cast<double>(*user), "B"});
  if (rss) r.metrics.push_back({"memory/host_rss", static_cast<double>(*rss), "B"});
  for (const auto& m : m_case.marks) {
    if (m.label == "case_end") continue;
    if (m.device_in_use)
      r.metrics.push_back({fmt::format("memory/mark/{}/device_in_use", m.label), static_cast<double>(*m.device_in_use), "B"});
    if (m.user_bytes)
      r.metrics.push_back({fmt::format("memory/mark/{}/allocator", m.label), static_cast<double>(*m.user_bytes), "B"});
    if (m.host_rss)
      r.metrics.push_back({fmt::format("memory/mark/{}/host_rss", m.label), static_cast<double>(*m.host_rss), "B"});
  }
  if (!device && !m_case.device_memory_why.empty()) r.details["memory.device_in_use"] = m_case.device_memory_why;

  m_case_open.store(false, std::memory_order_release);
  m_keys.insert(r.axes_key());
  m_cases.push_back(r);
  write(r);
  if (!problems.empty() && !finish && !failure)
    throw stage_error(fmt::format("case {} of '{}': {} (the case was written as failed, with what it measured)",
                                  axes_text(r.axes), r.workload, r.message));
  return r;
}

void session_state::close() {
  if (m_closed.load(std::memory_order_acquire)) return;
  std::exception_ptr failure;
  if (m_case_open.load(std::memory_order_acquire)) {
    try {
      (void)end_case();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  const std::lock_guard lock(m_mutex);
  m_closed.store(true, std::memory_order_release);
  m_out.reset();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// scope

scope::scope(scope&& other) noexcept
    : m_state(std::move(other.m_state)),
      m_name(std::move(other.m_name)),
      m_stream(other.m_stream),
      m_iteration(other.m_iteration),
      m_entered_once(other.m_entered_once),
      m_lane(other.m_lane),
      m_serial(other.m_serial),
      m_generation(other.m_generation),
      m_warmup_mode(other.m_warmup_mode) {
  other.m_serial = 0;
  other.m_lane = nullptr;
}

scope& scope::operator=(scope&& other) noexcept {
  if (this == &other) return *this;
  exit_quietly();
  m_state = std::move(other.m_state);
  m_name = std::move(other.m_name);
  m_stream = other.m_stream;
  m_iteration = other.m_iteration;
  m_entered_once = other.m_entered_once;
  m_lane = other.m_lane;
  m_serial = other.m_serial;
  m_generation = other.m_generation;
  m_warmup_mode = other.m_warmup_mode;
  other.m_serial = 0;
  other.m_lane = nullptr;
  return *this;
}

scope::~scope() { exit_quietly(); }

scope& scope::enter() {
  if (!m_state) throw stage_error("this scope belongs to no session (default-constructed or moved from)");
  m_state->check_usable();
  m_state->ensure_case();
  m_state->current_lane().enter(*this);
  return *this;
}

void scope::exit() {
  const std::string what = m_iteration ? std::string("the iteration") : fmt::format("stage '{}'", m_name);
  if (!m_state) throw stage_error("this scope belongs to no session (default-constructed or moved from)");
  if (m_serial == 0)
    throw stage_error(m_entered_once ? fmt::format("{} exited twice: it is not open", what)
                                     : fmt::format("{} exited before it was entered", what));
  if (m_state->closed()) {
    m_serial = 0;
    throw stage_error(fmt::format("{} was still open when its session closed, and was recorded then as never "
                                  "exited; exiting it now records nothing",
                                  what));
  }
  m_state->current_lane().exit(*this);
}

void scope::exit_quietly() noexcept {
  if (m_serial == 0 || !m_state) return;
  if (m_state->closed()) {  // its case was ended (and any problem recorded) when the session closed
    m_serial = 0;
    return;
  }
  try {
    detail::lane& here = m_state->current_lane();
    if (&here != m_lane) {
      m_serial = 0;
      m_state->add_problem(fmt::format("{} was destroyed on another thread than the one that entered it, so it stayed "
                                       "open",
                                       m_iteration ? std::string("an iteration") : fmt::format("stage '{}'", m_name)));
      return;
    }
    here.exit_quietly(*this);
  } catch (...) {
    m_serial = 0;
  }
}

// ---------------------------------------------------------------------------------------------
// session

session::session(session_options options) : m_state(std::make_shared<detail::session_state>(std::move(options))) {}

session::~session() {
  if (!m_state) return;
  try {
    m_state->close();
  } catch (...) {
    // The case was written with its problem as its message; a destructor cannot say more.
  }
}

session::session(session&&) noexcept = default;
session& session::operator=(session&& other) noexcept {
  if (this == &other) return *this;
  if (m_state) {
    try {
      m_state->close();
    } catch (...) {
    }
  }
  m_state = std::move(other.m_state);
  return *this;
}

namespace {
detail::session_state& live(const std::shared_ptr<detail::session_state>& s) {
  if (!s) throw usage_error("this session was moved from");
  return *s;
}
}  // namespace

void session::begin_case(axis_list axes, std::size_t warmup_iterations) {
  live(m_state).begin_case(std::move(axes), warmup_iterations);
}
void session::set_field(const std::string& key, const std::string& value) { live(m_state).set_field(key, value); }
void session::set_case_field(const std::string& key, const std::string& value) { live(m_state).set_case_field(key, value); }
case_record session::end_case() { return live(m_state).end_case(); }
case_record session::fail_case(std::string reason) { return live(m_state).fail_case(std::move(reason)); }
bool session::case_open() const { return live(m_state).case_open(); }
void session::close() {
  if (m_state) m_state->close();
}

scope session::make_stage(std::string_view name, void* stream) {
  detail::check_label("stage name", name);
  scope s;
  s.m_state = m_state;
  live(m_state);
  s.m_name = std::string(name);
  s.m_stream = stream;
  return s;
}

scope session::make_iteration(void* stream) {
  scope s;
  s.m_state = m_state;
  live(m_state);
  s.m_name = "iteration";
  s.m_stream = stream;
  s.m_iteration = true;
  return s;
}

scope session::stage(std::string_view name, void* stream) {
  scope s = make_stage(name, stream);
  s.enter();
  return s;
}

scope session::iteration(void* stream) {
  scope s = make_iteration(stream);
  s.enter();
  return s;
}

void session::count(counter what, double amount) {
  auto& st = live(m_state);
  const auto index = static_cast<std::size_t>(what);
  if (index >= counter_count) throw usage_error(fmt::format("counter {} does not exist (0 to {})", index, counter_count - 1));
  if (!std::isfinite(amount) || amount < 0)
    throw usage_error(fmt::format("count of {}: {} is not a finite number >= 0", to_string(what), amount));
  st.check_usable();
  st.ensure_case();
  st.current_lane().count(what, amount);
}

void session::mark_memory(std::string_view label, std::int64_t user_bytes) {
  auto& st = live(m_state);
  st.check_usable();
  st.mark_memory(label, user_bytes);
}

const run_context& session::context() const { return live(m_state).context(); }
const std::vector<case_record>& session::cases() const { return live(m_state).cases(); }
const std::string& session::backend_name() const { return live(m_state).backend_name(); }
int session::device() const { return live(m_state).device().index; }
const std::string& session::host_only_reason() const { return live(m_state).device().why_host; }

}  // namespace itera::user
