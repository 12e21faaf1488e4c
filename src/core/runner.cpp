#include "itera/core/runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "itera/core/errors.hpp"

namespace itera {

// ---------------------------------------------------------------------------------------------
// case_state

case_state::case_state(backend& dev, const run_options& options, case_record& record, const ceiling_table& ceilings,
                       std::unique_ptr<device_timer> timer, device_clock* clock, memory_tracker* memory)
    : m_backend(dev),
      m_options(options),
      m_record(record),
      m_ceilings(ceilings),
      m_timer(std::move(timer)),
      m_stages(clock, memory) {}

namespace {
const std::string& axis_value(const case_record& r, std::string_view axis) {
  if (const std::string* v = r.find_axis(axis)) return *v;
  throw std::logic_error(fmt::format("workload {} asked for axis '{}' it does not declare", r.workload, axis));
}
}  // namespace

std::int64_t case_state::get_int(std::string_view axis) const { return std::stoll(axis_value(m_record, axis)); }
const std::string& case_state::get_string(std::string_view axis) const { return axis_value(m_record, axis); }

void case_state::set_field(const std::string& key, const std::string& value) { m_record.fields[key] = value; }
void case_state::set_detail(const std::string& key, const std::string& value) { m_record.details[key] = value; }

void case_state::use_timer(std::unique_ptr<device_timer> timer) {
  if (m_executed) throw std::logic_error("case_state::use_timer after exec");
  m_timer = std::move(timer);
}

void case_state::set_work(double flops, double bytes_read, double bytes_written) {
  m_record.flops = flops;
  m_record.bytes_read = bytes_read;
  m_record.bytes_written = bytes_written;
}

void case_state::add_metric(const std::string& name, double value, const std::string& unit) {
  m_record.metrics.push_back({name, value, unit});
}

void case_state::set_verification(bool passed, double error, double tolerance, const std::string& method) {
  m_record.check = {true, passed, error, tolerance, method};
}

void case_state::skip(const std::string& reason) { throw case_skipped(reason); }

void case_state::exec(const std::function<void()>& launch) {
  if (m_executed) throw std::logic_error("case_state::exec called twice in one case");
  m_executed = true;
  device_timer& timer = *m_timer;
  m_record.device_time_method = std::string(timer.method());

  // Warm-up: module loading, library handles, caches and clocks settle here, outside the samples.
  const std::int64_t warm_begin = host_now_ns();
  std::size_t warm_count = 0;
  double last_warm_ns = 0;
  while (warm_count < m_options.warmup_min_count ||
         static_cast<double>(host_now_ns() - warm_begin) < m_options.warmup_min_time_s * 1e9) {
    timer.start();
    launch();
    timer.stop();
    last_warm_ns = timer.elapsed_ns();
    ++warm_count;
    if (static_cast<double>(host_now_ns() - warm_begin) > m_options.stop.max_time_s * 1e9) break;
  }
  m_record.warmup_count = warm_count;
  m_record.warmup_ns = static_cast<double>(host_now_ns() - warm_begin);
  (void)m_stages.finish();  // stages opened during warm-up are not part of the measurement

  // A sustained ceiling's launches a sample, from the last warm-up launch's time (one where there
  // was none).
  std::size_t launches = 1;
  if (m_record.role == "sustained_ceiling" && m_options.ceiling_batch_s > 0 && last_warm_ns > 0) {
    constexpr double most = 1024;  // an empty launch would otherwise ask for millions
    launches =
        static_cast<std::size_t>(std::clamp(std::ceil(m_options.ceiling_batch_s * 1e9 / last_warm_ns), 1.0, most));
    m_record.details["sample.launches"] = std::to_string(launches);
  }
  const auto per_launch = static_cast<double>(launches);

  stopper stop(m_options.stop);
  double measured_s = 0;
  stop_reason reason = stop_reason::none;
  while (reason == stop_reason::none) {
    timer.start();  // may wait for earlier work (CUPTI): not part of this sample
    // The stages' times in this sample (stage_record::repetition_ns); a batch's would be several.
    if (launches == 1) m_stages.next_repetition();
    const std::int64_t t0 = host_now_ns();
    for (std::size_t i = 0; i < launches; ++i) launch();
    timer.stop();
    timer.wait();  // R2: the work has finished before either clock is read
    const std::int64_t t1 = host_now_ns();
    const double device_ns = timer.elapsed_ns() / per_launch;
    m_record.host_ns.push_back(static_cast<double>(t1 - t0) / per_launch);
    m_record.device_ns.push_back(device_ns);
    measured_s += static_cast<double>(t1 - t0) * 1e-9;
    reason = stop.add(device_ns, measured_s);
  }
  m_stages.end_repetitions();
  m_record.stop_reason = to_string(reason);
}

void case_state::record_samples(std::vector<double> samples_ns, const std::string& method) {
  if (m_executed) throw std::logic_error("case_state::record_samples after the case was timed");
  if (samples_ns.empty()) throw std::logic_error("case_state::record_samples without samples");
  m_executed = true;
  (void)m_stages.finish();  // the scenario's own stages are its business; none are kept
  m_record.device_time_method = method;
  m_record.stop_reason = "scenario";
  m_record.host_ns = samples_ns;
  m_record.device_ns = std::move(samples_ns);
}

// ---------------------------------------------------------------------------------------------
// progress

progress::progress(bool enabled) : m_enabled(enabled && isatty(STDERR_FILENO)) {}

void progress::update(const std::string& line) {
  if (!m_enabled) return;
  std::fprintf(stderr, "\r\033[2K%s", line.c_str());
  std::fflush(stderr);
  m_dirty = true;
}

void progress::done() {
  if (!m_enabled || !m_dirty) return;
  std::fprintf(stderr, "\r\033[2K");
  std::fflush(stderr);
  m_dirty = false;
}

void progress::log(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

// ---------------------------------------------------------------------------------------------
// runner

void validate(const run_options& o) {
  if (o.stop.min_samples > o.stop.max_samples)
    throw usage_error(fmt::format("--min-samples {} is above --max-samples {}", o.stop.min_samples, o.stop.max_samples));
  if (o.stop.min_time_s > o.stop.max_time_s)
    throw usage_error(fmt::format("--min-time {} s is above --max-time {} s", o.stop.min_time_s, o.stop.max_time_s));
  if (!(o.stop.noise_target > 0)) throw usage_error("--noise must be a positive fraction, such as 0.005");
  if (o.stop.max_samples == 0 || !(o.stop.max_time_s > 0))
    throw usage_error("--max-samples and --max-time must be positive");
}

runner::runner(backend& dev, run_options options, result_stream* out)
    : m_backend(dev),
      m_options(options),
      m_out(out),
      m_monitor(dev.name() == "cuda" ? make_nvml_monitor(dev.device_index()) : nullptr),
      m_progress(!options.quiet) {
  validate(m_options);
}

void runner::add_ceiling(const ceiling& c) {
  m_ceilings[c.key] = c;
  m_ceiling_order.push_back(c);
  if (m_out) m_out->write(c);
}

std::vector<case_record> runner::run(const workload_decl& w, const std::vector<axis_values>& cases,
                                     const std::string& role) {
  std::vector<case_record> records;
  records.reserve(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    case_record probe;
    probe.axes = cases[i];
    m_progress.update(fmt::format("[{}/{}] {}{} {}", i + 1, cases.size(), role == "case" ? "" : role + " ", w.name,
                                  probe.axes_key()));
    records.push_back(run_one(w, cases[i], role));
  }
  m_progress.done();
  return records;
}

case_record runner::run_one(const workload_decl& w, const axis_values& values, const std::string& role) {
  case_record r;
  r.workload = w.name;
  r.workload_version = w.version;
  r.backend = std::string(m_backend.name());
  r.role = role;
  r.axes = values;

  const auto fn = w.backends.find(r.backend);
  if (fn == w.backends.end()) {
    r.status = case_status::skipped;
    r.message = fmt::format("workload {} has no {} implementation in this build", w.name, r.backend);
    if (m_out) m_out->write(r);
    return r;
  }

  case_state st(m_backend, m_options, r, m_ceilings, m_backend.make_timer(), m_backend.clock(),
                &m_backend.memory_tracking());
  if (m_monitor) m_monitor->begin();
  try {
    fn->second(st);
    if (!st.executed()) throw std::logic_error(fmt::format("workload {} returned without timing anything", w.name));
  } catch (const case_skipped& e) {
    r.status = case_status::skipped;
    r.message = e.what();
  } catch (const std::exception& e) {
    r.status = case_status::failed;
    r.message = e.what();
    ++m_failed;
    // Leave the device usable for the next case: wait for whatever the failed case enqueued.
    try {
      m_backend.synchronize();
    } catch (const std::exception& sync_error) {
      r.message += fmt::format(" (and the device did not synchronize afterwards: {})", sync_error.what());
    }
  }
  if (m_monitor) r.throttle = m_monitor->end();
  finish_record(r, st);
  if (m_out) m_out->write(r);
  return r;
}

void runner::finish_record(case_record& r, case_state& st) {
  try {
    r.stages = st.stages().finish();
    // A sample cut short by a failure started a repetition it never recorded.
    for (auto& s : r.stages)
      if (s.repetition_ns.size() > r.device_ns.size()) s.repetition_ns.resize(r.device_ns.size());
  } catch (const std::exception& e) {
    // The stage clock could not resolve its spans (dropped records, a broken device): the case's
    // own samples may still stand, but its stage times do not.
    if (r.status == case_status::ok) {
      r.status = case_status::failed;
      r.message = std::string("stage times could not be read: ") + e.what();
      ++m_failed;
    }
  }
  if (r.status != case_status::ok) {
    // A failed case keeps what it measured (samples) but no derived numbers.
    return;
  }
  add_derived_metrics(r, st);
  if (st.m_on_finish) {
    try {
      st.m_on_finish(r);
    } catch (const std::exception& e) {
      r.status = case_status::failed;
      r.message = fmt::format("derived figures could not be computed: {}", e.what());
      ++m_failed;
    }
  }
}

void add_utilisation(case_record& r, const ceiling_table& ceilings, const std::string& prefix,
                     const std::string& key, double achieved, const std::string& unit) {
  for (const auto& k : {key, sustained_key(key)}) {
    const auto it = ceilings.find(k);
    if (it != ceilings.end() && it->second.value > 0 && (unit.empty() || it->second.unit == unit))
      r.metrics.push_back({"utilisation/" + prefix + k, achieved / it->second.value, "fraction"});
  }
}

void runner::add_derived_metrics(case_record& r, case_state& st) {
  r.device_stats = summarize(r.device_ns);
  r.host_stats = summarize(r.host_ns);
  const double seconds = r.device_stats->median * 1e-9;
  if (seconds <= 0) return;
  const double bytes = r.bytes_read + r.bytes_written;
  double achieved = 0;
  std::string unit;
  if (r.flops > 0) {
    achieved = r.flops / seconds;
    unit = "FLOP/s";
    r.metrics.push_back({"throughput/flops", achieved, unit});
  }
  if (bytes > 0) {
    r.metrics.push_back({"throughput/bytes", bytes / seconds, "B/s"});
    if (r.flops <= 0) {
      achieved = bytes / seconds;
      unit = "B/s";
    }
  }
  if (!st.m_ceiling_key.empty() && !r.is_ceiling() && !unit.empty())
    add_utilisation(r, m_ceilings, "", st.m_ceiling_key, achieved, unit);
  if (r.is_ceiling() && achieved > 0 && !st.m_ceiling_key.empty()) {
    const auto batch = r.details.find("sample.launches");
    add_ceiling({r.role == "sustained_ceiling" ? sustained_key(st.m_ceiling_key) : st.m_ceiling_key, achieved, unit,
                 fmt::format("{} {}{}", r.workload, r.axes_key(),
                             batch == r.details.end() || batch->second == "1"
                                 ? ""
                                 : fmt::format(" ({} launches back to back a sample)", batch->second))});
  }
}

}  // namespace itera
