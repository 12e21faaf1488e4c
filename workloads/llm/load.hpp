#pragma once
// The llm workload's server scenario (MLPerf LoadGen style): requests arrive as a Poisson process
// at a target rate, a continuous-batching loop serves them, and these functions give the arrival
// schedule and turn what the loop recorded into latency distributions, throughput and goodput.
//
// All times are seconds on one steady clock, counted from the start of the run (t = 0), which is
// also where the arrival schedule starts.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "itera/core/stats.hpp"

namespace itera::llm {

// `count` arrival times, non-decreasing, in seconds from 0. The first arrives after its own gap
// from 0 (not at 0); gaps are independent and exponential with mean 1/rate_per_s. The same
// (rate, count, seed) gives the same schedule everywhere: u is drawn from std::mt19937_64 as a
// 53-bit double in (0, 1] and each gap is -log(u) / rate_per_s (std::exponential_distribution is
// implementation-defined, so it is not used). usage_error for a rate that is not a finite number
// above 0.
std::vector<double> poisson_arrivals(double rate_per_s, std::size_t count, std::uint64_t seed);

// What the serving loop records for one request.
struct request_timeline {
  double scheduled = 0;        // when the request was due to arrive: its time in the schedule
  double admitted = 0;         // when its prefill began; >= scheduled, later when the server is behind
  std::vector<double> tokens;  // when each output token became available to the client, in order
  std::int64_t prompt_tokens = 0;
};

// Per-request latency limits, seconds. 0: no limit on that measure.
struct latency_targets {
  double ttft_s = 0;  // time to first token, from the scheduled arrival
  double tpot_s = 0;  // time per output token after the first
};

// A server run summarised. A request is *completed* when it has at least one output token; the
// latency distributions cover completed requests only (a request with no token has no latency to
// measure). A distribution with no sample is summarize() of nothing: count 0, every value 0.
struct server_report {
  std::size_t requests = 0;   // requests in the run, completed or not
  std::size_t completed = 0;  // requests with at least one output token

  // From the earliest scheduled arrival to the latest token of any request. 0 when no request
  // completed, and then every rate below is 0 (as is any rate over a duration of 0).
  double duration_s = 0;
  // The realised rate of the schedule, requests per second: requests / latest scheduled arrival,
  // the schedule starting at 0 (for a Poisson schedule its expectation is close to the target
  // rate). 0 when the latest scheduled arrival is at 0 (a burst has no rate).
  double offered_rate = 0;
  double achieved_rate = 0;        // completed / duration_s, requests per second
  double output_tokens_per_s = 0;  // output tokens of all requests / duration_s

  // Seconds, over the completed requests:
  summary ttft;   // first token - scheduled: from the scheduled arrival, so queueing counts
  summary tpot;   // (last token - first token) / (tokens - 1), one per request with >= 2 tokens
  summary itl;    // every gap between consecutive tokens of a request, all requests pooled
  summary e2e;    // last token - scheduled
  summary queue;  // admitted - scheduled

  // Completed requests whose own ttft <= targets.ttft_s and own tpot <= targets.tpot_s; a 0
  // target is not checked, nor is tpot for a request with a single token.
  std::size_t meeting_targets = 0;
  double goodput = 0;  // meeting_targets / duration_s, requests per second (DistServe's goodput)
  // The run as a whole meets the targets (MLPerf server-style constraint): every request completed,
  // at least one did, p99 of ttft <= targets.ttft_s and p99 of tpot <= targets.tpot_s. A 0 target
  // is not checked, nor is tpot when no request has two tokens. Percentiles are Hyndman-Fan 7.
  bool meets_targets = false;
};

// usage_error for an empty set, a negative or non-finite target, and for a request with a time that
// is not finite, a scheduled time below 0, or (when it has tokens) an admission before its
// scheduled time, a first token before its admission or tokens out of order; the message names the
// request's index and the values.
server_report summarize_server(std::span<const request_timeline> requests, const latency_targets& targets);

// One server run's outcome in a sweep over rate and batch limit.
struct operating_point {
  double rate = 0;             // the target rate the schedule was drawn at, requests per second
  std::int64_t max_batch = 0;  // the serving loop's limit on sequences in flight
  server_report report;
};

// The point with the highest rate among those whose report meets the targets and, at that rate,
// the smallest max_batch that meets them (the batch limit the rate needs); the first in `points`
// on a tie. nullopt when no point meets the targets.
std::optional<operating_point> best_operating_point(std::span<const operating_point> points);

}  // namespace itera::llm
