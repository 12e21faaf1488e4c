// Memory fit: least squares over the measured peaks of a sweep (docs/analysis.md).
#include "itera/analysis/fit.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <ostream>
#include <set>

#include <fmt/format.h>

#include "itera/analysis/compare.hpp"
#include "itera/core/errors.hpp"

namespace itera {

namespace analysis {

void text_table::write(std::ostream& out) const {
  const auto cell = [](std::string s) {
    std::string r;
    for (char c : s) {
      if (c == '|') r += "\\|";
      else if (c == '\n' || c == '\r') r += ' ';
      else r += c;
    }
    return r;
  };
  std::vector<std::vector<std::string>> all;
  all.push_back({});
  for (const auto& h : headers) all.back().push_back(cell(h));
  for (const auto& row : rows) {
    all.push_back({});
    for (std::size_t i = 0; i < headers.size(); ++i) all.back().push_back(i < row.size() ? cell(row[i]) : "-");
  }
  std::vector<std::size_t> width(headers.size(), 3);
  for (const auto& row : all)
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  const auto line = [&](const std::vector<std::string>& row) {
    out << '|';
    for (std::size_t i = 0; i < row.size(); ++i) {
      const std::string pad(width[i] - row[i].size(), ' ');
      out << ' ' << (right[i] ? pad + row[i] : row[i] + pad) << " |";
    }
    out << '\n';
  };
  line(all[0]);
  out << '|';
  for (std::size_t i = 0; i < headers.size(); ++i)
    out << ' ' << (right[i] ? std::string(width[i] - 1, '-') + ":" : std::string(width[i], '-')) << " |";
  out << '\n';
  for (std::size_t r = 1; r < all.size(); ++r) line(all[r]);
}

std::string gib_text(double bytes) { return fmt::format("{:.2f} GiB", bytes / 1073741824.0); }
std::string percent_text(double fraction) { return fmt::format("{:.2f}%", fraction * 100.0); }

std::string time_text(double ns) {
  if (ns >= 1e9) return fmt::format("{:.3g} s", ns * 1e-9);
  if (ns >= 1e6) return fmt::format("{:.3g} ms", ns * 1e-6);
  if (ns >= 1e3) return fmt::format("{:.3g} us", ns * 1e-3);
  return fmt::format("{:.3g} ns", ns);
}

std::string catalogue_id_of(const result_set& set) {
  const auto& d = set.context.device;
  if (d.is_object() && d.contains("variant") && d["variant"].is_object() && d["variant"].contains("id") &&
      d["variant"]["id"].is_string())
    return d["variant"]["id"].get<std::string>();
  return {};
}

}  // namespace analysis

namespace {

double axis_number(const case_record& r, const std::string& name, double fallback) {
  const std::string* v = r.find_axis(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v->c_str(), &end);
  return end != v->c_str() && *end == '\0' ? d : fallback;
}

// Axes that do not change the memory of an llm case, or are the fit's own variables.
bool outside_group_key(const std::string& workload, const std::string& axis) {
  static const std::set<std::string> size_axes = {"batch", "context", "prompt", "output"};
  static const std::set<std::string> llm_other = {"loop", "seed", "rate", "requests", "ttft_ms", "tpot_ms", "prompts"};
  return size_axes.count(axis) || (workload == "llm" && llm_other.count(axis));
}

// The context a case held: the workload's resolved field, else the axis, else prompt + output.
double case_context(const case_record& r) {
  if (const auto it = r.fields.find("context"); it != r.fields.end()) {
    char* end = nullptr;
    const double d = std::strtod(it->second.c_str(), &end);
    if (end != it->second.c_str() && *end == '\0' && d > 0) return d;
  }
  const double axis = axis_number(r, "context", 0);
  if (axis > 0) return axis;
  return axis_number(r, "prompt", 0) + axis_number(r, "output", 0);
}

struct combo_key {
  double batch, context;
  bool operator<(const combo_key& o) const { return batch != o.batch ? batch < o.batch : context < o.context; }
};

std::set<combo_key> combinations(const std::vector<memory_point>& points) {
  std::set<combo_key> s;
  for (const auto& p : points) s.insert({p.batch, p.context});
  return s;
}

}  // namespace

std::vector<memory_group> collect_memory_points(const std::vector<result_set>& sets, const std::string& workload) {
  std::vector<memory_group> groups;
  for (const auto& set : sets) {
    for (const auto& r : set.cases) {
      if (r.role != "case" || r.status != case_status::ok) continue;
      if (!workload.empty() && r.workload != workload) continue;
      const metric* peak = r.find_metric("memory/measured_peak");
      if (!peak || !(peak->value > 0)) continue;
      memory_point p;
      p.source = set.source;
      p.case_key = r.axes_key();
      p.batch = axis_number(r, "batch", 1);
      p.context = case_context(r);
      p.peak_bytes = peak->value;
      if (const metric* m = r.find_metric("memory/plan/total")) p.plan_bytes = m->value;
      if (const metric* m = r.find_metric("memory/free_before")) p.free_before_bytes = m->value;
      if (const metric* m = r.find_metric("memory/largest_batch")) p.workload_largest_batch = m->value;
      if (!(p.batch > 0) || !(p.context > 0)) continue;
      std::string key;
      for (const auto& [k, v] : r.axes)
        if (!outside_group_key(r.workload, k)) key += (key.empty() ? "" : " ") + k + "=" + v;
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const memory_group& g) { return g.workload == r.workload && g.key == key; });
      if (it == groups.end()) {
        groups.push_back({r.workload, key, {}});
        it = groups.end() - 1;
      }
      it->points.push_back(std::move(p));
    }
  }
  return groups;
}

long long memory_model::largest_batch(double context, double usable_bytes) const {
  const double marginal = per_token_bytes * context + per_sample_bytes;
  const double room = usable_bytes - fixed_bytes;
  if (room < marginal) return 0;
  if (!(marginal > 0)) return -1;
  return static_cast<long long>(std::floor(room / marginal));
}

long long memory_model::largest_context(double batch, double usable_bytes) const {
  const double room = usable_bytes - fixed_bytes - per_sample_bytes * batch;
  const double marginal = per_token_bytes * batch;
  if (room < marginal) return 0;
  if (!(marginal > 0)) return -1;
  return static_cast<long long>(std::floor(room / marginal));
}

memory_model fit_memory(const std::vector<memory_point>& points) {
  const auto combos = combinations(points);
  if (combos.size() < min_fit_combinations)
    throw input_error(fmt::format(
        "too few points to fit: {} distinct (batch, context) combination{} measured, at least {} needed "
        "(the model has 3 terms: fixed, per token, per sample)",
        combos.size(), combos.size() == 1 ? "" : "s", min_fit_combinations));
  std::set<double> batches, contexts;
  for (const auto& c : combos) {
    batches.insert(c.batch);
    contexts.insert(c.context);
  }
  if (contexts.size() == 1)
    throw input_error(fmt::format(
        "the points cannot separate the per-token from the per-sample term: every point has context {:g}; "
        "measure at least one more context (prompt or output length)",
        *contexts.begin()));
  if (batches.size() == 1)
    throw input_error(fmt::format(
        "the points cannot separate the fixed from the per-sample term: every point has batch {:g}; "
        "measure at least one more batch",
        *batches.begin()));

  // Columns [1, batch x context, batch], each scaled to unit norm, orthogonalised by modified
  // Gram-Schmidt (QR): a column whose remainder is negligible makes the data collinear.
  const std::size_t n = points.size();
  std::array<std::vector<double>, 3> q;
  for (auto& col : q) col.resize(n);
  std::vector<double> y(n);
  for (std::size_t i = 0; i < n; ++i) {
    q[0][i] = 1.0;
    q[1][i] = points[i].batch * points[i].context;
    q[2][i] = points[i].batch;
    y[i] = points[i].peak_bytes;
  }
  std::array<double, 3> scale{};
  for (int j = 0; j < 3; ++j) {
    double s = 0;
    for (double v : q[j]) s += v * v;
    scale[j] = std::sqrt(s);
    for (double& v : q[j]) v /= scale[j];
  }
  double r[3][3] = {};
  for (int j = 0; j < 3; ++j) {
    for (int k = 0; k < j; ++k) {
      double d = 0;
      for (std::size_t i = 0; i < n; ++i) d += q[k][i] * q[j][i];
      r[k][j] = d;
      for (std::size_t i = 0; i < n; ++i) q[j][i] -= d * q[k][i];
    }
    double s = 0;
    for (double v : q[j]) s += v * v;
    r[j][j] = std::sqrt(s);
    if (r[j][j] < 1e-9)
      throw input_error(
          "the points are collinear: batch x context is a linear function of batch over the measured "
          "points, so the per-token and per-sample terms cannot be told apart; measure a batch at another context");
    for (double& v : q[j]) v /= r[j][j];
  }
  std::array<double, 3> qty{};
  for (int j = 0; j < 3; ++j)
    for (std::size_t i = 0; i < n; ++i) qty[j] += q[j][i] * y[i];
  std::array<double, 3> beta{};
  for (int j = 2; j >= 0; --j) {
    double s = qty[j];
    for (int k = j + 1; k < 3; ++k) s -= r[j][k] * beta[k];
    beta[j] = s / r[j][j];
  }
  memory_model m;
  m.fixed_bytes = beta[0] / scale[0];
  m.per_token_bytes = beta[1] / scale[1];
  m.per_sample_bytes = beta[2] / scale[2];
  return m;
}

void check_common_recipe(const std::vector<result_set>& sets) {
  for (std::size_t i = 1; i < sets.size(); ++i) {
    const comparison c = compare_results(sets[0], sets[i], {"cases"});
    if (!c.refused) continue;
    std::string fields;
    for (const auto& f : c.refused_fields) fields += (fields.empty() ? "" : ", ") + f;
    throw input_error(fmt::format("{} and {} do not share a recipe (as itera compare refuses them): {} differ",
                                  sets[0].source, sets[i].source, fields));
  }
}

std::vector<fit_report> analyse_memory(const std::vector<result_set>& sets, const catalogue& cat, const fit_options& o) {
  if (!(o.reserve_fraction >= 0 && o.reserve_fraction < 1))
    throw usage_error(fmt::format("reserve must be a fraction in [0, 1), got {:g}", o.reserve_fraction));
  std::vector<const catalogue_card*> cards;
  for (const auto& id : o.cards) {
    const catalogue_card* c = cat.find(id);
    if (!c) {
      std::string known;
      for (const auto& k : cat.cards()) known += (known.empty() ? "" : ", ") + k.id;
      throw usage_error(fmt::format("card '{}' is not in the catalogue (known: {})", id, known));
    }
    cards.push_back(c);
  }
  if (cards.empty())
    for (const auto& c : cat.cards()) cards.push_back(&c);
  // Card sizes: one row per nominal memory size, naming the cards that have it.
  std::map<double, std::vector<std::string>> sizes;
  for (const auto* c : cards) sizes[c->memory_gb].push_back(c->id);

  const auto groups = collect_memory_points(sets, o.workload);
  if (groups.empty())
    throw input_error(fmt::format("no ok {}case with memory/measured_peak in the results: nothing to fit",
                                  o.workload.empty() ? "" : o.workload + " "));

  std::vector<fit_report> reports;
  for (const auto& g : groups) {
    fit_report rep;
    rep.workload = g.workload;
    rep.group = g.key;
    rep.points = g.points;
    rep.reserve_fraction = o.reserve_fraction;
    std::set<double> bs, cs;
    for (const auto& p : g.points) {
      bs.insert(p.batch);
      cs.insert(p.context);
      if (p.plan_bytes)
        rep.plan_max_rel_error = std::max(rep.plan_max_rel_error, std::abs(*p.plan_bytes - p.peak_bytes) / p.peak_bytes);
    }
    rep.batches.assign(bs.begin(), bs.end());
    rep.contexts.assign(cs.begin(), cs.end());
    try {
      rep.model = fit_memory(g.points);
      rep.fitted = true;
    } catch (const input_error& e) {
      rep.why_not = e.what();
      reports.push_back(std::move(rep));
      continue;
    }
    // Leave one (batch, context) combination out at a time.
    double sum = 0;
    for (const auto& c : combinations(g.points)) {
      loo_check chk;
      chk.batch = c.batch;
      chk.context = c.context;
      std::vector<memory_point> rest;
      double measured = 0;
      int count = 0;
      for (const auto& p : g.points) {
        if (p.batch == c.batch && p.context == c.context) {
          measured += p.peak_bytes;
          ++count;
        } else {
          rest.push_back(p);
        }
      }
      chk.measured_bytes = measured / count;
      try {
        const memory_model m = fit_memory(rest);
        chk.predicted_bytes = m.predict(c.batch, c.context);
        chk.rel_error = std::abs(*chk.predicted_bytes - chk.measured_bytes) / chk.measured_bytes;
        rep.loo_max_rel_error = std::max(rep.loo_max_rel_error, *chk.rel_error);
        sum += *chk.rel_error;
        ++rep.loo_tested;
      } catch (const input_error& e) {
        chk.why_not = e.what();
      }
      rep.loo.push_back(std::move(chk));
    }
    if (rep.loo_tested) rep.loo_mean_rel_error = sum / static_cast<double>(rep.loo_tested);
    for (const auto& [gb, ids] : sizes) {
      card_size_prediction cp;
      cp.memory_gb = gb;
      cp.card_ids = ids;
      cp.usable_bytes = gb * 1073741824.0 * (1.0 - o.reserve_fraction);
      for (double c : rep.contexts) cp.largest_batch.push_back(rep.model.largest_batch(c, cp.usable_bytes));
      for (double b : rep.batches) cp.largest_context.push_back(rep.model.largest_context(b, cp.usable_bytes));
      rep.cards.push_back(std::move(cp));
    }
    // The workload's own edge on the measured device, where it reported one.
    std::set<combo_key> seen;
    for (const auto& p : g.points) {
      if (!p.free_before_bytes || !p.workload_largest_batch || !seen.insert({p.batch, p.context}).second) continue;
      fit_report::device_check d;
      d.context = p.context;
      d.batch = p.batch;
      d.free_bytes = *p.free_before_bytes;
      d.fit_largest_batch = rep.model.largest_batch(p.context, d.free_bytes);
      d.workload_largest_batch = *p.workload_largest_batch;
      rep.device.push_back(d);
    }
    reports.push_back(std::move(rep));
  }
  return reports;
}

namespace {

std::string count_text(long long v) { return v < 0 ? "unbounded" : std::to_string(v); }

}  // namespace

void write_fit_markdown(std::ostream& out, const std::vector<fit_report>& reports, const std::vector<result_set>& sets) {
  using analysis::gib_text;
  using analysis::percent_text;
  out << "# itera fit: memory model\n\n";
  out << "Model: peak = fixed + per_token x (batch x context) + per_sample x batch, least squares over the "
         "measured peaks (memory/measured_peak).\n\n";
  for (const auto& s : sets) out << "- results: " << s.source << "\n";
  out << '\n';
  for (const auto& rep : reports) {
    out << fmt::format("## {} {}\n\n", rep.workload, rep.group);
    analysis::text_table pts;
    for (const char* h : {"batch", "context", "measured peak", "workload plan", "fit", "left out: predicted", "left out: error"})
      pts.column(h, true);
    pts.column("source", false);
    for (const auto& p : rep.points) {
      std::vector<std::string> row = {fmt::format("{:g}", p.batch), fmt::format("{:g}", p.context), gib_text(p.peak_bytes),
                                      p.plan_bytes ? gib_text(*p.plan_bytes) : "-",
                                      rep.fitted ? gib_text(rep.model.predict(p.batch, p.context)) : "-"};
      const auto it = std::find_if(rep.loo.begin(), rep.loo.end(),
                                   [&](const loo_check& c) { return c.batch == p.batch && c.context == p.context; });
      if (it != rep.loo.end() && it->predicted_bytes) {
        row.push_back(gib_text(*it->predicted_bytes));
        row.push_back(percent_text(*it->rel_error));
      } else {
        row.push_back("-");
        row.push_back(it != rep.loo.end() ? "not testable" : "-");
      }
      row.push_back(p.source);
      pts.rows.push_back(std::move(row));
    }
    out << "Measured points:\n\n";
    pts.write(out);
    out << '\n';
    if (rep.plan_max_rel_error >= 0)
      out << fmt::format("- workload plan (memory/plan/total) against the measured peak: max error {}\n",
                         percent_text(rep.plan_max_rel_error));
    if (!rep.fitted) {
      out << fmt::format("- not fitted: {}\n\n", rep.why_not);
      continue;
    }
    out << fmt::format("- fit: fixed {}, per token {:.1f} KiB, per sample {:.2f} MiB\n", gib_text(rep.model.fixed_bytes),
                       rep.model.per_token_bytes / 1024.0, rep.model.per_sample_bytes / 1048576.0);
    if (rep.model.per_token_bytes < 0 || rep.model.per_sample_bytes < 0 || rep.model.fixed_bytes < 0)
      out << "- a negative term: the three-term form does not describe how this workload allocates (for llm offline, "
             "activations grow with batch x prompt, which the per-token and per-sample terms share); predictions far "
             "from the measured points are less reliable\n";
    if (rep.loo_tested)
      out << fmt::format("- leave-one-out: {} of {} combinations tested, max error {}, mean error {}\n", rep.loo_tested,
                         rep.loo.size(), percent_text(rep.loo_max_rel_error), percent_text(rep.loo_mean_rel_error));
    else
      out << fmt::format("- leave-one-out: none of the {} combinations could be tested (removing any one leaves too few "
                         "or collinear points); the fit is unchecked\n",
                         rep.loo.size());
    for (const auto& c : rep.loo)
      if (!c.predicted_bytes)
        out << fmt::format("  - batch {:g}, context {:g} not testable: {}\n", c.batch, c.context, c.why_not);
    for (const auto& d : rep.device)
      out << fmt::format("- measured device, {} free, case batch {:g}: largest batch at context {:g}: fit {}, "
                         "workload (memory/largest_batch) {:g}\n",
                         gib_text(d.free_bytes), d.batch, d.context, count_text(d.fit_largest_batch), d.workload_largest_batch);
    out << '\n';
    analysis::text_table t;
    t.column("memory", true);
    t.column("usable", true);
    for (double c : rep.contexts) t.column(fmt::format("largest batch at context {:g}", c), true);
    for (double b : rep.batches) t.column(fmt::format("largest context at batch {:g}", b), true);
    t.column("cards", false);
    for (const auto& cp : rep.cards) {
      std::vector<std::string> row = {fmt::format("{:g} GB", cp.memory_gb), gib_text(cp.usable_bytes)};
      for (auto v : cp.largest_batch) row.push_back(count_text(v));
      for (auto v : cp.largest_context) row.push_back(count_text(v));
      std::string ids;
      for (const auto& id : cp.card_ids) ids += (ids.empty() ? "" : ", ") + id;
      row.push_back(ids);
      t.rows.push_back(std::move(row));
    }
    out << fmt::format("Predicted on each card size (usable = nominal GB read as GiB, less a {} reserve; predicted, "
                       "not measured; the model's own limits such as max_position are not applied):\n\n",
                       percent_text(rep.reserve_fraction));
    t.write(out);
    out << '\n';
  }
}

void write_fit_json(std::ostream& out, const std::vector<fit_report>& reports) {
  ojson doc;
  doc["schema"] = "itera.fit/1";
  doc["model"] = "peak = fixed + per_token x batch x context + per_sample x batch";
  ojson groups = ojson::array();
  for (const auto& rep : reports) {
    ojson g;
    g["workload"] = rep.workload;
    g["group"] = rep.group;
    g["fitted"] = rep.fitted;
    g["why_not"] = rep.why_not;
    ojson pts = ojson::array();
    for (const auto& p : rep.points) {
      ojson j;
      j["source"] = p.source;
      j["case"] = p.case_key;
      j["batch"] = p.batch;
      j["context"] = p.context;
      j["measured_peak_bytes"] = p.peak_bytes;
      j["plan_bytes"] = p.plan_bytes ? ojson(*p.plan_bytes) : ojson(nullptr);
      pts.push_back(j);
    }
    g["points"] = pts;
    g["plan_max_rel_error"] = rep.plan_max_rel_error >= 0 ? ojson(rep.plan_max_rel_error) : ojson(nullptr);
    if (rep.fitted) {
      g["fixed_bytes"] = rep.model.fixed_bytes;
      g["per_token_bytes"] = rep.model.per_token_bytes;
      g["per_sample_bytes"] = rep.model.per_sample_bytes;
      ojson loo = ojson::array();
      for (const auto& c : rep.loo) {
        ojson j;
        j["batch"] = c.batch;
        j["context"] = c.context;
        j["measured_bytes"] = c.measured_bytes;
        j["predicted_bytes"] = c.predicted_bytes ? ojson(*c.predicted_bytes) : ojson(nullptr);
        j["rel_error"] = c.rel_error ? ojson(*c.rel_error) : ojson(nullptr);
        j["why_not"] = c.why_not;
        loo.push_back(j);
      }
      g["leave_one_out"] = {{"tested", rep.loo_tested},
                            {"max_rel_error", rep.loo_tested ? ojson(rep.loo_max_rel_error) : ojson(nullptr)},
                            {"mean_rel_error", rep.loo_tested ? ojson(rep.loo_mean_rel_error) : ojson(nullptr)},
                            {"checks", loo}};
      g["reserve_fraction"] = rep.reserve_fraction;
      ojson cards = ojson::array();
      for (const auto& cp : rep.cards) {
        ojson j;
        j["memory_gb"] = cp.memory_gb;
        j["cards"] = cp.card_ids;
        j["usable_bytes"] = cp.usable_bytes;
        ojson lb = ojson::array(), lc = ojson::array();
        for (std::size_t i = 0; i < cp.largest_batch.size(); ++i)
          lb.push_back({{"context", rep.contexts[i]}, {"largest_batch", cp.largest_batch[i]}});
        for (std::size_t i = 0; i < cp.largest_context.size(); ++i)
          lc.push_back({{"batch", rep.batches[i]}, {"largest_context", cp.largest_context[i]}});
        j["largest_batch"] = lb;
        j["largest_context"] = lc;
        j["predicted"] = true;
        cards.push_back(j);
      }
      g["cards"] = cards;
      ojson dev = ojson::array();
      for (const auto& d : rep.device)
        dev.push_back({{"context", d.context}, {"batch", d.batch}, {"free_bytes", d.free_bytes},
                       {"fit_largest_batch", d.fit_largest_batch}, {"workload_largest_batch", d.workload_largest_batch}});
      g["measured_device"] = dev;
    }
    groups.push_back(g);
  }
  doc["groups"] = groups;
  out << doc.dump(2) << '\n';
}

}  // namespace itera
