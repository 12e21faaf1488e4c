#include "itera/core/result.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/core/stats.hpp"

namespace itera {

const char* to_string(case_status s) {
  switch (s) {
    case case_status::ok: return "ok";
    case case_status::failed: return "failed";
    case case_status::skipped: return "skipped";
  }
  return "?";
}

case_status case_status_from_string(const std::string& s) {
  if (s == "ok") return case_status::ok;
  if (s == "failed") return case_status::failed;
  if (s == "skipped") return case_status::skipped;
  throw input_error(fmt::format("unknown case status '{}' (expected ok, failed or skipped)", s));
}

std::string case_record::axes_key() const {
  std::string key;
  for (const auto& [name, value] : axes) {
    if (!key.empty()) key += ' ';
    key += name;
    key += '=';
    key += value;
  }
  return key;
}

const std::string* case_record::find_axis(std::string_view name) const {
  for (const auto& [n, v] : axes)
    if (n == name) return &v;
  return nullptr;
}

const metric* case_record::find_metric(const std::string& name) const {
  for (const auto& m : metrics)
    if (m.name == name) return &m;
  return nullptr;
}

double stage_record::mean_ns(double repetitions) const {
  return repetitions > 0 ? (device_ns > 0 ? device_ns : host_ns) / repetitions : -1.0;
}

double stage_record::per_repetition_ns(double repetitions) const {
  return repetition_ns.empty() ? mean_ns(repetitions) : summarize(repetition_ns).median;
}

const stage_record* case_record::find_stage(std::string_view path) const {
  for (const auto& s : stages)
    if (s.path == path) return &s;
  return nullptr;
}

double case_record::stages_per_repetition_ns(std::span<const std::string> paths) const {
  const double repetitions = static_cast<double>(device_ns.size());
  std::vector<double> sums;  // a sum a repetition while every stage has repetition times
  bool marked = true;
  double mean = 0;
  for (const auto& p : paths) {
    const stage_record* s = find_stage(p);
    if (!s) return -1;
    mean += s->mean_ns(repetitions);
    marked = marked && !s->repetition_ns.empty() && (sums.empty() || s->repetition_ns.size() == sums.size());
    if (!marked) continue;
    if (sums.empty()) sums.assign(s->repetition_ns.size(), 0.0);
    for (std::size_t i = 0; i < sums.size(); ++i) sums[i] += s->repetition_ns[i];
  }
  if (marked && !sums.empty()) return summarize(sums).median;
  return repetitions > 0 ? mean : -1.0;
}

namespace {

// JSON has no infinity: non-finite numbers are written as null and read back as infinity.
ojson number(double v) { return std::isfinite(v) ? ojson(v) : ojson(nullptr); }
double number_from(const ojson& j) {
  return j.is_null() ? std::numeric_limits<double>::infinity() : j.get<double>();
}

ojson samples_to_json(const std::vector<double>& v) {
  ojson a = ojson::array();
  for (double x : v) a.push_back(x);
  return a;
}

}  // namespace

ojson to_json(const summary& s) {
  ojson pct = ojson::object();
  for (const auto& p : s.percentiles) {
    pct[fmt::format("p{:g}", p.q * 100)] = {{"q", p.q}, {"value", p.value}, {"reliable", p.reliable}};
  }
  return {{"count", s.count},
          {"min", s.min},
          {"max", s.max},
          {"mean", s.mean},
          {"stdev", s.stdev},
          {"median", s.median},
          {"percentiles", pct},
          {"percentile_method", s.percentile_method},
          {"median_ci", {{"low", s.median_ci_low}, {"high", s.median_ci_high}, {"confidence", s.confidence}}},
          {"relative_noise", number(s.relative_noise)},
          {"drift", number(s.drift)}};
}

summary summary_from_json(const ojson& j) {
  summary s;
  s.count = j.at("count").get<std::size_t>();
  s.min = j.at("min").get<double>();
  s.max = j.at("max").get<double>();
  s.mean = j.at("mean").get<double>();
  s.stdev = j.at("stdev").get<double>();
  s.median = j.at("median").get<double>();
  for (const auto& [name, p] : j.at("percentiles").items()) {
    s.percentiles.push_back({p.at("q").get<double>(), p.at("value").get<double>(), p.at("reliable").get<bool>()});
  }
  s.percentile_method = j.at("percentile_method").get<std::string>();
  s.median_ci_low = j.at("median_ci").at("low").get<double>();
  s.median_ci_high = j.at("median_ci").at("high").get<double>();
  s.confidence = j.at("median_ci").at("confidence").get<double>();
  s.relative_noise = number_from(j.at("relative_noise"));
  // Absent in results written before it was recorded; null when not measured (NaN either way).
  if (const auto d = j.find("drift"); d != j.end() && !d->is_null()) s.drift = d->get<double>();
  return s;
}

ojson to_json(const run_context& c) {
  return {{"type", "context"},
          {"schema", c.schema},
          {"itera", {{"version", c.itera_version},
                     {"git_commit", c.git_commit},
                     {"build_type", c.build_type},
                     {"cuda_architectures", c.cuda_architectures}}},
          {"started_utc", c.started_utc},
          {"command", c.command},
          {"backend", c.backend},
          {"host", c.host},
          {"device", c.device},
          {"software", c.software}};
}

run_context context_from_json(const ojson& j) {
  run_context c;
  c.schema = j.at("schema").get<std::string>();
  const auto& it = j.at("itera");
  c.itera_version = it.at("version").get<std::string>();
  c.git_commit = it.at("git_commit").get<std::string>();
  c.build_type = it.value("build_type", "");
  c.cuda_architectures = it.value("cuda_architectures", "");
  c.started_utc = j.value("started_utc", "");
  c.command = j.value("command", "");
  c.backend = j.at("backend").get<std::string>();
  c.host = j.value("host", ojson::object());
  c.device = j.value("device", ojson::object());
  c.software = j.value("software", ojson::object());
  return c;
}

ojson to_json(const ceiling& c) {
  return {{"type", "ceiling"}, {"key", c.key}, {"value", c.value}, {"unit", c.unit}, {"how", c.how}};
}

ceiling ceiling_from_json(const ojson& j) {
  return {j.at("key").get<std::string>(), j.at("value").get<double>(), j.at("unit").get<std::string>(),
          j.value("how", "")};
}

ojson to_json(const case_record& r) {
  ojson axes = ojson::object();
  for (const auto& [k, v] : r.axes) axes[k] = v;
  ojson fields = ojson::object();
  for (const auto& [k, v] : r.fields) fields[k] = v;
  ojson details = ojson::object();
  for (const auto& [k, v] : r.details) details[k] = v;
  ojson metrics = ojson::array();
  for (const auto& m : r.metrics) metrics.push_back({{"name", m.name}, {"value", number(m.value)}, {"unit", m.unit}});
  ojson stages = ojson::array();
  const auto top_level =
      std::count_if(r.stages.begin(), r.stages.end(), [](const stage_record& s) { return s.depth == 0; });
  for (const auto& s : r.stages) {
    stages.push_back({{"path", s.path},
                      {"depth", s.depth},
                      {"calls", s.calls},
                      {"host_ns", s.host_ns},
                      {"device_ns", s.device_ns},
                      {"device_time_method", s.device_time_method},
                      {"bytes_read", s.bytes_read},
                      {"bytes_written", s.bytes_written},
                      {"flops", s.flops},
                      {"memory_peak_bytes", s.memory_peak_bytes},
                      {"memory_end_bytes", s.memory_end_bytes}});
    // Top-level stages only, and only where they are few: more would multiply the file by their
    // count (a ViT's stages by layer over thousands of repetitions); read back, they fall back to
    // their mean.
    if (s.depth == 0 && top_level <= 32 && !s.repetition_ns.empty())
      stages.back()["repetition_ns"] = samples_to_json(s.repetition_ns);
  }
  ojson j = {{"type", "case"},
             {"workload", r.workload},
             {"workload_version", r.workload_version},
             {"backend", r.backend},
             {"role", r.role},
             {"axes", axes},
             {"fields", fields},
             {"details", details},
             {"status", to_string(r.status)},
             {"message", r.message},
             {"warmup", {{"count", r.warmup_count}, {"time_ns", r.warmup_ns}}},
             {"stop_reason", r.stop_reason},
             {"device_time_method", r.device_time_method},
             {"work", {{"flops", r.flops}, {"bytes_read", r.bytes_read}, {"bytes_written", r.bytes_written}}},
             {"metrics", metrics},
             {"verification", {{"checked", r.check.checked},
                               {"passed", r.check.passed},
                               {"error", number(r.check.error)},
                               {"tolerance", r.check.tolerance},
                               {"method", r.check.method}}},
             {"throttle", {{"available", r.throttle.available},
                           {"reasons_mask", r.throttle.reasons_mask},
                           {"reasons", r.throttle.reasons},
                           {"sm_clock_mhz_min", r.throttle.sm_clock_mhz_min},
                           {"sm_clock_mhz_max", r.throttle.sm_clock_mhz_max},
                           {"temperature_c_max", r.throttle.temperature_c_max},
                           {"power_w_max", r.throttle.power_w_max}}},
             {"stages", stages}};
  j["stats"] = ojson::object();
  if (r.device_stats) j["stats"]["device"] = to_json(*r.device_stats);
  if (r.host_stats) j["stats"]["host"] = to_json(*r.host_stats);
  j["samples"] = {{"device_ns", samples_to_json(r.device_ns)}, {"host_ns", samples_to_json(r.host_ns)}};
  return j;
}

case_record case_from_json(const ojson& j) {
  case_record r;
  r.workload = j.at("workload").get<std::string>();
  r.workload_version = j.at("workload_version").get<int>();
  r.backend = j.at("backend").get<std::string>();
  r.role = j.value("role", "case");
  for (const auto& [k, v] : j.at("axes").items()) r.axes.emplace_back(k, v.get<std::string>());
  for (const auto& [k, v] : j.at("fields").items()) r.fields[k] = v.get<std::string>();
  if (j.contains("details"))
    for (const auto& [k, v] : j.at("details").items()) r.details[k] = v.get<std::string>();
  r.status = case_status_from_string(j.at("status").get<std::string>());
  r.message = j.value("message", "");
  r.warmup_count = j.at("warmup").at("count").get<std::size_t>();
  r.warmup_ns = j.at("warmup").at("time_ns").get<double>();
  r.stop_reason = j.value("stop_reason", "");
  r.device_time_method = j.value("device_time_method", "");
  const auto& work = j.at("work");
  r.flops = work.at("flops").get<double>();
  r.bytes_read = work.at("bytes_read").get<double>();
  r.bytes_written = work.at("bytes_written").get<double>();
  for (const auto& m : j.at("metrics"))
    r.metrics.push_back({m.at("name").get<std::string>(), number_from(m.at("value")), m.at("unit").get<std::string>()});
  const auto& v = j.at("verification");
  r.check = {v.at("checked").get<bool>(), v.at("passed").get<bool>(), number_from(v.at("error")),
             v.at("tolerance").get<double>(), v.at("method").get<std::string>()};
  const auto& t = j.at("throttle");
  r.throttle.available = t.at("available").get<bool>();
  r.throttle.reasons_mask = t.at("reasons_mask").get<std::uint64_t>();
  r.throttle.reasons = t.at("reasons").get<std::vector<std::string>>();
  r.throttle.sm_clock_mhz_min = t.at("sm_clock_mhz_min").get<unsigned>();
  r.throttle.sm_clock_mhz_max = t.at("sm_clock_mhz_max").get<unsigned>();
  r.throttle.temperature_c_max = t.at("temperature_c_max").get<unsigned>();
  r.throttle.power_w_max = t.at("power_w_max").get<double>();
  for (const auto& s : j.at("stages")) {
    stage_record st;
    st.path = s.at("path").get<std::string>();
    st.depth = s.at("depth").get<int>();
    st.calls = s.at("calls").get<std::uint64_t>();
    st.host_ns = s.at("host_ns").get<double>();
    st.device_ns = s.at("device_ns").get<double>();
    st.device_time_method = s.value("device_time_method", "");
    st.bytes_read = s.at("bytes_read").get<double>();
    st.bytes_written = s.at("bytes_written").get<double>();
    st.flops = s.at("flops").get<double>();
    st.memory_peak_bytes = s.at("memory_peak_bytes").get<std::uint64_t>();
    st.memory_end_bytes = s.at("memory_end_bytes").get<std::uint64_t>();
    if (s.contains("repetition_ns")) st.repetition_ns = s.at("repetition_ns").get<std::vector<double>>();
    r.stages.push_back(std::move(st));
  }
  const auto& stats = j.at("stats");
  if (stats.contains("device")) r.device_stats = summary_from_json(stats.at("device"));
  if (stats.contains("host")) r.host_stats = summary_from_json(stats.at("host"));
  r.device_ns = j.at("samples").at("device_ns").get<std::vector<double>>();
  r.host_ns = j.at("samples").at("host_ns").get<std::vector<double>>();
  return r;
}

result_set read_results(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw input_error(fmt::format("'{}' is a folder; give the results file in it (for `itera run`: {}/results.jsonl)",
                                  path, path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(fmt::format("cannot read results file '{}': no such file or not readable", path));
  result_set set;
  set.source = path;
  std::string line;
  std::size_t line_no = 0;
  bool have_context = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    // Every complete record ends with a newline; getline stops at end of file without one only
    // when the writer was killed mid-line.
    const bool cut_short = in.eof();
    ojson j;
    try {
      j = ojson::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      // A run killed while writing leaves at most its last line cut short: keep what came before.
      if (cut_short && have_context && !in.bad()) {
        set.truncated = true;
        break;
      }
      throw input_error(fmt::format("{}:{}: not JSON ({}); itera results are JSON lines written by `itera bench` or "
                                    "`itera run`",
                                    path, line_no, e.what()));
    }
    try {
      const std::string type = j.value("type", "");
      if (!have_context) {
        if (type != "context")
          throw input_error(fmt::format("{}:{}: not an itera results file: the first line must be a context record "
                                        "(\"type\":\"context\")",
                                        path, line_no));
        const std::string schema = j.value("schema", "");
        if (schema != result_schema)
          throw input_error(fmt::format("{}:{}: results schema '{}' is not supported by this itera (reads '{}')", path,
                                        line_no, schema, result_schema));
        set.context = context_from_json(j);
        have_context = true;
      } else if (type == "case") {
        set.cases.push_back(case_from_json(j));
      } else if (type == "ceiling") {
        set.ceilings.push_back(ceiling_from_json(j));
      } else {
        throw input_error(fmt::format("{}:{}: unknown record type '{}'", path, line_no, type));
      }
    } catch (const nlohmann::json::exception& e) {
      throw input_error(fmt::format("{}:{}: malformed itera record: {}", path, line_no, e.what()));
    }
  }
  if (!have_context) throw input_error(fmt::format("{}: empty file, not an itera results file", path));
  return set;
}

result_stream::result_stream(const std::string& path) : m_path(path) {
  if (path == "-") {
    m_out = &std::cout;
    return;
  }
  std::error_code ec;
  if (std::filesystem::exists(path, ec))
    throw usage_error(fmt::format("'{}' already exists; choose another file so earlier results are kept", path));
  m_file = std::make_unique<std::ofstream>(path, std::ios::binary | std::ios::trunc);
  if (!*m_file) throw usage_error(fmt::format("cannot write results to '{}': check that the folder exists and is writable", path));
  m_out = m_file.get();
}

result_stream::~result_stream() = default;

void result_stream::write(const run_context& c) { write_line(to_json(c)); }
void result_stream::write(const ceiling& c) { write_line(to_json(c)); }
void result_stream::write(const case_record& r) { write_line(to_json(r)); }

void result_stream::write_line(const ojson& j) {
  *m_out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  m_out->flush();
  if (!*m_out) throw std::runtime_error(fmt::format("writing results to '{}' failed (disk full?)", m_path));
}

}  // namespace itera
