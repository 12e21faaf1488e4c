#pragma once
// The HTML report (docs/report.md): one self-contained page whose charts are drawn by Chart.js,
// which the build takes from the npm registry and embeds (cmake/report_assets.cmake). Like the other
// writers it only renders results. What each chart shows is decided here and embedded in the page
// as JSON; the page's script maps it onto Chart.js. Tables under each chart hold the same numbers.
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "itera/analysis/cost.hpp"
#include "itera/core/result.hpp"

namespace itera {

// The section "Cost per million tokens" (`itera report --prices`): analyse_cost's report, drawn as
// it is (nothing is recomputed here). Without a price file the section says how to get one.
struct html_cost {
  std::string prices_file;            // the --prices file; empty: none given
  std::optional<cost_report> report;  // analyse_cost on the results and that file
  std::string unavailable;            // why there is no report although prices were given
};

// Reads the price file and runs the cost analysis as `itera cost` does (same recipe check, the
// builtin catalogue). A bad price file throws (input_error); results the analysis refuses (no llm
// throughput, a device not in the catalogue, files of different recipes) leave `unavailable` set.
html_cost html_cost_of(const std::vector<result_set>& sets, const std::string& prices_path);

// --prices belongs to --format html: throws usage_error otherwise.
void check_report_prices_option(const std::string& format, const std::string& prices_path);

// The data the page's charts are drawn from, exactly as embedded:
// {"schema": "itera.report.html/1", "runs": [{label, source, card, ...}],
//  "charts": [{id, section, title, kind, x, y, categories, series, references, note}],
//  "cost": null | {prices_file, currency, example_prices, groups: [{workload, group, scenario, chart,
//                  rows: [to_json(cost_row)], notes}], unpriced_cards} | {prices_file, unavailable}}.
// Every section has at least one chart; a chart without data has no series and a note saying why.
ojson html_report_model(const std::vector<result_set>& sets, const html_cost& cost = {});

// The whole page: charts, the tables behind them, the runs and the licences of what is embedded.
void write_html(std::ostream& out, const std::vector<result_set>& sets, const html_cost& cost = {});

namespace report {

// &, <, >, " and ' as character references: any text is safe in an element or a quoted attribute.
std::string html_escape(std::string_view text);  // defined with the text helpers (src/report/text_format.cpp)
// JSON that cannot end the <script> element it is placed in: '<', '>', '&', U+2028 and U+2029 are
// written as \u escapes (the same JSON once parsed); invalid UTF-8 becomes U+FFFD.
std::string json_for_script(const ojson& j);

}  // namespace report
}  // namespace itera
