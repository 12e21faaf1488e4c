#pragma once
// A Hugging Face checkpoint folder: config.json and one or several *.safetensors files holding the
// tensors under their Hugging Face names (weights.hpp: tensor_specs). Opening a checkpoint reads
// the config and every file's header and checks that each tensor the config implies is present
// once, with its shape and a readable dtype, before any data is read. Errors name the file, the
// tensor, and the expected against the found shape or dtype.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/llm/model.hpp"
#include "workloads/llm/safetensors.hpp"
#include "workloads/llm/weights.hpp"

namespace itera::llm {

// model_type llama, mistral or qwen2 with hidden_act silu. Missing optional fields take the
// transformers defaults (num_key_value_heads = heads, head_dim = hidden / heads, rope_theta 10000,
// rms_norm_eps 1e-6, max_position_embeddings 2048, tie_word_embeddings false). qwen2 has q/k/v
// biases; llama's attention_bias would add an o_proj bias too and is refused. rope_scaling: none,
// "default" or "llama3" (others refused). A sliding window caps max_position at the window, inside
// which full attention computes the same thing. Newer configs' "rope_parameters" is read as well.
// input_error naming the file and the field.
model_config read_hf_config(const std::filesystem::path& config_json);

// The config.json that read_hf_config reads back as `c` (LlamaForCausalLM, or Qwen2ForCausalLM
// when the config has attention biases).
nlohmann::ordered_json hf_config_json(const model_config& c, dtype torch_dtype);

class checkpoint {
 public:
  explicit checkpoint(const std::filesystem::path& folder);
  // find() answers point into m_files: a copy would point into the original, a move keeps them.
  checkpoint(const checkpoint&) = delete;
  checkpoint& operator=(const checkpoint&) = delete;
  checkpoint(checkpoint&&) = default;
  checkpoint& operator=(checkpoint&&) = default;

  const model_config& config() const { return m_config; }
  const std::filesystem::path& folder() const { return m_folder; }
  const std::vector<safetensors_file>& files() const { return m_files; }

  struct located {
    const safetensors_file* file = nullptr;
    const safetensors_entry* entry = nullptr;
  };
  // Where the tensor of `spec` is stored; present, shaped and typed as checked on opening.
  located find(const tensor_spec& spec) const;

  // All weights widened to fp32 and rounded to `storage` (identity when storage is what the file
  // holds, or wider). fp8_lm_head: the precision choice of model_config::fp8_lm_head, set on the
  // weights' config (with fp8_e4m3 storage the LM head is rounded as a projection).
  model_weights load(dtype storage, bool fp8_lm_head = false) const;

 private:
  std::filesystem::path m_folder;
  model_config m_config;
  std::vector<safetensors_file> m_files;
  std::vector<located> m_located;  // one per tensor_specs(m_config) entry, in that order
};

inline model_weights load_checkpoint(const std::filesystem::path& folder, dtype storage, bool fp8_lm_head = false) {
  return checkpoint(folder).load(storage, fp8_lm_head);
}

// Writes config.json and the weights as `file_dtype`: model.safetensors, or `shards` files
// model-0000i-of-0000n.safetensors with the tensors split among them in order.
void write_checkpoint(const std::filesystem::path& folder, const model_weights& w, dtype file_dtype, int shards = 1);

}  // namespace itera::llm
