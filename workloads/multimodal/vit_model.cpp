#include "workloads/multimodal/vit_model.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "itera/core/errors.hpp"

namespace itera::mm {

std::string_view activation_name(vit_activation a) {
  switch (a) {
    case vit_activation::quick_gelu: return "quick_gelu";
    case vit_activation::gelu: return "gelu";
    case vit_activation::gelu_tanh: return "gelu_pytorch_tanh";
  }
  return "?";
}

vit_activation parse_activation(std::string_view name) {
  if (name == "quick_gelu") return vit_activation::quick_gelu;
  if (name == "gelu") return vit_activation::gelu;
  // gelu_new is transformers' NewGELUActivation: the same tanh formula as PyTorch's approximation.
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_tanh") return vit_activation::gelu_tanh;
  throw usage_error(fmt::format("activation '{}' is not supported: choose quick_gelu (CLIP), gelu (erf) or "
                                "gelu_pytorch_tanh (SigLIP)",
                                name));
}

std::string_view norm_name(vit_norm n) {
  switch (n) {
    case vit_norm::pre: return "pre";
    case vit_norm::post: return "post";
    case vit_norm::both: return "both";
    case vit_norm::none: return "none";
  }
  return "?";
}

vit_norm parse_norm(std::string_view name) {
  for (const auto n : {vit_norm::pre, vit_norm::post, vit_norm::both, vit_norm::none})
    if (norm_name(n) == name) return n;
  throw usage_error(fmt::format("norm '{}' is not a placement: choose pre (LayerNorm after the embeddings, CLIP), "
                                "post (on the output tokens, SigLIP), both or none",
                                name));
}

std::string_view select_name(feature_select s) { return s == feature_select::all ? "all" : "patches"; }

feature_select parse_select(std::string_view name) {
  if (name == "all") return feature_select::all;
  if (name == "patches") return feature_select::patches;
  throw usage_error(fmt::format("select '{}' is not a token selection: choose patches (the class token left out, "
                                "LLaVA's default) or all",
                                name));
}

namespace {

// Shapes from the models' config.json on Hugging Face (openai/clip-vit-large-patch14,
// openai/clip-vit-large-patch14-336, google/siglip-so400m-patch14-384). llm_hidden 4096 is a
// 7B language model's width (LLaVA-1.5-7B's Vicuna); an axis changes it.
vit_config clip_large(std::int64_t image) {
  vit_config c;
  c.name = image == 224 ? "clip-vit-large-patch14" : fmt::format("clip-vit-large-patch14-{}", image);
  c.layers = 24;
  c.hidden = 1024;
  c.heads = 16;
  c.mlp = 4096;
  c.patch = 14;
  c.image = image;
  c.channels = 3;
  c.class_token = true;
  c.patch_bias = false;
  c.activation = vit_activation::quick_gelu;
  c.norm = vit_norm::pre;
  c.layer_norm_eps = 1e-5;
  c.llm_hidden = 4096;
  c.select = feature_select::patches;
  return c;
}

vit_config siglip_so400m() {
  vit_config c;
  c.name = "siglip-so400m-patch14-384";
  c.layers = 27;
  c.hidden = 1152;
  c.heads = 16;
  c.mlp = 4304;
  c.patch = 14;
  c.image = 384;
  c.channels = 3;
  c.class_token = false;
  c.patch_bias = true;
  c.activation = vit_activation::gelu_tanh;
  c.norm = vit_norm::post;
  c.layer_norm_eps = 1e-6;
  c.llm_hidden = 4096;
  c.select = feature_select::all;
  return c;
}

// Small enough that the naive reference in the tests runs in milliseconds, with what a real shape
// has: several layers and heads, a class token (17 tokens: not a multiple of anything), an MLP
// wider than the model, a projector to another width.
vit_config tiny() {
  vit_config c;
  c.name = "tiny";
  c.layers = 2;
  c.hidden = 64;
  c.heads = 4;
  c.mlp = 160;
  c.patch = 4;
  c.image = 16;
  c.channels = 3;
  c.class_token = true;
  c.patch_bias = false;
  c.activation = vit_activation::quick_gelu;
  c.norm = vit_norm::pre;
  c.layer_norm_eps = 1e-5;
  c.llm_hidden = 96;
  c.select = feature_select::patches;
  return c;
}

vit_config tiny_siglip() {
  vit_config c = tiny();
  c.name = "tiny-siglip";
  c.image = 20;  // 25 patches, no class token
  c.class_token = false;
  c.patch_bias = true;
  c.activation = vit_activation::gelu_tanh;
  c.norm = vit_norm::post;
  c.layer_norm_eps = 1e-6;
  c.select = feature_select::all;
  return c;
}

std::int64_t parse_whole(std::string_view field, std::string_view value) {
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size())
    throw usage_error(fmt::format("vision shape: {}='{}' is not a whole number", field, value));
  return v;
}

bool parse_yes_no(std::string_view field, std::string_view value) {
  if (value == "yes" || value == "true" || value == "1") return true;
  if (value == "no" || value == "false" || value == "0") return false;
  throw usage_error(fmt::format("vision shape: {}='{}' must be yes or no", field, value));
}

}  // namespace

const std::vector<std::string>& vit_preset_names() {
  static const std::vector<std::string> names = {"clip-vit-large-patch14", "clip-vit-large-patch14-336",
                                                 "siglip-so400m-patch14-384", "tiny", "tiny-siglip"};
  return names;
}

vit_config vit_preset(std::string_view name) {
  if (name == "clip-vit-large-patch14") return clip_large(224);
  if (name == "clip-vit-large-patch14-336") return clip_large(336);
  if (name == "siglip-so400m-patch14-384") return siglip_so400m();
  if (name == "tiny") return tiny();
  if (name == "tiny-siglip") return tiny_siglip();
  throw usage_error(
      fmt::format("unknown vision encoder preset '{}': choose from {}", name, fmt::join(vit_preset_names(), ", ")));
}

void validate(const vit_config& c) {
  const auto where = c.name.empty() ? std::string("vision encoder") : fmt::format("vision encoder {}", c.name);
  const auto positive = [&](std::int64_t v, const char* field) {
    if (v <= 0) throw usage_error(fmt::format("{}: {} must be at least 1, got {}", where, field, v));
  };
  positive(c.layers, "layers");
  positive(c.hidden, "hidden");
  positive(c.heads, "heads");
  positive(c.mlp, "mlp");
  positive(c.patch, "patch");
  positive(c.image, "image");
  positive(c.channels, "channels");
  positive(c.llm_hidden, "llm_hidden");
  if (c.hidden % c.heads != 0) {
    std::int64_t fits = std::min(c.heads, c.hidden);  // the most heads up to the asked count that divide hidden
    while (c.hidden % fits != 0) --fits;
    throw usage_error(fmt::format("{}: hidden {} is not divisible by heads {} (each head takes hidden / heads "
                                  "channels; for example heads={})",
                                  where, c.hidden, c.heads, fits));
  }
  // A Conv2d of stride P without padding: floor(S / P) patches per side, the last S mod P rows and
  // columns unread (SigLIP so400m: 384 = 27 x 14 + 6).
  if (c.image < c.patch)
    throw usage_error(fmt::format("{}: image {} is smaller than patch {} (no whole patch fits; image={} or more)", where,
                                  c.image, c.patch, c.patch));
  if (!(c.layer_norm_eps > 0) || !std::isfinite(c.layer_norm_eps))
    throw usage_error(fmt::format("{}: layer_norm_eps must be positive, got {}", where, c.layer_norm_eps));
  // BLAS and the kernels index one matrix dimension with 32-bit integers; a batch multiplies rows.
  constexpr std::int64_t dim_limit = std::numeric_limits<std::int32_t>::max();
  for (const auto& [v, field] :
       {std::pair{c.hidden, "hidden"}, std::pair{c.mlp, "mlp"}, std::pair{c.patch_dim(), "channels x patch^2"},
        std::pair{c.llm_hidden, "llm_hidden"}, std::pair{c.image, "image"}})
    if (v > dim_limit) throw usage_error(fmt::format("{}: {} = {} exceeds {}", where, field, v, dim_limit));
  constexpr std::int64_t token_limit = 1 << 20;  // keeps T x T attention scores of one head addressable
  if (c.tokens() > token_limit)
    throw usage_error(fmt::format("{}: {} tokens ((image {} / patch {})^2{}) exceed {}; use a larger patch or a "
                                  "smaller image",
                                  where, c.tokens(), c.image, c.patch, c.class_token ? " + 1" : "", token_limit));
}

const std::vector<std::string>& vit_shape_fields() {
  static const std::vector<std::string> fields = {"layers",     "hidden",     "heads", "mlp",  "patch",
                                                  "image",      "channels",   "class_token", "patch_bias",
                                                  "activation", "norm",       "llm_hidden",  "select"};
  return fields;
}

vit_config apply_vit_shape(vit_config base, const std::vector<std::pair<std::string, std::string>>& fields) {
  const vit_config original = base;
  for (const auto& [field, value] : fields) {
    if (value == "preset") continue;
    if (field == "layers") base.layers = parse_whole(field, value);
    else if (field == "hidden") base.hidden = parse_whole(field, value);
    else if (field == "heads") base.heads = parse_whole(field, value);
    else if (field == "mlp") base.mlp = parse_whole(field, value);
    else if (field == "patch") base.patch = parse_whole(field, value);
    else if (field == "image") base.image = parse_whole(field, value);
    else if (field == "channels") base.channels = parse_whole(field, value);
    else if (field == "llm_hidden") base.llm_hidden = parse_whole(field, value);
    else if (field == "class_token") base.class_token = parse_yes_no(field, value);
    else if (field == "patch_bias") base.patch_bias = parse_yes_no(field, value);
    else if (field == "activation") base.activation = parse_activation(value);
    else if (field == "norm") base.norm = parse_norm(value);
    else if (field == "select") base.select = parse_select(value);
    else
      throw usage_error(fmt::format("vision shape: '{}' is not a field; choose from {} (for example "
                                    "'layers=12;image=336')",
                                    field, fmt::join(vit_shape_fields(), ", ")));
  }
  if (!(base == original)) base.name += " (shape from axes)";
  validate(base);
  return base;
}

vit_config apply_vit_shape(vit_config base, std::string_view spec) {
  if (spec.empty() || spec == "preset") {
    validate(base);
    return base;
  }
  std::vector<std::pair<std::string, std::string>> fields;
  std::size_t start = 0;
  while (start <= spec.size()) {
    const std::size_t end = std::min(spec.find(';', start), spec.size());
    const std::string_view item = spec.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      throw usage_error(fmt::format("vision shape: '{}' is not FIELD=VALUE with FIELD one of {} (for example "
                                    "'layers=12;image=336')",
                                    item, fmt::join(vit_shape_fields(), ", ")));
    fields.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
  }
  return apply_vit_shape(std::move(base), fields);
}

vit_params count_params(const vit_config& c) {
  vit_params p;
  const std::int64_t d = c.hidden;
  p.embeddings = d * c.patch_dim() + (c.patch_bias ? d : 0) + (c.class_token ? d : 0) + c.tokens() * d;
  p.per_layer = 4 * (d * d + d) + (c.mlp * d + c.mlp) + (d * c.mlp + d) + 4 * d;
  p.layers = c.layers;
  p.outer_norms = (c.pre_norm() ? 2 * d : 0) + (c.post_norm() ? 2 * d : 0);
  p.projector = (c.llm_hidden * d + c.llm_hidden) + (c.llm_hidden * c.llm_hidden + c.llm_hidden);
  return p;
}

std::string_view stage_kind_name(vit_stage_kind k) {
  switch (k) {
    case vit_stage_kind::patch_embed: return "patch_embed";
    case vit_stage_kind::pre_norm: return "pre_norm";
    case vit_stage_kind::norm1: return "norm1";
    case vit_stage_kind::qkv: return "qkv";
    case vit_stage_kind::attention: return "attention";
    case vit_stage_kind::out: return "out";
    case vit_stage_kind::norm2: return "norm2";
    case vit_stage_kind::fc1: return "fc1";
    case vit_stage_kind::fc2: return "fc2";
    case vit_stage_kind::post_norm: return "post_norm";
    case vit_stage_kind::projector_fc1: return "projector.fc1";
    case vit_stage_kind::projector_fc2: return "projector.fc2";
  }
  return "?";
}

namespace {

double activation_ops(vit_activation a) {
  switch (a) {
    case vit_activation::quick_gelu: return 4;  // x / (1 + exp(-1.702 x)): mul, exp, add, div
    case vit_activation::gelu: return 5;        // 0.5 x (1 + erf(x / sqrt 2)): mul, erf, add, mul, mul
    case vit_activation::gelu_tanh: return 9;   // x^3 (2), mul, add, mul, tanh, add, mul, mul
  }
  return 0;
}

}  // namespace

std::vector<vit_stage> vit_stages(const vit_config& c, dtype weights, dtype activations) {
  validate(c);
  if (weights == dtype::fp8_e4m3 || activations == dtype::fp8_e4m3)
    throw usage_error("vision encoder: weights and activations are fp32, fp16 or bf16 (fp8 is not implemented here)");
  const double wb = llm::bytes_per_element(weights), ab = llm::bytes_per_element(activations);
  const auto T = static_cast<double>(c.tokens()), D = static_cast<double>(c.hidden),
             M = static_cast<double>(c.mlp), Np = static_cast<double>(c.patches()),
             K = static_cast<double>(c.patch_dim()), H = static_cast<double>(c.llm_hidden),
             Tp = static_cast<double>(c.projector_tokens());
  std::vector<vit_stage> out;
  const auto gemm = [&](std::string name, vit_stage_kind kind, std::int64_t layer, std::int64_t m, std::int64_t n,
                        std::int64_t k) {
    vit_stage s;
    s.name = std::move(name);
    s.kind = kind;
    s.layer = layer;
    s.gemm_m = m;
    s.gemm_n = n;
    s.gemm_k = k;
    s.matmul_flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    return s;
  };
  const auto layer_norm = [&](std::string name, vit_stage_kind kind, std::int64_t layer, double rows) {
    vit_stage s;
    s.name = std::move(name);
    s.kind = kind;
    s.layer = layer;
    s.other_flops = 8.0 * rows * D;
    s.bytes_read = rows * D * ab;
    s.bytes_written = rows * D * ab;
    s.weight_bytes = 2.0 * D * wb;
    return s;
  };

  {  // patches [G*G, K] x W^T [K, D] (+ bias), + class row, + position table
    auto s = gemm("patch_embed", vit_stage_kind::patch_embed, -1, c.patches(), c.hidden, c.patch_dim());
    s.other_flops = (c.patch_bias ? Np * D : 0.0) + T * D;
    s.bytes_read = Np * K * ab;
    s.bytes_written = T * D * ab;
    s.weight_bytes = (D * K + (c.patch_bias ? D : 0.0) + (c.class_token ? D : 0.0) + T * D) * wb;
    out.push_back(std::move(s));
  }
  if (c.pre_norm()) out.push_back(layer_norm("pre_norm", vit_stage_kind::pre_norm, -1, T));
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const auto p = fmt::format("layer.{}.", l);
    out.push_back(layer_norm(p + "norm1", vit_stage_kind::norm1, l, T));
    {
      auto s = gemm(p + "qkv", vit_stage_kind::qkv, l, c.tokens(), 3 * c.hidden, c.hidden);
      s.other_flops = 3.0 * T * D;
      s.bytes_read = T * D * ab;
      s.bytes_written = 3.0 * T * D * ab;
      s.weight_bytes = (3.0 * D * D + 3.0 * D) * wb;
      out.push_back(std::move(s));
    }
    {
      vit_stage s;
      s.name = p + "attention";
      s.kind = vit_stage_kind::attention;
      s.layer = l;
      s.matmul_flops = 4.0 * T * T * D;  // QK^T and PV over all heads: 2 T^2 head_dim x heads each
      s.other_flops = 5.0 * static_cast<double>(c.heads) * T * T + T * D;
      s.bytes_read = 3.0 * T * D * ab;
      s.bytes_written = T * D * ab;
      out.push_back(std::move(s));
    }
    {
      auto s = gemm(p + "out", vit_stage_kind::out, l, c.tokens(), c.hidden, c.hidden);
      s.other_flops = 2.0 * T * D;  // bias, residual
      s.bytes_read = 2.0 * T * D * ab;
      s.bytes_written = T * D * ab;
      s.weight_bytes = (D * D + D) * wb;
      out.push_back(std::move(s));
    }
    out.push_back(layer_norm(p + "norm2", vit_stage_kind::norm2, l, T));
    {
      auto s = gemm(p + "fc1", vit_stage_kind::fc1, l, c.tokens(), c.mlp, c.hidden);
      s.other_flops = T * M * (1.0 + activation_ops(c.activation));
      s.bytes_read = T * D * ab;
      s.bytes_written = T * M * ab;
      s.weight_bytes = (M * D + M) * wb;
      out.push_back(std::move(s));
    }
    {
      auto s = gemm(p + "fc2", vit_stage_kind::fc2, l, c.tokens(), c.hidden, c.mlp);
      s.other_flops = 2.0 * T * D;
      s.bytes_read = T * M * ab + T * D * ab;
      s.bytes_written = T * D * ab;
      s.weight_bytes = (D * M + D) * wb;
      out.push_back(std::move(s));
    }
  }
  if (c.post_norm()) out.push_back(layer_norm("post_norm", vit_stage_kind::post_norm, -1, T));
  {
    auto s = gemm("projector.fc1", vit_stage_kind::projector_fc1, -1, c.projector_tokens(), c.llm_hidden, c.hidden);
    s.other_flops = Tp * H * (1.0 + activation_ops(vit_activation::gelu));
    s.bytes_read = Tp * D * ab;
    s.bytes_written = Tp * H * ab;
    s.weight_bytes = (H * D + H) * wb;
    out.push_back(std::move(s));
  }
  {
    auto s = gemm("projector.fc2", vit_stage_kind::projector_fc2, -1, c.projector_tokens(), c.llm_hidden, c.llm_hidden);
    s.other_flops = Tp * H;
    s.bytes_read = Tp * H * ab;
    s.bytes_written = Tp * H * ab;
    s.weight_bytes = (H * H + H) * wb;
    out.push_back(std::move(s));
  }
  return out;
}

vit_work sum_work(const std::vector<vit_stage>& stages, std::int64_t images, vit_part part) {
  if (images < 0) throw usage_error(fmt::format("vision encoder work: {} images", images));
  const auto n = static_cast<double>(images);
  vit_work w;
  for (const auto& s : stages) {
    const bool projector = s.kind == vit_stage_kind::projector_fc1 || s.kind == vit_stage_kind::projector_fc2;
    if ((part == vit_part::encoder && projector) || (part == vit_part::projector && !projector)) continue;
    w.matmul_flops += n * s.matmul_flops;
    if (s.kind == vit_stage_kind::attention) w.attention_flops += n * s.matmul_flops;
    else w.gemm_flops += n * s.matmul_flops;
    w.other_flops += n * s.other_flops;
    w.activation_bytes += n * (s.bytes_read + s.bytes_written);
    w.weight_bytes += s.weight_bytes;
  }
  return w;
}

}  // namespace itera::mm
