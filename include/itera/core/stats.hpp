#pragma once
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace itera {

// Percentiles are Hyndman & Fan definition 7 (linear interpolation between closest ranks, the
// default of NumPy, R and Excel's PERCENTILE.INC). The name is written into every summary.
inline constexpr const char* percentile_method_name = "hyndman_fan_7_linear";

struct percentile_value {
  double q = 0;         // 0.90, 0.95, 0.99, 0.999
  double value = 0;
  // False when too few samples exist for a distribution-free 95% upper confidence bound on this
  // quantile, that is when q^n > 0.05 (n < 299 for p99, n < 2995 for p99.9).
  bool reliable = false;
};

struct summary {
  std::size_t count = 0;
  double min = 0, max = 0, mean = 0, stdev = 0, median = 0;
  std::vector<percentile_value> percentiles;  // p90, p95, p99, p99.9 in that order
  // Distribution-free confidence interval of the median from order statistics (binomial).
  double median_ci_low = 0, median_ci_high = 0;
  double confidence = 0.95;
  // Half-width of the median's confidence interval relative to the median: the noise the
  // stopping rule drives down. Infinity when the interval cannot be formed (n < 6).
  double relative_noise = 0;
  // The median of the last quarter of the samples, in the order they were taken, over the median
  // of the first quarter, minus 1: how far the case moved while it was measured (a card slowing
  // as its power cap bites, a cache warming up). NaN below drift_min_samples samples.
  double drift = std::numeric_limits<double>::quiet_NaN();
  std::string percentile_method = percentile_method_name;
};
inline constexpr std::size_t drift_min_samples = 8;

// Quantile q in [0,1] of sorted data by Hyndman & Fan 7. Empty input is an error.
double quantile_sorted(std::span<const double> sorted, double q);

// True when n samples give a distribution-free 95% upper confidence bound for quantile q.
bool percentile_reliable(std::size_t n, double q);

// Ranks (0-based, inclusive) of the order statistics bounding a confidence interval for the
// median at level `confidence`; {0, n-1} widened to the whole sample when n is too small.
struct rank_interval { std::size_t low, high; bool exact; };
rank_interval median_ci_ranks(std::size_t n, double confidence = 0.95);

summary summarize(std::span<const double> samples);

// Stopping rule for a case's repetitions (all settable from the command line).
struct stopping_rule {
  std::size_t min_samples = 10;
  std::size_t max_samples = 100000;
  double min_time_s = 0.5;      // total measured time before the noise target may stop the case
  double max_time_s = 10.0;     // hard limit on measured time
  double noise_target = 0.005;  // relative half-width of the median's 95% CI
};

enum class stop_reason { none, converged, max_time, max_samples };
const char* to_string(stop_reason r);

// Applies a stopping_rule as samples arrive. Cheap per sample: the median's confidence interval is
// re-evaluated only when the sample count has grown by a few percent since the last evaluation.
class stopper {
 public:
  explicit stopper(stopping_rule rule) : m_rule(rule) {}
  // Adds one sample; elapsed_s is the measured time so far. Returns none to go on.
  stop_reason add(double sample, double elapsed_s);
  const std::vector<double>& samples() const { return m_samples; }
  double last_relative_noise() const { return m_last_noise; }

 private:
  stopping_rule m_rule;
  std::vector<double> m_samples;
  std::size_t m_next_check = 0;
  double m_last_noise = 0;
};

}  // namespace itera
