#pragma once
// The llm model on the cuda backend: bf16 (or fp8 e4m3) weights, bf16 (or fp8 e4m3) KV cache, fp32
// residual stream and accumulation, cuBLASLt for every matrix product, the kernels of
// src/kernels/llm_kernels.cuh for the rest. No CUDA headers here: front ends and tests (.cpp) use
// it as is.
//
// A forward pass over T rows (prefill: batch x prompt, sequence by sequence; decode: batch):
//   x (fp32) = embed[tokens]
//   per layer:  h = rmsnorm(x) (bf16) ; qkv = h Wqkv^T (bf16, Wqkv = [q; k; v] rows fused at load)
//               bias, RoPE on q and k, k and v into the cache at each row's position
//               a = attention(q, K, V) (bf16) ; x += a Wo^T (cuBLASLt, fp32 output, beta = 1)
//               h = rmsnorm(x) ; gu = h Wgu^T (Wgu = [gate; up]) ; m = silu(g) * u ; x += m Wdown^T
//   logits (fp32) = rmsnorm(x) Wlm^T (rows needed only) ; next = argmax per sequence
// At decode sizes (the gemv's rows) each rmsnorm runs inside the product after it and silu(g) * u
// inside the down product (llm_kernels.cuh: gemv_rms_norm, gemv_swiglu), with the same roundings.
// The attention's K and V: a prefill (every slot it fills starts empty) reads the pass's own rows
// (the rotated k written back into qkv, bf16), a decode step the cache, its new token included.
// With an fp8 e4m3 cache (engine_options::kv) K and V are rounded from fp32 to e4m3 at the store
// (one scale per tensor, fixed at 1, saturating at +-448): a prefill's attention sees bf16 K and V,
// decode steps the fp8 cache, as the cpu reference does (llm_cpu.hpp).
//
// Per-step state lives on the device: each sequence's length (the position its next token takes)
// and the token ids. decode_device() reads the ids there, writes the argmax back there and advances
// the lengths: its launches are the same every step, so it can run as a CUDA graph
// (decode_graph captures it once and replays it).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "itera/core/backend.hpp"
#include "workloads/llm/engine.hpp"
#include "workloads/llm/model.hpp"
#include "workloads/llm/weights.hpp"

namespace itera {
class stage_recorder;
}

namespace itera::llm {

struct engine_options {
  std::int64_t batch = 1;                // sequences held at once
  std::int64_t max_context = 0;          // tokens each sequence may hold (prompt + output)
  std::int64_t max_prompt = 0;           // longest prefill per sequence; 0: max_context
  std::int64_t prefill_batch = 0;        // sequences one prefill covers; 0: batch (activations are
                                         // sized for prefill_batch x max_prompt rows)
  bool all_position_logits = false;      // prefill can return the logits of every position (tests)
  // Weight storage: bf16, or fp8_e4m3 for the layer projections (one fp32 scale per output channel,
  // quantised by the engine from bf16 values as weights.hpp: round_tensor does; the rest bf16).
  // Products of at most 2 rows read the fp8 codes in the gemv kernel; larger ones
  // run on fp8 tensor cores (activations quantised per token, both scales applied to the sums
  // after) where cuBLASLt multiplies fp8 (cuda_engine::fp8_products_available), else dequantise
  // the matrix to a bf16 scratch and run cuBLASLt in bf16.
  dtype weights = dtype::bf16;
  // KV cache storage: bf16, or fp8_e4m3 codes (1 byte per element; scale 1, saturating; read back
  // by the decode attention only: memory_plan's kv bytes halve, and a decode step's cache bytes).
  dtype kv = dtype::bf16;
  // The weights, the KV cache and the activations in evictable device memory, so that offload()
  // can give them back between uses (residency=staged in the multimodal pipeline).
  bool evictable = false;
};

// The small-token product the engine runs for decode (at most gemv_max_tokens rows), alone, for tests:
// returns out[t * out_rows + o] = sum_i w[o][i] x[t][i] (+ out_init[t * out_rows + o] when fp32_out
// and out_init is not empty: beta = 1) as fp32 (bf16 output widened). w: bf16 bits [out_rows][in],
// x: bf16 bits [tokens][in]. The output is poisoned (NaN) before the run.
std::vector<float> small_gemm(backend& dev, std::span<const std::uint16_t> w, std::int64_t out_rows, std::int64_t in,
                              std::span<const std::uint16_t> x, std::int64_t tokens, bool fp32_out,
                              std::span<const float> out_init = {});

// The decode step's fused products (at most gemv_max_tokens rows, llm_kernels.cuh: gemv_rms_norm,
// gemv_swiglu), alone, for tests: each runs the fused kernel and the unfused pair it replaces on
// the same inputs (outputs poisoned with NaN before each run) and returns both outputs widened to
// fp32, out[t * out_rows + o], plus out_init[...] when fp32_out and out_init is not empty (beta 1).
// fused_kernel: whether the fused kernel took the shape (when not, `fused` is the unfused pair's).
struct fused_product_check {
  std::vector<float> fused, unfused;
  bool fused_kernel = false;
};
// A projection as the gemv reads it: bf16 bits [out_rows][in], or (bf16 empty) fp8 e4m3 codes
// [out_rows][in] with one fp32 scale per row.
struct small_weights {
  std::span<const std::uint16_t> bf16;
  std::span<const std::uint8_t> fp8_codes;
  std::span<const float> fp8_scales;
};
// rms_norm then the product: x fp32 rows, token t at row t * in_stride + in_offset, each `in` wide;
// norm_weight bf16 bits [in]. gemv_rms_norm against rms_norm + gemv.
fused_product_check small_gemm_rms_norm(backend& dev, const small_weights& w, std::int64_t out_rows, std::int64_t in,
                                        std::span<const float> x, std::int64_t in_stride, std::int64_t in_offset,
                                        std::span<const std::uint16_t> norm_weight, float eps, std::int64_t tokens,
                                        bool fp32_out, std::span<const float> out_init = {});
// SwiGLU then the product: gate_up bf16 bits [tokens][2 intermediate] (gate | up). gemv_swiglu
// against swiglu + gemv.
fused_product_check small_gemm_swiglu(backend& dev, const small_weights& w, std::int64_t out_rows,
                                      std::int64_t intermediate, std::span<const std::uint16_t> gate_up,
                                      std::int64_t tokens, bool fp32_out, std::span<const float> out_init = {});

class cuda_engine final : public engine {
 public:
  // Whether cuBLASLt on this device multiplies fp8 e4m3 operands into bf16 and fp32 outputs
  // (sm_89 and later). ITERA_LLM_FP8_PRODUCTS=0 says no.
  static bool fp8_products_available(backend& dev);

  // Weights from a holder (values representable in bf16: random_weights(c, bf16, seed) or a
  // checkpoint loaded as bf16), rounded to bf16 and uploaded. `dev` must be the cuda backend.
  cuda_engine(backend& dev, const model_weights& weights, const engine_options& options);
  // Weights generated on the device: bit-identical to random_weights(config, bf16, seed).
  cuda_engine(backend& dev, const model_config& config, std::uint64_t seed, const engine_options& options);
  ~cuda_engine() override;
  cuda_engine(const cuda_engine&) = delete;
  cuda_engine& operator=(const cuda_engine&) = delete;

  // engine (engine.hpp). decode(rows) runs as a CUDA graph captured once per row count.
  const model_config& config() const override;
  std::int64_t slots() const override;
  std::int64_t max_context() const override;
  std::int64_t max_prompt() const override;
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
  void synchronize() override;

  const engine_options& options() const;

  // What an engine of `config` with `options` allocates (memory_plan.hpp's plan, which the engine
  // allocates exactly; the embedding rows' small buffers made on first use aside), computed
  // without allocating.
  static engine_memory plan(backend& dev, const model_config& config, const engine_options& options);

  // Residency (options.evictable only; std::logic_error otherwise). offload() waits for the stream
  // and gives back the device memory of the weights, the KV cache and the activations (the token
  // ids, lengths and RoPE table stay); restore() maps it again at the same addresses (case_skipped
  // "does not fit" when the device has not the memory) with undefined contents: write the weights
  // back (weights_device(), weights_bytes()) and prefill before the next decode. Plans and captured
  // decode graphs survive both.
  void offload();
  void restore();
  bool resident() const;
  void* weights_device() const;  // the weight arena, as one block of weights_bytes()
  std::uint64_t weights_bytes() const;

  // Every slot at once, from host ids (tests and the timing test):
  // Empties every slot and runs `tokens` ([batch x prompt] row-major, one prompt per sequence, all
  // of length `prompt`) into the caches. Returns fp32 logits: [batch x vocab] for the last
  // position of each sequence, or [batch x prompt x vocab] when `all_positions` (needs the
  // option). Leaves each sequence's argmax in the device ids, ready for decode_device(). With a
  // recorder, each part of the pass opens a scope in it as decode_device() does.
  std::vector<float> prefill(std::span<const std::int32_t> tokens, std::int64_t prompt, bool all_positions = false,
                             stage_recorder* recorder = nullptr);

  // After prefill_staged(first, count, ...): the fp32 logits of those sequences' last positions,
  // [count x vocab] (waits for the stream).
  std::vector<float> read_prefill_logits(std::int64_t count);

  // One token per sequence from the host: returns [batch x vocab] fp32 logits; the argmax ids
  // stay on the device (read_ids).
  std::vector<float> decode_step(std::span<const std::int32_t> tokens);

  // One decode step of every slot on the ids already on the device, enqueued without waiting and
  // without a graph. With a recorder, each part of the step (embed, attention_block/{norm, qkv,
  // rope, attention, o_proj}, mlp_block/{norm, gate_up, swiglu, down}, lm_head_block/{final_norm,
  // lm_head}, argmax) opens a scope in it that declares the weight bytes it reads (attention: the
  // cache bytes); the recorder's own cost, two clock reads per scope, lands in the step. Where the
  // gemv runs the products (at most gemv_max_tokens slots with bf16 weights, 2 with fp8), the norms
  // run inside qkv, gate_up and lm_head, and with bf16 weights at 1-2 slots SwiGLU inside down
  // (k::gemv_swiglu_pays): then there is no norm or final_norm scope (nor swiglu, where it is
  // fused), and the product's scope declares the norm weight's bytes.
  void decode_device(stage_recorder* recorder = nullptr);
  // decode(slots()): the same work as one graph launch.
  void decode_graph();
  bool graph_captured() const;

  // Device timing of `steps` decode_device() (or decode_graph()) calls back to back, in ms per step.
  double time_decode_ms(int steps, bool use_graph);

  std::vector<std::int32_t> read_ids();  // waits for the stream; [batch]

 private:
  struct impl;
  std::unique_ptr<impl> m;
};

}  // namespace itera::llm
