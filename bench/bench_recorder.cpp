// Overhead of the measurement core itself: one stage scope (enter + close) must cost at most 1 us of
// host time (issue 2, Performance). Results go to docs/perf/.
//
// On cuda the backend's stage clock is CUPTI external correlation (a push and a pop per scope), or
// CUDA events (an event record at each scope's begin and end) with ITERA_TIMER=cuda_events or where
// CUPTI cannot be used; the benchmark's label names the clock. The launch benchmarks show the other side of the CUPTI
// clock: what its API and external-correlation records add to each launch.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "itera/core/backend.hpp"
#include "itera/core/recorder.hpp"

#if ITERA_WITH_CUDA
#include "itera/cuda/cuda_backend.hpp"
#include "src/kernels/spin.hpp"
#endif

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

std::string clock_label(itera::backend& dev) {
  return dev.clock() ? "clock=" + std::string(dev.clock()->method()) : "clock=none";
}

// With the backend's memory tracker (allocator peaks per stage) and, on cuda, its stage clock.
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
      // Outside the timing: the clock waits for the device and reads its records here.
      state.PauseTiming();
      dev->synchronize();
      benchmark::DoNotOptimize(rec.finish());
      n = 0;
      state.ResumeTiming();
    }
  }
  dev->synchronize();  // the loop has ended: no longer timed
  benchmark::DoNotOptimize(rec.finish());
  state.counters["scopes_per_iteration"] = 2;
  state.SetLabel(clock_label(*dev));
}
BENCHMARK_CAPTURE(bm_scope_backend, cpu, "cpu");
BENCHMARK_CAPTURE(bm_scope_backend, cuda, "cuda");

#if ITERA_WITH_CUDA
// Host time of one empty spin-kernel launch, bare or inside its own stage scope. Against
// ITERA_TIMER=cuda_events (no CUPTI at all), `bare` shows what CUPTI's API records add to every
// launch of the process, and `scoped` minus `bare` what a scope around a launch costs, external
// correlation records included.
void bm_launch(benchmark::State& state, bool scoped) {
  std::unique_ptr<itera::backend> dev;
  try {
    dev = itera::open_backend("cuda");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  void* stream = itera::cuda::native_stream(*dev);
  itera::stage_recorder rec(dev->clock(), &dev->memory_tracking());
  for (int i = 0; i < 16; ++i) itera::kernels::launch_spin(stream, 0);  // module load
  dev->synchronize();
  std::size_t n = 0;
  for (auto _ : state) {
    if (scoped) {
      auto s = rec.enter("launch");
      itera::kernels::launch_spin(stream, 0);
    } else {
      itera::kernels::launch_spin(stream, 0);
    }
    if (++n == 256) {  // well under the launch queue's depth: the host never waits for the GPU
      state.PauseTiming();
      dev->synchronize();
      benchmark::DoNotOptimize(rec.finish());
      n = 0;
      state.ResumeTiming();
    }
  }
  dev->synchronize();  // the loop has ended: no longer timed
  benchmark::DoNotOptimize(rec.finish());
  state.SetLabel(clock_label(*dev));
}
BENCHMARK_CAPTURE(bm_launch, cuda_bare, false);
BENCHMARK_CAPTURE(bm_launch, cuda_scoped, true);
#endif

}  // namespace

BENCHMARK_MAIN();
