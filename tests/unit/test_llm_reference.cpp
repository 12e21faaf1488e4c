// The cpu reference of the llm model, the oracle of the cuda engine: its KV cache gives the same
// logits as a full prefill, a batch gives what each sequence gives alone, generation is
// deterministic, and the pieces check against hand computations (RMSNorm, RoPE, attention with one
// key, a model whose layers add nothing).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <numeric>
#include <vector>

#include "itera/core/errors.hpp"
#include "workloads/llm/llm_cpu.hpp"
#include "tests/support/numeric_error.hpp"

namespace itera::llm {
namespace {

using test::normalised_error;  // ||a - b||_2 / ||b||_2, the sizes checked

std::vector<std::int32_t> some_tokens(std::size_t n, std::uint32_t salt) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::int32_t>((i * 97 + salt * 31 + 5) % 256);
  return t;
}

std::span<const float> row(const std::vector<float>& m, std::size_t r, std::int64_t width) {
  return std::span<const float>(m).subspan(r * static_cast<std::size_t>(width), static_cast<std::size_t>(width));
}

TEST(LlmReference, KvCacheGivesThePrefillLogits) {
  const auto w = random_weights(preset("tiny"), dtype::bf16, 11);
  const reference_model model(w);
  const auto tokens = some_tokens(12, 1);
  const auto vocab = model.config().vocab;

  auto full = model.new_sequence();
  const auto all = model.prefill(full, tokens);
  ASSERT_EQ(all.size(), tokens.size() * static_cast<std::size_t>(vocab));
  EXPECT_EQ(full.length, 12);

  auto stepwise = model.new_sequence();
  const auto first = model.prefill(stepwise, std::span(tokens).first(1));
  EXPECT_LE(normalised_error(first, row(all, 0, vocab)), 1e-4);
  for (std::size_t i = 1; i < tokens.size(); ++i) {
    const auto logits = model.decode_step(stepwise, tokens[i]);
    EXPECT_LE(normalised_error(logits, row(all, i, vocab)), 1e-4) << "position " << i;
  }

  // Prefill in two chunks: the second attends to the first through the cache.
  auto chunked = model.new_sequence();
  (void)model.prefill(chunked, std::span(tokens).first(5));
  const auto rest = model.prefill(chunked, std::span(tokens).subspan(5));
  for (std::size_t i = 5; i < tokens.size(); ++i)
    EXPECT_LE(normalised_error(row(rest, i - 5, vocab), row(all, i, vocab)), 1e-4) << "position " << i;
  for (std::size_t l = 0; l < full.keys.size(); ++l) {
    EXPECT_LE(normalised_error(chunked.keys[l], full.keys[l]), 1e-5);
    EXPECT_LE(normalised_error(stepwise.values[l], full.values[l]), 1e-5);
  }
}

TEST(LlmReference, BatchEqualsOneByOne) {
  auto c = preset("tiny");
  c.attention_bias = true;  // the Qwen2 path too
  const auto w = random_weights(c, dtype::bf16, 5);
  const reference_model model(w);
  const std::vector<std::vector<std::int32_t>> prompts = {some_tokens(3, 1), some_tokens(7, 2), some_tokens(1, 3)};

  std::vector<sequence> batch(prompts.size(), model.new_sequence()), alone(prompts.size(), model.new_sequence());
  std::vector<sequence*> ptrs;
  for (auto& s : batch) ptrs.push_back(&s);
  const auto batched = model.forward(ptrs, prompts, logits_for::all_positions);
  ASSERT_EQ(batched.size(), prompts.size());
  for (std::size_t s = 0; s < prompts.size(); ++s) {
    const auto single = model.prefill(alone[s], prompts[s]);
    EXPECT_LE(normalised_error(batched[s], single), 1e-5) << "sequence " << s;
  }
  // Decode steps together, the sequences at different lengths.
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<std::int32_t>> next;
    for (std::size_t s = 0; s < prompts.size(); ++s) next.push_back({static_cast<std::int32_t>(17 * step + s)});
    const auto together = model.forward(ptrs, next, logits_for::last_position);
    for (std::size_t s = 0; s < prompts.size(); ++s) {
      const auto single = model.decode_step(alone[s], next[s][0]);
      EXPECT_LE(normalised_error(together[s], single), 1e-5) << "step " << step << " sequence " << s;
      EXPECT_EQ(argmax(together[s]), argmax(single));
    }
  }
  EXPECT_EQ(batch[1].length, 7 + 4);

  const auto generated = model.generate(prompts, 6);
  for (std::size_t s = 0; s < prompts.size(); ++s) EXPECT_EQ(generated[s], model.generate(prompts[s], 6));
}

TEST(LlmReference, GreedyGenerationIsDeterministic) {
  const auto w = random_weights(preset("tiny"), dtype::bf16, 3);
  const auto again = random_weights(preset("tiny"), dtype::bf16, 3);
  const reference_model a(w), b(again);
  const auto prompt = some_tokens(9, 4);
  const auto out = a.generate(prompt, 16);
  ASSERT_EQ(out.size(), 16u);
  for (const auto t : out) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 256);
  }
  EXPECT_EQ(out, a.generate(prompt, 16));
  EXPECT_EQ(out, b.generate(prompt, 16));

  // The first token is the argmax of the prefill's last logits; the next, of the decode that feeds it back.
  auto seq = a.new_sequence();
  const auto logits = a.prefill(seq, prompt);
  EXPECT_EQ(out[0], argmax(row(logits, prompt.size() - 1, 256)));
  EXPECT_EQ(out[1], argmax(a.decode_step(seq, out[0])));
}

// Hand check: attention and MLP weights zero, so each layer adds nothing and the logits are
// lm_head x rmsnorm(embedding[token]) with the final norm's weights, computed here in double.
TEST(LlmReference, ZeroLayersLeaveTheEmbedding) {
  auto c = preset("tiny");
  c.layers = 1;
  auto w = random_weights(c, dtype::bf16, 9);
  auto& l = w.layers[0];
  for (auto* t : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj})
    std::fill(t->begin(), t->end(), 0.0f);
  const reference_model model(w);
  const std::vector<std::int32_t> tokens = {3, 200, 3, 77};
  auto seq = model.new_sequence();
  const auto logits = model.prefill(seq, tokens);
  for (std::size_t p = 0; p < tokens.size(); ++p) {
    const float* e = &w.embedding[static_cast<std::size_t>(tokens[p] * c.hidden)];
    double ms = 0;
    for (std::int64_t i = 0; i < c.hidden; ++i) ms += static_cast<double>(e[i]) * e[i];
    const double inv_rms = 1.0 / std::sqrt(ms / static_cast<double>(c.hidden) + c.rms_norm_eps);
    std::vector<float> expected(static_cast<std::size_t>(c.vocab));
    for (std::int64_t v = 0; v < c.vocab; ++v) {
      double dot = 0;
      for (std::int64_t i = 0; i < c.hidden; ++i)
        dot += w.lm_head[static_cast<std::size_t>(v * c.hidden + i)] * (e[i] * inv_rms) * w.final_norm[static_cast<std::size_t>(i)];
      expected[static_cast<std::size_t>(v)] = static_cast<float>(dot);
    }
    EXPECT_LE(normalised_error(row(logits, p, c.vocab), expected), 1e-6) << "position " << p;
  }
  EXPECT_LE(normalised_error(row(logits, 0, c.vocab), row(logits, 2, c.vocab)), 1e-6) << "same token, any position";
}

// Hand check of attention and grouped-query heads: one token attends only to itself, so query head
// h outputs v of kv head h / group, whatever q and k are; the MLP is zero.
TEST(LlmReference, OneTokenAttendsToItself) {
  auto c = preset("tiny");
  c.layers = 1;
  c.attention_bias = true;
  auto w = random_weights(c, dtype::bf16, 13);
  auto& l = w.layers[0];
  for (auto* t : {&l.gate_proj, &l.up_proj, &l.down_proj}) std::fill(t->begin(), t->end(), 0.0f);
  const reference_model model(w);
  const std::int32_t token = 42;
  auto seq = model.new_sequence();
  const auto logits = model.prefill(seq, std::vector<std::int32_t>{token});

  const auto H = static_cast<std::size_t>(c.hidden), kvd = static_cast<std::size_t>(c.kv_dim());
  const auto hd = static_cast<std::size_t>(c.head_dim), group = static_cast<std::size_t>(c.heads / c.kv_heads);
  const auto norm = [&](const std::vector<double>& x, const std::vector<float>& weight) {
    double ms = 0;
    for (const double v : x) ms += v * v;
    const double inv = 1.0 / std::sqrt(ms / static_cast<double>(x.size()) + c.rms_norm_eps);
    std::vector<double> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * weight[i];
    return out;
  };
  std::vector<double> x(w.embedding.begin() + token * c.hidden, w.embedding.begin() + (token + 1) * c.hidden);
  const auto xn = norm(x, l.input_norm);
  std::vector<double> v(kvd);
  for (std::size_t o = 0; o < kvd; ++o) {
    v[o] = l.v_bias[o];
    for (std::size_t i = 0; i < H; ++i) v[o] += l.v_proj[o * H + i] * xn[i];
  }
  std::vector<double> att(static_cast<std::size_t>(c.q_dim()));
  for (std::size_t head = 0; head < static_cast<std::size_t>(c.heads); ++head)
    for (std::size_t d = 0; d < hd; ++d) att[head * hd + d] = v[(head / group) * hd + d];
  for (std::size_t o = 0; o < H; ++o)
    for (std::size_t i = 0; i < att.size(); ++i) x[o] += l.o_proj[o * att.size() + i] * att[i];
  const auto final_x = norm(x, w.final_norm);
  std::vector<float> expected(static_cast<std::size_t>(c.vocab));
  for (std::size_t t = 0; t < expected.size(); ++t) {
    double dot = 0;
    for (std::size_t i = 0; i < H; ++i) dot += w.lm_head[t * H + i] * final_x[i];
    expected[t] = static_cast<float>(dot);
  }
  EXPECT_LE(normalised_error(logits, expected), 1e-5);
}

// The whole model written again the naive way, in double, position by position with no cache:
// what the reference must agree with, on a config with every feature (biases, grouped-query
// attention, llama3 RoPE scaling, two layers).
std::vector<float> naive_logits(const model_weights& w, const std::vector<std::int32_t>& tokens) {
  const auto& c = w.config;
  const auto H = static_cast<std::size_t>(c.hidden), I = static_cast<std::size_t>(c.intermediate);
  const auto qd = static_cast<std::size_t>(c.q_dim()), kvd = static_cast<std::size_t>(c.kv_dim());
  const auto hd = static_cast<std::size_t>(c.head_dim), half = hd / 2, group = static_cast<std::size_t>(c.heads / c.kv_heads);
  const auto n = tokens.size();
  const auto inv_freq = rope_inv_freq(c);
  using vec = std::vector<double>;
  const auto norm = [&](const vec& x, const std::vector<float>& weight) {
    double ms = 0;
    for (const double v : x) ms += v * v;
    const double inv = 1.0 / std::sqrt(ms / static_cast<double>(x.size()) + c.rms_norm_eps);
    vec out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * weight[i];
    return out;
  };
  const auto matvec = [](const std::vector<float>& m, const vec& x, std::size_t out, const std::vector<float>& bias) {
    vec y(out);
    for (std::size_t o = 0; o < out; ++o) {
      y[o] = bias.empty() ? 0.0 : bias[o];
      for (std::size_t i = 0; i < x.size(); ++i) y[o] += m[o * x.size() + i] * x[i];
    }
    return y;
  };
  const auto rope = [&](vec& v, std::size_t offset, std::size_t pos) {
    for (std::size_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(pos) * inv_freq[i];
      const double x1 = v[offset + i], x2 = v[offset + i + half];
      v[offset + i] = x1 * std::cos(a) - x2 * std::sin(a);
      v[offset + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
    }
  };
  std::vector<vec> x(n);
  for (std::size_t p = 0; p < n; ++p)
    x[p] = vec(w.embedding.begin() + static_cast<std::ptrdiff_t>(tokens[p] * H),
               w.embedding.begin() + static_cast<std::ptrdiff_t>((tokens[p] + 1) * H));
  const std::vector<float> none;
  for (const auto& l : w.layers) {
    std::vector<vec> q(n), k(n), v(n);
    for (std::size_t p = 0; p < n; ++p) {
      const auto h = norm(x[p], l.input_norm);
      q[p] = matvec(l.q_proj, h, qd, l.q_bias);
      k[p] = matvec(l.k_proj, h, kvd, l.k_bias);
      v[p] = matvec(l.v_proj, h, kvd, l.v_bias);
      for (std::size_t head = 0; head < qd / hd; ++head) rope(q[p], head * hd, p);
      for (std::size_t head = 0; head < kvd / hd; ++head) rope(k[p], head * hd, p);
    }
    for (std::size_t p = 0; p < n; ++p) {
      vec att(qd, 0.0);
      for (std::size_t head = 0; head < qd / hd; ++head) {
        const std::size_t g = head / group;
        vec s(p + 1);
        double peak = -INFINITY, total = 0;
        for (std::size_t j = 0; j <= p; ++j) {
          s[j] = 0;
          for (std::size_t d = 0; d < hd; ++d) s[j] += q[p][head * hd + d] * k[j][g * hd + d];
          s[j] /= std::sqrt(static_cast<double>(hd));
          peak = std::max(peak, s[j]);
        }
        for (auto& e : s) total += e = std::exp(e - peak);
        for (std::size_t j = 0; j <= p; ++j)
          for (std::size_t d = 0; d < hd; ++d) att[head * hd + d] += s[j] / total * v[j][g * hd + d];
      }
      const auto o = matvec(l.o_proj, att, H, none);
      for (std::size_t i = 0; i < H; ++i) x[p][i] += o[i];
      const auto h = norm(x[p], l.post_attention_norm);
      const auto gate = matvec(l.gate_proj, h, I, none), up = matvec(l.up_proj, h, I, none);
      vec act(I);
      for (std::size_t i = 0; i < I; ++i) act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      const auto down = matvec(l.down_proj, act, H, none);
      for (std::size_t i = 0; i < H; ++i) x[p][i] += down[i];
    }
  }
  std::vector<float> logits;
  for (std::size_t p = 0; p < n; ++p) {
    const auto out = matvec(w.lm_head_matrix(), norm(x[p], w.final_norm), static_cast<std::size_t>(c.vocab), none);
    logits.insert(logits.end(), out.begin(), out.end());
  }
  return logits;
}

TEST(LlmReference, AgreesWithANaiveDoublePrecisionModel) {
  auto c = preset("tiny");
  c.attention_bias = true;
  c.rope_scaling = rope_scaling_llama3{8.0, 1.0, 4.0, 16};  // short wavelengths, so the tiny head's bands all occur
  // Larger weights than the initializer's, so attention is far from uniform and a wrong position,
  // bias or head shows in the logits.
  auto w = random_weights(c, dtype::bf16, 21);
  for (auto& l : w.layers)
    for (auto* t : {&l.q_proj, &l.k_proj, &l.q_bias, &l.k_bias})
      for (auto& v : *t) v = round_to_storage(dtype::bf16, v * 25.0f);
  const reference_model model(w);
  const auto tokens = some_tokens(9, 6);
  auto seq = model.new_sequence();
  const auto logits = model.prefill(seq, tokens);
  const auto expected = naive_logits(w, tokens);
  for (std::size_t p = 0; p < tokens.size(); ++p)
    EXPECT_LE(normalised_error(row(logits, p, c.vocab), row(expected, p, c.vocab)), 1e-5) << "position " << p;
}

TEST(LlmReference, RmsNormByHand) {
  const float x[] = {3.0f, 4.0f}, weight[] = {1.0f, 2.0f};
  float out[2];
  rms_norm(x, weight, out, 2, 0.0);
  const double rms = std::sqrt((9.0 + 16.0) / 2);
  EXPECT_NEAR(out[0], 3.0 / rms, 1e-6);
  EXPECT_NEAR(out[1], 2.0 * 4.0 / rms, 1e-6);
}

TEST(LlmReference, RopeAtZeroIsIdentityAndDependsOnRelativePosition) {
  const auto c = preset("tiny");
  const auto inv = rope_inv_freq(c);
  ASSERT_EQ(inv.size(), 8u);
  EXPECT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[1], std::pow(10000.0, -2.0 / 16), 1e-7);

  std::vector<float> q(16), k(16);
  for (std::size_t i = 0; i < 16; ++i) {
    q[i] = gemm::random_value(1, i);
    k[i] = gemm::random_value(2, i);
  }
  auto q0 = q;
  apply_rope(q0.data(), 16, 0, inv);
  EXPECT_EQ(q0, q) << "position 0 rotates nothing";

  const auto rotated_dot = [&](std::int64_t m, std::int64_t n) {
    auto qm = q, kn = k;
    apply_rope(qm.data(), 16, m, inv);
    apply_rope(kn.data(), 16, n, inv);
    return std::inner_product(qm.begin(), qm.end(), kn.begin(), 0.0);
  };
  const double base = rotated_dot(7, 3);
  EXPECT_NEAR(rotated_dot(107, 103), base, 1e-4 * std::abs(base) + 1e-6);
  EXPECT_NEAR(rotated_dot(4, 0), base, 1e-4 * std::abs(base) + 1e-6);
  EXPECT_GT(std::abs(rotated_dot(3, 7) - base), 1e-3) << "and not only on the distance's magnitude";

  // Rotation keeps the norm.
  auto qr = q;
  apply_rope(qr.data(), 16, 300, inv);
  EXPECT_NEAR(std::inner_product(qr.begin(), qr.end(), qr.begin(), 0.0),
              std::inner_product(q.begin(), q.end(), q.begin(), 0.0), 1e-5);

  // rotate_half pairs element i with i + head_dim / 2: at position 1 the first pair turns by inv[0].
  std::vector<float> e(16, 0.0f);
  e[0] = 1.0f;
  apply_rope(e.data(), 16, 1, inv);
  EXPECT_NEAR(e[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(e[8], std::sin(1.0), 1e-6);
  EXPECT_EQ(e[1], 0.0f);
}

TEST(LlmReference, Llama3ScalingKeepsHighFrequenciesAndDividesLowOnes) {
  const auto scaled = preset("llama-3.1-8b");
  auto plain = scaled;
  plain.rope_scaling.reset();
  const auto a = rope_inv_freq(scaled), b = rope_inv_freq(plain);
  ASSERT_EQ(a.size(), 64u);
  EXPECT_EQ(a.front(), b.front()) << "wavelength 2 pi < 8192 / 4: kept";
  EXPECT_NEAR(a.back() / b.back(), 1.0 / 8, 1e-6) << "wavelength > 8192: divided by the factor";
  int kept = 0, divided = 0, blended = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double ratio = static_cast<double>(a[i]) / b[i];
    EXPECT_GE(ratio, 1.0 / 8 - 1e-6);
    EXPECT_LE(ratio, 1.0 + 1e-6);
    if (i > 0) EXPECT_LT(a[i], a[i - 1]) << "still monotone at " << i;
    const double wavelen = 2 * std::numbers::pi / b[i];
    if (wavelen < 8192.0 / 4) {
      ++kept;
      EXPECT_EQ(a[i], b[i]) << i;
    } else if (wavelen > 8192.0) {
      ++divided;
      EXPECT_NEAR(ratio, 1.0 / 8, 1e-6) << i;
    } else {
      ++blended;
      EXPECT_TRUE(ratio > 1.0 / 8 && ratio < 1.0) << i;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

TEST(LlmReference, BadInputsAreRefusedWithTheCounts) {
  const auto w = random_weights(preset("tiny"), dtype::bf16, 1);
  const reference_model model(w);
  auto seq = model.new_sequence();
  EXPECT_THROW(model.prefill(seq, std::vector<std::int32_t>{256}), usage_error);
  EXPECT_THROW(model.prefill(seq, std::vector<std::int32_t>{-1}), usage_error);
  EXPECT_EQ(seq.length, 0) << "a refused call changes nothing";
  try {
    model.prefill(seq, std::vector<std::int32_t>(513, 1));
    ADD_FAILURE() << "513 tokens in a 512-token context";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("0 tokens held + 513 new exceed the context of tiny (512 tokens)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(model.generate(std::vector<std::int32_t>{}, 4), usage_error);
}

}  // namespace
}  // namespace itera::llm
