#pragma once
// The runner and load generator of the user API: a callback plays the system under test, the runner
// drives it and records one case per configuration, the way the built-in llm workload records its
// scenarios (workloads/llm/scenarios.hpp), so `itera report`, `compare`, `cost` and `plan` read
// them alike. docs/user-api.md defines every figure.
//
//   offline        per batch size: warm-up calls, then calls until the stopping rule holds (the
//                  built-in runner's: docs/results.md). One sample per call: its device time when
//                  a stream is given (CUDA events around the call, read after the stream finished),
//                  else the host time of the call. Each call counts its batch as items (count
//                  other units, tokens or images, in the callback). Axes scenario=offline, batch=B.
//   server         requests arrive as a Poisson process at each rate; up to `concurrency` are in
//                  flight (worker threads, first come first served). Latency runs from each
//                  request's scheduled arrival, so a backlog shows in the tail. Samples: per-request
//                  end-to-end latency. Axes scenario=server, batch=<concurrency>, rate, requests and
//                  the targets (ttft_ms, tpot_ms, e2e_ms).
//   single_stream  one request at a time, the next issued when the last completes. Samples: the
//                  end-to-end latency of each. Axes scenario=single_stream, batch=1, requests and
//                  the targets.
//
// A callback that throws (or, through the C API, returns non-zero) fails its case: the case is
// written with the samples taken before, and the run goes on with the next configuration.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "itera/core/stats.hpp"
#include "itera/user/session.hpp"

namespace itera::user {

namespace detail {
struct call_state;
}

// What the callback gets for one call.
class call {
 public:
  std::int64_t index() const;   // offline: the call's number in its case (warm-up first); else the request's
  std::int64_t batch() const;   // offline: items this call processes; server and single stream: 1
  double scheduled_s() const;   // server: scheduled arrival, s from the run's start; single stream: when issued
  bool warmup() const;          // a warm-up call: timed apart, never sampled
  // `n` output tokens became available to the client now: the times of the first and later tokens
  // give TTFT, TPOT and ITL (server, single stream); each token also counts as an output token.
  void token(std::int64_t n = 1);

  explicit call(detail::call_state& state) : m_state(&state) {}

 private:
  detail::call_state* m_state;
};

using callback = std::function<void(call&)>;

// Per-request latency limits in seconds; 0: none. ttft and tpot need the callback to report tokens.
struct latency_targets {
  double ttft_s = 0;
  double tpot_s = 0;
  double e2e_s = 0;
};

struct offline_options {
  std::vector<std::int64_t> batches;  // one case per batch size (positive)
  axis_list axes;                     // extra axes of every case, before scenario and batch
  void* stream = nullptr;             // time each call on this stream (device time), and wait for it
  std::size_t warmup_min_count = 3;   // warm-up: at least this many calls ...
  double warmup_min_time_s = 0.05;    // ... and at least this long
  stopping_rule stop;                 // itera/core/stats.hpp: min/max samples, min/max time, noise target
};

struct server_options {
  std::vector<double> rates;                 // requests per second, one case each (positive)
  std::vector<std::int64_t> concurrency{1};  // most requests in flight (worker threads), one case each
  std::size_t requests = 200;                // requests per case
  std::uint64_t seed = 1;                    // of the arrival schedule (the same everywhere)
  latency_targets targets;
  std::size_t warmup_requests = 1;           // called one by one before the schedule starts
  axis_list axes;                            // extra axes of every case
  void* stream = nullptr;                    // wait for this stream before a request counts as complete
};

struct single_stream_options {
  std::size_t requests = 100;
  latency_targets targets;
  std::size_t warmup_requests = 1;
  axis_list axes;
  void* stream = nullptr;
};

struct run_summary {
  std::vector<case_record> cases;  // in the order run, as written
  std::size_t failed = 0;          // cases whose callback failed (or whose stages were misused)
  std::string first_failure;       // the first failed case's key and message
};

// usage_error for options that cannot be run (no batch, a rate that is not positive, contradicting
// stopping rules, an extra axis that clashes with the runner's), or when a case is open.
run_summary run_offline(session& s, const offline_options& options, const callback& fn);
run_summary run_server(session& s, const server_options& options, const callback& fn);
run_summary run_single_stream(session& s, const single_stream_options& options, const callback& fn);

}  // namespace itera::user
