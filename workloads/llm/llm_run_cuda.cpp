// The llm workload on the cuda backend: memory plan, the engine, then the scenario (scenarios.hpp).
#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "workloads/llm/checkpoint.hpp"
#include "workloads/llm/llm.hpp"
#include "workloads/llm/llm_cuda.hpp"
#include "workloads/llm/scenarios.hpp"

namespace itera::llm {

void run_cuda(case_state& st) {
  const llm_case c = read_case(st);
  backend& dev = st.device();
  if (c.weights != dtype::bf16)
    throw case_skipped(fmt::format("the cuda engine stores {} weights as bf16 only in this version: not run",
                                   dtype_name(c.weights)));
  // The cuBLASLt workspace is the backend's and already allocated: the plan counts it, the free
  // memory the driver reports has it taken already.
  const std::uint64_t workspace = default_workspace_bytes;
  const auto free_before = dev.memory().free_bytes;
  (void)check_memory(st, c, free_before + workspace, workspace, held_as::case_precision);

  memory_tracker& tracker = dev.memory_tracking();
  const std::uint64_t baseline = tracker.current();
  (void)tracker.exchange_peak(baseline);
  engine_options o;
  o.batch = c.kind == scenario::single_stream ? 1 : c.batch;
  o.max_context = c.context;
  o.max_prompt = c.prompts == "synthetic" ? c.prompt : c.context;
  o.prefill_batch = c.kind == scenario::offline ? o.batch : 1;
  std::unique_ptr<cuda_engine> eng;
  if (c.checkpoint == "random")
    eng = std::make_unique<cuda_engine>(dev, c.config, c.seed, o);
  else
    eng = std::make_unique<cuda_engine>(dev, load_checkpoint(c.checkpoint, dtype::bf16), o);
  run_case(st, *eng, c);
  eng->synchronize();
  const auto mem = eng->memory();
  const double allocated = static_cast<double>(tracker.peak() - baseline) + static_cast<double>(workspace);
  const double driver = static_cast<double>(free_before - dev.memory().free_bytes) + static_cast<double>(workspace);
  st.add_metric("memory/engine/weights", static_cast<double>(mem.weights), "B");
  st.add_metric("memory/engine/kv_cache", static_cast<double>(mem.kv_cache), "B");
  st.add_metric("memory/engine/activations", static_cast<double>(mem.activations), "B");
  st.add_metric("memory/measured_peak", allocated, "B");
  st.add_metric("memory/device_used", driver, "B");
}

}  // namespace itera::llm
