#include "workloads/llm/load.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "itera/core/errors.hpp"

namespace itera::llm {
namespace {

// A 53-bit double in (0, 1]: the top 53 bits of the draw, plus one, scaled. Never 0, so log is finite.
double unit_open_closed(std::mt19937_64& rng) {
  return static_cast<double>((rng() >> 11) + 1) * 0x1.0p-53;
}

double p99(const summary& s) {
  for (const auto& p : s.percentiles)
    if (p.q == 0.99) return p.value;
  return s.max;  // not reached: summarize() always carries p99
}

// A 0 target is not checked; a distribution with no sample has nothing to violate it.
bool within(const summary& s, double target) { return target == 0 || s.count == 0 || p99(s) <= target; }

void check_target(const char* name, double value) {
  if (!std::isfinite(value) || value < 0)
    throw usage_error(fmt::format("server targets: {} must be 0 (none) or a positive number of seconds, got {}", name, value));
}

void check_timeline(const request_timeline& r, std::size_t index) {
  if (!std::isfinite(r.scheduled) || r.scheduled < 0)
    throw usage_error(fmt::format("server run: request {} is scheduled at {} s, not a time from the start of the run",
                                  index, r.scheduled));
  if (r.tokens.empty()) return;  // never admitted or served: its admission time means nothing
  if (!std::isfinite(r.admitted) || r.admitted < r.scheduled)
    throw usage_error(fmt::format("server run: request {} is admitted at {} s, before its scheduled arrival at {} s",
                                  index, r.admitted, r.scheduled));
  if (!std::isfinite(r.tokens[0]) || r.tokens[0] < r.admitted)
    throw usage_error(fmt::format("server run: request {} has its first token at {} s, before its admission at {} s",
                                  index, r.tokens[0], r.admitted));
  for (std::size_t i = 1; i < r.tokens.size(); ++i)
    if (!std::isfinite(r.tokens[i]) || r.tokens[i] < r.tokens[i - 1])
      throw usage_error(fmt::format("server run: request {} has token {} at {} s, before token {} at {} s", index, i,
                                    r.tokens[i], i - 1, r.tokens[i - 1]));
}

double per_second(double amount, double duration_s) { return duration_s > 0 ? amount / duration_s : 0; }

}  // namespace

std::vector<double> poisson_arrivals(double rate_per_s, std::size_t count, std::uint64_t seed) {
  if (!std::isfinite(rate_per_s) || rate_per_s <= 0)
    throw usage_error(fmt::format("rate must be a positive number of requests per second, got {}", rate_per_s));
  std::mt19937_64 rng(seed);
  std::vector<double> arrivals;
  arrivals.reserve(count);
  double t = 0;
  for (std::size_t i = 0; i < count; ++i) {
    t += -std::log(unit_open_closed(rng)) / rate_per_s;
    arrivals.push_back(t);
  }
  return arrivals;
}

server_report summarize_server(std::span<const request_timeline> requests, const latency_targets& targets) {
  if (requests.empty()) throw usage_error("server run: no requests to summarise");
  check_target("ttft target", targets.ttft_s);
  check_target("tpot target", targets.tpot_s);
  for (std::size_t i = 0; i < requests.size(); ++i) check_timeline(requests[i], i);

  server_report report;
  report.requests = requests.size();
  std::vector<double> ttft, tpot, itl, e2e, queue;
  double first_scheduled = requests[0].scheduled, last_scheduled = requests[0].scheduled;
  double last_token = 0;
  std::size_t output_tokens = 0;
  for (const auto& r : requests) {
    first_scheduled = std::min(first_scheduled, r.scheduled);
    last_scheduled = std::max(last_scheduled, r.scheduled);
    if (r.tokens.empty()) continue;
    const std::size_t n = r.tokens.size();
    ++report.completed;
    output_tokens += n;
    last_token = std::max(last_token, r.tokens.back());

    const double own_ttft = r.tokens.front() - r.scheduled;
    ttft.push_back(own_ttft);
    e2e.push_back(r.tokens.back() - r.scheduled);
    queue.push_back(r.admitted - r.scheduled);
    for (std::size_t i = 1; i < n; ++i) itl.push_back(r.tokens[i] - r.tokens[i - 1]);
    bool meets = targets.ttft_s == 0 || own_ttft <= targets.ttft_s;
    if (n >= 2) {
      const double own_tpot = (r.tokens.back() - r.tokens.front()) / static_cast<double>(n - 1);
      tpot.push_back(own_tpot);
      meets = meets && (targets.tpot_s == 0 || own_tpot <= targets.tpot_s);
    }
    if (meets) ++report.meeting_targets;
  }

  if (report.completed > 0) report.duration_s = last_token - first_scheduled;
  report.offered_rate = last_scheduled > 0 ? static_cast<double>(report.requests) / last_scheduled : 0;
  report.achieved_rate = per_second(static_cast<double>(report.completed), report.duration_s);
  report.output_tokens_per_s = per_second(static_cast<double>(output_tokens), report.duration_s);
  report.goodput = per_second(static_cast<double>(report.meeting_targets), report.duration_s);
  report.ttft = summarize(ttft);
  report.tpot = summarize(tpot);
  report.itl = summarize(itl);
  report.e2e = summarize(e2e);
  report.queue = summarize(queue);
  report.meets_targets = report.completed > 0 && report.completed == report.requests &&
                         within(report.ttft, targets.ttft_s) && within(report.tpot, targets.tpot_s);
  return report;
}

std::optional<operating_point> best_operating_point(std::span<const operating_point> points) {
  const operating_point* best = nullptr;
  for (const auto& p : points) {
    if (!p.report.meets_targets) continue;
    if (!best || p.rate > best->rate || (p.rate == best->rate && p.max_batch < best->max_batch)) best = &p;
  }
  if (!best) return std::nullopt;
  return *best;
}

}  // namespace itera::llm
