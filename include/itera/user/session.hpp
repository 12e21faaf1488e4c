#pragma once
// The user API (issue 5): itera's measurement core inside the user's own application. A session
// writes one results file (docs/results.md, the format of the built-in workloads, so `itera report`,
// `compare`, `fit`, `cost` and `plan` read it); a case is one configuration the application ran;
// stages time host and device work (CUDA events on the caller's stream, given as a void*);
// iterations are the repetitions whose times are the case's raw samples; counters and memory marks
// give throughput and memory. docs/user-api.md defines every figure.
//
// Privacy (R18): the API takes labels, numbers and stream handles only. Nothing reads tensors,
// prompts, images, file names or the process's command line; the results hold the names the user
// passes and the measurements.
//
// Threads: stages, iterations and counters may be used from any number of threads at once (each
// thread records into its own lane, merged when the case ends). begin_case, end_case and close
// must not run while another thread is inside a stage of the session.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "itera/core/errors.hpp"
#include "itera/core/result.hpp"

namespace itera::user {

// session_options::device values besides a CUDA device index.
inline constexpr int device_auto = -2;  // CUDA device 0 when one is usable, else host time only
inline constexpr int device_none = -1;  // host time only, even where a GPU is present

// What a counter counts. bytes_read, bytes_written and flops also go to the innermost open stage.
// images and steps (training steps) give throughput/images_per_s and throughput/steps_per_s, which
// `itera cost` prices per thousand images and per training step (include/itera/analysis/rates.hpp).
enum class counter { bytes_read, bytes_written, flops, items, tokens, output_tokens, images, steps };
inline constexpr std::size_t counter_count = 8;
// "bytes_read", "items", ...: the names the results use (count/<name>, throughput/<name>_per_s).
const char* to_string(counter c);

// A stage or iteration used out of order: exited twice, exited before entered, exited on another
// thread, exited while a stage inside it is open, never exited before its case ended.
struct stage_error : usage_error {
  using usage_error::usage_error;
};
// A CUDA call failed, or a stream belongs to another device than the session's.
struct device_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The results file could not be written (disk full, closed descriptor). Lines written before stay.
struct io_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Axis values of a case, in the order given ("batch" -> "8").
using axis_list = std::vector<std::pair<std::string, std::string>>;

struct session_options {
  std::string name;               // the workload name in the results: a label of the user's choosing
  std::string results_path;       // JSON lines; an existing file is refused; "-" is stdout; "" keeps
                                  // the cases in memory only (session::cases())
  int device = device_auto;       // CUDA device index of the streams given to stages, or device_auto / device_none
  int version = 1;                // workload_version: bump it when the measured code changes meaning
  std::map<std::string, std::string> fields;  // recipe fields of every case (model, precision.*, ...)
  std::string label;              // written as the context's `command`; "" by default (argv is never read)
  // How device time is taken for scopes given a stream (docs/user-api.md, "Device clocks"):
  // "cupti" (CUPTI activity records of the work launched inside the scope, on any stream, with the
  // kernels' own timestamps: nothing is put on the stream; about 1.2 us per scope of a step loop
  // that waits for each step, H200), "events" (a CUDA event pair on the stream per scope: about
  // 4.4 us per scope there), or "auto" (cupti when this process can use CUPTI, else events; the
  // results say which, and why not cupti).
  std::string device_clock = "auto";
};

namespace detail {
class session_state;
class lane;
struct scope_access;
}  // namespace detail

// A named stage or an iteration, entered and exited any number of times (not nested in itself).
// Stages nest by the order they are entered on a thread; an iteration is one repetition of the
// case (one raw sample) and is not itself a stage. Given a stream (a cudaStream_t as void*), the
// scope also records a CUDA event on it at enter and exit and the device time between them
// counts for the scope. exit() throws stage_error when the scope is not the innermost open one of
// its thread; the destructor exits an open scope without throwing (a problem it finds fails the
// case, with the reason, when the case ends).
class scope {
 public:
  scope() = default;
  scope(scope&& other) noexcept;
  scope& operator=(scope&& other) noexcept;
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;
  ~scope();

  scope& enter();
  void exit();
  bool is_open() const { return m_serial != 0; }
  bool is_iteration() const { return m_iteration; }
  const std::string& name() const { return m_name; }

 private:
  friend class session;
  friend class detail::lane;
  friend struct detail::scope_access;
  void exit_quietly() noexcept;
  std::shared_ptr<detail::session_state> m_state;
  std::string m_name;
  void* m_stream = nullptr;
  bool m_iteration = false;
  bool m_entered_once = false;
  detail::lane* m_lane = nullptr;   // the lane it was entered on
  std::uint64_t m_serial = 0;       // non-zero while open
  std::uint64_t m_generation = 0;   // the lane's case generation when entered
  signed char m_warmup_mode = -1;   // iterations: -1 by the case's warm-up count, 0 measured, 1 warm-up
};

class session {
 public:
  // Writes the context line (build, host, device fingerprint, software versions). usage_error for an
  // empty name, an existing results file, a device index that cannot be used.
  explicit session(session_options options);
  ~session();  // close(), without throwing
  session(session&&) noexcept;
  session& operator=(session&&) noexcept;
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  // Starts a case: its axes (names unique and non-empty) and how many iterations at its start are
  // warm-up (timed, reported as warm-up, never sampled; their stages and counts are dropped).
  // A stage, iteration, count or mark without a case begins one with no axes. usage_error when a
  // case is open or one with the same axes was already recorded by this session.
  void begin_case(axis_list axes = {}, std::size_t warmup_iterations = 0);
  // A recipe field of every case ended from now on (model, precision.weights, ...).
  void set_field(const std::string& key, const std::string& value);
  // A recipe field of the open case (besides the session's).
  void set_case_field(const std::string& key, const std::string& value);
  // Ends the open case and writes it. A stage still open fails the case, which is written with
  // what was recorded and the reason, then stage_error is thrown. usage_error when no case is open.
  case_record end_case();
  // Ends the open case as failed on purpose (an exception in the measured code, a wrong result, a
  // run abandoned): the case is written with status failed and `reason` as its message, keeping
  // what it measured (samples, stages, counts, memory marks) but no statistics or rates, so that
  // `itera compare` never takes it for a complete run. `reason` is the caller's own text (R18: put
  // no data in it). A stage still open is closed and named after the reason ("...; and stage 'x'
  // was never exited"), as end_case does, but nothing is thrown for it: the case is failed already.
  // usage_error, with the case left open, when no case is open or the reason is empty.
  case_record fail_case(std::string reason);
  // Whether a case is open now: begun by begin_case, or by a stage, iteration, count or mark.
  bool case_open() const;
  // Ends the open case (when it recorded anything) and closes the file. Idempotent.
  void close();

  // An entered stage / iteration (RAII), or one not entered yet (make_*: for bindings).
  [[nodiscard]] scope stage(std::string_view name, void* stream = nullptr);
  [[nodiscard]] scope iteration(void* stream = nullptr);
  [[nodiscard]] scope make_stage(std::string_view name, void* stream = nullptr);
  [[nodiscard]] scope make_iteration(void* stream = nullptr);

  // Adds `amount` (finite, >= 0) to a counter of the case, and to the innermost open stage of this
  // thread for bytes and flops.
  void count(counter what, double amount);
  // Memory now, under `label`: device memory in use (driver view) where CUDA is present, host RSS,
  // and `user_bytes` when >= 0 (an allocator's count, e.g. torch.cuda.memory_allocated()). The case
  // keeps the largest value of each per label and over all labels; user bytes also give the peaks of
  // the stages open on this thread.
  void mark_memory(std::string_view label, std::int64_t user_bytes = -1);

  const run_context& context() const;
  const std::vector<case_record>& cases() const;  // cases ended so far, in order
  // What the session runs on: "cuda" (device index device()) or "cpu" (host time only), and why
  // not cuda when it is not.
  const std::string& backend_name() const;
  int device() const;
  const std::string& host_only_reason() const;

  // For the runner and the C API.
  const std::shared_ptr<detail::session_state>& state() const { return m_state; }

 private:
  std::shared_ptr<detail::session_state> m_state;
};

}  // namespace itera::user
