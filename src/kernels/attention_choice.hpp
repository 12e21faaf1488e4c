#pragma once
// Which tensor-core attention kernel the llm prefill and the ViT encoder run
// (flash_attention_wgmma.cuh: launch_attention), for front ends and tests: plain C++, no CUDA
// headers.
//
//   wgmma              Hopper's warpgroup kernel, streaming key tiles (FlashAttention-3 style):
//                      compute capability 9.0, a binary holding sm_90a code (ITERA_CUDA_SM90A),
//                      padded head dimension 64 or 128
//   mma.sync           the FlashAttention-2-style kernel (sm_80 and later), everywhere else
//   wgmma single pass  where the wgmma kernel runs, for non-causal attention (the vision encoder)
//                      at head dimension 64 over at most attention_single_pass_keys_max keys: all
//                      keys in shared memory, one softmax pass (ViT-L/14 at 224: 257 tokens)
//
// ITERA_ATTENTION_WGMMA: unset or 1, wgmma where it runs; 0, mma.sync everywhere (A/B runs).
// ITERA_ATTENTION_SINGLE_PASS: unset or 1, the single pass where it applies; 0, the streaming
// wgmma kernel there instead (A/B runs). Anything else is a usage error. A test may override both
// for the process.
#include <cstdint>
#include <optional>

namespace itera::kernels {

enum class attention_kernel { wgmma, mma_sync, wgmma_single_pass };

// The most keys the single-pass kernel takes at a head dimension (0: none): four tiles of 64 and
// a tail of 512 / 64 = 8 that it folds in on CUDA cores (flash_attention_wgmma.cuh checks this
// against its own).
constexpr std::int64_t attention_single_pass_keys_max(std::int64_t head_dim) { return head_dim == 64 ? 264 : 0; }

// The kernel launch_attention takes for a head dimension on the current device where the keys are
// unknown or the attention causal (the llm prefill): wgmma or mma.sync, never the single pass (the
// wgmma kernel takes 64 and 128 exactly: no padded dimension rounds up to them but themselves).
attention_kernel attention_kernel_for(std::int64_t head_dim);
// The same for non-causal attention over `keys` keys per query: the single pass where it applies
// and is allowed, else as above.
attention_kernel attention_kernel_for(std::int64_t head_dim, std::int64_t keys);
// "wgmma (sm_90a)", "mma.sync" or "wgmma single pass (sm_90a)"
const char* attention_kernel_name(attention_kernel k);

// Tests, whatever the environment says: wgmma forces the streaming wgmma kernel where it runs
// (the single pass off), wgmma_single_pass allows both wgmma kernels (the single pass where it
// applies, the streaming one elsewhere: the default where the environment allows them), mma_sync
// forces mma.sync; std::nullopt goes back to the environment's choice.
void override_attention_kernel(std::optional<attention_kernel> choice);

}  // namespace itera::kernels
