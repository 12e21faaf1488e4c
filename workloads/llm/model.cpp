#include "workloads/llm/model.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "itera/core/errors.hpp"

namespace itera::llm {

std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::fp32: return "fp32";
    case dtype::fp16: return "fp16";
    case dtype::bf16: return "bf16";
    case dtype::fp8_e4m3: return "fp8_e4m3";
  }
  return "?";
}

dtype parse_dtype(std::string_view name) {
  for (const dtype t : {dtype::fp32, dtype::fp16, dtype::bf16, dtype::fp8_e4m3})
    if (dtype_name(t) == name) return t;
  throw usage_error(fmt::format("unknown precision '{}': choose from fp32, fp16, bf16, fp8_e4m3", name));
}

double bytes_per_element(dtype t) {
  switch (t) {
    case dtype::fp32: return 4;
    case dtype::fp16:
    case dtype::bf16: return 2;
    case dtype::fp8_e4m3: return 1;
  }
  return 0;
}

// Shapes from each model's config.json on Hugging Face (docs/llm.md lists the sources).
namespace {

model_config llama_3_1_8b() {
  model_config c;
  c.name = "llama-3.1-8b";
  c.layers = 32;
  c.hidden = 4096;
  c.heads = 32;
  c.kv_heads = 8;
  c.head_dim = 128;
  c.intermediate = 14336;
  c.vocab = 128256;
  c.rope_theta = 500000.0;
  c.rms_norm_eps = 1e-5;
  c.max_position = 131072;
  c.rope_scaling = rope_scaling_llama3{8.0, 1.0, 4.0, 8192};
  return c;
}

model_config llama_3_2_1b() {
  model_config c;
  c.name = "llama-3.2-1b";
  c.layers = 16;
  c.hidden = 2048;
  c.heads = 32;
  c.kv_heads = 8;
  c.head_dim = 64;
  c.intermediate = 8192;
  c.vocab = 128256;
  c.rope_theta = 500000.0;
  c.rms_norm_eps = 1e-5;
  c.max_position = 131072;
  c.tie_embeddings = true;
  c.rope_scaling = rope_scaling_llama3{32.0, 1.0, 4.0, 8192};
  return c;
}

model_config qwen2_5_7b() {
  model_config c;
  c.name = "qwen2.5-7b";
  c.layers = 28;
  c.hidden = 3584;
  c.heads = 28;
  c.kv_heads = 4;
  c.head_dim = 128;
  c.intermediate = 18944;
  c.vocab = 152064;
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-6;
  c.max_position = 131072;  // the base model; -Instruct says 32768
  c.attention_bias = true;
  return c;
}

model_config mistral_7b() {  // v0.3: 32768-token vocabulary, theta 1e6, no sliding window
  model_config c;
  c.name = "mistral-7b";
  c.layers = 32;
  c.hidden = 4096;
  c.heads = 32;
  c.kv_heads = 8;
  c.head_dim = 128;
  c.intermediate = 14336;
  c.vocab = 32768;
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-5;
  c.max_position = 32768;
  return c;
}

// Small enough that the cpu reference runs a test in milliseconds, with every feature a real
// shape has: grouped-query attention (2 query heads per kv head), several layers, untied head.
model_config tiny() {
  model_config c;
  c.name = "tiny";
  c.layers = 2;
  c.hidden = 64;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.intermediate = 128;
  c.vocab = 256;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  c.max_position = 512;
  return c;
}

std::int64_t parse_field(const std::string& field, const std::string& value) {
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size())
    throw usage_error(fmt::format("model shape: {}='{}' is not a whole number", field, value));
  return v;
}

}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {"llama-3.1-8b", "llama-3.2-1b", "qwen2.5-7b", "mistral-7b", "tiny"};
  return names;
}

model_config preset(std::string_view name) {
  if (name == "llama-3.1-8b") return llama_3_1_8b();
  if (name == "llama-3.2-1b") return llama_3_2_1b();
  if (name == "qwen2.5-7b") return qwen2_5_7b();
  if (name == "mistral-7b") return mistral_7b();
  if (name == "tiny") return tiny();
  throw usage_error(fmt::format("unknown model preset '{}': choose from {}", name, fmt::join(preset_names(), ", ")));
}

void validate(const model_config& c) {
  const auto where = c.name.empty() ? std::string("model") : fmt::format("model {}", c.name);
  const auto positive = [&](std::int64_t v, const char* field) {
    if (v <= 0) throw usage_error(fmt::format("{}: {} must be at least 1, got {}", where, field, v));
  };
  positive(c.layers, "layers");
  positive(c.hidden, "hidden");
  positive(c.heads, "heads");
  positive(c.kv_heads, "kv_heads");
  positive(c.head_dim, "head_dim");
  positive(c.intermediate, "intermediate");
  positive(c.vocab, "vocab");
  positive(c.max_position, "max_position");
  if (c.hidden % c.heads != 0)
    throw usage_error(fmt::format("{}: hidden {} is not divisible by heads {}", where, c.hidden, c.heads));
  if (c.heads % c.kv_heads != 0)
    throw usage_error(fmt::format("{}: heads {} is not divisible by kv_heads {} (grouped-query attention shares each "
                                  "kv head among a whole number of query heads)",
                                  where, c.heads, c.kv_heads));
  if (c.head_dim % 2 != 0)
    throw usage_error(fmt::format("{}: head_dim {} must be even (rotary embedding rotates pairs)", where, c.head_dim));
  // BLAS and the kernels index one matrix dimension with 32-bit integers.
  constexpr std::int64_t dim_limit = std::numeric_limits<std::int32_t>::max();
  for (const auto& [v, field] : {std::pair{c.hidden, "hidden"}, std::pair{c.q_dim(), "heads x head_dim"},
                                 std::pair{c.intermediate, "intermediate"}, std::pair{c.vocab, "vocab"},
                                 std::pair{c.max_position, "max_position"}})
    if (v > dim_limit) throw usage_error(fmt::format("{}: {} = {} exceeds {}", where, field, v, dim_limit));
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    throw usage_error(fmt::format("{}: rope_theta must be positive, got {}", where, c.rope_theta));
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
    throw usage_error(fmt::format("{}: rms_norm_eps must be positive, got {}", where, c.rms_norm_eps));
  if (c.fp8_lm_head && c.tie_embeddings)
    throw usage_error(fmt::format("{}: its LM head is the embedding table (tied); an fp8 LM head would quantise the "
                                  "table the embedding lookup reads: choose lm_head=16bit for this model",
                                  where));
  if (c.rope_scaling) {
    const auto& s = *c.rope_scaling;
    if (!(s.factor > 0)) throw usage_error(fmt::format("{}: rope_scaling factor must be positive, got {}", where, s.factor));
    if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor))
      throw usage_error(fmt::format("{}: rope_scaling needs 0 < low_freq_factor < high_freq_factor, got {} and {}", where,
                                    s.low_freq_factor, s.high_freq_factor));
    if (s.original_max_position <= 0)
      throw usage_error(fmt::format("{}: rope_scaling original_max_position_embeddings must be at least 1, got {}", where,
                                    s.original_max_position));
  }
}

const std::vector<std::string>& shape_fields() {
  static const std::vector<std::string> fields = {"layers", "hidden", "heads", "kv_heads", "head_dim",
                                                  "intermediate", "vocab", "max_position"};
  return fields;
}

model_config apply_shape_axes(model_config base, const std::vector<std::pair<std::string, std::string>>& axes) {
  bool changed = false, head_dim_given = false, attention_width_changed = false;
  for (const auto& [field, value] : axes) {
    if (std::find(shape_fields().begin(), shape_fields().end(), field) == shape_fields().end()) continue;
    if (value == "preset") continue;
    const std::int64_t v = parse_field(field, value);
    std::int64_t* target = nullptr;
    if (field == "layers") target = &base.layers;
    else if (field == "hidden") target = &base.hidden;
    else if (field == "heads") target = &base.heads;
    else if (field == "kv_heads") target = &base.kv_heads;
    else if (field == "head_dim") target = &base.head_dim;
    else if (field == "intermediate") target = &base.intermediate;
    else if (field == "vocab") target = &base.vocab;
    else target = &base.max_position;
    if (*target == v) continue;
    *target = v;
    changed = true;
    if (field == "head_dim") head_dim_given = true;
    if (field == "hidden" || field == "heads") attention_width_changed = true;
  }
  if (attention_width_changed && !head_dim_given && base.heads > 0 && base.hidden % base.heads == 0)
    base.head_dim = base.hidden / base.heads;
  if (changed) base.name += " (shape from axes)";
  validate(base);
  return base;
}

param_counts count_params(const model_config& c) {
  param_counts p;
  p.embedding = c.vocab * c.hidden;
  p.lm_head = c.tie_embeddings ? 0 : c.vocab * c.hidden;
  p.attention_per_layer = 2 * c.hidden * c.q_dim() + 2 * c.hidden * c.kv_dim();
  if (c.attention_bias) p.attention_per_layer += c.q_dim() + 2 * c.kv_dim();
  p.mlp_per_layer = 3 * c.hidden * c.intermediate;
  p.norms_per_layer = 2 * c.hidden;
  p.final_norm = c.hidden;
  p.layers = c.layers;
  p.projections_per_layer = 2 * c.hidden * c.q_dim() + 2 * c.hidden * c.kv_dim() + 3 * c.hidden * c.intermediate;
  return p;
}

namespace {

// Output channels of the matrices fp8 weights store as codes (the layer projections, and the LM
// head with c.fp8_lm_head): one fp32 scale for each.
std::int64_t fp8_output_channels(const model_config& c) {
  return c.layers * (c.q_dim() + 2 * c.kv_dim() + c.hidden + 2 * c.intermediate + c.hidden) +
         (c.fp8_lm_head && !c.tie_embeddings ? c.vocab : 0);
}

dtype table_dtype(dtype weights) { return weights == dtype::fp8_e4m3 ? dtype::bf16 : weights; }

}  // namespace

double weight_bytes(const model_config& c, dtype weights) {
  const auto p = count_params(c);
  const auto total = static_cast<double>(p.total());
  if (weights != dtype::fp8_e4m3) return total * bytes_per_element(weights);
  const auto codes = static_cast<double>(p.layers * p.projections_per_layer + (c.fp8_lm_head ? p.lm_head : 0));
  return codes * 1.0 + static_cast<double>(fp8_output_channels(c)) * 4.0 + (total - codes) * 2.0;
}

double embedding_bytes(const model_config& c, dtype weights) {
  return static_cast<double>(c.vocab * c.hidden) * bytes_per_element(table_dtype(weights));
}

double embedding_row_bytes(const model_config& c, dtype weights) {
  return static_cast<double>(c.hidden) * bytes_per_element(table_dtype(weights));
}

double kv_bytes_per_token(const model_config& c, dtype kv) {
  return 2.0 * static_cast<double>(c.layers * c.kv_dim()) * bytes_per_element(kv);
}

double attention_flops(const model_config& c, std::int64_t keys) {
  return 4.0 * static_cast<double>(c.layers * c.heads * c.head_dim) * static_cast<double>(keys);
}

namespace {

// Weights a step reads: everything but the embedding table, one row of it per sequence. A tied
// table is the LM head too, and that reads all of it.
double weights_read(const model_config& c, dtype weights, std::size_t sequences) {
  const double table = c.tie_embeddings ? 0.0 : embedding_bytes(c, weights);
  return weight_bytes(c, weights) - table + static_cast<double>(sequences) * embedding_row_bytes(c, weights);
}

// A step adds `added` tokens to each sequence; the result must stay within max_position.
void check_lengths(const model_config& c, std::span<const std::int64_t> lengths, std::int64_t added, const char* what) {
  for (const auto n : lengths)
    if (n < 0 || n + added > c.max_position)
      throw usage_error(fmt::format("{} length {} is outside 0..{} (max_position of {} is {})", what, n,
                                    c.max_position - added, c.name, c.max_position));
}

}  // namespace

step_work decode_step_work(const model_config& c, dtype weights, dtype kv, std::span<const std::int64_t> context) {
  check_lengths(c, context, 1, "decode context");
  const auto p = count_params(c);
  step_work w;
  w.tokens = static_cast<std::int64_t>(context.size());
  w.weight_bytes_read = weights_read(c, weights, context.size());
  for (const auto n : context) {
    w.kv_bytes_read += static_cast<double>(n + 1) * kv_bytes_per_token(c, kv);
    w.kv_bytes_written += kv_bytes_per_token(c, kv);
    w.flops += 2.0 * static_cast<double>(p.matmul_per_token()) + attention_flops(c, n + 1);
  }
  return w;
}

step_work prefill_work(const model_config& c, dtype weights, dtype kv, std::span<const std::int64_t> prompt) {
  check_lengths(c, prompt, 0, "prompt");
  const auto p = count_params(c);
  const double head = static_cast<double>(p.lm_head > 0 ? p.lm_head : p.embedding);
  const double body = static_cast<double>(p.layers * p.projections_per_layer);
  step_work w;
  w.weight_bytes_read = weights_read(c, weights, 0);
  for (const auto n : prompt) {
    w.tokens += n;
    w.weight_bytes_read += static_cast<double>(n) * embedding_row_bytes(c, weights);
    w.kv_bytes_written += static_cast<double>(n) * kv_bytes_per_token(c, kv);
    // The attention reads the pass's own K and V as the projection made them (bf16 activations),
    // not the cache: the same bytes as a bf16 cache, whatever the cache stores.
    w.kv_bytes_read += static_cast<double>(n) * kv_bytes_per_token(c, dtype::bf16);
    w.flops += 2.0 * body * static_cast<double>(n) + (n > 0 ? 2.0 * head : 0.0) +
               attention_flops(c, 1) * static_cast<double>(n) * static_cast<double>(n + 1) / 2.0;
  }
  return w;
}

}  // namespace itera::llm
