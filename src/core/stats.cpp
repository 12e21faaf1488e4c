#include "itera/core/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace itera {

namespace {

constexpr double summary_confidence = 0.95;
constexpr double summary_quantiles[] = {0.90, 0.95, 0.99, 0.999};
// Above this the exact binomial sum gives way to the normal approximation; below it 2^-n is still
// a normal double, so the pmf can be built by plain multiplication without log space.
constexpr std::size_t exact_binomial_max_n = 1000;

// Value at fractional 0-based position h between a and b = the order statistics at floor(h) and
// floor(h)+1. A zero fraction returns a unchanged so that infinite samples do not turn into NaN.
double interpolate(double a, double b, double frac) { return frac == 0 ? a : a + frac * (b - a); }

// Upper-tail point of the standard normal: z with P(Z > z) = tail. Bisection on erfc is slow next
// to a rational approximation but exact to the last bit that matters, and runs once per evaluation.
double normal_upper_quantile(double tail) {
  double lo = 0, hi = 40;
  for (int i = 0; i < 200 && hi - lo > 1e-12; ++i) {
    const double mid = (lo + hi) / 2;
    if (0.5 * std::erfc(mid / std::sqrt(2.0)) > tail) lo = mid;
    else hi = mid;
  }
  return hi;  // the larger end errs towards a wider interval
}

// Half-width of the interval over abs(median): a negative median (a signed difference) still
// yields a non-negative noise.
double relative_half_width(double low, double high, double median) {
  if (median == 0) return std::numeric_limits<double>::infinity();
  return (high - low) / 2 / std::abs(median);
}

// Same numbers as summarize() gives for the median and its interval, without sorting: three
// selections on a scratch copy, O(n), which keeps the stopping rule cheap.
double relative_noise_unsorted(std::vector<double> v) {
  const std::size_t n = v.size();
  const rank_interval r = median_ci_ranks(n, summary_confidence);
  if (!r.exact) return std::numeric_limits<double>::infinity();
  const double h = static_cast<double>(n - 1) * 0.5;
  const std::size_t m = static_cast<std::size_t>(h);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m), v.end());
  const double at_m = v[m];
  const double frac = h - static_cast<double>(m);
  // For even n the median also needs the next order statistic: the smallest of the right part.
  const double median =
      frac == 0 ? at_m : interpolate(at_m, *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(m) + 1, v.end()), frac);
  // After the first selection everything left of m is <= v[m] and everything right is >= v[m],
  // so each bound is a selection within one side.
  double low = at_m, high = at_m;
  if (r.low < m) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(r.low), v.begin() + static_cast<std::ptrdiff_t>(m));
    low = v[r.low];
  }
  if (r.high > m) {
    std::nth_element(v.begin() + static_cast<std::ptrdiff_t>(m) + 1, v.begin() + static_cast<std::ptrdiff_t>(r.high), v.end());
    high = v[r.high];
  }
  return relative_half_width(low, high, median);
}

}  // namespace

double quantile_sorted(std::span<const double> sorted, double q) {
  if (sorted.empty()) throw std::invalid_argument("quantile_sorted: empty input");
  if (!(q >= 0 && q <= 1)) throw std::invalid_argument("quantile_sorted: q must be in [0, 1]");
  const double h = static_cast<double>(sorted.size() - 1) * q;
  const std::size_t lo = static_cast<std::size_t>(h);
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return interpolate(sorted[lo], sorted[hi], h - static_cast<double>(lo));
}

bool percentile_reliable(std::size_t n, double q) {
  if (!(q >= 0 && q <= 1)) throw std::invalid_argument("percentile_reliable: q must be in [0, 1]");
  // q^n is the chance that all n samples fall below the q-quantile, i.e. that the sample maximum
  // is not an upper bound for it. At 5% or less the maximum is a 95% upper confidence bound.
  return std::pow(q, static_cast<double>(n)) <= 0.05;
}

// Rank convention. Let x_(0) <= ... <= x_(n-1) be the sorted sample (0-based) and B ~ Bin(n, 1/2)
// the number of samples below the true median M of a continuous distribution. Then
//   x_(low) <= M  <=>  B >= low + 1,     M <= x_(high)  <=>  B <= high,
// so the coverage of [x_(low), x_(high)] is P(low < B <= high) = F(high) - F(low). Ranks are
// symmetric, high = n - 1 - low, which makes the coverage 1 - 2 F(low); low is the largest rank
// with coverage >= confidence. Example: n = 10 at 95% gives {1, 8} (1-based 2nd and 9th, coverage
// 1 - 22/1024 = 97.85%); n = 100 gives {39, 60}.
// When no rank reaches the confidence (n < 6 at 95%; n = 0 gives {0, 0}) the whole sample is
// returned with exact = false: those bounds carry no stated coverage.
rank_interval median_ci_ranks(std::size_t n, double confidence) {
  if (!(confidence > 0 && confidence < 1))
    throw std::invalid_argument("median_ci_ranks: confidence must be in (0, 1)");
  const rank_interval whole{0, n == 0 ? 0 : n - 1, false};
  if (n == 0) return whole;
  const double tail = (1 - confidence) / 2;  // allowed F(low)
  const std::size_t max_low = (n - 1) / 2;   // keeps low <= high

  if (n <= exact_binomial_max_n) {
    double pmf = std::ldexp(1.0, -static_cast<int>(n));  // P(B = 0)
    double cdf = pmf;
    if (cdf > tail) return whole;
    std::size_t low = 0;
    while (low < max_low) {
      pmf *= static_cast<double>(n - low) / static_cast<double>(low + 1);  // P(B = low + 1)
      if (cdf + pmf > tail) break;
      cdf += pmf;
      ++low;
    }
    return {low, n - 1 - low, true};
  }

  // F(l) ~ Phi((l + 0.5 - n/2) / (sqrt(n)/2)) with continuity correction; solve F(low) <= tail.
  const double z = normal_upper_quantile(tail);
  const double nd = static_cast<double>(n);
  const double low = std::floor(nd / 2 - 0.5 - z * std::sqrt(nd) / 2);
  if (low < 0) return whole;
  const std::size_t l = std::min(static_cast<std::size_t>(low), max_low);
  return {l, n - 1 - l, true};
}

summary summarize(std::span<const double> samples) {
  summary s;
  s.confidence = summary_confidence;
  s.percentiles.reserve(std::size(summary_quantiles));
  // Writers index the four percentiles by position, so an empty sample still carries them.
  for (double q : summary_quantiles) s.percentiles.push_back({q, 0, false});
  s.count = samples.size();
  if (samples.empty()) {
    s.relative_noise = std::numeric_limits<double>::infinity();
    return s;
  }
  for (double x : samples)
    if (std::isnan(x)) throw std::invalid_argument("summarize: NaN sample");

  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  s.min = sorted.front();
  s.max = sorted.back();

  // Two passes: subtracting the mean first avoids the cancellation of sum-of-squares formulas,
  // which matters for latencies with a large offset and a small spread.
  double sum = 0;
  for (double x : sorted) sum += x;
  s.mean = sum / static_cast<double>(n);
  if (n > 1) {
    double ss = 0;
    for (double x : sorted) ss += (x - s.mean) * (x - s.mean);
    s.stdev = std::sqrt(ss / static_cast<double>(n - 1));
  }

  s.median = quantile_sorted(sorted, 0.5);
  for (percentile_value& p : s.percentiles) {
    p.value = quantile_sorted(sorted, p.q);
    p.reliable = percentile_reliable(n, p.q);
  }

  const rank_interval r = median_ci_ranks(n, s.confidence);
  s.median_ci_low = sorted[r.low];
  s.median_ci_high = sorted[r.high];
  s.relative_noise = r.exact ? relative_half_width(s.median_ci_low, s.median_ci_high, s.median)
                             : std::numeric_limits<double>::infinity();
  if (n >= drift_min_samples) {
    const std::size_t quarter = n / 4;
    std::vector<double> first(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(quarter));
    std::vector<double> last(samples.end() - static_cast<std::ptrdiff_t>(quarter), samples.end());
    std::sort(first.begin(), first.end());
    std::sort(last.begin(), last.end());
    const double a = quantile_sorted(first, 0.5), b = quantile_sorted(last, 0.5);
    if (a != 0) s.drift = b / a - 1;
  }
  return s;
}

const char* to_string(stop_reason r) {
  switch (r) {
    case stop_reason::none: return "none";
    case stop_reason::converged: return "converged";
    case stop_reason::max_time: return "max_time";
    case stop_reason::max_samples: return "max_samples";
  }
  return "unknown";
}

stop_reason stopper::add(double sample, double elapsed_s) {
  // A NaN would break the orderings nth_element relies on; it is a measurement bug, not noise.
  if (std::isnan(sample)) throw std::invalid_argument("stopper::add: NaN sample");
  m_samples.push_back(sample);
  const std::size_t n = m_samples.size();
  if (n >= m_rule.max_samples) return stop_reason::max_samples;
  if (elapsed_s >= m_rule.max_time_s) return stop_reason::max_time;
  if (n < m_rule.min_samples || elapsed_s < m_rule.min_time_s) return stop_reason::none;
  // m_next_check starts at 0, so the first eligible sample is always evaluated. Checking again
  // only after ~5% growth bounds the total selection work by about 21 times the final n.
  if (n < m_next_check) return stop_reason::none;
  m_next_check = n + std::max<std::size_t>(1, n / 20);
  m_last_noise = relative_noise_unsorted(m_samples);
  return m_last_noise <= m_rule.noise_target ? stop_reason::converged : stop_reason::none;
}

}  // namespace itera
