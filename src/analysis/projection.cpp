// Projection of measured stage times to other cards by a roofline model (docs/analysis.md).
#include "itera/analysis/projection.hpp"
#include "itera/analysis/rates.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "itera/analysis/fit.hpp"
#include "itera/core/errors.hpp"

namespace itera {

const char* to_string(stage_bound b) {
  switch (b) {
    case stage_bound::compute: return "compute";
    case stage_bound::bandwidth: return "bandwidth";
    case stage_bound::transfer: return "transfer";
    case stage_bound::host: return "host";
    case stage_bound::unknown: return "unknown";
  }
  return "?";
}

std::optional<double> pcie_bytes_per_s(const std::string& interconnect) {
  static const std::regex re(R"(PCIe Gen\s*([0-9]+)\s*x\s*([0-9]+))", std::regex::icase);
  std::smatch m;
  if (!std::regex_search(interconnect, m, re)) return std::nullopt;
  const int gen = std::stoi(m[1].str());
  const int lanes = std::stoi(m[2].str());
  // Per lane and direction after line coding: Gen1-2 8b/10b, Gen3-5 128b/130b, Gen6 FLIT (PAM4).
  double gtps = 0, efficiency = 128.0 / 130.0;
  switch (gen) {
    case 1: gtps = 2.5; efficiency = 0.8; break;
    case 2: gtps = 5; efficiency = 0.8; break;
    case 3: gtps = 8; break;
    case 4: gtps = 16; break;
    case 5: gtps = 32; break;
    case 6: gtps = 64; efficiency = 242.0 / 256.0; break;
    default: return std::nullopt;
  }
  return gtps * 1e9 / 8.0 * efficiency * lanes;
}

namespace {

const std::set<std::string> catalogue_formats = {"fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "int8"};

struct peaks {
  double bandwidth = 0;  // B/s
  std::map<std::string, double> flops;  // FLOP/s per format
  double h2d = 0, d2h = 0;              // B/s; 0 when unknown
};

peaks catalogue_peaks(const catalogue_card& c) {
  peaks p;
  p.bandwidth = c.bandwidth_gbs * 1e9;
  for (const auto& [f, t] : c.dense_tflops) p.flops[f] = t * 1e12;
  if (const auto link = pcie_bytes_per_s(c.interconnect)) p.h2d = p.d2h = *link;
  return p;
}

// The binding peak for a format: the format itself, or bf16 when the card has no path for it (an
// fp8 model on an A100 runs its products in bf16 after dequantising).
double flops_peak(const peaks& p, const std::string& format, std::string* note) {
  if (const auto it = p.flops.find(format); it != p.flops.end()) return it->second;
  if (const auto it = p.flops.find("bf16"); it != p.flops.end()) {
    if (note) *note = format + " not on this card: bf16 peak";
    return it->second;
  }
  return 0;
}

std::string last_component(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string stage_format(const case_record& r, const std::string& path) {
  const std::string prefix = "utilisation/" + path + "/gemm.";
  for (const auto& m : r.metrics)
    if (m.name.rfind(prefix, 0) == 0 && !m.name.ends_with(sustained_suffix)) return m.name.substr(prefix.size());
  for (const char* f : {"precision.compute", "precision.weights"})
    if (const auto it = r.fields.find(f); it != r.fields.end() && catalogue_formats.count(it->second)) return it->second;
  return "bf16";
}

// Roofline time of the work at the given peaks (seconds); 0 when neither term applies.
double roofline_s(const stage_work& s, double flops_peak_v, double bw_peak) {
  double t = 0;
  if (s.flops > 0 && flops_peak_v > 0) t = std::max(t, s.flops / flops_peak_v);
  if (s.bytes > 0 && bw_peak > 0) t = std::max(t, s.bytes / bw_peak);
  return t;
}

// Time of stage `s` on a card with peaks `to`, from its measured time under peaks `from`.
stage_projection project_stage(const stage_work& s, const peaks& from, const peaks& to) {
  stage_projection p;
  switch (s.bound) {
    case stage_bound::compute:
    case stage_bound::bandwidth: {
      std::string note_from;
      const double f_from = flops_peak(from, s.format, &note_from);
      const double f_to = flops_peak(to, s.format, &p.note);
      const double t_from = roofline_s(s, f_from, from.bandwidth);
      const double t_to = roofline_s(s, f_to, to.bandwidth);
      if (t_from > 0 && t_to > 0) {
        p.time_ns = s.time_ns * t_to / t_from;
        const bool compute_there = s.flops > 0 && f_to > 0 && s.flops / f_to >= s.bytes / to.bandwidth;
        if (compute_there != (s.bound == stage_bound::compute))
          p.note += (p.note.empty() ? "" : "; ") + std::string("binds on ") + (compute_there ? "compute" : "bandwidth") + " here";
        p.target_peak = compute_there ? f_to : to.bandwidth;
      } else {
        p.time_ns = s.time_ns;
        p.note = "no peak for this work: unchanged";
      }
      break;
    }
    case stage_bound::transfer: {
      const bool h2d = last_component(s.path) == "h2d";
      const double a = h2d ? from.h2d : from.d2h, b = h2d ? to.h2d : to.d2h;
      p.target_peak = b;
      if (a > 0 && b > 0) p.time_ns = s.time_ns * a / b;
      else {
        p.time_ns = s.time_ns;
        p.note = "no PCIe link known: unchanged";
      }
      break;
    }
    case stage_bound::host:
    case stage_bound::unknown:
      p.time_ns = s.time_ns;
      p.note = s.bound == stage_bound::host ? "host stage: unchanged" : "no declared work: unchanged";
      break;
  }
  return p;
}

double case_time(const case_projection& c, const std::vector<stage_projection>& stages) {
  double t = std::max(0.0, c.unattributed_ns);
  for (std::size_t i = 0; i < stages.size(); ++i)
    if (c.stages[i].bound != stage_bound::host) t += stages[i].time_ns;
  return t;
}

}  // namespace

projection_report project_results(const result_set& set, const catalogue& cat, const projection_options& o) {
  projection_report rep;
  rep.source = set.source;
  const std::string src_id = o.source_card.empty() ? analysis::catalogue_id_of(set) : o.source_card;
  if (src_id.empty())
    throw input_error(fmt::format("{}: the run's device has no catalogue match (backend {}); name the card it ran on with "
                                  "--source-card ID",
                                  set.source, set.context.backend));
  const catalogue_card* src = cat.find(src_id);
  if (!src) throw usage_error(fmt::format("source card '{}' is not in the catalogue", src_id));
  rep.source_card = src_id;
  std::vector<const catalogue_card*> targets;
  for (const auto& id : o.cards) {
    const catalogue_card* c = cat.find(id);
    if (!c) throw usage_error(fmt::format("card '{}' is not in the catalogue", id));
    targets.push_back(c);
  }
  if (targets.empty())
    for (const auto& c : cat.cards()) targets.push_back(&c);

  // Source peaks: the ceilings measured in this run where present, else the catalogue.
  const peaks src_cat = catalogue_peaks(*src);
  peaks src_meas = src_cat;
  std::map<std::string, std::string> peak_from;
  for (const auto& ce : set.ceilings) {
    if (!(ce.value > 0) || ce.key.ends_with(sustained_suffix)) continue;  // peaks, as the catalogue's
    if (ce.key == "copy.d2d") src_meas.bandwidth = ce.value;
    else if (ce.key == "copy.h2d.pinned") src_meas.h2d = ce.value;
    else if (ce.key == "copy.d2h.pinned") src_meas.d2h = ce.value;
    else if (ce.key.rfind("gemm.", 0) == 0) src_meas.flops[ce.key.substr(5)] = ce.value;
    else continue;
    rep.ceilings_used.push_back(ce.key);
  }
  const auto measured = [&](const std::string& key) {
    return std::find(rep.ceilings_used.begin(), rep.ceilings_used.end(), key) != rep.ceilings_used.end();
  };

  for (const auto& r : set.cases) {
    if (r.role != "case") continue;
    const std::string label = r.workload + " " + r.axes_key();
    if (r.status != case_status::ok) {
      rep.not_projected.push_back(label + ": " + to_string(r.status));
      continue;
    }
    const std::size_t reps = r.device_ns.size();
    bool any_device = false;
    for (const auto& s : r.stages) any_device = any_device || (s.depth == 0 && s.device_ns > 0);
    if (!any_device || reps == 0 || !r.device_stats || r.device_stats->count == 0) {
      rep.not_projected.push_back(label + ": no stages with a device time");
      continue;
    }
    case_projection cp;
    cp.workload = r.workload;
    cp.case_key = r.axes_key();
    cp.time_kind = "device";
    cp.measured_time_ns = r.device_stats->median;
    if (const rate_basis* b = rate_basis_of(r)) {
      cp.rate_metric = b->metric;
      cp.rate_label = b->rate_label;
      cp.measured_rate = r.find_metric(b->metric)->value;
    }
    if (const metric* m = r.find_metric("memory/measured_peak")) cp.measured_peak_bytes = m->value;
    const double n = static_cast<double>(reps);
    double staged_ns = 0;
    for (const auto& s : r.stages) {
      if (s.depth != 0) continue;  // nested stages are inside their parent's time
      stage_work w;
      w.path = s.path;
      const bool device = s.device_ns > 0;
      w.time_ns = s.per_repetition_ns(n);  // its median repetition where recorded, as the rates beside it
      w.flops = s.flops / n;
      w.bytes = (s.bytes_read + s.bytes_written) / n;
      if (w.flops > 0 || w.bytes > 0) w.work_source = "declared";
      const std::string leaf = last_component(s.path);
      if (!device) w.bound = stage_bound::host;
      else if (leaf == "h2d" || leaf == "d2h") w.bound = stage_bound::transfer;
      if (device) staged_ns += w.time_ns;
      if (device && w.bound != stage_bound::transfer) {
        // Work the stage did not declare: the workload's rate for it x the stage's time.
        if (w.flops == 0)
          if (const metric* m = r.find_metric("throughput/" + s.path + "_flops"); m && m->value > 0) {
            w.flops = m->value * w.time_ns * 1e-9;
            w.work_source = "derived from throughput/" + s.path + "_flops";
          }
        if (w.bytes == 0)
          if (const metric* m = r.find_metric("throughput/" + s.path + "_bytes"); m && m->value > 0) {
            w.bytes = m->value * w.time_ns * 1e-9;
            w.work_source += std::string(w.work_source.empty() ? "" : ", ") + "derived from throughput/" + s.path + "_bytes";
          }
        w.format = stage_format(r, s.path);
      }
      cp.stages.push_back(std::move(w));
    }
    // The case's declared work not yet given to a stage goes to the single compute stage without it.
    const auto give_remainder = [&](double total, auto get) {
      double given = 0;
      std::vector<stage_work*> lacking;
      for (auto& w : cp.stages) {
        if (w.bound == stage_bound::host || w.bound == stage_bound::transfer) continue;
        given += get(w);
        if (get(w) == 0) lacking.push_back(&w);
      }
      if (lacking.size() == 1 && total - given > 0) {
        get(*lacking[0]) = total - given;
        lacking[0]->work_source += std::string(lacking[0]->work_source.empty() ? "" : ", ") + "remainder of the case's work";
      }
    };
    give_remainder(r.flops, [](stage_work& w) -> double& { return w.flops; });
    give_remainder(r.bytes_read + r.bytes_written, [](stage_work& w) -> double& { return w.bytes; });
    for (auto& w : cp.stages) {
      if (w.bound == stage_bound::host || w.bound == stage_bound::transfer) {
        if (w.bound == stage_bound::transfer) {
          const bool h2d = last_component(w.path) == "h2d";
          w.source_peak = h2d ? src_meas.h2d : src_meas.d2h;
          w.source_peak_from = measured(h2d ? "copy.h2d.pinned" : "copy.d2h.pinned") ? "measured ceiling" : "catalogue";
          if (w.time_ns > 0 && w.bytes > 0) w.achieved = w.bytes / (w.time_ns * 1e-9);
        }
        continue;
      }
      const double fp = flops_peak(src_meas, w.format, nullptr);
      if (w.flops > 0 && w.bytes > 0) {
        w.intensity = w.flops / w.bytes;
        w.bound = w.intensity >= fp / src_meas.bandwidth ? stage_bound::compute : stage_bound::bandwidth;
      } else if (w.flops > 0) {
        w.bound = stage_bound::compute;
      } else if (w.bytes > 0) {
        w.bound = stage_bound::bandwidth;
      }
      if (w.bound == stage_bound::compute) {
        w.achieved = w.flops / (w.time_ns * 1e-9);
        w.source_peak = fp;
        w.source_peak_from = measured("gemm." + w.format) ? "measured ceiling gemm." + w.format : "catalogue " + w.format;
      } else if (w.bound == stage_bound::bandwidth) {
        w.achieved = w.bytes / (w.time_ns * 1e-9);
        w.source_peak = src_meas.bandwidth;
        w.source_peak_from = measured("copy.d2d") ? "measured ceiling copy.d2d" : "catalogue bandwidth";
      }
    }
    cp.unattributed_ns = cp.measured_time_ns - staged_ns;

    // Validation on the source card: measured ceilings -> catalogue peaks of the same card.
    std::vector<stage_projection> self;
    for (const auto& w : cp.stages) {
      self.push_back(project_stage(w, src_meas, src_cat));
      cp.self_error.push_back(w.time_ns > 0 && w.bound != stage_bound::host ? self.back().time_ns / w.time_ns - 1 : 0);
      const double bound_s = roofline_s(w, flops_peak(src_cat, w.format, nullptr), src_cat.bandwidth);
      cp.roofline_fraction.push_back(w.time_ns > 0 && bound_s > 0 ? bound_s / (w.time_ns * 1e-9) : 0);
    }
    cp.self_total_error = case_time(cp, self) / cp.measured_time_ns - 1;

    for (const auto* t : targets) {
      card_projection card;
      card.card_id = t->id;
      card.is_source = t->id == src->id;
      const peaks to = catalogue_peaks(*t);
      for (const auto& w : cp.stages) card.stages.push_back(project_stage(w, src_meas, to));
      card.case_time_ns = case_time(cp, card.stages);
      if (cp.measured_rate && card.case_time_ns > 0) card.rate = *cp.measured_rate * cp.measured_time_ns / card.case_time_ns;
      if (cp.measured_peak_bytes) card.fits = *cp.measured_peak_bytes <= t->memory_gb * 1073741824.0 * (1.0 - 0.08);
      cp.cards.push_back(std::move(card));
    }
    rep.cases.push_back(std::move(cp));
  }
  if (rep.cases.empty()) {
    std::string why;
    for (const auto& s : rep.not_projected) why += "\n  " + s;
    throw input_error(fmt::format("{}: no case can be projected (a case needs stages with a device time):{}", set.source,
                                  why.empty() ? " no cases" : why));
  }
  return rep;
}

namespace {

std::string rate_text(double v, stage_bound b) {
  if (b == stage_bound::compute) return fmt::format("{:.3g} TFLOP/s", v * 1e-12);
  return fmt::format("{:.3g} GB/s", v * 1e-9);
}

std::string signed_percent(double f) { return fmt::format("{:+.1f}%", f * 100.0); }

}  // namespace

void write_projection_markdown(std::ostream& out, const projection_report& r, const catalogue& cat) {
  const catalogue_card* src = cat.find(r.source_card);
  out << "# itera project: roofline projection to other cards\n\n";
  out << fmt::format("- results: {}\n", r.source);
  out << fmt::format("- measured on: {} ({})\n", src ? src->name : r.source_card, r.source_card);
  std::string used;
  for (const auto& k : r.ceilings_used) used += (used.empty() ? "" : ", ") + k;
  out << fmt::format("- source peaks: {}\n", used.empty() ? "catalogue only (no ceilings in the file)"
                                                             : "measured ceilings " + used + "; catalogue for the rest");
  out << "- target peaks: catalogue (datasheet) figures\n";
  out << "- every time below the stage table is PROJECTED, not measured, except the row marked measured\n\n";

  // Axes that differ between the projected cases name them; the rest is listed once.
  std::map<std::string, std::set<std::string>> values;
  for (const auto& c : r.cases) {
    std::string k = c.case_key;
    std::size_t pos = 0;
    while (pos < k.size()) {
      auto end = k.find(' ', pos);
      if (end == std::string::npos) end = k.size();
      const std::string kv = k.substr(pos, end - pos);
      const auto eq = kv.find('=');
      if (eq != std::string::npos) values[kv.substr(0, eq)].insert(kv.substr(eq + 1));
      pos = end + 1;
    }
  }
  const auto short_key = [&](const std::string& key) {
    std::string s;
    std::size_t pos = 0;
    while (pos < key.size()) {
      auto end = key.find(' ', pos);
      if (end == std::string::npos) end = key.size();
      const std::string kv = key.substr(pos, end - pos);
      const auto eq = kv.find('=');
      if (eq != std::string::npos && values[kv.substr(0, eq)].size() > 1) s += (s.empty() ? "" : " ") + kv;
      pos = end + 1;
    }
    return s.empty() ? key : s;
  };
  std::string constant;
  for (const auto& [k, v] : values)
    if (v.size() == 1) constant += (constant.empty() ? "" : " ") + k + "=" + *v.begin();
  if (r.cases.size() > 1 && !constant.empty()) out << "Common to every case: " << constant << "\n\n";

  for (const auto& c : r.cases) {
    out << fmt::format("## {} {}\n\n", c.workload, short_key(c.case_key));
    out << fmt::format("- measured: {} per repetition ({} time, median){}\n", analysis::time_text(c.measured_time_ns), c.time_kind,
                       c.measured_rate ? fmt::format(", {:.4g} {}", *c.measured_rate, c.rate_label) : "");
    if (std::abs(c.unattributed_ns) > 1e-3 * c.measured_time_ns)
      out << fmt::format("- time outside the stages: {} (carried over unchanged)\n", analysis::time_text(c.unattributed_ns));
    analysis::text_table st;
    for (auto [h, num] : std::vector<std::pair<const char*, bool>>{{"stage", false}, {"bound", false}, {"measured / rep", true},
                                                                   {"FLOP / rep", true}, {"bytes / rep", true}, {"FLOP/B", true},
                                                                   {"achieved", true}, {"of source peak", true},
                                                                   {"source peak from", false}, {"work from", false}})
      st.column(h, num);
    for (const auto& w : c.stages) {
      st.rows.push_back({w.path, to_string(w.bound), analysis::time_text(w.time_ns), w.flops > 0 ? fmt::format("{:.3g}", w.flops) : "-",
                         w.bytes > 0 ? fmt::format("{:.3g}", w.bytes) : "-",
                         w.intensity > 0 ? fmt::format("{:.3g}", w.intensity) : "-",
                         w.achieved > 0 ? rate_text(w.achieved, w.bound) : "-",
                         w.achieved > 0 && w.source_peak > 0 ? analysis::percent_text(w.achieved / w.source_peak) : "-",
                         w.source_peak_from.empty() ? "-" : w.source_peak_from, w.work_source.empty() ? "-" : w.work_source});
    }
    out << "Stages (measured):\n\n";
    st.write(out);
    out << '\n';
    std::string errors;
    for (std::size_t i = 0; i < c.stages.size(); ++i)
      if (c.stages[i].bound != stage_bound::host)
        errors += fmt::format("{}{} {}", errors.empty() ? "" : ", ", c.stages[i].path, signed_percent(c.self_error[i]));
    out << fmt::format("- validation on {} (measured ceilings to its own catalogue peaks): {}; total {}\n", r.source_card,
                       errors, signed_percent(c.self_total_error));
    std::string fractions;
    for (std::size_t i = 0; i < c.stages.size(); ++i)
      if (c.roofline_fraction[i] > 0)
        fractions += fmt::format("{}{} {}", fractions.empty() ? "" : ", ", c.stages[i].path,
                                 analysis::percent_text(c.roofline_fraction[i]));
    if (!fractions.empty())
      out << fmt::format("- roofline bound at the catalogue peaks / measured time (the share of the datasheet reached): {}\n",
                         fractions);
    out << '\n';
    analysis::text_table pt;
    pt.column("card", false);
    pt.column("kind", false);
    for (const auto& w : c.stages)
      if (w.bound != stage_bound::host) pt.column(w.path, true);
    pt.column("case time", true);
    pt.column(c.rate_label.empty() ? "throughput" : c.rate_label, true);
    pt.column("notes", false);
    std::vector<std::string> row = {r.source_card, "measured"};
    for (const auto& w : c.stages)
      if (w.bound != stage_bound::host) row.push_back(analysis::time_text(w.time_ns));
    row.push_back(analysis::time_text(c.measured_time_ns));
    row.push_back(c.measured_rate ? fmt::format("{:.4g}", *c.measured_rate) : "-");
    row.push_back("-");
    pt.rows.push_back(row);
    for (const auto& card : c.cards) {
      row = {card.card_id, card.is_source ? "projected (validation)" : "projected"};
      std::string notes;
      for (std::size_t i = 0; i < c.stages.size(); ++i) {
        if (c.stages[i].bound == stage_bound::host) continue;
        row.push_back(analysis::time_text(card.stages[i].time_ns));
        if (!card.stages[i].note.empty()) notes += (notes.empty() ? "" : "; ") + c.stages[i].path + ": " + card.stages[i].note;
      }
      if (!card.fits)
        notes = fmt::format("does not fit: needs {}{}", analysis::gib_text(*c.measured_peak_bytes), notes.empty() ? "" : "; " + notes);
      row.push_back(analysis::time_text(card.case_time_ns));
      row.push_back(card.rate ? fmt::format("{:.4g}", *card.rate) : "-");
      row.push_back(notes.empty() ? "-" : notes);
      pt.rows.push_back(std::move(row));
    }
    out << "Per card (projected unless marked measured):\n\n";
    pt.write(out);
    out << '\n';
  }
  if (!r.not_projected.empty()) {
    out << "Not projected:\n\n";
    for (const auto& s : r.not_projected) out << "- " << s << '\n';
    out << '\n';
  }
}

void write_projection_json(std::ostream& out, const projection_report& r) {
  ojson doc;
  doc["schema"] = "itera.projection/1";
  doc["source"] = r.source;
  doc["source_card"] = r.source_card;
  doc["ceilings_used"] = r.ceilings_used;
  ojson cases = ojson::array();
  for (const auto& c : r.cases) {
    ojson j;
    j["workload"] = c.workload;
    j["case"] = c.case_key;
    j["measured_time_ns"] = c.measured_time_ns;
    j["time_kind"] = c.time_kind;
    j["unattributed_ns"] = c.unattributed_ns;
    j["rate_metric"] = c.rate_metric.empty() ? ojson(nullptr) : ojson(c.rate_metric);
    j["measured_rate"] = c.measured_rate ? ojson(*c.measured_rate) : ojson(nullptr);
    ojson stages = ojson::array();
    for (std::size_t i = 0; i < c.stages.size(); ++i) {
      const auto& w = c.stages[i];
      stages.push_back({{"path", w.path}, {"bound", to_string(w.bound)}, {"measured_time_ns", w.time_ns}, {"flops", w.flops},
                        {"bytes", w.bytes}, {"work_source", w.work_source}, {"intensity", w.intensity}, {"format", w.format},
                        {"achieved", w.achieved}, {"source_peak", w.source_peak}, {"source_peak_from", w.source_peak_from},
                        {"validation_error", c.self_error[i]}, {"roofline_fraction", c.roofline_fraction[i]}});
    }
    j["stages"] = stages;
    j["validation_total_error"] = c.self_total_error;
    ojson cards = ojson::array();
    for (const auto& card : c.cards) {
      ojson cj;
      cj["card"] = card.card_id;
      cj["projected"] = true;
      cj["is_source"] = card.is_source;
      ojson st = ojson::array();
      for (std::size_t i = 0; i < card.stages.size(); ++i)
        st.push_back({{"path", c.stages[i].path}, {"time_ns", card.stages[i].time_ns}, {"target_peak", card.stages[i].target_peak},
                      {"note", card.stages[i].note}});
      cj["stages"] = st;
      cj["case_time_ns"] = card.case_time_ns;
      cj["fits"] = card.fits;
      cj["rate"] = card.rate ? ojson(*card.rate) : ojson(nullptr);
      cards.push_back(cj);
    }
    j["cards"] = cards;
    cases.push_back(j);
  }
  doc["cases"] = cases;
  doc["not_projected"] = r.not_projected;
  out << doc.dump(2) << '\n';
}

}  // namespace itera
