#include "workloads/llm/quality.hpp"

#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "workloads/llm/llm_cpu.hpp"

namespace itera::llm {

namespace {

std::vector<std::int32_t> argmax_rows(const std::vector<float>& logits, std::int64_t rows, std::int64_t vocab) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r)
    ids[static_cast<std::size_t>(r)] =
        argmax(std::span(logits).subspan(static_cast<std::size_t>(r * vocab), static_cast<std::size_t>(vocab)));
  return ids;
}

}  // namespace

quality_trace trace_logits(logits_model& model, std::span<const std::int32_t> prompts, std::int64_t prompt,
                           std::int64_t positions, const quality_trace* forced) {
  const std::int64_t n = model.sequences(), vocab = model.vocab();
  if (positions < 1) throw std::invalid_argument(fmt::format("quality: {} positions; at least 1", positions));
  if (static_cast<std::int64_t>(prompts.size()) != n * prompt)
    throw std::invalid_argument(
        fmt::format("quality: {} prompt ids for {} sequences of {} tokens", prompts.size(), n, prompt));
  if (forced && static_cast<std::int64_t>(forced->ids.size()) < positions)
    throw std::invalid_argument(
        fmt::format("quality: {} forced positions for a trace of {}", forced->ids.size(), positions));
  quality_trace t;
  t.logits.push_back(model.prefill(prompts, prompt));
  for (std::int64_t p = 0;; ++p) {
    t.ids.push_back(forced ? forced->ids[static_cast<std::size_t>(p)] : argmax_rows(t.logits.back(), n, vocab));
    if (p + 1 == positions) break;
    t.logits.push_back(model.step(t.ids.back()));
  }
  return t;
}

quality_figures compare_traces(const quality_trace& test, const quality_trace& reference) {
  if (test.logits.size() != reference.logits.size() || test.logits.empty())
    throw std::invalid_argument(fmt::format("quality: traces of {} and {} positions", test.logits.size(),
                                            reference.logits.size()));
  quality_figures f;
  double diff = 0, norm = 0;
  std::int64_t agree = 0;
  for (std::size_t p = 0; p < test.logits.size(); ++p) {
    const auto& a = test.logits[p];
    const auto& b = reference.logits[p];
    const std::size_t rows = test.ids.at(p).size();
    if (a.size() != b.size() || rows == 0 || a.size() % rows != 0)
      throw std::invalid_argument(fmt::format("quality: position {}: {} against {} logits", p, a.size(), b.size()));
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
      diff += d * d;
      norm += static_cast<double>(b[i]) * static_cast<double>(b[i]);
    }
    const std::size_t vocab = a.size() / rows;
    for (std::size_t r = 0; r < rows; ++r) {
      const auto row = [&](const std::vector<float>& v) { return std::span(v).subspan(r * vocab, vocab); };
      agree += argmax(row(a)) == argmax(row(b)) ? 1 : 0;
      ++f.positions;
    }
  }
  f.logits_rel_error = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  f.top1_agreement = static_cast<double>(agree) / static_cast<double>(f.positions);
  return f;
}

namespace {

class reference_logits final : public logits_model {
 public:
  reference_logits(model_weights w, std::int64_t n, dtype kv)
      : m_weights(std::make_unique<model_weights>(std::move(w))),
        m_model(*m_weights, kv),
        m_seqs(static_cast<std::size_t>(n)) {}
  std::int64_t sequences() const override { return static_cast<std::int64_t>(m_seqs.size()); }
  std::int64_t vocab() const override { return m_model.config().vocab; }
  std::vector<float> prefill(std::span<const std::int32_t> tokens, std::int64_t prompt) override {
    std::vector<std::vector<std::int32_t>> per_seq;
    for (std::size_t i = 0; i < m_seqs.size(); ++i) {
      m_seqs[i] = m_model.new_sequence();
      const auto row = tokens.subspan(i * static_cast<std::size_t>(prompt), static_cast<std::size_t>(prompt));
      per_seq.emplace_back(row.begin(), row.end());
    }
    return run(per_seq);
  }
  std::vector<float> step(std::span<const std::int32_t> tokens) override {
    std::vector<std::vector<std::int32_t>> per_seq;
    for (const auto t : tokens) per_seq.push_back({t});
    return run(per_seq);
  }

 private:
  std::vector<float> run(const std::vector<std::vector<std::int32_t>>& tokens) {
    std::vector<sequence*> seqs;
    for (auto& s : m_seqs) seqs.push_back(&s);
    std::vector<float> out;
    for (const auto& l : m_model.forward(seqs, tokens, logits_for::last_position)) out.insert(out.end(), l.begin(), l.end());
    return out;
  }
  std::unique_ptr<model_weights> m_weights;  // stable address: the model refers to it
  reference_model m_model;
  std::vector<sequence> m_seqs;
};

}  // namespace

std::unique_ptr<logits_model> reference_logits_model(model_weights weights, std::int64_t sequences, dtype kv) {
  return std::make_unique<reference_logits>(std::move(weights), sequences, kv);
}

}  // namespace itera::llm
