#pragma once
#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "itera/core/backend.hpp"
#include "itera/core/stats.hpp"

namespace itera {

using ojson = nlohmann::ordered_json;

// Results are JSON lines (docs/results.md). Line 1 is the context; then ceiling and case lines in the
// order they were measured. Each line is written and flushed when it is complete, so a killed run
// leaves every finished case readable.
inline constexpr const char* result_schema = "itera.result/1";

enum class case_status { ok, failed, skipped };
const char* to_string(case_status s);
case_status case_status_from_string(const std::string& s);

// Where and with what a run was made. `software` is part of the recipe; `host` and `devices` are the
// hardware group (comparing across them is a GPU comparison, allowed).
struct run_context {
  std::string schema = result_schema;
  std::string itera_version;
  std::string git_commit;
  std::string build_type;
  std::string cuda_architectures;
  std::string started_utc;  // ISO 8601
  std::string command;      // the command line, for the record
  std::string backend;      // "cuda" | "cpu"
  ojson host = ojson::object();      // cpu model, cores, memory, os
  ojson device = ojson::object();    // fingerprint of the device used (empty for cpu)
  ojson software = ojson::object();  // driver, cuda runtime, cublasLt, nccl, ...
};

// A ceiling measured in this run (DESIGN.md, Definitions: Utilisation), e.g. key "copy.d2d" in
// bytes/s or "gemm.bf16" in FLOP/s.
struct ceiling {
  std::string key;
  double value = 0;
  std::string unit;  // "B/s" | "FLOP/s"
  std::string how;   // what was measured: "transfer direction=d2d bytes=1073741824"
};

// The key of what the card sustains beside ceiling `key` (a "sustained_ceiling" case: batches of
// launches back to back): "gemm.bf16" -> "gemm.bf16.sustained".
inline constexpr std::string_view sustained_suffix = ".sustained";
inline std::string sustained_key(const std::string& key) { return key + std::string(sustained_suffix); }

struct metric {
  std::string name;  // hierarchical: "throughput/flops", "utilisation/gemm.bf16"
  double value = 0;
  std::string unit;
};

// One named stage, aggregated over every repetition of a case (stage recorder).
struct stage_record {
  std::string path;  // "prefill/attention"
  int depth = 0;
  std::uint64_t calls = 0;
  double host_ns = 0;    // total over calls
  double device_ns = -1; // total over calls; -1 when the stage had no device clock
  std::string device_time_method;
  double bytes_read = 0, bytes_written = 0, flops = 0;  // declared by the workload, totals
  std::uint64_t memory_peak_bytes = 0;  // allocator peak while the stage was open
  std::uint64_t memory_end_bytes = 0;   // allocator bytes in use when the stage last closed
  // The stage's time in each timed repetition, in order (device time where it did device work,
  // else host; every call in that repetition added): empty where the runner marked no repetitions
  // (a session's lanes, a scenario timing itself, a sustained ceiling's batched samples). Results
  // files keep it for top-level stages, where a case has at most 32 of them.
  std::vector<double> repetition_ns;

  // Its time in one repetition: the median of repetition_ns (the statistic the case's own rate and
  // the ceilings use), or mean_ns where there are none. -1 with no time at all.
  double per_repetition_ns(double repetitions) const;
  // Its mean a repetition: its total (device time where it did device work, else host) over
  // `repetitions`; -1 for none.
  double mean_ns(double repetitions) const;
};

struct verification {
  bool checked = false;
  bool passed = false;
  double error = 0;       // normalised error ||out-ref|| / ||ref||
  double tolerance = 0;
  std::string method;     // "cpu reference over 64 sampled rows", ...
};

struct case_record {
  std::string workload;
  int workload_version = 0;
  std::string backend;
  std::string role = "case";  // "case" | "ceiling" | "sustained_ceiling" (is_ceiling())
  std::vector<std::pair<std::string, std::string>> axes;  // in declaration order
  std::map<std::string, std::string> fields;   // recipe fields the workload set (precision.*, ...)
  std::map<std::string, std::string> details;  // how it ran, not part of the recipe (algorithm autotuning chose)
  case_status status = case_status::ok;
  std::string message;  // failure or skip reason

  std::size_t warmup_count = 0;
  double warmup_ns = 0;
  std::string stop_reason;
  std::string device_time_method;
  std::vector<double> host_ns;    // raw samples: one repetition each
  std::vector<double> device_ns;  // raw samples: one repetition each
  std::optional<summary> host_stats, device_stats;

  double flops = 0, bytes_read = 0, bytes_written = 0;  // per repetition, declared by the workload
  std::vector<metric> metrics;
  verification check;
  throttle_sample throttle;
  std::vector<stage_record> stages;

  std::string axes_key() const;  // "M=1024 N=1024 K=1024 format=bf16"
  const std::string* find_axis(std::string_view name) const;  // nullptr when the case has no such axis
  const metric* find_metric(const std::string& name) const;
  const stage_record* find_stage(std::string_view path) const;  // nullptr when the case has no such path
  // A ceiling measurement: "ceiling" (one launch a sample), or "sustained_ceiling" (batches of
  // launches back to back: what the card sustains; its key gains ".sustained").
  bool is_ceiling() const { return role == "ceiling" || role == "sustained_ceiling"; }
  // The stages at `paths` together in one repetition: their times added repetition by repetition,
  // the median of those sums (stage_record::per_repetition_ns for several stages), or their totals'
  // mean over the case's samples where any lacks repetition times. -1 when a path is absent.
  double stages_per_repetition_ns(std::span<const std::string> paths) const;
};

ojson to_json(const run_context& c);
ojson to_json(const ceiling& c);
ojson to_json(const case_record& r);
run_context context_from_json(const ojson& j);
ceiling ceiling_from_json(const ojson& j);
case_record case_from_json(const ojson& j);
ojson to_json(const summary& s);
summary summary_from_json(const ojson& j);

// Everything one results file holds.
struct result_set {
  std::string source;  // file name
  run_context context;
  std::vector<ceiling> ceilings;
  std::vector<case_record> cases;
  bool truncated = false;  // the last line was cut short (killed run); what came before is kept
};

// Reads a JSON-lines results file. Throws input_error naming the file and line when it is
// unreadable, empty, not an itera result or of an unknown schema.
result_set read_results(const std::string& path);

// Appends lines and flushes after each: the streaming writer used while a run goes on.
class result_stream {
 public:
  // "-" writes to stdout. An existing file is refused (usage_error): results are never overwritten.
  // A failed write throws std::runtime_error.
  explicit result_stream(const std::string& path);
  ~result_stream();
  result_stream(const result_stream&) = delete;
  result_stream& operator=(const result_stream&) = delete;
  void write(const run_context& c);
  void write(const ceiling& c);
  void write(const case_record& r);
  const std::string& path() const { return m_path; }

 private:
  void write_line(const ojson& j);
  std::string m_path;
  std::ostream* m_out = nullptr;
  std::unique_ptr<std::ostream> m_file;
};

}  // namespace itera
