#pragma once
// Weights of the vision encoder and projector: Hugging Face tensor names and shapes, deterministic
// random values, checkpoint folders (read and written), and the fp32 holder the cpu reference
// computes from. Mirrors workloads/llm/weights.hpp and checkpoint.hpp, and reuses their safetensors
// reader, tensor seeds and storage rounding.
//
// Names (transformers' CLIPVisionModel / SiglipVisionModel; CLIPModel and SiglipModel use the same
// "vision_model." prefix; LLaVA adds "vision_tower." or "model.vision_tower." before it):
//   vision_model.embeddings.class_embedding                  [D]            class_token
//   vision_model.embeddings.patch_embedding.weight           [D, C, P, P]   (bias [D]: patch_bias)
//   vision_model.embeddings.position_embedding.weight        [T, D]
//   vision_model.pre_layrnorm.{weight,bias}                  [D]            norm pre (CLIP's spelling)
//   vision_model.encoder.layers.L.self_attn.{q,k,v,out}_proj.{weight [D, D], bias [D]}
//   vision_model.encoder.layers.L.layer_norm{1,2}.{weight,bias}              [D]
//   vision_model.encoder.layers.L.mlp.fc1.{weight [M, D], bias [M]}, fc2.{weight [D, M], bias [D]}
//   vision_model.post_layernorm.{weight,bias}                [D]            norm post
//   multi_modal_projector.linear_1.{weight [H, D], bias [H]}, linear_2.{weight [H, H], bias [H]}
// The patch weight is held flattened [D, C*P*P]: element c*P*P + dy*P + dx of a row is the order of
// preprocess.hpp's patchify, so the patch embedding is one GEMM.
//
// Random values are a pure function of (seed, tensor name, element index), as in the llm workload
// (vit_init_value is host-device, so a GPU engine can generate them in place), rounded to the
// storage type before the cpu sees them. Scales (a trained model's order of magnitude, so attention
// is neither uniform nor one-hot): a matrix [out, in] normal with std 1/sqrt(in); biases and
// LayerNorm biases std 0.02; LayerNorm weights uniform in [0.9, 1.1); class and position embeddings
// std 1/sqrt(D) (CLIP's class_embedding init).
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/gemm/gemm.hpp"  // random_value, ITERA_HOST_DEVICE
#include "workloads/llm/safetensors.hpp"
#include "workloads/multimodal/vit_model.hpp"

namespace itera::mm {

enum class vit_tensor {
  class_embedding, patch_weight, patch_bias, position, pre_norm_weight, pre_norm_bias,
  q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, out_weight, out_bias,
  norm1_weight, norm1_bias, norm2_weight, norm2_bias, fc1_weight, fc1_bias, fc2_weight, fc2_bias,
  post_norm_weight, post_norm_bias,
  projector_fc1_weight, projector_fc1_bias, projector_fc2_weight, projector_fc2_bias,
};

struct vit_tensor_spec {
  std::string name;  // canonical: "vision_model.encoder.layers.3.mlp.fc1.weight"
  vit_tensor kind = vit_tensor::class_embedding;
  std::int64_t layer = -1;          // -1 outside the layers
  std::vector<std::int64_t> shape;  // as in the checkpoint (the patch weight 4-D)

  std::int64_t elements() const;
  bool projector() const;
};

inline constexpr std::string_view vit_vision_prefix = "vision_model.";
inline constexpr std::string_view vit_projector_prefix = "multi_modal_projector.";

// Every tensor the config runs, in checkpoint order; the projector's last.
std::vector<vit_tensor_spec> vit_tensor_specs(const vit_config& c);

// How a tensor is drawn: normal (Irwin-Hall sum of four uniforms, bounded, scaled to std) or
// uniform in [0.9, 1.1) (LayerNorm weights).
struct vit_init {
  bool near_one = false;
  float std = 0.0f;
};
vit_init init_for(const vit_tensor_spec& spec, const vit_config& c);

ITERA_HOST_DEVICE inline float vit_init_value(vit_init init, std::uint64_t seed, std::uint64_t index) {
  if (init.near_one) return 1.0f + 0.1f * gemm::random_value(seed, index);
  const float sum = gemm::random_value(seed, 4 * index) + gemm::random_value(seed, 4 * index + 1) +
                    gemm::random_value(seed, 4 * index + 2) + gemm::random_value(seed, 4 * index + 3);
  return sum * (init.std * 0.8660254037844386f);  // the sum has variance 4/3: std / sqrt(4/3)
}

struct vit_layer_weights {
  std::vector<float> q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, out_weight, out_bias;
  std::vector<float> norm1_weight, norm1_bias, norm2_weight, norm2_bias;
  std::vector<float> fc1_weight, fc1_bias, fc2_weight, fc2_bias;
};

// All weights as fp32 arrays holding values representable in `storage` (bf16, fp16 or fp32).
// Tensors the config does not run are empty.
struct vit_weights {
  vit_config config;
  dtype storage = dtype::bf16;
  std::vector<float> class_embedding, patch_weight, patch_bias, position;
  std::vector<float> pre_norm_weight, pre_norm_bias;
  std::vector<vit_layer_weights> layers;
  std::vector<float> post_norm_weight, post_norm_bias;
  std::vector<float> projector_fc1_weight, projector_fc1_bias, projector_fc2_weight, projector_fc2_bias;

  std::vector<float>& tensor(const vit_tensor_spec& spec);
  const std::vector<float>& tensor(const vit_tensor_spec& spec) const;
};

// q, k and v of one layer as one [3D, D] matrix and one [3D] bias, in that order: the qkv stage's
// single GEMM (vit_model.hpp: vit_stages).
struct fused_qkv {
  std::vector<float> weight, bias;
};
fused_qkv fuse_qkv(const vit_layer_weights& layer);

// Every tensor sized for `c` and zero: the loader and tests fill them. usage_error for fp8 storage.
vit_weights zero_vit_weights(const vit_config& c, dtype storage);
std::vector<float> random_vit_tensor(const vit_tensor_spec& spec, const vit_config& c, dtype storage,
                                     std::uint64_t seed);
vit_weights random_vit_weights(const vit_config& c, dtype storage, std::uint64_t seed);

// ---------------------------------------------------------------------------------------------
// Checkpoint folders: config.json + *.safetensors.

// The projector's shape where config.json does not give it (a vision model alone has no projector).
struct projector_shape {
  std::int64_t llm_hidden = 4096;
  feature_select select = feature_select::patches;
};

// config.json of model_type clip_vision_model, siglip_vision_model, clip or siglip (the vision
// part of "vision_config"), or llava (its vision_config, text_config.hidden_size as llm_hidden,
// vision_feature_layer as the number of layers run, vision_feature_select_strategy as select).
// Missing fields take transformers' defaults for the model type (CLIPVisionConfig: 768 wide, 12
// layers and heads, MLP 3072, 224 px, patch 32, quick_gelu, eps 1e-5; SiglipVisionConfig: the same
// but patch 16, gelu_pytorch_tanh, eps 1e-6). CLIP: class token, no patch bias, norm pre; SigLIP:
// no class token, patch bias, norm post; inside LLaVA the features are a hidden state of the
// encoder, before any post LayerNorm (norm pre for CLIP, none for SigLIP). input_error naming the
// file and the field.
vit_config read_vit_hf_config(const std::filesystem::path& config_json, const projector_shape& fallback = {});

// How write_vit_checkpoint lays a folder out: the vision model's own (CLIPVisionModel or
// SiglipVisionModel config, "vision_model." names; the projector's tensors, when written, beside
// them) or LLaVA's (LlavaForConditionalGeneration config with the vision part and text_config's
// hidden_size, "vision_tower.vision_model." and "multi_modal_projector." names).
enum class vit_layout { vision_model, llava };

// The config.json read_vit_hf_config reads back as `c`. usage_error when `c` is not a shape the
// layout can express (CLIP needs a class token, no patch bias and norm pre; SigLIP no class token,
// a patch bias and norm post, or none inside LLaVA; a vision_model layout keeps select and
// llm_hidden outside the file).
nlohmann::ordered_json vit_hf_config_json(const vit_config& c, dtype torch_dtype, vit_layout layout);

class vit_checkpoint {
 public:
  // Reads config.json and every *.safetensors header; finds where the vision tensors live (the
  // prefix before "vision_model.") and the projector's (optional for a vision model, required for
  // LLaVA); checks every tensor the config runs is present once, with its shape and a BF16, F16
  // or F32 dtype. Tensors it does not run (a text tower, SigLIP's pooling head, CLIP's
  // post_layernorm, LLaVA's language model) are left alone. input_error naming the folder or file,
  // the tensor, and the expected against the found shape or dtype.
  explicit vit_checkpoint(const std::filesystem::path& folder, const projector_shape& fallback = {});
  vit_checkpoint(const vit_checkpoint&) = delete;
  vit_checkpoint& operator=(const vit_checkpoint&) = delete;
  vit_checkpoint(vit_checkpoint&&) = default;
  vit_checkpoint& operator=(vit_checkpoint&&) = default;

  const vit_config& config() const { return m_config; }
  const std::filesystem::path& folder() const { return m_folder; }
  bool has_projector() const { return m_has_projector; }
  // The prefix found before "vision_model." ("" for CLIPVisionModel, "vision_tower." for LLaVA).
  const std::string& vision_prefix() const { return m_vision_prefix; }
  // The name a canonical tensor has in this checkpoint's files.
  std::string stored_name(const vit_tensor_spec& spec) const;

  // Weights widened to fp32 and rounded to `storage`; the projector from the files, or random from
  // `projector_seed` (random_vit_tensor) when the folder has none.
  vit_weights load(dtype storage, std::uint64_t projector_seed = 1) const;

 private:
  struct located {
    const llm::safetensors_file* file = nullptr;
    const llm::safetensors_entry* entry = nullptr;
  };
  std::filesystem::path m_folder;
  vit_config m_config;
  std::vector<llm::safetensors_file> m_files;
  std::string m_vision_prefix, m_projector_prefix;
  bool m_bare_vision = false;  // names without "vision_model." (transformers 5 saves vision models so)
  bool m_has_projector = false;
  std::vector<located> m_located;  // one per vit_tensor_specs(m_config) entry; empty file for a missing projector
};

// Writes config.json and model.safetensors (tensors as `file_dtype`: bf16, fp16 or fp32); with
// the vision_model layout the projector is written only when `with_projector`.
void write_vit_checkpoint(const std::filesystem::path& folder, const vit_weights& w, dtype file_dtype,
                          vit_layout layout = vit_layout::vision_model, bool with_projector = true);

}  // namespace itera::mm
