#include "workloads/llm/cpu_engine.hpp"

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "workloads/gemm/numeric.hpp"

namespace itera::llm {
namespace {

// The reference model's cache precision for the case's: a 16-bit cache (bf16 or fp16) is held in
// fp32, as computed.
dtype reference_kv(dtype kv) {
  if (kv == dtype::bf16 || kv == dtype::fp16 || kv == dtype::fp32) return dtype::fp32;
  if (kv == dtype::fp8_e4m3) return kv;
  throw usage_error(
      fmt::format("llm cpu engine: KV cache {}: choose bf16 or fp16 (held in fp32) or fp8_e4m3", dtype_name(kv)));
}

}  // namespace

cpu_engine::cpu_engine(model_weights weights, const cpu_engine_options& options)
    : m_weights(std::make_unique<model_weights>(std::move(weights))),
      m_options(options),
      m_model(*m_weights, reference_kv(options.kv)) {
  const model_config& c = m_weights->config;
  if (m_options.slots < 1) throw usage_error(fmt::format("llm cpu engine: batch {} must be at least 1", m_options.slots));
  if (m_options.max_context < 1 || m_options.max_context > c.max_position)
    throw usage_error(fmt::format("llm cpu engine: context {} must be in 1..{} ({})", m_options.max_context,
                                  c.max_position, c.name));
  if (m_options.max_prompt <= 0 || m_options.max_prompt > m_options.max_context)
    m_options.max_prompt = m_options.max_context;
  const auto n = static_cast<std::size_t>(m_options.slots);
  m_seqs.resize(n);
  for (auto& s : m_seqs) s = m_model.new_sequence();
  m_busy.assign(n, false);
  m_next.assign(n, 0);
}

engine_memory cpu_engine::memory() const {
  const model_config& c = m_weights->config;
  engine_memory r;
  r.weights = static_cast<std::uint64_t>(count_params(c).total()) * sizeof(float);
  std::uint64_t held = 0;
  for (const auto& s : m_seqs) held += static_cast<std::uint64_t>(s.length);
  r.kv_cache = held * static_cast<std::uint64_t>(kv_bytes_per_token(c, dtype::fp32));
  return r;
}

std::string cpu_engine::precision_note() const {
  const dtype storage = m_weights->storage;
  const std::string weights = fmt::format("{} weight values{}", dtype_name(storage),
                                          storage == dtype::fp8_e4m3 && m_weights->config.fp8_lm_head
                                              ? " (the LM head's too)"
                                              : "");
  if (m_model.kv() == dtype::fp8_e4m3)
    return fmt::format("{} widened to fp32; fp32 activations and accumulation (OpenBLAS sgemm); KV cache fp8 e4m3 "
                       "(scale 1, saturating), K and V rounded at the cache store and held widened to fp32; a prefill "
                       "attends over its own K and V unrounded, decode steps read the rounded cache",
                       weights);
  return fmt::format("{} widened to fp32; fp32 activations, KV cache and accumulation (OpenBLAS sgemm)", weights);
}

void cpu_engine::stage_prompts(std::span<const std::int32_t> ids) {
  const auto vocab = m_weights->config.vocab;
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw usage_error(fmt::format("llm cpu engine: token {} at {} is outside the vocabulary 0..{}", ids[i], i, vocab - 1));
  m_staged.assign(ids.begin(), ids.end());
  m_input_rows.clear();
  m_input_values.clear();
}

void cpu_engine::stage_embeddings(const embedding_rows& e) {
  if (e.on_device)
    throw usage_error("llm cpu engine: embedding rows on a device were given to the cpu engine: copy them to the host");
  check_embedding_rows(e.rows, static_cast<std::int64_t>(m_staged.size()), "llm cpu engine");
  const std::int64_t hidden = m_weights->config.hidden;
  if (!e.rows.empty() && e.values == nullptr) throw usage_error("llm cpu engine: embedding rows without values");
  m_input_rows.assign(e.rows.begin(), e.rows.end());
  m_input_values.resize(e.rows.size() * static_cast<std::size_t>(hidden));
  for (std::size_t i = 0; i < m_input_values.size(); ++i) m_input_values[i] = gemm::numeric::bf16_to_float(e.values[i]);
}

void cpu_engine::prefill_staged(std::int64_t first, std::int64_t count, std::int64_t prompt_len) {
  if (first < 0 || count < 1 || first + count > m_options.slots)
    throw usage_error(fmt::format("llm cpu engine: slots {}..{} outside 0..{}", first, first + count - 1, m_options.slots - 1));
  if (prompt_len < 1 || prompt_len > m_options.max_prompt)
    throw usage_error(fmt::format("llm cpu engine: prompt of {} tokens, must be in 1..{}", prompt_len, m_options.max_prompt));
  if (static_cast<std::int64_t>(m_staged.size()) != count * prompt_len)
    throw usage_error(fmt::format("llm cpu engine: {} staged ids for {} prompts of {}", m_staged.size(), count, prompt_len));
  std::vector<sequence*> seqs;
  std::vector<std::vector<std::int32_t>> tokens;
  for (std::int64_t i = 0; i < count; ++i) {
    auto& s = m_seqs[static_cast<std::size_t>(first + i)];
    s = m_model.new_sequence();
    seqs.push_back(&s);
    const auto* p = m_staged.data() + i * prompt_len;
    tokens.emplace_back(p, p + prompt_len);
  }
  const reference_model::row_inputs inputs{m_input_rows, m_input_values};
  const auto logits =
      m_model.forward(seqs, tokens, logits_for::last_position, m_input_rows.empty() ? nullptr : &inputs);
  m_input_rows.clear();
  m_input_values.clear();
  for (std::int64_t i = 0; i < count; ++i) {
    m_next[static_cast<std::size_t>(first + i)] = argmax(logits[static_cast<std::size_t>(i)]);
    m_busy[static_cast<std::size_t>(first + i)] = true;
  }
}

void cpu_engine::decode(std::int64_t rows) {
  if (rows < 1 || rows > m_options.slots)
    throw usage_error(fmt::format("llm cpu engine: a decode step of {} rows; the engine holds 1..{}", rows, m_options.slots));
  std::vector<sequence*> seqs;
  std::vector<std::vector<std::int32_t>> tokens;
  std::vector<std::size_t> which;
  for (std::int64_t i = 0; i < rows; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (!m_busy[k]) continue;  // a free slot computes nothing here: its token would be thrown away
    if (m_seqs[k].length + 1 > m_options.max_context)
      throw usage_error(fmt::format("llm cpu engine: slot {} holds {} tokens; 1 more exceeds the context of {}", i,
                                    m_seqs[k].length, m_options.max_context));
    seqs.push_back(&m_seqs[k]);
    tokens.push_back({m_next[k]});
    which.push_back(k);
  }
  if (seqs.empty()) return;
  const auto logits = m_model.forward(seqs, tokens, logits_for::last_position);
  for (std::size_t i = 0; i < which.size(); ++i) m_next[which[i]] = argmax(logits[i]);
}

void cpu_engine::release(std::int64_t slot) {
  if (slot < 0 || slot >= m_options.slots)
    throw usage_error(fmt::format("llm cpu engine: slot {} outside 0..{}", slot, m_options.slots - 1));
  m_busy[static_cast<std::size_t>(slot)] = false;
  m_seqs[static_cast<std::size_t>(slot)] = m_model.new_sequence();
}

std::int64_t cpu_engine::length(std::int64_t slot) const { return m_seqs.at(static_cast<std::size_t>(slot)).length; }

void cpu_engine::record_ids(std::int64_t rows) {
  if (rows < 1 || rows > m_options.slots)
    throw usage_error(fmt::format("llm cpu engine: record {} ids; the engine holds 1..{}", rows, m_options.slots));
  m_recorded.emplace_back(m_next.begin(), m_next.begin() + rows);
}

std::vector<std::vector<std::int32_t>> cpu_engine::take_recorded() { return std::exchange(m_recorded, {}); }

}  // namespace itera::llm
