#include <algorithm>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "apps/itera/commands.hpp"
#include "itera/analysis/fit.hpp"
#include "itera/core/errors.hpp"
#include "itera/suite.hpp"

namespace itera::cli {

namespace {

// `itera fit --confirm`: the largest batch the fit predicts at the sweep's context, on
// this machine's card (the one the results were measured on), really run; its measured peak
// against the prediction (docs/analysis.md "Memory fit").
struct confirmation {
  std::string group;
  double context = 0;
  long long batch = 0;
  double free_bytes = 0, predicted_bytes = 0;
  std::optional<double> measured_bytes;
  std::string status;  // "confirmed", "over the prediction", or why it could not be confirmed
};

const case_record* find_case(const std::vector<result_set>& sets, const memory_point& p) {
  for (const auto& s : sets)
    if (s.source == p.source)
      for (const auto& c : s.cases)
        if (c.axes_key() == p.case_key) return &c;
  return nullptr;
}

std::string device_name_of(const std::vector<result_set>& sets, const memory_point& p) {
  for (const auto& s : sets)
    if (s.source == p.source && s.context.device.is_object()) return s.context.device.value("name", std::string());
  return {};
}

std::vector<confirmation> confirm(const std::vector<fit_report>& reports, const std::vector<result_set>& sets,
                                  const std::string& out_path, const std::string& command_line) {
  auto dev = open_backend(default_backend_name());
  std::unique_ptr<result_stream> out;
  if (!out_path.empty()) {
    out = std::make_unique<result_stream>(out_path);
    out->write(make_context(*dev, command_line));
  }
  run_options ro;
  ro.warmup_min_count = 1;
  ro.warmup_min_time_s = 0;
  ro.stop.min_samples = 1;
  ro.stop.max_samples = 3;
  ro.stop.min_time_s = 0;
  ro.stop.max_time_s = 5;
  ro.verify = false;  // the peak is what is confirmed; the numerics are verified by the sweep itself
  runner r(*dev, ro, out.get());
  std::vector<confirmation> done;
  for (const auto& rep : reports) {
    if (!rep.fitted || rep.contexts.empty()) continue;
    confirmation c;
    c.group = rep.workload + " " + rep.group;
    // The context with the most measured points (the batch sweep's; ties: the longer one).
    std::size_t most = 0;
    for (double ctx : rep.contexts) {
      const auto n = static_cast<std::size_t>(std::count_if(rep.points.begin(), rep.points.end(),
                                                            [&](const memory_point& p) { return p.context == ctx; }));
      if (n >= most) most = n, c.context = ctx;
    }
    // A point at that context, the largest batch measured there: its axes are the template.
    const memory_point* tpl = nullptr;
    for (const auto& p : rep.points)
      if (p.context == c.context && (!tpl || p.batch > tpl->batch)) tpl = &p;
    const std::string measured_on = device_name_of(sets, *tpl);
    if (measured_on != dev->device_name()) {
      c.status = fmt::format("not confirmed: measured on {}, this machine has {} ({}): --confirm runs where the card "
                             "is at hand",
                             measured_on.empty() ? "an unknown device" : measured_on, dev->device_name(), dev->name());
      done.push_back(std::move(c));
      continue;
    }
    c.free_bytes = static_cast<double>(dev->memory().free_bytes);
    c.batch = rep.model.largest_batch(c.context, c.free_bytes);
    if (c.batch <= 0) {
      c.status = c.batch == 0 ? "not confirmed: the fit predicts that no batch fits in the free memory"
                              : "not confirmed: the fit has no bound (a non-positive per-sequence term)";
      done.push_back(std::move(c));
      continue;
    }
    c.predicted_bytes = rep.model.predict(static_cast<double>(c.batch), c.context);
    const case_record* t = find_case(sets, *tpl);
    const auto& w = builtin_workloads().get(rep.workload);
    axis_overrides overrides;
    for (const auto& [k, v] : t->axes) overrides.push_back({k, k == "batch" ? std::to_string(c.batch) : v});
    const auto cases = expand_cases(w, overrides);
    progress::log(fmt::format("itera: confirming {}: batch {} at context {:g} (predicted peak {}, {} free)", c.group,
                              c.batch, c.context, analysis::gib_text(c.predicted_bytes), analysis::gib_text(c.free_bytes)));
    const auto records = r.run(w, cases);
    const case_record& got = records.front();
    if (got.status != case_status::ok) {
      c.status = fmt::format("not confirmed: the case {}: {}", to_string(got.status), got.message);
    } else if (const metric* peak = got.find_metric("memory/measured_peak")) {
      c.measured_bytes = peak->value;
      const double err = peak->value / c.predicted_bytes - 1;
      c.status = peak->value <= c.free_bytes
                     ? fmt::format("confirmed: it ran, peak {} of the prediction", analysis::percent_text(1 + err))
                     : "over the free memory: the prediction was too low";
    } else {
      c.status = "not confirmed: the case reported no memory/measured_peak";
    }
    done.push_back(std::move(c));
  }
  return done;
}

void write_confirmations(std::ostream& os, const std::vector<confirmation>& cs) {
  os << "\n## Confirmed on this card (itera fit --confirm)\n\n";
  analysis::text_table t;
  for (const char* h : {"group", "context", "largest batch (fit)", "free", "predicted peak", "measured peak", "result"})
    t.column(h, std::string_view(h) != "group" && std::string_view(h) != "result");
  for (const auto& c : cs)
    t.rows.push_back({c.group, fmt::format("{:g}", c.context), c.batch > 0 ? std::to_string(c.batch) : "-",
                      c.free_bytes > 0 ? analysis::gib_text(c.free_bytes) : "-",
                      c.predicted_bytes > 0 ? analysis::gib_text(c.predicted_bytes) : "-",
                      c.measured_bytes ? analysis::gib_text(*c.measured_bytes) : "-", c.status});
  t.write(os);
}

}  // namespace

command_fn add_fit(CLI::App& app, const std::string& command_line) {
  struct opts {
    std::vector<std::string> files;
    std::string format = "md", confirm_out;
    bool confirm = false;
    fit_options fit;
  };
  auto o = std::make_shared<opts>();
  auto* cmd = app.add_subcommand("fit", "Fit a memory model to measured peaks and predict the largest batch and context per card");
  cmd->add_option("results", o->files, "results files (JSON lines) sharing one recipe")->required();
  cmd->add_option("--workload", o->fit.workload, "workload whose cases to fit")->capture_default_str();
  cmd->add_option("--card", o->fit.cards, "catalogue card id to predict for (repeatable; default: every card)");
  cmd->add_option("--reserve", o->fit.reserve_fraction, "fraction of each card's nominal memory held back")
      ->capture_default_str();
  cmd->add_option("--format", o->format, "md or json")->check(CLI::IsMember({"md", "json"}));
  cmd->add_flag("--confirm", o->confirm,
                "run the largest batch the fit predicts at the sweep's context (the one with the most points) on this machine's card (the "
                "one measured) and compare its peak with the prediction");
  cmd->add_option("--confirm-out", o->confirm_out, "results file for the confirming runs (with --confirm)");
  return [o, command_line]() {
    if (!o->confirm_out.empty() && !o->confirm) throw usage_error("--confirm-out needs --confirm");
    if (o->confirm && o->format == "json") throw usage_error("--confirm prints a markdown table: use --format md");
    std::vector<result_set> sets;
    for (const auto& f : o->files) sets.push_back(read_results(f));
    check_common_recipe(sets);
    const auto reports = analyse_memory(sets, catalogue::builtin(), o->fit);
    bool any = false;
    std::string why;
    for (const auto& r : reports) {
      any = any || r.fitted;
      if (!r.fitted) why += fmt::format("\n  {} {}: {}", r.workload, r.group, r.why_not);
    }
    if (!any) throw input_error("no group of points could be fitted:" + why);
    if (o->format == "json") write_fit_json(std::cout, reports);
    else write_fit_markdown(std::cout, reports, sets);
    if (!o->confirm) return static_cast<int>(exit_code::ok);
    const auto cs = confirm(reports, sets, o->confirm_out, command_line);
    write_confirmations(std::cout, cs);
    const bool all = std::all_of(cs.begin(), cs.end(), [](const confirmation& c) { return c.status.rfind("confirmed", 0) == 0; });
    return static_cast<int>(all ? exit_code::ok : exit_code::cases_failed);
  };
}

}  // namespace itera::cli
