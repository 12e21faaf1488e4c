#pragma once
// A kernel of known duration: one thread spins on the GPU's global timer for `ns` nanoseconds.
// The timer-fidelity test compares device timers against Nsight Compute's reading of it.
#include <cstdint>

namespace itera::kernels {

// Enqueues one spin kernel (<<<1, 1>>>) on `stream` (a cudaStream_t). Throws on a launch error.
void launch_spin(void* stream, std::uint64_t ns);

}  // namespace itera::kernels
