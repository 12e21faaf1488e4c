#pragma once
// A second implementation of the vision encoder and projector for the tests, written from the
// transformers modules directly and sharing nothing with vit_cpu.cpp but the weights: the patch
// embedding as the Conv2d it is (NCHW pixels, the [D, C, P, P] kernel, no patchify), q, k, v as
// three separate products, attention, LayerNorm, activations and every sum in double, plain loops.
// `bf16` rounds at the points vit_cpu.hpp lists, so the two can be compared in that mode too.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "workloads/gemm/numeric.hpp"
#include "workloads/multimodal/preprocess.hpp"
#include "workloads/multimodal/vit_weights.hpp"

namespace itera::mm::test {

class naive_vit {
 public:
  naive_vit(const vit_weights& w, bool bf16) : m_w(w), m_bf16(bf16) {}

  // [images, tokens, hidden]
  std::vector<double> features(const pixel_tensor& px) const {
    const vit_config& c = m_w.config;
    const std::int64_t D = c.hidden, T = c.tokens(), P = c.patch, G = c.grid(), C = c.channels, S = c.image;
    const std::int64_t cls = c.class_token ? 1 : 0;
    std::vector<double> out;
    for (std::int64_t n = 0; n < static_cast<std::int64_t>(px.views); ++n) {
      std::vector<std::vector<double>> x(static_cast<std::size_t>(T), std::vector<double>(static_cast<std::size_t>(D)));
      for (std::int64_t o = 0; o < D; ++o) {
        if (cls) x[0][o] = r(at(m_w.class_embedding, o) + at(m_w.position, o));
        for (std::int64_t gy = 0; gy < G; ++gy)
          for (std::int64_t gx = 0; gx < G; ++gx) {
            double acc = c.patch_bias ? at(m_w.patch_bias, o) : 0.0;
            for (std::int64_t ch = 0; ch < C; ++ch)
              for (std::int64_t dy = 0; dy < P; ++dy)
                for (std::int64_t dx = 0; dx < P; ++dx) {
                  const double pixel = px.values[static_cast<std::size_t>(((n * C + ch) * S + gy * P + dy) * S + gx * P + dx)];
                  acc += at(m_w.patch_weight, ((o * C + ch) * P + dy) * P + dx) * r(pixel);
                }
            const std::int64_t t = cls + gy * G + gx;
            x[t][o] = r(acc + at(m_w.position, t * D + o));
          }
      }
      if (c.pre_norm()) x = norm(x, m_w.pre_norm_weight, m_w.pre_norm_bias);
      for (const auto& l : m_w.layers) {
        const auto h = norm(x, l.norm1_weight, l.norm1_bias);
        const auto q = lin(h, l.q_weight, l.q_bias), k = lin(h, l.k_weight, l.k_bias), v = lin(h, l.v_weight, l.v_bias);
        const auto a = attention(q, k, v);
        const auto o = lin(a, l.out_weight, l.out_bias, false);
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t i = 0; i < D; ++i) x[t][i] = r(x[t][i] + o[t][i]);
        const auto h2 = norm(x, l.norm2_weight, l.norm2_bias);
        auto f = lin(h2, l.fc1_weight, l.fc1_bias, false);
        for (auto& row : f)
          for (auto& e : row) e = r(act(c.activation, e));
        const auto y = lin(f, l.fc2_weight, l.fc2_bias, false);
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t i = 0; i < D; ++i) x[t][i] = r(x[t][i] + y[t][i]);
      }
      if (c.post_norm()) x = norm(x, m_w.post_norm_weight, m_w.post_norm_bias);
      for (const auto& row : x) out.insert(out.end(), row.begin(), row.end());
    }
    return out;
  }

  // [images, projector tokens, llm_hidden] from features [images, tokens, hidden].
  std::vector<double> project(const std::vector<double>& features) const {
    const vit_config& c = m_w.config;
    const std::int64_t D = c.hidden, T = c.tokens(), first = c.class_token && c.select == feature_select::patches ? 1 : 0;
    const std::int64_t images = static_cast<std::int64_t>(features.size()) / (T * D);
    std::vector<double> out;
    for (std::int64_t n = 0; n < images; ++n) {
      matrix sel;
      for (std::int64_t t = first; t < T; ++t)
        sel.emplace_back(features.begin() + (n * T + t) * D, features.begin() + (n * T + t + 1) * D);
      auto g = lin(sel, m_w.projector_fc1_weight, m_w.projector_fc1_bias, false);
      for (auto& row : g)
        for (auto& e : row) e = r(act(vit_activation::gelu, e));
      const auto y = lin(g, m_w.projector_fc2_weight, m_w.projector_fc2_bias);
      for (const auto& row : y) out.insert(out.end(), row.begin(), row.end());
    }
    return out;
  }

 private:
  using matrix = std::vector<std::vector<double>>;

  static double at(const std::vector<float>& v, std::int64_t i) { return v[static_cast<std::size_t>(i)]; }

  double r(double v) const {
    if (!m_bf16) return v;
    return gemm::numeric::bf16_to_float(gemm::numeric::float_to_bf16(static_cast<float>(v)));
  }

  static double act(vit_activation a, double x) {
    switch (a) {
      case vit_activation::quick_gelu: return x / (1.0 + std::exp(-1.702 * x));
      case vit_activation::gelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
      case vit_activation::gelu_tanh:
        return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
    }
    return x;
  }

  // y = x W^T + b, W [out, in]; rounded to bf16 when `round` (a stored output).
  matrix lin(const matrix& x, const std::vector<float>& w, const std::vector<float>& b, bool round = true) const {
    const std::size_t out = b.size(), in = w.size() / out;
    matrix y(x.size(), std::vector<double>(out));
    for (std::size_t t = 0; t < x.size(); ++t)
      for (std::size_t o = 0; o < out; ++o) {
        double acc = b[o];
        for (std::size_t i = 0; i < in; ++i) acc += static_cast<double>(w[o * in + i]) * x[t][i];
        y[t][o] = round ? r(acc) : acc;
      }
    return y;
  }

  matrix norm(const matrix& x, const std::vector<float>& w, const std::vector<float>& b) const {
    matrix y = x;
    for (auto& row : y) {
      double mean = 0, var = 0;
      for (const double v : row) mean += v;
      mean /= static_cast<double>(row.size());
      for (const double v : row) var += (v - mean) * (v - mean);
      var /= static_cast<double>(row.size());
      for (std::size_t i = 0; i < row.size(); ++i)
        row[i] = r((row[i] - mean) / std::sqrt(var + m_w.config.layer_norm_eps) * w[i] + b[i]);
    }
    return y;
  }

  matrix attention(const matrix& q, const matrix& k, const matrix& v) const {
    const vit_config& c = m_w.config;
    const std::size_t T = q.size(), hd = static_cast<std::size_t>(c.head_dim());
    matrix out(T, std::vector<double>(static_cast<std::size_t>(c.hidden)));
    std::vector<double> p(T);
    for (std::size_t head = 0; head < static_cast<std::size_t>(c.heads); ++head)
      for (std::size_t i = 0; i < T; ++i) {
        double max_score = -INFINITY;
        for (std::size_t j = 0; j < T; ++j) {
          double dot = 0;
          for (std::size_t d = 0; d < hd; ++d) dot += q[i][head * hd + d] * k[j][head * hd + d];
          p[j] = dot / std::sqrt(static_cast<double>(hd));
          max_score = std::max(max_score, p[j]);
        }
        double total = 0;
        for (std::size_t j = 0; j < T; ++j) total += p[j] = std::exp(p[j] - max_score);
        for (std::size_t d = 0; d < hd; ++d) {
          double acc = 0;
          for (std::size_t j = 0; j < T; ++j) acc += p[j] / total * v[j][head * hd + d];
          out[i][head * hd + d] = r(acc);
        }
      }
    return out;
  }

  const vit_weights& m_w;
  bool m_bf16;
};

}  // namespace itera::mm::test
