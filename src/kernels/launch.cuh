#pragma once
// Launches of the llm kernels with programmatic dependent launch (PDL, sm_90 and later): a kernel
// may be scheduled while the one before it in the stream is still running, so its blocks start
// during the previous kernel's tail instead of after a full drain and launch gap. Every kernel
// launched this way calls grid_dependents_launch() first (its successor may be scheduled once all of its blocks
// have started) and grid_dependency_wait() before it reads anything a previous kernel wrote or
// writes anything a previous kernel reads: the wait returns when the previous grid has completed
// and its writes are visible, and since every kernel waits, completion is transitive down the
// stream.
//
// Off unless ITERA_LLM_PDL=1: measured on the H200 (llama-3.1-8b decode, batch 1, 2026-11-29) it
// took 3% (bf16) and 7% (fp8) off an eagerly launched step but nothing off the CUDA graph the
// engine replays, and a kernel started early counts its wait in its own device time, which blurs
// the stage table. Launches are plain on GPUs before sm_90 either way.
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>

#include "itera/cuda/check.hpp"
#include "src/kernels/attention_choice.hpp"

namespace itera::kernels {

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The current device's compute capability major and SM count, asked once per device.
int device_compute_major();
int device_compute_minor();
int device_multiprocessors();
int device_l2_bytes();  // the current device's L2 cache
// The current device has thread block clusters and PDL (compute capability 9.0 and later).
bool device_is_sm90_or_later();
// PDL is used for launches on the current device (sm_90 or later, ITERA_LLM_PDL=1).
bool programmatic_launch_enabled();
// An on/off environment switch of the kernels (ITERA_LLM_PDL, ITERA_ATTENTION_WGMMA,
// ITERA_LLM_WIDE_DECODE): 1 on, 0 off, unset or empty `unset`; anything else a usage_error.
bool env_switch(const char* name, bool unset);
// A count from the environment (the engine's A/B row thresholds: ITERA_LLM_GEMV_MAX_FP8,
// ITERA_LLM_FUSED_GATE_UP, ITERA_LLM_FUSED_QKV): unset or empty `unset`; a whole number >= 0,
// all of it digits, else a usage_error naming the variable, its value and `meaning`.
std::int64_t env_count(const char* name, std::int64_t unset, const char* meaning);
// An env_switch that a test may override for the process: on() is the override where one is set,
// else the environment's choice (read once); override(std::nullopt) gives that back. For the
// kernel choices tests pin both ways (ITERA_VIT_ATTENTION_PERSISTENT, ITERA_LLM_FP8_MMA_GEMV,
// ITERA_LLM_DECODE_STEP, ITERA_PREFILL_ATTENTION_WS), and A/B switches (ITERA_LLM_KEEP_RESIDUAL).
class overridable_switch {
 public:
  constexpr overridable_switch(const char* name, bool unset) : m_name(name), m_unset(unset) {}
  bool on();
  void override(std::optional<bool> on) { m_forced.store(on ? (*on ? 1 : 0) : -1, std::memory_order_relaxed); }

 private:
  const char* m_name;
  bool m_unset;
  std::atomic<int> m_forced{-1};  // -1: none
  std::once_flag m_read;
  bool m_from_env = false;
};
// The current device is compute capability 9.0 and this binary holds sm_90a code (built with 90a
// among the CUDA architectures: ITERA_CUDA_SM90A), so kernels using wgmma may run. Which attention
// kernel runs: attention_choice.hpp.
bool wgmma_available();
// Opts `kernel` in to `bytes` of dynamic shared memory (past the 48 KiB default) on the current
// device: the attribute belongs to the device, so a process that launches on two GPUs sets it on
// each. It only ever grows: a launch needing fewer bytes keeps the larger opt-in (setting it to
// each launch's own size, then skipping sizes set before, left a kernel opted in to less than a
// later launch needed: the second fp8 batch-1 case of one `itera bench` process, after the first
// case's quality engines with a shorter context, found its decode step "does not fit an SM").
void allow_dynamic_shared(const void* kernel, std::size_t bytes);

// A launch's attributes for cudaLaunchKernelEx: a thread block cluster of `cluster` blocks (none
// where it is 1 x 1 x 1) and PDL where programmatic_launch_enabled(). Keep it alive until the
// launch: the config points into it.
class launch_attributes {
 public:
  explicit launch_attributes(dim3 cluster = dim3(1, 1, 1)) {
    if (cluster.x * cluster.y * cluster.z > 1) {
      m_attrs[m_count].id = cudaLaunchAttributeClusterDimension;
      m_attrs[m_count].val.clusterDim.x = cluster.x;
      m_attrs[m_count].val.clusterDim.y = cluster.y;
      m_attrs[m_count].val.clusterDim.z = cluster.z;
      ++m_count;
    }
    if (programmatic_launch_enabled()) {
      m_attrs[m_count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      m_attrs[m_count].val.programmaticStreamSerializationAllowed = 1;
      ++m_count;
    }
  }
  void apply_to(cudaLaunchConfig_t& config) {
    config.attrs = m_attrs;
    config.numAttrs = m_count;
  }

 private:
  cudaLaunchAttribute m_attrs[2] = {};
  unsigned m_count = 0;
};

template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream,
            Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  launch_attributes attrs;
  attrs.apply_to(config);
  ITERA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace itera::kernels
