// The HTML report (docs/report.md): the charts' data embedded in the page, escaping of labels, and a
// page that needs nothing from the network. Fixtures: real measured results in docs/perf/data.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "itera/analysis/cost.hpp"
#include "itera/core/errors.hpp"
#include "itera/core/result.hpp"
#include "itera/env/catalogue.hpp"
#include "itera/report/html.hpp"

namespace {

using itera::ojson;
using itera::result_set;

const std::string data_dir = std::string(ITERA_SOURCE_DIR) + "/docs/perf/data";
const std::string scenarios = data_dir + "/2026-11-29-llm-scenarios-4";
constexpr double gib = 1024.0 * 1024 * 1024;

std::string render(const std::vector<result_set>& sets) {
  std::ostringstream out;
  itera::write_html(out, sets);
  return out.str();
}

// The JSON of <script type="application/json" id="itera-report-data">, parsed.
ojson embedded_data(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"itera-report-data\">";
  const auto start = html.find(open);
  EXPECT_NE(start, std::string::npos);
  const auto end = html.find("</script>", start);
  EXPECT_NE(end, std::string::npos);
  return ojson::parse(html.substr(start + open.size(), end - start - open.size()));
}

const ojson& chart(const ojson& model, const std::string& id) {
  for (const auto& c : model["charts"])
    if (c["id"] == id) return c;
  ADD_FAILURE() << "no chart " << id;
  static const ojson none = ojson::object();
  return none;
}

const ojson* series(const ojson& c, const std::string& label_part) {
  for (const auto& s : c["series"])
    if (s["label"].get<std::string>().find(label_part) != std::string::npos) return &s;
  ADD_FAILURE() << "chart " << c.value("id", std::string("?")) << " has no series labelled like " << label_part;
  return nullptr;
}

const itera::case_record& find_case(const result_set& set, const std::string& workload,
                                    const std::vector<std::pair<std::string, std::string>>& axes) {
  for (const auto& c : set.cases) {
    if (c.workload != workload || c.role != "case") continue;
    bool all = true;
    for (const auto& [n, v] : axes) {
      bool found = false;
      for (const auto& [cn, cv] : c.axes) found = found || (cn == n && cv == v);
      all = all && found;
    }
    if (all) return c;
  }
  throw std::runtime_error("fixture case missing");
}

double metric(const itera::case_record& c, const std::string& name) {
  const auto* m = c.find_metric(name);
  if (!m) throw std::runtime_error("fixture metric missing: " + name);
  return m->value;
}

std::vector<result_set> all_runs() {
  return {itera::read_results(scenarios + "/offline.jsonl"), itera::read_results(scenarios + "/fp8.jsonl"),
          itera::read_results(scenarios + "/prefill.jsonl"), itera::read_results(scenarios + "/server.jsonl"),
          itera::read_results(data_dir + "/2026-11-29-h200-run.jsonl")};
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A small run made in memory, for what the fixtures do not hold.
result_set synthetic_run(const std::string& source, const std::string& loop_value) {
  result_set set;
  set.source = source;
  set.context.backend = "cpu";
  set.context.itera_version = "0.1.0";
  for (const char* batch : {"1", "8"}) {
    itera::case_record c;
    c.workload = "llm";
    c.backend = "cpu";
    c.axes = {{"batch", batch}, {"loop", loop_value}};
    c.metrics.push_back({"throughput/decode_tokens_per_s", std::string(batch) == "1" ? 10.0 : 70.0, "tokens/s"});
    set.cases.push_back(c);
  }
  return set;
}

TEST(ReportHtml, EmbedsTheDataOfEveryChart) {
  const auto sets = all_runs();
  const std::string html = render(sets);
  const ojson data = embedded_data(html);
  EXPECT_EQ(data, itera::html_report_model(sets));
  EXPECT_EQ(data["schema"], "itera.report.html/1");
  ASSERT_EQ(data["runs"].size(), 5u);
  EXPECT_EQ(data["runs"][0]["card"], "NVIDIA H200 SXM 141GB");

  // Throughput against batch: one line per run and loop, the points as measured.
  const ojson& tp = chart(data, "throughput-llm");
  EXPECT_EQ(tp["kind"], "line");
  EXPECT_EQ(tp["x"]["scale"], "log");  // batch 1..64
  const ojson* fp8 = series(tp, "fp8.jsonl");
  ASSERT_NE(fp8, nullptr);
  ASSERT_EQ((*fp8)["points"].size(), 3u);
  for (const auto& [i, batch] : std::vector<std::pair<int, std::string>>{{0, "1"}, {1, "8"}, {2, "64"}}) {
    EXPECT_EQ((*fp8)["points"][i][0], std::stod(batch));
    EXPECT_DOUBLE_EQ((*fp8)["points"][i][1].get<double>(),
                     metric(find_case(sets[1], "llm", {{"batch", batch}}), "throughput/decode_tokens_per_s"));
  }
  EXPECT_NE(series(tp, "loop=end_to_end"), nullptr);
  for (const auto& s : tp["series"]) EXPECT_EQ(s["label"].get<std::string>().find("server"), std::string::npos);

  // Latency percentiles against the offered load, with the targets the run was given.
  const ojson& ttft = chart(data, "latency-llm-ttft");
  const ojson* p99 = series(ttft, "ttft p99");
  ASSERT_NE(p99, nullptr);
  ASSERT_EQ((*p99)["points"].size(), 2u);
  EXPECT_EQ((*p99)["points"][1][0], 16.0);
  EXPECT_DOUBLE_EQ((*p99)["points"][1][1].get<double>(),
                   metric(find_case(sets[3], "llm", {{"rate", "16"}}), "latency/ttft/p99") * 1e3);
  ASSERT_EQ(ttft["references"].size(), 1u);
  EXPECT_EQ(ttft["references"][0]["value"], 1000.0);
  const ojson& tpot = chart(data, "latency-llm-tpot");
  EXPECT_EQ(tpot["series"].size(), 3u);
  ASSERT_EQ(tpot["references"].size(), 1u);
  EXPECT_EQ(tpot["references"][0]["value"], 50.0);

  // The stage ledger: both loops of a batch side by side, device time per repetition.
  const ojson& st = chart(data, "stages-llm");
  EXPECT_TRUE(st["stacked"].get<bool>());
  const auto& cats = st["categories"];
  ASSERT_GE(cats.size(), 6u);
  EXPECT_NE(cats[0].get<std::string>().find("loop=compute"), std::string::npos);
  EXPECT_NE(cats[1].get<std::string>().find("loop=end_to_end"), std::string::npos);
  EXPECT_NE(cats[0].get<std::string>().find("batch=1"), std::string::npos);
  EXPECT_NE(cats[1].get<std::string>().find("batch=1"), std::string::npos);
  std::vector<std::string> stages;
  for (const auto& s : st["series"]) stages.push_back(s["label"]);
  EXPECT_EQ(stages, (std::vector<std::string>{"prefill", "decode", "read", "parse", "h2d", "d2h", "write"}));
  const auto& c0 = find_case(sets[0], "llm", {{"batch", "1"}, {"loop", "compute"}});
  const ojson* decode = series(st, "decode");
  ASSERT_NE(decode, nullptr);
  EXPECT_DOUBLE_EQ((*decode)["values"][0].get<double>(), c0.stages[1].device_ns / c0.stages[1].calls / 1e6);
  EXPECT_TRUE(series(st, "read")->at("values")[0].is_null());  // the compute loop has no read stage

  // Memory per case: the plan stacked, the measured peak as a marker.
  const ojson& mem = chart(data, "memory-llm");
  EXPECT_EQ(mem["categories"].size(), 12u);  // 6 offline + 3 fp8 + 1 prefill + 2 server
  EXPECT_DOUBLE_EQ(series(mem, "weights")->at("values")[0].get<double>(), metric(c0, "memory/plan/weights") / gib);
  EXPECT_DOUBLE_EQ(series(mem, "KV cache")->at("values")[0].get<double>(), metric(c0, "memory/plan/kv_cache") / gib);
  const ojson* peak = series(mem, "measured peak");
  ASSERT_NE(peak, nullptr);
  EXPECT_EQ((*peak)["kind"], "marker");
  EXPECT_DOUBLE_EQ((*peak)["values"][0].get<double>(), metric(c0, "memory/measured_peak") / gib);

  // Achieved rates against the ceilings, in percent, with the 100% line.
  const ojson& gemm = chart(data, "utilisation-gemm");
  EXPECT_EQ(gemm["references"][0]["value"], 100.0);
  const auto& g4096 = find_case(sets[4], "gemm", {{"M", "4096"}, {"format", "bf16"}});
  bool found = false;
  for (const auto& v : gemm["series"][0]["values"])
    found = found || (v.is_number() && v.get<double>() == metric(g4096, "utilisation/gemm.bf16") * 100);
  EXPECT_TRUE(found);
  EXPECT_FALSE(chart(data, "utilisation-llm")["series"].empty());
  EXPECT_FALSE(chart(data, "utilisation-transfer")["series"].empty());

  // The comparison: one series per run, labelled by file and card.
  const ojson& cmp = chart(data, "comparison-llm");
  EXPECT_GE(cmp["series"].size(), 2u);
  EXPECT_NE(series(cmp, "offline.jsonl (NVIDIA H200 SXM 141GB)"), nullptr);
  EXPECT_NE(series(cmp, "weights=fp8_e4m3"), nullptr);

  // Every chart with data is drawn on a canvas and has its table of numbers.
  std::size_t with_data = 0;
  for (const auto& c : data["charts"]) {
    if (c["series"].empty()) continue;
    ++with_data;
    EXPECT_NE(html.find("<canvas id=\"chart-" + c["id"].get<std::string>() + "\""), std::string::npos) << c["id"];
  }
  EXPECT_EQ(count(html, "<summary>Numbers behind this chart</summary>"), with_data);
}

TEST(ReportHtml, ChartsWithoutDataSaySo) {
  const auto sets = std::vector<result_set>{itera::read_results(scenarios + "/server.jsonl")};
  const std::string html = render(sets);
  const ojson data = embedded_data(html);
  for (const char* id : {"throughput", "stages", "precision", "utilisation", "comparison", "cost"}) {
    const ojson& c = chart(data, id);
    EXPECT_TRUE(c["series"].empty()) << id;
    EXPECT_EQ(c["note"].get<std::string>().rfind("No data for this chart: ", 0), 0u) << id;
    EXPECT_NE(html.find("<p class=\"no-data\">" + itera::report::html_escape(c["note"].get<std::string>())), std::string::npos) << id;
  }
  EXPECT_FALSE(chart(data, "latency-llm-ttft")["series"].empty());
  EXPECT_FALSE(chart(data, "memory-llm")["series"].empty());

  // No results at all: every section still has its chart, each with a note.
  const ojson empty = embedded_data(render({}));
  EXPECT_EQ(empty["charts"].size(), 8u);
  for (const auto& c : empty["charts"]) EXPECT_TRUE(c["series"].empty());
}

// One run of bf16 and fp8 weights on the H200 (docs/perf/2026-11-30-decode-step-4.md, run 8): the
// fp8 case's speed-up over the bf16 one, divided from the file's own rates, with its quality figures.
TEST(ReportHtml, PrecisionDividesRatesOfOneRun) {
  const result_set set = itera::read_results(data_dir + "/2026-11-30-decode-step-4/run8_bench.jsonl");
  const auto& bf16 = find_case(set, "llm", {{"weights", "bf16"}});
  const auto& fp8 = find_case(set, "llm", {{"weights", "fp8_e4m3"}});
  const double want = fp8.find_metric("throughput/decode_tokens_per_s")->value /
                      bf16.find_metric("throughput/decode_tokens_per_s")->value;
  ASSERT_GT(want, 1.5);
  const std::string html = render({set});
  const ojson model = embedded_data(html);
  const ojson& c = chart(model, "precision-llm-1");
  ASSERT_EQ(c["categories"].size(), 2u);
  EXPECT_EQ(c["categories"][0], "weights=bf16 kv=bf16 compute=bf16 (reference)");
  EXPECT_EQ(c["categories"][1], "weights=fp8_e4m3 kv=bf16 compute=bf16");
  const auto* s = series(c, "speed-up");
  ASSERT_NE(s, nullptr);
  EXPECT_DOUBLE_EQ((*s)["values"][0].get<double>(), 1.0);
  EXPECT_NEAR((*s)["values"][1].get<double>(), want, 1e-12);
  EXPECT_NE(html.find(fmt::format("{:.3f}x", want)), std::string::npos);
  EXPECT_NE(html.find("bf16 weights on the cuda engine"), std::string::npos) << "the quality figures' reference";
}

std::string render(const std::vector<result_set>& sets, const itera::html_cost& cost) {
  std::ostringstream out;
  itera::write_html(out, sets, cost);
  return out.str();
}

TEST(ReportHtml, CostChartIsAnalyseCostsReport) {
  const std::vector<result_set> sets = {itera::read_results(scenarios + "/offline.jsonl")};
  const std::string prices_path = std::string(ITERA_SOURCE_DIR) + "/data/prices.example.json";
  const itera::html_cost cost = itera::html_cost_of(sets, prices_path);
  ASSERT_TRUE(cost.report.has_value()) << cost.unavailable;
  // The same analysis as `itera cost`, computed here independently of the page.
  const auto& cat = itera::catalogue::builtin();
  const itera::cost_report want = itera::analyse_cost(sets, cat, itera::read_prices(prices_path, cat), {});
  ASSERT_FALSE(want.groups.empty());

  const std::string html = render(sets, cost);
  const ojson data = embedded_data(html);
  EXPECT_EQ(data, itera::html_report_model(sets, cost));
  const ojson& c = data["cost"];
  EXPECT_EQ(c["currency"], "USD");
  EXPECT_TRUE(c["example_prices"].get<bool>());
  ASSERT_EQ(c["groups"].size(), want.groups.size());
  for (std::size_t gi = 0; gi < want.groups.size(); ++gi) {
    const auto& g = want.groups[gi];
    const ojson& gj = c["groups"][gi];
    EXPECT_EQ(gj["group"], g.key);
    EXPECT_EQ(gj["scenario"], g.scenario);
    ASSERT_EQ(gj["rows"].size(), g.rows.size());
    for (std::size_t i = 0; i < g.rows.size(); ++i) EXPECT_EQ(gj["rows"][i], itera::to_json(g.rows[i])) << i;

    // The chart: one bar per card with a cost, measured and projected in two series.
    const ojson& ch = chart(data, gj["chart"].get<std::string>());
    EXPECT_EQ(ch["section"], "cost");
    EXPECT_TRUE(ch["stacked"].get<bool>());
    const ojson* measured = series(ch, "measured");
    const ojson* projected = series(ch, "projected (roofline, see docs/analysis.md)");
    ASSERT_NE(measured, nullptr);
    ASSERT_NE(projected, nullptr);
    EXPECT_EQ((*projected)["pattern"], "hatched");
    EXPECT_FALSE((*measured).contains("pattern"));
    std::size_t bar = 0;
    for (const auto& row : g.rows) {
      if (!row.cost) continue;
      ASSERT_LT(bar, ch["categories"].size());
      EXPECT_EQ(ch["categories"][bar], row.card);
      const ojson& on = row.measured ? (*measured)["values"][bar] : (*projected)["values"][bar];
      const ojson& off = row.measured ? (*projected)["values"][bar] : (*measured)["values"][bar];
      EXPECT_DOUBLE_EQ(on.get<double>(), *row.cost) << row.card;
      EXPECT_TRUE(off.is_null()) << row.card;
      ++bar;
    }
    EXPECT_EQ(bar, ch["categories"].size());
    EXPECT_NE(html.find("<canvas id=\"chart-" + gj["chart"].get<std::string>() + "\""), std::string::npos);
  }
  EXPECT_NE(html.find("<h2>Cost per card</h2>"), std::string::npos);
  EXPECT_NE(html.find("<p class=\"warning\">Example prices, not quotes"), std::string::npos);
  EXPECT_NE(html.find("<td>h200-sxm-141gb</td><td>measured</td>"), std::string::npos);
}

TEST(ReportHtml, CostWithoutPricesSaysHowToGetIt) {
  const std::vector<result_set> sets = {itera::read_results(scenarios + "/offline.jsonl")};
  const std::string html = render(sets);
  const ojson data = embedded_data(html);
  EXPECT_TRUE(data["cost"].is_null());
  const ojson& c = chart(data, "cost");
  EXPECT_TRUE(c["series"].empty());
  EXPECT_NE(c["note"].get<std::string>().find("--prices PRICES.json"), std::string::npos);
  EXPECT_EQ(html.find("<canvas id=\"chart-cost"), std::string::npos);

  // Results the cost analysis refuses (no llm throughput): the section says why, the page is written.
  const std::vector<result_set> gemm = {itera::read_results(data_dir + "/2026-11-29-h200-run.jsonl")};
  const auto cost = itera::html_cost_of(gemm, std::string(ITERA_SOURCE_DIR) + "/data/prices.example.json");
  EXPECT_FALSE(cost.report.has_value());
  EXPECT_FALSE(cost.unavailable.empty());
  const ojson refused = embedded_data(render(gemm, cost));
  EXPECT_NE(chart(refused, "cost")["note"].get<std::string>().find(cost.unavailable), std::string::npos);
}

TEST(ReportHtml, PricesOnlyWithHtml) {
  for (const char* format : {"md", "csv", "json"}) {
    try {
      itera::check_report_prices_option(format, "prices.json");
      ADD_FAILURE() << "--prices accepted with --format " << format;
    } catch (const itera::usage_error& e) {
      EXPECT_NE(std::string(e.what()).find("--prices is only valid with --format html"), std::string::npos);
    }
  }
  EXPECT_NO_THROW(itera::check_report_prices_option("html", "prices.json"));
  EXPECT_NO_THROW(itera::check_report_prices_option("md", ""));
}

TEST(ReportHtml, LabelsCannotInjectScript) {
  const std::string evil = "</script><script>alert(1)</script><!-- & \xE2\x80\xA8";
  const std::vector<result_set> sets = {synthetic_run("a<img src=x onerror=alert(2)>.jsonl", evil),
                                        synthetic_run("b.jsonl", "compute")};
  const std::string html = render(sets);
  // Only the page's own three script elements; the labels' text never closes one.
  EXPECT_EQ(count(html, "<script"), 3u);
  EXPECT_EQ(count(html, "</script>"), 3u);
  EXPECT_EQ(html.find("alert(1)</script>"), std::string::npos);
  EXPECT_EQ(html.find("<!-- &"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_NE(html.find("&lt;/script&gt;&lt;script&gt;alert(1)"), std::string::npos);  // in the tables, as text
  EXPECT_NE(html.find("a&lt;img src=x onerror=alert(2)&gt;.jsonl"), std::string::npos);
  // The embedded JSON gives the labels back exactly.
  const ojson data = embedded_data(html);
  const ojson& tp = chart(data, "throughput-llm");
  const ojson* s = series(tp, "loop=" + evil);
  ASSERT_NE(s, nullptr);
  EXPECT_NE((*s)["label"].get<std::string>().find("a<img src=x onerror=alert(2)>.jsonl"), std::string::npos);
}

TEST(ReportHtml, JsonForScriptEscapesWhatEndsAScript) {
  const ojson j = {{"label", "</script>&<!--\xE2\x80\xA8\xE2\x80\xA9"}, {"bad", std::string("\xFF")}};
  const std::string text = itera::report::json_for_script(j);
  EXPECT_EQ(text.find_first_of("<>&"), std::string::npos);
  EXPECT_EQ(text.find("\xE2\x80\xA8"), std::string::npos);
  const ojson back = ojson::parse(text);
  EXPECT_EQ(back["label"], j["label"]);
  EXPECT_EQ(back["bad"], "\xEF\xBF\xBD");  // invalid UTF-8 becomes U+FFFD
  EXPECT_EQ(itera::report::html_escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}

TEST(ReportHtml, SelfContained) {
  const std::string html = render(all_runs());
  // Nothing is loaded from elsewhere: no script or link with a source, no remote url() or @import.
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(<script[^>]*\ssrc\s*=)", std::regex::icase)));
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(<link[\s>])", std::regex::icase)));
  EXPECT_FALSE(std::regex_search(html, std::regex(R"((src|href)\s*=\s*["']?\s*(https?:)?//)", std::regex::icase)));
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(url\(\s*["']?\s*(https?:)?//|@import)", std::regex::icase)));
  // The charting library is in the page, and the page forbids any fetch.
  EXPECT_NE(html.find("Chart.js v4."), std::string::npos);
  EXPECT_NE(html.find("Released under the MIT License"), std::string::npos);
  EXPECT_NE(html.find("content=\"default-src 'none'"), std::string::npos);
  EXPECT_EQ(html.rfind("</html>\n"), html.size() - 8);
}

}  // namespace
