// The user API's runner and load generator: offline batch sweep, server (Poisson arrivals), single
// stream, each configuration one case recorded like the llm workload's (workloads/llm/scenarios.cpp).
#include "itera/user/runner.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <latch>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "itera/core/timer.hpp"
#include "src/user/state.hpp"
#include "workloads/llm/load.hpp"

namespace itera::user {

namespace detail {
struct call_state {
  session_state* session = nullptr;
  std::int64_t index = 0;
  std::int64_t batch = 1;
  double scheduled_s = 0;
  bool warmup = false;
  std::vector<double>* tokens = nullptr;  // server and single stream: token times, s from t0
  std::chrono::steady_clock::time_point t0;
};
}  // namespace detail

std::int64_t call::index() const { return m_state->index; }
std::int64_t call::batch() const { return m_state->batch; }
double call::scheduled_s() const { return m_state->scheduled_s; }
bool call::warmup() const { return m_state->warmup; }

void call::token(std::int64_t n) {
  if (n < 1) throw usage_error(fmt::format("token({}): give the number of tokens that became available, at least 1", n));
  if (m_state->tokens) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_state->t0).count();
    m_state->tokens->insert(m_state->tokens->end(), static_cast<std::size_t>(n), t);
  }
  m_state->session->ensure_case();
  m_state->session->current_lane().count(counter::output_tokens, static_cast<double>(n));
}

namespace {

using detail::call_state;
using detail::case_finish;
using detail::session_state;
using clock_type = std::chrono::steady_clock;

constexpr std::int64_t max_concurrency = 4096;

session_state& ready(session& s, const callback& fn, const char* runner) {
  const auto& st = s.state();
  if (!st) throw usage_error("this session was moved from");
  st->check_usable();
  if (!fn) throw usage_error(fmt::format("{}: no callback given", runner));
  if (st->case_open())
    throw usage_error(fmt::format("{}: a case is open in session '{}': end it (end_case) before running the runner, "
                                  "which records its own cases",
                                  runner, st->options().name));
  return *st;
}

void check_axes(const axis_list& axes, std::initializer_list<const char*> reserved, const char* runner) {
  for (const auto& [name, value] : axes)
    for (const char* r : reserved)
      if (name == r)
        throw usage_error(fmt::format("{}: extra axis '{}' is one the runner sets itself; name it otherwise", runner, name));
}

void check_targets(const latency_targets& t, const char* runner) {
  for (const auto& [name, v] : {std::pair{"ttft_s", t.ttft_s}, std::pair{"tpot_s", t.tpot_s}, std::pair{"e2e_s", t.e2e_s}})
    if (!std::isfinite(v) || v < 0)
      throw usage_error(fmt::format("{}: target {} must be 0 (none) or a positive number of seconds, got {}", runner, name, v));
}

std::string number_text(double v) { return fmt::format("{:g}", v); }

void note(run_summary& out, const case_record& r) {
  out.cases.push_back(r);
  if (r.status == case_status::failed) {
    ++out.failed;
    if (out.first_failure.empty())
      out.first_failure = fmt::format("{} {}: {}", r.workload, detail::axes_text(r.axes), r.message);
  }
}

// Sleeps to just before `due`, then yields until it: an arrival is issued within microseconds of
// its time (what is late still counts: latency runs from the scheduled arrival).
void wait_until(clock_type::time_point due) {
  for (;;) {
    const auto now = clock_type::now();
    if (now >= due) return;
    const auto left = due - now;
    if (left > std::chrono::microseconds(300))
      std::this_thread::sleep_for(left - std::chrono::microseconds(200));
    else
      std::this_thread::yield();
  }
}

double p99(const summary& s) { return s.percentiles.at(2).value; }

// The scenario's figures, like the llm workload's serving scenarios, plus the e2e target.
void add_load_metrics(case_finish& f, std::span<const llm::request_timeline> timeline, const latency_targets& t,
                      bool server, bool tokens_reported) {
  const llm::server_report rep = llm::summarize_server(timeline, {t.ttft_s, t.tpot_s});
  std::vector<double> e2e;
  std::size_t meeting = 0;
  for (const auto& r : timeline) {
    if (r.tokens.empty()) continue;
    const double own_e2e = r.tokens.back() - r.scheduled;
    e2e.push_back(own_e2e);
    const std::size_t n = r.tokens.size();
    bool meets = t.ttft_s == 0 || r.tokens.front() - r.scheduled <= t.ttft_s;
    if (n >= 2) meets = meets && (t.tpot_s == 0 || (r.tokens.back() - r.tokens.front()) / static_cast<double>(n - 1) <= t.tpot_s);
    meets = meets && (t.e2e_s == 0 || own_e2e <= t.e2e_s);
    if (meets) ++meeting;
  }
  const summary e2e_summary = summarize(e2e);
  const auto put = [&](const std::string& name, const summary& s) {
    if (s.count == 0) return;
    f.metrics.push_back({"latency/" + name + "/p50", s.median, "s"});
    f.metrics.push_back({"latency/" + name + "/p90", s.percentiles.at(0).value, "s"});
    f.metrics.push_back({"latency/" + name + "/p99", p99(s), "s"});
    f.metrics.push_back({"latency/" + name + "/mean", s.mean, "s"});
  };
  if (tokens_reported) {
    put("ttft", rep.ttft);
    put("tpot", rep.tpot);
    put("itl", rep.itl);
  }
  put("e2e", e2e_summary);
  if (server) put("queue", rep.queue);
  f.metrics.push_back({"load/requests", static_cast<double>(rep.requests), "requests"});
  f.metrics.push_back({"load/completed", static_cast<double>(rep.completed), "requests"});
  if (server) f.metrics.push_back({"load/offered_rate", rep.offered_rate, "requests/s"});
  f.metrics.push_back({"load/achieved_rate", rep.achieved_rate, "requests/s"});
  const bool e2e_ok = t.e2e_s == 0 || e2e_summary.count == 0 || p99(e2e_summary) <= t.e2e_s;
  const double goodput = rep.duration_s > 0 ? static_cast<double>(meeting) / rep.duration_s : 0.0;
  f.metrics.push_back({"load/meeting_targets", static_cast<double>(meeting), "requests"});
  f.metrics.push_back({"load/goodput", goodput, "requests/s"});
  // Whether the run holds its targets at its rate: what `itera report` and `itera cost` take an
  // operating point from. A single stream has no rate to hold.
  if (server) f.metrics.push_back({"load/meets_targets", rep.meets_targets && e2e_ok ? 1.0 : 0.0, "bool"});
  f.window_s = rep.duration_s;
}

axis_list load_axes(const axis_list& extra, const char* scenario, std::int64_t batch, double rate, std::size_t requests,
                    const latency_targets& t) {
  axis_list axes = extra;
  axes.emplace_back("scenario", scenario);
  if (batch > 0) axes.emplace_back("batch", std::to_string(batch));
  if (rate > 0) axes.emplace_back("rate", number_text(rate));
  axes.emplace_back("requests", std::to_string(requests));
  axes.emplace_back("ttft_ms", number_text(t.ttft_s * 1e3));
  axes.emplace_back("tpot_ms", number_text(t.tpot_s * 1e3));
  axes.emplace_back("e2e_ms", number_text(t.e2e_s * 1e3));
  return axes;
}

// Warm-up requests, one by one on this thread, inside a warm-up iteration: what they record is
// dropped. Returns false (with the failure in `f`) when one fails.
bool warm_up(session& s, session_state& st, std::size_t count, void* stream, const callback& fn, case_finish& f) {
  const std::int64_t begin = host_now_ns();
  for (std::size_t i = 0; i < count; ++i) {
    call_state cs;
    cs.session = &st;
    cs.index = static_cast<std::int64_t>(i);
    cs.warmup = true;
    cs.t0 = clock_type::now();
    call c(cs);
    try {
      scope it = s.make_iteration();
      detail::scope_access::set_warmup(it, 1);
      it.enter();
      fn(c);
      detail::synchronize_stream(stream);
      it.exit();
    } catch (const std::exception& e) {
      f.failed = true;
      f.message = fmt::format("the callback failed on warm-up request {}: {}", i, e.what());
      return false;
    }
  }
  f.has_warmup = true;
  f.warmup_count = count;
  f.warmup_ns = static_cast<double>(host_now_ns() - begin);
  return true;
}

// `reported[i]`: request i reported its tokens (else its one token is its completion).
void finish_load(case_finish& f, const std::vector<llm::request_timeline>& timeline, const std::vector<char>& reported,
                 const latency_targets& targets, bool server, const char* method) {
  f.own_samples = true;
  f.method = method;
  f.stop_reason = "scenario";
  bool tokens_reported = false;
  std::vector<llm::request_timeline> done;
  for (std::size_t i = 0; i < timeline.size(); ++i)
    if (!timeline[i].tokens.empty()) {
      f.samples_ns.push_back((timeline[i].tokens.back() - timeline[i].scheduled) * 1e9);
      done.push_back(timeline[i]);
      tokens_reported = tokens_reported || reported[i] != 0;
    }
  if (f.failed) return;
  if (done.empty()) {
    f.failed = true;
    f.message = "no request completed";
    return;
  }
  if (!tokens_reported && (targets.ttft_s > 0 || targets.tpot_s > 0)) {
    f.failed = true;
    f.message = "ttft and tpot targets need the callback to report tokens (call.token()); no request did: set an e2e "
                "target instead, or report tokens";
    return;
  }
  try {
    add_load_metrics(f, done, targets, server, tokens_reported);
  } catch (const std::exception& e) {
    f.failed = true;
    f.message = fmt::format("the latency figures could not be computed: {}", e.what());
    f.metrics.clear();
  }
}

}  // namespace

run_summary run_offline(session& s, const offline_options& o, const callback& fn) {
  session_state& st = ready(s, fn, "run_offline");
  if (o.batches.empty()) throw usage_error("run_offline: offline_options.batches is empty: give the batch sizes to sweep");
  for (const auto b : o.batches)
    if (b < 1) throw usage_error(fmt::format("run_offline: batch size {} is not positive", b));
  const auto& r = o.stop;
  if (r.min_samples > r.max_samples)
    throw usage_error(fmt::format("run_offline: stop.min_samples {} is above stop.max_samples {}", r.min_samples, r.max_samples));
  if (!(r.min_time_s <= r.max_time_s))
    throw usage_error(fmt::format("run_offline: stop.min_time_s {} is above stop.max_time_s {}", r.min_time_s, r.max_time_s));
  if (!(r.noise_target > 0)) throw usage_error("run_offline: stop.noise_target must be a positive fraction, such as 0.005");
  if (r.max_samples == 0 || !(r.max_time_s > 0))
    throw usage_error("run_offline: stop.max_samples and stop.max_time_s must be positive");
  if (!(o.warmup_min_time_s >= 0)) throw usage_error("run_offline: warmup_min_time_s must be >= 0");
  check_axes(o.axes, {"scenario", "batch"}, "run_offline");
  detail::check_stream(o.stream, st.device());

  run_summary out;
  for (const auto batch : o.batches) {
    axis_list axes = o.axes;
    axes.emplace_back("scenario", "offline");
    axes.emplace_back("batch", std::to_string(batch));
    st.begin_case(std::move(axes), 0, true);
    case_finish f;
    call_state cs;
    cs.session = &st;
    cs.batch = batch;
    cs.t0 = clock_type::now();
    call c(cs);
    std::int64_t calls = 0;
    // One call: an iteration around it, its sample read once its work finished (R2).
    const auto one = [&](bool warmup) {
      cs.index = calls++;
      cs.warmup = warmup;
      scope it = s.make_iteration(o.stream);
      detail::scope_access::set_warmup(it, warmup ? 1 : 0);
      it.enter();
      detail::sample x;
      try {
        fn(c);
        detail::lane& mine = st.current_lane();
        mine.count(counter::items, static_cast<double>(batch));  // a call's batch is its items
        mine.exit(it, &x, true);
      } catch (...) {
        if (it.is_open()) st.current_lane().exit_quietly(it, false);  // a call that failed gives no sample
        throw;
      }
      return x;
    };
    try {
      const std::int64_t warm_begin = host_now_ns();
      std::size_t warm = 0;
      while (warm < o.warmup_min_count ||
             static_cast<double>(host_now_ns() - warm_begin) < o.warmup_min_time_s * 1e9) {
        (void)one(true);
        ++warm;
        if (static_cast<double>(host_now_ns() - warm_begin) > r.max_time_s * 1e9) break;
      }
      f.has_warmup = true;
      f.warmup_count = warm;
      f.warmup_ns = static_cast<double>(host_now_ns() - warm_begin);
      stopper stop(r);
      double measured_s = 0;
      stop_reason reason = stop_reason::none;
      while (reason == stop_reason::none) {
        const detail::sample x = one(false);
        const double host = static_cast<double>(x.host_end_ns - x.host_begin_ns);
        measured_s += host * 1e-9;
        reason = stop.add(x.has_device ? x.device_ns : host, measured_s);
      }
      f.stop_reason = to_string(reason);
    } catch (const std::exception& e) {
      f.failed = true;
      f.message = fmt::format("the callback failed on call {} ({}): {}", cs.index, cs.warmup ? "warm-up" : "measured",
                              e.what());
      try {
        detail::synchronize_stream(o.stream);  // leave the stream idle for the next case
      } catch (const std::exception& sync) {
        f.message += fmt::format(" (and the stream did not synchronize afterwards: {})", sync.what());
      }
    }
    note(out, st.end_case(&f));
  }
  return out;
}

run_summary run_server(session& s, const server_options& o, const callback& fn) {
  session_state& st = ready(s, fn, "run_server");
  if (o.rates.empty()) throw usage_error("run_server: server_options.rates is empty: give the arrival rates (requests/s)");
  for (const double rate : o.rates)
    if (!std::isfinite(rate) || rate <= 0)
      throw usage_error(fmt::format("run_server: rate {} is not a positive number of requests per second", rate));
  if (o.concurrency.empty()) throw usage_error("run_server: server_options.concurrency is empty: give at least 1");
  for (const auto k : o.concurrency)
    if (k < 1 || k > max_concurrency)
      throw usage_error(fmt::format("run_server: concurrency {} is outside 1 to {}", k, max_concurrency));
  if (o.requests < 1) throw usage_error("run_server: server_options.requests must be at least 1");
  check_targets(o.targets, "run_server");
  check_axes(o.axes, {"scenario", "batch", "rate", "requests", "ttft_ms", "tpot_ms", "e2e_ms"}, "run_server");
  detail::check_stream(o.stream, st.device());

  run_summary out;
  for (const auto concurrency : o.concurrency) {
    for (const double rate : o.rates) {
      st.begin_case(load_axes(o.axes, "server", concurrency, rate, o.requests, o.targets), 0, true);
      case_finish f;
      std::vector<llm::request_timeline> timeline(o.requests);
      std::vector<char> reported(o.requests, 0);
      std::atomic<std::size_t> completed{0};
      if (warm_up(s, st, o.warmup_requests, o.stream, fn, f)) {
        const std::vector<double> arrivals = llm::poisson_arrivals(rate, o.requests, o.seed);
        std::atomic<std::size_t> next{0};
        std::atomic<bool> stop{false};
        std::mutex failure_mutex;
        std::latch start(1);
        clock_type::time_point t0;
        const auto worker = [&] {
          start.wait();
          while (!stop.load(std::memory_order_relaxed)) {
            const std::size_t i = next.fetch_add(1);
            if (i >= o.requests) return;
            wait_until(t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(arrivals[i])));
            if (stop.load(std::memory_order_relaxed)) return;
            auto& tl = timeline[i];
            std::vector<double> tokens;
            call_state cs;
            cs.session = &st;
            cs.index = static_cast<std::int64_t>(i);
            cs.scheduled_s = arrivals[i];
            cs.tokens = &tokens;
            cs.t0 = t0;
            call c(cs);
            const double admitted = std::chrono::duration<double>(clock_type::now() - t0).count();
            try {
              fn(c);
              detail::synchronize_stream(o.stream);
            } catch (const std::exception& e) {
              const std::lock_guard lock(failure_mutex);
              if (!stop.exchange(true))
                f.message = fmt::format("the callback failed on request {} (scheduled at {:.6f} s): {}", i, arrivals[i],
                                        e.what());
              return;
            }
            const double done = std::chrono::duration<double>(clock_type::now() - t0).count();
            tl.scheduled = arrivals[i];
            tl.admitted = std::max(admitted, arrivals[i]);
            // Reported tokens give TTFT and TPOT; without any, completion is the one event a client sees.
            reported[i] = tokens.empty() ? 0 : 1;
            tl.tokens = tokens.empty() ? std::vector<double>{done} : std::move(tokens);
            completed.fetch_add(1);
          }
        };
        std::vector<std::thread> workers;
        workers.reserve(static_cast<std::size_t>(concurrency));
        for (std::int64_t k = 0; k < concurrency; ++k) workers.emplace_back(worker);
        t0 = clock_type::now();
        start.count_down();
        for (auto& w : workers) w.join();
        if (stop.load()) {
          f.failed = true;
          f.message += fmt::format("; {} of {} requests had completed", completed.load(), o.requests);
        }
      }
      finish_load(f, timeline, reported, o.targets, true, "host_steady_clock_scheduled_arrival_to_completion");
      note(out, st.end_case(&f));
    }
  }
  return out;
}

run_summary run_single_stream(session& s, const single_stream_options& o, const callback& fn) {
  session_state& st = ready(s, fn, "run_single_stream");
  if (o.requests < 1) throw usage_error("run_single_stream: single_stream_options.requests must be at least 1");
  check_targets(o.targets, "run_single_stream");
  check_axes(o.axes, {"scenario", "batch", "requests", "ttft_ms", "tpot_ms", "e2e_ms"}, "run_single_stream");
  detail::check_stream(o.stream, st.device());

  run_summary out;
  st.begin_case(load_axes(o.axes, "single_stream", 1, 0, o.requests, o.targets), 0, true);
  case_finish f;
  std::vector<llm::request_timeline> timeline(o.requests);
  std::vector<char> reported(o.requests, 0);
  std::size_t completed = 0;
  if (warm_up(s, st, o.warmup_requests, o.stream, fn, f)) {
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < o.requests; ++i) {
      std::vector<double> tokens;
      const double issued = std::chrono::duration<double>(clock_type::now() - t0).count();
      call_state cs;
      cs.session = &st;
      cs.index = static_cast<std::int64_t>(i);
      cs.scheduled_s = issued;
      cs.tokens = &tokens;
      cs.t0 = t0;
      call c(cs);
      try {
        fn(c);
        detail::synchronize_stream(o.stream);
      } catch (const std::exception& e) {
        f.failed = true;
        f.message = fmt::format("the callback failed on request {}: {}; {} of {} requests had completed", i, e.what(),
                                completed, o.requests);
        break;
      }
      const double done = std::chrono::duration<double>(clock_type::now() - t0).count();
      auto& tl = timeline[i];
      tl.scheduled = issued;
      tl.admitted = issued;
      reported[i] = tokens.empty() ? 0 : 1;
      tl.tokens = tokens.empty() ? std::vector<double>{done} : std::move(tokens);
      ++completed;
    }
  }
  finish_load(f, timeline, reported, o.targets, false, "host_steady_clock_issue_to_completion");
  note(out, st.end_case(&f));
  return out;
}

}  // namespace itera::user
