#pragma once
// Which tensor-core attention kernel the llm prefill and the ViT encoder run
// (flash_attention_wgmma.cuh: launch_attention), for front ends and tests: plain C++, no CUDA
// headers.
//
//   wgmma     Hopper's warpgroup kernel: compute capability 9.0, a binary holding sm_90a code
//             (ITERA_CUDA_SM90A), padded head dimension 64 or 128
//   mma.sync  the FlashAttention-2-style kernel (sm_80 and later), everywhere else
//
// ITERA_ATTENTION_WGMMA: unset or 1, wgmma where it runs; 0, mma.sync everywhere (A/B runs);
// anything else is a usage error. A test may override that for the process.
#include <cstdint>
#include <optional>

namespace itera::kernels {

enum class attention_kernel { wgmma, mma_sync };

// The kernel launch_attention takes for a head dimension on the current device (the wgmma kernel
// takes 64 and 128 exactly: no padded dimension rounds up to them but themselves).
attention_kernel attention_kernel_for(std::int64_t head_dim);
const char* attention_kernel_name(attention_kernel k);  // "wgmma (sm_90a)" or "mma.sync"

// Tests: allow wgmma (its default: where it runs) or force mma.sync, whatever the environment
// says; std::nullopt goes back to the environment's choice.
void override_attention_kernel(std::optional<attention_kernel> choice);

}  // namespace itera::kernels
