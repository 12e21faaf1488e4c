#pragma once
// The cuda backend's entry points. No CUDA headers here: front ends and tests include this without
// knowing CUDA types; the implementation lives in src/cuda.
#include <memory>

#include "itera/core/backend.hpp"
#include "itera/core/timer.hpp"

namespace itera {

// Opens CUDA device `device_index`: makes it current, creates one non-blocking stream, a cuBLASLt
// handle with a 64 MiB workspace, and picks the device timer (CUPTI activity span, or CUDA events
// when CUPTI cannot be used here; ITERA_TIMER=cuda_events forces events). Throws usage_error for an
// index out of range, std::runtime_error when the device cannot be opened.
std::unique_ptr<backend> make_cuda_backend(int device_index);

// Whether a CUDA device can be used here; `reason` carries the runtime's own words when not
// ("no CUDA-capable device is detected", "CUDA driver version is insufficient ...").
backend_availability cuda_availability();

namespace cuda {

class cuda_backend;

// The cuda backend behind `dev`; throws std::invalid_argument when `dev` is another backend.
cuda_backend& as_cuda(backend& dev);

// The backend's stream as an opaque pointer (a cudaStream_t), for launchers that take `void*`.
void* native_stream(backend& dev);

// A CUDA-events timer on the backend's stream, whatever its default timer is: the comparison the
// timer-fidelity test reports beside the default.
std::unique_ptr<device_timer> make_event_timer(backend& dev);

}  // namespace cuda
}  // namespace itera
