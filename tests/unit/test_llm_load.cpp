// The llm server scenario: the Poisson arrival schedule is reproducible and has the right shape,
// the server statistics match timelines worked out by hand, the targets are judged at their
// boundary, and a sweep picks the highest rate that meets them with the smallest batch limit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "itera/core/errors.hpp"
#include "workloads/llm/load.hpp"

namespace itera::llm {
namespace {

template <class F>
std::string usage_message(F&& f) {
  try {
    f();
  } catch (const usage_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no usage_error";
  return {};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

request_timeline timeline(double scheduled, double admitted, std::vector<double> tokens) {
  request_timeline r;
  r.scheduled = scheduled;
  r.admitted = admitted;
  r.tokens = std::move(tokens);
  r.prompt_tokens = 16;
  return r;
}

TEST(LlmLoad, PoissonArrivalsAreDeterministic) {
  const auto a = poisson_arrivals(10, 1000, 42);
  EXPECT_EQ(a, poisson_arrivals(10, 1000, 42));
  EXPECT_NE(a, poisson_arrivals(10, 1000, 43));
  // The recipe, pinned: the first output of std::mt19937_64 seeded with its default 5489 is fixed
  // by the standard; its top 53 bits plus one, over 2^53, is u, and the first arrival is -log(u)/rate.
  std::mt19937_64 reference(5489);
  const std::uint64_t first = reference();
  EXPECT_EQ(first, 14514284786278117030ull);
  const double u = static_cast<double>((first >> 11) + 1) * 0x1.0p-53;
  EXPECT_EQ(poisson_arrivals(4, 1, 5489).at(0), -std::log(u) / 4);
  EXPECT_TRUE(poisson_arrivals(4, 0, 1).empty());
}

TEST(LlmLoad, PoissonArrivalsIncreaseFromAfterZero) {
  const auto a = poisson_arrivals(100, 5000, 7);
  ASSERT_EQ(a.size(), 5000u);
  EXPECT_GT(a[0], 0) << "the first arrival is at its own gap from 0";
  for (std::size_t i = 1; i < a.size(); ++i) ASSERT_GE(a[i], a[i - 1]) << "at " << i;
}

TEST(LlmLoad, PoissonGapsAreExponential) {
  const double rate = 50;
  const std::size_t n = 20000;
  const auto a = poisson_arrivals(rate, n, 2024);
  std::vector<double> gaps(n);
  for (std::size_t i = 0; i < n; ++i) gaps[i] = a[i] - (i == 0 ? 0 : a[i - 1]);
  double sum = 0;
  for (double g : gaps) sum += g;
  const double mean = sum / static_cast<double>(n);
  double ss = 0;
  for (double g : gaps) ss += (g - mean) * (g - mean);
  const double stdev = std::sqrt(ss / static_cast<double>(n - 1));
  // Standard error of the mean is 1/sqrt(n) = 0.7% of it; 3% is more than four of those.
  EXPECT_NEAR(mean, 1 / rate, 0.03 / rate);
  EXPECT_NEAR(stdev / mean, 1.0, 0.05) << "an exponential's coefficient of variation is 1";
  EXPECT_NEAR(a.back(), static_cast<double>(n) / rate, 0.03 * static_cast<double>(n) / rate);
}

TEST(LlmLoad, PoissonRejectsBadRates) {
  for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    const auto message = usage_message([&] { poisson_arrivals(bad, 10, 1); });
    EXPECT_TRUE(contains(message, "rate must be a positive number of requests per second")) << message;
  }
  EXPECT_TRUE(contains(usage_message([] { poisson_arrivals(-2.5, 10, 1); }), "got -2.5"));
}

// Four requests, times in binary fractions so every value below is exact:
//   0: scheduled 1,  admitted 1,    tokens 1.5 1.75 2 2.5  ttft 0.5  tpot 1/3  e2e 1.5  queue 0
//   1: scheduled 2,  admitted 2.5,  tokens 3 3.5           ttft 1    tpot 0.5  e2e 1.5  queue 0.5
//   2: scheduled 4,  admitted 4.25, tokens 4.5             ttft 0.5  (none)    e2e 0.5  queue 0.25
//   3: scheduled 5,  no token (not completed)
std::vector<request_timeline> hand_run() {
  return {timeline(1, 1, {1.5, 1.75, 2, 2.5}), timeline(2, 2.5, {3, 3.5}), timeline(4, 4.25, {4.5}),
          timeline(5, 0, {})};
}

TEST(LlmLoad, ServerReportByHand) {
  const auto runs = hand_run();
  const auto r = summarize_server(runs, {0.5, 0.4});
  EXPECT_EQ(r.requests, 4u);
  EXPECT_EQ(r.completed, 3u);
  EXPECT_EQ(r.duration_s, 3.5);  // first scheduled 1 to last token 4.5
  EXPECT_EQ(r.offered_rate, 0.8);  // 4 requests by the last scheduled arrival at 5
  EXPECT_DOUBLE_EQ(r.achieved_rate, 3 / 3.5);
  EXPECT_EQ(r.output_tokens_per_s, 2.0);  // 7 tokens over 3.5 s

  EXPECT_EQ(r.ttft.count, 3u);
  EXPECT_EQ(r.ttft.min, 0.5);
  EXPECT_EQ(r.ttft.max, 1.0);
  EXPECT_EQ(r.ttft.median, 0.5);
  EXPECT_DOUBLE_EQ(r.ttft.mean, 2.0 / 3);

  EXPECT_EQ(r.tpot.count, 2u) << "the one-token request has no tpot";
  EXPECT_DOUBLE_EQ(r.tpot.min, 1.0 / 3);
  EXPECT_EQ(r.tpot.max, 0.5);

  EXPECT_EQ(r.itl.count, 4u);  // 0.25 0.25 0.5 from request 0, 0.5 from request 1
  EXPECT_EQ(r.itl.min, 0.25);
  EXPECT_EQ(r.itl.max, 0.5);
  EXPECT_EQ(r.itl.mean, 0.375);
  EXPECT_EQ(r.itl.median, 0.375);

  EXPECT_EQ(r.e2e.count, 3u);
  EXPECT_EQ(r.e2e.min, 0.5);
  EXPECT_EQ(r.e2e.median, 1.5);
  EXPECT_EQ(r.e2e.max, 1.5);

  EXPECT_EQ(r.queue.count, 3u);
  EXPECT_EQ(r.queue.min, 0.0);
  EXPECT_EQ(r.queue.median, 0.25);
  EXPECT_EQ(r.queue.mean, 0.25);
  EXPECT_EQ(r.queue.max, 0.5);

  // Request 0 (ttft 0.5, tpot 1/3) and request 2 (ttft 0.5, one token) meet ttft 0.5 / tpot 0.4;
  // request 1 misses on ttft, request 3 never completed.
  EXPECT_EQ(r.meeting_targets, 2u);
  EXPECT_DOUBLE_EQ(r.goodput, 2 / 3.5);
  EXPECT_FALSE(r.meets_targets) << "a request was never served";
}

TEST(LlmLoad, GoodputCountsEachRequestAgainstBothTargets) {
  const auto runs = hand_run();
  EXPECT_EQ(summarize_server(runs, {1.0, 0.5}).meeting_targets, 3u);
  EXPECT_EQ(summarize_server(runs, {1.0, 0.25}).meeting_targets, 1u) << "only the one-token request";
  EXPECT_EQ(summarize_server(runs, {0.25, 0}).meeting_targets, 0u);
  const auto unchecked = summarize_server(runs, {0, 0});
  EXPECT_EQ(unchecked.meeting_targets, 3u) << "0 targets: every completed request counts";
  EXPECT_DOUBLE_EQ(unchecked.goodput, unchecked.achieved_rate);
}

// n requests, each scheduled at i, admitted on time, first token after `ttft`, then tokens `tpot` apart.
std::vector<request_timeline> uniform_run(std::size_t n, double ttft, double tpot, std::size_t tokens) {
  std::vector<request_timeline> runs;
  for (std::size_t i = 0; i < n; ++i) {
    const double s = static_cast<double>(i);
    std::vector<double> t;
    for (std::size_t k = 0; k < tokens; ++k) t.push_back(s + ttft + static_cast<double>(k) * tpot);
    runs.push_back(timeline(s, s, std::move(t)));
  }
  return runs;
}

TEST(LlmLoad, MeetsTargetsAtTheBoundary) {
  const auto runs = uniform_run(10, 0.25, 0.125, 5);
  const auto at = summarize_server(runs, {0.25, 0.125});
  EXPECT_EQ(at.ttft.percentiles[2].value, 0.25);
  EXPECT_EQ(at.tpot.percentiles[2].value, 0.125);
  EXPECT_TRUE(at.meets_targets) << "p99 equal to the target meets it";
  EXPECT_EQ(at.meeting_targets, 10u);
  EXPECT_FALSE(summarize_server(runs, {std::nextafter(0.25, 0.0), 0.125}).meets_targets);
  EXPECT_FALSE(summarize_server(runs, {0.25, std::nextafter(0.125, 0.0)}).meets_targets);
  // A 0 target is not checked, however far the other measure is from any limit.
  EXPECT_TRUE(summarize_server(runs, {0, 0.125}).meets_targets);
  EXPECT_TRUE(summarize_server(runs, {0.25, 0}).meets_targets);
  EXPECT_TRUE(summarize_server(runs, {0, 0}).meets_targets);
}

TEST(LlmLoad, MeetsTargetsJudgesP99NotTheWorst) {
  auto runs = uniform_run(100, 0.125, 0.125, 2);
  runs[37].tokens = {37 + 10.125, 37 + 10.25};  // one outlier: ttft 10.125
  // Sorted ttfts: 99 x 0.125 then 10.125; p99 at position 99 x 0.99 = 98.01 is about 0.125 + 0.01 x 10 = 0.225.
  const auto r = summarize_server(runs, {0.25, 0.125});
  EXPECT_NEAR(r.ttft.percentiles[2].value, 0.225, 1e-9);
  EXPECT_EQ(r.ttft.max, 10.125);
  EXPECT_TRUE(r.meets_targets);
  EXPECT_EQ(r.meeting_targets, 99u);
  EXPECT_FALSE(summarize_server(runs, {0.2, 0.125}).meets_targets);
}

TEST(LlmLoad, OneTokenRequestsHaveNoTpot) {
  const auto runs = uniform_run(4, 0.5, 0, 1);
  const auto r = summarize_server(runs, {0.5, 0.001});
  EXPECT_EQ(r.tpot.count, 0u) << "an empty distribution: count 0";
  EXPECT_EQ(r.tpot.percentiles.size(), 4u);
  EXPECT_EQ(r.itl.count, 0u);
  EXPECT_EQ(r.ttft.count, 4u);
  EXPECT_EQ(r.meeting_targets, 4u);
  EXPECT_TRUE(r.meets_targets) << "no tpot to check against its target";
}

TEST(LlmLoad, NothingCompletedMeetsNothing) {
  const std::vector<request_timeline> runs{timeline(1, 0, {}), timeline(2, 0, {})};
  const auto r = summarize_server(runs, {});
  EXPECT_EQ(r.completed, 0u);
  EXPECT_EQ(r.duration_s, 0);
  EXPECT_EQ(r.achieved_rate, 0);
  EXPECT_EQ(r.goodput, 0);
  EXPECT_EQ(r.offered_rate, 1.0);
  EXPECT_EQ(r.ttft.count, 0u);
  EXPECT_FALSE(r.meets_targets);
}

TEST(LlmLoad, BadTimelinesAreRejectedWithTheIndex) {
  EXPECT_THROW(summarize_server({}, {}), usage_error);

  auto runs = hand_run();
  runs[1].tokens = {3, 3.5, 3.25};
  auto message = usage_message([&] { summarize_server(runs, {}); });
  EXPECT_TRUE(contains(message, "request 1")) << message;
  EXPECT_TRUE(contains(message, "token 2 at 3.25")) << message;
  EXPECT_TRUE(contains(message, "token 1 at 3.5")) << message;

  runs = hand_run();
  runs[2].tokens = {3.5};  // before its scheduled time 4 and its admission 4.25
  message = usage_message([&] { summarize_server(runs, {}); });
  EXPECT_TRUE(contains(message, "request 2")) << message;
  EXPECT_TRUE(contains(message, "3.5")) << message;

  runs = hand_run();
  runs[0].admitted = 0.5;  // before its scheduled arrival at 1
  message = usage_message([&] { summarize_server(runs, {}); });
  EXPECT_TRUE(contains(message, "request 0")) << message;
  EXPECT_TRUE(contains(message, "0.5")) << message;

  runs = hand_run();
  runs[3].scheduled = std::nan("");
  EXPECT_TRUE(contains(usage_message([&] { summarize_server(runs, {}); }), "request 3"));

  runs = hand_run();
  EXPECT_THROW(summarize_server(runs, {-1, 0}), usage_error);
  EXPECT_THROW(summarize_server(runs, {0, std::nan("")}), usage_error);
}

operating_point point(double rate, std::int64_t max_batch, bool meets) {
  operating_point p;
  p.rate = rate;
  p.max_batch = max_batch;
  p.report.meets_targets = meets;
  p.report.requests = static_cast<std::size_t>(max_batch);  // tells equal points apart
  return p;
}

TEST(LlmLoad, BestOperatingPointIsTheHighestRateAtTheSmallestBatch) {
  const std::vector<operating_point> points{point(1, 8, true),  point(2, 16, true), point(2, 4, true),
                                            point(2, 8, true),  point(3, 32, false), point(3, 2, false),
                                            point(2, 2, false), point(0.5, 1, true)};
  const auto best = best_operating_point(points);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->rate, 2);
  EXPECT_EQ(best->max_batch, 4) << "batch 2 at rate 2 does not meet the targets";
  EXPECT_TRUE(best->report.meets_targets);

  EXPECT_FALSE(best_operating_point(std::vector<operating_point>{point(1, 8, false), point(2, 8, false)}));
  EXPECT_FALSE(best_operating_point({}));
}

}  // namespace
}  // namespace itera::llm
