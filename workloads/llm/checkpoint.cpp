#include "workloads/llm/checkpoint.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "itera/core/errors.hpp"

namespace itera::llm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Reads config.json fields with errors that name the file and the field.
class config_reader {
 public:
  config_reader(const fs::path& path, const json& j) : m_path(path), m_json(j) {}

  bool has(const char* key) const { return m_json.contains(key) && !m_json[key].is_null(); }

  std::int64_t integer(const char* key, std::optional<std::int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(fmt::format("field '{}' is missing", key));
    }
    const auto& v = m_json[key];
    if (!v.is_number_integer()) fail(fmt::format("field '{}' must be a whole number, found {}", key, v.dump()));
    return v.get<std::int64_t>();
  }

  double number(const json& obj, const char* key, std::optional<double> fallback = std::nullopt) const {
    if (!obj.contains(key) || obj[key].is_null()) {
      if (fallback) return *fallback;
      fail(fmt::format("field '{}' is missing", key));
    }
    const auto& v = obj[key];
    if (!v.is_number()) fail(fmt::format("field '{}' must be a number, found {}", key, v.dump()));
    return v.get<double>();
  }
  double number(const char* key, std::optional<double> fallback = std::nullopt) const {
    return number(m_json, key, fallback);
  }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const auto& v = m_json[key];
    if (!v.is_boolean()) fail(fmt::format("field '{}' must be true or false, found {}", key, v.dump()));
    return v.get<bool>();
  }

  std::string string(const char* key, std::optional<std::string> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(fmt::format("field '{}' is missing", key));
    }
    const auto& v = m_json[key];
    if (!v.is_string()) fail(fmt::format("field '{}' must be a string, found {}", key, v.dump()));
    return v.get<std::string>();
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw input_error(fmt::format("{}: {}", m_path.string(), what));
  }

 private:
  const fs::path& m_path;
  const json& m_json;
};

std::optional<rope_scaling_llama3> read_rope_scaling(const config_reader& r, const json& s, const char* field) {
  if (s.is_null()) return std::nullopt;
  if (!s.is_object()) r.fail(fmt::format("field '{}' must be an object or null", field));
  std::string type = "default";
  if (s.contains("rope_type") && s["rope_type"].is_string()) type = s["rope_type"].get<std::string>();
  else if (s.contains("type") && s["type"].is_string()) type = s["type"].get<std::string>();
  if (type == "default") return std::nullopt;
  if (type != "llama3")
    r.fail(fmt::format("{} type '{}' is not supported (this engine implements llama3 scaling only)", field, type));
  rope_scaling_llama3 out;
  out.factor = r.number(s, "factor");
  out.low_freq_factor = r.number(s, "low_freq_factor");
  out.high_freq_factor = r.number(s, "high_freq_factor");
  const double original = r.number(s, "original_max_position_embeddings");
  out.original_max_position = static_cast<std::int64_t>(original);
  return out;
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace

model_config read_hf_config(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw input_error(fmt::format("{}: cannot open (a checkpoint folder needs config.json)", path.string()));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw input_error(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
  }
  if (!j.is_object()) throw input_error(fmt::format("{}: not a JSON object", path.string()));
  const config_reader r(path, j);

  const std::string model_type = r.string("model_type");
  if (model_type != "llama" && model_type != "mistral" && model_type != "qwen2")
    r.fail(fmt::format("model_type '{}' is not a decoder this engine runs (llama, mistral, qwen2)", model_type));
  const std::string act = r.string("hidden_act", "silu");
  if (act != "silu") r.fail(fmt::format("hidden_act '{}' is not supported (SwiGLU needs silu)", act));
  if (r.boolean("mlp_bias", false)) r.fail("mlp_bias true is not supported (the MLP projections have no bias)");

  model_config c;
  c.name = path.parent_path().filename().string();
  if (c.name.empty()) c.name = "checkpoint";
  c.hidden = r.integer("hidden_size");
  c.layers = r.integer("num_hidden_layers");
  c.heads = r.integer("num_attention_heads");
  c.kv_heads = r.integer("num_key_value_heads", c.heads);
  c.intermediate = r.integer("intermediate_size");
  c.vocab = r.integer("vocab_size");
  if (!r.has("head_dim") && (c.heads <= 0 || c.hidden % c.heads != 0))
    r.fail(fmt::format("hidden_size {} is not divisible by num_attention_heads {} and no head_dim is given", c.hidden,
                       c.heads));
  c.head_dim = r.integer("head_dim", c.heads > 0 ? c.hidden / c.heads : 0);
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  c.max_position = r.integer("max_position_embeddings", 2048);
  c.tie_embeddings = r.boolean("tie_word_embeddings", false);

  if (model_type == "qwen2") {
    c.attention_bias = true;
  } else if (r.boolean("attention_bias", false)) {
    r.fail("attention_bias true on a llama model adds an o_proj bias, which this engine does not implement "
           "(q/k/v biases come with model_type qwen2)");
  }

  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    c.rope_theta = r.number(j["rope_parameters"], "rope_theta", 10000.0);
    c.rope_scaling = read_rope_scaling(r, j["rope_parameters"], "rope_parameters");
  } else {
    c.rope_theta = r.number("rope_theta", 10000.0);
    if (j.contains("rope_scaling")) c.rope_scaling = read_rope_scaling(r, j["rope_scaling"], "rope_scaling");
  }

  // Within the window, sliding-window attention is full attention; past it the two differ, so the
  // longest context this engine accepts is the window.
  const bool window_used = model_type == "qwen2" ? r.boolean("use_sliding_window", false) : true;
  if (window_used && r.has("sliding_window")) c.max_position = std::min(c.max_position, r.integer("sliding_window"));

  try {
    validate(c);
  } catch (const usage_error& e) {
    r.fail(e.what());
  }
  return c;
}

nlohmann::ordered_json hf_config_json(const model_config& c, dtype torch_dtype) {
  const bool qwen = c.attention_bias;
  nlohmann::ordered_json j;
  j["architectures"] = {qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = qwen ? "qwen2" : "llama";
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden;
  j["num_hidden_layers"] = c.layers;
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = c.kv_heads;
  j["head_dim"] = c.head_dim;
  j["intermediate_size"] = c.intermediate;
  j["vocab_size"] = c.vocab;
  j["max_position_embeddings"] = c.max_position;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling->factor},
                         {"low_freq_factor", c.rope_scaling->low_freq_factor},
                         {"high_freq_factor", c.rope_scaling->high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling->original_max_position}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = c.tie_embeddings;
  if (qwen) j["use_sliding_window"] = false;
  else j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["torch_dtype"] = torch_dtype == dtype::bf16 ? "bfloat16" : torch_dtype == dtype::fp16 ? "float16" : "float32";
  return j;
}

checkpoint::checkpoint(const fs::path& folder) : m_folder(folder) {
  if (!fs::is_directory(m_folder))
    throw input_error(fmt::format("{}: not a checkpoint folder (no such directory)", m_folder.string()));
  m_config = read_hf_config(m_folder / "config.json");

  std::vector<fs::path> paths;
  for (const auto& item : fs::directory_iterator(m_folder))
    if (item.is_regular_file() && item.path().extension() == ".safetensors") paths.push_back(item.path());
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) throw input_error(fmt::format("{}: no *.safetensors files", m_folder.string()));
  m_files.reserve(paths.size());  // m_located points into m_files: no reallocation after this
  for (const auto& p : paths) m_files.emplace_back(p);

  std::map<std::string, located, std::less<>> by_name;
  for (const auto& f : m_files) {
    for (const auto& e : f.entries()) {
      const auto [it, inserted] = by_name.try_emplace(e.name, located{&f, &e});
      if (!inserted)
        throw input_error(fmt::format("{}: tensor '{}' is stored twice, in {} and {}", m_folder.string(), e.name,
                                      it->second.file->path().filename().string(), f.path().filename().string()));
    }
  }

  std::vector<std::string> names;
  for (const auto& f : m_files) names.push_back(f.path().filename().string());
  for (const auto& spec : tensor_specs(m_config)) {
    const auto it = by_name.find(spec.name);
    if (it == by_name.end())
      throw input_error(fmt::format("{}: tensor '{}' is missing (expected shape {}; searched {})", m_folder.string(),
                                    spec.name, shape_text(spec.shape), fmt::join(names, ", ")));
    const auto& [file, entry] = it->second;
    if (entry->shape != spec.shape)
      throw input_error(fmt::format("{}: tensor '{}' has shape {}, expected {} from config.json", file->path().string(),
                                    spec.name, shape_text(entry->shape), shape_text(spec.shape)));
    if (entry->dtype != "BF16" && entry->dtype != "F16" && entry->dtype != "F32")
      throw input_error(fmt::format("{}: tensor '{}' has dtype {}, expected BF16, F16 or F32", file->path().string(),
                                    spec.name, entry->dtype));
    m_located.push_back(it->second);
  }
}

checkpoint::located checkpoint::find(const tensor_spec& spec) const {
  const auto specs = tensor_specs(m_config);
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == spec.name) return m_located[i];
  throw std::logic_error("checkpoint::find: '" + spec.name + "' is not a tensor of this model");
}

model_weights checkpoint::load(dtype storage, bool fp8_lm_head) const {
  model_config c = m_config;
  c.fp8_lm_head = fp8_lm_head;
  auto w = zero_weights(c, storage);
  const auto specs = tensor_specs(c);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    auto values = m_located[i].file->read_floats(*m_located[i].entry);
    round_tensor(specs[i], storage, values);
    w.tensor(specs[i]) = std::move(values);
  }
  return w;
}

void write_checkpoint(const fs::path& folder, const model_weights& w, dtype file_dtype, int shards) {
  const auto specs = tensor_specs(w.config);
  if (shards < 1 || static_cast<std::size_t>(shards) > specs.size())
    throw usage_error(fmt::format("write_checkpoint: {} shards for {} tensors", shards, specs.size()));
  (void)safetensors_dtype(file_dtype);  // refuses fp8 before anything is written
  fs::create_directories(folder);
  {
    std::ofstream out(folder / "config.json");
    out << hf_config_json(w.config, file_dtype).dump(2) << '\n';
    if (!out) throw input_error(fmt::format("{}: write failed", (folder / "config.json").string()));
  }
  nlohmann::ordered_json weight_map;
  std::uint64_t total_bytes = 0;
  const std::size_t n = specs.size(), parts = static_cast<std::size_t>(shards);
  for (std::size_t s = 0; s < parts; ++s) {
    const std::string name =
        parts == 1 ? "model.safetensors" : fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, parts);
    std::vector<safetensors_tensor_view> views;
    for (std::size_t i = s * n / parts; i < (s + 1) * n / parts; ++i) {
      const auto& values = w.tensor(specs[i]);
      views.push_back({specs[i].name, specs[i].shape, values});
      weight_map[specs[i].name] = name;
      total_bytes += values.size() * safetensors_element_size(safetensors_dtype(file_dtype));
    }
    write_safetensors(folder / name, views, file_dtype);
  }
  if (shards > 1) {
    // What transformers reads to find each tensor's shard; this loader reads the headers instead.
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    std::ofstream(folder / "model.safetensors.index.json") << index.dump(2) << '\n';
  }
}

}  // namespace itera::llm
