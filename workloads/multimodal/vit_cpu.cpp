#include "workloads/multimodal/vit_cpu.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "workloads/gemm/numeric.hpp"

namespace itera::mm {
namespace {

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }
blasint bi(std::int64_t n) { return static_cast<blasint>(n); }

// y[rows x out] = x[rows x in] W^T (+ bias per column), W stored [out x in] as in the checkpoint.
void linear(const float* x, std::int64_t rows, std::int64_t in, const std::vector<float>& w, std::int64_t out,
            const std::vector<float>& bias, float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(rows), bi(out), bi(in), 1.0f, x, bi(in), w.data(), bi(in),
              0.0f, y, bi(out));
  if (bias.empty()) return;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < out; ++i) y[r * out + i] += bias[sz(i)];
}

// out = (x - mean) / sqrt(var + eps) * weight + bias over each row of n values; biased variance,
// statistics in double (as torch's LayerNorm accumulates wider than its input).
void layer_norm(const float* x, std::int64_t rows, std::int64_t n, const std::vector<float>& weight,
                const std::vector<float>& bias, double eps, float* out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * n;
    double mean = 0;
    for (std::int64_t i = 0; i < n; ++i) mean += row[i];
    mean /= static_cast<double>(n);
    double var = 0;
    for (std::int64_t i = 0; i < n; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= static_cast<double>(n);
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (std::int64_t i = 0; i < n; ++i)
      out[r * n + i] = static_cast<float>((row[i] - mean) * rstd * weight[sz(i)] + bias[sz(i)]);
  }
}

}  // namespace

std::vector<float> patch_rows(const pixel_tensor& t, std::int64_t patch) {
  if (patch < 1 || t.height < patch || t.width < patch)
    throw std::invalid_argument(fmt::format("patch_rows: patch {} does not fit {}x{}", patch, t.width, t.height));
  return patchify_whole(t, static_cast<std::uint32_t>(patch));
}

float activate(vit_activation a, float x) {
  const double v = x;
  switch (a) {
    case vit_activation::quick_gelu: return static_cast<float>(v / (1.0 + std::exp(-1.702 * v)));
    case vit_activation::gelu: return static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2)));
    case vit_activation::gelu_tanh: {
      const double k = std::sqrt(2.0 / std::numbers::pi);
      return static_cast<float>(0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))));
    }
  }
  return x;
}

double normalised_error(std::span<const float> out, std::span<const float> ref) {
  if (out.size() != ref.size())
    throw std::invalid_argument(fmt::format("normalised_error: {} values against {}", out.size(), ref.size()));
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double d = static_cast<double>(out[i]) - ref[i];
    diff += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  if (norm == 0) return diff == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(diff / norm);
}

vit_reference::vit_reference(const vit_weights& weights, dtype activations)
    : m_weights(weights), m_activations(activations) {
  if (activations != dtype::fp32 && activations != dtype::bf16)
    throw usage_error(fmt::format("vision encoder reference: activations are fp32 or bf16, not {}",
                                  llm::dtype_name(activations)));
  validate(weights.config);
  for (const auto& spec : vit_tensor_specs(weights.config))
    if (static_cast<std::int64_t>(weights.tensor(spec).size()) != spec.elements())
      throw std::logic_error(fmt::format("vit_reference: tensor '{}' holds {} values, its shape needs {}", spec.name,
                                         weights.tensor(spec).size(), spec.elements()));
  for (const auto& layer : weights.layers) m_qkv.push_back(fuse_qkv(layer));
}

void vit_reference::round(std::vector<float>& values) const {
  if (m_activations != dtype::bf16) return;
  for (auto& v : values) v = gemm::numeric::bf16_to_float(gemm::numeric::float_to_bf16(v));
}

token_tensor vit_reference::encode(const pixel_tensor& pixels) const {
  const vit_config& c = config();
  const auto per_image = static_cast<std::size_t>(c.channels * c.image * c.image);
  if (pixels.views < 1 || pixels.channels != static_cast<std::uint32_t>(c.channels) ||
      pixels.height != static_cast<std::uint32_t>(c.image) || pixels.width != static_cast<std::uint32_t>(c.image))
    throw usage_error(fmt::format("vision encoder {}: the input is {} images of {} x {} x {} (channels x height x "
                                  "width); it takes at least one image of {} x {} x {} (preprocess with image size {})",
                                  c.name, pixels.views, pixels.channels, pixels.height, pixels.width, c.channels,
                                  c.image, c.image, c.image));
  if (pixels.values.size() != per_image * pixels.views)
    throw usage_error(fmt::format("vision encoder {}: the input holds {} values; {} images of {} x {} x {} need {}",
                                  c.name, pixels.values.size(), pixels.views, c.channels, c.image, c.image,
                                  per_image * pixels.views));
  return encode_patches(patch_rows(pixels, c.patch), pixels.views);
}

token_tensor vit_reference::encode_patches(std::span<const float> patch_values, std::int64_t images) const {
  const vit_config& c = config();
  const vit_weights& w = m_weights;
  const std::int64_t T = c.tokens(), D = c.hidden, Np = c.patches(), K = c.patch_dim(), M = c.mlp;
  const std::int64_t hd = c.head_dim(), cls = c.class_token ? 1 : 0;
  if (images < 1 || patch_values.size() != sz(images * Np * K))
    throw usage_error(fmt::format("vision encoder {}: {} patch values for {} images; each image has {} patches of {}",
                                  c.name, patch_values.size(), images, Np, K));
  const std::int64_t rows = images * T;

  // 1-2: patches, patch GEMM, class row, bias and position.
  std::vector<float> patches(patch_values.begin(), patch_values.end());
  round(patches);
  std::vector<float> emb(sz(images * Np * D));
  linear(patches.data(), images * Np, K, w.patch_weight, D, w.patch_bias, emb.data());
  std::vector<float> x(sz(rows * D));
  for (std::int64_t n = 0; n < images; ++n)
    for (std::int64_t t = 0; t < T; ++t) {
      float* dst = &x[sz((n * T + t) * D)];
      const float* pos = &w.position[sz(t * D)];
      const float* src = t < cls ? w.class_embedding.data() : &emb[sz((n * Np + t - cls) * D)];
      for (std::int64_t i = 0; i < D; ++i) dst[i] = src[i] + pos[i];
    }
  round(x);
  // 3: pre_norm.
  if (c.pre_norm()) {
    layer_norm(x.data(), rows, D, w.pre_norm_weight, w.pre_norm_bias, c.layer_norm_eps, x.data());
    round(x);
  }

  std::vector<float> h(sz(rows * D)), qkv(sz(rows * 3 * D)), att(sz(rows * D)), tmp(sz(rows * D)), f(sz(rows * M));
  std::vector<float> scores(sz(T * T));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const vit_layer_weights& lw = w.layers[sz(l)];
    // 4-5
    layer_norm(x.data(), rows, D, lw.norm1_weight, lw.norm1_bias, c.layer_norm_eps, h.data());
    round(h);
    linear(h.data(), rows, D, m_qkv[sz(l)].weight, 3 * D, m_qkv[sz(l)].bias, qkv.data());
    round(qkv);
    // 6: per image and head, S = Q K^T (q, k, v are column blocks of qkv, row stride 3D).
    for (std::int64_t n = 0; n < images; ++n) {
      const float* base = &qkv[sz(n * T * 3 * D)];
      for (std::int64_t head = 0; head < c.heads; ++head) {
        const float* q = base + head * hd;
        const float* k = base + D + head * hd;
        const float* v = base + 2 * D + head * hd;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(T), bi(T), bi(hd), scale, q, bi(3 * D), k, bi(3 * D),
                    0.0f, scores.data(), bi(T));
        for (std::int64_t i = 0; i < T; ++i) {
          float* row = &scores[sz(i * T)];
          const float max_score = *std::max_element(row, row + T);
          double total = 0;
          for (std::int64_t j = 0; j < T; ++j) total += row[j] = std::exp(row[j] - max_score);
          const auto inv = static_cast<float>(1.0 / total);
          for (std::int64_t j = 0; j < T; ++j) row[j] *= inv;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(T), bi(hd), bi(T), 1.0f, scores.data(), bi(T), v,
                    bi(3 * D), 0.0f, &att[sz(n * T * D + head * hd)], bi(D));
      }
    }
    round(att);
    // 7
    linear(att.data(), rows, D, lw.out_weight, D, lw.out_bias, tmp.data());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
    round(x);
    // 8-10
    layer_norm(x.data(), rows, D, lw.norm2_weight, lw.norm2_bias, c.layer_norm_eps, h.data());
    round(h);
    linear(h.data(), rows, D, lw.fc1_weight, M, lw.fc1_bias, f.data());
    if (m_fc1_bf16_sums) round(f);
    for (auto& v : f) v = activate(c.activation, v);
    round(f);
    linear(f.data(), rows, M, lw.fc2_weight, D, lw.fc2_bias, tmp.data());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
    round(x);
  }
  // 11
  if (c.post_norm()) {
    layer_norm(x.data(), rows, D, w.post_norm_weight, w.post_norm_bias, c.layer_norm_eps, x.data());
    round(x);
  }
  return {images, T, D, std::move(x)};
}

token_tensor vit_reference::project(const token_tensor& features) const {
  const vit_config& c = config();
  const vit_weights& w = m_weights;
  if (features.images < 1 || features.tokens != c.tokens() || features.width != c.hidden ||
      features.values.size() != sz(features.images * features.tokens * features.width))
    throw usage_error(fmt::format("projector of {}: features are {} x {} x {} ({} values); it takes N x {} x {}", c.name,
                                  features.images, features.tokens, features.width, features.values.size(), c.tokens(),
                                  c.hidden));
  const std::int64_t N = features.images, T = c.tokens(), D = c.hidden, H = c.llm_hidden;
  const std::int64_t Tp = c.projector_tokens(), first = c.projector_first_token();
  std::vector<float> selected(sz(N * Tp * D));
  for (std::int64_t n = 0; n < N; ++n)
    std::copy_n(features.values.begin() + (n * T + first) * D, Tp * D, selected.begin() + n * Tp * D);
  // 12-13
  std::vector<float> g(sz(N * Tp * H)), out(sz(N * Tp * H));
  linear(selected.data(), N * Tp, D, w.projector_fc1_weight, H, w.projector_fc1_bias, g.data());
  for (auto& v : g) v = activate(vit_activation::gelu, v);
  round(g);
  linear(g.data(), N * Tp, H, w.projector_fc2_weight, H, w.projector_fc2_bias, out.data());
  round(out);
  return {N, Tp, H, std::move(out)};
}

vit_reference::output vit_reference::run(const pixel_tensor& pixels) const {
  output o;
  o.features = encode(pixels);
  o.image_tokens = project(o.features);
  return o;
}

}  // namespace itera::mm
