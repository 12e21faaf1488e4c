// The recipe gate (DESIGN.md, Definitions: Recipe).
//
// Recipe fields (a difference refuses the comparison unless named with --allow):
//   software.<key>                          each top-level key of either context's software group
//   workload.<name>.version                 for each workload present on both sides
//   case[<workload> <axes_key>].<field>     each recipe field of a case present on both sides
// Hardware fields (a difference is reported, never refuses; it makes a GPU comparison):
//   hardware.backend, hardware.device.<key>, hardware.host.<key>   (nested keys dotted)
// Not part of the recipe, shown as information only: itera version and commit, start time, command
// line, build type.
//
// Cases are matched by role, workload and axes_key(); a case present on one side only is listed in
// only_in_a / only_in_b and does not refuse by itself (a shorter run of the same recipe compares). A
// matched case that is not ok on both sides has no times to compare and is listed in not_compared.
#include "itera/analysis/compare.hpp"

#include <algorithm>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "src/report/text_format.hpp"

namespace itera {

const char* to_string(verdict v) {
  switch (v) {
    case verdict::faster: return "faster";
    case verdict::slower: return "slower";
    case verdict::same: return "same";
  }
  return "?";
}

// Both runs' noise decides: each median carries its distribution-free 95% confidence interval.
// Overlapping intervals cannot tell the two apart (same); when B's interval lies entirely below
// A's, B takes less time (faster); entirely above, B is slower.
verdict judge(const summary& a, const summary& b) {
  if (b.median_ci_high < a.median_ci_low) return verdict::faster;
  if (b.median_ci_low > a.median_ci_high) return verdict::slower;
  return verdict::same;
}

namespace {

constexpr const char* absent = "(absent)";

std::string value_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Nested objects flatten to dotted names; arrays and scalars are compared as their JSON text.
void flatten(const std::string& prefix, const ojson& v, std::map<std::string, std::string>& out,
             std::vector<std::string>& order) {
  if (v.is_object() && !v.empty()) {
    for (const auto& [k, e] : v.items()) flatten(prefix + "." + k, e, out, order);
    return;
  }
  if (out.emplace(prefix, value_text(v)).second) order.push_back(prefix);
}

bool is_allowed(const std::string& field, const std::vector<std::string>& allow) {
  for (const auto& a : allow) {
    if (a == field) return true;
    if (!a.empty() && a.back() == '*' && field.compare(0, a.size() - 1, a, 0, a.size() - 1) == 0) return true;
  }
  return false;
}

struct differ {
  comparison& c;
  const std::vector<std::string>& allow;

  void add(const std::string& field, const std::string& a, const std::string& b, bool hardware) {
    if (a == b) return;
    field_diff d{field, a, b, hardware, is_allowed(field, allow)};
    if (!hardware && !d.allowed) {
      c.refused = true;
      c.refused_fields.push_back(field);
    }
    c.diffs.push_back(std::move(d));
  }

  // Every key of either side, A's order first, then keys only B has.
  void add_group(const std::string& prefix, const ojson& a, const ojson& b, bool hardware, bool flatten_nested) {
    std::map<std::string, std::string> va, vb;
    std::vector<std::string> order;
    auto collect = [&](const ojson& j, std::map<std::string, std::string>& into) {
      if (!j.is_object()) return;
      for (const auto& [k, e] : j.items()) {
        const std::string name = prefix + "." + k;
        if (flatten_nested) {
          std::vector<std::string> o;
          flatten(name, e, into, o);
          for (auto& n : o)
            if (std::find(order.begin(), order.end(), n) == order.end()) order.push_back(n);
        } else {
          into.emplace(name, value_text(e));
          if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
        }
      }
    };
    collect(a, va);
    collect(b, vb);
    for (const auto& n : order) {
      auto ia = va.find(n), ib = vb.find(n);
      add(n, ia == va.end() ? absent : ia->second, ib == vb.end() ? absent : ib->second, hardware);
    }
  }
};

// The exact variant from the catalogue when matched (it tells H100 PCIe from SXM), else NVML's
// name, else the host CPU for cpu-backend runs.
std::string hardware_label(const run_context& c) {
  for (const std::string& s : {report::variant_name(c.device), report::string_at(c.device, {"name"}),
                               report::cpu_name(c.host)})
    if (!s.empty()) return s;
  return c.backend.empty() ? "unknown device" : c.backend + " device";
}

std::string case_label(const case_record& r) {
  std::string s = r.axes.empty() ? r.workload : r.workload + " " + r.axes_key();
  return r.role == "case" ? s : s + " [" + r.role + "]";
}

std::string match_key(const case_record& r) { return r.role + '\n' + r.workload + '\n' + r.axes_key(); }

// Pairs cases in order of appearance; a key repeated on one side pairs its n-th occurrences.
struct case_match {
  std::vector<std::pair<const case_record*, const case_record*>> pairs;
  std::vector<const case_record*> only_a, only_b;
};

case_match match_cases(const result_set& a, const result_set& b) {
  case_match m;
  std::map<std::string, std::vector<const case_record*>> pending_b;
  for (const auto& r : b.cases) pending_b[match_key(r)].push_back(&r);
  std::map<std::string, std::size_t> used_b;
  for (const auto& r : a.cases) {
    const std::string k = match_key(r);
    auto it = pending_b.find(k);
    std::size_t& used = used_b[k];
    if (it != pending_b.end() && used < it->second.size()) m.pairs.emplace_back(&r, it->second[used++]);
    else m.only_a.push_back(&r);
  }
  for (const auto& r : b.cases) {
    const std::string k = match_key(r);
    // B's n-th occurrence of a key is matched when A used at least n of them.
    std::size_t nth = 0;
    for (const auto* x : pending_b[k]) {
      if (x == &r) break;
      ++nth;
    }
    if (nth >= used_b[k]) m.only_b.push_back(&r);
  }
  return m;
}

std::string refusal_text(const comparison& c) {
  return fmt::format(
      "refused: recipes differ in {} field{}: {}. Re-run with a common recipe, or name each field with --allow FIELD "
      "to compare anyway.",
      c.refused_fields.size(), c.refused_fields.size() == 1 ? "" : "s", report::joined(c.refused_fields, ", "));
}

}  // namespace

comparison compare_results(const result_set& a, const result_set& b, const std::vector<std::string>& allow) {
  comparison c;
  differ d{c, allow};

  d.add("hardware.backend", a.context.backend, b.context.backend, true);
  d.add_group("hardware.device", a.context.device, b.context.device, true, true);
  d.add_group("hardware.host", a.context.host, b.context.host, true, true);
  // Software keys stay whole ("software.cublaslt") so --allow names what the user sees in `itera env`.
  d.add_group("software", a.context.software, b.context.software, false, false);

  // Workload versions: first case of each workload on each side; only workloads both sides ran.
  std::vector<std::string> workloads;
  std::map<std::string, int> va, vb;
  for (const auto& r : a.cases)
    if (va.emplace(r.workload, r.workload_version).second) workloads.push_back(r.workload);
  for (const auto& r : b.cases) vb.emplace(r.workload, r.workload_version);
  for (const auto& w : workloads)
    if (vb.count(w)) d.add(fmt::format("workload.{}.version", w), std::to_string(va[w]), std::to_string(vb[w]), false);

  const case_match m = match_cases(a, b);
  for (const auto* r : m.only_a) c.only_in_a.push_back(case_label(*r));
  for (const auto* r : m.only_b) c.only_in_b.push_back(case_label(*r));
  // The set of cases (workloads and shapes) is recipe: runs of different shapes are not compared
  // unless --allow cases says so.
  if (!m.only_a.empty() || !m.only_b.empty())
    d.add("cases", fmt::format("{} case(s) B lacks", m.only_a.size()), fmt::format("{} case(s) A lacks", m.only_b.size()),
          false);
  for (const auto& [ra, rb] : m.pairs) {
    // A case that did not run on one side (a format that card lacks, a size that does not fit)
    // recorded no fields there: nothing to compare, and it is listed under not_compared. Hardware
    // differences are allowed, and this is one of their consequences.
    if (ra->status != case_status::ok || rb->status != case_status::ok) continue;
    // The timing method is recipe: CUPTI spans and CUDA events differ by microseconds per sample.
    d.add(fmt::format("case[{}].device_time_method", case_label(*ra)), ra->device_time_method, rb->device_time_method,
          false);
    std::set<std::string> names;
    for (const auto& [k, v] : ra->fields) names.insert(k);
    for (const auto& [k, v] : rb->fields) names.insert(k);
    for (const auto& n : names) {
      auto ia = ra->fields.find(n), ib = rb->fields.find(n);
      d.add(fmt::format("case[{}].{}", case_label(*ra), n), ia == ra->fields.end() ? absent : ia->second,
            ib == rb->fields.end() ? absent : ib->second, false);
    }
  }

  const std::string la = hardware_label(a.context), lb = hardware_label(b.context);
  const bool gpus = a.context.backend != "cpu" && b.context.backend != "cpu";
  if (la != lb)
    c.hardware_note = fmt::format("{} comparison: {} (A) vs {} (B)", gpus ? "GPU" : "Hardware", la, lb);
  else
    c.hardware_note = fmt::format("Same hardware: {} (A and B)", la);

  if (c.refused) return c;
  for (const auto& [ra, rb] : m.pairs) {
    if (ra->status != case_status::ok || rb->status != case_status::ok) {
      c.not_compared.push_back(
          fmt::format("{}: A {}, B {}", case_label(*ra), to_string(ra->status), to_string(rb->status)));
      continue;
    }
    const bool device = ra->device_stats && rb->device_stats;
    const summary* sa = device ? &*ra->device_stats : ra->host_stats ? &*ra->host_stats : nullptr;
    const summary* sb = device ? &*rb->device_stats : rb->host_stats ? &*rb->host_stats : nullptr;
    if (!sa || !sb) continue;
    case_comparison cc;
    cc.workload = ra->workload;
    cc.axes_key = ra->role == "case" ? ra->axes_key() : ra->axes_key() + " [" + ra->role + "]";
    cc.a_median_ns = sa->median;
    cc.b_median_ns = sb->median;
    cc.ratio = sa->median > 0 ? sb->median / sa->median : 0;
    cc.speedup = sb->median > 0 ? sa->median / sb->median : 0;
    cc.result = judge(*sa, *sb);
    cc.time_kind = device ? "device" : "host";
    c.cases.push_back(std::move(cc));
  }
  return c;
}

namespace {

void write_comparison_blocks(std::ostream& out, const comparison& c, const result_set& a, const result_set& b) {
  out << "# itera compare\n\n";
  auto side = [&](const char* name, const result_set& s) {
    out << fmt::format("- {}: {} ({}, backend {}, itera {}{}{})\n", name, s.source.empty() ? "-" : s.source,
                       hardware_label(s.context), s.context.backend, s.context.itera_version,
                       s.context.git_commit.empty() ? "" : " " + report::short_commit(s.context.git_commit),
                       s.context.started_utc.empty() ? "" : ", started " + s.context.started_utc);
  };
  side("A", a);
  side("B", b);
  out << fmt::format("- {}\n\n", c.hardware_note);

  report::md_table recipe, hardware;
  for (auto* t : {&recipe, &hardware})
    for (const char* name : {"field", "A", "B", "kind", "allowed"}) t->column(name, false);
  for (const auto& d : c.diffs)
    (d.hardware ? hardware : recipe)
        .rows.push_back({d.field, d.a, d.b, d.hardware ? "hardware" : "recipe",
                         d.hardware ? "yes (hardware)" : d.allowed ? "yes (--allow)" : "no"});
  out << "## Recipe differences\n\n";
  if (recipe.rows.empty()) out << "None: both runs share the recipe.\n\n";
  else {
    recipe.write(out);
    out << '\n';
  }
  if (!hardware.rows.empty()) {
    out << "## Hardware differences (allowed)\n\n";
    hardware.write(out);
    out << '\n';
  }

  if (c.refused) {
    out << refusal_text(c) << "\n\n";
  } else {
    out << "## Cases\n\n";
    out << "Verdict: same when the two medians' 95% confidence intervals overlap; otherwise B is faster or slower.\n\n";
    if (c.cases.empty()) out << "No case ran successfully on both sides.\n\n";
    else {
      report::md_table t;
      for (const char* name : {"workload", "case", "time"}) t.column(name, false);
      for (const char* name : {"A median", "B median", "B/A", "speedup"}) t.column(name, true);
      t.column("verdict", false);
      for (const auto& k : c.cases)
        t.rows.push_back({k.workload, k.axes_key, k.time_kind, report::human_time_ns(k.a_median_ns),
                          report::human_time_ns(k.b_median_ns), fmt::format("{:.3f}", k.ratio),
                          fmt::format("{:.3f}x", k.speedup), to_string(k.result)});
      t.write(out);
      out << '\n';
    }
    report::write_list(out, "Not compared (not ok on both sides):", c.not_compared);
  }
  report::write_list(out, "Only in A:", c.only_in_a);
  report::write_list(out, "Only in B:", c.only_in_b);

  // Not part of the recipe: shown so a reader knows, never a reason to refuse.
  std::vector<std::string> info;
  if (a.context.itera_version != b.context.itera_version || a.context.git_commit != b.context.git_commit)
    info.push_back(fmt::format("itera {} {} (A) vs {} {} (B)", a.context.itera_version,
                               report::short_commit(a.context.git_commit), b.context.itera_version,
                               report::short_commit(b.context.git_commit)));
  if (a.context.build_type != b.context.build_type)
    info.push_back(fmt::format("build type {} (A) vs {} (B)", a.context.build_type, b.context.build_type));
  report::write_list(out, "Informational (not part of the recipe):", info);
}

}  // namespace

// Blocks each end with a blank line; the document ends with exactly one newline.
void write_comparison_markdown(std::ostream& out, const comparison& c, const result_set& a, const result_set& b) {
  std::ostringstream text;
  write_comparison_blocks(text, c, a, b);
  report::write_document(out, text.str());
}

void write_comparison_json(std::ostream& out, const comparison& c) {
  ojson diffs = ojson::array();
  for (const auto& d : c.diffs)
    diffs.push_back({{"field", d.field}, {"a", d.a}, {"b", d.b}, {"hardware", d.hardware}, {"allowed", d.allowed}});
  ojson cases = ojson::array();
  for (const auto& k : c.cases)
    cases.push_back({{"workload", k.workload},
                     {"axes", k.axes_key},
                     {"time_kind", k.time_kind},
                     {"a_median_ns", k.a_median_ns},
                     {"b_median_ns", k.b_median_ns},
                     {"ratio", k.ratio},
                     {"speedup", k.speedup},
                     {"verdict", to_string(k.result)}});
  ojson doc = {{"schema", "itera.compare/1"},
               {"refused", c.refused},
               {"refused_fields", c.refused_fields},
               {"message", c.refused ? refusal_text(c) : std::string()},
               {"hardware_note", c.hardware_note},
               {"diffs", std::move(diffs)},
               {"cases", std::move(cases)},
               {"not_compared", c.not_compared},
               {"only_in_a", c.only_in_a},
               {"only_in_b", c.only_in_b}};
  out << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
}

}  // namespace itera
