#pragma once
// The memory an llm case needs on the device, computed before anything is allocated (R5): weights,
// KV cache, activations and workspace, against the device's free memory. The engine allocates
// exactly these buffers, so the plan and the measured peak can be compared (within 5%).
//
// Activations are the buffers of one forward pass over T rows (T = batch x prefill tokens: the
// largest pass the engine is sized for), each allocated once for the whole run as the cuda engine
// does (llm_cuda.cu): the fp32 residual stream, its normalised copy, q/k/v (T x (q_dim + 2 kv_dim)),
// the attention output (T x q_dim), gate and up (T x 2 intermediate), silu(gate) x up
// (T x intermediate), the fp32 logits of each sequence's last position (batch x vocab), and the
// token ids, lengths and RoPE frequencies. The o and down projections add into the residual in
// their epilogue (beta = 1) and the attention is fused (no T x T score matrix): no buffers of
// their own.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "workloads/llm/model.hpp"

namespace itera::llm {

inline constexpr std::uint64_t default_workspace_bytes = std::uint64_t{64} << 20;  // the cuda backend's cuBLASLt workspace

struct memory_request {
  model_config config;
  dtype weights = dtype::bf16;
  dtype activations = dtype::bf16;  // compute precision of the activation buffers (bf16 and fp16: 2 bytes)
  dtype kv = dtype::bf16;
  std::int64_t batch = 1;           // sequences held at once
  std::int64_t context = 0;         // tokens each sequence may hold: prompt + output
  std::int64_t prefill_tokens = 0;  // tokens per sequence in one prefill pass; 0: the whole context
  std::int64_t prefill_batch = 0;   // sequences one prefill pass covers; 0: the batch
  std::uint64_t workspace_bytes = default_workspace_bytes;
  // fp8 weights: the products above the GEMV's rows run on fp8 tensor cores (activations quantised
  // per token into a scratch) rather than on a dequantised copy of each projection in the compute type.
  bool fp8_products = false;
};

struct memory_part {
  std::string name;
  std::uint64_t bytes = 0;
};

struct memory_plan {
  std::vector<memory_part> parts;        // "weights", "kv cache", "activations", "workspace"
  std::vector<memory_part> activations;  // the buffers of the largest live set

  std::uint64_t total_bytes() const;
  std::uint64_t bytes_of(std::string_view part) const;  // 0 for an unknown name
  bool fits(std::uint64_t free_bytes) const { return total_bytes() <= free_bytes; }
  // "does not fit: needs 21.37 GiB, 15.00 GiB free (weights 14.96 GiB, kv cache 4.00 GiB, ...)",
  // the parts largest first. Empty when it fits.
  std::string does_not_fit(std::uint64_t free_bytes) const;
};

// usage_error for a batch or context below 1 or a context past the model's max_position.
memory_plan plan_memory(const memory_request& r);

// With everything else in `r` fixed: the largest batch, or the largest context (up to the model's
// max_position), whose plan fits in `free_bytes`; 0 when not even 1 fits. When r.prefill_tokens is
// 0 it follows the context being tried.
std::int64_t largest_batch(memory_request r, std::uint64_t free_bytes);
std::int64_t largest_context(memory_request r, std::uint64_t free_bytes);

std::string format_gib(std::uint64_t bytes);  // "14.96 GiB"

}  // namespace itera::llm
