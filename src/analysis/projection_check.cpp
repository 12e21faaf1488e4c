// The projection checked against a measurement: source projected onto the target's card, beside
// what the target measured (projection.hpp, validate_projection).
#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>

#include <fmt/format.h>

#include "itera/analysis/fit.hpp"
#include "itera/analysis/projection.hpp"
#include "itera/core/errors.hpp"

namespace itera {

namespace {

std::string device_text(const result_set& s) {
  const auto& d = s.context.device;
  std::string name = d.is_object() ? d.value("name", s.context.backend) : s.context.backend;
  if (d.is_object() && d.contains("runtime") && d["runtime"].is_object() && d["runtime"].contains("sm_limit"))
    name += fmt::format(" ({} of {} SMs: ITERA_CUDA_SM_LIMIT)", d["runtime"]["sm_limit"].dump(),
                        d["runtime"].value("multiprocessor_count", 0));
  return name;
}

}  // namespace

projection_validation validate_projection(const result_set& source, const result_set& target, const catalogue& cat) {
  projection_validation v;
  v.source_file = source.source;
  v.target_file = target.source;
  v.target_card = analysis::catalogue_id_of(target);
  if (v.target_card.empty() || !cat.find(v.target_card))
    throw input_error(fmt::format("{}: the device it ran on has no catalogue match: the projection can only be "
                                  "checked against a catalogue card",
                                  target.source));
  v.source_device = device_text(source);
  v.target_device = device_text(target);
  std::map<std::string, double> src_ceil, tgt_ceil;
  for (const auto& c : source.ceilings) src_ceil[c.key] = c.value;
  for (const auto& c : target.ceilings) tgt_ceil[c.key] = c.value;
  for (const auto& [k, val] : src_ceil)
    if (tgt_ceil.count(k)) v.ceilings.push_back({k, {val, tgt_ceil[k]}});

  projection_options po;
  po.cards = {v.target_card};
  const projection_report projected = project_results(source, cat, po);
  // The target's own measurement through the same lens: its stages' per-repetition times.
  const projection_report measured = project_results(target, cat, po);

  for (const auto& sc : projected.cases) {
    const auto twin = std::find_if(measured.cases.begin(), measured.cases.end(), [&](const case_projection& m) {
      return m.workload == sc.workload && m.case_key == sc.case_key;
    });
    if (twin == measured.cases.end()) {
      v.unmatched.push_back(sc.workload + " " + sc.case_key);
      continue;
    }
    const card_projection& card = sc.cards.front();
    case_check c;
    c.workload = sc.workload;
    c.case_key = sc.case_key;
    c.source_ns = sc.measured_time_ns;
    c.projected_ns = card.case_time_ns;
    c.measured_ns = twin->measured_time_ns;
    c.error = c.measured_ns > 0 ? c.projected_ns / c.measured_ns - 1 : 0;
    // Scaled to the target's measured ceilings instead: time x datasheet peak / measured ceiling.
    bool all_at_ceilings = true;
    double shift_ns = 0;
    for (std::size_t i = 0; i < sc.stages.size(); ++i) {
      const auto& w = sc.stages[i];
      const stage_projection& sp = card.stages[i];
      std::optional<double> ceiling;
      if (w.bound == stage_bound::bandwidth && tgt_ceil.count("copy.d2d")) ceiling = tgt_ceil["copy.d2d"];
      if (w.bound == stage_bound::compute && tgt_ceil.count("gemm." + w.format)) ceiling = tgt_ceil["gemm." + w.format];
      std::optional<double> at;
      if (w.bound == stage_bound::compute || w.bound == stage_bound::bandwidth) {
        if (ceiling && *ceiling > 0 && sp.target_peak > 0) at = sp.time_ns * sp.target_peak / *ceiling;
        else all_at_ceilings = false;
      }
      if (at) shift_ns += *at - sp.time_ns;
      if (w.bound == stage_bound::host) continue;
      const auto t = std::find_if(twin->stages.begin(), twin->stages.end(), [&](const stage_work& x) { return x.path == w.path; });
      if (t == twin->stages.end() || !(t->time_ns > 0)) continue;
      stage_check st{w.path, w.bound, sp.time_ns, t->time_ns, sp.time_ns / t->time_ns - 1, std::nullopt, std::nullopt};
      if (at) st.at_ceilings_ns = *at, st.at_ceilings_error = *at / t->time_ns - 1;
      c.stages.push_back(std::move(st));
    }
    if (all_at_ceilings && c.measured_ns > 0) {
      c.at_ceilings_ns = c.projected_ns + shift_ns;
      c.at_ceilings_error = *c.at_ceilings_ns / c.measured_ns - 1;
    }
    v.cases.push_back(std::move(c));
  }
  for (const auto& s : projected.not_projected) v.unmatched.push_back(s);
  if (v.cases.empty())
    throw input_error(fmt::format("{} and {}: no case was measured in both (same workload and axes); run the same "
                                  "command on both cards",
                                  source.source, target.source));
  double sum = 0, sum_at = 0;
  bool all_at = true;
  for (const auto& c : v.cases) {
    sum += std::fabs(c.error);
    v.max_abs_error = std::max(v.max_abs_error, std::fabs(c.error));
    if (c.at_ceilings_error) sum_at += std::fabs(*c.at_ceilings_error);
    else all_at = false;
  }
  v.mean_abs_error = sum / static_cast<double>(v.cases.size());
  if (all_at) v.mean_abs_error_at_ceilings = sum_at / static_cast<double>(v.cases.size());
  return v;
}

void write_validation_markdown(std::ostream& out, const projection_validation& v) {
  out << "# itera project: the projection checked against a measurement\n\n";
  out << fmt::format("- source: {} on {}\n", v.source_file, v.source_device);
  out << fmt::format("- target: {} on {} (catalogue {})\n", v.target_file, v.target_device, v.target_card);
  out << "- projected: the source's stages scaled from its measured ceilings to the target card's catalogue peaks, "
         "as for any card not measured; measured: the target's own times\n";
  out << fmt::format("- cases in both: {}; mean |error| {}, max |error| {} (error = projected / measured - 1)\n",
                     v.cases.size(), analysis::percent_text(v.mean_abs_error), analysis::percent_text(v.max_abs_error));
  if (v.mean_abs_error_at_ceilings)
    out << fmt::format("- scaled to the target's measured ceilings instead of its datasheet peaks: mean |error| {} (the "
                       "rest of the error is the datasheet peaks against what the card reaches)\n",
                       analysis::percent_text(*v.mean_abs_error_at_ceilings));
  if (!v.ceilings.empty()) {
    out << "\nCeilings measured in each run:\n\n";
    analysis::text_table t;
    t.column("ceiling", false);
    t.column("source", true);
    t.column("target", true);
    t.column("target / source", true);
    for (const auto& [k, p] : v.ceilings) {
      const bool flops = k.rfind("gemm.", 0) == 0;
      const auto txt = [&](double x) { return flops ? fmt::format("{:.4g} TFLOP/s", x * 1e-12) : fmt::format("{:.4g} GB/s", x * 1e-9); };
      t.rows.push_back({k, txt(p.first), txt(p.second), p.first > 0 ? fmt::format("{:.2f}x", p.second / p.first) : "-"});
    }
    t.write(out);
  }
  out << "\n";
  analysis::text_table t;
  t.column("case", false);
  t.column("source measured", true);
  t.column("target projected", true);
  t.column("target measured", true);
  t.column("error", true);
  t.column("at measured ceilings", true);
  t.column("error", true);
  const auto opt_time = [](const std::optional<double>& x) { return x ? analysis::time_text(*x) : std::string("-"); };
  const auto opt_err = [](const std::optional<double>& x) { return x ? fmt::format("{:+.1f}%", *x * 100) : std::string("-"); };
  for (const auto& c : v.cases)
    t.rows.push_back({c.workload + " " + c.case_key, analysis::time_text(c.source_ns), analysis::time_text(c.projected_ns),
                      analysis::time_text(c.measured_ns), fmt::format("{:+.1f}%", c.error * 100), opt_time(c.at_ceilings_ns),
                      opt_err(c.at_ceilings_error)});
  t.write(out);
  for (const auto& c : v.cases) {
    if (c.stages.empty()) continue;
    out << fmt::format("\n## {} {}\n\n", c.workload, c.case_key);
    analysis::text_table st;
    st.column("stage", false);
    st.column("bound", false);
    st.column("projected", true);
    st.column("measured", true);
    st.column("error", true);
    st.column("at measured ceilings", true);
    st.column("error", true);
    for (const auto& s : c.stages)
      st.rows.push_back({s.path, to_string(s.bound), analysis::time_text(s.projected_ns), analysis::time_text(s.measured_ns),
                         fmt::format("{:+.1f}%", s.error * 100), opt_time(s.at_ceilings_ns), opt_err(s.at_ceilings_error)});
    st.write(out);
  }
  if (!v.unmatched.empty()) {
    out << "\nNot compared:\n";
    for (const auto& u : v.unmatched) out << "- " << u << '\n';
  }
}

void write_validation_json(std::ostream& out, const projection_validation& v) {
  ojson j;
  j["schema"] = "itera.projection_check/1";
  j["source"] = {{"file", v.source_file}, {"device", v.source_device}};
  j["target"] = {{"file", v.target_file}, {"device", v.target_device}, {"card", v.target_card}};
  j["ceilings"] = ojson::array();
  for (const auto& [k, p] : v.ceilings) j["ceilings"].push_back({{"key", k}, {"source", p.first}, {"target", p.second}});
  j["cases"] = ojson::array();
  for (const auto& c : v.cases) {
    const auto opt = [](const std::optional<double>& x) { return x ? ojson(*x) : ojson(nullptr); };
    ojson cj = {{"workload", c.workload},       {"case", c.case_key},         {"source_ns", c.source_ns},
                {"projected_ns", c.projected_ns}, {"measured_ns", c.measured_ns}, {"error", c.error},
                {"at_ceilings_ns", opt(c.at_ceilings_ns)}, {"at_ceilings_error", opt(c.at_ceilings_error)}};
    cj["stages"] = ojson::array();
    for (const auto& s : c.stages)
      cj["stages"].push_back({{"path", s.path}, {"bound", to_string(s.bound)}, {"projected_ns", s.projected_ns},
                              {"measured_ns", s.measured_ns}, {"error", s.error},
                              {"at_ceilings_ns", opt(s.at_ceilings_ns)}, {"at_ceilings_error", opt(s.at_ceilings_error)}});
    j["cases"].push_back(std::move(cj));
  }
  j["unmatched"] = v.unmatched;
  j["mean_abs_error"] = v.mean_abs_error;
  j["max_abs_error"] = v.max_abs_error;
  j["mean_abs_error_at_ceilings"] = v.mean_abs_error_at_ceilings ? ojson(*v.mean_abs_error_at_ceilings) : ojson(nullptr);
  out << j.dump(2) << '\n';
}

}  // namespace itera
