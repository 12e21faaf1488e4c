// Cost: the price file's rules (bad rows by number), the operating-point rule shared with the
// markdown report, and cost per million tokens on the measured H200 llm results.
#include <gtest/gtest.h>

#include <sstream>
#include <tuple>

#include "itera/analysis/cost.hpp"
#include "itera/core/errors.hpp"

namespace {

using namespace itera;

const std::string data_dir = std::string(ITERA_SOURCE_DIR) + "/docs/perf/data/2026-11-29-llm-scenarios-4/";

ojson row(const std::string& card, ojson price, const std::string& date = "2026-11-29") {
  return {{"card", card}, {"price_per_gpu_hour", price}, {"currency", "USD"}, {"date", date}, {"source", "test"}};
}

std::string parse_error(const ojson& doc) {
  try {
    parse_prices(doc, catalogue::builtin(), "p.json");
  } catch (const input_error& e) {
    return e.what();
  }
  return "";
}

TEST(Prices, ExampleFileIsDatedAndMarked) {
  const auto t = read_prices(std::string(ITERA_SOURCE_DIR) + "/data/prices.example.json", catalogue::builtin());
  ASSERT_GE(t.entries.size(), 4u);
  EXPECT_EQ(t.currency, "USD");
  EXPECT_NE(t.note.find("not quotes"), std::string::npos);
  for (const auto& e : t.entries) {
    EXPECT_TRUE(e.example) << e.card;
    EXPECT_EQ(e.date, "2026-11-29");
    EXPECT_NE(catalogue::builtin().find(e.card), nullptr);
    EXPECT_GT(e.per_gpu_hour, 0);
  }
}

TEST(Prices, DecimalStringAndNumber) {
  const ojson doc = ojson::array({row("l4-24gb", "0.79"), row("h200-sxm-141gb", 3.5)});
  const auto t = parse_prices(doc, catalogue::builtin(), "p.json");
  ASSERT_EQ(t.entries.size(), 2u);
  EXPECT_DOUBLE_EQ(t.entries[0].per_gpu_hour, 0.79);
  EXPECT_EQ(t.entries[0].price_text, "0.79");
  EXPECT_EQ(t.entries[0].row, 1u);
  EXPECT_DOUBLE_EQ(t.find("h200-sxm-141gb")->per_gpu_hour, 3.5);
  EXPECT_FALSE(t.any_example());
  EXPECT_EQ(t.find("a10-24gb"), nullptr);
}

TEST(Prices, BadRowsAreNamedByNumber) {
  ojson missing = row("l4-24gb", "1");
  missing.erase("currency");
  const std::string e = parse_error(ojson::array({row("l40s-48gb", "1.5"), missing, row("a10-24gb", "-0.5"),
                                                  row("nope-1gb", "1"), row("h100-pcie-80gb", "2", "2026-02-30"),
                                                  row("b200-sxm-180gb", -3)}));
  EXPECT_EQ(e.find("row 1:"), std::string::npos) << e;
  EXPECT_NE(e.find("row 2: missing field 'currency'"), std::string::npos) << e;
  EXPECT_NE(e.find("row 3: negative price -0.5"), std::string::npos) << e;
  EXPECT_NE(e.find("row 4: card 'nope-1gb' is not in the catalogue (known: l4-24gb, l40s-48gb"), std::string::npos) << e;
  EXPECT_NE(e.find("row 5: date '2026-02-30' is not a calendar date"), std::string::npos) << e;
  EXPECT_NE(e.find("row 6: negative price -3"), std::string::npos) << e;
}

TEST(Prices, OtherRefusals) {
  EXPECT_NE(parse_error(ojson::array({row("l4-24gb", "1"), row("l4-24gb", "2")})).find("row 2: card l4-24gb is already priced in row 1"),
            std::string::npos);
  ojson eur = row("l40s-48gb", "1");
  eur["currency"] = "EUR";
  EXPECT_NE(parse_error(ojson::array({row("l4-24gb", "1"), eur})).find("row 2: currency EUR differs from USD"), std::string::npos);
  EXPECT_NE(parse_error(ojson::array({row("l4-24gb", "1,5")})).find("is not a decimal number"), std::string::npos);
  EXPECT_NE(parse_error(ojson::array({row("l4-24gb", "0")})).find("price is 0"), std::string::npos);
  EXPECT_NE(parse_error(ojson::array({row("l4-24gb", "1", "29/11/2026")})).find("not a calendar date"), std::string::npos);
  EXPECT_EQ(parse_error(ojson::array({row("l4-24gb", "1", "2028-02-29")})), "");  // leap day
  ojson typo = row("l4-24gb", "1");
  typo["prce"] = 1;
  EXPECT_NE(parse_error(ojson::array({typo})).find("row 1: unknown field 'prce'"), std::string::npos);
  EXPECT_NE(parse_error(ojson::array()).find("no rows"), std::string::npos);
  EXPECT_NE(parse_error(ojson{{"rows", ojson::array()}}).find("unknown field 'rows'"), std::string::npos);
  EXPECT_NE(parse_error(ojson::array({42})).find("row 1: not an object"), std::string::npos);
}

case_record load_case(const std::string& rate, const std::string& batch, bool meets, double goodput) {
  case_record r;
  r.workload = "llm";
  r.axes = {{"scenario", "server"}, {"batch", batch}, {"rate", rate}, {"tpot_ms", "50"}};
  r.metrics = {{"load/meets_targets", meets ? 1.0 : 0.0, ""}, {"load/goodput", goodput, "1/s"}};
  return r;
}

TEST(OperatingPoints, HighestRateThenSmallestBatch) {
  const std::vector<case_record> cs = {load_case("4", "64", true, 3.9), load_case("16", "64", true, 15.1),
                                       load_case("16", "32", true, 14.8), load_case("32", "64", false, 20)};
  std::vector<const case_record*> ptrs;
  for (const auto& c : cs) ptrs.push_back(&c);
  const auto ops = find_operating_points(ptrs);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].key, "scenario=server tpot_ms=50");
  EXPECT_EQ(ops[0].runs, 4u);
  ASSERT_NE(ops[0].best, nullptr);
  EXPECT_EQ(ops[0].best, &cs[2]);
  EXPECT_EQ(ops[0].rate, 16);
  EXPECT_EQ(ops[0].batch, 32);
  EXPECT_DOUBLE_EQ(ops[0].goodput, 14.8);
  EXPECT_EQ(ops[0].highest_rate_tried, 32);

  const case_record none = load_case("4", "8", false, 1);
  const auto no = find_operating_points({&none});
  ASSERT_EQ(no.size(), 1u);
  EXPECT_EQ(no[0].best, nullptr);
}

price_table h200_and_l40s(double h200, double l40s) {
  return parse_prices(ojson::array({row("h200-sxm-141gb", h200), row("l40s-48gb", l40s)}), catalogue::builtin(), "p.json");
}

const cost_group& group_with(const cost_report& r, const std::string& part) {
  for (const auto& g : r.groups)
    if (g.key.find(part) != std::string::npos) return g;
  throw std::runtime_error("no group " + part);
}

TEST(Cost, OfflineMeasuredAndProjected) {
  const auto set = read_results(data_dir + "offline.jsonl");
  const auto rep = analyse_cost({set}, catalogue::builtin(), h200_and_l40s(3.79, 1.5), {});
  ASSERT_EQ(rep.groups.size(), 2u);  // loop=compute, loop=end_to_end
  const auto& g = group_with(rep, "loop=compute");
  EXPECT_EQ(g.scenario, "offline");
  ASSERT_EQ(g.rows.size(), 2u);
  const cost_row& m = g.rows[0];
  EXPECT_EQ(m.card, "h200-sxm-141gb");
  EXPECT_TRUE(m.measured);
  EXPECT_EQ(m.configuration, "batch=64");
  // The fixture's own figure at batch 64, loop=compute.
  double tps = 0;
  for (const auto& c : set.cases)
    if (c.axes_key().find("loop=compute batch=64 ") != std::string::npos)
      tps = c.find_metric("throughput/output_tokens_per_s")->value;
  ASSERT_GT(tps, 0);
  EXPECT_DOUBLE_EQ(*m.rate, tps);
  EXPECT_NEAR(*m.cost, 3.79 / (tps * 3600) * 1e6, 1e-12);

  const cost_row& p = g.rows[1];
  EXPECT_EQ(p.card, "l40s-48gb");
  EXPECT_FALSE(p.measured);
  ASSERT_TRUE(p.rate && p.cost && p.validation_error);
  EXPECT_LT(*p.rate, tps);  // 864 GB/s against 4.8 TB/s
  EXPECT_NEAR(*p.cost, 1.5 / (*p.rate * 3600) * 1e6, 1e-12);
  EXPECT_NE(p.note.find("projected"), std::string::npos);
  EXPECT_LT(*p.validation_error, 0);

  std::ostringstream md;
  write_cost_markdown(md, rep);
  EXPECT_NE(md.str().find("| h200-sxm-141gb | measured  | batch=64"), std::string::npos) << md.str();
  EXPECT_NE(md.str().find("| l40s-48gb      | projected |"), std::string::npos) << md.str();
}

TEST(Cost, ProjectionLeavesOutBatchesThatDoNotFit) {
  const auto set = read_results(data_dir + "offline.jsonl");
  cost_options o;
  o.cards = {"l4-24gb"};
  const auto rep = analyse_cost({set}, catalogue::builtin(), h200_and_l40s(3.79, 1.5), o);
  const auto& g = group_with(rep, "loop=compute");
  ASSERT_EQ(g.rows.size(), 1u);
  EXPECT_EQ(g.rows[0].card, "l4-24gb");
  // Batch 64 peaks at 24.05 GiB, above the L4's 22.08 usable; batch 8 (16.15 GiB) fits.
  EXPECT_EQ(g.rows[0].configuration, "batch=8");
  EXPECT_NE(g.rows[0].note.find("batch 64 does not fit"), std::string::npos) << g.rows[0].note;
  EXPECT_FALSE(g.rows[0].price.has_value());
  EXPECT_FALSE(g.rows[0].cost.has_value());
}

TEST(Cost, ServerUsesTheOperatingPoint) {
  const auto set = read_results(data_dir + "server.jsonl");
  const auto rep = analyse_cost({set}, catalogue::builtin(), h200_and_l40s(3.79, 1.5), {});
  ASSERT_EQ(rep.groups.size(), 1u);
  const auto& g = rep.groups[0];
  EXPECT_EQ(g.scenario, "server");
  ASSERT_EQ(g.rows.size(), 1u);  // not projected: the server cases have no device stages
  EXPECT_EQ(g.rows[0].configuration, "rate=16/s batch=64");
  EXPECT_NEAR(*g.rows[0].rate, 1724.05, 0.01);
  EXPECT_NE(g.rows[0].note.find("the highest rate tried"), std::string::npos);
  ASSERT_EQ(g.notes.size(), 1u);
  EXPECT_NE(g.notes[0].find("not projected"), std::string::npos);
}

TEST(Cost, OfflineTargetsExcludeSlowBatches) {
  auto set = read_results(data_dir + "offline.jsonl");
  // Hold every case to a 5 ms time per output token: batch 64 (6.1 ms) misses it, batch 8 (5.4 ms) too.
  for (auto& c : set.cases)
    for (auto& [k, v] : c.axes)
      if (k == "tpot_ms") v = "5";
  const auto rep = analyse_cost({set}, catalogue::builtin(), h200_and_l40s(3.79, 1.5), {});
  const auto& g = group_with(rep, "loop=compute");
  EXPECT_EQ(g.rows[0].configuration, "batch=1");
  EXPECT_NE(g.rows[0].note.find("batch 64: latency/tpot"), std::string::npos) << g.rows[0].note;
}

TEST(Cost, Refusals) {
  const auto h200 = h200_and_l40s(3.79, 1.5);
  auto cpu = read_results(data_dir + "offline.jsonl");
  cpu.context.device = ojson::object();
  EXPECT_THROW(analyse_cost({cpu}, catalogue::builtin(), h200, {}), input_error);
  const auto gemm = read_results(std::string(ITERA_SOURCE_DIR) + "/docs/perf/data/2026-11-29-h200-run.jsonl");
  EXPECT_THROW(analyse_cost({gemm}, catalogue::builtin(), h200, {}), input_error);
  cost_options o;
  o.cards = {"nope"};
  EXPECT_THROW(analyse_cost({read_results(data_dir + "offline.jsonl")}, catalogue::builtin(), h200, o), usage_error);
}

}  // namespace

// The same measured cases relabelled as another workload's throughput: the cost follows the
// basis (rates.hpp) while the projection and the rules stay the same.
result_set relabelled(const std::string& workload, const std::string& metric_name) {
  auto set = read_results(data_dir + "offline.jsonl");
  for (auto& c : set.cases) {
    c.workload = workload;
    for (auto& m : c.metrics)
      if (m.name == "throughput/output_tokens_per_s") m.name = metric_name;
  }
  return set;
}

TEST(Cost, PerThousandImagesAndPerTrainingStep) {
  for (const auto& [metric_name, per, per_label, header] :
       {std::tuple{"throughput/images_per_s", 1e3, "thousand images", "cost / 1k images"},
        std::tuple{"throughput/steps_per_s", 1.0, "training step", "cost / step"}}) {
    const auto set = relabelled("pipeline", metric_name);
    const auto rep = analyse_cost({set}, catalogue::builtin(), h200_and_l40s(3.79, 1.5), {});
    const auto& g = group_with(rep, "loop=compute");
    EXPECT_EQ(g.workload, "pipeline");
    EXPECT_EQ(g.basis.metric, metric_name);
    EXPECT_EQ(g.basis.per_label, per_label);
    ASSERT_EQ(g.rows.size(), 2u);
    const cost_row& m = g.rows[0];
    ASSERT_TRUE(m.rate && m.cost);
    EXPECT_NEAR(*m.cost, 3.79 / (*m.rate * 3600) * per, 1e-12);
    const cost_row& p = g.rows[1];
    ASSERT_TRUE(p.rate && p.cost) << p.note;  // projected like the tokens were
    EXPECT_LT(*p.rate, *m.rate);
    std::ostringstream md;
    write_cost_markdown(md, rep);
    EXPECT_NE(md.str().find(header), std::string::npos) << md.str();
    EXPECT_NE(md.str().find(std::string("# Cost per ") + per_label), std::string::npos) << md.str();
  }
}

TEST(Cost, NoThroughputNamesTheMetricsItLooksFor) {
  const auto set = relabelled("pipeline", "throughput/widgets_per_s");
  try {
    analyse_cost({set}, catalogue::builtin(), h200_and_l40s(3.79, 1.5), {});
    FAIL() << "expected input_error";
  } catch (const input_error& e) {
    const std::string what = e.what();
    for (const char* m : {"throughput/output_tokens_per_s", "throughput/images_per_s", "throughput/steps_per_s"})
      EXPECT_NE(what.find(m), std::string::npos) << what;
  }
}
