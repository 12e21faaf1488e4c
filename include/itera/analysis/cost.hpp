#pragma once
// Cost per million output tokens, per thousand images or per training step (DESIGN.md R8;
// docs/analysis.md "Cost and plan"; rates.hpp says which throughput metric gives which). Prices per
// GPU-hour come from a user file; throughput comes from the measurements on the measured card and
// from the roofline projection (projection.hpp) on the others, always labelled "projected".
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "itera/analysis/rates.hpp"
#include "itera/core/result.hpp"
#include "itera/env/catalogue.hpp"

namespace itera {

// One row of a price file.
struct price_entry {
  std::size_t row = 0;       // 1-based position in the file's array
  std::string card;          // catalogue id
  double per_gpu_hour = 0;   // currency units
  std::string price_text;    // as written in the file ("3.79")
  std::string currency;      // "USD"
  std::string date;          // YYYY-MM-DD
  std::string source;
  bool example = false;
};

struct price_table {
  std::string file;
  std::string note;  // the file's own note, when it is an object with "note"
  std::string currency;  // one per file
  std::vector<price_entry> entries;
  const price_entry* find(const std::string& card) const;
  bool any_example() const;
};

// The file is a JSON array of rows, or an object {"schema": "itera.prices/1", "note": ..., "prices": [rows]}.
// A row: card, price_per_gpu_hour (decimal string or number), currency, date (YYYY-MM-DD), source,
// example (optional bool). Throws input_error listing every bad row by its 1-based number and what is
// wrong (missing field, negative price, unknown card with the catalogue's ids, bad date, ...).
price_table parse_prices(const ojson& doc, const catalogue& cat, const std::string& file);
price_table read_prices(const std::string& path, const catalogue& cat);

// Load scenarios (R4), the rule of `itera report`'s operating points: among the ok cases that judged
// themselves against latency targets (metric load/meets_targets), grouped by every axis but rate and
// batch, the highest rate that meets them and, at that rate, the smallest batch limit that does.
struct operating_point {
  std::string key;       // the other axes, "k=v k=v"
  std::size_t runs = 0;  // cases tried in the group
  const case_record* best = nullptr;  // null when none meets the targets
  double rate = 0;
  long long batch = 0;
  double goodput = 0;
  double highest_rate_tried = 0;
};
std::vector<operating_point> find_operating_points(const std::vector<const case_record*>& cases);

// One card's best configuration in a workload group.
struct cost_row {
  std::string card;
  bool measured = false;             // false: projected
  std::string configuration;         // "batch=64" or "rate=16/s batch=64"
  std::string case_key;              // axes of the case it comes from
  std::string source;                // results file
  std::optional<double> rate;        // the group's throughput (basis.metric) per GPU
  std::optional<double> peak_bytes;    // memory/measured_peak of that case
  std::optional<double> validation_error;  // projected rows: the case's projection error on the measured card
  std::optional<price_entry> price;
  std::optional<double> cost;        // per basis.per items: price / (rate x 3600) x basis.per
  std::string note;  // caveat, or why there is no figure
};

struct cost_group {
  std::string workload;
  std::string key;       // every axis but batch and rate
  std::string scenario;  // "offline" | "server"
  rate_basis basis;      // what the costs are per
  std::vector<std::string> measured_cards;
  std::vector<cost_row> rows;  // measured first, then projected; cheapest first within each
  std::vector<std::string> notes;
};

struct cost_report {
  price_table prices;
  std::vector<cost_group> groups;
  std::vector<std::string> unpriced;  // catalogue cards the price file does not name
};

struct cost_options {
  std::vector<std::string> cards;  // restrict to these ids; empty: the priced cards and the measured card
};

// Throws usage_error for an unknown --card id, input_error when a file's device has no catalogue
// match or no case carries a throughput of rates.hpp.
cost_report analyse_cost(const std::vector<result_set>& sets, const catalogue& cat, const price_table& prices,
                         const cost_options& o);

void write_cost_markdown(std::ostream& out, const cost_report& r);
void write_cost_json(std::ostream& out, const cost_report& r);
ojson to_json(const cost_row& row);
ojson to_json(const price_entry& p);

namespace analysis {
// "12.34 USD"; costs per million tokens are shown with 4 decimals (a few cents, or less)
std::string money_text(double amount, const std::string& currency, int decimals = 2);
}

}  // namespace itera
