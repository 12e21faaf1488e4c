// Memory fit: least squares, refusals, leave-one-out, predictions per card size, and the real
// H200 sweep of docs/perf/data/2026-11-29-llm-scenarios-4.
#include <gtest/gtest.h>

#include <sstream>

#include "itera/analysis/fit.hpp"
#include "itera/core/errors.hpp"

namespace {

using namespace itera;

memory_point pt(double batch, double context, double peak) {
  memory_point p;
  p.batch = batch;
  p.context = context;
  p.peak_bytes = peak;
  return p;
}

const memory_model truth{16e9, 131072, 5e6};

std::vector<memory_point> exact_points() {
  std::vector<memory_point> v;
  for (auto [b, c] : std::vector<std::pair<double, double>>{{1, 640}, {8, 640}, {64, 640}, {1, 2049}, {16, 4096}})
    v.push_back(pt(b, c, truth.predict(b, c)));
  return v;
}

std::string what_of(const std::vector<memory_point>& v) {
  try {
    fit_memory(v);
  } catch (const input_error& e) {
    return e.what();
  }
  return "";
}

TEST(MemoryFit, RecoversAnExactModel) {
  const memory_model m = fit_memory(exact_points());
  EXPECT_NEAR(m.fixed_bytes, truth.fixed_bytes, 1.0);
  EXPECT_NEAR(m.per_token_bytes, truth.per_token_bytes, 1e-4);
  EXPECT_NEAR(m.per_sample_bytes, truth.per_sample_bytes, 1e-2);
}

TEST(MemoryFit, LeastSquaresOverNoisyPointsIsBetweenThem) {
  auto v = exact_points();
  v.push_back(pt(8, 640, truth.predict(8, 640) + 2e6));  // a repeat measured 2 MB higher
  const memory_model m = fit_memory(v);
  const double p = m.predict(8, 640);
  EXPECT_GT(p, truth.predict(8, 640));
  EXPECT_LT(p, truth.predict(8, 640) + 2e6);
}

TEST(MemoryFit, RefusesTooFewPointsSayingHowManyAreNeeded) {
  const std::string w = what_of({pt(1, 640, 1e9), pt(8, 640, 2e9), pt(8, 640, 2e9)});
  EXPECT_NE(w.find("2 distinct (batch, context) combinations measured, at least 3 needed"), std::string::npos) << w;
  EXPECT_NE(what_of({}).find("0 distinct"), std::string::npos);
}

TEST(MemoryFit, RefusesCollinearData) {
  // The usual batch sweep at one context: the per-token and per-sample terms are one column.
  const std::string one_context = what_of({pt(1, 640, 1e9), pt(8, 640, 2e9), pt(64, 640, 9e9)});
  EXPECT_NE(one_context.find("every point has context 640"), std::string::npos) << one_context;
  const std::string one_batch = what_of({pt(4, 640, 1e9), pt(4, 1024, 2e9), pt(4, 2048, 3e9)});
  EXPECT_NE(one_batch.find("every point has batch 4"), std::string::npos) << one_batch;
  // batch x context = 50 + 50 x batch: three combinations, still only two independent columns.
  const std::string hidden = what_of({pt(1, 100, 1e9), pt(2, 75, 2e9), pt(4, 62.5, 3e9)});
  EXPECT_NE(hidden.find("collinear"), std::string::npos) << hidden;
}

TEST(MemoryFit, LargestBatchAndContext) {
  const memory_model m{10e9, 1000, 1e6};
  // 10e9 + b (1000 x 1000 + 1e6) <= 20e9 -> b <= 5000
  EXPECT_EQ(m.largest_batch(1000, 20e9), 5000);
  EXPECT_EQ(m.largest_batch(1000, 20e9 - 1), 4999);
  // 10e9 + 1e6 x 10 + 1000 x 10 x c <= 20e9 -> c <= 999000
  EXPECT_EQ(m.largest_context(10, 20e9), 999000);
  EXPECT_EQ(m.largest_batch(1000, 9e9), 0) << "the fixed part alone does not fit";
  EXPECT_EQ(memory_model({1e9, 0, 0}).largest_batch(10, 2e9), -1) << "no marginal cost: unbounded";
}

case_record llm_case(const std::string& batch, const std::string& prompt, double peak) {
  case_record r;
  r.workload = "llm";
  r.axes = {{"model", "tiny"}, {"scenario", "offline"}, {"loop", "compute"}, {"batch", batch}, {"prompt", prompt}, {"output", "8"}};
  r.metrics = {{"memory/measured_peak", peak, "B"}, {"memory/plan/total", peak, "B"}};
  return r;
}

TEST(MemoryFit, GroupsByMemoryAxesAndChecksLeaveOneOut) {
  result_set s;
  s.source = "synthetic";
  const memory_model m{1e9, 1000, 1e5};
  for (auto [b, p] : std::vector<std::pair<int, int>>{{1, 56}, {8, 56}, {64, 56}, {1, 248}, {8, 248}}) {
    auto r = llm_case(std::to_string(b), std::to_string(p), m.predict(b, p + 8));
    s.cases.push_back(r);
    r.axes[2].second = "end_to_end";  // the other loop: same memory, same group
    s.cases.push_back(r);
  }
  auto other = llm_case("1", "56", 5e9);
  other.axes[0].second = "small";
  s.cases.push_back(other);
  fit_options o;
  o.cards = {"l4-24gb", "h200-sxm-141gb"};
  const auto reps = analyse_memory({s}, catalogue::builtin(), o);
  ASSERT_EQ(reps.size(), 2u);
  EXPECT_TRUE(reps[0].fitted) << reps[0].why_not;
  EXPECT_EQ(reps[0].group, "model=tiny scenario=offline");
  EXPECT_EQ(reps[0].points.size(), 10u);
  EXPECT_EQ(reps[0].loo.size(), 5u);
  EXPECT_EQ(reps[0].loo_tested, 5u);
  EXPECT_LT(reps[0].loo_max_rel_error, 1e-9);
  EXPECT_EQ(reps[0].plan_max_rel_error, 0.0);
  ASSERT_EQ(reps[0].cards.size(), 2u);
  EXPECT_EQ(reps[0].cards[0].memory_gb, 24);
  EXPECT_DOUBLE_EQ(reps[0].cards[0].usable_bytes, 24 * 1073741824.0 * 0.92);
  EXPECT_EQ(reps[0].cards[0].largest_batch[0], m.largest_batch(64, 24 * 1073741824.0 * 0.92));
  EXPECT_FALSE(reps[1].fitted);
  EXPECT_NE(reps[1].why_not.find("at least 3"), std::string::npos);

  o.cards = {"no-such-card"};
  EXPECT_THROW(analyse_memory({s}, catalogue::builtin(), o), usage_error);
}

TEST(MemoryFit, RefusesSetsFromDifferentRecipes) {
  result_set a, b;
  a.source = "a.jsonl";
  b.source = "b.jsonl";
  a.context.software = {{"cuda_runtime", "13.0"}};
  b.context.software = {{"cuda_runtime", "12.4"}};
  EXPECT_NO_THROW(check_common_recipe({a, a}));
  try {
    check_common_recipe({a, b});
    FAIL() << "different software accepted";
  } catch (const input_error& e) {
    EXPECT_NE(std::string(e.what()).find("software.cuda_runtime"), std::string::npos) << e.what();
  }
}

// The H200 sweep: batches 1, 8, 64 at context 640 (offline.jsonl) and batch 1 at context 2049
// (prefill.jsonl). The llm plan equals the measured peak to the byte on that card.
TEST(MemoryFit, MeasuredH200Sweep) {
  const std::string dir = std::string(ITERA_SOURCE_DIR) + "/docs/perf/data/2026-11-29-llm-scenarios-4/";
  const std::vector<result_set> sets = {read_results(dir + "offline.jsonl"), read_results(dir + "prefill.jsonl")};
  EXPECT_NO_THROW(check_common_recipe(sets));
  fit_options o;
  const auto reps = analyse_memory(sets, catalogue::builtin(), o);
  const fit_report* offline = nullptr;
  for (const auto& r : reps)
    if (r.group.find("weights=bf16") != std::string::npos && r.group.find("scenario=offline") != std::string::npos) offline = &r;
  ASSERT_NE(offline, nullptr);
  ASSERT_TRUE(offline->fitted) << offline->why_not;
  EXPECT_EQ(offline->plan_max_rel_error, 0.0);
  // Weights (16.06 GB) and the cuBLASLt workspace are the fixed part; the fit must land near them.
  EXPECT_NEAR(offline->model.fixed_bytes, 16060522496.0 + 67108864.0, 0.02 * 16.1e9);
  // Per token at least the bf16 KV cache of llama-3.1-8b (128 KiB).
  EXPECT_GE(offline->model.per_token_bytes, 131072 * 0.99);
  EXPECT_EQ(offline->loo.size(), 4u);
  EXPECT_EQ(offline->loo_tested, 3u) << "leaving out the only other context leaves one context";
  EXPECT_LT(offline->loo_max_rel_error, 0.25);
  std::ostringstream md;
  write_fit_markdown(md, reps, sets);
  EXPECT_NE(md.str().find("largest batch at context 640"), std::string::npos);
  std::ostringstream js;
  write_fit_json(js, reps);
  const auto j = nlohmann::json::parse(js.str());
  EXPECT_EQ(j["schema"], "itera.fit/1");
}

}  // namespace
