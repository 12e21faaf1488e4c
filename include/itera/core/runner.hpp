#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "itera/core/backend.hpp"
#include "itera/core/recorder.hpp"
#include "itera/core/result.hpp"
#include "itera/core/stats.hpp"
#include "itera/core/workload.hpp"

namespace itera {

struct run_options {
  std::size_t warmup_min_count = 3;  // warm-up: at least this many repetitions ...
  double warmup_min_time_s = 0.05;   // ... and at least this long; reported, never sampled
  stopping_rule stop;
  bool verify = true;                // workloads verify against the cpu reference before timing
  bool quiet = false;                // no progress line on stderr
  // Sustained ceiling cases (role "sustained_ceiling"): each sample launches the work back to back
  // for at least this long and records the time a launch (nvbench's batch time), loading the card
  // as a long workload does. A "ceiling" case takes one launch a sample and leaves the card idle
  // while each is read: a power-capped card spends that idle budget on the next launch (an H200's
  // 8192^3 GEMM busy 85% of the time at 1.64-1.67 GHz, against a held prefill's 99% and 1.54 GHz).
  // 0: one launch a sample for those too.
  double ceiling_batch_s = 0.02;
};

// Throws usage_error for settings that contradict each other (--min-samples above --max-samples,
// --min-time above --max-time, a noise target that is not positive).
void validate(const run_options& options);

// Watches clocks and throttle reasons while a case runs (NVML, loaded at run time).
class throttle_monitor {
 public:
  virtual ~throttle_monitor() = default;
  virtual void begin() = 0;
  virtual throttle_sample end() = 0;
};
// Returns nullptr when NVML is not present or the device is not an NVIDIA GPU.
std::unique_ptr<throttle_monitor> make_nvml_monitor(int device_index);

// Ceilings measured in this run, by key ("copy.d2d", "gemm.bf16", ...).
using ceiling_table = std::map<std::string, ceiling>;

// Appends utilisation/<prefix><key> = achieved / ceiling `key`, and the same against what the card
// sustains (sustained_key) where that was measured; with a unit, only ceilings of that unit.
void add_utilisation(case_record& r, const ceiling_table& ceilings, const std::string& prefix,
                     const std::string& key, double achieved, const std::string& unit = "");

// The handle a workload's case function gets (nvbench's state): axis values, the backend, the
// declarations of work and precision, and exec() which the runner times.
class case_state {
 public:
  case_state(backend& dev, const run_options& options, case_record& record, const ceiling_table& ceilings,
             std::unique_ptr<device_timer> timer, device_clock* clock, memory_tracker* memory);

  std::int64_t get_int(std::string_view axis) const;
  const std::string& get_string(std::string_view axis) const;
  backend& device() { return m_backend; }
  const run_options& options() const { return m_options; }
  const ceiling_table& ceilings() const { return m_ceilings; }

  // Recipe fields the case really ran with (R6: "precision.input", "precision.compute", ...).
  void set_field(const std::string& key, const std::string& value);
  // How the case ran that is not part of the recipe (the algorithm autotuning chose): recorded,
  // never a reason to refuse a comparison.
  void set_detail(const std::string& key, const std::string& value);
  // Replaces the backend's default timer for this case, before exec(), when that timer cannot see
  // all of the work (pageable copies stage through host memory outside CUPTI's records).
  void use_timer(std::unique_ptr<device_timer> timer);
  // Work one repetition does, for throughput and utilisation.
  void set_work(double flops, double bytes_read, double bytes_written);
  // Compares achieved throughput with this ceiling ("copy.d2d", "gemm.bf16") when it was measured.
  void set_ceiling_key(const std::string& key) { m_ceiling_key = key; }
  void add_metric(const std::string& name, double value, const std::string& unit);
  void set_verification(bool passed, double error, double tolerance, const std::string& method);
  [[noreturn]] void skip(const std::string& reason);

  // Times `launch`, which enqueues one repetition of the work: warm-up, then repetitions until the
  // stopping rule holds. Each sample's device time comes from the backend's timer (read only after
  // the work finished) and its host time from the steady clock around launch and wait. A sustained
  // ceiling's sample is a batch of launches (run_options::ceiling_batch_s; detail sample.launches),
  // its times divided by their count.
  void exec(const std::function<void()>& launch);

  // Instead of exec(), for a scenario that makes its own repetitions (the requests of a server
  // run): one sample per repetition, each a duration in ns on the clock `method` names (the host's
  // steady clock for latencies seen by a client). The samples are the case's distribution; no
  // stopping rule applies.
  void record_samples(std::vector<double> samples_ns, const std::string& method);

  // Runs `fn` on the finished record, after the stage times are resolved and the derived metrics
  // added: for figures that come from the stages (time to first token from the prefill stage).
  // An exception from it fails the case with its message.
  void on_finish(std::function<void(case_record&)> fn) { m_on_finish = std::move(fn); }

  stage_recorder& stages() { return m_stages; }
  bool executed() const { return m_executed; }

 private:
  backend& m_backend;
  const run_options& m_options;
  case_record& m_record;
  const ceiling_table& m_ceilings;
  std::unique_ptr<device_timer> m_timer;
  stage_recorder m_stages;
  std::string m_ceiling_key;
  std::function<void(case_record&)> m_on_finish;
  bool m_executed = false;
  friend class runner;
};

// Progress and log lines go to stderr only; results never do.
class progress {
 public:
  explicit progress(bool enabled);
  void update(const std::string& line);  // overwrites the current line on a TTY
  void done();
  static void log(const std::string& line);  // a plain stderr line

 private:
  bool m_enabled;
  bool m_dirty = false;
};

// Runs workloads case by case. A case that throws is recorded as failed with its message and the
// run goes on; one that calls skip() is recorded as skipped.
class runner {
 public:
  runner(backend& dev, run_options options, result_stream* out);

  // Runs every case of `w` (product of axes with overrides). Returns the records.
  std::vector<case_record> run(const workload_decl& w, const std::vector<axis_values>& cases,
                               const std::string& role = "case");
  case_record run_one(const workload_decl& w, const axis_values& values, const std::string& role = "case");

  // Ceilings (measured by src/lib/suite.cpp) that later cases compare their throughput with.
  const ceiling_table& ceilings() const { return m_ceilings; }
  // The same ceilings in the order they were measured: the order the results file holds them in.
  const std::vector<ceiling>& ceilings_in_order() const { return m_ceiling_order; }
  void add_ceiling(const ceiling& c);
  backend& device() { return m_backend; }
  const run_options& options() const { return m_options; }

  std::size_t failed_count() const { return m_failed; }
  progress& progress_line() { return m_progress; }

 private:
  void finish_record(case_record& r, case_state& st);
  void add_derived_metrics(case_record& r, case_state& st);
  backend& m_backend;
  run_options m_options;
  result_stream* m_out;
  ceiling_table m_ceilings;
  std::vector<ceiling> m_ceiling_order;
  std::unique_ptr<throttle_monitor> m_monitor;
  progress m_progress;
  std::size_t m_failed = 0;
};

}  // namespace itera
