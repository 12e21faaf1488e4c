#pragma once
// The user API's internals: a session's shared state, and one recording lane per thread that uses
// it. A lane owns a stage recorder (src/core/recorder.cpp) with a clock on the callers' streams and
// a memory tracker fed by the user's byte counts; nothing in a lane is shared, so stages cost no
// lock. When a case ends, the session folds every lane's stages, samples and counts into one case
// record (docs/results.md) and writes it.
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "itera/core/recorder.hpp"
#include "itera/core/result.hpp"
#include "itera/user/session.hpp"
#include "src/user/device.hpp"

namespace itera::user::detail {

class session_state;

// One iteration's times: the host clock around it, and its events' interval when it had a stream.
struct sample {
  std::int64_t host_begin_ns = 0, host_end_ns = 0;
  double device_ns = 0;
  bool has_device = false;
  bool resolved = false;
  std::uint32_t clock_span = 0;
};

// Private access to a scope for the runner: force an iteration to be warm-up or measured.
struct scope_access {
  static void set_warmup(scope& s, int mode) { s.m_warmup_mode = static_cast<signed char>(mode); }
};

class lane {
 public:
  lane(session_state& owner, const device_choice& device);
  ~lane();
  lane(const lane&) = delete;
  lane& operator=(const lane&) = delete;

  void enter(scope& sc);
  // Throws stage_error when `sc` is not the innermost open scope of this lane. `timed`, for the
  // runner: the iteration's sample, read at once; with `wait` the end event is waited for before
  // the host clock is read (R2: the call's work has finished).
  void exit(scope& sc, sample* timed = nullptr, bool wait = false);
  // `keep`: an iteration closed this way keeps its sample (false: the runner's call that failed).
  void exit_quietly(scope& sc, bool keep = true) noexcept;
  void count(counter c, double amount);
  void set_user_bytes(std::uint64_t bytes);

  // Everything recorded since the last take(), for the case being ended; resets the lane to the
  // next case. Scopes still open are closed (host time up to now) and named in `problems`.
  struct harvest {
    std::vector<stage_record> stages;
    std::vector<sample> samples;
    std::array<double, counter_count> counts{};
    std::size_t warmup_count = 0;
    double warmup_ns = 0;
    std::vector<std::string> problems;  // device times that could not be read are among them
    std::vector<std::thread::id> threads;  // that entered scopes on this lane
  };
  harvest take();
  // Drops the stages and counts recorded so far (warm-up). Only with no scope open.
  void discard();

  std::size_t open_depth() const { return m_stack.size(); }
  std::thread::id owner;
  bool released = false;  // its thread has exited: another thread may take it over

 private:
  struct entry {
    std::uint64_t serial = 0;
    bool iteration = false;
    std::int32_t path = -1;  // stages: index into m_paths
    std::optional<stage_recorder::scope> rec;
    // iterations
    sample times;
    bool warmup = false;
  };
  struct path_node {
    std::int32_t parent = -1;
    std::string name, path;
    bool device = false;  // a span on this path, or under it, had a stream
  };

  std::int32_t path_of(std::int32_t parent, const std::string& name);
  std::int32_t innermost_stage() const;
  std::string label(const entry& e) const;
  void fold(bool keep);
  void maybe_fold();
  void close_entry(entry& e, sample* timed, bool wait, bool keep = true);

  session_state& m_owner;
  const device_choice& m_device;
  std::unique_ptr<stream_clock> m_clock;
  memory_tracker m_memory;
  stage_recorder m_recorder;
  std::vector<entry> m_stack;
  std::vector<path_node> m_paths;
  void* m_checked_stream = nullptr;  // the last stream that passed check_stream
  std::uint64_t m_next_serial = 1;
  std::uint64_t m_generation = 1;
  std::size_t m_spans = 0;           // recorder and clock spans since the last fold
  std::vector<sample> m_pending;     // measured iterations not folded yet
  // Folded:
  std::vector<stage_record> m_stages;
  std::vector<sample> m_samples;
  std::array<double, counter_count> m_counts{};
  std::size_t m_warmup_count = 0;
  double m_warmup_ns = 0;
  std::size_t m_in_warmup = 0;  // warm-up iterations open on this lane
  std::vector<std::string> m_problems;
  bool m_device_time_failed = false;
  std::vector<std::thread::id> m_threads;

  friend class session_state;
};

// What the runner sets on the case it ends (server and single stream make their own samples).
struct case_finish {
  bool own_samples = false;
  std::vector<double> samples_ns;
  std::string method;
  std::string stop_reason;
  bool failed = false;
  std::string message;
  std::vector<metric> metrics;  // the scenario's own figures (latency percentiles, load, goodput)
  double window_s = 0;          // > 0: counters per second over this window (the server run's duration)
  bool has_warmup = false;
  std::size_t warmup_count = 0;
  double warmup_ns = 0;
};

class session_state : public std::enable_shared_from_this<session_state> {
 public:
  explicit session_state(session_options options);
  ~session_state();

  lane& current_lane() {
    if (t_cache.id == m_id) return *t_cache.l;
    return find_lane();
  }
  void ensure_case() {
    if (!m_case_open.load(std::memory_order_acquire)) open_implicit_case();
  }
  void check_usable() const;

  void begin_case(axis_list axes, std::size_t warmup, bool runner = false);
  void set_case_field(const std::string& key, const std::string& value);
  void set_field(const std::string& key, const std::string& value);
  // Ends the open case and writes it. `finish`: the runner's figures; `failure`: the case fails on
  // purpose with that message (session::fail_case). Scopes still open fail the case too, named
  // after any message; only a plain end_case then throws stage_error.
  case_record end_case(const case_finish* finish = nullptr, const std::string* failure = nullptr);
  case_record fail_case(std::string reason);
  bool case_open() const { return m_case_open.load(std::memory_order_acquire); }
  void close();
  void discard_recorded();  // runner: drops what warm-up calls recorded in every lane

  void mark_memory(std::string_view label, std::int64_t user_bytes);
  void add_problem(std::string what);

  // Iterations of the open case: their number and whether they had a stream (all or none).
  std::uint64_t next_iteration() { return m_iterations.fetch_add(1, std::memory_order_relaxed); }
  std::size_t warmup_iterations() const { return m_case.warmup; }
  bool runner_case() const { return m_case.runner; }
  void note_iteration_kind(bool device);

  const session_options& options() const { return m_options; }
  const device_choice& device() const { return m_device; }
  const run_context& context() const { return m_context; }
  const std::vector<case_record>& cases() const { return m_cases; }
  const std::string& backend_name() const { return m_backend; }
  bool closed() const { return m_closed.load(std::memory_order_acquire); }
  void release_lane(lane* l);  // its thread has exited
  bool streams_ignored() const { return m_streams_ignored.load(std::memory_order_relaxed); }
  void note_stream_ignored() { m_streams_ignored.store(true, std::memory_order_relaxed); }

 private:
  struct lane_cache {
    std::uint64_t id = 0;
    lane* l = nullptr;
  };
  static thread_local lane_cache t_cache;

  struct mark {
    std::string label;
    std::optional<std::uint64_t> device_in_use, host_rss, user_bytes;
  };
  struct open_case {
    axis_list axes;
    std::map<std::string, std::string> fields;
    std::size_t warmup = 0;
    bool runner = false;
    std::int64_t begin_ns = 0;
    std::vector<mark> marks;  // one per label, each value the largest seen
    std::string device_memory_why;
  };

  lane& find_lane();
  void open_implicit_case();
  void begin_case_locked(axis_list axes, std::size_t warmup, bool runner);
  void mark_locked(std::string_view label, std::int64_t user_bytes);
  void write(const case_record& r);

  session_options m_options;
  device_choice m_device;
  std::string m_backend;
  run_context m_context;
  std::unique_ptr<result_stream> m_out;
  std::uint64_t m_id;

  std::mutex m_mutex;
  std::deque<std::unique_ptr<lane>> m_lanes;
  std::atomic<bool> m_case_open{false};
  std::atomic<std::uint64_t> m_iterations{0};
  std::atomic<int> m_iteration_kind{0};  // 0: none yet, 1: host only, 2: with a stream
  std::atomic<bool> m_streams_ignored{false};
  open_case m_case;
  std::vector<std::string> m_problems;  // found outside a lane (a scope destroyed on another thread)
  std::vector<case_record> m_cases;
  std::set<std::string> m_keys;  // axes keys recorded
  std::atomic<bool> m_closed{false};
};

// "a=1 b=2" for messages; "(no axes)" when empty.
std::string axes_text(const axis_list& axes);

}  // namespace itera::user::detail
