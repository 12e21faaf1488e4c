#include "workloads/multimodal/vit_weights.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "itera/core/errors.hpp"
#include "workloads/llm/weights.hpp"  // tensor_seed, round_to_storage

namespace itera::mm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::int64_t vit_tensor_spec::elements() const {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

bool vit_tensor_spec::projector() const {
  switch (kind) {
    case vit_tensor::projector_fc1_weight:
    case vit_tensor::projector_fc1_bias:
    case vit_tensor::projector_fc2_weight:
    case vit_tensor::projector_fc2_bias: return true;
    default: return false;
  }
}

std::vector<vit_tensor_spec> vit_tensor_specs(const vit_config& c) {
  validate(c);
  std::vector<vit_tensor_spec> specs;
  const std::string v(vit_vision_prefix), pj(vit_projector_prefix);
  const auto add = [&](std::string name, vit_tensor kind, std::int64_t layer, std::vector<std::int64_t> shape) {
    specs.push_back({std::move(name), kind, layer, std::move(shape)});
  };
  const std::int64_t d = c.hidden;
  if (c.class_token) add(v + "embeddings.class_embedding", vit_tensor::class_embedding, -1, {d});
  add(v + "embeddings.patch_embedding.weight", vit_tensor::patch_weight, -1, {d, c.channels, c.patch, c.patch});
  if (c.patch_bias) add(v + "embeddings.patch_embedding.bias", vit_tensor::patch_bias, -1, {d});
  add(v + "embeddings.position_embedding.weight", vit_tensor::position, -1, {c.tokens(), d});
  if (c.pre_norm()) {
    add(v + "pre_layrnorm.weight", vit_tensor::pre_norm_weight, -1, {d});
    add(v + "pre_layrnorm.bias", vit_tensor::pre_norm_bias, -1, {d});
  }
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const auto p = fmt::format("{}encoder.layers.{}.", v, l);
    add(p + "self_attn.q_proj.weight", vit_tensor::q_weight, l, {d, d});
    add(p + "self_attn.q_proj.bias", vit_tensor::q_bias, l, {d});
    add(p + "self_attn.k_proj.weight", vit_tensor::k_weight, l, {d, d});
    add(p + "self_attn.k_proj.bias", vit_tensor::k_bias, l, {d});
    add(p + "self_attn.v_proj.weight", vit_tensor::v_weight, l, {d, d});
    add(p + "self_attn.v_proj.bias", vit_tensor::v_bias, l, {d});
    add(p + "self_attn.out_proj.weight", vit_tensor::out_weight, l, {d, d});
    add(p + "self_attn.out_proj.bias", vit_tensor::out_bias, l, {d});
    add(p + "layer_norm1.weight", vit_tensor::norm1_weight, l, {d});
    add(p + "layer_norm1.bias", vit_tensor::norm1_bias, l, {d});
    add(p + "mlp.fc1.weight", vit_tensor::fc1_weight, l, {c.mlp, d});
    add(p + "mlp.fc1.bias", vit_tensor::fc1_bias, l, {c.mlp});
    add(p + "mlp.fc2.weight", vit_tensor::fc2_weight, l, {d, c.mlp});
    add(p + "mlp.fc2.bias", vit_tensor::fc2_bias, l, {d});
    add(p + "layer_norm2.weight", vit_tensor::norm2_weight, l, {d});
    add(p + "layer_norm2.bias", vit_tensor::norm2_bias, l, {d});
  }
  if (c.post_norm()) {
    add(v + "post_layernorm.weight", vit_tensor::post_norm_weight, -1, {d});
    add(v + "post_layernorm.bias", vit_tensor::post_norm_bias, -1, {d});
  }
  add(pj + "linear_1.weight", vit_tensor::projector_fc1_weight, -1, {c.llm_hidden, d});
  add(pj + "linear_1.bias", vit_tensor::projector_fc1_bias, -1, {c.llm_hidden});
  add(pj + "linear_2.weight", vit_tensor::projector_fc2_weight, -1, {c.llm_hidden, c.llm_hidden});
  add(pj + "linear_2.bias", vit_tensor::projector_fc2_bias, -1, {c.llm_hidden});
  return specs;
}

vit_init init_for(const vit_tensor_spec& spec, const vit_config& c) {
  switch (spec.kind) {
    case vit_tensor::pre_norm_weight:
    case vit_tensor::norm1_weight:
    case vit_tensor::norm2_weight:
    case vit_tensor::post_norm_weight: return {true, 0.0f};
    case vit_tensor::class_embedding:
    case vit_tensor::position: return {false, static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.hidden)))};
    case vit_tensor::patch_weight:
    case vit_tensor::q_weight:
    case vit_tensor::k_weight:
    case vit_tensor::v_weight:
    case vit_tensor::out_weight:
    case vit_tensor::fc1_weight:
    case vit_tensor::fc2_weight:
    case vit_tensor::projector_fc1_weight:
    case vit_tensor::projector_fc2_weight: {
      // Fan-in: every dimension after the first ([D, C, P, P] -> C*P*P).
      const std::int64_t fan_in = spec.elements() / spec.shape.front();
      return {false, static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)))};
    }
    default: return {false, 0.02f};  // biases, LayerNorm biases
  }
}

std::vector<float>& vit_weights::tensor(const vit_tensor_spec& spec) {
  auto layer = [&]() -> vit_layer_weights& {
    if (spec.layer < 0 || spec.layer >= static_cast<std::int64_t>(layers.size()))
      throw std::logic_error(fmt::format("vit_weights: tensor '{}' of layer {} outside 0..{}", spec.name, spec.layer,
                                         layers.size()));
    return layers[static_cast<std::size_t>(spec.layer)];
  };
  switch (spec.kind) {
    case vit_tensor::class_embedding: return class_embedding;
    case vit_tensor::patch_weight: return patch_weight;
    case vit_tensor::patch_bias: return patch_bias;
    case vit_tensor::position: return position;
    case vit_tensor::pre_norm_weight: return pre_norm_weight;
    case vit_tensor::pre_norm_bias: return pre_norm_bias;
    case vit_tensor::q_weight: return layer().q_weight;
    case vit_tensor::q_bias: return layer().q_bias;
    case vit_tensor::k_weight: return layer().k_weight;
    case vit_tensor::k_bias: return layer().k_bias;
    case vit_tensor::v_weight: return layer().v_weight;
    case vit_tensor::v_bias: return layer().v_bias;
    case vit_tensor::out_weight: return layer().out_weight;
    case vit_tensor::out_bias: return layer().out_bias;
    case vit_tensor::norm1_weight: return layer().norm1_weight;
    case vit_tensor::norm1_bias: return layer().norm1_bias;
    case vit_tensor::norm2_weight: return layer().norm2_weight;
    case vit_tensor::norm2_bias: return layer().norm2_bias;
    case vit_tensor::fc1_weight: return layer().fc1_weight;
    case vit_tensor::fc1_bias: return layer().fc1_bias;
    case vit_tensor::fc2_weight: return layer().fc2_weight;
    case vit_tensor::fc2_bias: return layer().fc2_bias;
    case vit_tensor::post_norm_weight: return post_norm_weight;
    case vit_tensor::post_norm_bias: return post_norm_bias;
    case vit_tensor::projector_fc1_weight: return projector_fc1_weight;
    case vit_tensor::projector_fc1_bias: return projector_fc1_bias;
    case vit_tensor::projector_fc2_weight: return projector_fc2_weight;
    case vit_tensor::projector_fc2_bias: return projector_fc2_bias;
  }
  throw std::logic_error("vit_weights::tensor: unknown kind");
}

const std::vector<float>& vit_weights::tensor(const vit_tensor_spec& spec) const {
  return const_cast<vit_weights&>(*this).tensor(spec);
}

fused_qkv fuse_qkv(const vit_layer_weights& layer) {
  fused_qkv f;
  for (const auto* w : {&layer.q_weight, &layer.k_weight, &layer.v_weight}) f.weight.insert(f.weight.end(), w->begin(), w->end());
  for (const auto* b : {&layer.q_bias, &layer.k_bias, &layer.v_bias}) f.bias.insert(f.bias.end(), b->begin(), b->end());
  return f;
}

vit_weights zero_vit_weights(const vit_config& c, dtype storage) {
  validate(c);
  if (storage == dtype::fp8_e4m3)
    throw usage_error("vision encoder weights are stored as bf16, fp16 or fp32 (fp8_e4m3 is not implemented for it)");
  vit_weights w;
  w.config = c;
  w.storage = storage;
  w.layers.resize(static_cast<std::size_t>(c.layers));
  for (const auto& spec : vit_tensor_specs(c)) w.tensor(spec).assign(static_cast<std::size_t>(spec.elements()), 0.0f);
  return w;
}

std::vector<float> random_vit_tensor(const vit_tensor_spec& spec, const vit_config& c, dtype storage,
                                     std::uint64_t seed) {
  const auto stream = llm::tensor_seed(seed, spec.name);
  const auto init = init_for(spec, c);
  std::vector<float> values(static_cast<std::size_t>(spec.elements()));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = vit_init_value(init, stream, i);
  llm::round_to_storage(storage, values);
  return values;
}

vit_weights random_vit_weights(const vit_config& c, dtype storage, std::uint64_t seed) {
  auto w = zero_vit_weights(c, storage);
  for (const auto& spec : vit_tensor_specs(c)) w.tensor(spec) = random_vit_tensor(spec, c, storage, seed);
  return w;
}

// ---------------------------------------------------------------------------------------------
// config.json

namespace {

// Reads one JSON object's fields with errors naming the file and the field's path.
class field_reader {
 public:
  field_reader(const fs::path& path, const json& obj, std::string where)
      : m_path(path), m_json(obj), m_where(std::move(where)) {}

  bool has(const char* key) const { return m_json.contains(key) && !m_json[key].is_null(); }
  const json& raw(const char* key) const { return m_json[key]; }

  std::int64_t integer(const char* key, std::optional<std::int64_t> fallback) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(fmt::format("field '{}' is missing", name(key)));
    }
    const auto& v = m_json[key];
    if (!v.is_number_integer()) fail(fmt::format("field '{}' must be a whole number, found {}", name(key), v.dump()));
    return v.get<std::int64_t>();
  }

  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const auto& v = m_json[key];
    if (!v.is_number()) fail(fmt::format("field '{}' must be a number, found {}", name(key), v.dump()));
    return v.get<double>();
  }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const auto& v = m_json[key];
    if (!v.is_boolean()) fail(fmt::format("field '{}' must be true or false, found {}", name(key), v.dump()));
    return v.get<bool>();
  }

  std::string string(const char* key, std::optional<std::string> fallback) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(fmt::format("field '{}' is missing", name(key)));
    }
    const auto& v = m_json[key];
    if (!v.is_string()) fail(fmt::format("field '{}' must be a string, found {}", name(key), v.dump()));
    return v.get<std::string>();
  }

  field_reader object(const char* key) const {
    if (!has(key)) fail(fmt::format("field '{}' is missing", name(key)));
    if (!m_json[key].is_object()) fail(fmt::format("field '{}' must be an object", name(key)));
    return field_reader(m_path, m_json[key], name(key));
  }

  std::string name(const char* key) const { return m_where.empty() ? std::string(key) : m_where + "." + key; }

  [[noreturn]] void fail(const std::string& what) const {
    throw input_error(fmt::format("{}: {}", m_path.string(), what));
  }

 private:
  const fs::path& m_path;
  const json& m_json;
  std::string m_where;
};

enum class family { clip, siglip };

// The vision fields, with transformers' defaults for the family (CLIPVisionConfig, SiglipVisionConfig).
void read_vision_fields(const field_reader& r, family f, vit_config& c) {
  const bool clip = f == family::clip;
  c.hidden = r.integer("hidden_size", 768);
  c.mlp = r.integer("intermediate_size", 3072);
  c.layers = r.integer("num_hidden_layers", 12);
  c.heads = r.integer("num_attention_heads", 12);
  c.channels = r.integer("num_channels", 3);
  c.image = r.integer("image_size", 224);
  c.patch = r.integer("patch_size", clip ? 32 : 16);
  const std::string act = r.string("hidden_act", std::string(clip ? "quick_gelu" : "gelu_pytorch_tanh"));
  try {
    c.activation = parse_activation(act);
  } catch (const usage_error& e) {
    r.fail(fmt::format("field '{}': {}", r.name("hidden_act"), e.what()));
  }
  c.layer_norm_eps = r.number("layer_norm_eps", clip ? 1e-5 : 1e-6);
  c.class_token = clip;
  c.patch_bias = !clip;
  c.norm = clip ? vit_norm::pre : vit_norm::post;
}

family family_of(const field_reader& r, const std::string& model_type, const char* field) {
  if (model_type == "clip_vision_model" || model_type == "clip") return family::clip;
  if (model_type == "siglip_vision_model" || model_type == "siglip") return family::siglip;
  r.fail(fmt::format("{} '{}' is not a vision encoder this reads (clip_vision_model, siglip_vision_model, clip, "
                     "siglip, or llava with one of the first two as vision_config)",
                     field, model_type));
}

// `llava` tells whether the config is LLaVA's (its projector must be in the files).
vit_config read_config(const fs::path& path, const projector_shape& fallback, bool& llava) {
  std::ifstream in(path);
  if (!in) throw input_error(fmt::format("{}: cannot open (a checkpoint folder needs config.json)", path.string()));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw input_error(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
  }
  if (!j.is_object()) throw input_error(fmt::format("{}: not a JSON object", path.string()));
  const field_reader root(path, j, "");

  vit_config c;
  c.name = path.parent_path().filename().string();
  if (c.name.empty()) c.name = "checkpoint";
  c.llm_hidden = fallback.llm_hidden;
  c.select = fallback.select;

  const std::string model_type = root.string("model_type", std::nullopt);
  llava = model_type == "llava";
  if (llava) {
    const field_reader vision = root.object("vision_config");
    // transformers' LlavaConfig takes a vision_config without model_type as CLIP's.
    const family f = family_of(vision, vision.string("model_type", std::string("clip_vision_model")),
                               "vision_config.model_type");
    read_vision_fields(vision, f, c);
    c.norm = f == family::clip ? vit_norm::pre : vit_norm::none;  // a hidden state: no post LayerNorm
    c.llm_hidden = root.has("text_config") ? root.object("text_config").integer("hidden_size", 4096) : 4096;
    const std::string act = root.string("projector_hidden_act", std::string("gelu"));
    if (act != "gelu")
      root.fail(fmt::format("field 'projector_hidden_act' is '{}'; the projector implemented is LLaVA-1.5's with gelu",
                            act));
    if (!root.boolean("multimodal_projector_bias", true))
      root.fail("field 'multimodal_projector_bias' is false; the projector implemented has biases");
    if (root.has("vision_feature_layer") && !root.raw("vision_feature_layer").is_number_integer())
      root.fail(fmt::format("field 'vision_feature_layer' is {}; one layer (a whole number) is supported, not a list "
                            "of layers concatenated",
                            root.raw("vision_feature_layer").dump()));
    const std::int64_t layer = root.integer("vision_feature_layer", -2);
    const std::int64_t run = layer < 0 ? c.layers + 1 + layer : layer;
    if (run < 1 || run > c.layers)
      root.fail(fmt::format("field 'vision_feature_layer' {} selects hidden state {} of 0..{} (the encoder has {} "
                            "layers); it must select the output of one of them",
                            layer, run, c.layers, c.layers));
    c.layers = run;
    const std::string strategy = root.string("vision_feature_select_strategy", std::string("default"));
    if (strategy == "default") {
      if (f == family::siglip)
        root.fail("field 'vision_feature_select_strategy' is 'default', which drops the first token as a class token; "
                  "a SigLIP encoder has none (use 'full')");
      c.select = feature_select::patches;
    } else if (strategy == "full") {
      c.select = feature_select::all;
    } else {
      root.fail(fmt::format("field 'vision_feature_select_strategy' is '{}': choose default or full", strategy));
    }
  } else {
    const family f = family_of(root, model_type, "model_type");
    if (model_type == "clip" || model_type == "siglip") read_vision_fields(root.object("vision_config"), f, c);
    else read_vision_fields(root, f, c);
  }
  try {
    validate(c);
  } catch (const usage_error& e) {
    root.fail(e.what());
  }
  return c;
}

}  // namespace

vit_config read_vit_hf_config(const fs::path& path, const projector_shape& fallback) {
  bool llava = false;
  return read_config(path, fallback, llava);
}

nlohmann::ordered_json vit_hf_config_json(const vit_config& c, dtype torch_dtype, vit_layout layout) {
  validate(c);
  const bool llava = layout == vit_layout::llava;
  family f;
  if (c.class_token && !c.patch_bias) f = family::clip;
  else if (!c.class_token && c.patch_bias) f = family::siglip;
  else
    throw usage_error(fmt::format("vision encoder {}: class_token={} with patch_bias={} is neither CLIP (class token, "
                                  "no patch bias) nor SigLIP (no class token, patch bias); no Hugging Face config "
                                  "expresses it",
                                  c.name, c.class_token ? "yes" : "no", c.patch_bias ? "yes" : "no"));
  const vit_norm wanted = f == family::clip ? vit_norm::pre : llava ? vit_norm::none : vit_norm::post;
  if (c.norm != wanted)
    throw usage_error(fmt::format("vision encoder {}: norm={} cannot be written as a {} {}; it needs norm={}", c.name,
                                  norm_name(c.norm), f == family::clip ? "CLIP" : "SigLIP",
                                  llava ? "vision tower inside LLaVA" : "vision model", norm_name(wanted)));
  if (torch_dtype == dtype::fp8_e4m3) throw usage_error("a vision checkpoint is written as bf16, fp16 or fp32");

  nlohmann::ordered_json v;
  v["model_type"] = f == family::clip ? "clip_vision_model" : "siglip_vision_model";
  v["hidden_size"] = c.hidden;
  v["intermediate_size"] = c.mlp;
  v["num_hidden_layers"] = c.layers;
  v["num_attention_heads"] = c.heads;
  v["num_channels"] = c.channels;
  v["image_size"] = c.image;
  v["patch_size"] = c.patch;
  v["hidden_act"] = activation_name(c.activation);
  v["layer_norm_eps"] = c.layer_norm_eps;
  if (f == family::siglip) v["vision_use_head"] = false;  // the pooling head is not part of the features
  const char* torch = torch_dtype == dtype::bf16 ? "bfloat16" : torch_dtype == dtype::fp16 ? "float16" : "float32";
  if (!llava) {
    nlohmann::ordered_json j;
    j["architectures"] = {f == family::clip ? "CLIPVisionModel" : "SiglipVisionModel"};
    for (const auto& [k, x] : v.items()) j[k] = x;
    j["torch_dtype"] = torch;
    return j;
  }
  nlohmann::ordered_json j;
  j["architectures"] = {"LlavaForConditionalGeneration"};
  j["model_type"] = "llava";
  j["vision_config"] = v;
  j["text_config"] = {{"model_type", "llama"}, {"hidden_size", c.llm_hidden}};
  j["projector_hidden_act"] = "gelu";
  j["multimodal_projector_bias"] = true;
  j["vision_feature_layer"] = -1;
  j["vision_feature_select_strategy"] = c.class_token && c.select == feature_select::patches ? "default" : "full";
  j["torch_dtype"] = torch;
  return j;
}

// ---------------------------------------------------------------------------------------------
// Checkpoint folders

vit_checkpoint::vit_checkpoint(const fs::path& folder, const projector_shape& fallback) : m_folder(folder) {
  if (!fs::is_directory(m_folder))
    throw input_error(fmt::format("{}: not a checkpoint folder (no such directory)", m_folder.string()));
  bool llava_config = false;
  m_config = read_config(m_folder / "config.json", fallback, llava_config);

  std::vector<fs::path> paths;
  for (const auto& item : fs::directory_iterator(m_folder))
    if (item.is_regular_file() && item.path().extension() == ".safetensors") paths.push_back(item.path());
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) throw input_error(fmt::format("{}: no *.safetensors files", m_folder.string()));
  m_files.reserve(paths.size());  // m_located points into m_files: no reallocation after this
  for (const auto& p : paths) m_files.emplace_back(p);
  std::vector<std::string> file_names;
  for (const auto& f : m_files) file_names.push_back(f.path().filename().string());

  std::map<std::string, located, std::less<>> by_name;
  for (const auto& f : m_files)
    for (const auto& e : f.entries()) {
      const auto [it, inserted] = by_name.try_emplace(e.name, located{&f, &e});
      if (!inserted)
        throw input_error(fmt::format("{}: tensor '{}' is stored twice, in {} and {}", m_folder.string(), e.name,
                                      it->second.file->path().filename().string(), f.path().filename().string()));
    }

  // Where the vision tensors and the projector's live: the part of a name before the canonical one.
  const auto prefixes_of = [&](std::string_view anchor) {
    std::set<std::string> found;
    for (const auto& [name, where] : by_name)
      if (ends_with(name, anchor)) found.insert(name.substr(0, name.size() - anchor.size()));
    return found;
  };
  std::string vision_anchor = std::string(vit_vision_prefix) + "embeddings.patch_embedding.weight";
  auto vision = prefixes_of(vision_anchor);
  if (vision.empty()) {
    // transformers 5 saves a CLIPVisionModel / SiglipVisionModel without the "vision_model." level.
    const std::string bare = "embeddings.patch_embedding.weight";
    vision = prefixes_of(bare);
    if (!vision.empty()) {
      vision_anchor = bare;
      m_bare_vision = true;
    }
  }
  if (vision.empty())
    throw input_error(fmt::format("{}: no tensor named '{}' (with or without a prefix such as 'vision_tower.'): not "
                                  "a CLIPVisionModel, SiglipVisionModel, CLIP, SigLIP or LLaVA checkpoint (searched "
                                  "{})",
                                  m_folder.string(), vision_anchor, fmt::join(file_names, ", ")));
  if (vision.size() > 1)
    throw input_error(fmt::format("{}: several vision towers ('{}' under prefixes '{}'); this loader reads one",
                                  m_folder.string(), vision_anchor, fmt::join(vision, "', '")));
  m_vision_prefix = *vision.begin();
  const std::string projector_anchor = std::string(vit_projector_prefix) + "linear_1.weight";
  const auto projector = prefixes_of(projector_anchor);
  if (projector.size() > 1)
    throw input_error(fmt::format("{}: several projectors ('{}' under prefixes '{}')", m_folder.string(),
                                  projector_anchor, fmt::join(projector, "', '")));
  m_has_projector = !projector.empty();
  if (m_has_projector) m_projector_prefix = *projector.begin();

  // A vision model's folder with a projector beside it: the projector's width is its own.
  if (m_has_projector && !llava_config) {
    const auto& e = *by_name.at(m_projector_prefix + projector_anchor).entry;
    if (e.shape.size() == 2 && e.shape[0] > 0) m_config.llm_hidden = e.shape[0];
  }

  for (const auto& spec : vit_tensor_specs(m_config)) {
    if (spec.projector() && !m_has_projector) {
      if (llava_config)
        throw input_error(fmt::format("{}: tensor '{}' is missing (expected shape {}; a LLaVA checkpoint holds its "
                                      "projector; searched {})",
                                      m_folder.string(), spec.name, shape_text(spec.shape), fmt::join(file_names, ", ")));
      m_located.push_back({});
      continue;
    }
    const std::string name = stored_name(spec);
    const auto it = by_name.find(name);
    if (it == by_name.end())
      throw input_error(fmt::format("{}: tensor '{}' is missing (expected shape {} from config.json; searched {})",
                                    m_folder.string(), name, shape_text(spec.shape), fmt::join(file_names, ", ")));
    const auto& [file, entry] = it->second;
    if (entry->shape != spec.shape)
      throw input_error(fmt::format("{}: tensor '{}' has shape {}, expected {} from config.json", file->path().string(),
                                    name, shape_text(entry->shape), shape_text(spec.shape)));
    if (entry->dtype != "BF16" && entry->dtype != "F16" && entry->dtype != "F32")
      throw input_error(fmt::format("{}: tensor '{}' has dtype {}, expected BF16, F16 or F32", file->path().string(),
                                    name, entry->dtype));
    m_located.push_back(it->second);
  }
}

std::string vit_checkpoint::stored_name(const vit_tensor_spec& spec) const {
  if (spec.projector()) return m_projector_prefix + spec.name;
  if (m_bare_vision && spec.name.starts_with(vit_vision_prefix)) return m_vision_prefix + spec.name.substr(vit_vision_prefix.size());
  return m_vision_prefix + spec.name;
}

vit_weights vit_checkpoint::load(dtype storage, std::uint64_t projector_seed) const {
  auto w = zero_vit_weights(m_config, storage);
  const auto specs = vit_tensor_specs(m_config);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (!m_located[i].file) {
      w.tensor(specs[i]) = random_vit_tensor(specs[i], m_config, storage, projector_seed);
      continue;
    }
    auto values = m_located[i].file->read_floats(*m_located[i].entry);
    llm::round_to_storage(storage, values);
    w.tensor(specs[i]) = std::move(values);
  }
  return w;
}

void write_vit_checkpoint(const fs::path& folder, const vit_weights& w, dtype file_dtype, vit_layout layout,
                          bool with_projector) {
  const auto config = vit_hf_config_json(w.config, file_dtype, layout);  // refuses what cannot be written
  (void)llm::safetensors_dtype(file_dtype);
  fs::create_directories(folder);
  {
    std::ofstream out(folder / "config.json");
    out << config.dump(2) << '\n';
    if (!out) throw input_error(fmt::format("{}: write failed", (folder / "config.json").string()));
  }
  const bool llava = layout == vit_layout::llava;
  std::vector<std::string> names;
  std::vector<llm::safetensors_tensor_view> views;
  const auto specs = vit_tensor_specs(w.config);
  for (const auto& spec : specs) {
    if (spec.projector() && !llava && !with_projector) continue;
    const auto& values = w.tensor(spec);
    if (static_cast<std::int64_t>(values.size()) != spec.elements())
      throw std::logic_error(fmt::format("write_vit_checkpoint: tensor '{}' holds {} values, its shape needs {}",
                                         spec.name, values.size(), spec.elements()));
    views.push_back({(llava && !spec.projector() ? "vision_tower." : "") + spec.name, spec.shape, values});
  }
  llm::write_safetensors(folder / "model.safetensors", views, file_dtype);
}

}  // namespace itera::mm
