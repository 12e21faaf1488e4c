#include "workloads/llm/llm_cpu.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "workloads/gemm/numeric.hpp"

namespace itera::llm {
namespace {

// y[rows x out] = x[rows x in] W^T, W stored [out x in] as in the checkpoint.
void linear(const std::vector<float>& x, std::int64_t rows, std::int64_t in, const std::vector<float>& w,
            std::int64_t out, std::vector<float>& y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows), static_cast<blasint>(out),
              static_cast<blasint>(in), 1.0f, x.data(), static_cast<blasint>(in), w.data(), static_cast<blasint>(in),
              0.0f, y.data(), static_cast<blasint>(out));
}

void add_bias(std::vector<float>& y, std::int64_t rows, const std::vector<float>& bias) {
  if (bias.empty()) return;
  const auto width = static_cast<std::int64_t>(bias.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < width; ++i) y[static_cast<std::size_t>(r * width + i)] += bias[static_cast<std::size_t>(i)];
}

}  // namespace

std::vector<float> rope_inv_freq(const model_config& c) {
  const std::int64_t half = c.head_dim / 2;
  std::vector<float> inv(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.head_dim));
    if (c.rope_scaling) {
      // transformers _compute_llama3_parameters: high frequencies kept, low ones divided by the
      // factor, the band between blended linearly in original_context / wavelength.
      const auto& s = *c.rope_scaling;
      const double old_context = static_cast<double>(s.original_max_position);
      const double low_freq_wavelen = old_context / s.low_freq_factor;
      const double high_freq_wavelen = old_context / s.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_freq_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth = (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
    inv[static_cast<std::size_t>(i)] = static_cast<float>(f);
  }
  return inv;
}

void apply_rope(float* head, std::int64_t head_dim, std::int64_t position, std::span<const float> inv_freq) {
  const std::int64_t half = head_dim / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(position) * inv_freq[static_cast<std::size_t>(i)];
    const auto cos_a = static_cast<float>(std::cos(static_cast<double>(angle)));
    const auto sin_a = static_cast<float>(std::sin(static_cast<double>(angle)));
    const float x1 = head[i], x2 = head[i + half];
    head[i] = x1 * cos_a - x2 * sin_a;
    head[i + half] = x2 * cos_a + x1 * sin_a;
  }
}

void rms_norm(const float* x, const float* weight, float* out, std::int64_t n, double eps) {
  double sum_squares = 0;
  for (std::int64_t i = 0; i < n; ++i) sum_squares += static_cast<double>(x[i]) * x[i];
  const auto scale = static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(n) + eps));
  for (std::int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * scale);
}

float kv_cache_value(dtype kv, float v) {
  switch (kv) {
    case dtype::fp32: return v;
    case dtype::fp8_e4m3: return gemm::numeric::fp8_e4m3_to_float(gemm::numeric::float_to_fp8_e4m3(v));
    default: break;
  }
  throw usage_error(fmt::format("the cpu reference holds its KV cache in fp32 or rounds it to fp8_e4m3; {} is not one "
                                "of them (the cpu engine holds a bf16 cache in fp32)",
                                dtype_name(kv)));
}

std::int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) throw std::logic_error("argmax of no logits");
  return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

reference_model::reference_model(const model_weights& weights, dtype kv) : m_weights(weights), m_kv(kv) {
  validate(weights.config);
  (void)kv_cache_value(kv, 0.0f);  // refuses a precision the cache does not hold
  for (const auto& spec : tensor_specs(weights.config))
    if (static_cast<std::int64_t>(weights.tensor(spec).size()) != spec.elements())
      throw std::logic_error(fmt::format("reference_model: tensor '{}' holds {} values, its shape needs {}", spec.name,
                                         weights.tensor(spec).size(), spec.elements()));
  m_inv_freq = rope_inv_freq(weights.config);
}

sequence reference_model::new_sequence() const {
  sequence s;
  s.keys.resize(static_cast<std::size_t>(config().layers));
  s.values.resize(static_cast<std::size_t>(config().layers));
  return s;
}

std::vector<std::vector<float>> reference_model::forward(std::span<sequence* const> seqs,
                                                         std::span<const std::vector<std::int32_t>> tokens,
                                                         logits_for which, const row_inputs* inputs) const {
  const model_config& c = config();
  if (seqs.size() != tokens.size())
    throw std::logic_error(fmt::format("forward: {} sequences but {} token lists", seqs.size(), tokens.size()));
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    for (std::size_t t = 0; t < s; ++t)
      if (seqs[s] == seqs[t]) throw std::logic_error("forward: the same sequence twice in one batch");
    if (seqs[s]->keys.size() != static_cast<std::size_t>(c.layers))
      throw std::logic_error("forward: a sequence not made by this model's new_sequence()");
    const auto n = static_cast<std::int64_t>(tokens[s].size());
    if (seqs[s]->length + n > c.max_position)
      throw usage_error(fmt::format("sequence {}: {} tokens held + {} new exceed the context of {} ({} tokens)", s,
                                    seqs[s]->length, n, c.name, c.max_position));
    for (const auto t : tokens[s])
      if (t < 0 || t >= c.vocab)
        throw usage_error(fmt::format("sequence {}: token {} is outside the vocabulary 0..{}", s, t, c.vocab - 1));
  }

  // Rows: every new token of every sequence, sequence by sequence. A sequence empty before the
  // pass (a prefill from position 0) attends over its own rows' K and V as computed (first_row: its
  // first row); the others read their cache (the header says why).
  std::vector<std::size_t> row_seq;
  std::vector<std::int64_t> row_pos, first_row(seqs.size(), -1);
  for (std::size_t s = 0; s < seqs.size(); ++s)
    for (std::size_t i = 0; i < tokens[s].size(); ++i) {
      if (i == 0 && seqs[s]->length == 0) first_row[s] = static_cast<std::int64_t>(row_seq.size());
      row_seq.push_back(s);
      row_pos.push_back(seqs[s]->length + static_cast<std::int64_t>(i));
    }
  const auto rows = static_cast<std::int64_t>(row_seq.size());
  std::vector<std::vector<float>> result(seqs.size());
  if (rows == 0) return result;

  const std::int64_t hidden = c.hidden, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim, inter = c.intermediate;
  const std::int64_t group = c.heads / c.kv_heads;
  const auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };

  std::vector<float> x(sz(rows * hidden)), h(sz(rows * hidden)), tmp(sz(rows * hidden));
  std::vector<float> q(sz(rows * qd)), k(sz(rows * kvd)), v(sz(rows * kvd)), att(sz(rows * qd));
  std::vector<float> gate(sz(rows * inter)), up(sz(rows * inter));
  {
    std::int64_t r = 0;
    for (std::size_t s = 0; s < seqs.size(); ++s)
      for (const auto t : tokens[s]) {
        std::copy_n(m_weights.embedding.begin() + t * hidden, hidden, x.begin() + r * hidden);
        ++r;
      }
    if (inputs) {
      if (inputs->values.size() != inputs->rows.size() * sz(hidden))
        throw std::logic_error(fmt::format("forward: {} input values for {} rows of {}", inputs->values.size(),
                                           inputs->rows.size(), hidden));
      for (std::size_t i = 0; i < inputs->rows.size(); ++i) {
        const std::int64_t row = inputs->rows[i];
        if (row < 0 || row >= rows)
          throw std::logic_error(fmt::format("forward: input row {} outside the {} rows", row, rows));
        std::copy_n(inputs->values.begin() + static_cast<std::ptrdiff_t>(i * sz(hidden)), hidden,
                    x.begin() + row * hidden);
      }
    }
  }

  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  std::vector<double> scores;
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const layer_weights& lw = m_weights.layers[sz(l)];
    for (std::int64_t r = 0; r < rows; ++r)
      rms_norm(&x[sz(r * hidden)], lw.input_norm.data(), &h[sz(r * hidden)], hidden, c.rms_norm_eps);
    linear(h, rows, hidden, lw.q_proj, qd, q);
    linear(h, rows, hidden, lw.k_proj, kvd, k);
    linear(h, rows, hidden, lw.v_proj, kvd, v);
    add_bias(q, rows, lw.q_bias);
    add_bias(k, rows, lw.k_bias);
    add_bias(v, rows, lw.v_bias);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t head = 0; head < c.heads; ++head) apply_rope(&q[sz(r * qd + head * hd)], hd, row_pos[sz(r)], m_inv_freq);
      for (std::int64_t head = 0; head < c.kv_heads; ++head)
        apply_rope(&k[sz(r * kvd + head * hd)], hd, row_pos[sz(r)], m_inv_freq);
    }
    // Append this layer's K and V: each row goes to its sequence at its position.
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      const auto held = seqs[s]->length + static_cast<std::int64_t>(tokens[s].size());
      seqs[s]->keys[sz(l)].resize(sz(held * kvd));
      seqs[s]->values[sz(l)].resize(sz(held * kvd));
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      sequence& seq = *seqs[row_seq[sz(r)]];
      const auto to_cache = [&](float value) { return kv_cache_value(m_kv, value); };
      std::transform(k.begin() + r * kvd, k.begin() + (r + 1) * kvd, seq.keys[sz(l)].begin() + row_pos[sz(r)] * kvd, to_cache);
      std::transform(v.begin() + r * kvd, v.begin() + (r + 1) * kvd, seq.values[sz(l)].begin() + row_pos[sz(r)] * kvd,
                     to_cache);
    }
    // Causal attention: the query at position p sees positions 0..p of its own sequence: the
    // pass's own K and V rows for a sequence that was empty (key j is row first_row + j), its
    // cache otherwise.
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::size_t s = row_seq[sz(r)];
      const sequence& seq = *seqs[s];
      const bool own_rows = first_row[s] >= 0;
      const float* keys = own_rows ? &k[sz(first_row[s] * kvd)] : seq.keys[sz(l)].data();
      const float* values = own_rows ? &v[sz(first_row[s] * kvd)] : seq.values[sz(l)].data();
      const std::int64_t p = row_pos[sz(r)];
      scores.resize(sz(p + 1));
      for (std::int64_t head = 0; head < c.heads; ++head) {
        const float* qh = &q[sz(r * qd + head * hd)];
        const std::int64_t kv_head = head / group;
        double max_score = -INFINITY;
        for (std::int64_t j = 0; j <= p; ++j) {
          const float* kj = &keys[sz(j * kvd + kv_head * hd)];
          double dot = 0;
          for (std::int64_t d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * kj[d];
          scores[sz(j)] = dot * scale;
          max_score = std::max(max_score, scores[sz(j)]);
        }
        double total = 0;
        for (std::int64_t j = 0; j <= p; ++j) total += scores[sz(j)] = std::exp(scores[sz(j)] - max_score);
        float* out = &att[sz(r * qd + head * hd)];
        for (std::int64_t d = 0; d < hd; ++d) {
          double acc = 0;
          for (std::int64_t j = 0; j <= p; ++j) acc += scores[sz(j)] * values[sz(j * kvd + kv_head * hd + d)];
          out[d] = static_cast<float>(acc / total);
        }
      }
    }
    linear(att, rows, qd, lw.o_proj, hidden, tmp);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];

    for (std::int64_t r = 0; r < rows; ++r)
      rms_norm(&x[sz(r * hidden)], lw.post_attention_norm.data(), &h[sz(r * hidden)], hidden, c.rms_norm_eps);
    linear(h, rows, hidden, lw.gate_proj, inter, gate);
    linear(h, rows, hidden, lw.up_proj, inter, up);
    for (std::size_t i = 0; i < gate.size(); ++i) {
      const double g = gate[i];
      gate[i] = static_cast<float>(g / (1.0 + std::exp(-g))) * up[i];  // silu(gate) * up
    }
    linear(gate, rows, inter, lw.down_proj, hidden, tmp);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
  }
  for (std::size_t s = 0; s < seqs.size(); ++s) seqs[s]->length += static_cast<std::int64_t>(tokens[s].size());

  // Final norm and LM head over the rows whose logits are wanted.
  std::vector<std::int64_t> out_rows;
  for (std::int64_t r = 0; r < rows; ++r) {
    const bool last = r + 1 == rows || row_seq[sz(r + 1)] != row_seq[sz(r)];
    if (which == logits_for::all_positions || last) out_rows.push_back(r);
  }
  const auto n_out = static_cast<std::int64_t>(out_rows.size());
  std::vector<float> hn(sz(n_out * hidden)), logits(sz(n_out * c.vocab));
  for (std::int64_t i = 0; i < n_out; ++i)
    rms_norm(&x[sz(out_rows[sz(i)] * hidden)], m_weights.final_norm.data(), &hn[sz(i * hidden)], hidden, c.rms_norm_eps);
  linear(hn, n_out, hidden, m_weights.lm_head_matrix(), c.vocab, logits);
  for (std::int64_t i = 0; i < n_out; ++i) {
    auto& dst = result[row_seq[sz(out_rows[sz(i)])]];
    dst.insert(dst.end(), logits.begin() + i * c.vocab, logits.begin() + (i + 1) * c.vocab);
  }
  return result;
}

std::vector<float> reference_model::prefill(sequence& seq, std::span<const std::int32_t> tokens) const {
  sequence* seqs[] = {&seq};
  const std::vector<std::vector<std::int32_t>> lists = {{tokens.begin(), tokens.end()}};
  return std::move(forward(seqs, lists, logits_for::all_positions)[0]);
}

std::vector<float> reference_model::decode_step(sequence& seq, std::int32_t token) const {
  sequence* seqs[] = {&seq};
  const std::vector<std::vector<std::int32_t>> lists = {{token}};
  return std::move(forward(seqs, lists, logits_for::last_position)[0]);
}

std::vector<std::int32_t> reference_model::generate(std::span<const std::int32_t> prompt, std::int64_t new_tokens) const {
  const std::vector<std::vector<std::int32_t>> prompts = {{prompt.begin(), prompt.end()}};
  return std::move(generate(prompts, new_tokens)[0]);
}

std::vector<std::vector<std::int32_t>> reference_model::generate(std::span<const std::vector<std::int32_t>> prompts,
                                                                 std::int64_t new_tokens) const {
  for (std::size_t s = 0; s < prompts.size(); ++s)
    if (prompts[s].empty()) throw usage_error(fmt::format("prompt {} is empty: generation needs at least one token", s));
  if (new_tokens < 0) throw usage_error(fmt::format("cannot generate {} tokens", new_tokens));
  std::vector<sequence> seqs(prompts.size(), new_sequence());
  std::vector<sequence*> ptrs;
  for (auto& s : seqs) ptrs.push_back(&s);
  std::vector<std::vector<std::int32_t>> generated(prompts.size());
  if (new_tokens == 0) return generated;

  auto logits = forward(ptrs, prompts, logits_for::last_position);
  std::vector<std::vector<std::int32_t>> next(prompts.size());
  for (std::int64_t step = 0;; ++step) {
    for (std::size_t s = 0; s < prompts.size(); ++s) {
      const std::int32_t token = argmax(logits[s]);
      generated[s].push_back(token);
      next[s] = {token};
    }
    if (step + 1 == new_tokens) break;
    logits = forward(ptrs, next, logits_for::last_position);
  }
  return generated;
}

}  // namespace itera::llm
