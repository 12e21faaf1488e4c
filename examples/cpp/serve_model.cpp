// Profiling a toy language-model server with itera's C++ API (docs/user-api.md).
//
//   itera_example_cpp RESULTS.jsonl [--field KEY=VALUE]... [--requests N] [--fail-request N]
//
// The "model" is host arithmetic standing in for a real one: a prefill whose work grows with the
// prompt, then one decode step per output token. The callback plays the server for one call; the
// runner drives it three ways: an offline batch sweep, a server under Poisson arrivals (latency from
// each request's scheduled arrival, so a backlog shows in the tail), and a single stream. Stages
// time prefill and decode inside every call, on whichever worker thread runs it. --fail-request
// makes the server's callback throw on that request of the first server case: that case is written
// as failed, with what it measured, and the run goes on. Then: itera report RESULTS.jsonl
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "itera/user/runner.hpp"
#include "itera/user/session.hpp"

namespace {

constexpr int prompt_tokens = 32;
constexpr int output_tokens = 16;

std::atomic<std::uint64_t> g_sink{0};

// About 40 us of arithmetic per token of work.
void work(int tokens) {
  std::uint64_t x = 88172645463325252ull + static_cast<std::uint64_t>(tokens);
  for (int i = 0; i < tokens * 20000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  g_sink.fetch_add(x, std::memory_order_relaxed);
}

// One request (or `sequences` of them at once): prefill, then a decode step per output token.
void generate(itera::user::session& s, itera::user::call& c, int sequences) {
  {
    auto prefill = s.stage("prefill");
    work(prompt_tokens * sequences / 4);
    s.count(itera::user::counter::tokens, prompt_tokens * sequences);
  }
  c.token(sequences);  // the first token comes out of the prefill
  auto decode = s.stage("decode");
  for (int step = 1; step < output_tokens; ++step) {
    work(sequences);
    c.token(sequences);
  }
}

void print(const itera::user::run_summary& r) {
  for (const auto& k : r.cases) {
    std::printf("%-60s %-7s", k.axes_key().c_str(), itera::to_string(k.status));
    for (const char* name : {"throughput/output_tokens_per_s", "latency/ttft/p99", "latency/e2e/p99", "load/goodput"})
      if (const auto* m = k.find_metric(name)) std::printf("  %s=%.4g", name, m->value);
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s RESULTS.jsonl [--field KEY=VALUE]... [--requests N] [--fail-request N]\n", argv[0]);
    return 2;
  }
  itera::user::session_options o;
  o.name = "toy-lm-server";
  o.results_path = argv[1];
  o.device = itera::user::device_none;  // host arithmetic: no GPU to time
  o.fields = {{"model", "toy-lm"}, {"precision.weights", "fp32"}};
  std::size_t requests = 60;
  long fail_request = -1;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--field" && i + 1 < argc) {
      const std::string kv = argv[++i];
      const auto eq = kv.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "--field %s: give KEY=VALUE\n", kv.c_str());
        return 2;
      }
      o.fields[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else if (arg == "--requests" && i + 1 < argc) {
      requests = std::strtoul(argv[++i], nullptr, 10);
    } else if (arg == "--fail-request" && i + 1 < argc) {
      fail_request = std::strtol(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      return 2;
    }
  }

  try {
    itera::user::session s(o);

    itera::user::offline_options offline;
    offline.batches = {1, 8};
    offline.stop.min_time_s = 0.05;
    offline.stop.max_time_s = 0.3;
    offline.warmup_min_time_s = 0.01;
    print(run_offline(s, offline, [&](itera::user::call& c) { generate(s, c, static_cast<int>(c.batch())); }));

    itera::user::server_options server;
    server.rates = {100, 600};
    server.concurrency = {1, 2};
    server.requests = requests;
    server.targets.ttft_s = 0.005;
    server.targets.e2e_s = 0.010;
    std::atomic<bool> failed_once{false};  // only the first server case meets the failure
    const auto served = run_server(s, server, [&](itera::user::call& c) {
      if (c.index() == fail_request && !c.warmup() && !failed_once.exchange(true))
        throw std::runtime_error("the model ran out of memory (simulated by --fail-request)");
      generate(s, c, 1);
    });
    print(served);

    itera::user::single_stream_options single;
    single.requests = requests / 2;
    print(run_single_stream(s, single, [&](itera::user::call& c) { generate(s, c, 1); }));
    s.close();
    if (served.failed > 0) {
      std::fprintf(stderr, "%zu server case(s) failed; the first: %s\n", served.failed, served.first_failure.c_str());
      return 4;
    }
  } catch (const itera::usage_error& e) {  // a bad option, an existing results file
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
