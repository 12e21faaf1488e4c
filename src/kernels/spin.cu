#include <cuda_runtime.h>

#include "itera/cuda/check.hpp"
#include "src/kernels/spin.hpp"

namespace itera::kernels {
namespace {

__device__ __forceinline__ std::uint64_t global_timer_ns() {
  std::uint64_t t;
  // volatile: every iteration must read the timer again.
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(std::uint64_t ns) {
  const std::uint64_t begin = global_timer_ns();
  while (global_timer_ns() - begin < ns) {
  }
}

}  // namespace

void launch_spin(void* stream, std::uint64_t ns) {
  spin_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(ns);
  ITERA_CUDA_CHECK_LAUNCH();
}

}  // namespace itera::kernels
