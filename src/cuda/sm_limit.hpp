#pragma once
// A deliberately limited card: the backend's stream on a green context holding only part of the
// SMs (ITERA_CUDA_SM_LIMIT=N). Its runs measure ceilings and workloads as a smaller card of the
// same memory system would, which is what validates the projection to other cards
// (docs/analysis.md "Projection"): project the full card from the limited run and compare with
// the full card's measurement. Driver entry points come through the runtime, so the binary still
// starts where no driver is installed.
#include <cuda_runtime.h>

#include <optional>
#include <string>

namespace itera::cuda {

struct sm_limited_stream {
  cudaStream_t stream = nullptr;
  unsigned requested = 0;  // ITERA_CUDA_SM_LIMIT
  unsigned granted = 0;    // the green context's SMs (rounded up to the architecture's granularity)
  void* green_ctx = nullptr;  // CUgreenCtx
};

// The value of ITERA_CUDA_SM_LIMIT: nullopt when unset or empty; usage_error when it is not a
// whole number of at least 1.
std::optional<unsigned> sm_limit_from_env();

// A non-blocking stream on a green context of `sms` SMs of `device`. Throws usage_error when the
// device has fewer SMs, std::runtime_error when the driver has no green contexts (CUDA 12.4+).
sm_limited_stream make_sm_limited_stream(int device, unsigned sms);

// Destroys the stream and the green context; never throws.
void destroy(sm_limited_stream& s);

}  // namespace itera::cuda
