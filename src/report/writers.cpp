// Writers render result sets as markdown, CSV and JSON, and `itera env` as markdown. They never
// measure. Numbers and tables come from text_format.hpp, whose fixed formats keep golden files
// byte-stable.
#include "itera/report/writers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "itera/analysis/cost.hpp"
#include "itera/analysis/precision.hpp"
#include "itera/core/errors.hpp"
#include "src/report/text_format.hpp"

namespace itera {

output_format parse_output_format(const std::string& name) {
  if (name == "md") return output_format::md;
  if (name == "csv") return output_format::csv;
  if (name == "json") return output_format::json;
  throw usage_error(fmt::format("unknown format '{}': expected md, csv or json", name));
}

void write_results(std::ostream& out, output_format f, const std::vector<result_set>& sets) {
  switch (f) {
    case output_format::md: write_markdown(out, sets); return;
    case output_format::csv: write_csv(out, sets); return;
    case output_format::json: write_json(out, sets); return;
  }
}

namespace {

using report::exact;
using report::human_bytes;
using report::human_rate;
using report::human_time_ns;
using report::joined;
using report::md_cell;
using report::md_table;
using report::sig3;
using report::string_at;

// ---------------------------------------------------------------------------------------------
// Context helpers

std::string device_label(const run_context& c) {
  std::string name = string_at(c.device, {"name"});
  if (!name.empty()) {
    const std::string v = report::variant_name(c.device);
    return v.empty() || v == name ? name : fmt::format("{} ({})", name, v);
  }
  std::string cpu = report::cpu_name(c.host);
  return cpu.empty() ? "unknown device" : cpu;
}

// ---------------------------------------------------------------------------------------------
// What each case contributes to a table

const summary* headline_stats(const case_record& r, bool* is_device) {
  if (r.device_stats) {
    *is_device = true;
    return &*r.device_stats;
  }
  *is_device = false;
  return r.host_stats ? &*r.host_stats : nullptr;
}

std::string noise_text(const summary& s) {
  if (!std::isfinite(s.relative_noise)) return "n/a";
  return fmt::format("±{:.1f}%", s.relative_noise * 100);
}

// A drift at least this large goes into a case's note. 2%: on the H200 (700 W cap) the 2048-token
// llm prefill drifted +1.8 to +2.8% over cases of 4 to 15 s, the 8192^3 GEMM ceiling +1.1 to
// +1.5%, the copies 0.0-0.1% (docs/perf/data/2026-12-01-gate-up, runs 1, 2, 4 and 10).
constexpr double drift_note_threshold = 0.02;

std::string case_note(const case_record& r) {
  std::vector<std::string> parts;
  if (r.status != case_status::ok && !r.message.empty()) parts.push_back(r.message);
  if (r.check.checked && !r.check.passed)
    parts.push_back(fmt::format("verification error {} > tolerance {}", sig3(r.check.error), sig3(r.check.tolerance)));
  if (!r.throttle.reasons.empty()) parts.push_back("throttled: " + joined(r.throttle.reasons, ", "));
  // A case that moved while it was measured: its mean is not its steady state.
  const std::optional<summary>& st = r.device_stats ? r.device_stats : r.host_stats;
  if (st && std::isfinite(st->drift) && std::abs(st->drift) >= drift_note_threshold)
    parts.push_back(fmt::format("drift {:+.1f}% (first quarter of the samples to the last)", st->drift * 100));
  return joined(parts, "; ");
}

// A column of the per-workload table that comes from the case description: an axis, a recipe
// field or the device time method. Constant ones move above the table (llama-bench).
struct described_column {
  std::string name;
  std::function<std::optional<std::string>(const case_record&)> get;
};

std::optional<std::string> axis_value(const case_record& r, const std::string& name) {
  const std::string* v = r.find_axis(name);
  return v ? std::optional<std::string>(*v) : std::nullopt;
}

// Metric columns. Known runner metrics get their conventional unit; anything else is printed
// with its own unit.
struct metric_column {
  std::string name;
  std::string header;
  double scale = 1;
  bool percent = false;
};

metric_column make_metric_column(const std::string& name, const std::string& unit,
                                 const std::vector<const case_record*>& cases) {
  metric_column c{name, name, 1, false};
  double max_v = 0;
  for (const auto* r : cases)
    if (const metric* m = r->find_metric(name); m && std::isfinite(m->value)) max_v = std::max(max_v, std::fabs(m->value));
  if (name.rfind("utilisation/", 0) == 0) {
    c.header = "% of " + name.substr(std::string("utilisation/").size());
    c.percent = true;
  } else if (unit == "FLOP/s") {
    const bool tera = max_v >= 1e12 || max_v == 0;
    c.scale = tera ? 1e12 : 1e9;
    const std::string u = tera ? "TFLOP/s" : "GFLOP/s";
    c.header = name == "throughput/flops" ? u : name + " " + u;
  } else if (unit == "B/s") {
    c.scale = 1e9;
    c.header = name == "throughput/bytes" ? "GB/s" : name == "link/theoretical" ? "link GB/s" : name + " GB/s";
  } else if (!unit.empty()) {
    c.header = fmt::format("{} ({})", name, unit);
  }
  return c;
}

std::string metric_cell(const metric_column& c, const case_record& r) {
  if (c.name == "utilisation/") {  // the merged column: whichever utilisation the case has
    for (const auto& m : r.metrics)
      if (m.name.rfind(c.name, 0) == 0 && std::isfinite(m.value))
        return fmt::format("{:.1f}% of {}", m.value * 100, m.name.substr(c.name.size()));
    return "-";
  }
  const metric* m = r.find_metric(c.name);
  if (!m || !std::isfinite(m->value)) return "-";
  if (c.percent) return fmt::format("{:.1f}%", m->value * 100);
  return sig3(m->value / c.scale);
}

void write_workload_markdown(std::ostream& out, const std::string& workload, const std::vector<const case_record*>& cases) {
  std::set<int> versions;
  for (const auto* r : cases) versions.insert(r->workload_version);
  std::vector<std::string> vtext;
  for (int v : versions) vtext.push_back(std::to_string(v));
  out << fmt::format("### {} (version {})\n\n", workload, joined(vtext, ", "));

  // Axes in declaration order (first case that has each), then recipe fields sorted by name.
  std::vector<described_column> described;
  std::set<std::string> seen_axes;
  for (const auto* r : cases)
    for (const auto& [k, v] : r->axes)
      if (seen_axes.insert(k).second)
        described.push_back({k, [k](const case_record& c) { return axis_value(c, k); }});
  std::set<std::string> field_names;
  for (const auto* r : cases)
    for (const auto& [k, v] : r->fields) field_names.insert(k);
  for (const auto& k : field_names)
    described.push_back({k, [k](const case_record& c) -> std::optional<std::string> {
                           auto it = c.fields.find(k);
                           if (it == c.fields.end()) return std::nullopt;
                           return it->second;
                         }});
  described.push_back({"backend", [](const case_record& c) -> std::optional<std::string> { return c.backend; }});
  described.push_back({"device time method", [](const case_record& c) -> std::optional<std::string> {
                         if (c.device_time_method.empty()) return std::nullopt;
                         return c.device_time_method;
                       }});

  // Constant over the cases that have the value: a skipped case records no recipe fields, which
  // must not turn a constant field into a column.
  std::vector<const described_column*> varying;
  for (const auto& d : described) {
    std::optional<std::string> first;
    bool constant = true;
    for (const auto* r : cases) {
      std::optional<std::string> v = d.get(*r);
      if (!v) continue;
      if (!first) first = v;
      else if (v != first) constant = false;
    }
    if (!constant) varying.push_back(&d);
    else if (first && d.name != "backend") out << fmt::format("- {}: {}\n", d.name, *first);  // in the set's header
  }
  out << '\n';

  // Which clock the time column shows: device time when the case has it.
  bool any_device = false, any_host = false;
  for (const auto* r : cases) {
    bool dev = false;
    if (headline_stats(*r, &dev)) (dev ? any_device : any_host) = true;
  }
  const bool mixed = any_device && any_host;
  const std::string time_header = any_device == any_host ? "median" : any_host ? "host median" : "device median";

  std::vector<std::string> metric_order;
  std::map<std::string, std::string> metric_units;
  for (const auto* r : cases)
    for (const auto& m : r->metrics)
      if (metric_units.emplace(m.name, m.unit).second) metric_order.push_back(m.name);
  // Each gemm format has its own ceiling, so utilisation metrics differ by name across cases. When
  // no case has more than one, they share a single column that names the ceiling in each cell.
  const std::string util_prefix = "utilisation/";
  std::size_t util_names = 0;
  bool one_util_per_case = true;
  for (const auto& n : metric_order) util_names += n.rfind(util_prefix, 0) == 0;
  for (const auto* r : cases) {
    std::size_t k = 0;
    for (const auto& m : r->metrics) k += m.name.rfind(util_prefix, 0) == 0;
    one_util_per_case = one_util_per_case && k <= 1;
  }
  const bool merge_util = util_names > 1 && one_util_per_case;
  std::vector<metric_column> metrics;
  bool util_column_added = false;
  for (const auto& n : metric_order) {
    if (merge_util && n.rfind(util_prefix, 0) == 0) {
      if (!util_column_added) metrics.push_back({util_prefix, "utilisation", 1, true});
      util_column_added = true;
      continue;
    }
    metrics.push_back(make_metric_column(n, metric_units[n], cases));
  }

  md_table t;
  for (const auto* d : varying) t.column(d->name, false);
  t.column("status", false);
  t.column(time_header, true);
  for (const auto& m : metrics) t.column(m.header, true);
  t.column("noise", true);
  t.column("samples", true);
  t.column("note", false);

  for (const auto* r : cases) {
    std::vector<std::string> row;
    for (const auto* d : varying) row.push_back(d->get(*r).value_or("-"));
    row.push_back(to_string(r->status));
    bool dev = false;
    const summary* s = headline_stats(*r, &dev);
    const bool has_time = s && s->count > 0 && r->status == case_status::ok;
    row.push_back(has_time ? human_time_ns(s->median) + (mixed && !dev ? " (host)" : "") : "-");
    for (const auto& m : metrics) row.push_back(r->status == case_status::ok ? metric_cell(m, *r) : "-");
    row.push_back(has_time ? noise_text(*s) : "-");
    row.push_back(s ? std::to_string(s->count) : "-");
    row.push_back(case_note(*r));
    t.rows.push_back(std::move(row));
  }
  t.write(out);
  out << '\n';

  // Stages: where the time of a case went (R1). One row per stage of each case that has them.
  bool any_stages = false;
  for (const auto* r : cases) any_stages = any_stages || !r->stages.empty();
  if (!any_stages) return;
  // Only the varying axes identify the case here: the recipe fields follow from them.
  std::vector<const described_column*> stage_keys;
  for (const auto* d : varying)
    if (seen_axes.count(d->name)) stage_keys.push_back(d);
  md_table st;
  for (const auto* d : stage_keys) st.column(d->name, false);
  st.column("stage", false);
  st.column("calls", true);
  st.column("host / call", true);
  st.column("device / call", true);
  st.column("bytes / call", true);
  st.column("memory peak", true);
  for (const auto* r : cases) {
    for (const auto& s : r->stages) {
      std::vector<std::string> row;
      for (const auto* d : stage_keys) row.push_back(d->get(*r).value_or("-"));
      row.push_back(s.path);
      row.push_back(std::to_string(s.calls));
      const double calls = s.calls ? static_cast<double>(s.calls) : 1.0;
      row.push_back(human_time_ns(s.host_ns / calls));
      row.push_back(s.device_ns < 0 ? "-" : human_time_ns(s.device_ns / calls));
      const double moved = s.bytes_read + s.bytes_written;
      row.push_back(moved > 0 ? human_bytes(moved / calls) : "-");
      row.push_back(s.memory_peak_bytes ? human_bytes(static_cast<double>(s.memory_peak_bytes)) : "-");
      st.rows.push_back(std::move(row));
    }
  }
  out << "Stages:\n\n";
  st.write(out);
  out << '\n';
}

// Load scenarios (R4): among the cases that judged themselves against latency targets
// (metric load/meets_targets), grouped by every axis but rate and batch, the highest rate that
// meets them and, at that rate, the smallest batch limit that does.
void write_operating_points(std::ostream& out, const std::vector<const case_record*>& cases) {
  // The rule itself is find_operating_points (analysis/cost.hpp; itera cost uses it too); rows by key.
  auto points = itera::find_operating_points(cases);
  if (points.empty()) return;
  std::sort(points.begin(), points.end(), [](const auto& x, const auto& y) { return x.key < y.key; });
  md_table t;
  t.column("cases", false);
  t.column("runs", true);
  t.column("highest rate meeting the targets", true);
  t.column("batch limit it needs", true);
  t.column("goodput (requests/s)", true);
  for (const auto& p : points) {
    std::vector<std::string> row = {p.key, std::to_string(p.runs)};
    if (!p.best) {
      row.insert(row.end(), {"none meets them", "-", "-"});
    } else {
      row.push_back(fmt::format("{:g}/s", p.rate));
      row.push_back(std::to_string(p.batch));
      row.push_back(fmt::format("{:.3g}", p.goodput));
    }
    t.rows.push_back(std::move(row));
  }
  out << "Operating points (load scenarios against their latency targets):\n\n";
  t.write(out);
  out << '\n';
}

// Precision (R6, R10): cases of this run that differ only in weights, lm_head, kv or compute, each
// group's decode rate against its widest case (precision_speedups), the quality figures beside it.
void write_precision(std::ostream& out, const std::vector<const case_record*>& cases) {
  const auto rows = precision_speedups(cases);
  if (rows.empty()) return;
  md_table t;
  t.column("cases", false);
  for (const auto& c : report::precision_columns()) t.column(c.name, c.numeric);
  for (const auto& r : rows) {
    std::vector<std::string> row{r.label};
    for (auto& cell : report::precision_cells(r)) row.push_back(std::move(cell));
    t.rows.push_back(std::move(row));
  }
  out << "Precision against speed (cases that differ only in weights, lm_head, kv or compute; each group's rates "
         "measured in this run, against its widest case):\n\n";
  t.write(out);
  out << '\n';
}

void write_set_markdown(std::ostream& out, const result_set& set) {
  const run_context& c = set.context;
  out << fmt::format("## {}\n\n", set.source.empty() ? "results" : set.source);
  out << fmt::format("- itera: {}{}\n", c.itera_version.empty() ? "?" : c.itera_version,
                     c.git_commit.empty() ? "" : fmt::format(" (commit {})", report::short_commit(c.git_commit)));
  out << fmt::format("- backend: {}\n", c.backend);
  out << fmt::format("- device: {}\n", device_label(c));
  if (!c.started_utc.empty()) out << fmt::format("- started: {}\n", c.started_utc);
  if (set.truncated)
    out << "- truncated: the run stopped while writing its last line; the cases before it are shown\n";
  out << '\n';

  std::vector<const case_record*> ceiling_cases;
  std::vector<std::string> workloads;
  std::map<std::string, std::vector<const case_record*>> by_workload;
  for (const auto& r : set.cases) {
    if (r.is_ceiling()) {
      ceiling_cases.push_back(&r);
      continue;
    }
    auto& v = by_workload[r.workload];
    if (v.empty()) workloads.push_back(r.workload);
    v.push_back(&r);
  }

  if (!set.ceilings.empty() || !ceiling_cases.empty()) {
    out << "### Ceilings measured in this run\n\n";
    if (!set.ceilings.empty()) {
      md_table t;
      t.column("ceiling", false);
      t.column("value", true);
      t.column("measured by", false);
      for (const auto& ce : set.ceilings) t.rows.push_back({ce.key, human_rate(ce.value, ce.unit), ce.how});
      t.write(out);
      out << '\n';
    }
    // A ceiling that could not be measured leaves utilisation against it empty: say why.
    bool header = false;
    for (const auto* r : ceiling_cases) {
      if (r->status == case_status::ok) continue;
      if (!header) out << "Ceiling measurements that did not complete:\n\n";
      header = true;
      out << fmt::format("- {} {}: {}{}\n", r->workload, r->axes_key(), to_string(r->status),
                         r->message.empty() ? "" : ": " + md_cell(r->message));
    }
    if (header) out << '\n';
  }

  if (workloads.empty()) out << "No cases.\n\n";
  for (const auto& w : workloads) {
    write_workload_markdown(out, w, by_workload[w]);
    write_operating_points(out, by_workload[w]);
    write_precision(out, by_workload[w]);
  }
}

// ---------------------------------------------------------------------------------------------
// CSV

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string r = "\"";
  for (char c : s) {
    if (c == '"') r += '"';
    r += c;
  }
  return r + '"';
}

const percentile_value* find_percentile(const summary& s, double q) {
  for (const auto& p : s.percentiles)
    if (std::fabs(p.q - q) < 1e-9) return &p;
  return nullptr;
}

constexpr std::pair<double, const char*> csv_percentiles[] = {{0.90, "p90"}, {0.95, "p95"}, {0.99, "p99"}, {0.999, "p99.9"}};

// A summary's CSV columns: these, two a percentile, then the tail's.
constexpr const char* summary_head[] = {"count", "min_ns", "median_ns", "mean_ns", "stdev_ns", "max_ns"};
constexpr const char* summary_tail[] = {"median_ci_low_ns", "median_ci_high_ns", "relative_noise", "drift"};

void summary_header(std::vector<std::string>& h, const std::string& p) {
  for (const char* n : summary_head) h.push_back(p + n);
  for (const auto& [q, name] : csv_percentiles) {
    h.push_back(fmt::format("{}{}_ns", p, name));
    h.push_back(fmt::format("{}{}_reliable", p, name));
  }
  for (const char* n : summary_tail) h.push_back(p + n);
}

void summary_cells(std::vector<std::string>& row, const std::optional<summary>& s) {
  if (!s) {
    row.insert(row.end(), std::size(summary_head) + 2 * std::size(csv_percentiles) + std::size(summary_tail), "");
    return;
  }
  row.push_back(std::to_string(s->count));
  for (double v : {s->min, s->median, s->mean, s->stdev, s->max}) row.push_back(exact(v));
  for (const auto& [q, name] : csv_percentiles) {
    const percentile_value* p = find_percentile(*s, q);
    row.push_back(p ? exact(p->value) : "");
    row.push_back(p ? (p->reliable ? "true" : "false") : "");
  }
  row.push_back(exact(s->median_ci_low));
  row.push_back(exact(s->median_ci_high));
  row.push_back(exact(s->relative_noise));
  row.push_back(std::isnan(s->drift) ? "" : exact(s->drift));
}

// ---------------------------------------------------------------------------------------------
// itera env

std::string env_scalar(const std::string& key, const ojson& v) {
  if (v.is_null()) return "-";
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_integer() || v.is_number_unsigned()) {
    std::string s = v.dump();
    const bool bytes_key = key.size() >= 6 && key.compare(key.size() - 6, 6, "_bytes") == 0;
    if (bytes_key && v.get<double>() >= 1024) s += fmt::format(" ({})", human_bytes(v.get<double>()));
    return s;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return std::isfinite(d) ? fmt::format("{:.6g}", d) : "-";
  }
  if (v.is_string()) return v.get<std::string>().empty() ? "-" : v.get<std::string>();
  if (v.is_array()) {
    if (v.empty()) return "none";
    bool scalars = true;
    for (const auto& e : v) scalars = scalars && !e.is_object() && !e.is_array();
    if (scalars) {
      std::string s;
      for (const auto& e : v) s += (s.empty() ? "" : ", ") + env_scalar("", e);
      return s;
    }
  }
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool is_record_array(const ojson& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const auto& e : v)
    if (!e.is_object()) return false;
  return true;
}

// Nested objects become dotted property names so any shape renders as one two-column table;
// arrays of objects (per-link, per-format lists) are set aside to render as tables of their own.
void flatten_into(md_table& t, const std::string& prefix, const ojson& v,
                  std::vector<std::pair<std::string, const ojson*>>& records) {
  if (v.is_object() && !v.empty()) {
    for (const auto& [k, e] : v.items()) flatten_into(t, prefix.empty() ? k : prefix + "." + k, e, records);
    return;
  }
  if (is_record_array(v)) {
    records.emplace_back(prefix, &v);
    return;
  }
  const auto dot = prefix.rfind('.');
  t.rows.push_back({prefix, env_scalar(dot == std::string::npos ? prefix : prefix.substr(dot + 1), v)});
}

void write_record_table(std::ostream& out, const ojson& v);

void write_property_table(std::ostream& out, const ojson& v, const std::set<std::string>& skip = {}) {
  if (!v.is_object()) {
    out << md_cell(env_scalar("", v)) << "\n\n";
    return;
  }
  md_table t;
  t.column("property", false);
  t.column("value", false);
  std::vector<std::pair<std::string, const ojson*>> records;
  for (const auto& [k, e] : v.items())
    if (!skip.count(k)) flatten_into(t, k, e, records);
  if (!t.rows.empty()) {
    t.write(out);
    out << '\n';
  } else if (records.empty()) {
    out << "(nothing reported)\n\n";
  }
  for (const auto& [name, r] : records) {
    out << fmt::format("{}:\n\n", name);
    write_record_table(out, *r);
  }
}

// An array of objects (the formats table) as one table whose columns are the union of keys.
void write_record_table(std::ostream& out, const ojson& v) {
  std::vector<std::string> keys;
  for (const auto& e : v) {
    if (!e.is_object()) continue;
    for (const auto& [k, x] : e.items())
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  if (keys.empty()) {
    out << env_scalar("", v) << "\n\n";
    return;
  }
  md_table t;
  for (const auto& k : keys) t.column(k, false);
  for (const auto& e : v) {
    if (!e.is_object()) continue;
    std::vector<std::string> row;
    for (const auto& k : keys) row.push_back(e.contains(k) ? env_scalar(k, e.at(k)) : "-");
    t.rows.push_back(std::move(row));
  }
  t.write(out);
  out << '\n';
}

void write_gpu_section(std::ostream& out, const ojson& gpu) {
  out << "## GPU\n\n";
  if (!gpu.is_object()) {
    write_property_table(out, gpu);
    return;
  }
  const bool available = gpu.value("available", false) || (gpu.contains("devices") && !gpu.at("devices").empty());
  if (!available) {
    std::string reason = string_at(gpu, {"reason"});
    out << fmt::format("No GPU available: {}\n\n", reason.empty() ? "no reason given" : md_cell(reason));
  }
  // Properties shared by all devices (driver, CUDA driver version, ...), then one table per device.
  ojson shared = ojson::object();
  for (const auto& [k, e] : gpu.items())
    if (k != "available" && k != "devices" && k != "reason") shared[k] = e;
  if (!shared.empty()) write_property_table(out, shared);
  if (!gpu.contains("devices")) return;
  const ojson& devices = gpu.at("devices");
  if (!devices.is_array()) {
    write_property_table(out, devices);
    return;
  }
  std::size_t position = 0;
  for (const auto& d : devices) {
    std::string index = d.is_object() && d.contains("index") ? env_scalar("index", d.at("index")) : std::to_string(position);
    std::string name = string_at(d, {"name"});
    out << fmt::format("### GPU {}{}\n\n", index, name.empty() ? "" : ": " + name);
    write_property_table(out, d, {"index", "name"});
    ++position;
  }
}

}  // namespace

// Markdown layout: one "## <source>" section per result set with a context list (itera version and
// commit, backend, device, start time), the ceilings measured, then one table per workload.
void write_markdown(std::ostream& out, const std::vector<result_set>& sets) {
  // Blocks each end with a blank line; the document ends with exactly one newline.
  std::ostringstream text;
  text << "# itera results\n\n";
  if (sets.empty()) text << "No results.\n";
  for (const auto& s : sets) write_set_markdown(text, s);
  report::write_document(out, text.str());
}

// CSV columns, in this order (to be published in the user docs; the golden test pins it):
//   source, workload, workload_version, backend, role,
//   axis.<name>...   union over all cases, in the order axes are first seen
//   field.<name>...  union of recipe fields, sorted by name
//   status, message,
//   device.<stat>..., host.<stat>...  where <stat> is count, min_ns, median_ns, mean_ns, stdev_ns,
//       max_ns, p90_ns, p90_reliable, p95_ns, p95_reliable, p99_ns, p99_reliable, p99.9_ns,
//       p99.9_reliable, median_ci_low_ns, median_ci_high_ns, relative_noise (empty without stats)
//   percentile_method, device_time_method, warmup_count, warmup_ns, stop_reason,
//   flops, bytes_read, bytes_written   (per repetition)
//   metric.<name>... union of metric names, sorted by name, value in the metric's own SI unit
//   verification.checked, verification.passed, verification.error, verification.tolerance,
//   throttle.reasons   (joined by ';')
// Numbers are the shortest text that reads back to the same double. Stages and raw samples are
// only in the JSON output. Fields are quoted as RFC 4180 says; lines end with LF.
void write_csv(std::ostream& out, const std::vector<result_set>& sets) {
  std::vector<std::string> axes;
  std::set<std::string> fields, metrics;
  for (const auto& s : sets)
    for (const auto& r : s.cases) {
      for (const auto& [k, v] : r.axes)
        if (std::find(axes.begin(), axes.end(), k) == axes.end()) axes.push_back(k);
      for (const auto& [k, v] : r.fields) fields.insert(k);
      for (const auto& m : r.metrics) metrics.insert(m.name);
    }

  std::vector<std::string> h = {"source", "workload", "workload_version", "backend", "role"};
  for (const auto& a : axes) h.push_back("axis." + a);
  for (const auto& f : fields) h.push_back("field." + f);
  h.push_back("status");
  h.push_back("message");
  summary_header(h, "device.");
  summary_header(h, "host.");
  for (const char* n : {"percentile_method", "device_time_method", "warmup_count", "warmup_ns", "stop_reason", "flops",
                        "bytes_read", "bytes_written"})
    h.push_back(n);
  for (const auto& m : metrics) h.push_back("metric." + m);
  for (const char* n : {"verification.checked", "verification.passed", "verification.error", "verification.tolerance",
                        "throttle.reasons"})
    h.push_back(n);

  auto write_row = [&](const std::vector<std::string>& row) {
    for (std::size_t i = 0; i < row.size(); ++i) out << (i ? "," : "") << csv_field(row[i]);
    out << '\n';
  };
  write_row(h);

  for (const auto& s : sets) {
    for (const auto& r : s.cases) {
      std::vector<std::string> row = {s.source, r.workload, std::to_string(r.workload_version), r.backend, r.role};
      for (const auto& a : axes) row.push_back(axis_value(r, a).value_or(""));
      for (const auto& f : fields) {
        auto it = r.fields.find(f);
        row.push_back(it == r.fields.end() ? "" : it->second);
      }
      row.push_back(to_string(r.status));
      row.push_back(r.message);
      summary_cells(row, r.device_stats);
      summary_cells(row, r.host_stats);
      row.push_back(r.device_stats ? r.device_stats->percentile_method
                    : r.host_stats ? r.host_stats->percentile_method
                                   : "");
      row.push_back(r.device_time_method);
      row.push_back(std::to_string(r.warmup_count));
      row.push_back(exact(r.warmup_ns));
      row.push_back(r.stop_reason);
      row.push_back(exact(r.flops));
      row.push_back(exact(r.bytes_read));
      row.push_back(exact(r.bytes_written));
      for (const auto& m : metrics) {
        const metric* x = r.find_metric(m);
        row.push_back(x ? exact(x->value) : "");
      }
      row.push_back(r.check.checked ? "true" : "false");
      row.push_back(r.check.checked ? (r.check.passed ? "true" : "false") : "");
      row.push_back(r.check.checked ? exact(r.check.error) : "");
      row.push_back(r.check.checked ? exact(r.check.tolerance) : "");
      row.push_back(joined(r.throttle.reasons, ";"));
      write_row(row);
    }
  }
}

void write_json(std::ostream& out, const std::vector<result_set>& sets) {
  ojson doc = {{"schema", "itera.report/1"}, {"results", ojson::array()}};
  for (const auto& s : sets) {
    ojson ceilings = ojson::array();
    for (const auto& c : s.ceilings) ceilings.push_back(to_json(c));
    ojson cases = ojson::array();
    for (const auto& r : s.cases) cases.push_back(to_json(r));
    doc["results"].push_back({{"source", s.source},
                              {"truncated", s.truncated},
                              {"context", to_json(s.context)},
                              {"ceilings", std::move(ceilings)},
                              {"cases", std::move(cases)}});
  }
  out << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
}

// `itera env` in markdown: sections itera, Host, GPU (one property table per device), Software
// (libraries), Formats, then any other top-level key. Any shape renders; missing keys are skipped.
void write_env_markdown(std::ostream& to, const ojson& env) {
  std::ostringstream out;
  out << "# itera env\n\n";
  if (!env.is_object() || env.empty()) {
    to << "# itera env\n\nNothing reported.\n";
    return;
  }
  const std::vector<std::pair<std::string, std::string>> known = {
      {"itera", "itera"}, {"host", "Host"}, {"gpu", "GPU"}, {"libraries", "Software"}, {"formats", "Formats"}};
  auto render = [&](const std::string& key, const std::string& title) {
    const ojson& v = env.at(key);
    if (key == "gpu") {
      write_gpu_section(out, v);
      return;
    }
    out << fmt::format("## {}\n\n", title);
    if (v.is_array()) write_record_table(out, v);
    else write_property_table(out, v);
  };
  for (const auto& [key, title] : known)
    if (env.contains(key)) render(key, title);
  for (const auto& [key, v] : env.items()) {
    bool is_known = false;
    for (const auto& k : known) is_known = is_known || k.first == key;
    if (!is_known) render(key, key);
  }
  report::write_document(to, out.str());
}

}  // namespace itera
