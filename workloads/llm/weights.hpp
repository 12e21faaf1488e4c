#pragma once
// Weights of the llm model: Hugging Face tensor names and shapes, deterministic random values, and
// the fp32 holder the cpu reference computes from.
//
// Random values are a pure function of (model seed, tensor name, element index), so any tensor or
// element can be regenerated alone, on the host or on the device (init_value is host-device).
// Values are rounded to the storage precision before the cpu sees them: the cpu reference and a
// GPU engine storing bf16 multiply exactly the same numbers.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "workloads/gemm/gemm.hpp"  // random_value, ITERA_HOST_DEVICE
#include "workloads/gemm/numeric.hpp"
#include "workloads/llm/model.hpp"

namespace itera::llm {

enum class tensor_kind {
  embedding, q_proj, k_proj, v_proj, o_proj, q_bias, k_bias, v_bias,
  gate_proj, up_proj, down_proj, input_norm, post_attention_norm, final_norm, lm_head,
};

struct tensor_spec {
  std::string name;  // "model.layers.3.self_attn.k_proj.weight"
  tensor_kind kind = tensor_kind::embedding;
  std::int64_t layer = -1;           // -1 for embedding, final norm, LM head
  std::vector<std::int64_t> shape;   // row-major; linear weights are [out, in]
  bool fp8 = false;  // fp8_e4m3 weights store it as codes + row scales: the layer projections, the
                     // LM head with model_config::fp8_lm_head

  std::int64_t elements() const;
};

// Every tensor the model needs, in checkpoint order: embedding, each layer, final norm, LM head
// (absent when tied), q/k/v biases when the config has them.
std::vector<tensor_spec> tensor_specs(const model_config& c);

// Draws: matrices and biases roughly normal with std 0.02 (the usual initializer range); norm
// weights uniform in [0.9, 1.1).
enum class init_kind { normal, near_one };
init_kind init_for(tensor_kind kind);

inline constexpr double init_std = 0.02;

// The stream of one tensor: the model seed mixed with a hash of the tensor's name.
std::uint64_t tensor_seed(std::uint64_t model_seed, std::string_view tensor_name);

// Element `index` of a tensor whose stream is `seed`, before rounding to the storage type. The
// normal draw is the sum of four uniforms (Irwin-Hall), scaled to std 0.02: bounded, symmetric,
// close enough to normal for activations of a realistic scale.
ITERA_HOST_DEVICE inline float init_value(init_kind kind, std::uint64_t seed, std::uint64_t index) {
  if (kind == init_kind::near_one) return 1.0f + 0.1f * gemm::random_value(seed, index);
  const float sum = gemm::random_value(seed, 4 * index) + gemm::random_value(seed, 4 * index + 1) +
                    gemm::random_value(seed, 4 * index + 2) + gemm::random_value(seed, 4 * index + 3);
  // Each uniform on [-1, 1) has variance 1/3; the sum of four has 4/3.
  return sum * static_cast<float>(init_std * 0.8660254037844386);  // 0.02 / sqrt(4/3)
}

// `v` rounded to nearest even in `storage` and widened back. fp32 leaves it; fp8 needs a scale
// (round_tensor below): usage_error.
float round_to_storage(dtype storage, float v);
void round_to_storage(dtype storage, std::vector<float>& values);

// v rounded to nearest even in a 16-bit type, as its bits (fp16 past 65504: infinity), and such
// bits widened back: for `type` fp16, else bf16 (the callers have refused the other types).
inline std::uint16_t to_16bit(dtype type, float v) {
  return type == dtype::fp16 ? gemm::numeric::float_to_fp16(v) : gemm::numeric::float_to_bf16(v);
}
inline float from_16bit(dtype type, std::uint16_t bits) {
  return type == dtype::fp16 ? gemm::numeric::fp16_to_float(bits) : gemm::numeric::bf16_to_float(bits);
}

// fp8 e4m3 weights (model.hpp: weight_bytes): the layer projections hold one fp32 scale per
// output channel (row), scale = max |row| / 448 (1 for a row of zeros), and each value as the
// e4m3 code of value / scale (round to nearest even, saturating); so does the LM head where
// model_config::fp8_lm_head asks (tensor_spec::fp8); everything else stays bf16.
// Quantised from the bf16 values, the same arithmetic on the host and on the device, so a cuda
// engine generating its fp8 weights holds the codes this host code computes.
inline constexpr float fp8_e4m3_max = 448.0f;
ITERA_HOST_DEVICE inline float fp8_row_scale(float row_absmax) {
  return row_absmax > 0.0f ? row_absmax / fp8_e4m3_max : 1.0f;
}
// Codes [rows][cols] of a row-major matrix, and returns its scales [rows].
std::vector<float> quantise_fp8_rows(std::span<const float> values, std::int64_t cols, std::uint8_t* codes);
// A tensor's values rounded to what `storage` holds for it, widened to fp32: with fp8_e4m3, a
// matrix tensor_spec::fp8 marks becomes scale x e4m3 code (from its bf16 values), the rest bf16.
void round_tensor(const tensor_spec& spec, dtype storage, std::vector<float>& values);

struct layer_weights {
  std::vector<float> q_proj, k_proj, v_proj, o_proj;
  std::vector<float> q_bias, k_bias, v_bias;  // empty unless attention_bias
  std::vector<float> gate_proj, up_proj, down_proj;
  std::vector<float> input_norm, post_attention_norm;
};

// All weights as fp32 arrays holding values representable in `storage`.
struct model_weights {
  model_config config;
  dtype storage = dtype::bf16;
  std::vector<float> embedding;  // [vocab, hidden]
  std::vector<layer_weights> layers;
  std::vector<float> final_norm;
  std::vector<float> lm_head;  // [vocab, hidden]; empty when tied

  const std::vector<float>& lm_head_matrix() const { return config.tie_embeddings ? embedding : lm_head; }
  std::vector<float>& tensor(const tensor_spec& spec);
  const std::vector<float>& tensor(const tensor_spec& spec) const;
};

// Every tensor sized for `c` and zero: the loader and tests fill them.
model_weights zero_weights(const model_config& c, dtype storage);

std::vector<float> random_tensor(const tensor_spec& spec, dtype storage, std::uint64_t model_seed);
model_weights random_weights(const model_config& c, dtype storage, std::uint64_t model_seed);

}  // namespace itera::llm
