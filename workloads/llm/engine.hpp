#pragma once
// What the llm scenarios (workloads/llm/scenarios.hpp) drive: a model holding `slots` sequences,
// each in its own KV-cache slot, on some backend. The cuda engine (llm_cuda.hpp) and the cpu
// engine (cpu_engine.hpp) implement it, so offline, server and single-stream runs, and both loops,
// are one piece of code for every backend.
//
// Work is enqueued, not waited for, except where a call says it waits: the compute-only loop
// enqueues a whole generation without a host round trip, and the caller's timer decides when to
// wait. Token ids live on the device between steps: prefill leaves each slot's next token there,
// each decode step reads it and writes the following one over it.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "workloads/llm/model.hpp"

namespace itera::llm {

// Device (or host, for the cpu engine) bytes by part, as allocated.
struct engine_memory {
  std::uint64_t weights = 0;
  std::uint64_t kv_cache = 0;
  std::uint64_t activations = 0;  // activation buffers, logits, ids, lengths, RoPE frequencies
  std::uint64_t workspace = 0;    // the backend's matrix-product workspace, and the engine's own kernels'
  std::uint64_t total() const { return weights + kv_cache + activations + workspace; }
};

// Rows of the staged prompts whose input vectors are given instead of their tokens' embeddings: a
// multimodal model's image tokens, merged into the prompt by context preparation. Row r of prompt i
// is i * prompt_len + r; values are bf16 bits [rows.size() x hidden], row by row, on the host or,
// for an engine on a device, on that device (the projector's output stays there).
struct embedding_rows {
  std::span<const std::int64_t> rows;  // strictly increasing
  const std::uint16_t* values = nullptr;
  bool on_device = false;
};

// usage_error naming `who` unless `rows` are strictly increasing and inside [0, staged).
void check_embedding_rows(std::span<const std::int64_t> rows, std::int64_t staged, const char* who);

class engine {
 public:
  virtual ~engine() = default;

  virtual const model_config& config() const = 0;
  virtual std::int64_t slots() const = 0;        // sequences held at once: the largest batch
  virtual std::int64_t max_context() const = 0;  // tokens a slot may hold (prompt + output)
  virtual std::int64_t max_prompt() const = 0;   // the longest prompt one prefill may run per slot
  virtual engine_memory memory() const = 0;
  // What really ran, for the record: "bf16 weights, bf16 activations, fp32 accumulation, ...".
  virtual std::string precision_note() const = 0;

  // Copies prompt ids (count prompts of one length, row-major) towards the device for the next
  // prefill_staged(). Enqueued; the ids are copied before the call returns (the span may go).
  virtual void stage_prompts(std::span<const std::int32_t> ids) = 0;
  // Gives the input vectors of some rows of the staged prompts, for the next prefill_staged() only
  // (staging prompts again forgets them). Device values must stay valid until that prefill has
  // run. usage_error for rows outside the staged ids or not increasing, or device values given to
  // an engine without a device.
  virtual void stage_embeddings(const embedding_rows& rows) = 0;
  // Empties slots [first, first + count) and runs the staged prompts (count x prompt_len) into
  // them; each slot's next token is then on the device. usage_error for a slot range or a length
  // the engine cannot hold.
  virtual void prefill_staged(std::int64_t first, std::int64_t count, std::int64_t prompt_len) = 0;
  // One decode step of slots [0, rows). Every slot holding a sequence (prefilled and not released)
  // must have room for one more token (usage_error otherwise); released slots in the range compute
  // a throwaway token and hold nothing.
  virtual void decode(std::int64_t rows) = 0;
  // Readies decode(rows) without running a step: what the first decode of a row count would set
  // up (the cuda engine's graph capture, its products' plans and algorithm trials), so that a timed
  // run does not pay it. The slots keep what they hold; the step's scratch and the last logits do
  // not (the trials run the products). The weights must be on the device. Nothing by default.
  virtual void prepare_decode(std::int64_t rows) { (void)rows; }
  // Marks a slot free: it holds nothing until the next prefill into it.
  virtual void release(std::int64_t slot) = 0;
  virtual std::int64_t length(std::int64_t slot) const = 0;  // tokens the slot holds (0 when free)

  // Enqueues a copy of the next ids of slots [0, rows) to the host; take_recorded() waits and
  // returns every row recorded since the last take, in order. At most max_context() + 1 rows may
  // be recorded between takes.
  virtual void record_ids(std::int64_t rows) = 0;
  virtual std::vector<std::vector<std::int32_t>> take_recorded() = 0;

  virtual void synchronize() = 0;  // waits for everything enqueued
};

}  // namespace itera::llm
