#pragma once
// The cpu reference of the llm model: the oracle the cuda engine is checked against. fp32
// throughout (weights hold values of their storage type, widened), OpenBLAS sgemm for the
// projections, plain loops for the rest, written to be read rather than to be fast:
//
//   x = embed[token]
//   per layer:  h = rmsnorm(x) ; q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)
//               rope(q, k) at each token's position ; append k, v to the sequence's cache
//               a = softmax(q K^T / sqrt(head_dim), causal) V   (query head h reads kv head h / group)
//               x += a Wo^T
//               h = rmsnorm(x) ; x += (silu(h Wgate^T) * h Wup^T) Wdown^T
//   logits = rmsnorm(x) Wlm^T ; next token = argmax (first index on ties)
//
// Conventions are Hugging Face's (LlamaForCausalLM, Qwen2ForCausalLM): RMSNorm in fp32 with eps
// inside the square root; RoPE "rotate_half" (pairs i and i + head_dim/2), inv_freq rounded to fp32
// and the angle position x inv_freq computed in fp32, as transformers does.
//
// KV cache precision. By default the cache holds K and V in fp32 as computed. With an fp8 e4m3
// cache (as vLLM runs one without calibration: one fp32 scale per tensor, fixed at 1) each value
// is rounded to its e4m3 code when stored (nearest even, saturating at +-448) and held widened.
// Which K and V the attention reads: a pass into an empty sequence (a prefill from position 0)
// attends over the pass's own K and V as computed, not the rounded cache, as serving engines do
// for a prefill with an fp8 cache; a pass after held tokens (a decode step, a chunked prefill)
// reads the cache, its own new rows included, rounded at the store like the rest. The cuda
// engine does the same (llm_cuda.hpp), its prefill reading its own rows in its 16-bit compute type
// (bf16 or fp16: this reference computes in fp32 whichever the cuda engine runs). With an fp32
// cache both readings are the same numbers.
#include <cstdint>
#include <span>
#include <vector>

#include "workloads/llm/model.hpp"
#include "workloads/llm/weights.hpp"

namespace itera::llm {

// head_dim / 2 inverse frequencies theta^(-2i/head_dim), with llama3 scaling when configured.
std::vector<float> rope_inv_freq(const model_config& c);

// Rotates one head vector (head_dim values) in place to `position`.
void apply_rope(float* head, std::int64_t head_dim, std::int64_t position, std::span<const float> inv_freq);

// out = x / sqrt(mean(x^2) + eps) * weight, over n values (out may be x).
void rms_norm(const float* x, const float* weight, float* out, std::int64_t n, double eps);

// A K or V value as a cache of `kv` holds it: fp32 as is; fp8_e4m3 its e4m3 code (round to
// nearest even, saturating at +-448: never NaN for a finite value) widened back, the code the
// cuda engine's store (__nv_cvt_float_to_fp8, __NV_SATFINITE) gives for the same fp32 value.
// usage_error for another type.
float kv_cache_value(dtype kv, float v);

// One sequence's state: its KV cache, per layer [position][kv_heads x head_dim], values as the
// model's cache precision holds them, widened to fp32.
struct sequence {
  std::int64_t length = 0;  // tokens held
  std::vector<std::vector<float>> keys, values;
};

enum class logits_for { all_positions, last_position };

class reference_model {
 public:
  // Keeps a reference to `weights`: they must outlive the model. kv: the cache's precision, fp32
  // or fp8_e4m3 (usage_error otherwise; the cpu engine holds a 16-bit case's cache in fp32).
  explicit reference_model(const model_weights& weights, dtype kv = dtype::fp32);
  reference_model(model_weights&&, dtype = dtype::fp32) = delete;  // a temporary would not outlive the model

  const model_config& config() const { return m_weights.config; }
  dtype kv() const { return m_kv; }
  sequence new_sequence() const;

  // Runs `tokens` after what `seq` holds and appends them to its cache. Returns the logits of
  // every new position, row-major [tokens x vocab].
  std::vector<float> prefill(sequence& seq, std::span<const std::int32_t> tokens) const;
  // One token; returns its logits [vocab].
  std::vector<float> decode_step(sequence& seq, std::int32_t token) const;

  // Several sequences at once, each with its own tokens (any lengths, any cache lengths): the
  // projections run as one matrix product over all their rows, attention per sequence. Returns,
  // per sequence, the logits of its new positions ([n_i x vocab]), or of its last one ([vocab],
  // empty for a sequence given no tokens).
  // `inputs`: rows (in the order above: sequence by sequence) whose input vectors are given instead
  // of their tokens' embeddings, values [rows.size() x hidden].
  struct row_inputs {
    std::span<const std::int64_t> rows;
    std::span<const float> values;
  };
  std::vector<std::vector<float>> forward(std::span<sequence* const> seqs,
                                          std::span<const std::vector<std::int32_t>> tokens, logits_for which,
                                          const row_inputs* inputs = nullptr) const;

  // Greedy generation: prefill, then `new_tokens` tokens each fed back; returns the generated ids.
  std::vector<std::int32_t> generate(std::span<const std::int32_t> prompt, std::int64_t new_tokens) const;
  // The same for a batch of prompts of different lengths, run together.
  std::vector<std::vector<std::int32_t>> generate(std::span<const std::vector<std::int32_t>> prompts,
                                                  std::int64_t new_tokens) const;

 private:
  const model_weights& m_weights;
  dtype m_kv = dtype::fp32;
  std::vector<float> m_inv_freq;
};

std::int32_t argmax(std::span<const float> logits);

}  // namespace itera::llm
