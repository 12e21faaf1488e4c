#pragma once
// The Llama-family decoder the llm workload runs: its shape, the published presets, and the work a
// prefill or a decode step must do (parameters, bytes, FLOPs). docs/llm.md gives the formulas and
// their sources; tests/unit/test_llm_model.cpp pins the numbers.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace itera::llm {

// Storage types. Names match the gemm formats ("bf16", "fp8_e4m3").
enum class dtype { fp32, fp16, bf16, fp8_e4m3 };

std::string_view dtype_name(dtype t);
dtype parse_dtype(std::string_view name);  // usage_error naming the choices
double bytes_per_element(dtype t);

// Llama 3 "rope_type": "llama3" frequency scaling (Hugging Face _compute_llama3_parameters).
struct rope_scaling_llama3 {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position = 8192;  // original_max_position_embeddings
};

struct model_config {
  std::string name;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t intermediate = 0;
  std::int64_t vocab = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  std::int64_t max_position = 0;   // the longest context (prompt + output) a sequence may hold
  bool tie_embeddings = false;     // lm_head is the embedding table
  bool attention_bias = false;     // q, k, v projections carry biases (Qwen2)
  // A precision choice rather than the model's shape (the llm workload's lm_head axis), kept here
  // so that every count of the weights' bytes sees it: with fp8_e4m3 weights, the LM head is
  // stored as the layer projections are (e4m3 codes, one fp32 scale per output channel) instead
  // of bf16. No effect with 16-bit weights. Not with a tied table (validate).
  bool fp8_lm_head = false;
  std::optional<rope_scaling_llama3> rope_scaling;

  std::int64_t q_dim() const { return heads * head_dim; }
  std::int64_t kv_dim() const { return kv_heads * head_dim; }
};

// "llama-3.1-8b", "llama-3.2-1b", "qwen2.5-7b", "mistral-7b", "tiny".
const std::vector<std::string>& preset_names();
model_config preset(std::string_view name);  // usage_error naming the presets

// Throws usage_error saying which constraint failed, with the numbers.
void validate(const model_config& c);

// The fields an axis may set: layers, hidden, heads, kv_heads, head_dim, intermediate, vocab,
// max_position. Axes with other names (batch, prompt, ...) are left alone, and a value of
// "preset" keeps the preset's. When hidden or heads change and head_dim is not given, head_dim
// follows as hidden / heads (the Hugging Face default). Validates the result.
const std::vector<std::string>& shape_fields();
model_config apply_shape_axes(model_config base, const std::vector<std::pair<std::string, std::string>>& axes);

// Parameter counts by part. Linear weights are [out, in] as in Hugging Face checkpoints.
struct param_counts {
  std::int64_t embedding = 0;            // vocab x hidden
  std::int64_t lm_head = 0;              // vocab x hidden, 0 when tied to the embedding
  std::int64_t attention_per_layer = 0;  // q, k, v, o weights (+ q, k, v biases)
  std::int64_t mlp_per_layer = 0;        // gate, up, down
  std::int64_t norms_per_layer = 0;      // input and post-attention RMSNorm weights
  std::int64_t final_norm = 0;
  std::int64_t layers = 0;
  std::int64_t projections_per_layer = 0;  // q, k, v, o, gate, up, down weights (no biases)

  std::int64_t per_layer() const { return attention_per_layer + mlp_per_layer + norms_per_layer; }
  std::int64_t total() const { return embedding + lm_head + layers * per_layer() + final_norm; }
  // Weights one token is multiplied by: every layer's projections and the LM head (the table
  // itself when tied); the embedding lookup reads a row and multiplies nothing.
  std::int64_t matmul_per_token() const { return layers * projections_per_layer + (lm_head > 0 ? lm_head : embedding); }
};
param_counts count_params(const model_config& c);

// Bytes of all weights stored as `weights`. bf16/fp16/fp32: every tensor in that type. fp8_e4m3:
// the layer projections in fp8 with one fp32 scale per output channel; embedding, norms and biases
// stay bf16 (they are either read one row at a time or are too small to matter), and the LM head
// too unless c.fp8_lm_head (then it is stored as a projection).
double weight_bytes(const model_config& c, dtype weights);
double embedding_bytes(const model_config& c, dtype weights);  // the table, in its storage type
double embedding_row_bytes(const model_config& c, dtype weights);

// K and V of one token across all layers: 2 x layers x kv_heads x head_dim x bytes (1 for
// fp8_e4m3: one fp32 scale per tensor, fixed at 1, takes no bytes per token).
double kv_bytes_per_token(const model_config& c, dtype kv);

// FLOPs of attention for one query position attending to `keys` positions: QK^T and PV,
// 2 x head_dim each, per head and layer.
double attention_flops(const model_config& c, std::int64_t keys);

// The least work a step must do: weights and KV cache read once from memory, new K/V written.
struct step_work {
  double weight_bytes_read = 0;
  double kv_bytes_read = 0;
  double kv_bytes_written = 0;
  double flops = 0;
  std::int64_t tokens = 0;  // tokens processed (decode: one per sequence)

  double bytes_read() const { return weight_bytes_read + kv_bytes_read; }
  double bytes_moved() const { return bytes_read() + kv_bytes_written; }
};

// One decode step over a batch. context[i] is the number of tokens sequence i holds in its KV cache
// before the step; the step writes one more for each and attends over context[i] + 1 keys.
// Weights: all of them except the embedding table, plus one table row per sequence.
step_work decode_step_work(const model_config& c, dtype weights, dtype kv, std::span<const std::int64_t> context);

// Prefill of prompts of the given lengths into empty caches, the LM head applied to the last
// position of each (what generation needs). Causal attention counts only unmasked pairs:
// P (P + 1) / 2 per sequence. K and V are written once into the cache (in `kv`) and read once by
// the attention, from the pass's own rows (bf16 activations: an fp8 cache is not read back).
step_work prefill_work(const model_config& c, dtype weights, dtype kv, std::span<const std::int64_t> prompt);

}  // namespace itera::llm
