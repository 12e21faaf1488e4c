// Launches the spin kernel at the timer-fidelity targets (10 us, 100 us, 1 ms, 50 ms), each N times,
// one launch at a time, and prints what itera's device timers read. Run it under Nsight Compute to
// get the reference durations the device test pins:
//   ncu --clock-control none --metrics gpu__time_duration.sum spin_reference_cuda
// (under ncu CUPTI cannot subscribe twice, so the default timer falls back to events: the output
// says which method produced each number).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "itera/cuda/cuda_backend.hpp"
#include "itera/core/stats.hpp"
#include "src/kernels/spin.hpp"

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 5;
  auto dev = itera::make_cuda_backend(0);
  void* stream = itera::cuda::native_stream(*dev);
  auto timer = dev->make_timer();
  auto events = itera::cuda::make_event_timer(*dev);
  std::printf("target_ns,method,median_ns,events_median_ns\n");
  for (const std::uint64_t ns : {10'000ull, 100'000ull, 1'000'000ull, 50'000'000ull}) {
    itera::kernels::launch_spin(stream, ns);  // warm-up
    dev->synchronize();
    std::vector<double> by_timer, by_events;
    for (int i = 0; i < repeats; ++i) {
      timer->start();
      itera::kernels::launch_spin(stream, ns);
      timer->stop();
      by_timer.push_back(timer->elapsed_ns());
      events->start();
      itera::kernels::launch_spin(stream, ns);
      events->stop();
      by_events.push_back(events->elapsed_ns());
    }
    std::printf("%llu,%.*s,%.1f,%.1f\n", static_cast<unsigned long long>(ns), static_cast<int>(timer->method().size()),
                timer->method().data(), itera::summarize(by_timer).median, itera::summarize(by_events).median);
  }
  return 0;
}
