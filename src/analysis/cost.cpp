// Cost per million output tokens, thousand images or training step (rates.hpp): a price file per
// GPU-hour against the measured throughput on the measured card and the projected throughput
// (projection.cpp) on the others.
#include "itera/analysis/cost.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <ostream>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "itera/analysis/fit.hpp"
#include "itera/analysis/projection.hpp"
#include "itera/core/errors.hpp"

namespace itera {

const price_entry* price_table::find(const std::string& card) const {
  for (const auto& e : entries)
    if (e.card == card) return &e;
  return nullptr;
}

bool price_table::any_example() const {
  return std::any_of(entries.begin(), entries.end(), [](const price_entry& e) { return e.example; });
}

namespace analysis {
std::string money_text(double amount, const std::string& currency, int decimals) {
  return fmt::format("{:.{}f} {}", amount, decimals, currency);
}
}  // namespace analysis

namespace {

bool valid_date(const std::string& s) {
  static const std::regex shape("^([0-9]{4})-([0-9]{2})-([0-9]{2})$");
  std::smatch m;
  if (!std::regex_match(s, m, shape)) return false;
  const int y = std::stoi(m[1]), mo = std::stoi(m[2]), d = std::stoi(m[3]);
  if (mo < 1 || mo > 12 || d < 1) return false;
  static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return d <= days[mo - 1] + (mo == 2 && leap ? 1 : 0);
}

// Empty when the row is good; else what is wrong with it.
std::string check_price_row(const ojson& row, const catalogue& cat, price_entry& e) {
  if (!row.is_object()) return "not an object";
  static const std::vector<std::string> known = {"card", "price_per_gpu_hour", "currency", "date", "source", "example"};
  std::vector<std::string> problems;
  for (const auto& [k, v] : row.items())
    if (std::find(known.begin(), known.end(), k) == known.end()) problems.push_back(fmt::format("unknown field '{}'", k));
  for (const auto& f : {"card", "price_per_gpu_hour", "currency", "date", "source"})
    if (!row.contains(f)) problems.push_back(fmt::format("missing field '{}'", f));
  const auto text = [&](const char* name, std::string& out) {
    if (!row.contains(name)) return false;
    if (!row[name].is_string()) {
      problems.push_back(fmt::format("'{}' must be a string", name));
      return false;
    }
    out = row[name].get<std::string>();
    return true;
  };
  if (text("card", e.card) && !cat.find(e.card)) {
    std::string ids;
    for (const auto& c : cat.cards()) ids += (ids.empty() ? "" : ", ") + c.id;
    problems.push_back(fmt::format("card '{}' is not in the catalogue (known: {})", e.card, ids));
  }
  if (row.contains("price_per_gpu_hour")) {
    const ojson& p = row["price_per_gpu_hour"];
    static const std::regex decimal("^-?[0-9]+(\\.[0-9]+)?$");
    bool number = false;
    if (p.is_number()) {
      e.per_gpu_hour = p.get<double>();
      e.price_text = fmt::format("{:g}", e.per_gpu_hour);
      number = std::isfinite(e.per_gpu_hour);
      if (!number) problems.push_back("price_per_gpu_hour is not a finite number");
    } else if (p.is_string()) {
      e.price_text = p.get<std::string>();
      if (std::regex_match(e.price_text, decimal)) {
        e.per_gpu_hour = std::strtod(e.price_text.c_str(), nullptr);
        number = true;
      } else {
        problems.push_back(fmt::format("price_per_gpu_hour '{}' is not a decimal number such as \"2.49\"", e.price_text));
      }
    } else {
      problems.push_back("price_per_gpu_hour must be a number or a decimal string");
    }
    if (number && (e.per_gpu_hour < 0 || e.price_text.rfind('-', 0) == 0))
      problems.push_back(fmt::format("negative price {}", e.price_text));
    else if (number && e.per_gpu_hour == 0)
      problems.push_back("price is 0");
  }
  static const std::regex code("^[A-Z]{3}$");
  if (text("currency", e.currency) && !std::regex_match(e.currency, code))
    problems.push_back(fmt::format("currency '{}' is not a three-letter code such as USD", e.currency));
  if (text("date", e.date) && !valid_date(e.date))
    problems.push_back(fmt::format("date '{}' is not a calendar date YYYY-MM-DD", e.date));
  if (text("source", e.source) && e.source.empty()) problems.push_back("source is empty");
  if (row.contains("example")) {
    if (!row["example"].is_boolean()) problems.push_back("example must be true or false");
    else e.example = row["example"].get<bool>();
  }
  std::string out;
  for (const auto& p : problems) out += (out.empty() ? "" : "; ") + p;
  return out;
}

std::optional<std::string> axis(const case_record& r, const std::string& name) {
  const std::string* v = r.find_axis(name);
  return v ? std::optional<std::string>(*v) : std::nullopt;
}

double axis_number(const case_record& r, const std::string& name) {
  const auto v = axis(r, name);
  return v ? std::atof(v->c_str()) : 0.0;
}

// Every axis but batch and rate: the key of write_operating_points in the markdown report.
std::string group_key(const case_record& r) {
  std::string key;
  for (const auto& [k, v] : r.axes)
    if (k != "rate" && k != "batch") key += (key.empty() ? "" : " ") + k + "=" + v;
  return key;
}

bool is_load_case(const case_record& r) {
  return r.find_metric("load/meets_targets") != nullptr || axis(r, "scenario").value_or("") == "server";
}

// Offline cases with latency targets (ttft_ms, tpot_ms > 0) are held to them with their latencies
// (the median repetition's; the mean in files before 2026-12-02), scaled by `slowdown` (projected /
// measured time) on a projected card.
std::string offline_target_miss(const case_record& r, double slowdown) {
  std::string why;
  const auto check = [&](const char* target_axis, const char* metric_name) {
    const double target_ms = axis_number(r, target_axis);
    if (!(target_ms > 0)) return;
    const metric* m = r.find_metric(metric_name);
    if (!m) {
      why += fmt::format("{}{} not measured", why.empty() ? "" : "; ", metric_name);
      return;
    }
    const double got_ms = m->value * 1e3 * slowdown;
    if (got_ms > target_ms) why += fmt::format("{}{} {:.3g} ms over {:g} ms", why.empty() ? "" : "; ", metric_name, got_ms, target_ms);
  };
  check("ttft_ms", "latency/ttft");
  check("tpot_ms", "latency/tpot");
  return why;
}

void price_row(cost_row& row, const price_table& prices, const rate_basis& basis) {
  if (const price_entry* p = prices.find(row.card)) row.price = *p;
  if (row.price && row.rate && *row.rate > 0) row.cost = row.price->per_gpu_hour / (*row.rate * 3600.0) * basis.per;
}

}  // namespace

price_table parse_prices(const ojson& doc, const catalogue& cat, const std::string& file) {
  price_table t;
  t.file = file;
  const ojson* rows = &doc;
  if (doc.is_object()) {
    for (const auto& [k, v] : doc.items())
      if (k != "schema" && k != "note" && k != "prices")
        throw input_error(fmt::format("prices {}: unknown field '{}' (expected schema, note, prices)", file, k));
    if (doc.contains("schema") && doc["schema"] != "itera.prices/1")
      throw input_error(fmt::format("prices {}: schema {} is not itera.prices/1", file, doc["schema"].dump()));
    if (!doc.contains("prices")) throw input_error(fmt::format("prices {}: no \"prices\" array", file));
    if (doc.contains("note") && doc["note"].is_string()) t.note = doc["note"].get<std::string>();
    rows = &doc["prices"];
  }
  if (!rows->is_array())
    throw input_error(fmt::format("prices {}: expected an array of rows (or an object with a \"prices\" array)", file));
  if (rows->empty()) throw input_error(fmt::format("prices {}: no rows", file));
  std::string errors;
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < rows->size(); ++i) {
    price_entry e;
    e.row = i + 1;
    std::string why = check_price_row((*rows)[i], cat, e);
    if (why.empty() && seen.count(e.card))
      why = fmt::format("card {} is already priced in row {}", e.card, seen[e.card]);
    if (why.empty() && !t.entries.empty() && e.currency != t.currency)
      why = fmt::format("currency {} differs from {} in row {}: one currency per file", e.currency, t.currency,
                        t.entries.front().row);
    if (!why.empty()) {
      errors += fmt::format("\n  row {}: {}", e.row, why);
      continue;
    }
    if (t.entries.empty()) t.currency = e.currency;
    seen[e.card] = e.row;
    t.entries.push_back(std::move(e));
  }
  if (!errors.empty()) throw input_error(fmt::format("prices {}: bad rows (numbered from 1):{}", file, errors));
  return t;
}

price_table read_prices(const std::string& path, const catalogue& cat) {
  std::ifstream in(path);
  if (!in) throw input_error(fmt::format("prices {}: cannot be read", path));
  ojson doc;
  try {
    doc = ojson::parse(in);
  } catch (const std::exception& e) {
    throw input_error(fmt::format("prices {}: not JSON: {}", path, e.what()));
  }
  return parse_prices(doc, cat, path);
}

std::vector<operating_point> find_operating_points(const std::vector<const case_record*>& cases) {
  std::map<std::string, operating_point> groups;
  std::vector<std::string> order;
  for (const auto* r : cases) {
    const metric* meets = r->find_metric("load/meets_targets");
    if (r->status != case_status::ok || !meets) continue;
    const std::string key = group_key(*r);
    auto [it, fresh] = groups.try_emplace(key);
    if (fresh) order.push_back(key);
    operating_point& g = it->second;
    g.key = key;
    ++g.runs;
    const double rate = axis_number(*r, "rate");
    const long long batch = axis(*r, "batch") ? std::atoll(axis(*r, "batch")->c_str()) : 0;
    g.highest_rate_tried = std::max(g.highest_rate_tried, rate);
    if (meets->value < 0.5) continue;
    if (!g.best || rate > g.rate || (rate == g.rate && batch < g.batch)) {
      const metric* goodput = r->find_metric("load/goodput");
      g.best = r;
      g.rate = rate;
      g.batch = batch;
      g.goodput = goodput ? goodput->value : 0.0;
    }
  }
  std::vector<operating_point> out;
  for (const auto& k : order) out.push_back(groups[k]);
  return out;
}

cost_report analyse_cost(const std::vector<result_set>& sets, const catalogue& cat, const price_table& prices,
                         const cost_options& o) {
  for (const auto& id : o.cards)
    if (!cat.find(id)) throw usage_error(fmt::format("card '{}' is not in the catalogue", id));
  cost_report rep;
  rep.prices = prices;
  for (const auto& c : cat.cards())
    if (!prices.find(c.id)) rep.unpriced.push_back(c.id);

  struct located {
    const result_set* set;
    const case_record* rec;
  };
  std::vector<std::string> order;
  std::map<std::string, std::vector<located>> by_group;
  std::map<const result_set*, std::optional<projection_report>> projections;
  std::map<const result_set*, std::string> projection_failure;
  for (const auto& s : sets) {
    const std::string card = analysis::catalogue_id_of(s);
    if (card.empty() || !cat.find(card))
      throw input_error(fmt::format("{}: the device the run was made on has no catalogue match (a cpu run, or a card "
                                    "not in data/catalogue.json): nothing to price",
                                    s.source));
    for (const auto& r : s.cases) {
      if (r.role != "case" || r.status != case_status::ok || !rate_basis_of(r)) continue;
      const std::string key = r.workload + " " + group_key(r) + (is_load_case(r) ? " #load" : "");
      if (!by_group.count(key)) order.push_back(key);
      by_group[key].push_back({&s, &r});
    }
    try {
      projection_options po;
      projections[&s] = project_results(s, cat, po);
    } catch (const input_error& e) {
      projection_failure[&s] = e.what();
    }
  }
  if (order.empty())
    throw input_error(fmt::format("no finished case carries a throughput to cost ({}): the llm workload (offline or "
                                  "server scenario), an image pipeline, or the user API's counters record one",
                                  rate_metric_names()));

  // The cards in each table: --card, else the priced cards and the measured ones, in catalogue order.
  const auto wanted = [&](const std::string& id, const std::set<std::string>& measured) {
    if (!o.cards.empty()) return std::find(o.cards.begin(), o.cards.end(), id) != o.cards.end();
    return prices.find(id) != nullptr || measured.count(id) > 0;
  };

  for (const auto& gkey : order) {
    const auto& members = by_group[gkey];
    cost_group g;
    g.workload = members.front().rec->workload;
    g.key = group_key(*members.front().rec);
    const bool load = is_load_case(*members.front().rec);
    g.scenario = load ? "server" : "offline";
    g.basis = *rate_basis_of(*members.front().rec);
    const std::string& rate_metric = g.basis.metric;
    std::set<std::string> measured;
    for (const auto& m : members) measured.insert(analysis::catalogue_id_of(*m.set));
    g.measured_cards.assign(measured.begin(), measured.end());

    std::vector<cost_row> measured_rows, projected_rows;
    // The measured rows are per source file (a run is judged against its own targets).
    std::map<const result_set*, std::vector<const case_record*>> per_set;
    for (const auto& m : members) per_set[m.set].push_back(m.rec);
    if (load) {
      for (const auto& [set, recs] : per_set) {
        cost_row row;
        row.card = analysis::catalogue_id_of(*set);
        row.measured = true;
        row.source = set->source;
        const auto ops = find_operating_points(recs);
        const operating_point* op = ops.empty() ? nullptr : &ops.front();
        if (!op || !op->best) {
          row.note = fmt::format("no rate meets the latency targets ({} runs)", op ? op->runs : recs.size());
        } else {
          row.configuration = fmt::format("rate={:g}/s batch={}", op->rate, op->batch);
          row.case_key = op->best->axes_key();
          row.rate = op->best->find_metric(rate_metric)->value;
          if (const metric* pk = op->best->find_metric("memory/measured_peak")) row.peak_bytes = pk->value;
          row.note = fmt::format("highest rate meeting the targets, goodput {:.3g} requests/s", op->goodput);
          if (op->rate >= op->highest_rate_tried)
            row.note += "; the highest rate tried: the card may sustain more";
        }
        price_row(row, prices, g.basis);
        if (wanted(row.card, measured)) measured_rows.push_back(std::move(row));
      }
      g.notes.push_back("server scenario: not projected to other cards (its cases have no stages with a device time); "
                        "measure the scenario on the other card");
    } else {
      // Measured: the best output throughput among the batches that meet the targets, per file.
      for (const auto& [set, recs] : per_set) {
        cost_row row;
        row.card = analysis::catalogue_id_of(*set);
        row.measured = true;
        row.source = set->source;
        std::string misses;
        for (const auto* r : recs) {
          const std::string miss = offline_target_miss(*r, 1.0);
          if (!miss.empty()) {
            misses += fmt::format("{}batch {}: {}", misses.empty() ? "" : "; ", axis(*r, "batch").value_or("?"), miss);
            continue;
          }
          const metric* rm = r->find_metric(rate_metric);
          if (!rm) continue;  // a case of the group with another basis
          if (row.rate && *row.rate >= rm->value) continue;
          row.rate = rm->value;
          row.configuration = "batch=" + axis(*r, "batch").value_or("?");
          row.case_key = r->axes_key();
          const metric* pk = r->find_metric("memory/measured_peak");
          row.peak_bytes = pk ? std::optional<double>(pk->value) : std::nullopt;
        }
        row.note = row.rate ? fmt::format("best of {} batch(es)", recs.size())
                                    : "no batch meets the latency targets";
        if (!misses.empty()) row.note += " (missed the targets: " + misses + ")";
        price_row(row, prices, g.basis);
        if (wanted(row.card, measured)) measured_rows.push_back(std::move(row));
      }
      // Projected: the best projected throughput among the batches that fit the card and meet the targets.
      for (const auto& c : cat.cards()) {
        if (measured.count(c.id) || !wanted(c.id, measured)) continue;
        cost_row row;
        row.card = c.id;
        std::vector<std::string> why_not;
        std::size_t tried = 0;
        for (const auto& m : members) {
          const auto& proj = projections[m.set];
          if (!proj) continue;
          const std::string key = m.rec->axes_key();
          const auto cp = std::find_if(proj->cases.begin(), proj->cases.end(),
                                       [&](const case_projection& p) { return p.workload == m.rec->workload && p.case_key == key; });
          if (cp == proj->cases.end()) continue;
          const auto card = std::find_if(cp->cards.begin(), cp->cards.end(), [&](const card_projection& p) { return p.card_id == c.id; });
          if (card == cp->cards.end() || !card->rate || !cp->measured_rate || cp->rate_metric != rate_metric) continue;
          ++tried;
          const std::string batch = axis(*m.rec, "batch").value_or("?");
          if (!card->fits) {
            why_not.push_back(fmt::format("batch {} does not fit ({} measured)", batch,
                                          cp->measured_peak_bytes ? analysis::gib_text(*cp->measured_peak_bytes) : "?"));
            continue;
          }
          const std::string miss = offline_target_miss(*m.rec, *cp->measured_rate / *card->rate);
          if (!miss.empty()) {
            why_not.push_back(fmt::format("batch {}: {}", batch, miss));
            continue;
          }
          if (row.rate && *row.rate >= *card->rate) continue;
          row.rate = *card->rate;
          row.configuration = "batch=" + batch;
          row.case_key = key;
          row.source = m.set->source;
          row.peak_bytes = cp->measured_peak_bytes;
          row.validation_error = cp->self_total_error;
        }
        if (row.rate) {
          row.note = fmt::format("projected (roofline from the measured card, datasheet peaks; {} on the measured card "
                                 "itself: expect the real figure lower by about that much)",
                                 analysis::percent_text(*row.validation_error));
        } else if (tried == 0) {
          std::string why;
          for (const auto& [set, msg] : projection_failure) why += (why.empty() ? "" : "; ") + msg;
          row.note = "not projected" + (why.empty() ? std::string() : ": " + why);
        } else {
          row.note = "no configuration: ";
          for (std::size_t i = 0; i < why_not.size(); ++i) row.note += (i ? "; " : "") + why_not[i];
        }
        if (!why_not.empty() && row.rate) {
          row.note += "; left out: ";
          for (std::size_t i = 0; i < why_not.size(); ++i) row.note += (i ? "; " : "") + why_not[i];
        }
        price_row(row, prices, g.basis);
        projected_rows.push_back(std::move(row));
      }
    }
    const auto cheaper = [](const cost_row& a, const cost_row& b) {
      if (a.cost.has_value() != b.cost.has_value()) return a.cost.has_value();
      return a.cost && *a.cost < *b.cost;
    };
    std::stable_sort(measured_rows.begin(), measured_rows.end(), cheaper);
    std::stable_sort(projected_rows.begin(), projected_rows.end(), cheaper);
    g.rows = std::move(measured_rows);
    g.rows.insert(g.rows.end(), projected_rows.begin(), projected_rows.end());
    if (!g.rows.empty()) rep.groups.push_back(std::move(g));
  }
  if (rep.groups.empty()) throw input_error("none of the named cards appears in any group (measured or projected)");
  return rep;
}

ojson to_json(const price_entry& p) {
  ojson j;
  j["row"] = p.row;
  j["card"] = p.card;
  j["price_per_gpu_hour"] = p.per_gpu_hour;
  j["price_text"] = p.price_text;
  j["currency"] = p.currency;
  j["date"] = p.date;
  j["source"] = p.source;
  j["example"] = p.example;
  return j;
}

ojson to_json(const cost_row& r) {
  const auto opt = [](const std::optional<double>& v) { return v ? ojson(*v) : ojson(nullptr); };
  ojson j;
  j["card"] = r.card;
  j["basis"] = r.measured ? "measured" : "projected";
  j["configuration"] = r.configuration;
  j["case"] = r.case_key;
  j["source"] = r.source;
  j["rate"] = opt(r.rate);
  j["measured_peak_bytes"] = opt(r.peak_bytes);
  j["validation_error"] = opt(r.validation_error);
  j["price"] = r.price ? to_json(*r.price) : ojson(nullptr);
  j["cost"] = opt(r.cost);
  j["note"] = r.note;
  return j;
}

void write_cost_json(std::ostream& out, const cost_report& r) {
  ojson doc;
  doc["schema"] = "itera.cost/1";
  doc["prices_file"] = r.prices.file;
  doc["prices_note"] = r.prices.note;
  doc["currency"] = r.prices.currency;
  doc["example_prices"] = r.prices.any_example();
  doc["groups"] = ojson::array();
  for (const auto& g : r.groups) {
    ojson gj;
    gj["workload"] = g.workload;
    gj["group"] = g.key;
    gj["scenario"] = g.scenario;
    gj["rate_metric"] = g.basis.metric;
    gj["cost_per"] = g.basis.per_label;
    gj["measured_cards"] = g.measured_cards;
    gj["rows"] = ojson::array();
    for (const auto& row : g.rows) gj["rows"].push_back(to_json(row));
    gj["notes"] = g.notes;
    doc["groups"].push_back(std::move(gj));
  }
  doc["unpriced_cards"] = r.unpriced;
  out << doc.dump(2) << '\n';
}

void write_cost_markdown(std::ostream& out, const cost_report& r) {
  std::set<std::string> pers;
  for (const auto& g : r.groups) pers.insert(g.basis.per_label);
  std::string per_text;
  for (const auto& p : pers) per_text += (per_text.empty() ? "" : ", ") + p;
  out << "# Cost per " << per_text << "\n\n";
  out << fmt::format("Prices: {} ({} per GPU-hour", r.prices.file, r.prices.currency);
  std::set<std::string> dates;
  for (const auto& e : r.prices.entries) dates.insert(e.date);
  std::string ds;
  for (const auto& d : dates) ds += (ds.empty() ? "" : ", ") + d;
  out << fmt::format(", dated {}).", ds);
  if (r.prices.any_example()) out << " **Example prices, not quotes.**";
  out << '\n';
  if (!r.prices.note.empty()) out << "\n> " << r.prices.note << '\n';
  out << "\ncost = price per GPU-hour / (throughput x 3600) x the amount quoted (10^6 output tokens, 10^3 images or "
         "one training step), one GPU, at the card's best configuration that meets the latency targets.\n";
  for (const auto& g : r.groups) {
    out << fmt::format("\n## {} {} ({}; cost per {})\n\n", g.workload, g.key, g.scenario, g.basis.per_label);
    analysis::text_table t;
    t.column("card", false);
    t.column("basis", false);
    t.column("configuration", false);
    t.column(g.basis.rate_label, true);
    t.column("price / GPU-hour", true);
    t.column("cost / " + g.basis.short_label, true);
    t.column("note", false);
    for (const auto& row : g.rows) {
      t.rows.push_back({row.card, row.measured ? "measured" : "projected",
                        row.configuration.empty() ? "-" : row.configuration,
                        row.rate ? fmt::format("{:.4g}", *row.rate) : "-",
                        row.price ? row.price->price_text + " " + row.price->currency : "no price",
                        row.cost ? analysis::money_text(*row.cost, row.price->currency, 4) : "-",
                        row.note});
    }
    t.write(out);
    for (const auto& n : g.notes) out << "\n" << n << '\n';
  }
  if (!r.unpriced.empty()) {
    out << "\nNot in the price file: ";
    for (std::size_t i = 0; i < r.unpriced.size(); ++i) out << (i ? ", " : "") << r.unpriced[i];
    out << ".\n";
  }
}

}  // namespace itera
