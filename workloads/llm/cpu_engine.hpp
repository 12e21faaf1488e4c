#pragma once
// The llm engine on the cpu backend: the reference model (llm_cpu.hpp) behind the engine interface,
// so the scenarios run on a machine without a GPU and tests can drive them. fp32 arithmetic on
// weights that hold values of their storage type; one sequence per slot, its cache in host memory.
// KV cache: a bf16 or fp16 case holds it in fp32 (as computed); fp8_e4m3 rounds K and V to e4m3 at
// the store (scale 1, saturating) and holds them widened. A prefill attends over its own K and V
// unrounded, decode steps read the rounded cache: what the cuda engine does (llm_cpu.hpp). The
// case's compute type (bf16 or fp16) changes nothing here: activations are fp32, the engine is the
// oracle the cuda engine's both compute types are checked against.
#include <memory>

#include "workloads/llm/engine.hpp"
#include "workloads/llm/llm_cpu.hpp"
#include "workloads/llm/weights.hpp"

namespace itera::llm {

struct cpu_engine_options {
  std::int64_t slots = 1;
  std::int64_t max_context = 0;
  std::int64_t max_prompt = 0;  // 0: max_context
  dtype kv = dtype::bf16;       // bf16 or fp16 (held in fp32) or fp8_e4m3
};

class cpu_engine final : public engine {
 public:
  // Takes the weights (they live as long as the engine).
  cpu_engine(model_weights weights, const cpu_engine_options& options);

  const model_config& config() const override { return m_weights->config; }
  std::int64_t slots() const override { return m_options.slots; }
  std::int64_t max_context() const override { return m_options.max_context; }
  std::int64_t max_prompt() const override { return m_options.max_prompt; }
  engine_memory memory() const override;
  std::string precision_note() const override;
  void stage_prompts(std::span<const std::int32_t> ids) override;
  void stage_embeddings(const embedding_rows& rows) override;
  void prefill_staged(std::int64_t first, std::int64_t count, std::int64_t prompt_len) override;
  void decode(std::int64_t rows) override;
  void release(std::int64_t slot) override;
  std::int64_t length(std::int64_t slot) const override;
  void record_ids(std::int64_t rows) override;
  std::vector<std::vector<std::int32_t>> take_recorded() override;
  void synchronize() override {}

 private:
  std::unique_ptr<model_weights> m_weights;  // stable address: the reference model refers to it
  cpu_engine_options m_options;
  reference_model m_model;
  std::vector<sequence> m_seqs;
  std::vector<bool> m_busy;
  std::vector<std::int32_t> m_next;
  std::vector<std::int32_t> m_staged;
  std::vector<std::int64_t> m_input_rows;  // stage_embeddings(), for the next prefill
  std::vector<float> m_input_values;
  std::vector<std::vector<std::int32_t>> m_recorded;
};

}  // namespace itera::llm
