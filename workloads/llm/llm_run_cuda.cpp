// The llm workload on the cuda backend: memory plan, the engine, then the scenario (scenarios.hpp).
#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "workloads/llm/checkpoint.hpp"
#include "workloads/llm/llm.hpp"
#include "workloads/llm/llm_cuda.hpp"
#include "workloads/llm/scenarios.hpp"

namespace itera::llm {

namespace {

// A checkpoint is read as the weights' 16-bit type (bf16 for fp8: the engine quantises those).
std::unique_ptr<cuda_engine> make_engine(backend& dev, const llm_case& c, const engine_options& o) {
  if (c.checkpoint == "random") return std::make_unique<cuda_engine>(dev, c.config, c.seed, o);
  const dtype read_as = o.weights == dtype::fp8_e4m3 ? dtype::bf16 : o.weights;
  return std::make_unique<cuda_engine>(dev, load_checkpoint(c.checkpoint, read_as, c.config.fp8_lm_head), o);
}

// A cuda engine's logits for the quality comparison: every slot is a sequence.
class engine_logits final : public logits_model {
 public:
  explicit engine_logits(std::unique_ptr<cuda_engine> eng) : m_eng(std::move(eng)) {}
  std::int64_t sequences() const override { return m_eng->slots(); }
  std::int64_t vocab() const override { return m_eng->config().vocab; }
  std::vector<float> prefill(std::span<const std::int32_t> tokens, std::int64_t prompt) override {
    return m_eng->prefill(tokens, prompt);
  }
  std::vector<float> step(std::span<const std::int32_t> tokens) override { return m_eng->decode_step(tokens); }

 private:
  std::unique_ptr<cuda_engine> m_eng;
};

}  // namespace

void run_cuda(case_state& st) {
  const llm_case c = read_case(st);
  backend& dev = st.device();
  engine_options o;
  o.batch = c.kind == scenario::single_stream ? 1 : c.batch;
  o.max_context = c.context;
  o.max_prompt = c.prompts == "synthetic" ? c.prompt : c.context;
  o.prefill_batch = c.kind == scenario::offline ? o.batch : 1;
  o.compute = c.compute;
  o.weights = c.weights;
  o.kv = c.kv;
  // The cuBLASLt workspace is the backend's and already allocated: the plan counts it, the free
  // memory the driver reports has it taken already. The engine's own kernels' workspace (the
  // one-kernel decode step's) is allocated with the engine.
  const std::uint64_t workspace = default_workspace_bytes;
  const auto free_before = dev.memory().free_bytes;
  const bool fp8_products = c.weights == dtype::fp8_e4m3 && cuda_engine::fp8_products_available(dev, c.compute);
  const std::uint64_t step_workspace = cuda_engine::step_kernel_bytes(dev, c.config, o);
  (void)check_memory(st, c, free_before + workspace, workspace + step_workspace, held_as::case_precision,
                     fp8_products);

  memory_tracker& tracker = dev.memory_tracking();
  const std::uint64_t baseline = tracker.current();
  (void)tracker.exchange_peak(baseline);
  std::unique_ptr<cuda_engine> eng = make_engine(dev, c, o);
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
  eng.reset();

  // fp8 weights, an fp8 KV cache and fp16 compute: quality against a reference precision on this
  // card (R6, R10), each raised alone (the others as the case's), measured after the memory
  // figures, one engine at a time. fp16 compute's reference is bf16 compute, the precision the
  // engine was measured in first: the figures say how far the two types' results are apart, not
  // how close either is to fp32 (the cpu backend's quality figures give that, from the weights).
  const auto engine_in = [&](dtype compute, dtype weights, dtype kv) {
    return [&, compute, weights, kv](std::int64_t sequences, std::int64_t context) -> std::unique_ptr<logits_model> {
      engine_options q;
      q.batch = sequences;
      q.max_context = context;
      q.compute = compute;
      q.weights = weights;
      q.kv = kv;
      return std::make_unique<engine_logits>(make_engine(dev, c, q));
    };
  };
  const std::string compute(dtype_name(c.compute));
  if (c.weights == dtype::fp8_e4m3) {
    // The other precisions that are not bf16, named as the case's.
    std::string others;
    if (c.kv == dtype::fp8_e4m3) others = "fp8 e4m3 KV cache";
    if (c.compute == dtype::fp16) others += others.empty() ? "fp16 compute" : ", fp16 compute";
    record_quality(st, c, engine_in(c.compute, dtype::fp8_e4m3, c.kv), engine_in(c.compute, dtype::bf16, c.kv),
                   others.empty() ? "bf16 weights on the cuda engine"
                                  : fmt::format("bf16 weights on the cuda engine ({}, as the case's)", others));
  }
  if (c.kv == dtype::fp8_e4m3)
    record_quality(st, c, engine_in(c.compute, c.weights, dtype::fp8_e4m3), engine_in(c.compute, c.weights, c.compute),
                   fmt::format("{} KV cache on the cuda engine", compute), quality_of::kv_cache);
  if (c.compute == dtype::fp16) {
    // A 16-bit cache follows the compute type; an fp8 one stays.
    const dtype reference_kv = c.kv == dtype::fp16 ? dtype::bf16 : c.kv;
    record_quality(st, c, engine_in(dtype::fp16, c.weights, c.kv), engine_in(dtype::bf16, c.weights, reference_kv),
                   fmt::format("bf16 compute on the cuda engine ({} weights as the case's, {}): how far fp16 compute "
                               "moves the logits from bf16 compute's, not a distance from fp32",
                               dtype_name(c.weights),
                               reference_kv == dtype::bf16 ? "a bf16 KV cache for the case's fp16 one"
                                                           : "fp8 e4m3 KV cache as the case's"),
                   quality_of::compute);
  }
}

}  // namespace itera::llm
