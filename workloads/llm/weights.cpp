#include "workloads/llm/weights.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "workloads/gemm/numeric.hpp"

namespace itera::llm {

std::int64_t tensor_spec::elements() const {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

namespace {

// The layer projections: what fp8_e4m3 weights always store as codes.
bool is_projection(tensor_kind kind) {
  switch (kind) {
    case tensor_kind::q_proj:
    case tensor_kind::k_proj:
    case tensor_kind::v_proj:
    case tensor_kind::o_proj:
    case tensor_kind::gate_proj:
    case tensor_kind::up_proj:
    case tensor_kind::down_proj: return true;
    default: return false;
  }
}

}  // namespace

std::vector<tensor_spec> tensor_specs(const model_config& c) {
  std::vector<tensor_spec> specs;
  const auto add = [&](std::string name, tensor_kind kind, std::int64_t layer, std::vector<std::int64_t> shape) {
    specs.push_back({std::move(name), kind, layer, std::move(shape), is_projection(kind)});
  };
  add("model.embed_tokens.weight", tensor_kind::embedding, -1, {c.vocab, c.hidden});
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const auto p = fmt::format("model.layers.{}.", l);
    add(p + "self_attn.q_proj.weight", tensor_kind::q_proj, l, {c.q_dim(), c.hidden});
    add(p + "self_attn.k_proj.weight", tensor_kind::k_proj, l, {c.kv_dim(), c.hidden});
    add(p + "self_attn.v_proj.weight", tensor_kind::v_proj, l, {c.kv_dim(), c.hidden});
    if (c.attention_bias) {
      add(p + "self_attn.q_proj.bias", tensor_kind::q_bias, l, {c.q_dim()});
      add(p + "self_attn.k_proj.bias", tensor_kind::k_bias, l, {c.kv_dim()});
      add(p + "self_attn.v_proj.bias", tensor_kind::v_bias, l, {c.kv_dim()});
    }
    add(p + "self_attn.o_proj.weight", tensor_kind::o_proj, l, {c.hidden, c.q_dim()});
    add(p + "mlp.gate_proj.weight", tensor_kind::gate_proj, l, {c.intermediate, c.hidden});
    add(p + "mlp.up_proj.weight", tensor_kind::up_proj, l, {c.intermediate, c.hidden});
    add(p + "mlp.down_proj.weight", tensor_kind::down_proj, l, {c.hidden, c.intermediate});
    add(p + "input_layernorm.weight", tensor_kind::input_norm, l, {c.hidden});
    add(p + "post_attention_layernorm.weight", tensor_kind::post_attention_norm, l, {c.hidden});
  }
  add("model.norm.weight", tensor_kind::final_norm, -1, {c.hidden});
  if (!c.tie_embeddings) {
    add("lm_head.weight", tensor_kind::lm_head, -1, {c.vocab, c.hidden});
    specs.back().fp8 = c.fp8_lm_head;
  }
  return specs;
}

init_kind init_for(tensor_kind kind) {
  switch (kind) {
    case tensor_kind::input_norm:
    case tensor_kind::post_attention_norm:
    case tensor_kind::final_norm: return init_kind::near_one;
    default: return init_kind::normal;
  }
}

std::uint64_t tensor_seed(std::uint64_t model_seed, std::string_view tensor_name) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a: stable across platforms and builds
  for (const char ch : tensor_name) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001b3ull;
  }
  return h ^ (model_seed * 0x9E3779B97F4A7C15ull);
}

float round_to_storage(dtype storage, float v) {
  switch (storage) {
    case dtype::fp32: return v;
    case dtype::bf16:
    case dtype::fp16: return from_16bit(storage, to_16bit(storage, v));
    case dtype::fp8_e4m3: break;
  }
  throw usage_error("the cpu reference holds weights in fp32, fp16 or bf16; fp8_e4m3 weights need per-channel "
                    "scales and are quantised by the cuda engine");
}

void round_to_storage(dtype storage, std::vector<float>& values) {
  if (storage == dtype::fp32) return;
  (void)round_to_storage(storage, 0.0f);  // refuses fp8 even for an empty tensor
  for (auto& v : values) v = round_to_storage(storage, v);
}

std::vector<float> quantise_fp8_rows(std::span<const float> values, std::int64_t cols, std::uint8_t* codes) {
  if (cols < 1 || values.size() % static_cast<std::size_t>(cols) != 0)
    throw std::logic_error(fmt::format("quantise_fp8_rows: {} values are not rows of {}", values.size(), cols));
  const std::size_t n = static_cast<std::size_t>(cols), rows = values.size() / n;
  std::vector<float> scales(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = values.data() + r * n;
    float absmax = 0.0f;
    for (std::size_t i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(row[i]));
    const float scale = fp8_row_scale(absmax);
    scales[r] = scale;
    if (codes)
      for (std::size_t i = 0; i < n; ++i) codes[r * n + i] = gemm::numeric::float_to_fp8_e4m3(row[i] / scale);
  }
  return scales;
}

void round_tensor(const tensor_spec& spec, dtype storage, std::vector<float>& values) {
  if (storage == dtype::fp16) {
    // fp16 tops out at 65504: a larger weight would become infinity (in the holder, so on every
    // engine). Refused here, where the tensor has a name.
    for (float& v : values) {
      const float r = round_to_storage(dtype::fp16, v);
      if (std::isfinite(v) && !std::isfinite(r))
        throw usage_error(fmt::format("tensor '{}' holds {}, past fp16's largest value (65504): load it as bf16 "
                                      "(weights=bf16) or fp32",
                                      spec.name, v));
      v = r;
    }
    return;
  }
  if (storage != dtype::fp8_e4m3) {
    round_to_storage(storage, values);
    return;
  }
  round_to_storage(dtype::bf16, values);
  if (!spec.fp8) return;
  const std::int64_t cols = spec.shape.back();
  std::vector<std::uint8_t> codes(values.size());
  const auto scales = quantise_fp8_rows(values, cols, codes.data());
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = scales[i / static_cast<std::size_t>(cols)] * gemm::numeric::fp8_e4m3_to_float(codes[i]);
}

std::vector<float>& model_weights::tensor(const tensor_spec& spec) {
  auto layer = [&]() -> layer_weights& { return layers.at(static_cast<std::size_t>(spec.layer)); };
  switch (spec.kind) {
    case tensor_kind::embedding: return embedding;
    case tensor_kind::q_proj: return layer().q_proj;
    case tensor_kind::k_proj: return layer().k_proj;
    case tensor_kind::v_proj: return layer().v_proj;
    case tensor_kind::o_proj: return layer().o_proj;
    case tensor_kind::q_bias: return layer().q_bias;
    case tensor_kind::k_bias: return layer().k_bias;
    case tensor_kind::v_bias: return layer().v_bias;
    case tensor_kind::gate_proj: return layer().gate_proj;
    case tensor_kind::up_proj: return layer().up_proj;
    case tensor_kind::down_proj: return layer().down_proj;
    case tensor_kind::input_norm: return layer().input_norm;
    case tensor_kind::post_attention_norm: return layer().post_attention_norm;
    case tensor_kind::final_norm: return final_norm;
    case tensor_kind::lm_head: return lm_head;
  }
  throw std::logic_error("model_weights::tensor: unknown kind");
}

const std::vector<float>& model_weights::tensor(const tensor_spec& spec) const {
  return const_cast<model_weights&>(*this).tensor(spec);
}

model_weights zero_weights(const model_config& c, dtype storage) {
  validate(c);
  if (storage != dtype::fp8_e4m3) (void)round_to_storage(storage, 0.0f);
  model_weights w;
  w.config = c;
  w.storage = storage;
  w.layers.resize(static_cast<std::size_t>(c.layers));
  for (const auto& spec : tensor_specs(c)) w.tensor(spec).assign(static_cast<std::size_t>(spec.elements()), 0.0f);
  return w;
}

std::vector<float> random_tensor(const tensor_spec& spec, dtype storage, std::uint64_t model_seed) {
  const auto seed = tensor_seed(model_seed, spec.name);
  const auto kind = init_for(spec.kind);
  std::vector<float> values(static_cast<std::size_t>(spec.elements()));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = init_value(kind, seed, i);
  round_tensor(spec, storage, values);
  return values;
}

model_weights random_weights(const model_config& c, dtype storage, std::uint64_t model_seed) {
  auto w = zero_weights(c, storage);
  for (const auto& spec : tensor_specs(c)) w.tensor(spec) = random_tensor(spec, storage, model_seed);
  return w;
}

}  // namespace itera::llm
