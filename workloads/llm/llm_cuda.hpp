#pragma once
// The llm model on the cuda backend: a 16-bit compute type C (bf16 or fp16: the activations between
// kernels and the tensor cores' inputs), bf16, fp16 or fp8 e4m3 weights, a KV cache of C or fp8
// e4m3, fp32 residual stream and accumulation, cuBLASLt for the larger matrix products, the
// kernels of src/kernels/llm_kernels.cuh for the rest. No CUDA headers here: front ends and tests
// (.cpp) use it as is. Below, "16-bit" is C.
//
// A forward pass over T rows (prefill: batch x prompt, sequence by sequence; decode: batch):
//   x (fp32) = embed[tokens]
//   per layer:  h = rmsnorm(x) (16-bit) ; qkv = h Wqkv^T (16-bit, Wqkv = [q; k; v] rows fused at load)
//               bias, RoPE on q and k, k and v into the cache at each row's position
//               a = attention(q, K, V) (16-bit) ; x += a Wo^T (cuBLASLt, fp32 output, beta = 1)
//               h = rmsnorm(x) ; gu = h Wgu^T (Wgu = [gate; up]) ; m = silu(g) * u ; x += m Wdown^T
//   logits (fp32) = rmsnorm(x) Wlm^T (rows needed only) ; next = argmax per sequence
// At decode sizes (the gemv's rows) each rmsnorm runs inside the product after it and silu(g) * u
// inside the down product (llm_kernels.cuh: gemv_rms_norm, gemv_swiglu), with the same roundings.
// The attention's K and V: a prefill (every slot it fills starts empty) reads the pass's own rows
// (the rotated k written back into qkv, 16-bit), a decode step the cache, its new token included.
// With an fp8 e4m3 cache (engine_options::kv) K and V are rounded from fp32 to e4m3 at the store
// (one scale per tensor, fixed at 1, saturating at +-448): a prefill's attention sees 16-bit K and
// V, decode steps the fp8 cache, as the cpu reference does (llm_cpu.hpp).
//
// fp16 compute. The same kernels (templates on the 16-bit type) and cuBLASLt products in CUDA_R_16F.
// fp16 holds 3 more significant bits than bf16 and values up to 65504: the residual stream, the
// scores, the softmax and every sum stay fp32, so what must fit is what a 16-bit buffer holds (norm
// outputs, q/k/v, the cache, the attention output, gate/up and the SwiGLU product). The cpu
// reference computes in fp32 whatever the compute type (llm_cpu.hpp): it is the oracle of both.
//
// Per-step state lives on the device: each sequence's length (the position its next token takes)
// and the token ids. decode_device() reads the ids there, writes the argmax back there and advances
// the lengths: its launches are the same every step, so it can run as a CUDA graph
// (decode_graph captures it once and replays it).
#include <cstdint>
#include <memory>
#include <optional>
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
  // The compute type: bf16 or fp16 (see above).
  dtype compute = dtype::bf16;
  // Weight storage: bf16 or fp16 (values of that type; held in the compute type: a weight of the
  // other 16-bit type is rounded to it once, at load), or fp8_e4m3 for the layer projections (one
  // fp32 scale per output channel, quantised by the engine from bf16 values as weights.hpp:
  // round_tensor does, the LM head too where config.fp8_lm_head asks; the rest bf16 values, held in
  // the compute type). Products of at most 2 rows
  // read the fp8 codes in the gemv kernel; larger ones run on fp8 tensor cores (activations
  // quantised per token, both scales applied to the sums after) where cuBLASLt multiplies fp8 into
  // the compute type (cuda_engine::fp8_products_available), else dequantise the matrix to a 16-bit
  // scratch (the largest projection's size; an fp8 LM head in slices) and run cuBLASLt in the
  // compute type.
  dtype weights = dtype::bf16;
  // KV cache storage: the compute type (bf16 or fp16; the other 16-bit type is refused), or
  // fp8_e4m3 codes (1 byte per element; scale 1, saturating; read back by the decode attention
  // only: memory_plan's kv bytes halve, and a decode step's cache bytes).
  dtype kv = dtype::bf16;
  // The weights, the KV cache and the activations in evictable device memory, so that offload()
  // can give them back between uses (residency=staged in the multimodal pipeline).
  bool evictable = false;
};

// The small-token product the engine runs for decode (at most gemv_max_tokens rows), alone, for tests:
// returns out[t * out_rows + o] = sum_i w[o][i] x[t][i] (+ out_init[t * out_rows + o] when fp32_out
// and out_init is not empty: beta = 1) as fp32 (16-bit output widened). w: bits [out_rows][in],
// x: bits [tokens][in], both of `compute` (bf16 or fp16), as the output when not fp32. The output
// is poisoned (NaN) before the run.
std::vector<float> small_gemm(backend& dev, std::span<const std::uint16_t> w, std::int64_t out_rows, std::int64_t in,
                              std::span<const std::uint16_t> x, std::int64_t tokens, bool fp32_out,
                              std::span<const float> out_init = {}, dtype compute = dtype::bf16);

// The decode step's fused products (at most gemv_max_tokens rows, llm_kernels.cuh: gemv_rms_norm,
// gemv_swiglu), alone, for tests: each runs the fused kernel and the unfused pair it replaces on
// the same inputs (outputs poisoned with NaN before each run) and returns both outputs widened to
// fp32, out[t * out_rows + o], plus out_init[...] when fp32_out and out_init is not empty (beta 1).
// fused_kernel: whether the fused kernel took the shape (when not, `fused` is the unfused pair's).
// compute: the 16-bit type (bf16 or fp16) of every 16-bit operand below and of 16-bit output.
struct fused_product_check {
  std::vector<float> fused, unfused;
  bool fused_kernel = false;
};
// Whether engines made from now on run the products that add into the residual (o_proj, down) in
// two k-parts with the add and the next norm in one kernel after them, at 64 rows and fewer where
// cuBLASLt runs them (16-bit weights): on unless ITERA_LLM_SPLIT_RESIDUAL=0; a test pins it either
// way (std::nullopt: the environment's choice again).
void override_split_residual(std::optional<bool> on);
// Whether engines made from now on pick those split products' algorithm by a trial before a decode
// graph's capture (the fastest of cuBLASLt's first eight, each timed over some layers' weights with
// the add, the next norm and the next product after it; eager passes keep what the plan holds):
// on unless ITERA_LLM_SPLIT_TRIAL=0. A test comparing a graph's tokens with eager steps' pins it
// off, so that both run the same algorithm.
void override_split_trial(std::optional<bool> on);
// The same for the other products cuBLASLt runs in a decode graph (qkv, gate/up, the LM head, and
// o_proj and down where they are not split): on unless ITERA_LLM_PRODUCT_TRIAL=0.
void override_product_trial(std::optional<bool> on);
// Whether engines made from now on let the fused gate/up normalise the residual's rows itself in
// decodes of 33-64 rows with bf16 compute (k::gate_up_swiglu_norm; o_proj then adds into x
// unsplit and no norm kernel runs before the gate/up): on unless ITERA_LLM_GATE_UP_NORM=0.
void override_gate_up_norm(std::optional<bool> on);

// A projection as the gemv reads it: 16-bit bits [out_rows][in], or (bits16 empty) fp8 e4m3 codes
// [out_rows][in] with one fp32 scale per row.
struct small_weights {
  std::span<const std::uint16_t> bits16;
  std::span<const std::uint8_t> fp8_codes;
  std::span<const float> fp8_scales;
};
// rms_norm then the product: x fp32 rows, token t at row t * in_stride + in_offset, each `in` wide;
// norm_weight 16-bit bits [in]. gemv_rms_norm against rms_norm + gemv.
fused_product_check small_gemm_rms_norm(backend& dev, const small_weights& w, std::int64_t out_rows, std::int64_t in,
                                        std::span<const float> x, std::int64_t in_stride, std::int64_t in_offset,
                                        std::span<const std::uint16_t> norm_weight, float eps, std::int64_t tokens,
                                        bool fp32_out, std::span<const float> out_init = {},
                                        dtype compute = dtype::bf16);
// SwiGLU then the product: gate_up 16-bit bits [tokens][2 intermediate] (gate | up). gemv_swiglu
// against swiglu + gemv.
fused_product_check small_gemm_swiglu(backend& dev, const small_weights& w, std::int64_t out_rows,
                                      std::int64_t intermediate, std::span<const std::uint16_t> gate_up,
                                      std::int64_t tokens, bool fp32_out, std::span<const float> out_init = {},
                                      dtype compute = dtype::bf16);

class cuda_engine final : public engine {
 public:
  // Whether cuBLASLt on this device multiplies fp8 e4m3 operands into `compute` (bf16 or fp16) and
  // fp32 outputs (sm_89 and later). ITERA_LLM_FP8_PRODUCTS=0 says no.
  static bool fp8_products_available(backend& dev, dtype compute = dtype::bf16);

  // Weights from a holder, uploaded. 16-bit weights (options.weights bf16 or fp16): a holder of
  // bf16 or fp16 values (random_weights(c, weights, seed), or a checkpoint loaded as that type),
  // each value rounded to options.weights, then to the compute type (usage_error for a weight past
  // fp16's range where that is fp16). fp8_e4m3: a bf16 holder, quantised by the engine. `dev` must
  // be the cuda backend.
  cuda_engine(backend& dev, const model_weights& weights, const engine_options& options);
  // Weights generated on the device: bit-identical to uploading random_weights(config, s, seed), s
  // the weights' 16-bit type (bf16 for fp8_e4m3).
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
  void prepare_decode(std::int64_t rows) override;
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
  // The part of plan()'s workspace that is the engine's own: the one-kernel decode step's layer
  // table and split states (batch 1, where this device's kernel takes the shape; 0 otherwise).
  static std::uint64_t step_kernel_bytes(backend& dev, const model_config& config, const engine_options& options);

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
  // [count x vocab] (waits for the stream). usage_error after a decode or prepare_decode since,
  // which write the logits over.
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
  // fused), and the product's scope declares the norm weight's bytes. Where o_proj and down run in
  // parts (5-64 rows, 16-bit weights: override_split_residual), a residual_norm scope follows each
  // (the add into x and the next norm: the post-attention norm in attention_block, the next
  // layer's input norm in this layer's mlp_block) and only layer 0 has a norm scope.
  void decode_device(stage_recorder* recorder = nullptr);
  // decode(slots()): the same work as one graph launch.
  void decode_graph();
  std::int64_t graphs_captured() const;  // decode graphs captured so far, one per row count

  // Device timing of `steps` decode_device() (or decode_graph()) calls back to back, in ms per step.
  double time_decode_ms(int steps, bool use_graph);

  std::vector<std::int32_t> read_ids();  // waits for the stream; [batch]

 private:
  struct impl;
  std::unique_ptr<impl> m;
};

}  // namespace itera::llm
