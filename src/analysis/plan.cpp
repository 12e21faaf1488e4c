// Rental plan: ranks the cards of one workload group by cost per million output tokens (cost.cpp),
// sizes the quantity for a target throughput, prices 3, 7 and 30 days and writes the desk's order.
#include "itera/analysis/plan.hpp"

#include <algorithm>
#include <cmath>
#include <ostream>

#include <fmt/format.h>

#include "itera/analysis/fit.hpp"
#include "itera/core/errors.hpp"

namespace itera {

namespace {

constexpr double usable_fraction = 0.92;  // as projection.cpp: nominal GiB less 8%
constexpr int desk_default_max_quantity = 8;

bool group_matches(const std::string& key, const std::vector<std::string>& want) {
  const std::string padded = " " + key + " ";
  return std::all_of(want.begin(), want.end(), [&](const std::string& w) { return padded.find(" " + w + " ") != std::string::npos; });
}

// The desk accepts letters, digits, space and . _ - + / , : ( ) = # in `environment` (docs/desk.md).
std::string desk_environment(const result_set& s) {
  const auto sw = [&](const char* k) {
    return s.context.software.contains(k) && s.context.software[k].is_string() ? s.context.software[k].get<std::string>()
                                                                               : std::string();
  };
  std::string env = "itera " + (s.context.itera_version.empty() ? std::string("?") : s.context.itera_version);
  if (!sw("cuda_runtime").empty()) env += ", CUDA " + sw("cuda_runtime");
  if (!sw("driver").empty()) env += ", driver " + sw("driver");
  std::string out;
  for (char c : env) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || std::string_view(" ._-+/,:()=#").find(c) != std::string_view::npos;
    if (ok) out += c;
  }
  return out.substr(0, 200);
}

std::string tokens_text(double t) {
  if (t >= 1e12) return fmt::format("{:.3g} T", t * 1e-12);
  if (t >= 1e9) return fmt::format("{:.3g} G", t * 1e-9);
  if (t >= 1e6) return fmt::format("{:.3g} M", t * 1e-6);
  return fmt::format("{:.3g}", t);
}

std::string campaign_text(int days, const plan_candidate& c, const std::string& scenario, const std::string& workload,
                          const rate_basis& basis) {
  const std::string measured = c.row.measured ? "measured" : "projected";
  const std::string profile = fmt::format(
      "days 1-3: run the same recipe on {} x {} (itera bench {}, then itera report) and profile compute against "
      "transfers and memory per stage; confirm the {} {:.4g} {} per GPU at {} and the memory peak",
      c.quantity, c.row.card, workload, measured, *c.row.rate, basis.rate_label, c.row.configuration);
  const std::string fixes =
      "up to day 7: test fixes, repeat the measurements (several runs, to see the noise), compare batches or "
      "adaptations (fp8 weights, another batch limit) with itera compare";
  if (days == 3) return profile + ".";
  if (days == 7) return profile + "; " + fixes + ".";
  const double per_day = *c.row.rate * c.quantity * 86400.0;
  const std::string items = basis.rate_label.substr(0, basis.rate_label.find('/'));
  return profile + "; " + fixes +
         fmt::format("; then an inference campaign ({} scenario at {}: up to {} {} a day on {} GPU(s) at "
                     "full load) or a planned training, with a regular evaluation (each week: the same recipe again, "
                     "itera compare against the first week).",
                     scenario, c.row.configuration, tokens_text(per_day), items, c.quantity);
}

}  // namespace

plan_report make_plan(const std::vector<result_set>& sets, const catalogue& cat, const price_table& prices,
                      const plan_options& o) {
  if (o.days && std::find(rental_days.begin(), rental_days.end(), *o.days) == rental_days.end())
    throw usage_error(fmt::format("--days {}: the desk rents for 3, 7 or 30 days", *o.days));
  if (o.max_gpus < 1) throw usage_error(fmt::format("--max-gpus {}: at least 1", o.max_gpus));
  if (o.target_rate && !(*o.target_rate > 0))
    throw usage_error(fmt::format("--target-rate {:g}: must be above 0", *o.target_rate));

  plan_report p;
  p.target_rate = o.target_rate;
  // Every card of the catalogue is a candidate: the plan says why each one is left out.
  cost_options co;
  for (const auto& c : cat.cards()) co.cards.push_back(c.id);
  p.cost = analyse_cost(sets, cat, prices, co);

  // The group: the one matching --group; else the first end-to-end group (closest to serving), else the first.
  const cost_group* g = nullptr;
  std::vector<const cost_group*> matching;
  for (const auto& cg : p.cost.groups)
    if (group_matches(cg.key, o.group)) matching.push_back(&cg);
  if (matching.empty()) {
    std::string keys;
    for (const auto& cg : p.cost.groups) keys += "\n  " + cg.key;
    throw usage_error(fmt::format("no workload group contains every --group value; the groups are:{}", keys));
  }
  for (const auto* cg : matching)
    if (!g && group_matches(cg->key, {"loop=end_to_end"})) g = cg;
  if (!g) g = matching.front();
  p.group = g->key;
  p.scenario = g->scenario;
  p.basis = g->basis;
  p.workload = g->workload;
  const std::string& rate_label = g->basis.rate_label;
  for (const auto& cg : p.cost.groups)
    if (&cg != g) p.other_groups.push_back(cg.key);

  for (const auto& row : g->rows) {
    plan_candidate c;
    c.row = row;
    const catalogue_card* card = cat.find(row.card);
    if (!row.rate) {
      c.why_not = row.note.empty() ? "no throughput" : row.note;
    } else if (!row.price) {
      c.why_not = "no price in " + prices.file;
    } else if (row.peak_bytes && card && *row.peak_bytes > card->memory_gb * 1073741824.0 * usable_fraction) {
      c.why_not = fmt::format("does not fit: {} measured peak against {} usable", analysis::gib_text(*row.peak_bytes),
                              analysis::gib_text(card->memory_gb * 1073741824.0 * usable_fraction));
    } else {
      c.quantity = o.target_rate ? static_cast<int>(std::ceil(*o.target_rate / *row.rate)) : 1;
      if (c.quantity > o.max_gpus) {
        c.why_not = fmt::format("needs {} GPUs for {:g} {}, more than --max-gpus {}", c.quantity, *o.target_rate,
                                rate_label, o.max_gpus);
      } else {
        c.eligible = true;
        for (std::size_t i = 0; i < rental_days.size(); ++i)
          c.rental_cost[i] = c.quantity * row.price->per_gpu_hour * 24.0 * rental_days[i];
      }
    }
    p.candidates.push_back(std::move(c));
  }
  std::stable_sort(p.candidates.begin(), p.candidates.end(), [](const plan_candidate& a, const plan_candidate& b) {
    if (a.eligible != b.eligible) return a.eligible;
    if (!a.eligible) return false;
    if (*a.row.cost != *b.row.cost) return *a.row.cost < *b.row.cost;
    return a.rental_cost[0] < b.rental_cost[0];
  });
  if (p.candidates.empty() || !p.candidates.front().eligible) {
    std::string why;
    for (const auto& c : p.candidates) why += fmt::format("\n  {}: {}", c.row.card, c.why_not);
    throw input_error(fmt::format("no card can be recommended for {}:{}", g->key, why));
  }
  p.chosen = 0;
  if (p.candidates.size() > 1 && p.candidates[1].eligible) p.runner_up = 1;
  const plan_candidate& best = p.candidates[0];

  // Duration: asked for, else by what is known about the card.
  if (o.days) {
    p.days = *o.days;
    p.days_reason = "asked for with --days";
  } else if (!best.row.measured) {
    p.days = 3;
    p.days_reason = "the card was not measured: 3 days confirm the projection before a longer rental";
  } else if (o.target_rate) {
    p.days = 30;
    p.days_reason = "the card was measured and a throughput target is set: a 30-day inference campaign";
  } else {
    p.days = 7;
    p.days_reason = "the card was measured and no throughput target is set: 7 days to repeat, fix and compare";
  }
  for (std::size_t i = 0; i < rental_days.size(); ++i)
    p.campaigns.push_back({rental_days[i], best.rental_cost[i], campaign_text(rental_days[i], best, g->scenario, g->workload, g->basis)});

  // Reasons.
  const std::string cur = prices.currency;
  std::size_t eligible = 0;
  for (const auto& c : p.candidates) eligible += c.eligible;
  p.reasons.push_back(fmt::format(
      "{} is the cheapest per {} of {} card(s) that hold the workload and have a price: {} at {} "
      "({:.4g} {} per GPU, {}, {} {} per GPU-hour)",
      best.row.card, g->basis.per_label, eligible, analysis::money_text(*best.row.cost, cur, 4), best.row.configuration,
      *best.row.rate, rate_label, best.row.measured ? "measured" : "projected", best.row.price->price_text, cur));
  if (const catalogue_card* card = cat.find(best.row.card); card && best.row.peak_bytes)
    p.reasons.push_back(fmt::format("memory: the configuration peaked at {} (measured), the card has {} GB ({} usable)",
                                    analysis::gib_text(*best.row.peak_bytes), card->memory_gb,
                                    analysis::gib_text(card->memory_gb * 1073741824.0 * usable_fraction)));
  if (o.target_rate)
    p.reasons.push_back(fmt::format(
        "quantity {}: {:g} {} / {:.4g} {} per GPU, rounded up; it assumes each GPU serves its own copy of the "
        "model (no multi-GPU run was measured)",
        best.quantity, *o.target_rate, rate_label, *best.row.rate, rate_label));
  else
    p.reasons.push_back("quantity 1: no --target-rate given");
  if (best.quantity > desk_default_max_quantity)
    p.reasons.push_back(fmt::format("{} GPUs is above the desk's default limit of {} per order: split the order",
                                    best.quantity, desk_default_max_quantity));
  if (p.runner_up >= 0) {
    const plan_candidate& ru = p.candidates[static_cast<std::size_t>(p.runner_up)];
    const double margin = *ru.row.cost / *best.row.cost - 1;
    p.reasons.push_back(fmt::format("runner-up: {} at {} per {} ({}, {} more; {} x {} for {} days: {} against {})",
                                    ru.row.card, analysis::money_text(*ru.row.cost, cur, 4), g->basis.per_label,
                                    ru.row.measured ? "measured" : "projected", analysis::percent_text(margin), ru.quantity,
                                    ru.row.card, p.days,
                                    analysis::money_text(ru.rental_cost[static_cast<std::size_t>(
                                                             std::find(rental_days.begin(), rental_days.end(), p.days) - rental_days.begin())],
                                                         cur),
                                    analysis::money_text(best.rental_cost[static_cast<std::size_t>(
                                                             std::find(rental_days.begin(), rental_days.end(), p.days) - rental_days.begin())],
                                                         cur)));
    double err = 0;
    for (const auto* c : {&best, &ru})
      if (!c->row.measured && c->row.validation_error) err = std::max(err, std::fabs(*c->row.validation_error));
    if (err > 0 && margin < err)
      p.reasons.push_back(fmt::format("the margin ({}) is within the projection's error on the measured card ({}): the "
                                      "order of the two may change once the projected card is measured",
                                      analysis::percent_text(margin), analysis::percent_text(err)));
  } else {
    p.reasons.push_back("no runner-up: no other card has a price, a throughput for this group and room for the workload (table below)");
  }
  if (!best.row.measured && best.row.validation_error)
    p.reasons.push_back(fmt::format("{}'s figures are projected by the roofline model from the measured card with datasheet "
                                    "peaks (docs/analysis.md); on the measured card itself the model was {} off: expect "
                                    "about that much less",
                                    best.row.card, analysis::percent_text(*best.row.validation_error)));
  if (prices.any_example()) p.reasons.push_back("the prices are examples (\"example\": true), not quotes: costs are illustrative");

  // The desk's order (docs/desk.md: POST /api/v1/orders).
  p.email_placeholder = "REPLACE-WITH-YOUR-EMAIL";
  const result_set* src = nullptr;
  for (const auto& s : sets)
    if (s.source == best.row.source) src = &s;
  if (!src) src = &sets.front();
  p.order = ojson::object();
  p.order["gpu"] = best.row.card;
  p.order["days"] = p.days;
  p.order["quantity"] = best.quantity;
  p.order["environment"] = desk_environment(*src);
  p.order["email"] = p.email_placeholder;
  p.order["network"] = o.network;
  return p;
}

void write_plan_json(std::ostream& out, const plan_report& p) {
  ojson doc;
  doc["schema"] = "itera.plan/1";
  doc["group"] = p.group;
  doc["scenario"] = p.scenario;
  doc["other_groups"] = p.other_groups;
  doc["target_rate"] = p.target_rate ? ojson(*p.target_rate) : ojson(nullptr);
  doc["rate_metric"] = p.basis.metric;
  doc["cost_per"] = p.basis.per_label;
  doc["currency"] = p.cost.prices.currency;
  doc["example_prices"] = p.cost.prices.any_example();
  const auto cand = [](const plan_candidate& c) {
    ojson j = to_json(c.row);
    j["eligible"] = c.eligible;
    j["why_not"] = c.why_not;
    j["quantity"] = c.quantity;
    j["rental_cost"] = ojson::object();
    if (c.eligible)
      for (std::size_t i = 0; i < rental_days.size(); ++i) j["rental_cost"][std::to_string(rental_days[i])] = c.rental_cost[i];
    return j;
  };
  doc["recommendation"] = cand(p.candidates[static_cast<std::size_t>(p.chosen)]);
  doc["recommendation"]["days"] = p.days;
  doc["recommendation"]["days_reason"] = p.days_reason;
  doc["runner_up"] = p.runner_up >= 0 ? cand(p.candidates[static_cast<std::size_t>(p.runner_up)]) : ojson(nullptr);
  doc["campaigns"] = ojson::array();
  for (const auto& c : p.campaigns) doc["campaigns"].push_back({{"days", c.days}, {"rental_cost", c.rental_cost}, {"plan", c.plan}});
  doc["reasons"] = p.reasons;
  doc["candidates"] = ojson::array();
  for (const auto& c : p.candidates) doc["candidates"].push_back(cand(c));
  doc["order"] = {{"method", "POST"}, {"path", "/api/v1/orders"}, {"body", p.order},
                  {"fill_in", {{"email", "replace " + p.email_placeholder + " with your email before sending; the desk refuses the placeholder"},
                               {"network", "one of the desk's payment networks (GET /api/v1/catalogue)"}}}};
  out << doc.dump(2) << '\n';
}

void write_plan_markdown(std::ostream& out, const plan_report& p) {
  const auto& best = p.candidates[static_cast<std::size_t>(p.chosen)];
  const std::string cur = p.cost.prices.currency;
  out << "# Rental plan\n\n";
  out << fmt::format("Workload: {} ({} scenario)", p.group, p.scenario);
  if (p.target_rate) out << fmt::format(", target {:g} {}", *p.target_rate, p.basis.rate_label);
  out << ".\n";
  if (!p.other_groups.empty()) {
    out << "Other groups in the results (plan one with --group k=v):\n";
    for (const auto& k : p.other_groups) out << "- " << k << '\n';
  }
  if (p.cost.prices.any_example()) out << "\n**The prices are examples, not quotes.**\n";
  out << fmt::format("\n**Recommendation: {} x {} for {} days, {}** ({}: {}).\n", best.quantity, best.row.card, p.days,
                     analysis::money_text(p.campaigns[static_cast<std::size_t>(
                                              std::find(rental_days.begin(), rental_days.end(), p.days) - rental_days.begin())]
                                              .rental_cost,
                                          cur),
                     best.row.measured ? "measured" : "projected", p.days_reason);
  out << "\nWhy:\n\n";
  for (const auto& r : p.reasons) out << "- " << r << '\n';

  out << "\nDurations (R15):\n\n";
  analysis::text_table d;
  d.column("days", true);
  d.column("rental", true);
  d.column("campaign", false);
  for (const auto& c : p.campaigns)
    d.rows.push_back({std::to_string(c.days) + (c.days == p.days ? " (chosen)" : ""), analysis::money_text(c.rental_cost, cur), c.plan});
  d.write(out);

  out << "\nCards:\n\n";
  analysis::text_table t;
  t.column("card", false);
  t.column("basis", false);
  t.column("configuration", false);
  t.column(p.basis.rate_label + " per GPU", true);
  t.column("cost / " + p.basis.short_label, true);
  t.column("GPUs", true);
  for (int days : rental_days) t.column(fmt::format("{} days", days), true);
  t.column("left out because", false);
  for (const auto& c : p.candidates) {
    std::vector<std::string> row = {c.row.card, c.row.measured ? "measured" : "projected",
                                    c.row.configuration.empty() ? "-" : c.row.configuration,
                                    c.row.rate ? fmt::format("{:.4g}", *c.row.rate) : "-",
                                    c.row.cost ? analysis::money_text(*c.row.cost, cur, 4) : "-",
                                    c.eligible ? std::to_string(c.quantity) : "-"};
    for (std::size_t i = 0; i < rental_days.size(); ++i) row.push_back(c.eligible ? analysis::money_text(c.rental_cost[i], cur) : "-");
    row.push_back(c.eligible ? "" : c.why_not);
    t.rows.push_back(std::move(row));
  }
  t.write(out);

  out << "\nOrder for the rental desk (POST /api/v1/orders, Content-Type: application/json). Replace \""
      << p.email_placeholder
      << "\" with your email before sending (the desk refuses the placeholder); `network` must be one of the desk's "
         "payment networks (GET /api/v1/catalogue); a messenger handle may be added as \"messenger\".\n\n```json\n"
      << p.order.dump(2) << "\n```\n";
}

}  // namespace itera
