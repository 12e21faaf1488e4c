#pragma once
// Quality of a precision against a reference precision (R6, R10), beside the timings: both models
// run the same prompts, the model under test generating greedily and the reference fed the same
// tokens (teacher forcing), so every position compares logits computed from the same history.
//   logits relative error  ||test - reference|| / ||reference|| over all compared positions (L2)
//   top-1 agreement        share of positions whose argmax is the same in both
// The first position is the prefill's last; each later one a decode step.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "workloads/llm/weights.hpp"

namespace itera::llm {

// What the comparison drives: a model holding `sequences()` sequences that returns logits.
class logits_model {
 public:
  virtual ~logits_model() = default;
  virtual std::int64_t sequences() const = 0;
  virtual std::int64_t vocab() const = 0;
  // Empties every sequence and runs the prompts ([sequences x prompt] row-major); returns each
  // sequence's last-position logits, [sequences x vocab].
  virtual std::vector<float> prefill(std::span<const std::int32_t> tokens, std::int64_t prompt) = 0;
  // One token per sequence; returns [sequences x vocab].
  virtual std::vector<float> step(std::span<const std::int32_t> tokens) = 0;
};

struct quality_trace {
  std::vector<std::vector<float>> logits;     // per position, [sequences x vocab]
  std::vector<std::vector<std::int32_t>> ids;  // per position, the token fed next: [sequences]
};

// `positions` positions (>= 1) after `prompts`. forced empty: the model's own greedy tokens; else
// forced.ids are fed (a trace of the model under test).
quality_trace trace_logits(logits_model& model, std::span<const std::int32_t> prompts, std::int64_t prompt,
                           std::int64_t positions, const quality_trace* forced = nullptr);

struct quality_figures {
  double logits_rel_error = 0;
  double top1_agreement = 0;
  std::int64_t positions = 0;  // compared (sequences x positions)
};

// Throws std::invalid_argument when the traces' shapes differ.
quality_figures compare_traces(const quality_trace& test, const quality_trace& reference);

// The cpu reference model (llm_cpu.hpp) over `sequences` sequences, as a logits_model owning its
// weights; kv: its cache precision (fp32, or fp8_e4m3 rounded at the store).
std::unique_ptr<logits_model> reference_logits_model(model_weights weights, std::int64_t sequences,
                                                     dtype kv = dtype::fp32);

}  // namespace itera::llm
