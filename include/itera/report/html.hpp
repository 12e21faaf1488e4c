#pragma once
// The HTML report (docs/report.md): one self-contained page whose charts are drawn by Chart.js,
// which the build takes from the npm registry and embeds (cmake/report_assets.cmake). Like the other
// writers it only renders results. What each chart shows is decided here and embedded in the page
// as JSON; the page's script maps it onto Chart.js. Tables under each chart hold the same numbers.
#include <iosfwd>
#include <string>
#include <vector>

#include "itera/core/result.hpp"

namespace itera {

// The data the page's charts are drawn from, exactly as embedded:
// {"schema": "itera.report.html/1", "runs": [{label, source, card, ...}],
//  "charts": [{id, section, title, kind, x, y, categories, series, references, note}]}.
// Every section has at least one chart; a chart without data has no series and a note saying why.
ojson html_report_model(const std::vector<result_set>& sets);

// The whole page: charts, the tables behind them, the runs and the licences of what is embedded.
void write_html(std::ostream& out, const std::vector<result_set>& sets);

namespace report {

// &, <, >, " and ' as character references: any text is safe in an element or a quoted attribute.
std::string html_escape(const std::string& text);
// JSON that cannot end the <script> element it is placed in: '<', '>', '&', U+2028 and U+2029 are
// written as \u escapes (the same JSON once parsed); invalid UTF-8 becomes U+FFFD.
std::string json_for_script(const ojson& j);

}  // namespace report
}  // namespace itera
