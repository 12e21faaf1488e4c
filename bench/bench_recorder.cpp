// Overhead of the measurement core itself: one stage scope (enter + close) must cost at most 1 us of
// host time (issue 2, Performance). Results go to docs/perf/.
#include <benchmark/benchmark.h>

#include <memory>

#include "itera/core/backend.hpp"
#include "itera/core/recorder.hpp"

namespace {

// Host time only: no device clock, no memory tracker.
void bm_scope_host_only(benchmark::State& state) {
  itera::stage_recorder rec;
  std::size_t n = 0;
  for (auto _ : state) {
    auto s = rec.enter("decode");
    s.add_bytes_read(4096);
    benchmark::DoNotOptimize(s);
    if (++n == 4096) {  // aggregate outside the timed loop body's steady state, as a case would
      state.PauseTiming();
      benchmark::DoNotOptimize(rec.finish());
      n = 0;
      state.ResumeTiming();
    }
  }
}
BENCHMARK(bm_scope_host_only);

// With the backend's memory tracker (allocator peaks per stage) and, on cuda, its event clock.
void bm_scope_backend(benchmark::State& state, const char* backend_name) {
  std::unique_ptr<itera::backend> dev;
  try {
    dev = itera::open_backend(backend_name);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  itera::stage_recorder rec(dev->clock(), &dev->memory_tracking());
  std::size_t n = 0;
  for (auto _ : state) {
    {
      auto outer = rec.enter("layer");
      auto inner = rec.enter("attention");
      inner.add_flops(1e6);
    }
    if (++n == 2048) {
      state.PauseTiming();
      dev->synchronize();
      benchmark::DoNotOptimize(rec.finish());
      n = 0;
      state.ResumeTiming();
    }
  }
  state.counters["scopes_per_iteration"] = 2;
}
BENCHMARK_CAPTURE(bm_scope_backend, cpu, "cpu");
BENCHMARK_CAPTURE(bm_scope_backend, cuda, "cuda");

}  // namespace

BENCHMARK_MAIN();
