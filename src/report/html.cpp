// The HTML report (docs/report.md). Each section turns the cases that hold its data into chart
// specs (embedded as JSON and drawn by web/report/report.js with Chart.js) and into tables of the
// same numbers, written here as HTML so they read without any script.
#include "itera/report/html.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "itera/analysis/fit.hpp"
#include "itera/analysis/precision.hpp"
#include "itera/core/build_info.hpp"
#include "itera/core/errors.hpp"
#include "itera/env/catalogue.hpp"
#include "src/report/text_format.hpp"

namespace itera {

// Generated at build time by cmake/report_assets.cmake from the npm package and web/report/.
namespace report::assets {
extern const std::string_view chart_js_version;
extern const std::string_view chart_js;
extern const std::string_view chart_js_license;
extern const std::string_view kurkle_color_license;
extern const std::string_view page_template;
extern const std::string_view page_css;
extern const std::string_view page_js;
}  // namespace report::assets

namespace report {


std::string json_for_script(const ojson& j) {
  const std::string text = j.dump(-1, ' ', false, ojson::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + text.size() / 16);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    // These characters only occur inside JSON strings, where a \u escape means the same.
    if (c == '<') out += "\\u003c";
    else if (c == '>') out += "\\u003e";
    else if (c == '&') out += "\\u0026";
    else if (c == '\xE2' && i + 2 < text.size() && text[i + 1] == '\x80' && (text[i + 2] == '\xA8' || text[i + 2] == '\xA9')) {
      out += text[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else out += c;
  }
  return out;
}

}  // namespace report

namespace {

using report::html_escape;
using report::human_bytes;
using report::human_rate;
using report::human_time_ns;
using report::sig3;

constexpr double gib = 1024.0 * 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Reading cases

struct case_ref {
  std::size_t set = 0;
  const case_record* c = nullptr;
};

std::optional<double> axis_number(const case_record& c, const std::string& name) {
  const std::string* v = c.find_axis(name);
  if (!v || v->empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    const double d = std::stod(*v, &used);
    if (used != v->size() || !std::isfinite(d)) return std::nullopt;
    return d;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<double> metric_value(const case_record& c, const std::string& name) {
  const metric* m = c.find_metric(name);
  if (!m || !std::isfinite(m->value)) return std::nullopt;
  return m->value;
}

bool starts_with(const std::string& s, std::string_view prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// The measured cases (not the ceiling cases) that finished, in file order.
std::vector<case_ref> ok_cases(const std::vector<result_set>& sets) {
  std::vector<case_ref> out;
  for (std::size_t s = 0; s < sets.size(); ++s)
    for (const auto& c : sets[s].cases)
      if (c.role == "case" && c.status == case_status::ok) out.push_back({s, &c});
  return out;
}

std::vector<std::string> workloads_of(const std::vector<case_ref>& cases) {
  std::vector<std::string> out;
  for (const auto& r : cases)
    if (std::find(out.begin(), out.end(), r.c->workload) == out.end()) out.push_back(r.c->workload);
  return out;
}

template <class Pred>
std::vector<case_ref> select(const std::vector<case_ref>& cases, Pred keep) {
  std::vector<case_ref> out;
  for (const auto& r : cases)
    if (keep(r)) out.push_back(r);
  return out;
}

// Axes whose value is not the same in every case (a missing axis counts as a value), in order of
// first appearance: the ones a label needs (llama-bench: constant columns move out of the table).
std::vector<std::string> varying_axes(const std::vector<case_ref>& cases, const std::set<std::string>& exclude = {}) {
  std::vector<std::string> names;
  for (const auto& r : cases)
    for (const auto& [n, v] : r.c->axes)
      if (!exclude.count(n) && std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  std::vector<std::string> out;
  for (const auto& n : names) {
    std::set<std::string> values;
    for (const auto& r : cases) {
      const std::string* v = r.c->find_axis(n);
      values.insert(v ? *v : std::string("\x01(absent)"));
    }
    if (values.size() > 1) out.push_back(n);
  }
  return out;
}

// Of `names`, those whose value is constant within each run: they tell the runs apart, so they go
// into the run's series label rather than into each case's label.
std::vector<std::string> per_run_axes(const std::vector<case_ref>& cases, const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& n : names) {
    std::map<std::size_t, std::set<std::string>> by_set;
    for (const auto& r : cases) {
      const std::string* v = r.c->find_axis(n);
      by_set[r.set].insert(v ? *v : std::string());
    }
    bool constant = true;
    for (const auto& [s, values] : by_set) constant = constant && values.size() == 1;
    if (constant) out.push_back(n);
  }
  return out;
}

std::string axes_text(const case_record& c, const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    const std::string* v = c.find_axis(n);
    if (!out.empty()) out += ' ';
    out += n + '=' + (v ? *v : std::string("-"));
  }
  return out;
}

std::size_t distinct_sets(const std::vector<case_ref>& cases) {
  std::set<std::size_t> s;
  for (const auto& r : cases) s.insert(r.set);
  return s.size();
}

std::string joined_label(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + ": " + b;
}

// ---------------------------------------------------------------------------------------------
// Runs

std::string card_of(const run_context& c) {
  std::string v = report::variant_name(c.device);
  if (!v.empty()) return v;
  std::string name = report::string_at(c.device, {"name"});
  if (!name.empty()) return name;
  std::string cpu = report::cpu_name(c.host);
  return cpu.empty() ? "unknown device" : cpu;
}

std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// How a run is named: `full` "offline.jsonl (NVIDIA H200 SXM 141GB)" in legends and tables, `file`
// "offline.jsonl" in a chart's case labels; the path as given when two files share a name.
struct run_names {
  std::vector<std::string> full, file;
  const std::string& operator[](std::size_t i) const { return full[i]; }
  std::size_t size() const { return full.size(); }
};

run_names run_labels(const std::vector<result_set>& sets) {
  std::map<std::string, int> count;
  for (const auto& s : sets) ++count[base_name(s.source)];
  run_names out;
  for (const auto& s : sets) {
    const std::string name = count[base_name(s.source)] > 1 ? s.source : base_name(s.source);
    out.file.push_back(name);
    out.full.push_back(name + " (" + card_of(s.context) + ")");
  }
  return out;
}

// Names the cases of one chart by the axes that vary among them. With several runs, the axes that
// are constant within each run (weights=fp8_e4m3 in one file, bf16 in another) are said once per run
// in the chart's note, and a case is "fp8.jsonl: loop=compute batch=8".
struct case_labeler {
  std::vector<std::string> shown, run_axes;
  bool multi = false;
  std::string workload;

  case_labeler(const std::vector<case_ref>& cases, const std::string& w) : workload(w) {
    const std::vector<std::string> varying = varying_axes(cases);
    multi = distinct_sets(cases) > 1;
    if (multi) run_axes = per_run_axes(cases, varying);
    for (const auto& a : varying)
      if (std::find(run_axes.begin(), run_axes.end(), a) == run_axes.end()) shown.push_back(a);
  }
  std::string run_part(const case_ref& r, const run_names& names) const {
    const std::string a = axes_text(*r.c, run_axes);
    return a.empty() ? names.file[r.set] : names.file[r.set] + " " + a;
  }
  std::string operator()(const case_ref& r, const run_names& names) const {
    const std::string a = axes_text(*r.c, shown);
    if (!multi) return a.empty() ? workload : a;
    return joined_label(names.file[r.set], a);
  }
  // "Runs: offline.jsonl weights=bf16 prompt=512; fp8.jsonl weights=fp8_e4m3 prompt=512."; "" when
  // there is nothing to say.
  std::string note(const std::vector<case_ref>& cases, const run_names& names) const {
    if (!multi || run_axes.empty()) return "";
    std::string out;
    std::set<std::size_t> seen;
    for (const auto& r : cases)
      if (seen.insert(r.set).second) out += (out.empty() ? "Runs: " : "; ") + run_part(r, names);
    return out + ".";
  }
};

// ---------------------------------------------------------------------------------------------
// Units: charts use units a person reads (ms, GiB, TFLOP/s), tables keep three significant digits.

struct display_unit {
  double scale = 1;
  std::string label;
};

display_unit unit_for(const std::string& unit) {
  if (unit == "FLOP/s") return {1e-12, "TFLOP/s"};
  if (unit == "B/s") return {1e-9, "GB/s"};
  if (unit == "s") return {1e3, "ms"};
  if (unit == "B") return {1 / gib, "GiB"};
  return {1, unit};
}

std::string metric_title(const std::string& name) {
  static const std::map<std::string, std::string> known = {
      {"throughput/decode_tokens_per_s", "decode throughput"},
      {"throughput/output_tokens_per_s", "output throughput"},
      {"throughput/prefill_tokens_per_s", "prefill throughput"},
      {"throughput/flops", "achieved FLOP/s"},
      {"throughput/bytes", "achieved bandwidth"},
  };
  auto it = known.find(name);
  return it == known.end() ? name : it->second;
}

std::string unit_of(const std::vector<case_ref>& cases, const std::string& metric_name) {
  for (const auto& r : cases)
    if (const metric* m = r.c->find_metric(metric_name)) return m->unit;
  return "";
}

// ---------------------------------------------------------------------------------------------
// Tables

struct html_table {
  std::vector<std::string> header;
  std::vector<bool> numeric;
  std::vector<std::vector<std::string>> rows;

  void column(std::string name, bool is_numeric) {
    header.push_back(std::move(name));
    numeric.push_back(is_numeric);
  }
  void write(std::ostream& out) const {
    out << "<div class=\"table-wrap\"><table>\n<thead><tr>";
    for (const auto& h : header) out << "<th>" << html_escape(h) << "</th>";
    out << "</tr></thead>\n<tbody>\n";
    for (const auto& row : rows) {
      out << "<tr>";
      for (std::size_t i = 0; i < row.size(); ++i)
        out << (i < numeric.size() && numeric[i] ? "<td class=\"num\">" : "<td>") << html_escape(row[i]) << "</td>";
      out << "</tr>\n";
    }
    out << "</tbody></table></div>\n";
  }
};

std::string opt_text(const std::optional<double>& v, const std::string& unit) {
  if (!v) return "-";
  if (unit == "B") return human_bytes(*v);
  if (unit == "s") return human_time_ns(*v * 1e9);
  return human_rate(*v, unit);
}

// ---------------------------------------------------------------------------------------------
// Charts

struct chart {
  ojson spec;
  html_table table;  // the numbers behind the chart; empty when there is no data
  int height_px = 340;
};

struct section {
  std::string id;
  std::string title;
  std::string explain;  // what the charts show and where their data comes from
  std::vector<chart> charts;
  std::string warning;  // shown under the explanation (example prices)
};

ojson axis_spec(const std::string& label, const std::string& scale) { return ojson{{"label", label}, {"scale", scale}}; }

chart empty_chart(const std::string& id, const std::string& section_id, const std::string& title, const std::string& why) {
  chart c;
  c.spec = ojson{{"id", id},      {"section", section_id},       {"title", title},
                 {"kind", "line"}, {"x", axis_spec("", "linear")}, {"y", axis_spec("", "linear")},
                 {"series", ojson::array()}, {"references", ojson::array()},
                 {"note", "No data for this chart: " + why}};
  return c;
}

ojson new_spec(const std::string& id, const std::string& section_id, const std::string& title, const std::string& kind) {
  return ojson{{"id", id}, {"section", section_id}, {"title", title}, {"kind", kind}, {"stacked", false},
               {"references", ojson::array()}, {"note", ""}};
}

// Linear unless the values span a factor of 8 or more (batch 1, 8, 64 reads better on a log scale).
std::string scale_for(const std::vector<double>& values) {
  if (values.empty()) return "linear";
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return *lo > 0 && *hi / *lo >= 8 ? "log" : "linear";
}

std::string chart_id(const std::string& section_id, const std::string& workload, int n = 0) {
  std::string id = section_id + "-";
  for (char c : workload) id += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_';
  if (n > 0) id += "-" + std::to_string(n);
  return id;
}

int bar_height(std::size_t categories, bool horizontal) {
  return horizontal ? std::max(340, static_cast<int>(categories) * 26 + 120) : 380;
}

// A series of points grouped by the axes that vary apart from `x_axis`, one group per run and
// value of those axes, in order of first appearance.
struct point_group {
  std::string label;
  std::vector<std::pair<double, const case_record*>> points;
  std::size_t set = 0;
};

std::vector<point_group> group_by_others(const std::vector<case_ref>& cases, const std::string& x_axis,
                                         const run_names& labels) {
  const std::vector<std::string> others = varying_axes(cases, {x_axis});
  const bool multi = distinct_sets(cases) > 1;
  std::vector<point_group> groups;
  std::map<std::pair<std::size_t, std::string>, std::size_t> index;
  for (const auto& r : cases) {
    const std::string key = axes_text(*r.c, others);
    auto [it, added] = index.try_emplace({r.set, key}, groups.size());
    if (added) groups.push_back({joined_label(multi ? labels[r.set] : "", key), {}, r.set});
    groups[it->second].points.emplace_back(*axis_number(*r.c, x_axis), r.c);
  }
  for (auto& g : groups)
    std::stable_sort(g.points.begin(), g.points.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return groups;
}

// ---- throughput against batch

section throughput_section(const std::vector<case_ref>& all, const run_names& labels) {
  section s{"throughput", "Throughput against batch",
            "Each line is one group of cases that differ only in the batch axis (one run and one value of the other "
            "axes that vary). The metric is the workload's headline rate: decode tokens/s for the llm workload.",
            {}};
  static const std::vector<std::string> metrics = {"throughput/decode_tokens_per_s", "throughput/output_tokens_per_s",
                                                   "throughput/prefill_tokens_per_s", "throughput/flops",
                                                   "throughput/bytes"};
  for (const auto& w : workloads_of(all)) {
    // A case under offered load (server scenario) has its throughput set by the arrival rate, not by
    // the batch: it belongs to the latency section.
    auto batched = select(all, [&](const case_ref& r) {
      return r.c->workload == w && axis_number(*r.c, "batch") && !r.c->find_metric("load/offered_rate");
    });
    std::string metric_name;
    for (const auto& m : metrics)
      if (std::any_of(batched.begin(), batched.end(), [&](const case_ref& r) { return metric_value(*r.c, m); })) {
        metric_name = m;
        break;
      }
    if (metric_name.empty()) continue;
    auto cases = select(batched, [&](const case_ref& r) { return metric_value(*r.c, metric_name).has_value(); });
    const std::string unit = unit_of(cases, metric_name);
    const display_unit du = unit_for(unit);
    const auto groups = group_by_others(cases, "batch", labels);
    const std::vector<std::string> others = varying_axes(cases, {"batch"});
    const bool multi = distinct_sets(cases) > 1;

    chart c;
    c.spec = new_spec(chart_id("throughput", w), s.id, w + ": " + metric_title(metric_name) + " against batch", "line");
    std::vector<double> xs;
    ojson series = ojson::array();
    for (std::size_t g = 0; g < groups.size(); ++g) {
      ojson points = ojson::array();
      for (const auto& [x, cr] : groups[g].points) {
        points.push_back(ojson::array({x, *metric_value(*cr, metric_name) * du.scale}));
        xs.push_back(x);
      }
      series.push_back({{"label", groups[g].label.empty() ? metric_title(metric_name) : groups[g].label},
                        {"color", g}, {"points", points}});
    }
    c.spec["x"] = axis_spec("batch", scale_for(xs));
    c.spec["y"] = axis_spec(metric_title(metric_name) + " (" + du.label + ")", "linear");
    c.spec["series"] = series;
    if (multi) c.table.column("run", false);
    for (const auto& o : others) c.table.column(o, false);
    c.table.column("batch", true);
    c.table.column(metric_name, true);
    for (const auto& g : groups)
      for (const auto& [x, cr] : g.points) {
        std::vector<std::string> row;
        if (multi) row.push_back(labels[g.set]);
        for (const auto& o : others) {
          const std::string* v = cr->find_axis(o);
          row.push_back(v ? *v : "-");
        }
        row.push_back(*cr->find_axis("batch"));
        row.push_back(opt_text(metric_value(*cr, metric_name), unit));
        c.table.rows.push_back(std::move(row));
      }
    s.charts.push_back(std::move(c));
  }
  if (s.charts.empty())
    s.charts.push_back(empty_chart("throughput", s.id, "Throughput against batch",
                                   "no finished case has a numeric batch axis and a throughput metric "
                                   "(the llm workload with --axis batch=1,8,64 records throughput/decode_tokens_per_s)."));
  return s;
}

// ---- latency percentiles against load, with the target

section latency_section(const std::vector<case_ref>& all, const run_names& labels) {
  section s{"latency", "Latency percentiles against load",
            "Server scenario: requests arrive at the offered rate (axis rate, requests/s). Lines are the p50, p90 and "
            "p99 of time to first token (TTFT) and time per output token (TPOT); the dashed horizontal line is the "
            "latency target the run was given (axes ttft_ms and tpot_ms).",
            {}};
  struct kind_t {
    std::string key, title, target_axis;
  };
  static const std::vector<kind_t> kinds = {{"ttft", "time to first token (TTFT)", "ttft_ms"},
                                            {"tpot", "time per output token (TPOT)", "tpot_ms"}};
  static const std::vector<std::pair<std::string, std::string>> percentiles = {
      {"p50", "solid"}, {"p90", "dashed"}, {"p99", "dotted"}};
  for (const auto& w : workloads_of(all)) {
    for (const auto& k : kinds) {
      auto cases = select(all, [&](const case_ref& r) {
        if (r.c->workload != w || !axis_number(*r.c, "rate")) return false;
        for (const auto& [p, dash] : percentiles)
          if (metric_value(*r.c, "latency/" + k.key + "/" + p)) return true;
        return false;
      });
      if (cases.empty()) continue;
      const auto groups = group_by_others(cases, "rate", labels);
      const std::vector<std::string> others = varying_axes(cases, {"rate"});
      const bool multi = distinct_sets(cases) > 1;
      const display_unit du = unit_for(unit_of(cases, "latency/" + k.key + "/p50"));

      chart c;
      c.spec = new_spec(chart_id("latency", w + "-" + k.key), s.id, w + ": " + k.title + " against offered load", "line");
      ojson series = ojson::array();
      std::vector<double> xs, ys;
      for (std::size_t g = 0; g < groups.size(); ++g)
        for (const auto& [p, dash] : percentiles) {
          ojson points = ojson::array();
          for (const auto& [x, cr] : groups[g].points)
            if (auto v = metric_value(*cr, "latency/" + k.key + "/" + p)) {
              points.push_back(ojson::array({x, *v * du.scale}));
              xs.push_back(x);
              ys.push_back(*v * du.scale);
            }
          if (points.empty()) continue;
          series.push_back({{"label", joined_label(groups[g].label, k.key + " " + p)}, {"color", g}, {"dash", dash},
                            {"points", points}});
        }
      std::set<double> targets;
      for (const auto& r : cases)
        if (auto t = axis_number(*r.c, k.target_axis); t && *t > 0) targets.insert(*t);
      ojson references = ojson::array();
      for (double t : targets) {
        // The target axis is in ms; draw it in the chart's unit.
        const double at = du.label == "ms" ? t : t / 1e3 * du.scale;
        references.push_back({{"axis", "value"}, {"value", at}, {"label", k.key + " target " + sig3(t) + " ms"}});
        ys.push_back(at);
      }
      c.spec["x"] = axis_spec("offered load: axis rate (requests/s)", scale_for(xs));
      c.spec["y"] = axis_spec(k.key + " (" + du.label + ")", ys.size() > 1 && scale_for(ys) == "log" &&
                                                                      *std::max_element(ys.begin(), ys.end()) /
                                                                              *std::min_element(ys.begin(), ys.end()) >=
                                                                          20
                                                                  ? "log"
                                                                  : "linear");
      c.spec["series"] = series;
      c.spec["references"] = references;
      if (targets.empty()) c.spec["note"] = "No latency target was set (axis " + k.target_axis + "=0): no target line.";

      if (multi) c.table.column("run", false);
      for (const auto& o : others) c.table.column(o, false);
      for (const char* h : {"rate", "offered (req/s)", "achieved (req/s)"}) c.table.column(h, true);
      for (const auto& [p, dash] : percentiles) c.table.column(k.key + " " + p, true);
      c.table.column(k.target_axis, true);
      c.table.column("meets targets", false);
      for (const auto& g : groups)
        for (const auto& [x, cr] : g.points) {
          std::vector<std::string> row;
          if (multi) row.push_back(labels[g.set]);
          for (const auto& o : others) {
            const std::string* v = cr->find_axis(o);
            row.push_back(v ? *v : "-");
          }
          row.push_back(*cr->find_axis("rate"));
          auto offered = metric_value(*cr, "load/offered_rate");
          auto achieved = metric_value(*cr, "load/achieved_rate");
          row.push_back(offered ? sig3(*offered) : "-");
          row.push_back(achieved ? sig3(*achieved) : "-");
          for (const auto& [p, dash] : percentiles) row.push_back(opt_text(metric_value(*cr, "latency/" + k.key + "/" + p), "s"));
          const std::string* t = cr->find_axis(k.target_axis);
          row.push_back(t ? *t : "-");
          auto meets = metric_value(*cr, "load/meets_targets");
          row.push_back(meets ? (*meets > 0 ? "yes" : "no") : "-");
          c.table.rows.push_back(std::move(row));
        }
      s.charts.push_back(std::move(c));
    }
  }
  if (s.charts.empty())
    s.charts.push_back(empty_chart("latency", s.id, "Latency percentiles against load",
                                   "no finished case has a numeric rate axis and latency percentiles "
                                   "(the llm workload's server scenario: --axis scenario=server --axis rate=4,16)."));
  return s;
}

// ---- the stage ledger of both loops

section stages_section(const std::vector<case_ref>& all, const run_names& labels) {
  section s{"stages", "Stage ledger: compute loop and end-to-end loop",
            "Time per repetition of each top-level stage, stacked. For the llm workload the compute loop "
            "(loop=compute) times prefill and decode only; the end-to-end loop (loop=end_to_end) adds reading and "
            "parsing the prompts, the host-to-device copy, the device-to-host copy and writing the outputs. The two "
            "loops of the same case sit side by side. The table lists every stage, nested ones included.",
            {}};
  for (const auto& w : workloads_of(all)) {
    auto cases = select(all, [&](const case_ref& r) {
      return r.c->workload == w &&
             std::any_of(r.c->stages.begin(), r.c->stages.end(), [](const stage_record& st) { return st.depth == 0; });
    });
    if (cases.empty()) continue;
    // Order: one group per run and value of the axes other than loop, the loops of a group together.
    const std::vector<std::string> others = varying_axes(cases, {"loop"});
    std::vector<std::pair<std::size_t, std::string>> order;
    for (const auto& r : cases) {
      std::pair<std::size_t, std::string> key{r.set, axes_text(*r.c, others)};
      if (std::find(order.begin(), order.end(), key) == order.end()) order.push_back(key);
    }
    std::stable_sort(cases.begin(), cases.end(), [&](const case_ref& a, const case_ref& b) {
      auto ia = std::find(order.begin(), order.end(), std::make_pair(a.set, axes_text(*a.c, others))) - order.begin();
      auto ib = std::find(order.begin(), order.end(), std::make_pair(b.set, axes_text(*b.c, others))) - order.begin();
      return ia < ib;
    });
    const case_labeler label_of(cases, w);
    bool device = false;
    std::vector<std::string> paths;
    for (const auto& r : cases)
      for (const auto& st : r.c->stages) {
        if (st.device_ns >= 0) device = true;
        if (st.depth == 0 && std::find(paths.begin(), paths.end(), st.path) == paths.end()) paths.push_back(st.path);
      }
    ojson categories = ojson::array();
    for (const auto& r : cases) categories.push_back(label_of(r, labels));
    ojson series = ojson::array();
    for (std::size_t p = 0; p < paths.size(); ++p) {
      ojson values = ojson::array();
      for (const auto& r : cases) {
        auto it = std::find_if(r.c->stages.begin(), r.c->stages.end(),
                               [&](const stage_record& st) { return st.depth == 0 && st.path == paths[p]; });
        const double ns = it == r.c->stages.end() ? -1 : (device ? it->device_ns : it->host_ns);
        if (ns < 0 || it->calls == 0) values.push_back(nullptr);
        else values.push_back(ns / static_cast<double>(it->calls) / 1e6);
      }
      series.push_back({{"label", paths[p]}, {"color", p}, {"stack", "stages"}, {"values", values}});
    }
    chart c;
    c.spec = new_spec(chart_id("stages", w), s.id,
                      w + ": " + (device ? "device" : "host") + " time per repetition of each stage", "hbar");
    c.spec["stacked"] = true;
    c.spec["x"] = axis_spec(std::string(device ? "device" : "host") + " time per repetition (ms)", "linear");
    c.spec["y"] = axis_spec("case", "category");
    c.spec["categories"] = categories;
    c.spec["series"] = series;
    c.height_px = bar_height(cases.size(), true);
    c.spec["note"] = label_of.note(cases, labels);
    if (!device) c.spec["note"] = joined_label("These stages had no device clock: host time is shown.", label_of.note(cases, labels));

    c.table.column("case", false);
    c.table.column("stage", false);
    for (const char* h : {"calls", "device / call", "host / call", "bytes / call", "FLOP / call", "memory peak"})
      c.table.column(h, true);
    for (std::size_t i = 0; i < cases.size(); ++i)
      for (const auto& st : cases[i].c->stages) {
        const double calls = static_cast<double>(std::max<std::uint64_t>(st.calls, 1));
        c.table.rows.push_back({categories[i].get<std::string>(), std::string(2 * st.depth, ' ') + st.path,
                                std::to_string(st.calls), st.device_ns < 0 ? "-" : human_time_ns(st.device_ns / calls),
                                human_time_ns(st.host_ns / calls), human_bytes((st.bytes_read + st.bytes_written) / calls),
                                st.flops > 0 ? sig3(st.flops / calls) : "-",
                                st.memory_peak_bytes ? human_bytes(static_cast<double>(st.memory_peak_bytes)) : "-"});
      }
    s.charts.push_back(std::move(c));
  }
  if (s.charts.empty())
    s.charts.push_back(empty_chart("stages", s.id, "Stage ledger",
                                   "no finished case recorded stages (the llm workload does: --axis "
                                   "loop=compute,end_to_end gives both loops)."));
  return s;
}

// ---- memory per case

section memory_section(const std::vector<case_ref>& all, const run_names& labels) {
  section s{"memory", "Memory per case",
            "The memory plan of each case, stacked: weights, KV cache, activations and workspace "
            "(memory/plan/*). The diamond is the peak the allocator measured while the case ran "
            "(memory/measured_peak).",
            {}};
  static const std::vector<std::pair<std::string, std::string>> parts = {{"memory/plan/weights", "weights"},
                                                                         {"memory/plan/kv_cache", "KV cache"},
                                                                         {"memory/plan/activations", "activations"},
                                                                         {"memory/plan/workspace", "workspace"}};
  for (const auto& w : workloads_of(all)) {
    auto cases = select(all, [&](const case_ref& r) {
      return r.c->workload == w &&
             std::any_of(parts.begin(), parts.end(), [&](const auto& p) { return metric_value(*r.c, p.first).has_value(); });
    });
    if (cases.empty()) continue;
    const case_labeler label_of(cases, w);
    ojson categories = ojson::array();
    for (const auto& r : cases) categories.push_back(label_of(r, labels));
    ojson series = ojson::array();
    for (std::size_t p = 0; p < parts.size(); ++p) {
      ojson values = ojson::array();
      for (const auto& r : cases) {
        auto v = metric_value(*r.c, parts[p].first);
        values.push_back(v ? ojson(*v / gib) : ojson(nullptr));
      }
      series.push_back({{"label", parts[p].second}, {"color", p}, {"stack", "plan"}, {"values", values}});
    }
    ojson peaks = ojson::array();
    bool any_peak = false;
    for (const auto& r : cases) {
      auto v = metric_value(*r.c, "memory/measured_peak");
      any_peak = any_peak || v.has_value();
      peaks.push_back(v ? ojson(*v / gib) : ojson(nullptr));
    }
    if (any_peak) series.push_back({{"label", "measured peak"}, {"kind", "marker"}, {"values", peaks}});
    chart c;
    c.spec = new_spec(chart_id("memory", w), s.id, w + ": memory plan per case and the measured peak", "bar");
    c.spec["stacked"] = true;
    c.spec["x"] = axis_spec("case", "category");
    c.spec["y"] = axis_spec("memory (GiB)", "linear");
    c.spec["categories"] = categories;
    c.spec["series"] = series;
    c.spec["note"] = label_of.note(cases, labels);
    c.height_px = 480;

    c.table.column("case", false);
    for (const auto& p : parts) c.table.column(p.second, true);
    for (const char* h : {"plan total", "measured peak", "device used", "largest batch (sequences)"}) c.table.column(h, true);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const case_record& cr = *cases[i].c;
      std::vector<std::string> row{categories[i].get<std::string>()};
      for (const auto& p : parts) row.push_back(opt_text(metric_value(cr, p.first), "B"));
      row.push_back(opt_text(metric_value(cr, "memory/plan/total"), "B"));
      row.push_back(opt_text(metric_value(cr, "memory/measured_peak"), "B"));
      row.push_back(opt_text(metric_value(cr, "memory/device_used"), "B"));
      auto largest = metric_value(cr, "memory/largest_batch");
      row.push_back(largest ? sig3(*largest) : "-");
      c.table.rows.push_back(std::move(row));
    }
    s.charts.push_back(std::move(c));
  }
  if (s.charts.empty())
    s.charts.push_back(empty_chart("memory", s.id, "Memory per case",
                                   "no finished case has a memory plan (memory/plan/weights, kv_cache, activations, "
                                   "workspace: the llm workload records them)."));
  return s;
}

// ---- precision against speed (R6, R10)

section precision_section(const std::vector<result_set>& sets, const run_names& labels) {
  section s{"precision", "Precision against speed",
            "Cases of one run that differ only in their precision axes (weights, lm_head, kv, compute): each one's "
            "decode rate (throughput/decode_tokens_per_s) over that of the group's widest case (the most bytes a "
            "weight, then an LM head's weight, then a cached value), with the quality figures the case measured "
            "against its reference beside it (quality/logits_rel_error, quality/top1_agreement). Only rates from "
            "the same run are divided: the same binary runs up to 17% apart on two fresh machines of one model.",
            {}};
  int n = 0;
  for (std::size_t i = 0; i < sets.size(); ++i) {
    std::vector<const case_record*> cases;
    for (const auto& c : sets[i].cases)
      if (c.role == "case") cases.push_back(&c);
    const auto rows = precision_speedups(cases);
    for (std::size_t b = 0; b < rows.size();) {
      std::size_t e = b + 1;
      while (e < rows.size() && rows[e].key == rows[b].key) ++e;
      ojson categories = ojson::array(), values = ojson::array();
      chart c;
      for (const auto& col : report::precision_columns()) c.table.column(col.name, col.numeric);
      for (std::size_t k = b; k < e; ++k) {
        auto cells = report::precision_cells(rows[k]);
        categories.push_back(cells.front());
        values.push_back(rows[k].speedup);
        c.table.rows.push_back(std::move(cells));
      }
      c.spec = new_spec(chart_id("precision", rows[b].rec->workload, ++n), s.id,
                        labels[i] + ": decode speed-up over the widest precision", "bar");
      c.spec["x"] = axis_spec("precision", "category");
      c.spec["y"] = axis_spec("speed-up (x)", "linear");
      c.spec["categories"] = categories;
      c.spec["series"] = ojson::array({{{"label", "speed-up"}, {"color", 0}, {"values", values}}});
      c.spec["references"] = ojson::array({{{"axis", "value"}, {"value", 1.0}, {"label", "reference"}}});
      c.spec["note"] = rows[b].label;
      s.charts.push_back(std::move(c));
      b = e;
    }
  }
  if (s.charts.empty())
    s.charts.push_back(empty_chart("precision", s.id, "Precision against speed",
                                   "no run holds two finished cases that differ only in weights, lm_head, kv or "
                                   "compute (the llm workload with --axis weights=bf16,fp8_e4m3 makes such a pair)."));
  return s;
}

// ---- achieved rates against the ceilings

const ceiling* find_ceiling(const result_set& set, const std::string& key) {
  for (const auto& c : set.ceilings)
    if (c.key == key) return &c;
  return nullptr;
}

section utilisation_section(const std::vector<result_set>& sets, const std::vector<case_ref>& all,
                            const run_names& labels) {
  section s{"utilisation", "Achieved rates against the ceilings",
            "Each bar is one utilisation/* metric of a case: its achieved rate as a percentage of a ceiling measured "
            "in the same run (copy bandwidth for copy.*, GEMM FLOP/s for gemm.*; a stage name before the ceiling, as "
            "in decode/copy.d2d, means that stage's rate). The dashed line is 100%. The ceilings themselves are listed "
            "below.",
            {}};
  for (const auto& w : workloads_of(all)) {
    auto cases = select(all, [&](const case_ref& r) {
      return r.c->workload == w && std::any_of(r.c->metrics.begin(), r.c->metrics.end(), [](const metric& m) {
               return starts_with(m.name, "utilisation/") && std::isfinite(m.value);
             });
    });
    if (cases.empty()) continue;
    const std::vector<std::string> varying = varying_axes(cases);
    const std::vector<std::string> run_axes = per_run_axes(cases, varying);
    std::vector<std::string> shown;
    for (const auto& a : varying)
      if (std::find(run_axes.begin(), run_axes.end(), a) == run_axes.end()) shown.push_back(a);
    const bool multi = distinct_sets(cases) > 1;
    if (!multi) shown = varying;
    // Categories shared by every run; one dataset per run.
    std::vector<std::string> categories;
    std::map<std::pair<std::size_t, std::string>, double> value;
    std::vector<std::size_t> runs;
    for (const auto& r : cases) {
      if (std::find(runs.begin(), runs.end(), r.set) == runs.end()) runs.push_back(r.set);
      const std::string base = axes_text(*r.c, shown).empty() ? w : axes_text(*r.c, shown);
      for (const auto& m : r.c->metrics) {
        if (!starts_with(m.name, "utilisation/") || !std::isfinite(m.value)) continue;
        const std::string cat = base + " · " + m.name.substr(std::string_view("utilisation/").size());
        if (std::find(categories.begin(), categories.end(), cat) == categories.end()) categories.push_back(cat);
        value.try_emplace({r.set, cat}, m.value * 100);
      }
    }
    ojson series = ojson::array();
    for (std::size_t i = 0; i < runs.size(); ++i) {
      ojson values = ojson::array();
      for (const auto& cat : categories) {
        auto it = value.find({runs[i], cat});
        values.push_back(it == value.end() ? ojson(nullptr) : ojson(it->second));
      }
      std::string label = multi ? labels[runs[i]] : "% of ceiling";
      if (multi && !run_axes.empty()) {
        const auto first = std::find_if(cases.begin(), cases.end(), [&](const case_ref& r) { return r.set == runs[i]; });
        label = joined_label(label, axes_text(*first->c, run_axes));
      }
      series.push_back({{"label", label}, {"color", i}, {"values", values}});
    }
    chart c;
    c.spec = new_spec(chart_id("utilisation", w), s.id, w + ": achieved rate as % of the ceiling", "hbar");
    c.spec["x"] = axis_spec("% of the ceiling measured in the same run", "linear");
    c.spec["y"] = axis_spec("case · stage/ceiling", "category");
    c.spec["categories"] = categories;
    c.spec["series"] = series;
    c.spec["references"] = ojson::array({{{"axis", "value"}, {"value", 100}, {"label", "ceiling (100%)"}}});
    c.height_px = bar_height(categories.size() * std::max<std::size_t>(1, runs.size() / 2 + 1), true);

    if (multi) c.table.column("run", false);
    c.table.column("case", false);
    c.table.column("stage/ceiling", false);
    for (const char* h : {"ceiling", "achieved", "% of ceiling"}) c.table.column(h, true);
    for (const auto& r : cases) {
      const std::string base = axes_text(*r.c, varying).empty() ? w : axes_text(*r.c, varying);
      for (const auto& m : r.c->metrics) {
        if (!starts_with(m.name, "utilisation/") || !std::isfinite(m.value)) continue;
        const std::string rest = m.name.substr(std::string_view("utilisation/").size());
        const std::string key = rest.substr(rest.find_last_of('/') == std::string::npos ? 0 : rest.find_last_of('/') + 1);
        const ceiling* ce = find_ceiling(sets[r.set], key);
        std::vector<std::string> row;
        if (multi) row.push_back(labels[r.set]);
        row.push_back(base);
        row.push_back(rest);
        row.push_back(ce ? human_rate(ce->value, ce->unit) : "-");
        row.push_back(ce ? human_rate(ce->value * m.value, ce->unit) : "-");
        row.push_back(sig3(m.value * 100) + "%");
        c.table.rows.push_back(std::move(row));
      }
    }
    s.charts.push_back(std::move(c));
  }
  if (s.charts.empty())
    s.charts.push_back(empty_chart("utilisation", s.id, "Achieved rates against the ceilings",
                                   "no finished case has a utilisation/* metric (they need the ceilings measured in "
                                   "the same run: itera bench without --no-ceilings)."));
  return s;
}

// ---- comparison of runs

section comparison_section(const std::vector<result_set>& sets, const std::vector<case_ref>& all,
                           const run_names& labels) {
  section s{"comparison", "Comparison of runs",
            "The same cases of each results file side by side, one colour per file (card). Axes that are constant "
            "within each file but differ between files (weights=fp8_e4m3 in one, bf16 in another) are named in the "
            "file's legend entry; the cases are matched on the other axes. The metric is the workload's headline "
            "rate; the table gives each file's value as a ratio to the first file's.",
            {}};
  static const std::vector<std::string> metrics = {"throughput/decode_tokens_per_s", "throughput/output_tokens_per_s",
                                                   "throughput/prefill_tokens_per_s", "throughput/flops",
                                                   "throughput/bytes"};
  if (sets.size() < 2) {
    s.charts.push_back(empty_chart("comparison", s.id, "Comparison of runs",
                                   "one results file was given; give two or more to compare runs "
                                   "(itera report a.jsonl b.jsonl --format html --out report.html)."));
    return s;
  }
  for (const auto& w : workloads_of(all)) {
    std::string metric_name;
    for (const auto& m : metrics) {
      auto with = select(all, [&](const case_ref& r) { return r.c->workload == w && metric_value(*r.c, m); });
      if (distinct_sets(with) >= 2) {
        metric_name = m;
        break;
      }
    }
    if (metric_name.empty()) continue;
    auto cases = select(all, [&](const case_ref& r) { return r.c->workload == w && metric_value(*r.c, metric_name); });
    const std::string unit = unit_of(cases, metric_name);
    const display_unit du = unit_for(unit);
    const std::vector<std::string> varying = varying_axes(cases);
    const std::vector<std::string> run_axes = per_run_axes(cases, varying);
    std::vector<std::string> shown;
    for (const auto& a : varying)
      if (std::find(run_axes.begin(), run_axes.end(), a) == run_axes.end()) shown.push_back(a);
    std::vector<std::string> categories;
    std::vector<std::size_t> runs;
    std::map<std::pair<std::size_t, std::string>, double> value;
    for (const auto& r : cases) {
      const std::string cat = axes_text(*r.c, shown).empty() ? w : axes_text(*r.c, shown);
      if (std::find(categories.begin(), categories.end(), cat) == categories.end()) categories.push_back(cat);
      if (std::find(runs.begin(), runs.end(), r.set) == runs.end()) runs.push_back(r.set);
      value.try_emplace({r.set, cat}, *metric_value(*r.c, metric_name));
    }
    std::vector<std::string> run_label;
    for (auto set : runs) {
      const auto first = std::find_if(cases.begin(), cases.end(), [&](const case_ref& r) { return r.set == set; });
      run_label.push_back(joined_label(labels[set], axes_text(*first->c, run_axes)));
    }
    ojson series = ojson::array();
    for (std::size_t i = 0; i < runs.size(); ++i) {
      ojson values = ojson::array();
      for (const auto& cat : categories) {
        auto it = value.find({runs[i], cat});
        values.push_back(it == value.end() ? ojson(nullptr) : ojson(it->second * du.scale));
      }
      series.push_back({{"label", run_label[i]}, {"color", i}, {"values", values}});
    }
    const bool horizontal = categories.size() > 10;
    chart c;
    c.spec = new_spec(chart_id("comparison", w), s.id, w + ": " + metric_title(metric_name) + " per run",
                      horizontal ? "hbar" : "bar");
    const ojson value_axis = axis_spec(metric_name + " (" + du.label + ")", "linear");
    const ojson case_axis = axis_spec("case", "category");
    c.spec["x"] = horizontal ? value_axis : case_axis;
    c.spec["y"] = horizontal ? case_axis : value_axis;
    c.spec["categories"] = categories;
    c.spec["series"] = series;
    c.height_px = bar_height(categories.size() * runs.size(), horizontal);
    if (!horizontal) c.height_px = 400;

    c.table.column("case", false);
    for (std::size_t i = 0; i < runs.size(); ++i) c.table.column(run_label[i], true);
    for (std::size_t i = 1; i < runs.size(); ++i) c.table.column("run " + std::to_string(i + 1) + " / run 1", true);
    for (const auto& cat : categories) {
      std::vector<std::string> row{cat};
      for (auto set : runs) {
        auto it = value.find({set, cat});
        row.push_back(it == value.end() ? "-" : human_rate(it->second, unit));
      }
      auto base = value.find({runs[0], cat});
      for (std::size_t i = 1; i < runs.size(); ++i) {
        auto it = value.find({runs[i], cat});
        row.push_back(base == value.end() || it == value.end() || base->second == 0 ? "-"
                                                                                    : fmt::format("{:.3f}", it->second / base->second));
      }
      c.table.rows.push_back(std::move(row));
    }
    s.charts.push_back(std::move(c));
  }
  if (s.charts.empty())
    s.charts.push_back(empty_chart("comparison", s.id, "Comparison of runs",
                                   "no workload has a throughput metric in finished cases of two or more of the files given."));
  return s;
}

// ---- cost per million tokens (itera cost, drawn as analyse_cost reports it)

const char* const projected_label = "projected (roofline, see docs/analysis.md)";

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The words (k=v) of a group's key that are not in every group's key: what tells the groups apart.
std::string distinguishing(const cost_report& r, std::size_t gi) {
  std::string out;
  for (const auto& w : split_words(r.groups[gi].key)) {
    bool everywhere = true;
    for (const auto& g : r.groups) {
      const auto words = split_words(g.key);
      everywhere = everywhere && std::find(words.begin(), words.end(), w) != words.end();
    }
    if (!everywhere) out += (out.empty() ? "" : " ") + w;
  }
  return out;
}

std::string cost_chart_id(const cost_report& r, std::size_t gi) {
  int n = 0;
  for (std::size_t i = 0; i < gi; ++i) n += r.groups[i].workload == r.groups[gi].workload;
  return chart_id("cost", r.groups[gi].workload, n);
}

std::string cost_chart_title(const cost_report& r, std::size_t gi) {
  const auto& g = r.groups[gi];
  const std::string d = distinguishing(r, gi);
  return g.workload + " " + g.scenario + (d.empty() ? "" : " " + d) + ": cost per " + g.basis.per_label;
}

const char* const cost_formula =
    "cost = price per GPU-hour / (throughput x 3600) x the amount quoted (a million output tokens, a thousand images "
    "or one training step), one GPU, at the card's best configuration that meets the latency targets";

section cost_section(const html_cost& hc) {
  section s{"cost", "Cost per card", "", {}};
  if (hc.prices_file.empty()) {
    s.explain = std::string("Each card's cost of a million output tokens (a thousand images, a training step), measured on the card the results come from and "
                            "projected onto the other cards (itera cost, docs/analysis.md): ") + cost_formula + ".";
    s.charts.push_back(empty_chart("cost", s.id, "Cost per card",
                                   "no price file was given. Add --prices PRICES.json (prices per GPU-hour with date "
                                   "and source; data/prices.example.json holds example prices, docs/analysis.md "
                                   "\"Cost and plan\") to draw each card's cost, measured or projected."));
    return s;
  }
  if (!hc.report) {
    s.explain = "Prices: " + hc.prices_file + ".";
    s.charts.push_back(empty_chart("cost", s.id, "Cost per card",
                                   "the cost analysis (as itera cost) refuses these results: " + hc.unavailable));
    return s;
  }
  const cost_report& r = *hc.report;
  std::set<std::string> dates;
  for (const auto& e : r.prices.entries) dates.insert(e.date);
  std::string ds;
  for (const auto& d : dates) ds += (ds.empty() ? "" : ", ") + d;
  s.explain = std::string(cost_formula) + " (itera cost, docs/analysis.md). Solid bars are measured on the card the "
              "results come from; hatched, lighter bars are projected onto the other cards by the roofline model. "
              "Prices: " + r.prices.file + " (" + r.prices.currency + " per GPU-hour, dated " + ds + ")." +
              (r.prices.note.empty() ? "" : " " + r.prices.note);
  if (r.prices.any_example()) s.warning = "Example prices, not quotes: the price file marks some of its prices as examples.";
  for (std::size_t gi = 0; gi < r.groups.size(); ++gi) {
    const cost_group& g = r.groups[gi];
    std::vector<std::string> categories;
    ojson measured = ojson::array(), projected = ojson::array();
    bool any_measured = false, any_projected = false;
    std::vector<std::string> no_figure;
    for (const auto& row : g.rows) {
      if (!row.cost) {
        no_figure.push_back(row.card + " (" + (row.note.empty() ? "no figure" : row.note) + ")");
        continue;
      }
      categories.push_back(row.card);
      measured.push_back(row.measured ? ojson(*row.cost) : ojson(nullptr));
      projected.push_back(row.measured ? ojson(nullptr) : ojson(*row.cost));
      any_measured = any_measured || row.measured;
      any_projected = any_projected || !row.measured;
    }
    chart c;
    const bool horizontal = categories.size() > 10;
    c.spec = new_spec(cost_chart_id(r, gi), s.id, cost_chart_title(r, gi), horizontal ? "hbar" : "bar");
    const ojson value_axis = axis_spec("cost per " + g.basis.per_label + " (" + r.prices.currency + ")", "linear");
    const ojson card_axis = axis_spec("card", "category");
    c.spec["x"] = horizontal ? value_axis : card_axis;
    c.spec["y"] = horizontal ? card_axis : value_axis;
    c.spec["stacked"] = true;  // a card has one bar, measured or projected
    c.spec["categories"] = categories;
    ojson series = ojson::array();
    if (any_measured) series.push_back({{"label", "measured"}, {"color", 0}, {"values", measured}});
    if (any_projected)
      series.push_back({{"label", projected_label}, {"color", 0}, {"pattern", "hatched"}, {"values", projected}});
    c.spec["series"] = series;
    std::string note = "Group: " + g.workload + " " + g.key + ".";
    for (const auto& n : g.notes) note += " " + n;
    if (!no_figure.empty()) {
      note += " Not drawn:";
      for (std::size_t i = 0; i < no_figure.size(); ++i) note += (i ? "; " : " ") + no_figure[i];
      note += ".";
    }
    if (categories.empty()) note = "No data for this chart: no card of this group has a cost figure. " + note;
    c.spec["note"] = note;
    c.height_px = horizontal ? bar_height(categories.size(), true) : 380;

    const std::string rate_h = g.basis.rate_label, cost_h = "cost / " + g.basis.short_label;
    for (const std::string& h : {std::string("card"), std::string("basis"), std::string("configuration"), rate_h,
                                 std::string("price / GPU-hour"), std::string("price date"), cost_h, std::string("note")})
      c.table.column(h, h == rate_h || h == "price / GPU-hour" || h == cost_h);
    for (const auto& row : g.rows)
      c.table.rows.push_back({row.card, row.measured ? "measured" : "projected",
                              row.configuration.empty() ? "-" : row.configuration,
                              row.rate ? fmt::format("{:.4g}", *row.rate) : "-",
                              row.price ? row.price->price_text + " " + row.price->currency : "no price",
                              row.price ? row.price->date : "-",
                              row.cost && row.price
                                  ? analysis::money_text(*row.cost, row.price->currency, 4)
                                  : "-",
                              row.note});
    s.charts.push_back(std::move(c));
  }
  if (s.charts.empty())
    s.charts.push_back(empty_chart("cost", s.id, "Cost per card", "the cost analysis found no group."));
  return s;
}

ojson cost_json(const html_cost& hc) {
  if (hc.prices_file.empty()) return nullptr;
  if (!hc.report) return ojson{{"prices_file", hc.prices_file}, {"unavailable", hc.unavailable}};
  const cost_report& r = *hc.report;
  ojson groups = ojson::array();
  for (std::size_t gi = 0; gi < r.groups.size(); ++gi) {
    const auto& g = r.groups[gi];
    ojson rows = ojson::array();
    for (const auto& row : g.rows) rows.push_back(to_json(row));
    groups.push_back({{"workload", g.workload}, {"group", g.key}, {"scenario", g.scenario},
                      {"rate_metric", g.basis.metric}, {"cost_per", g.basis.per_label},
                      {"chart", cost_chart_id(r, gi)}, {"measured_cards", g.measured_cards}, {"rows", rows},
                      {"notes", g.notes}});
  }
  return ojson{{"prices_file", r.prices.file}, {"currency", r.prices.currency},
               {"example_prices", r.prices.any_example()}, {"groups", groups}, {"unpriced_cards", r.unpriced}};
}

// ---------------------------------------------------------------------------------------------
// The page

std::vector<section> build_sections(const std::vector<result_set>& sets, const run_names& labels,
                                    const html_cost& cost) {
  const auto all = ok_cases(sets);
  std::vector<section> out;
  out.push_back(throughput_section(all, labels));
  out.push_back(latency_section(all, labels));
  out.push_back(stages_section(all, labels));
  out.push_back(memory_section(all, labels));
  out.push_back(precision_section(sets, labels));
  out.push_back(utilisation_section(sets, all, labels));
  out.push_back(comparison_section(sets, all, labels));
  out.push_back(cost_section(cost));
  return out;
}

ojson runs_json(const std::vector<result_set>& sets, const run_names& labels) {
  ojson runs = ojson::array();
  for (std::size_t i = 0; i < sets.size(); ++i) {
    const auto& s = sets[i];
    runs.push_back({{"label", labels[i]}, {"source", s.source}, {"card", card_of(s.context)},
                    {"backend", s.context.backend}, {"itera_version", s.context.itera_version},
                    {"git_commit", s.context.git_commit}, {"started_utc", s.context.started_utc},
                    {"cases", s.cases.size()}, {"truncated", s.truncated}});
  }
  return runs;
}

ojson model_of(const std::vector<result_set>& sets, const run_names& labels,
               const std::vector<section>& sections, const html_cost& cost) {
  ojson charts = ojson::array();
  for (const auto& s : sections)
    for (const auto& c : s.charts) charts.push_back(c.spec);
  return ojson{{"schema", "itera.report.html/1"}, {"runs", runs_json(sets, labels)}, {"charts", charts},
               {"cost", cost_json(cost)}};
}

void write_runs(std::ostream& out, const std::vector<result_set>& sets, const run_names& labels) {
  out << "<section id=\"runs\">\n<h2>Runs</h2>\n";
  if (sets.empty()) {
    out << "<p class=\"no-data\">No results files.</p>\n</section>\n";
    return;
  }
  html_table t;
  for (const char* h : {"run", "file", "card", "backend", "itera", "started (UTC)", "cases ok", "failed", "skipped", "ceilings"})
    t.column(h, std::string_view(h) == "cases ok" || std::string_view(h) == "failed" ||
                    std::string_view(h) == "skipped" || std::string_view(h) == "ceilings");
  for (std::size_t i = 0; i < sets.size(); ++i) {
    const auto& s = sets[i];
    std::size_t ok = 0, failed = 0, skipped = 0;
    for (const auto& c : s.cases) {
      if (c.role != "case") continue;
      if (c.status == case_status::ok) ++ok;
      else if (c.status == case_status::failed) ++failed;
      else ++skipped;
    }
    t.rows.push_back({labels[i], s.source, card_of(s.context), s.context.backend,
                      s.context.itera_version + " (" + report::short_commit(s.context.git_commit) + ")",
                      s.context.started_utc.empty() ? "-" : s.context.started_utc, std::to_string(ok),
                      std::to_string(failed), std::to_string(skipped), std::to_string(s.ceilings.size())});
  }
  t.write(out);
  for (std::size_t i = 0; i < sets.size(); ++i)
    if (sets[i].truncated)
      out << "<p class=\"warning\">" << html_escape(sets[i].source)
          << " ends with a cut-short line (a run killed while writing): the cases before it are shown.</p>\n";
  out << "<details class=\"numbers\"><summary>Command lines</summary>\n<ul>\n";
  for (std::size_t i = 0; i < sets.size(); ++i)
    out << "<li>" << html_escape(labels[i]) << ": <code>" << html_escape(sets[i].context.command) << "</code></li>\n";
  out << "</ul></details>\n</section>\n";
}

void write_section(std::ostream& out, const section& s) {
  out << "<section id=\"" << s.id << "\">\n<h2>" << html_escape(s.title) << "</h2>\n<p class=\"explain\">"
      << html_escape(s.explain) << "</p>\n";
  if (!s.warning.empty()) out << "<p class=\"warning\">" << html_escape(s.warning) << "</p>\n";
  for (const auto& c : s.charts) {
    const std::string id = c.spec["id"].get<std::string>();
    const std::string note = c.spec["note"].get<std::string>();
    const bool has_data = !c.spec["series"].empty();
    out << "<figure class=\"chart\" id=\"figure-" << html_escape(id) << "\" data-chart=\"" << html_escape(id) << "\">\n"
        << "<figcaption>" << html_escape(c.spec["title"].get<std::string>()) << "</figcaption>\n";
    if (has_data) {
      out << "<div class=\"chart-box\" style=\"height:" << c.height_px << "px\"><canvas id=\"chart-" << html_escape(id)
          << "\" role=\"img\" aria-label=\"" << html_escape(c.spec["title"].get<std::string>()) << "\"></canvas></div>\n";
      if (!note.empty()) out << "<p class=\"explain\">" << html_escape(note) << "</p>\n";
    } else {
      out << "<p class=\"no-data\">" << html_escape(note) << "</p>\n";
    }
    out << "</figure>\n";
    if (!c.table.rows.empty()) {
      out << "<details class=\"numbers\" open><summary>Numbers behind this chart</summary>\n";
      c.table.write(out);
      out << "</details>\n";
    }
  }
  out << "</section>\n";
}

void write_ceilings(std::ostream& out, const std::vector<result_set>& sets, const run_names& labels) {
  html_table t;
  t.column("run", false);
  t.column("ceiling", false);
  t.column("value", true);
  t.column("measured by", false);
  for (std::size_t i = 0; i < sets.size(); ++i)
    for (const auto& c : sets[i].ceilings) t.rows.push_back({labels[i], c.key, human_rate(c.value, c.unit), c.how});
  out << "<h3 id=\"ceilings\">Ceilings measured in each run</h3>\n";
  if (t.rows.empty()) out << "<p class=\"no-data\">No ceilings were measured in these runs (--no-ceilings).</p>\n";
  else t.write(out);
}

void write_not_ok(std::ostream& out, const std::vector<result_set>& sets, const run_names& labels) {
  html_table t;
  for (const char* h : {"run", "workload", "case", "status", "message"}) t.column(h, false);
  for (std::size_t i = 0; i < sets.size(); ++i)
    for (const auto& c : sets[i].cases)
      if (c.status != case_status::ok)
        t.rows.push_back({labels[i], c.workload + (c.is_ceiling() ? " [" + c.role + "]" : ""), c.axes_key(), to_string(c.status), c.message});
  if (t.rows.empty()) return;
  out << "<section id=\"not-ok\">\n<h2>Cases that did not finish</h2>\n"
      << "<p class=\"explain\">Failed and skipped cases are left out of every chart.</p>\n";
  t.write(out);
  out << "</section>\n";
}

std::string body_of(const std::vector<result_set>& sets, const run_names& labels,
                    const std::vector<section>& sections) {
  std::ostringstream out;
  out << "<header>\n<h1>itera results</h1>\n<p class=\"lead\">";
  for (std::size_t i = 0; i < labels.size(); ++i) out << (i ? ", " : "") << html_escape(labels[i]);
  out << "</p>\n<nav class=\"toc\"><a href=\"#runs\">Runs</a>";
  for (const auto& s : sections) out << "<a href=\"#" << s.id << "\">" << html_escape(s.title) << "</a>";
  out << "<a href=\"#licences\">Licences</a></nav>\n</header>\n<main>\n";
  write_runs(out, sets, labels);
  for (const auto& s : sections) {
    write_section(out, s);
    if (s.id == "utilisation") write_ceilings(out, sets, labels);
  }
  write_not_ok(out, sets, labels);
  out << "</main>\n<footer id=\"licences\">\n<p>Written by itera " << html_escape(std::string(this_build().version))
      << " (commit " << html_escape(report::short_commit(std::string(this_build().git_commit)))
      << ") with `itera report --format html`. Charts drawn by Chart.js "
      << html_escape(std::string(report::assets::chart_js_version))
      << ", embedded in this page (MIT licence). The page loads nothing from the network.</p>\n"
      << "<details><summary>Licences of the embedded code</summary>\n<h3>Chart.js</h3>\n<pre class=\"license\">"
      << html_escape(std::string(report::assets::chart_js_license)) << "</pre>\n<h3>@kurkle/color (bundled in Chart.js)</h3>\n"
      << "<pre class=\"license\">" << html_escape(std::string(report::assets::kurkle_color_license))
      << "</pre>\n</details>\n</footer>\n";
  return out.str();
}

// Fills the page template's @@NAME@@ slots in one pass, so no inserted text is scanned again.
std::string fill_template(std::string_view tpl, const std::map<std::string, std::string_view>& values) {
  std::string out;
  out.reserve(tpl.size() + [&] {
    std::size_t n = 0;
    for (const auto& [k, v] : values) n += v.size();
    return n;
  }());
  std::size_t pos = 0;
  while (pos < tpl.size()) {
    const auto start = tpl.find("@@", pos);
    if (start == std::string_view::npos) break;
    const auto end = tpl.find("@@", start + 2);
    if (end == std::string_view::npos) break;
    auto it = values.find(std::string(tpl.substr(start + 2, end - start - 2)));
    if (it == values.end()) {
      out.append(tpl.substr(pos, start + 2 - pos));
      pos = start + 2;
      continue;
    }
    out.append(tpl.substr(pos, start - pos));
    out.append(it->second);
    pos = end + 2;
  }
  out.append(tpl.substr(std::min(pos, tpl.size())));
  return out;
}

}  // namespace

html_cost html_cost_of(const std::vector<result_set>& sets, const std::string& prices_path) {
  html_cost out;
  out.prices_file = prices_path;
  const auto& cat = catalogue::builtin();
  const price_table prices = read_prices(prices_path, cat);  // a bad price file is the user's to fix: it throws
  try {
    check_common_recipe(sets);
    out.report = analyse_cost(sets, cat, prices, {});
  } catch (const input_error& e) {
    out.unavailable = e.what();
  }
  return out;
}

void check_report_prices_option(const std::string& format, const std::string& prices_path) {
  if (!prices_path.empty() && format != "html")
    throw usage_error("itera report: --prices is only valid with --format html (it adds the cost chart to the page); "
                      "for a cost table as markdown or JSON use itera cost FILE... --prices " + prices_path);
}

ojson html_report_model(const std::vector<result_set>& sets, const html_cost& cost) {
  const auto labels = run_labels(sets);
  return model_of(sets, labels, build_sections(sets, labels, cost), cost);
}

void write_html(std::ostream& out, const std::vector<result_set>& sets, const html_cost& cost) {
  const auto labels = run_labels(sets);
  const auto sections = build_sections(sets, labels, cost);
  const std::string data = report::json_for_script(model_of(sets, labels, sections, cost));
  std::string title = "itera results";
  if (sets.size() == 1) title += ": " + labels[0];
  else if (sets.size() > 1) title += ": " + std::to_string(sets.size()) + " runs";
  const std::string title_html = html_escape(title);
  const std::string body = body_of(sets, labels, sections);
  const std::string generator = html_escape("itera " + std::string(this_build().version) + ", Chart.js " +
                                            std::string(report::assets::chart_js_version));
  out << fill_template(report::assets::page_template, {{"TITLE", title_html},
                                                       {"GENERATOR", generator},
                                                       {"CSS", report::assets::page_css},
                                                       {"BODY", body},
                                                       {"DATA", data},
                                                       {"CHART_JS", report::assets::chart_js},
                                                       {"PAGE_JS", report::assets::page_js}});
}

}  // namespace itera
