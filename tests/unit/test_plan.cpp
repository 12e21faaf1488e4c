// Plan: the cheapest card that holds the workload, quantity for a target, the duration rule, the
// rental costs and the desk's order, on the measured H200 llm results.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "itera/analysis/plan.hpp"
#include "itera/core/errors.hpp"

namespace {

using namespace itera;

const std::string data_dir = std::string(ITERA_SOURCE_DIR) + "/docs/perf/data/2026-11-29-llm-scenarios-4/";

price_table example_prices() {
  return read_prices(std::string(ITERA_SOURCE_DIR) + "/data/prices.example.json", catalogue::builtin());
}

price_table only(const std::string& card, double price) {
  return parse_prices(ojson::array({{{"card", card}, {"price_per_gpu_hour", price}, {"currency", "USD"}, {"date", "2026-11-29"},
                                     {"source", "test"}}}),
                      catalogue::builtin(), "p.json");
}

TEST(Plan, ChoosesTheCheapestEligibleCard) {
  const auto sets = std::vector<result_set>{read_results(data_dir + "offline.jsonl")};
  const auto prices = example_prices();
  const auto p = make_plan(sets, catalogue::builtin(), prices, {});
  EXPECT_NE(p.group.find("loop=end_to_end"), std::string::npos);  // the default group
  ASSERT_EQ(p.other_groups.size(), 1u);
  const auto& best = p.candidates[static_cast<std::size_t>(p.chosen)];
  ASSERT_TRUE(best.eligible);
  std::size_t eligible = 0;
  for (const auto& c : p.candidates) {
    if (!c.eligible) {
      EXPECT_FALSE(c.why_not.empty()) << c.row.card;
      continue;
    }
    ++eligible;
    EXPECT_LE(*best.row.cost, *c.row.cost) << c.row.card;
    EXPECT_NE(prices.find(c.row.card), nullptr);
  }
  EXPECT_EQ(eligible, prices.entries.size());  // every priced card holds some batch of the 8B model
  ASSERT_GE(p.runner_up, 0);
  EXPECT_LE(*best.row.cost, *p.candidates[static_cast<std::size_t>(p.runner_up)].row.cost);
  EXPECT_EQ(best.quantity, 1);
  for (std::size_t i = 0; i < rental_days.size(); ++i)
    EXPECT_NEAR(best.rental_cost[i], best.row.price->per_gpu_hour * 24 * rental_days[i], 1e-9);
  // Cards without a price are listed and left out.
  const auto a10 = std::find_if(p.candidates.begin(), p.candidates.end(), [](const plan_candidate& c) { return c.row.card == "a10-24gb"; });
  ASSERT_NE(a10, p.candidates.end());
  EXPECT_FALSE(a10->eligible);
  EXPECT_NE(a10->why_not.find("no price"), std::string::npos);
  // Duration by rule: a projected card is rented for 3 days first; a measured one for 7.
  EXPECT_EQ(p.days, best.row.measured ? 7 : 3);
  ASSERT_EQ(p.campaigns.size(), 3u);
  EXPECT_NE(p.campaigns[0].plan.find("profile compute against transfers and memory per stage"), std::string::npos);
  EXPECT_NE(p.campaigns[1].plan.find("repeat the measurements"), std::string::npos);
  EXPECT_NE(p.campaigns[2].plan.find("inference campaign"), std::string::npos);
  EXPECT_NE(p.campaigns[2].plan.find("regular evaluation"), std::string::npos);
}

TEST(Plan, OrderCarriesTheDeskFields) {
  const auto sets = std::vector<result_set>{read_results(data_dir + "offline.jsonl")};
  plan_options o;
  o.days = 30;
  const auto p = make_plan(sets, catalogue::builtin(), example_prices(), o);
  std::vector<std::string> keys;
  for (const auto& [k, v] : p.order.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"gpu", "days", "quantity", "environment", "email", "network"}));
  EXPECT_EQ(p.order["gpu"], p.candidates[0].row.card);
  EXPECT_EQ(p.order["days"], 30);
  EXPECT_TRUE(p.order["days"].is_number_integer() && p.order["quantity"].is_number_integer());
  EXPECT_EQ(p.order["environment"], "itera 0.1.0, CUDA 13.0, driver 580.159.04");
  EXPECT_EQ(p.order["email"].get<std::string>().find('@'), std::string::npos);  // the desk refuses it until filled in
  EXPECT_EQ(p.days_reason, "asked for with --days");
  std::ostringstream md;
  write_plan_markdown(md, p);
  EXPECT_NE(md.str().find("\"gpu\": \"" + p.candidates[0].row.card + "\""), std::string::npos) << md.str();
  EXPECT_NE(md.str().find("Replace \"REPLACE-WITH-YOUR-EMAIL\""), std::string::npos);
}

TEST(Plan, MeasuredCardWithTargetGoesForThirtyDays) {
  const auto sets = std::vector<result_set>{read_results(data_dir + "offline.jsonl")};
  plan_options o;
  o.group = {"loop=compute"};
  o.target_rate = 12000;
  const auto p = make_plan(sets, catalogue::builtin(), only("h200-sxm-141gb", 3.79), o);
  const auto& best = p.candidates[0];
  EXPECT_EQ(best.row.card, "h200-sxm-141gb");
  EXPECT_TRUE(best.row.measured);
  EXPECT_EQ(best.row.configuration, "batch=64");
  EXPECT_EQ(best.quantity, 3);  // 12000 / 5149 tokens/s per GPU, rounded up
  EXPECT_NEAR(best.rental_cost[2], 3 * 3.79 * 24 * 30, 1e-9);
  EXPECT_EQ(p.days, 30);
  EXPECT_EQ(p.runner_up, -1);
  EXPECT_EQ(p.order["quantity"], 3);

  o.target_rate.reset();
  EXPECT_EQ(make_plan(sets, catalogue::builtin(), only("h200-sxm-141gb", 3.79), o).days, 7);
}

TEST(Plan, MaxGpusLeavesCardsOut) {
  const auto sets = std::vector<result_set>{read_results(data_dir + "offline.jsonl")};
  plan_options o;
  o.target_rate = 12000;
  o.max_gpus = 2;
  try {
    make_plan(sets, catalogue::builtin(), only("h200-sxm-141gb", 3.79), o);
    FAIL() << "expected input_error";
  } catch (const input_error& e) {
    EXPECT_NE(std::string(e.what()).find("needs 3 GPUs for 12000 output tokens/s, more than --max-gpus 2"), std::string::npos) << e.what();
  }
}

TEST(Plan, BadOptions) {
  const auto sets = std::vector<result_set>{read_results(data_dir + "offline.jsonl")};
  const auto prices = example_prices();
  plan_options o;
  o.days = 5;
  EXPECT_THROW(make_plan(sets, catalogue::builtin(), prices, o), usage_error);
  o = {};
  o.max_gpus = 0;
  EXPECT_THROW(make_plan(sets, catalogue::builtin(), prices, o), usage_error);
  o = {};
  o.target_rate = -1;
  EXPECT_THROW(make_plan(sets, catalogue::builtin(), prices, o), usage_error);
  o = {};
  o.group = {"scenario=server"};
  EXPECT_THROW(make_plan(sets, catalogue::builtin(), prices, o), usage_error);
}

}  // namespace
