// The llm model on the cuda backend (workloads/llm/llm_cuda.hpp).
//
// Weights: one device arena, each part at a 256-byte aligned offset (cuBLASLt's default alignment
// assumption), in the compute type A (bf16 or fp16; fp8 projections as codes and row scales),
// linear weights [out][in] as in checkpoints. Fused at load: Wqkv = [q; k; v]
// rows ([q_dim + 2 kv_dim][hidden]), Wgu = [gate; up] ([2 intermediate][hidden]), the q/k/v biases
// one vector. A fused part is its tensors one after another, so each tensor lands at one offset
// whether uploaded from a holder or generated on the device from its own stream.
//
// Matrix products of at most k::gemv_max_tokens rows (decode at small batch) run in the
// bandwidth-bound gemv kernel (src/kernels/llm_kernels.cuh); the others, as in gemm_cuda.cu, in
// cuBLASLt's TN form: A = W stored K x M column-major (its
// [out][in] rows) used transposed, B = activations [T][K] (K x T column-major), D = [T][M] (M x T
// column-major). Inputs of A, fp32 compute; D of A (qkv, gate/up) or fp32 (o and down adding into
// the residual with beta = 1, the logits with beta = 0).
//
// KV cache: K and V, each [layer][sequence][kv_head][max_context][head_dim], of A or fp8 e4m3
// codes (engine_options::kv).
//
// The forward pass and the products are templates on A (forward_as, gemm); forward() picks the
// instance of the engine's compute type.
#include "workloads/llm/llm_cuda.hpp"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <tuple>

#include "itera/core/errors.hpp"
#include "itera/core/recorder.hpp"
#include "itera/cuda/check.hpp"
#include "itera/cuda/cuda_backend.hpp"
#include "src/cuda/cublaslt_util.hpp"
#include "src/cuda/cuda_backend_impl.hpp"
#include "src/cuda/graph_capture.hpp"
#include "src/cuda/text.hpp"
#include "src/cuda/timers.hpp"
#include "src/kernels/attention_choice.hpp"
#include "src/kernels/launch.cuh"
#include "src/kernels/llm_kernels.cuh"
#include "workloads/gemm/numeric.hpp"
#include "workloads/llm/llm_cpu.hpp"
#include "workloads/llm/memory_plan.hpp"
#include "workloads/llm/product_trial_rules.hpp"

namespace itera::llm {
namespace {

namespace k = itera::kernels::llm;
using bf16 = __nv_bfloat16;
using fp16 = __half;
using cuda::cat;
using cuda::cuda_backend;
using cuda::device_buffer;

using cuda::make_layout;
using cuda::matmul_desc;
using cuda::matmul_preference;
using cuda::matrix_layout;

using algorithm = cuda::lt_algorithm;

struct gemm_plan {
  matmul_desc op;
  matrix_layout a, b, d;
  algorithm chosen{};
  int parts = 1;                      // plan_for's
  std::vector<algorithm> candidates;  // the heuristic's next ones, asked by product_trial only
  bool tried = false;                 // chosen by product_trial
};

// A recorder scope when there is a recorder, nothing otherwise.
struct stage {
  std::optional<stage_recorder::scope> scope;
  stage(stage_recorder* rec, std::string_view name) {
    if (rec) scope.emplace(rec->enter(name));
  }
  void read(double bytes) {
    if (scope) scope->add_bytes_read(bytes);
  }
};

constexpr std::uint64_t arena_alignment = 256;

std::uint64_t align_up(std::uint64_t v) { return (v + arena_alignment - 1) / arena_alignment * arena_alignment; }

// How an engine with `o` stores its KV cache, and its attention's score scale.
k::kv_storage cache_storage(const engine_options& o) {
  return o.kv == dtype::fp8_e4m3 ? k::kv_storage::fp8_e4m3 : o.compute == dtype::fp16 ? k::kv_storage::fp16
                                                                                       : k::kv_storage::bf16;
}
float score_scale(const model_config& c) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim))); }

// A product trial's timed work: captured once into a CUDA graph and replayed (in_graph), or
// launched anew each run (ITERA_LLM_TRIAL_GRAPH=0, for comparisons).
class trial_graph {
 public:
  template <class Work>
  trial_graph(cudaStream_t stream, bool in_graph, const Work& work)
      : m_stream(stream), m_work(work), m_exec(in_graph ? cuda::capture_graph(stream, work) : nullptr) {}
  ~trial_graph() {
    if (m_exec) (void)cudaGraphExecDestroy(m_exec);
  }
  trial_graph(const trial_graph&) = delete;
  trial_graph& operator=(const trial_graph&) = delete;
  void run() {
    if (m_exec)
      ITERA_CUDA_CHECK(cudaGraphLaunch(m_exec, m_stream));
    else
      m_work();
  }

 private:
  cudaStream_t m_stream;
  std::function<void()> m_work;
  cudaGraphExec_t m_exec = nullptr;
};

// The one-kernel decode step (batch 1): its shape for an engine of `c` with `o`, and what the
// engine allocates for it beside the plan's buffers (the layers' table, the kernel's workspace).
k::decode_step_shape step_shape_for(const model_config& c, const engine_options& o) {
  return {c.layers,    c.hidden,      c.heads, c.kv_heads, c.head_dim, c.intermediate, o.max_context,
          o.weights == dtype::fp8_e4m3, cache_storage(o), static_cast<float>(c.rms_norm_eps), score_scale(c)};
}
std::uint64_t step_layers_bytes(const model_config& c) {
  return static_cast<std::uint64_t>(c.layers) * sizeof(k::decode_layer);
}
std::uint64_t step_kernel_bytes_for(const model_config& c, const k::decode_step_shape& s) {
  return step_layers_bytes(c) + k::decode_step_workspace_bytes(s);
}

// Offsets of one layer's parts; s*: the fp32 row scales of an fp8 projection (unused for bf16).
struct layer_offsets {
  std::uint64_t wqkv = 0, bqkv = 0, wo = 0, wgu = 0, wdown = 0, input_norm = 0, post_norm = 0;
  std::uint64_t sqkv = 0, so = 0, sgu = 0, sdown = 0;
};

// A weight matrix [rows][cols] as a product reads it: 16-bit, or fp8 codes with row scales.
struct matrix {
  const void* w = nullptr;
  const float* scales = nullptr;  // set: fp8 e4m3 codes
};

// override_split_residual's, override_split_trial's, override_product_trial's and
// override_gate_up_norm's switches.
itera::kernels::overridable_switch split_residual_switch{"ITERA_LLM_SPLIT_RESIDUAL", true};
itera::kernels::overridable_switch split_trial_switch{"ITERA_LLM_SPLIT_TRIAL", true};
itera::kernels::overridable_switch product_trial_switch{"ITERA_LLM_PRODUCT_TRIAL", true};
itera::kernels::overridable_switch gate_up_norm_switch{"ITERA_LLM_GATE_UP_NORM", true};

}  // namespace

struct cuda_engine::impl {
  cuda_backend& dev;
  model_config c;
  engine_options o;
  std::int64_t qkv_width = 0, max_rows = 0, logits_rows = 0;
  k::attention_shape shape;
  float attention_scale = 0;

  // Weights arena and byte offsets.
  std::uint64_t arena_bytes = 0, off_embedding = 0, off_final_norm = 0, off_lm_head = 0;
  std::uint64_t off_lm_head_scales = 0;  // fp8_head: the LM head's row scales
  std::vector<layer_offsets> layer_off;
  device_buffer weights;

  bool half = false;          // the compute type is fp16 (else bf16)
  cudaDataType_t act_type = CUDA_R_16BF;  // the compute type as cuBLASLt names it
  bool fp8 = false;           // projections stored as fp8 e4m3 codes + row scales
  bool fp8_head = false;      // fp8 and c.fp8_lm_head: the LM head stored as a projection
  bool kv8 = false;           // the KV cache holds fp8 e4m3 codes (scale 1)
  bool fp8_mma = false;       // fp8: products above the gemv's rows on fp8 tensor cores
  bool split_residual = split_residual_switch.on();  // residual products in parts (split_parts)
  bool split_trial_on = split_trial_switch.on();     // their algorithm by product_trial
  bool product_trial_on = product_trial_switch.on(); // the other decode products' too
  bool gate_up_norm_on = gate_up_norm_switch.on();   // the fused gate/up normalises x itself (route)
  std::uint64_t l2_bytes = 0;                        // the device's L2 (how many layers a trial takes)
  device_buffer dequantised;  // fp8 without fp8_mma: 16-bit scratch of the largest projection
  device_buffer act_codes, act_scales;  // fp8_mma: activations quantised per row for a product
  device_buffer k_cache, v_cache;
  // prompt_ids: the staged prefill input [batch x max_prompt]; next: each slot's next token.
  device_buffer x, h, qkv, attn, gate_up, act, logits, prompt_ids, next, lengths, inv_freq;
  // stage_embeddings(): the rows (int32) and, when given on the host, the values (bf16 whatever
  // the compute type: the vision encoder's), for the next prefill.
  device_buffer input_rows, input_host_values;
  const bf16* input_values = nullptr;
  std::int64_t inputs = 0;
  // Batch 1: the step's layers in one kernel (k::decode_step) where it takes the shape; the
  // layers' pointers (device) and the kernel's workspace, a few hundred KiB beside the plan's GiB,
  // counted with the workspace (step_bytes).
  k::decode_step_shape step_shape;
  bool step_kernel = false;
  device_buffer step_layers, step_workspace;
  std::vector<k::decode_layer> step_layers_uploaded;
  std::uint64_t step_bytes() const { return step_kernel ? step_kernel_bytes_for(c, step_shape) : 0; }

  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool, std::int64_t, int>, gemm_plan> plans;
  std::vector<std::int64_t> held;  // host mirror of each slot's length; 0 when free
  std::vector<bool> busy;          // slot holds a sequence
  std::int64_t staged = 0;         // ids staged for the next prefill
  std::int64_t last_prefill_count = 0;  // sequences of the last prefill_staged (read_prefill_logits)
  std::map<std::int64_t, cudaGraphExec_t> graphs;  // decode of rows [0, key), captured once

  // Recorded next ids: pinned host rows of `batch` ids, (max_context + 1) rows between takes.
  std::int32_t* host_ids = nullptr;
  std::vector<std::int64_t> recorded_rows;  // the row count of each recorded row

  // Without `allocate`: the checks and the arena's layout only (cuda_engine::plan).
  impl(backend& d, const model_config& config, const engine_options& options, bool allocate = true)
      : dev(cuda::as_cuda(d)), c(config), o(options) {
    validate(c);
    if (o.compute != dtype::bf16 && o.compute != dtype::fp16)
      throw usage_error(cat("llm cuda engine: compute ", dtype_name(o.compute), " is not a compute type of this ",
                            "engine; choose bf16 or fp16"));
    if (o.weights != dtype::bf16 && o.weights != dtype::fp16 && o.weights != dtype::fp8_e4m3)
      throw usage_error(cat("llm cuda engine: weights ", dtype_name(o.weights), " are not stored by this engine; ",
                            "choose bf16, fp16 or fp8_e4m3"));
    if (o.kv != o.compute && o.kv != dtype::fp8_e4m3)
      throw usage_error(cat("llm cuda engine: KV cache ", dtype_name(o.kv), " with ", dtype_name(o.compute),
                            " compute: a 16-bit cache holds the compute type; choose ", dtype_name(o.compute),
                            " or fp8_e4m3"));
    half = o.compute == dtype::fp16;
    act_type = half ? CUDA_R_16F : CUDA_R_16BF;
    fp8 = o.weights == dtype::fp8_e4m3;
    fp8_head = fp8 && c.fp8_lm_head;
    fp8_mma = fp8 && fp8_products_available(d, o.compute);
    kv8 = o.kv == dtype::fp8_e4m3;
    if (o.batch < 1) throw usage_error(cat("llm cuda engine: batch ", o.batch, " must be at least 1"));
    if (o.max_context < 1 || o.max_context > c.max_position)
      throw usage_error(cat("llm cuda engine: context ", o.max_context, " must be in 1..", c.max_position, " (", c.name,
                            ")"));
    if (o.max_prompt <= 0 || o.max_prompt > o.max_context) o.max_prompt = o.max_context;
    dev.make_current();
    int l2 = 0;
    ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev.device_index()));
    l2_bytes = static_cast<std::uint64_t>(l2);
    qkv_width = c.q_dim() + 2 * c.kv_dim();
    if (o.prefill_batch <= 0 || o.prefill_batch > o.batch) o.prefill_batch = o.batch;
    max_rows = std::max(o.prefill_batch * o.max_prompt, o.batch);
    logits_rows = o.all_position_logits ? max_rows : o.batch;
    shape.heads = c.heads;
    shape.kv_heads = c.kv_heads;
    shape.head_dim = c.head_dim;
    shape.max_context = o.max_context;
    shape.kv = cache_storage(o);
    attention_scale = score_scale(c);
    if (half)
      k::prepare_attention<fp16>(shape);
    else
      k::prepare_attention<bf16>(shape);

    // Arena layout.
    const auto elems = [](std::int64_t n) { return static_cast<std::uint64_t>(n) * 2; };  // 16-bit bytes
    const auto reserve = [&](std::uint64_t bytes) {
      const std::uint64_t at = arena_bytes;
      arena_bytes = align_up(arena_bytes + bytes);
      return at;
    };
    // A projection [rows][cols]: its codes (fp8, 1 byte each) then its row scales, or 16-bit.
    const auto projection = [&](std::int64_t rows, std::int64_t cols, std::uint64_t* scales) {
      if (!fp8) return reserve(elems(rows * cols));
      const std::uint64_t at = reserve(static_cast<std::uint64_t>(rows * cols));
      *scales = reserve(static_cast<std::uint64_t>(rows) * 4);
      return at;
    };
    off_embedding = reserve(elems(c.vocab * c.hidden));
    layer_off.resize(static_cast<std::size_t>(c.layers));
    for (auto& l : layer_off) {
      l.wqkv = projection(qkv_width, c.hidden, &l.sqkv);
      if (c.attention_bias) l.bqkv = reserve(elems(qkv_width));
      l.wo = projection(c.hidden, c.q_dim(), &l.so);
      l.wgu = projection(2 * c.intermediate, c.hidden, &l.sgu);
      l.wdown = projection(c.hidden, c.intermediate, &l.sdown);
      l.input_norm = reserve(elems(c.hidden));
      l.post_norm = reserve(elems(c.hidden));
    }
    off_final_norm = reserve(elems(c.hidden));
    off_lm_head = c.tie_embeddings ? off_embedding
                  : fp8_head       ? projection(c.vocab, c.hidden, &off_lm_head_scales)
                                   : reserve(elems(c.vocab * c.hidden));
    if (o.batch == 1) {  // the one-kernel decode step, where this device's kernel takes the shape
      step_shape = step_shape_for(c, o);
      step_kernel = k::decode_step_refusal(step_shape).empty();
    }
    if (!allocate) return;

    // The weights, the cache and the pass's activations: evictable with options.evictable (offload()).
    const auto big = [&](std::uint64_t bytes) { return o.evictable ? dev.allocate_evictable(bytes) : dev.allocate(bytes); };
    try {
      weights = big(arena_bytes);
      if (fp8_mma) {
        act_codes = big(static_cast<std::uint64_t>(max_rows * std::max({c.hidden, c.q_dim(), c.intermediate})));
        act_scales = big(static_cast<std::uint64_t>(max_rows) * 4);
      } else if (fp8) {
        dequantised = big(elems(std::max({qkv_width * c.hidden, c.hidden * c.q_dim(), 2 * c.intermediate * c.hidden,
                                          c.hidden * c.intermediate})));
      }
      const auto cache_elems = static_cast<std::uint64_t>(c.layers * o.batch * c.kv_heads * o.max_context * c.head_dim);
      k_cache = big(cache_elems * kv_element_bytes());
      v_cache = big(cache_elems * kv_element_bytes());
      const auto rows = static_cast<std::uint64_t>(max_rows);
      x = big(rows * static_cast<std::uint64_t>(c.hidden) * 4);
      h = big(rows * static_cast<std::uint64_t>(c.hidden) * 2);
      qkv = big(rows * static_cast<std::uint64_t>(qkv_width) * 2);
      attn = big(rows * static_cast<std::uint64_t>(c.q_dim()) * 2);
      gate_up = big(rows * static_cast<std::uint64_t>(2 * c.intermediate) * 2);
      act = big(rows * static_cast<std::uint64_t>(c.intermediate) * 2);
      logits = big(static_cast<std::uint64_t>(logits_rows * c.vocab) * 4);
      prompt_ids = dev.allocate(rows * 4);
      next = dev.allocate(static_cast<std::uint64_t>(o.batch) * 4);
      lengths = dev.allocate(static_cast<std::uint64_t>(o.batch) * 4);
      inv_freq = dev.allocate(static_cast<std::uint64_t>(c.head_dim / 2) * 4);
    } catch (const cuda::out_of_memory& e) {
      throw case_skipped(cat("does not fit: ", e.what()));
    }
    const auto freq = rope_inv_freq(c);
    dev.upload(inv_freq.data(), freq.data(), freq.size() * sizeof(float));
    for (device_buffer* b : {&lengths, &prompt_ids, &next}) dev.fill(b->data(), 0, b->bytes());
    held.assign(static_cast<std::size_t>(o.batch), 0);
    busy.assign(static_cast<std::size_t>(o.batch), false);
    if (step_kernel) {
      step_layers = dev.allocate(step_layers_bytes(c));
      step_workspace = dev.allocate(k::decode_step_workspace_bytes(step_shape));
      if (half)
        k::prepare_decode_step<fp16>(step_shape);
      else
        k::prepare_decode_step<bf16>(step_shape);
    }
    ITERA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_ids),
                                   static_cast<std::size_t>((o.max_context + 1) * o.batch) * sizeof(std::int32_t),
                                   cudaHostAllocDefault));
  }

  // What offload() gives back: every buffer allocated evictable (empty ones skipped).
  std::vector<device_buffer*> evictable_buffers() {
    std::vector<device_buffer*> out;
    for (device_buffer* b : {&weights, &dequantised, &act_codes, &act_scales, &k_cache, &v_cache, &x, &h, &qkv, &attn,
                             &gate_up, &act, &logits})
      if (b->is_evictable()) out.push_back(b);
    return out;
  }

  ~impl() {
    if (weights.data()) (void)cudaStreamSynchronize(dev.stream());  // nothing queued may outlive the buffers
    for (auto& [rows, exec] : graphs) (void)cudaGraphExecDestroy(exec);
    if (host_ids) (void)cudaFreeHost(host_ids);
  }

  // Byte offset in the arena of one checkpoint tensor (inside its fused part); `scales`: the offset
  // of its fp8 row scales instead (an fp8 engine's quantised tensors only: quantised()).
  std::uint64_t tensor_offset(const tensor_spec& spec, bool scales = false) const {
    const std::uint64_t hidden = static_cast<std::uint64_t>(c.hidden), qd = static_cast<std::uint64_t>(c.q_dim()),
                        kvd = static_cast<std::uint64_t>(c.kv_dim()), inter = static_cast<std::uint64_t>(c.intermediate);
    const auto& l = layer_off.at(spec.layer < 0 ? 0 : static_cast<std::size_t>(spec.layer));
    // Bytes of one row of a projection before this tensor's in its fused part (4: a scale).
    const std::uint64_t row = scales ? 4 : (fp8 ? 1 : 2) * hidden;
    switch (spec.kind) {
      case tensor_kind::embedding: return off_embedding;
      case tensor_kind::q_proj: return scales ? l.sqkv : l.wqkv;
      case tensor_kind::k_proj: return (scales ? l.sqkv : l.wqkv) + qd * row;
      case tensor_kind::v_proj: return (scales ? l.sqkv : l.wqkv) + (qd + kvd) * row;
      case tensor_kind::q_bias: return l.bqkv;
      case tensor_kind::k_bias: return l.bqkv + qd * 2;
      case tensor_kind::v_bias: return l.bqkv + (qd + kvd) * 2;
      case tensor_kind::o_proj: return scales ? l.so : l.wo;
      case tensor_kind::gate_proj: return scales ? l.sgu : l.wgu;
      case tensor_kind::up_proj: return (scales ? l.sgu : l.wgu) + inter * row;
      case tensor_kind::down_proj: return scales ? l.sdown : l.wdown;
      case tensor_kind::input_norm: return l.input_norm;
      case tensor_kind::post_attention_norm: return l.post_norm;
      case tensor_kind::final_norm: return off_final_norm;
      case tensor_kind::lm_head: return scales ? off_lm_head_scales : off_lm_head;
    }
    throw std::logic_error("llm cuda engine: tensor kind without a place");
  }

  bool quantised(const tensor_spec& spec) const { return fp8 && spec.fp8; }

  // The 16-bit type a weight that is not an fp8 code is rounded to before the compute type: the
  // weights' own, bf16 for the rest of an fp8 model (weights.hpp: round_tensor).
  dtype stored_16bit() const { return fp8 ? dtype::bf16 : o.weights; }

  void upload(const model_weights& w) {
    if (fp8 ? w.storage != dtype::bf16 : w.storage != dtype::bf16 && w.storage != dtype::fp16)
      throw std::logic_error(cat("llm cuda engine: uploads ", fp8 ? "bf16 weights (it quantises fp8 itself)"
                                                                  : "bf16 or fp16 weights",
                                 ", got ", dtype_name(w.storage)));
    const dtype stored = stored_16bit();
    std::vector<unsigned char> staging(arena_bytes, 0);
    for (const auto& spec : tensor_specs(c)) {
      const auto& values = w.tensor(spec);
      if (static_cast<std::int64_t>(values.size()) != spec.elements())
        throw std::logic_error(cat("llm cuda engine: tensor '", spec.name, "' holds ", values.size(), " values, needs ",
                                   spec.elements()));
      unsigned char* dst = staging.data() + tensor_offset(spec);
      if (quantised(spec)) {
        const auto scales = quantise_fp8_rows(values, spec.shape.back(), dst);
        std::memcpy(staging.data() + tensor_offset(spec, true), scales.data(), scales.size() * sizeof(float));
        continue;
      }
      // One rounding where the stored type is the compute type, else to the stored type first.
      for (std::size_t i = 0; i < values.size(); ++i) {
        const float v = stored == o.compute ? values[i] : round_to_storage(stored, values[i]);
        const std::uint16_t bits = to_16bit(o.compute, v);
        if (half && (bits & 0x7fff) == 0x7c00 && std::isfinite(v))
          throw usage_error(cat("llm cuda engine: tensor '", spec.name, "' holds ", values[i], ", past fp16's ",
                                "largest value (65504): run it with compute bf16"));
        std::memcpy(dst + 2 * i, &bits, 2);
      }
    }
    dev.upload(weights.data(), staging.data(), arena_bytes);
  }

  void generate(std::uint64_t seed) {
    ITERA_CUDA_CHECK(cudaMemsetAsync(weights.data(), 0, arena_bytes, dev.stream()));
    for (const auto& spec : tensor_specs(c)) {
      const int kind = static_cast<int>(init_for(spec.kind));
      const std::uint64_t stream_seed = tensor_seed(seed, spec.name);
      const auto count = static_cast<std::uint64_t>(spec.elements());
      const std::uint64_t at = tensor_offset(spec);
      if (quantised(spec))
        k::fill_init_fp8(weights.as<std::uint8_t>() + at,
                         reinterpret_cast<float*>(weights.as<unsigned char>() + tensor_offset(spec, true)),
                         spec.shape.front(), spec.shape.back(), kind, stream_seed, dev.stream());
      else if (stored_16bit() == dtype::bf16 && !half)
        k::fill_init<bf16>(w_at<bf16>(at), count, kind, stream_seed, dev.stream());
      else if (stored_16bit() == dtype::bf16)
        k::fill_init<bf16>(w_at<fp16>(at), count, kind, stream_seed, dev.stream());
      else if (half)
        k::fill_init<fp16>(w_at<fp16>(at), count, kind, stream_seed, dev.stream());
      else
        k::fill_init<fp16>(w_at<bf16>(at), count, kind, stream_seed, dev.stream());
    }
    ITERA_CUDA_CHECK(cudaStreamSynchronize(dev.stream()));
  }

  // A layer projection at its offsets: fp8 codes and scales, or 16-bit.
  matrix projection(std::uint64_t offset, std::uint64_t scales) const {
    if (!fp8) return {weights.as<unsigned char>() + offset, nullptr};
    return {weights.as<unsigned char>() + offset, reinterpret_cast<const float*>(weights.as<unsigned char>() + scales)};
  }
  matrix matrix_16bit(std::uint64_t offset) const { return {weights.as<unsigned char>() + offset, nullptr}; }
  // The LM head: fp8 codes and scales (fp8_head), or 16-bit.
  matrix lm_head() const {
    return fp8_head ? projection(off_lm_head, off_lm_head_scales) : matrix_16bit(off_lm_head);
  }

  // A weight of the compute type A at an arena offset.
  template <class A>
  A* w_at(std::uint64_t offset) const {
    return reinterpret_cast<A*>(weights.as<unsigned char>() + offset);
  }

  // The heuristic's results a plan keeps for product_trial: ITERA_LLM_TRIAL_CANDIDATES, 8 unless set.
  static constexpr int max_trial_candidates = 64;
  static int trial_candidates() {
    static const int n = static_cast<int>(std::clamp<std::int64_t>(
        itera::kernels::env_count("ITERA_LLM_TRIAL_CANDIDATES", 8, "how many of cuBLASLt's algorithms a trial times (1-64)"),
        1, max_trial_candidates));
    return n;
  }

  // fp8_inputs: both operands fp8 e4m3 codes, unscaled (the engine applies the scales after).
  // 16-bit operands and output: act_type, the compute type. ldd: the output's leading dimension
  // (0: m; larger where the product fills a column block of a wider output: a slice of the LM head).
  // parts > 1: the k range cut into that many slices run as one strided batch, each slice's fp32
  // sums apart ([parts][n][ldd]; residual_parts, split_parts).
  gemm_plan& plan_for(std::int64_t m, std::int64_t n, std::int64_t kk, bool fp32_out, bool fp8_inputs = false,
                      std::int64_t ldd = 0, int parts = 1) {
    if (ldd == 0) ldd = m;
    const auto key = std::make_tuple(m, n, kk, fp32_out, fp8_inputs, ldd, parts);
    if (auto it = plans.find(key); it != plans.end()) return it->second;
    gemm_plan p;
    cublasLtMatmulDesc_t op = nullptr;
    ITERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    p.op.reset(op);
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    ITERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
    ITERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
    const cudaDataType_t d_type = fp32_out ? CUDA_R_32F : act_type;
    const cudaDataType_t in_type = fp8_inputs ? CUDA_R_8F_E4M3 : act_type;
    const std::int64_t slice = kk / parts;
    p.a = make_layout(in_type, slice, m, kk);  // W: K x M, used transposed
    p.b = make_layout(in_type, slice, n, kk);  // activations [n][K]
    p.d = make_layout(d_type, m, n, ldd);      // [n][ldd], M of each row; also C
    p.parts = parts;
    if (parts > 1) {
      const std::int32_t count = parts;
      const std::int64_t in_stride = slice, out_stride = n * ldd;
      for (const auto& l : {&p.a, &p.b, &p.d})
        ITERA_CUBLAS_CHECK(
            cublasLtMatrixLayoutSetAttribute(l->get(), CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      for (const auto& l : {&p.a, &p.b})
        ITERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l->get(), CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                            &in_stride, sizeof in_stride));
      ITERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(p.d.get(), CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                          &out_stride, sizeof out_stride));
    }
    cublasLtMatmulHeuristicResult_t result{};
    const int returned = heuristic(p, &result, 1);
    if (returned == 0 || result.state != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error(cat("llm cuda engine: cuBLASLt has no ", fp8_inputs ? "fp8" : dtype_name(o.compute),
                                   " algorithm for M=", m, " N=", n, " K=", kk,
                                   " with ", fp32_out ? "fp32" : dtype_name(o.compute), " output",
                                   parts > 1 ? cat(" in ", parts, " parts") : std::string()));
    p.chosen.algo = result.algo;
    return plans.emplace(key, std::move(p)).first->second;
  }

  // cuBLASLt's first `count` algorithms for p's product (its parts never split again: the parts
  // are the split). Returns how many it gave.
  int heuristic(const gemm_plan& p, cublasLtMatmulHeuristicResult_t* results, int count) {
    const matmul_preference pref = cuda::make_preference(dev.lt_workspace_size());
    if (p.parts > 1) {
      const std::uint32_t no_split = CUBLASLT_REDUCTION_SCHEME_NONE;
      ITERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                              &no_split, sizeof no_split));
    }
    int returned = 0;
    ITERA_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(dev.lt_handle(), p.op.get(), p.a.get(), p.b.get(), p.d.get(),
                                                      p.d.get(), pref.get(), count, results, &returned));
    return returned;
  }

  // Whether out[n][m] = in[n][kk] W^T runs in the bandwidth-bound gemv kernel (few rows) rather than cuBLASLt.
  // fp8: the most rows the gemv takes before the fp8 products do. 2, measured on the H200
  // (llama-3.1-8b decode step): 1 row gemv 3.07 ms against products 3.49; 2 rows 3.52 against
  // 3.54; 4 rows 4.86 against 3.89. ITERA_LLM_GEMV_MAX_FP8 sets it (A/B measurements).
  static std::int64_t fp8_gemv_rows() {
    static const std::int64_t most = itera::kernels::env_count(
        "ITERA_LLM_GEMV_MAX_FP8", 2, "the most rows the fp8 gemv takes (0: none), a whole number");
    return most;
  }
  static bool small(std::int64_t n, std::int64_t kk, const matrix& w, const void* in) {
    if (w.scales && n > fp8_gemv_rows()) return false;
    return k::gemv_supported(n, kk, w.w, in, w.scales != nullptr);
  }

  // d = alpha * a b + beta * d on the plan's layouts with `algo`, on the engine's stream and workspace.
  void matmul(const gemm_plan& p, const cublasLtMatmulAlgo_t& algo, float alpha, const void* a, const void* b,
              float beta, void* d) {
    ITERA_CUBLAS_CHECK(cublasLtMatmul(dev.lt_handle(), p.op.get(), &alpha, a, p.a.get(), b, p.b.get(), &beta, d,
                                      p.d.get(), d, p.d.get(), &algo, dev.lt_workspace(), dev.lt_workspace_size(),
                                      dev.stream()));
  }

  // out[n][m] = beta * out + in[n][kk] W^T, W [m][kk], in and 16-bit W and out of the compute type
  // A. fp8 weights above the gemv's rows are dequantised into the 16-bit scratch first.
  template <class A>
  void gemm(const matrix& w, std::int64_t m, std::int64_t kk, const A* in, std::int64_t n, void* out, bool fp32_out,
            float beta) {
    if (small(n, kk, w, in)) {
      if (w.scales)
        k::gemv_fp8(static_cast<const std::uint8_t*>(w.w), w.scales, m, kk, in, n, out, fp32_out, beta, dev.stream());
      else
        k::gemv(static_cast<const A*>(w.w), m, kk, in, n, out, fp32_out, beta, dev.stream());
      return;
    }
    if (w.scales && fp8_mma) {
      // fp8 tensor cores on the codes: the activations quantised per token, the product's sums
      // unscaled (in `out` itself, 16-bit, or fp32 with beta 0: the LM head's logits; a product that
      // adds into the residual sums in the gate/up scratch, free wherever one runs), then both
      // scales applied (scale_product). 16-bit fp16 sums are scaled down by a power of two to fit
      // (k::fp8_sums_scale; bf16's is 1).
      k::quantise_rows_fp8(in, n, kk, act_codes.as<std::uint8_t>(), act_scales.as<float>(), dev.stream());
      gemm_plan& p = plan_for(m, n, kk, fp32_out, true);
      void* sums = out;
      if (fp32_out && beta != 0.0f) sums = sums_scratch(n, m);  // the residual's sum: apart (beta 0: scaled in place)
      const float alpha = fp32_out ? 1.0f : k::fp8_sums_scale<A>(kk);
      matmul(p, p.chosen.algo, alpha, w.w, act_codes.data(), 0.0f, sums);
      k::scale_product<A>(sums, out, fp32_out, n, m, w.scales, act_scales.as<float>(), beta, alpha, dev.stream());
      return;
    }
    if (w.scales) {
      // Dequantised into the 16-bit scratch as many rows at a time as it holds (a layer projection
      // whole, the LM head in slices), each slice's outputs a column block of out.
      const std::int64_t step = dequantised_rows(m, kk);
      const std::size_t out_element = fp32_out ? 4 : 2;
      for (std::int64_t r0 = 0; r0 < m; r0 += step) {
        const std::int64_t rows = std::min(step, m - r0);
        k::dequantise_fp8(static_cast<const std::uint8_t*>(w.w) + r0 * kk, w.scales + r0, rows, kk,
                          dequantised.as<A>(), dev.stream());
        gemm_plan& p = plan_for(rows, n, kk, fp32_out, false, m);
        matmul(p, p.chosen.algo, 1.0f, dequantised.data(), in, beta,
               static_cast<unsigned char*>(out) + static_cast<std::size_t>(r0) * out_element);
      }
      return;
    }
    gemm_plan& p = plan_for(m, n, kk, fp32_out);
    matmul(p, p.chosen.algo, 1.0f, w.w, in, beta, out);
  }

  // The gate/up scratch as room for n x m fp32 sums (free while a product that adds into x runs).
  void* sums_scratch(std::int64_t n, std::int64_t m) const {
    if (gate_up.bytes() < static_cast<std::uint64_t>(n * m) * 4)
      throw std::logic_error(cat("llm cuda engine: the gate/up scratch cannot hold ", n, " x ", m, " fp32 sums"));
    return gate_up.data();
  }

  // fp8 without fp8_mma: the rows of an m x kk matrix that the 16-bit scratch holds at a time (it
  // is sized for the largest layer projection: those whole, the LM head in slices of a multiple of
  // 64 rows, so that each slice's outputs start 16-byte aligned).
  std::int64_t dequantised_rows(std::int64_t m, std::int64_t kk) const {
    const auto fit = static_cast<std::int64_t>(dequantised.bytes() / (2 * static_cast<std::uint64_t>(kk)));
    if (fit >= m) return m;
    if (fit < 64)
      throw std::logic_error(cat("llm cuda engine: the dequantisation scratch holds ", fit, " rows of ", kk,
                                 " inputs; slices are 64 rows or more"));
    return fit / 64 * 64;
  }

  // The cuBLASLt plans gemm() takes for an n-row product with w (m x kk), made ahead of a capture.
  void prepare_plans(std::int64_t m, std::int64_t n, std::int64_t kk, bool fp32_out, const matrix& w) {
    if (w.scales && !fp8_mma) {
      const std::int64_t step = dequantised_rows(m, kk);
      for (std::int64_t r0 = 0; r0 < m; r0 += step) (void)plan_for(std::min(step, m - r0), n, kk, fp32_out, false, m);
      return;
    }
    (void)plan_for(m, n, kk, fp32_out, w.scales != nullptr);
  }

  // The decode step's fused products (k::gemv_rms_norm, k::gemv_swiglu), where the gemv runs the
  // product. The launches they remove took 164 us (65 norms, one block each at batch 1, ~2.5 us of
  // latency) and 39 us (32 swiglu) of device time in a 4.41 ms step (llama-3.1-8b, bf16, batch 1,
  // CUDA graph; docs/perf/2026-11-29-h200-llm-scenarios.md), plus the gap each kernel boundary
  // costs in the graph. What comes back: in each fused norm product, one L2 round trip for x, a
  // block reduction and a shared-memory pass (~1 us) before the first weights arrive from DRAM
  // (issued before it, so mostly hidden); in each down product, SwiGLU recomputed per group of
  // eight rows (~35% of its issue slots at 1 row) and two resident blocks per SM instead of four.
  // Predicted, to be measured on the H200: the batch-1 step 0.15-0.25 ms shorter (4.41 -> ~4.2 ms),
  // most of it from the norms; the down stage may read a few percent slower than before.
  //
  // ITERA_LLM_FUSED_GEMV: unset or 1, fused where the kernels take the shape (SwiGLU only where
  // k::gemv_swiglu_pays); 0, the unfused kernels everywhere; all, SwiGLU fused at every row count
  // the gemv takes (measurements of that line).
  enum class fusion { off, on, all };
  static fusion fused_gemv() {
    static const fusion chosen = [] {
      const char* v = std::getenv("ITERA_LLM_FUSED_GEMV");
      const std::string_view value = v ? v : "";
      if (value.empty() || value == "1") return fusion::on;
      if (value == "0") return fusion::off;
      if (value == "all") return fusion::all;
      throw usage_error(cat("ITERA_LLM_FUSED_GEMV='", value, "': choose 1 (default), 0 (no fused kernels) or all"));
    }();
    return chosen;
  }
  // rms_norm fused into the product of n rows with w (in = hidden).
  bool fuse_norm(std::int64_t n, const matrix& w, const void* norm_w) const {
    return fused_gemv() != fusion::off && small(n, c.hidden, w, h.data()) &&
           k::gemv_rms_norm_supported(n, c.hidden, w.w, x.as<float>(), norm_w, w.scales != nullptr);
  }
  // swiglu fused into the down product of n rows.
  bool fuse_swiglu(std::int64_t n, const matrix& w) const {
    const fusion f = fused_gemv();
    return f != fusion::off && small(n, c.intermediate, w, act.data()) &&
           (f == fusion::all || k::gemv_swiglu_pays(n, w.scales != nullptr)) &&
           k::gemv_swiglu_supported(n, c.intermediate, w.w, gate_up.data(), w.scales != nullptr);
  }

  // The fused products (k::gate_up_swiglu, k::qkv_rope_store: our kernels on TMA and wgmma,
  // 16-bit weights) from how many rows, rather than cuBLASLt and the SwiGLU or RoPE pass after it.
  // ITERA_LLM_FUSED_GATE_UP, ITERA_LLM_FUSED_QKV: unset, the rule; 0, never; a number, from that
  // many rows (A/B measurements). The rule: qkv in a prefill from 512 rows; gate/up wherever
  // cuBLASLt would run it (above the GEMV's rows). H200, llama-3.1-8b, CUDA graph steps alternating
  // with cuBLASLt + SwiGLU (docs/perf/2026-12-01-fused-decode-gate-up.md): batch 5 4.539 / 4.539 ms,
  // 8 4.610 -> 4.575, 16 4.856 -> 4.792, 32 5.071 -> 5.056, 64 5.766 -> 5.640, 128 7.566 -> 7.400,
  // 256 12.165 -> 11.890; a 2048-token prefill's gate/up + SwiGLU 23.3 -> 22.3-22.8 ms
  // (docs/perf/2026-12-01-fused-products.md). Rows 257-511 are not measured.
  static std::int64_t fused_rows_from(const char* var, std::int64_t rule) {
    const std::int64_t n =
        itera::kernels::env_count(var, rule, "0 (never) or the rows from which the fused kernel runs");
    return n == 0 ? std::numeric_limits<std::int64_t>::max() : n;
  }
  static std::int64_t fused_gate_up_rows() {
    static const std::int64_t from = fused_rows_from("ITERA_LLM_FUSED_GATE_UP", k::gemv_max_tokens + 1);
    return from;
  }
  // The fewest rows at which the fused gate/up normalises x itself (route: gate_up_norm), or
  // ITERA_LLM_GATE_UP_NORM_ROWS. On the H200 (llama-3.1-8b, docs/perf/2026-12-02-gate-up-norm.md)
  // graph steps at 40, 48 and 64 rows gained 1.3%, 1.4% and 0.8% (64: 5.590 -> 5.545 ms), 33 was
  // even; at 32 and 16 cuBLASLt runs the unsplit o_proj as split-K with a reduction kernel after
  // it and the step lost (5.050 -> 5.105 ms at 32).
  static std::int64_t gate_up_norm_rows() {
    static const std::int64_t from = itera::kernels::env_count("ITERA_LLM_GATE_UP_NORM_ROWS", 33,
                                                               "the rows from which the gate/up normalises x itself");
    return from;
  }
  static std::int64_t fused_qkv_rows() {
    static const std::int64_t from = fused_rows_from("ITERA_LLM_FUSED_QKV", 512);
    return from;
  }
  bool fuse_gate_up(std::int64_t n, const matrix& w) const {
    return !w.scales && n >= fused_gate_up_rows() && k::gate_up_swiglu_supported(n, c.intermediate, c.hidden);
  }
  // A decode's bias, RoPE and cache store inside the tensor-core attention kernel, where it runs
  // (k::decode_attention_rotates), rather than a bias_rope_store kernel before it: one kernel a
  // layer fewer (H200, llama-3.1-8b: docs/perf/2026-12-01-fused-decode-gate-up.md).
  // ITERA_LLM_ROPE_IN_ATTENTION=0 keeps the separate kernel (A/B measurements).
  static bool rope_in_attention() {
    static const bool on = itera::kernels::env_switch("ITERA_LLM_ROPE_IN_ATTENTION", true);
    return on;
  }
  bool fuse_qkv(bool prefill, std::int64_t n, const matrix& w, const k::attention_shape& sh) const {
    return prefill && !w.scales && n >= fused_qkv_rows() && k::qkv_rope_store_supported(n, c.hidden, sh);
  }

  // out[n][m] = rms_norm(x row t * in_stride + in_offset, norm_w) W^T (beta 0). Fused: one kernel in
  // product_scope, which then declares the norm's weight bytes too; otherwise rms_norm into h in
  // norm_scope, then the product in product_scope. h_normed: h holds those rows already (a
  // residual product in parts wrote them, add_rms_norm): the product alone.
  template <class A>
  void norm_product(stage_recorder* rec, std::string_view norm_scope, std::string_view product_scope,
                    const A* norm_w, std::int64_t in_stride, std::int64_t in_offset, std::int64_t n,
                    const matrix& w, std::int64_t m, double product_bytes, void* out, bool fp32_out,
                    bool h_normed = false) {
    const cudaStream_t s = dev.stream();
    const auto eps = static_cast<float>(c.rms_norm_eps);
    const double norm_bytes = 2.0 * static_cast<double>(c.hidden);
    if (!h_normed && fuse_norm(n, w, norm_w)) {
      stage st(rec, product_scope);
      st.read(product_bytes + norm_bytes);
      k::gemv_rms_norm(w.w, w.scales, m, c.hidden, x.as<float>(), in_stride, in_offset, norm_w, eps, n, out, fp32_out,
                       0.0f, s);
      return;
    }
    if (!h_normed) norm_rows(rec, norm_scope, norm_w, in_stride, in_offset, n);
    stage st(rec, product_scope);
    st.read(product_bytes);
    gemm(w, m, c.hidden, h.as<A>(), n, out, fp32_out, 0.0f);
  }

  // h[n][hidden] = rms_norm(x row t * in_stride + in_offset, norm_w), in `scope`.
  template <class A>
  void norm_rows(stage_recorder* rec, std::string_view scope, const A* norm_w, std::int64_t in_stride,
                 std::int64_t in_offset, std::int64_t n) {
    stage st(rec, scope);
    st.read(2.0 * static_cast<double>(c.hidden));
    k::rms_norm(x.as<float>(), in_stride, in_offset, norm_w, h.as<A>(), n, c.hidden, static_cast<float>(c.rms_norm_eps),
                dev.stream());
  }

  // x[n][hidden] += swiglu(gate_up) Wdown^T. Fused: one kernel in the "down" scope; otherwise
  // swiglu into act in the "swiglu" scope, then the product.
  template <class A>
  void swiglu_down(stage_recorder* rec, std::int64_t n, const matrix& w, double product_bytes) {
    const cudaStream_t s = dev.stream();
    if (fuse_swiglu(n, w)) {
      stage st(rec, "down");
      st.read(product_bytes);
      k::gemv_swiglu(w.w, w.scales, c.hidden, c.intermediate, gate_up.as<A>(), n, x.data(), true, 1.0f, s);
      return;
    }
    swiglu_rows<A>(rec, n);
    stage st(rec, "down");
    st.read(product_bytes);
    gemm(w, c.hidden, c.intermediate, act.as<A>(), n, x.data(), true, 1.0f);
  }

  // act[n][intermediate] = swiglu(gate_up), in the "swiglu" scope.
  template <class A>
  void swiglu_rows(stage_recorder* rec, std::int64_t n) {
    stage st(rec, "swiglu");
    k::swiglu(gate_up.as<A>(), act.as<A>(), n, c.intermediate, dev.stream());
  }

  // How a pass of n rows runs a layer's products, for forward() and capture() alike (the same for
  // every layer: their weights share type and alignment): whether the fused gate/up + SwiGLU
  // kernel runs, and the parts o_proj and down run in (1: not split).
  //
  // gate_up_norm (decodes only: measured there; bf16 compute: the kernel's operand is not
  // normalised, and in fp16 an outlier of the residual could overflow it): the fused gate/up reads
  // the residual x itself and normalises its rows (k::gate_up_swiglu_norm, at most 64 rows), so
  // o_proj adds into x unsplit (cuBLASLt, beta 1) and no norm kernel runs between them: one kernel
  // a layer fewer. ITERA_LLM_GATE_UP_NORM=0 (or override_gate_up_norm) keeps the path before it
  // (o_proj in parts with the add and norm after it, where split_parts takes it).
  struct layer_route {
    bool fused_gate_up = false, gate_up_norm = false;
    int o_parts = 1, down_parts = 1;
  };
  layer_route route(std::int64_t n, bool prefill) const {
    const layer_offsets& l0 = layer_off.front();
    const matrix wdown = projection(l0.wdown, l0.sdown);
    layer_route r;
    r.fused_gate_up = fuse_gate_up(n, projection(l0.wgu, l0.sgu));
    r.gate_up_norm = !prefill && !half && r.fused_gate_up && gate_up_norm_on && n >= gate_up_norm_rows() &&
                     k::gate_up_swiglu_norm_supported(n, c.intermediate, c.hidden);
    r.o_parts = r.gate_up_norm ? 1 : split_parts(n, c.q_dim(), projection(l0.wo, l0.so), attn.data());
    r.down_parts = !r.fused_gate_up && fuse_swiglu(n, wdown) ? 1 : split_parts(n, c.intermediate, wdown, act.data());
    return r;
  }

  // The products that add into the residual (o_proj, down) at n rows, as split products: the k
  // range in split_parts() slices run as one strided cuBLASLt batch, each slice's fp32 sums apart
  // in the gate/up scratch (free while either runs), then one kernel (k::add_rms_norm) adds them
  // into x and writes the next norm's rows into h, where the unsplit path ran the product with
  // beta 1 (down: cuBLASLt's split-K and its reduction kernel) and a norm kernel after it.
  // Measured on the H200 (llama-3.1-8b, 64 rows, weights streamed from DRAM;
  // docs/perf/2026-12-01-split-residual.md): down 36.2 us as cuBLASLt splits it, 32.7 in two
  // parts; o_proj 13.4 against 12.9. 16-bit weights, rows above the gemv's and at most
  // split_rows, k a multiple of 128; ITERA_LLM_SPLIT_RESIDUAL=0 (or override_split_residual)
  // never splits. Returns 1 where not split.
  static constexpr std::int64_t split_rows = 64;
  static constexpr int residual_split = 2;
  int split_parts(std::int64_t n, std::int64_t kk, const matrix& w, const void* in) const {
    const bool fits = gate_up.bytes() >= static_cast<std::uint64_t>(residual_split * n * c.hidden) * 4;
    const bool takes = split_residual && !w.scales && n <= split_rows && kk % (residual_split * 64) == 0 && fits;
    return takes && !small(n, kk, w, in) ? residual_split : 1;
  }

  // How many layers a trial times a candidate over (product_trial_rules.hpp);
  // ITERA_LLM_TRIAL_LAYERS=n sets it (measurements).
  std::size_t trial_layers(double layer_bytes) const {
    static const std::int64_t forced =
        itera::kernels::env_count("ITERA_LLM_TRIAL_LAYERS", 0, "0 (by the L2) or the layers a trial times");
    return static_cast<std::size_t>(
        trial_layer_count(l2_bytes, layer_bytes, static_cast<std::int64_t>(layer_off.size()), forced));
  }

  // A decode graph's product algorithm: the fastest of the heuristic's first eight
  // (ITERA_LLM_TRIAL_CANDIDATES), each timed over trial_layers() layers' weights in turn (so that
  // they stream from DRAM, as in a step), once per plan, by capture() before it captures. Eager
  // passes keep what the plan holds (the first, unless a capture tried it first): a prefill of a new
  // length or an eager step pays no trial inside a timed region; the server scenario prepares its
  // graphs before its run (prepare_decode). ITERA_LLM_SPLIT_TRIAL=0 (override_split_trial) keeps
  // the heuristic's first for the split products, ITERA_LLM_PRODUCT_TRIAL=0 (override_product_trial)
  // for the others. On the H200 (docs/perf/2026-12-01-split-residual.md, run 9; batch 64): the
  // split products' trial took down 1092 -> 1035 us a step, o_proj 377 -> 358, the graph step
  // 5.978 / 5.981 -> 5.914 / 5.900 ms; the others' (docs/perf/2026-12-01-trials-and-warmup.md, run
  // 2) gate/up 2042 -> 1903 us, the LM head 275 -> 260, the step 5.910 / 5.935 -> 5.770 / 5.765 ms.
  // run_all(algo): the timed work with `algo` as p's algorithm (every layer's product, or a
  // sequence holding it: pair_trial).
  template <class Run>
  void product_trial(std::string_view name, gemm_plan& p, const Run& run_all) {
    if (p.tried) return;
    p.tried = true;
    cublasLtMatmulHeuristicResult_t results[max_trial_candidates] = {};  // nvcc 13.0 crashes on containers of it
    const int returned = heuristic(p, results, trial_candidates());
    for (int i = 1; i < returned; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS) p.candidates.push_back(algorithm{results[i].algo});
    if (p.candidates.empty()) return;
    cuda::cuda_event_timer timer(dev.stream(), "product trial");
    std::vector<algorithm> all{p.chosen};
    all.insert(all.end(), p.candidates.begin(), p.candidates.end());
    static const std::int64_t passes = std::clamp<std::int64_t>(
        itera::kernels::env_count("ITERA_LLM_TRIAL_PASSES", 1, "timed passes per candidate, the fastest kept (1-16)"), 1, 16);
    static const bool log = std::getenv("ITERA_LLM_TRIAL_LOG") != nullptr;
    static const bool in_graph = itera::kernels::env_switch("ITERA_LLM_TRIAL_GRAPH", true);
    std::string line;
    double best = -1;
    int picked = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      // Timed as a step runs it: replays of a graph of the candidate's launches. Launched one by
      // one from here, the timed region also held the host's launch gaps: on the H200 at batch 64
      // qkv's trial over five layers read 17-20 us a layer (its kernels take 16-18 us in a step)
      // and picked a candidate 1-2 us a layer slower in 3 processes of 14; replayed, 0 of 18, and
      // the step 5.771 ms against 5.828 over six alternating pairs of processes
      // (docs/perf/2026-12-01-graph-kernels.md, runs 17-20).
      trial_graph graph(dev.stream(), in_graph, [&] { run_all(all[i].algo); });
      graph.run();  // warm-up
      double ms = -1;
      for (std::int64_t pass = 0; pass < passes; ++pass) {
        timer.start();
        graph.run();
        timer.stop();
        const double t = timer.elapsed_ns() * 1e-6;
        ms = ms < 0 ? t : std::min(ms, t);
      }
      if (log) line += cat(" #", i + 1, " ", ms);
      if (best < 0 || ms < best) {
        best = ms;
        picked = static_cast<int>(i);
      }
    }
    // ITERA_LLM_TRIAL_FORCE=name=k[,name=k]: candidate k (1-based) for that product (measurements).
    if (const char* f = std::getenv("ITERA_LLM_TRIAL_FORCE")) {
      const std::string forced = cat(",", f, ",");
      if (const auto at = forced.find(cat(",", name, "=")); at != std::string::npos)
        picked = std::clamp(std::atoi(forced.c_str() + at + name.size() + 2) - 1, 0, static_cast<int>(all.size()) - 1);
    }
    p.chosen = all[static_cast<std::size_t>(picked)];
    if (log) {
      const auto config = [&](cublasLtMatmulAlgoConfigAttributes_t what) {
        std::uint32_t v = 0;
        std::size_t written = 0;
        return cublasLtMatmulAlgoConfigGetAttribute(&p.chosen.algo, what, &v, sizeof v, &written) == CUBLAS_STATUS_SUCCESS
                   ? static_cast<long long>(v)
                   : -1LL;
      };
      std::fprintf(stderr, "llm product trial, %.*s (ms):%s; picked #%d (algo %lld tile %lld split-K %lld)\n",
                   static_cast<int>(name.size()), name.data(), line.c_str(), picked + 1, config(CUBLASLT_ALGO_CONFIG_ID),
                   config(CUBLASLT_ALGO_CONFIG_TILE_ID), config(CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
    }
  }

  // A split residual product's trial (o_proj, down; 16-bit weights): each candidate timed over
  // trial_layers() layers with what follows it in a step, the add and the next norm
  // (k::add_rms_norm) and the next product with its algorithm as already chosen (o_proj: the same
  // layer's gate/up, by cuBLASLt or by the fused kernel (route); down: the next layer's qkv;
  // `next_by_cublas`: whether cuBLASLt runs it), because
  // the product after it takes a different time by the algorithm before it: on the H200
  // (docs/perf/2026-12-01-trials-and-warmup.md, run 5; batch 64) gate/up took 1868 us a step after
  // three of o_proj's first eight and ~1993 after the other five, o_proj itself 353-407 us, so the
  // fastest o_proj alone (#5, 353 us) made the slower step (5.80 ms against 5.69). The add writes
  // into x, which a step overwrites from the embeddings before reading.
  template <class A>
  void pair_trial(std::string_view name, std::int64_t rows, int parts, std::uint64_t layer_offsets::*weight,
                  std::int64_t kk, const A* in, bool next_by_cublas) {
    gemm_plan& p = plan_for(c.hidden, rows, kk, true, false, 0, parts);
    const bool o_proj = weight == &layer_offsets::wo;
    const std::int64_t next_m = o_proj ? 2 * c.intermediate : qkv_width;
    gemm_plan* next = next_by_cublas ? &plan_for(next_m, rows, c.hidden, false) : nullptr;
    const bool next_fused = o_proj && route(rows, false).fused_gate_up;  // k::gate_up_swiglu after o_proj
    void* next_out = o_proj ? gate_up.data() : qkv.data();
    const std::size_t count =
        trial_layers(2.0 * static_cast<double>(c.hidden * kk + (next || next_fused ? next_m * c.hidden : 0)));
    product_trial(name, p, [&](const cublasLtMatmulAlgo_t& algo) {
      for (std::size_t l = 0; l < count; ++l) {
        // o_proj: this layer's post-attention norm and gate/up; down: the next layer's input norm and qkv.
        const layer_offsets& lo = layer_off[l];
        const layer_offsets* after = o_proj ? &lo : l + 1 < layer_off.size() ? &layer_off[l + 1] : nullptr;
        const A* norm_w = !after ? nullptr : w_at<A>(o_proj ? after->post_norm : after->input_norm);
        residual_product<A>(nullptr, name, "", matrix_16bit(lo.*weight), kk, in, rows, parts, 0, norm_w, &algo);
        if (next && after)
          matmul(*next, next->chosen.algo, 1.0f, weights.as<unsigned char>() + (o_proj ? after->wgu : after->wqkv),
                 h.data(), 0.0f, next_out);
        if (next_fused)
          k::gate_up_swiglu(h.as<A>(), rows, w_at<A>(lo.wgu), c.intermediate, c.hidden, act.as<A>(), dev.stream());
      }
    });
  }

  // x[n][hidden] += in[n][kk] W^T in `parts` (> 1) as split_parts says, then h = rms_norm(x,
  // norm_w) (nullptr: the add alone), the add and norm in `norm_scope`. `algo`: the plan's unless
  // given (pair_trial's candidates).
  template <class A>
  void residual_product(stage_recorder* rec, std::string_view product_scope, std::string_view norm_scope,
                        const matrix& w, std::int64_t kk, const A* in, std::int64_t n, int parts,
                        double product_bytes, const A* norm_w, const cublasLtMatmulAlgo_t* algo = nullptr) {
    gemm_plan& p = plan_for(c.hidden, n, kk, true, false, 0, parts);
    {
      stage st(rec, product_scope);
      st.read(product_bytes);
      matmul(p, algo ? *algo : p.chosen.algo, 1.0f, w.w, in, 0.0f, gate_up.data());
    }
    stage st(rec, norm_scope);
    if (norm_w) st.read(2.0 * static_cast<double>(c.hidden));
    k::add_rms_norm(x.as<float>(), k::residual_parts{gate_up.as<float>(), parts, n * c.hidden}, norm_w, h.as<A>(), n,
                    c.hidden, static_cast<float>(c.rms_norm_eps), dev.stream());
  }

  std::uint64_t kv_element_bytes() const { return kv8 ? 1 : 2; }

  // The layers' pointers as decode_step reads them, uploaded when they changed (never under
  // capture: capture() uploads them first).
  template <class A>
  void upload_step_layers() {
    std::vector<k::decode_layer> layers(static_cast<std::size_t>(c.layers));
    for (std::int64_t l = 0; l < c.layers; ++l) {
      const auto& lo = layer_off[static_cast<std::size_t>(l)];
      auto& d = layers[static_cast<std::size_t>(l)];
      const auto at = [&](const matrix& m, const void*& w, const float*& sc) { w = m.w, sc = m.scales; };
      at(projection(lo.wqkv, lo.sqkv), d.wqkv, d.sqkv);
      at(projection(lo.wo, lo.so), d.wo, d.so);
      at(projection(lo.wgu, lo.sgu), d.wgu, d.sgu);
      at(projection(lo.wdown, lo.sdown), d.wdown, d.sdown);
      d.bqkv = c.attention_bias ? w_at<A>(lo.bqkv) : nullptr;
      d.input_norm = w_at<A>(lo.input_norm);
      d.post_norm = w_at<A>(lo.post_norm);
      d.k_cache = cache_at(k_cache, l, 0);
      d.v_cache = cache_at(v_cache, l, 0);
    }
    const auto same = [](const k::decode_layer& a, const k::decode_layer& b) { return std::memcmp(&a, &b, sizeof a) == 0; };
    if (std::equal(layers.begin(), layers.end(), step_layers_uploaded.begin(), step_layers_uploaded.end(), same)) return;
    dev.upload(step_layers.data(), layers.data(), layers.size() * sizeof(k::decode_layer));
    step_layers_uploaded = std::move(layers);
  }

  // The cache of layer l from slot `first` on.
  void* cache_at(const device_buffer& cache, std::int64_t l, std::int64_t first) const {
    const std::int64_t elements = (l * o.batch + first) * c.kv_heads * o.max_context * c.head_dim;
    return cache.as<unsigned char>() + static_cast<std::uint64_t>(elements) * kv_element_bytes();
  }

  // One forward pass over slots [first, first + nseq), rows_per_seq rows each: a prefill (ids from
  // prompt_ids, rows_per_seq > 1 or prefill) or a decode step (ids from next). The logits of every
  // row (all) or of each slot's last row; the argmax of each slot's last row into next[first..];
  // each slot's length advanced by rows_per_seq.
  //
  // With a recorder (eager steps only, never under capture), each part runs in a named scope that
  // declares the weight bytes it reads (the attention scope: the cache bytes, from the host lengths).
  void forward(std::int64_t first, std::int64_t nseq, std::int64_t rows_per_seq, bool prefill, bool all,
               stage_recorder* rec = nullptr) {
    if (half)
      forward_as<fp16>(first, nseq, rows_per_seq, prefill, all, rec);
    else
      forward_as<bf16>(first, nseq, rows_per_seq, prefill, all, rec);
  }
  template <class A>
  void forward_as(std::int64_t first, std::int64_t nseq, std::int64_t rows_per_seq, bool prefill, bool all,
                  stage_recorder* rec) {
    const cudaStream_t s = dev.stream();
    const std::int64_t rows = nseq * rows_per_seq, hidden = c.hidden, inter = c.intermediate;
    const auto wbytes = [](std::int64_t elements) { return 2.0 * static_cast<double>(elements); };  // 16-bit
    // A projection's bytes as stored: fp8 codes and one fp32 scale per row, or 16-bit.
    const auto pbytes = [&](std::int64_t rows_out, std::int64_t cols) {
      return fp8 ? static_cast<double>(rows_out * cols) + 4.0 * static_cast<double>(rows_out) : wbytes(rows_out * cols);
    };
    k::attention_shape sh = shape;
    sh.rows_per_seq = rows_per_seq;
    const auto* ids = prefill ? prompt_ids.as<std::int32_t>() : next.as<std::int32_t>() + first;
    auto* lens = lengths.as<std::int32_t>() + first;
    // K and V the attention reads, per layer: a prefill its own rows (16-bit), a decode step the
    // cache as stored (1 byte per element for fp8).
    double cache_bytes = 0;
    const double kv_element = prefill ? 2.0 : static_cast<double>(kv_element_bytes());
    for (std::int64_t i = first; i < first + nseq; ++i)
      cache_bytes += kv_element * static_cast<double>(2 * c.kv_dim() *
                            std::min((prefill ? 0 : held[static_cast<std::size_t>(i)]) + rows_per_seq, o.max_context));
    const bool whole_step = step_kernel && !prefill && rows == 1;
    {
      // The step kernel's counters zeroed by the embedding's launch: without a memset node of its
      // own the step kernel starts 0.1-0.2 us after the embedding instead of 8-11 us (H200, CUDA
      // graph: docs/perf/2026-12-01-graph-kernels.md).
      stage st(rec, "embed");
      st.read(wbytes(rows * hidden));
      k::embed(ids, w_at<A>(off_embedding), x.as<float>(), rows, hidden, c.vocab, s,
               whole_step ? k::decode_step_counters(step_workspace.data()) : k::words{});
      if (prefill && inputs > 0) k::scatter_rows(input_rows.as<std::int32_t>(), input_values, x.as<float>(), inputs, hidden, s);
    }
    if (whole_step) {
      // The layer table first, outside the scope (an upload waits for the stream).
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
      ITERA_CUDA_CHECK(cudaStreamIsCapturing(s, &capturing));
      if (capturing == cudaStreamCaptureStatusNone) upload_step_layers<A>();
      // Every layer in one kernel; its scope declares every layer's weights and the cache it reads.
      stage st(rec, "layers");
      const double layer_bytes = pbytes(qkv_width, hidden) + pbytes(hidden, c.q_dim()) + pbytes(2 * inter, hidden) +
                                 pbytes(hidden, inter) + wbytes(2 * hidden + (c.attention_bias ? qkv_width : 0));
      st.read(static_cast<double>(c.layers) * (layer_bytes + cache_bytes));
      k::decode_step(static_cast<const k::decode_layer*>(step_layers.data()), step_shape, x.as<float>(), qkv.as<A>(),
                     attn.as<A>(), gate_up.as<A>(), inv_freq.as<float>(), lens, step_workspace.data(), s,
                     true);  // counters zeroed by the embedding
    }
    // h holds rms_norm(x) with this layer's input norm already: the previous layer's down ran in
    // parts (residual_product) and normalised its sum.
    bool h_normed = false;
    const layer_route way = route(rows, prefill);
    // A decode's RoPE and cache store done by the tensor-core attention kernel (rope_in_attention).
    const bool rope_later = !prefill && rope_in_attention() && k::decode_attention_rotates<A>(rows, sh);
    for (std::int64_t l = 0; !whole_step && l < c.layers; ++l) {
      const auto& lo = layer_off[static_cast<std::size_t>(l)];
      const bool last = l + 1 == c.layers;
      bool post_normed = false;  // h holds rms_norm(x) with the post-attention norm (o_proj in parts)
      {
        stage block(rec, "attention_block");
        const matrix wqkv = projection(lo.wqkv, lo.sqkv);
        const A* bias = c.attention_bias ? w_at<A>(lo.bqkv) : nullptr;
        if (fuse_qkv(prefill, rows, wqkv, sh)) {
          norm_rows(rec, "norm", w_at<A>(lo.input_norm), 1, 0, rows);
          stage st(rec, "qkv");  // with the bias, RoPE and the cache store
          st.read(pbytes(qkv_width, hidden) + (bias ? wbytes(qkv_width) : 0.0));
          k::qkv_rope_store(h.as<A>(), rows, hidden, static_cast<const A*>(wqkv.w), bias, inv_freq.as<float>(), lens,
                            sh, cache_at(k_cache, l, first), cache_at(v_cache, l, first), qkv.as<A>(), s);
        } else {
          norm_product(rec, "norm", "qkv", w_at<A>(lo.input_norm), 1, 0, rows, wqkv, qkv_width,
                       pbytes(qkv_width, hidden), qkv.data(), false, h_normed);
          if (!rope_later) {
            stage st(rec, "rope");
            if (bias) st.read(wbytes(qkv_width));
            k::bias_rope_store(qkv.as<A>(), bias, inv_freq.as<float>(), lens, rows, sh, cache_at(k_cache, l, first),
                               cache_at(v_cache, l, first), prefill, s);
          }
        }
        {
          stage st(rec, "attention");  // with the RoPE and the cache store where rope_later
          st.read(cache_bytes + (rope_later && bias ? wbytes(qkv_width) : 0.0));
          const k::decode_rope<A> rope =
              rope_later ? k::decode_rope<A>{bias, inv_freq.as<float>(), cache_at(k_cache, l, first),
                                             cache_at(v_cache, l, first)}
                         : k::decode_rope<A>{};
          k::attention(qkv.as<A>(), cache_at(k_cache, l, first), cache_at(v_cache, l, first), lens, rows, sh, prefill,
                       attention_scale, attn.as<A>(), s, rope);
        }
        const matrix wo = projection(lo.wo, lo.so);
        if (way.o_parts > 1) {
          residual_product<A>(rec, "o_proj", "residual_norm", wo, c.q_dim(), attn.as<A>(), rows,
                              way.o_parts, pbytes(hidden, c.q_dim()), w_at<A>(lo.post_norm));
          post_normed = true;
        } else {
          stage st(rec, "o_proj");
          st.read(pbytes(hidden, c.q_dim()));
          gemm(wo, hidden, c.q_dim(), attn.as<A>(), rows, x.data(), true, 1.0f);
        }
      }
      stage block(rec, "mlp_block");
      const matrix wgu = projection(lo.wgu, lo.sgu), wdown = projection(lo.wdown, lo.sdown);
      h_normed = false;
      if (way.gate_up_norm) {
        stage st(rec, "gate_up");  // with the post-attention norm
        st.read(pbytes(2 * inter, hidden) + 2.0 * static_cast<double>(hidden));
        k::gate_up_swiglu_norm(x.as<float>(), rows, w_at<A>(lo.post_norm), static_cast<float>(c.rms_norm_eps),
                               static_cast<const A*>(wgu.w), inter, hidden, act.as<A>(), s);
      } else if (way.fused_gate_up) {
        if (!post_normed) norm_rows(rec, "norm", w_at<A>(lo.post_norm), 1, 0, rows);
        stage st(rec, "gate_up");
        st.read(pbytes(2 * inter, hidden));
        k::gate_up_swiglu(h.as<A>(), rows, static_cast<const A*>(wgu.w), inter, hidden, act.as<A>(), s);
      } else {
        norm_product(rec, "norm", "gate_up", w_at<A>(lo.post_norm), 1, 0, rows, wgu, 2 * inter,
                     pbytes(2 * inter, hidden), gate_up.data(), false, post_normed);
        if (way.down_parts > 1) swiglu_rows<A>(rec, rows);
      }
      if (way.down_parts > 1) {
        // The next layer's input norm here (the LM head's final norm stays with it); the parts in
        // the gate/up scratch, free once act is formed.
        const A* next_norm = last ? nullptr : w_at<A>(layer_off[static_cast<std::size_t>(l + 1)].input_norm);
        residual_product<A>(rec, "down", "residual_norm", wdown, inter, act.as<A>(), rows, way.down_parts,
                            pbytes(hidden, inter), next_norm);
        h_normed = !last;
      } else if (way.fused_gate_up) {
        stage st(rec, "down");
        st.read(pbytes(hidden, inter));
        gemm(wdown, hidden, inter, act.as<A>(), rows, x.data(), true, 1.0f);
      } else {
        swiglu_down<A>(rec, rows, wdown, pbytes(hidden, inter));
      }
    }
    auto* out_ids = next.as<std::int32_t>() + first;
    const std::int64_t head_rows = all ? rows : nseq;
    {
      // The logits of every row (all) or of each sequence's last row.
      stage block(rec, "lm_head_block");
      norm_product(rec, "final_norm", "lm_head", w_at<A>(off_final_norm), all ? 1 : rows_per_seq,
                   all ? 0 : rows_per_seq - 1, head_rows, lm_head(), c.vocab,
                   fp8_head ? pbytes(c.vocab, hidden) : wbytes(c.vocab * hidden),
                   logits.data(), true);
    }
    {
      stage st(rec, "argmax");
      const k::advance_lengths then{lens, static_cast<std::int32_t>(rows_per_seq),
                                    static_cast<std::int32_t>(o.max_context - 1)};
      if (all)
        k::argmax(logits.as<float>(), rows_per_seq, rows_per_seq - 1, nseq, c.vocab, out_ids, s, then);
      else
        k::argmax(logits.as<float>(), 1, 0, nseq, c.vocab, out_ids, s, then);
    }
  }

  void check_ids(std::span<const std::int32_t> ids) const {
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= c.vocab)
        throw usage_error(cat("llm cuda engine: token ", ids[i], " at ", i, " is outside the vocabulary 0..", c.vocab - 1));
  }

  // Every busy slot in [0, rows) has room for `steps` more tokens.
  void check_room(std::int64_t rows, std::int64_t steps) const {
    if (rows < 1 || rows > o.batch)
      throw usage_error(cat("llm cuda engine: a decode step of ", rows, " rows; the engine holds 1..", o.batch));
    for (std::int64_t i = 0; i < rows; ++i) {
      const auto n = held[static_cast<std::size_t>(i)];
      if (busy[static_cast<std::size_t>(i)] && n + steps > o.max_context)
        throw usage_error(cat("llm cuda engine: slot ", i, " holds ", n, " tokens; ", steps,
                              " more exceed the context of ", o.max_context));
    }
  }

  void advance_held(std::int64_t rows) {
    for (std::int64_t i = 0; i < rows; ++i)
      if (busy[static_cast<std::size_t>(i)]) ++held[static_cast<std::size_t>(i)];
  }

  void prefill_range(std::int64_t first, std::int64_t count, std::int64_t prompt, bool all,
                     stage_recorder* rec = nullptr) {
    if (first < 0 || count < 1 || first + count > o.batch)
      throw usage_error(cat("llm cuda engine: slots ", first, "..", first + count - 1, " outside 0..", o.batch - 1));
    if (prompt < 1 || prompt > o.max_prompt)
      throw usage_error(cat("llm cuda engine: prompt of ", prompt, " tokens, must be in 1..", o.max_prompt));
    if (count * prompt > max_rows)
      throw usage_error(cat("llm cuda engine: a prefill of ", count, " x ", prompt, " rows; the engine was sized for ",
                            max_rows, " (", o.prefill_batch, " sequences x ", o.max_prompt, ")"));
    if (count * prompt != staged)
      throw usage_error(cat("llm cuda engine: ", staged, " staged ids for ", count, " prompts of ", prompt));
    dev.make_current();
    ITERA_CUDA_CHECK(cudaMemsetAsync(lengths.as<std::int32_t>() + first, 0, static_cast<std::size_t>(count) * 4,
                                     dev.stream()));
    forward(first, count, prompt, true, all, rec);
    inputs = 0;  // given for this prefill only
    input_values = nullptr;
    for (std::int64_t i = first; i < first + count; ++i) {
      held[static_cast<std::size_t>(i)] = prompt;
      busy[static_cast<std::size_t>(i)] = true;
    }
  }

  void stage_ids(std::span<const std::int32_t> ids) {
    if (static_cast<std::int64_t>(ids.size()) > max_rows)
      throw usage_error(cat("llm cuda engine: ", ids.size(), " prompt ids; the engine stages at most ", max_rows,
                            " (", o.prefill_batch, " sequences x prompt ", o.max_prompt, ")"));
    check_ids(ids);
    dev.upload(prompt_ids.data(), ids.data(), ids.size_bytes());  // returns when done: the source may go
    staged = static_cast<std::int64_t>(ids.size());
    inputs = 0;
    input_values = nullptr;
  }

  void stage_inputs(const embedding_rows& e) {
    check_embedding_rows(e.rows, staged, "llm cuda engine");
    inputs = 0;
    input_values = nullptr;
    if (e.rows.empty()) return;
    if (e.values == nullptr) throw usage_error("llm cuda engine: embedding rows without values");
    const auto n = static_cast<std::uint64_t>(e.rows.size());
    const auto value_bytes = n * static_cast<std::uint64_t>(c.hidden) * 2;
    dev.make_current();
    if (input_rows.bytes() < n * 4) input_rows = dev.allocate(static_cast<std::uint64_t>(max_rows) * 4);
    std::vector<std::int32_t> rows32(e.rows.begin(), e.rows.end());  // rows < staged <= max_rows: int32 holds them
    ITERA_CUDA_CHECK(cudaMemcpyAsync(input_rows.data(), rows32.data(), n * 4, cudaMemcpyHostToDevice, dev.stream()));
    if (e.on_device) {
      input_values = reinterpret_cast<const bf16*>(e.values);
    } else {
      if (input_host_values.bytes() < value_bytes) input_host_values = dev.allocate(value_bytes);
      ITERA_CUDA_CHECK(cudaMemcpyAsync(input_host_values.data(), e.values, value_bytes, cudaMemcpyHostToDevice,
                                       dev.stream()));
      input_values = input_host_values.as<bf16>();
    }
    // The sources may go when we return: wait for the pageable copies to have read them.
    ITERA_CUDA_CHECK(cudaStreamSynchronize(dev.stream()));
    inputs = static_cast<std::int64_t>(n);
  }

  std::vector<float> read_logits(std::int64_t rows) {
    std::vector<float> out(static_cast<std::size_t>(rows * c.vocab));
    ITERA_CUDA_CHECK(cudaMemcpyAsync(out.data(), logits.data(), out.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                     dev.stream()));
    ITERA_CUDA_CHECK(cudaStreamSynchronize(dev.stream()));
    return out;
  }

  cudaGraphExec_t capture(std::int64_t rows) {
    if (auto it = graphs.find(rows); it != graphs.end()) return it->second;
    // Plans first (for the products cuBLASLt runs), their algorithms by product_trial: the capture
    // then records launches only. A product: its weights (every layer's member, or the LM head),
    // what it reads and where it writes; those that add into x (o_proj, down) come last: where they
    // run in parts, their trial times each candidate with the add, the next norm and the product
    // after them (pair_trial). The trials write the step's scratch, x and the logits, which a step
    // writes before it reads them.
    struct product {
      const char* name;
      std::uint64_t layer_offsets::*w;  // nullptr: the LM head
      std::uint64_t layer_offsets::*scales;
      std::int64_t m, kk;
      bool fp32;
      const void* in;
      void* out;
      bool adds;
    };
    const product products[] = {
        {"qkv", &layer_offsets::wqkv, &layer_offsets::sqkv, qkv_width, c.hidden, false, h.data(), qkv.data(), false},
        {"gate_up", &layer_offsets::wgu, &layer_offsets::sgu, 2 * c.intermediate, c.hidden, false, h.data(), gate_up.data(), false},
        {"lm_head", nullptr, nullptr, c.vocab, c.hidden, true, h.data(), logits.data(), false},
        {"o_proj", &layer_offsets::wo, &layer_offsets::so, c.hidden, c.q_dim(), true, attn.data(), x.data(), true},
        {"down", &layer_offsets::wdown, &layer_offsets::sdown, c.hidden, c.intermediate, true, act.data(), x.data(), true}};
    const auto& l0 = layer_off.front();
    const layer_route way = route(rows, false);  // as forward() runs a decode
    for (const product& pr : products) {
      const matrix w = pr.w ? projection(l0.*pr.w, l0.*pr.scales) : lm_head();
      if (small(rows, pr.kk, w, pr.in) || (way.fused_gate_up && pr.w == &layer_offsets::wgu)) continue;
      prepare_plans(pr.m, rows, pr.kk, pr.fp32, w);
      const bool down = pr.w == &layer_offsets::wdown;
      const int parts = down ? way.down_parts : pr.w == &layer_offsets::wo ? way.o_parts : 1;
      if (parts > 1) {
        if (!split_trial_on) continue;
        // With the fused gate/up after o_proj, pair_trial runs that kernel after each candidate
        // (H200, batch 64: docs/perf/2026-12-02-attention-edges.md, run 1).
        const bool next_by_cublas = down ? !small(rows, c.hidden, matrix_16bit(l0.wqkv), h.data())
                                         : !way.fused_gate_up && !small(rows, c.hidden, matrix_16bit(l0.wgu), h.data());
        if (half)
          pair_trial<fp16>(pr.name, rows, parts, pr.w, pr.kk, static_cast<const fp16*>(pr.in), next_by_cublas);
        else
          pair_trial<bf16>(pr.name, rows, parts, pr.w, pr.kk, static_cast<const bf16*>(pr.in), next_by_cublas);
        continue;
      }
      if (!product_trial_on || (w.scales && !fp8_mma)) continue;  // (dequantised: a plan per slice)
      // As gemm() runs them: fp8 products on the quantised activations, those that add into x with
      // their sums apart (beta 0); 16-bit ones that add into x with beta 1.
      const double bytes = static_cast<double>(pr.m * pr.kk) * (w.scales ? 1.0 : 2.0);
      const std::size_t count = pr.w ? trial_layers(bytes) : 1;
      gemm_plan& p = plan_for(pr.m, rows, pr.kk, pr.fp32, w.scales != nullptr);
      const void* in = w.scales ? act_codes.data() : pr.in;
      void* out = pr.adds && w.scales ? sums_scratch(rows, pr.m) : pr.out;
      const float beta = pr.adds && !w.scales ? 1.0f : 0.0f;
      const auto weight = [&](std::size_t l) { return pr.w ? projection(layer_off[l].*pr.w, layer_off[l].*pr.scales).w : w.w; };
      product_trial(pr.name, p, [&](const cublasLtMatmulAlgo_t& algo) {
        for (std::size_t l = 0; l < count; ++l) matmul(p, algo, 1.0f, weight(l), in, beta, out);
      });
    }
    // The fused norm's grid size (and the fp8 products' on tensor cores), asked here rather than
    // under capture.
    if (half)
      k::prepare_gemv_rms_norm<fp16>(rows, c.hidden);
    else
      k::prepare_gemv_rms_norm<bf16>(rows, c.hidden);
    if (fp8)
      for (const std::int64_t in : {c.hidden, c.q_dim(), c.intermediate}) {
        if (half)
          k::prepare_gemv_fp8<fp16>(rows, in);
        else
          k::prepare_gemv_fp8<bf16>(rows, in);
      }
    if (step_kernel && rows == 1) {
      if (half)
        upload_step_layers<fp16>();
      else
        upload_step_layers<bf16>();
    }
    const cudaGraphExec_t exec = cuda::capture_graph(dev.stream(), [&] { forward(0, rows, 1, false, false); });
    graphs.emplace(rows, exec);
    return exec;
  }

  void decode(std::int64_t rows) {
    check_room(rows, 1);
    dev.make_current();
    ITERA_CUDA_CHECK(cudaGraphLaunch(capture(rows), dev.stream()));
    advance_held(rows);
  }
};

namespace {

// Whether cuBLASLt offers fp8 products into both output types the engine uses on this device: the
// compute type (CUDA_R_16BF or CUDA_R_16F) and fp32. cuBLASLt lists e4m3 x e4m3 with bf16, fp16
// and fp32 outputs for sm_89 and later; asking is what settles it for this library and device.
bool query_fp8_products(cuda_backend& dev, cudaDataType_t out_16bit) {
  dev.make_current();
  // Both output types the engine uses, at a small representative shape.
  for (const cudaDataType_t d_type : {out_16bit, CUDA_R_32F}) {
    cublasLtMatmulDesc_t raw_op = nullptr;
    ITERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw_op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const matmul_desc op(raw_op);
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    ITERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
    ITERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
    constexpr std::int64_t m = 256, n = 64, kk = 256;
    const auto a = make_layout(CUDA_R_8F_E4M3, kk, m, kk);
    const auto b = make_layout(CUDA_R_8F_E4M3, kk, n, kk);
    const auto dl = make_layout(d_type, m, n, m);
    const matmul_preference pref = cuda::make_preference(dev.lt_workspace_size());
    cublasLtMatmulHeuristicResult_t result = {};
    int returned = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(dev.lt_handle(), op.get(), a.get(), b.get(), dl.get(),
                                                                 dl.get(), pref.get(), 1, &result, &returned);
    if (status != CUBLAS_STATUS_SUCCESS || returned == 0 || result.state != CUBLAS_STATUS_SUCCESS) return false;
  }
  return true;
}

}  // namespace

void override_split_residual(std::optional<bool> on) { split_residual_switch.override(on); }
void override_gate_up_norm(std::optional<bool> on) { gate_up_norm_switch.override(on); }
void override_split_trial(std::optional<bool> on) { split_trial_switch.override(on); }
void override_product_trial(std::optional<bool> on) { product_trial_switch.override(on); }

// Asked once per device and compute type: the engine, the memory plan and each quality engine ask it.
bool cuda_engine::fp8_products_available(backend& d, dtype compute) {
  if (const char* v = std::getenv("ITERA_LLM_FP8_PRODUCTS"); v && v[0] == '0') return false;
  if (compute != dtype::bf16 && compute != dtype::fp16)
    throw usage_error(cat("llm cuda engine: compute ", dtype_name(compute), ": choose bf16 or fp16"));
  cuda_backend& dev = cuda::as_cuda(d);
  static std::mutex known_mutex;
  static std::map<std::pair<int, dtype>, bool> known;
  const std::lock_guard lock(known_mutex);
  const auto key = std::make_pair(dev.device_index(), compute);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  const bool available = query_fp8_products(dev, compute == dtype::fp16 ? CUDA_R_16F : CUDA_R_16BF);
  known.emplace(key, available);
  return available;
}

cuda_engine::cuda_engine(backend& dev, const model_weights& weights, const engine_options& options)
    : m(std::make_unique<impl>(dev, weights.config, options)) {
  m->upload(weights);
}

cuda_engine::cuda_engine(backend& dev, const model_config& config, std::uint64_t seed, const engine_options& options)
    : m(std::make_unique<impl>(dev, config, options)) {
  m->generate(seed);
}

cuda_engine::~cuda_engine() = default;

const model_config& cuda_engine::config() const { return m->c; }
const engine_options& cuda_engine::options() const { return m->o; }
std::int64_t cuda_engine::slots() const { return m->o.batch; }
std::int64_t cuda_engine::max_context() const { return m->o.max_context; }
std::int64_t cuda_engine::max_prompt() const { return m->o.max_prompt; }

engine_memory cuda_engine::plan(backend& dev, const model_config& config, const engine_options& options) {
  (void)cuda::as_cuda(dev);
  memory_request r;
  r.config = config;
  r.weights = options.weights;
  r.activations = options.compute;
  r.kv = options.kv;
  r.batch = options.batch;
  r.context = options.max_context;
  r.prefill_tokens = options.max_prompt;
  r.prefill_batch = options.prefill_batch;
  r.workspace_bytes = cuda::as_cuda(dev).lt_workspace_size();
  r.fp8_products = options.weights == dtype::fp8_e4m3 && fp8_products_available(dev, options.compute);
  const memory_plan p = plan_memory(r);
  engine_memory e;
  // The arena's layout aligns each tensor to 256 bytes: a few hundred bytes over the plan's weights
  // for shapes whose tensors are not multiples of 256 bytes (the tiny preset).
  const impl layout(dev, config, options, false);
  e.weights = layout.arena_bytes;
  e.kv_cache = p.bytes_of("kv cache");
  e.activations = p.bytes_of("activations");
  // The plan holds the logits of each sequence's last row; all_position_logits holds every row's.
  e.activations += static_cast<std::uint64_t>(layout.logits_rows - layout.o.batch) *
                   static_cast<std::uint64_t>(config.vocab) * 4;
  e.workspace = p.bytes_of("workspace") + layout.step_bytes();
  return e;
}

std::uint64_t cuda_engine::step_kernel_bytes(backend& dev, const model_config& config, const engine_options& options) {
  if (options.batch != 1) return 0;
  cuda::as_cuda(dev).make_current();  // the kernel's refusal is this device's
  const k::decode_step_shape s = step_shape_for(config, options);
  return k::decode_step_refusal(s).empty() ? step_kernel_bytes_for(config, s) : 0;
}

void cuda_engine::offload() {
  if (!m->o.evictable) throw std::logic_error("cuda_engine::offload: the engine was not made with options.evictable");
  ITERA_CUDA_CHECK(cudaStreamSynchronize(m->dev.stream()));
  for (device_buffer* b : m->evictable_buffers()) b->evict();
}

void cuda_engine::restore() {
  if (!m->o.evictable) throw std::logic_error("cuda_engine::restore: the engine was not made with options.evictable");
  m->dev.make_current();
  try {
    for (device_buffer* b : m->evictable_buffers()) b->restore();
  } catch (const cuda::out_of_memory& e) {
    for (device_buffer* b : m->evictable_buffers()) b->evict();  // all or nothing
    throw case_skipped(cat("does not fit: restoring the language model: ", e.what()));
  }
}

bool cuda_engine::resident() const { return m->weights.resident(); }
void* cuda_engine::weights_device() const { return m->weights.data(); }
std::uint64_t cuda_engine::weights_bytes() const { return m->weights.bytes(); }

engine_memory cuda_engine::memory() const {
  engine_memory r;
  r.weights = m->weights.bytes();
  r.kv_cache = m->k_cache.bytes() + m->v_cache.bytes();
  for (const device_buffer* b : {&m->x, &m->h, &m->qkv, &m->attn, &m->gate_up, &m->act, &m->logits, &m->prompt_ids,
                                 &m->next, &m->lengths, &m->inv_freq, &m->dequantised, &m->act_codes, &m->act_scales,
                                 &m->input_rows, &m->input_host_values})
    r.activations += b->bytes();
  r.workspace = m->dev.lt_workspace_size() + m->step_layers.bytes() + m->step_workspace.bytes();
  return r;
}

std::string cuda_engine::precision_note() const {
  const std::string act(dtype_name(m->o.compute));
  // A 16-bit cache is named with the other 16-bit parts; an fp8 one has its own sentence.
  const char* parts = m->fp8_head ? (m->kv8 ? "embedding and norms" : "embedding, norms and KV cache")
                     : m->kv8      ? "embedding, LM head and norms"
                                   : "embedding, LM head, norms and KV cache";
  const char* quantised = m->fp8_head ? "fp8 e4m3 layer projections and LM head" : "fp8 e4m3 layer projections";
  m->dev.make_current();  // the attention kernel named below is the current device's
  // What every note ends with: the cache (when fp8) and the prefill attention's kernel.
  const std::string tail =
      (m->kv8 ? cat("; KV cache fp8 e4m3 (scale 1, saturating), K and V rounded from fp32 at the cache store; a ",
                    "prefill attends over its own ", act, " K and V, decode steps read the fp8 cache, widened in the ",
                    "attention kernel (to fp32 on CUDA cores, to ", act, " for tensor cores)")
              : std::string()) +
      cat("; prefill attention on tensor cores: ",
          k::prefill_attention_supported(m->shape)
              ? kernels::attention_kernel_name(kernels::attention_kernel_for(m->c.head_dim))
              : "none (the general kernel on CUDA cores)") +
      (m->step_kernel ? "; each decode step's layers in one persistent kernel (decode_step: the per-layer kernels' "
                        "roundings, products and attention summed in other orders)"
                      : "");
  // 16-bit values stored in the other type than the compute type: what the conversion at load did.
  const auto converted = [&](dtype from) -> std::string {
    if (from == m->o.compute) return {};
    return from == dtype::fp16 ? " (fp16 values converted to bf16 at load, rounded to nearest even: 3 of fp16's 10 "
                                 "fraction bits dropped)"
                               : " (bf16 values converted to fp16 at load: exact from 2^-14 to 65504, smaller ones "
                                 "fp16 subnormals, below 2^-25 zero)";
  };
  const std::string activations = cat("; ", act, " activations between kernels, fp32 residual stream");
  // The gemv's fp8 products (llm_kernels.cuh: gemv_fp8_on_tensor_cores), at one row for the three
  // input widths a layer's products read.
  bool gemv_mma = m->fp8;
  for (const std::int64_t in : {m->c.hidden, m->c.q_dim(), m->c.intermediate})
    gemv_mma = gemv_mma && k::gemv_fp8_on_tensor_cores(1, in);
  const std::string gemv =
      gemv_mma ? cat(" rows the own gemv kernel runs on tensor cores (each code pair converted exactly to an fp16 ",
                     "pair, the ", act, " activations converted to fp16: exact from 2^-14 to 65504, saturated beyond; ",
                     "fp32 products and accumulation, the scale applied to the sum; it widens the codes to fp32 in ",
                     "registers instead where tokens x input width exceed a block's shared memory)")
               : " rows the own gemv kernel widens the fp8 codes in registers (fp32 accumulation, scale applied to "
                 "the sum)";
  if (m->fp8 && m->fp8_mma)
    return cat(quantised, " with one fp32 scale per output channel (quantised from bf16), ", act, " ",
               parts, converted(dtype::bf16), activations, "; at or below ", impl::fp8_gemv_rows(), gemv,
               "; above, fp8 tensor-core products in cuBLASLt on the codes (fp32 accumulation), the activations ",
               "quantised to e4m3 with one scale per token, the weight-row and token scales applied to the sums after (",
               act, " outputs rounded twice: the sum, then the scaled value",
               m->half ? "; the fp16 sums scaled down by a power of two in the product's alpha so that they fit fp16, "
                         "exactly undone before the scales"
                       : "",
               ")", tail);
  if (m->fp8)
    return cat(quantised, " with one fp32 scale per output channel (quantised from bf16), ", act, " ",
               parts, converted(dtype::bf16), activations, "; at or below ", impl::fp8_gemv_rows(), gemv,
               "; above, each projection is dequantised to a ", act, " scratch (code x scale rounded to ", act,
               ") and multiplied in cuBLASLt ", act, " (fp32 accumulation): cuBLASLt offers no fp8 products into ", act,
               " on this device (or ITERA_LLM_FP8_PRODUCTS=0)", tail);
  const std::string weights(dtype_name(m->o.weights));
  // The fused products, where this model's shape takes them.
  const bool fused_gate_up = k::gate_up_swiglu_supported(impl::fused_gate_up_rows(), m->c.intermediate, m->c.hidden);
  const bool fused_qkv = k::qkv_rope_store_supported(impl::fused_qkv_rows(), m->c.hidden, m->shape);
  const auto fused = [&](bool on, std::int64_t from, const char* where, const char* what) {
    return on ? cat("; from ", from, " rows", where, " ", what, " in one kernel of our own (wgmma, fp32 ",
                    "accumulation, the product rounded to ", act, " before the rest, as between the unfused kernels)")
              : std::string();
  };
  return cat(weights, " weights", converted(m->o.weights), m->kv8 ? "" : cat(" and ", act, " KV cache"), activations,
             "; cuBLASLt ", act, " tensor-core products (fp32 accumulation) above ", k::gemv_max_tokens,
             " rows, the own gemv kernel (fp32 accumulation) at or below",
             fused(fused_qkv, impl::fused_qkv_rows(), " in a prefill", "the qkv product, bias, RoPE and cache store"),
             fused(fused_gate_up, impl::fused_gate_up_rows(), "", "the gate/up product and SwiGLU"), tail);
}

void cuda_engine::stage_prompts(std::span<const std::int32_t> ids) { m->stage_ids(ids); }

void cuda_engine::stage_embeddings(const embedding_rows& rows) { m->stage_inputs(rows); }

void cuda_engine::prefill_staged(std::int64_t first, std::int64_t count, std::int64_t prompt_len) {
  m->prefill_range(first, count, prompt_len, false);
  m->last_prefill_count = count;
}

void cuda_engine::decode(std::int64_t rows) {
  m->decode(rows);
  m->last_prefill_count = 0;  // the logits are the step's now
}

void cuda_engine::prepare_decode(std::int64_t rows) {
  if (rows < 1 || rows > m->o.batch)
    throw usage_error(cat("llm cuda engine: prepare_decode(", rows, ") outside 1..", m->o.batch));
  if (!resident())
    throw std::logic_error("llm cuda engine: prepare_decode on an offloaded engine (restore() and write the weights back first)");
  m->dev.make_current();
  (void)m->capture(rows);
  m->last_prefill_count = 0;  // the trials wrote the logits
}

void cuda_engine::release(std::int64_t slot) {
  if (slot < 0 || slot >= m->o.batch)
    throw usage_error(cat("llm cuda engine: slot ", slot, " outside 0..", m->o.batch - 1));
  m->busy[static_cast<std::size_t>(slot)] = false;
  m->held[static_cast<std::size_t>(slot)] = 0;
}

std::int64_t cuda_engine::length(std::int64_t slot) const { return m->held.at(static_cast<std::size_t>(slot)); }

void cuda_engine::record_ids(std::int64_t rows) {
  if (rows < 1 || rows > m->o.batch)
    throw usage_error(cat("llm cuda engine: record ", rows, " ids; the engine holds 1..", m->o.batch));
  const auto index = static_cast<std::int64_t>(m->recorded_rows.size());
  if (index > m->o.max_context)
    throw std::logic_error("llm cuda engine: more rows recorded than max_context + 1 between takes");
  ITERA_CUDA_CHECK(cudaMemcpyAsync(m->host_ids + index * m->o.batch, m->next.data(),
                                   static_cast<std::size_t>(rows) * sizeof(std::int32_t), cudaMemcpyDeviceToHost,
                                   m->dev.stream()));
  m->recorded_rows.push_back(rows);
}

std::vector<std::vector<std::int32_t>> cuda_engine::take_recorded() {
  synchronize();
  std::vector<std::vector<std::int32_t>> out;
  out.reserve(m->recorded_rows.size());
  for (std::size_t i = 0; i < m->recorded_rows.size(); ++i) {
    const std::int32_t* row = m->host_ids + static_cast<std::int64_t>(i) * m->o.batch;
    out.emplace_back(row, row + m->recorded_rows[i]);
  }
  m->recorded_rows.clear();
  return out;
}

std::vector<float> cuda_engine::prefill(std::span<const std::int32_t> ids, std::int64_t prompt, bool all_positions,
                                        stage_recorder* recorder) {
  const engine_options& o = m->o;
  if (all_positions && !o.all_position_logits)
    throw std::logic_error("llm cuda engine: all-position logits need engine_options::all_position_logits");
  if (prompt < 1 || static_cast<std::int64_t>(ids.size()) != o.batch * prompt)
    throw usage_error(cat("llm cuda engine: ", ids.size(), " prompt ids for ", o.batch, " sequences of ", prompt));
  m->stage_ids(ids);
  m->prefill_range(0, o.batch, prompt, all_positions, recorder);
  return m->read_logits(all_positions ? o.batch * prompt : o.batch);
}

std::vector<float> cuda_engine::read_prefill_logits(std::int64_t count) {
  if (count != m->last_prefill_count)
    throw usage_error(cat("llm cuda engine: logits of ", count, " sequences asked; the last prefill_staged ran ",
                          m->last_prefill_count, " (ask for those, after that prefill)"));
  return m->read_logits(count);
}

std::vector<float> cuda_engine::decode_step(std::span<const std::int32_t> ids) {
  if (static_cast<std::int64_t>(ids.size()) != m->o.batch)
    throw usage_error(cat("llm cuda engine: ", ids.size(), " ids for a batch of ", m->o.batch));
  m->check_ids(ids);
  m->check_room(m->o.batch, 1);
  m->dev.make_current();
  ITERA_CUDA_CHECK(cudaMemcpyAsync(m->next.data(), ids.data(), ids.size_bytes(), cudaMemcpyHostToDevice, m->dev.stream()));
  m->forward(0, m->o.batch, 1, false, false);
  m->advance_held(m->o.batch);
  return m->read_logits(m->o.batch);
}

void cuda_engine::decode_device(stage_recorder* recorder) {
  m->check_room(m->o.batch, 1);
  m->dev.make_current();
  m->forward(0, m->o.batch, 1, false, false, recorder);
  m->advance_held(m->o.batch);
}

void cuda_engine::decode_graph() { m->decode(m->o.batch); }

std::int64_t cuda_engine::graphs_captured() const { return static_cast<std::int64_t>(m->graphs.size()); }

double cuda_engine::time_decode_ms(int steps, bool use_graph) {
  if (steps < 1) throw usage_error("llm cuda engine: time at least one step");
  m->check_room(m->o.batch, steps);
  if (use_graph) (void)m->capture(m->o.batch);
  const cudaStream_t s = m->dev.stream();
  cudaEvent_t start = nullptr, stop = nullptr;
  ITERA_CUDA_CHECK(cudaEventCreate(&start));
  ITERA_CUDA_CHECK(cudaEventCreate(&stop));
  float ms = 0;
  try {
    ITERA_CUDA_CHECK(cudaEventRecord(start, s));
    for (int i = 0; i < steps; ++i) use_graph ? decode_graph() : decode_device();
    ITERA_CUDA_CHECK(cudaEventRecord(stop, s));
    ITERA_CUDA_CHECK(cudaEventSynchronize(stop));
    ITERA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  } catch (...) {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
    throw;
  }
  ITERA_CUDA_CHECK(cudaEventDestroy(start));
  ITERA_CUDA_CHECK(cudaEventDestroy(stop));
  return static_cast<double>(ms) / steps;
}

std::vector<std::int32_t> cuda_engine::read_ids() {
  std::vector<std::int32_t> out(static_cast<std::size_t>(m->o.batch));
  ITERA_CUDA_CHECK(cudaMemcpyAsync(out.data(), m->next.data(), out.size() * sizeof(std::int32_t),
                                   cudaMemcpyDeviceToHost, m->dev.stream()));
  ITERA_CUDA_CHECK(cudaStreamSynchronize(m->dev.stream()));
  return out;
}

void cuda_engine::synchronize() { ITERA_CUDA_CHECK(cudaStreamSynchronize(m->dev.stream())); }

namespace {

// f(A{}) for the 16-bit type `compute` names (bf16 or fp16): the test helpers below run the
// kernels' instance of that type.
template <class F>
auto with_compute(dtype compute, const char* who, F&& f) {
  if (compute == dtype::bf16) return f(bf16{});
  if (compute == dtype::fp16) return f(fp16{});
  throw usage_error(cat(who, ": compute ", dtype_name(compute), ": choose bf16 or fp16"));
}

}  // namespace

std::vector<float> small_gemm(backend& d, std::span<const std::uint16_t> w, std::int64_t out_rows, std::int64_t in,
                              std::span<const std::uint16_t> x, std::int64_t tokens, bool fp32_out,
                              std::span<const float> out_init, dtype compute) {
  cuda_backend& dev = cuda::as_cuda(d);
  const auto out_count = static_cast<std::size_t>(out_rows * tokens);
  if (static_cast<std::int64_t>(w.size()) != out_rows * in || static_cast<std::int64_t>(x.size()) != tokens * in)
    throw usage_error(cat("llm small_gemm: ", w.size(), " weights and ", x.size(), " inputs for ", out_rows, " x ", in,
                          " and ", tokens, " tokens"));
  if (!out_init.empty() && (!fp32_out || out_init.size() != out_count))
    throw usage_error("llm small_gemm: an initial output needs fp32 output of the full size");
  dev.make_current();
  const cudaStream_t s = dev.stream();
  device_buffer dw = dev.allocate(w.size_bytes()), dx = dev.allocate(x.size_bytes());
  device_buffer dout = dev.allocate(out_count * (fp32_out ? 4 : 2));
  ITERA_CUDA_CHECK(cudaMemcpyAsync(dw.data(), w.data(), w.size_bytes(), cudaMemcpyHostToDevice, s));
  ITERA_CUDA_CHECK(cudaMemcpyAsync(dx.data(), x.data(), x.size_bytes(), cudaMemcpyHostToDevice, s));
  if (out_init.empty())
    ITERA_CUDA_CHECK(cudaMemsetAsync(dout.data(), 0xff, dout.bytes(), s));  // NaN in fp32, bf16 and fp16
  else
    ITERA_CUDA_CHECK(cudaMemcpyAsync(dout.data(), out_init.data(), out_init.size_bytes(), cudaMemcpyHostToDevice, s));
  with_compute(compute, "llm small_gemm", [&](auto a) {
    using A = decltype(a);
    k::gemv(dw.as<A>(), out_rows, in, dx.as<A>(), tokens, dout.data(), fp32_out, out_init.empty() ? 0.0f : 1.0f, s);
  });
  std::vector<float> out(out_count);
  if (fp32_out) {
    ITERA_CUDA_CHECK(cudaMemcpyAsync(out.data(), dout.data(), dout.bytes(), cudaMemcpyDeviceToHost, s));
    ITERA_CUDA_CHECK(cudaStreamSynchronize(s));
  } else {
    std::vector<std::uint16_t> bits(out_count);
    ITERA_CUDA_CHECK(cudaMemcpyAsync(bits.data(), dout.data(), dout.bytes(), cudaMemcpyDeviceToHost, s));
    ITERA_CUDA_CHECK(cudaStreamSynchronize(s));
    for (std::size_t i = 0; i < out_count; ++i) out[i] = from_16bit(compute, bits[i]);
  }
  return out;
}

namespace {

// A small_weights on the device, checked against its shape.
struct device_weights {
  device_buffer w, scales;
  bool fp8() const { return scales.bytes() > 0; }
};

device_weights upload_weights(cuda_backend& dev, const small_weights& w, std::int64_t out_rows, std::int64_t in,
                              const char* who) {
  const auto elements = static_cast<std::size_t>(out_rows * in);
  device_weights d;
  const cudaStream_t s = dev.stream();
  if (!w.bits16.empty()) {
    if (w.bits16.size() != elements || !w.fp8_codes.empty())
      throw usage_error(cat(who, ": ", w.bits16.size(), " 16-bit weights for ", out_rows, " x ", in,
                            " (give 16-bit weights or fp8 codes with scales, not both)"));
    d.w = dev.allocate(w.bits16.size_bytes());
    ITERA_CUDA_CHECK(cudaMemcpyAsync(d.w.data(), w.bits16.data(), w.bits16.size_bytes(), cudaMemcpyHostToDevice, s));
    return d;
  }
  if (w.fp8_codes.size() != elements || w.fp8_scales.size() != static_cast<std::size_t>(out_rows))
    throw usage_error(cat(who, ": ", w.fp8_codes.size(), " fp8 codes and ", w.fp8_scales.size(), " scales for ",
                          out_rows, " x ", in, " (one scale per row)"));
  d.w = dev.allocate(w.fp8_codes.size_bytes());
  d.scales = dev.allocate(w.fp8_scales.size_bytes());
  ITERA_CUDA_CHECK(cudaMemcpyAsync(d.w.data(), w.fp8_codes.data(), w.fp8_codes.size_bytes(), cudaMemcpyHostToDevice, s));
  ITERA_CUDA_CHECK(
      cudaMemcpyAsync(d.scales.data(), w.fp8_scales.data(), w.fp8_scales.size_bytes(), cudaMemcpyHostToDevice, s));
  return d;
}

// The product the engine's gemm() runs at these rows: the gemv, 16-bit (A) or fp8.
template <class A>
void run_gemv(const device_weights& w, std::int64_t out_rows, std::int64_t in, const A* x, std::int64_t tokens,
              void* out, bool fp32_out, float beta, cudaStream_t s) {
  if (w.fp8())
    k::gemv_fp8(w.w.as<std::uint8_t>(), w.scales.as<float>(), out_rows, in, x, tokens, out, fp32_out, beta, s);
  else
    k::gemv(w.w.as<A>(), out_rows, in, x, tokens, out, fp32_out, beta, s);
}

// The output buffer of a small product, reset before each run (NaN, or the initial values), and
// read back widened to fp32 (16-bit output: of `compute`).
struct small_output {
  cuda_backend& dev;
  device_buffer buffer;
  std::span<const float> init;
  bool fp32 = true;
  dtype compute = dtype::bf16;
  std::size_t count = 0;

  small_output(cuda_backend& d, std::size_t n, bool fp32_out, std::span<const float> out_init, dtype type,
               const char* who)
      : dev(d), buffer(d.allocate(n * (fp32_out ? 4 : 2))), init(out_init), fp32(fp32_out), compute(type), count(n) {
    if (!init.empty() && (!fp32 || init.size() != count))
      throw usage_error(cat(who, ": an initial output needs fp32 output of the full size"));
  }
  float beta() const { return init.empty() ? 0.0f : 1.0f; }
  void reset() {
    if (init.empty())
      ITERA_CUDA_CHECK(cudaMemsetAsync(buffer.data(), 0xff, buffer.bytes(), dev.stream()));  // NaN in every type
    else
      ITERA_CUDA_CHECK(cudaMemcpyAsync(buffer.data(), init.data(), init.size_bytes(), cudaMemcpyHostToDevice,
                                       dev.stream()));
  }
  std::vector<float> read() {
    std::vector<float> out(count);
    if (fp32) {
      ITERA_CUDA_CHECK(cudaMemcpyAsync(out.data(), buffer.data(), buffer.bytes(), cudaMemcpyDeviceToHost, dev.stream()));
      ITERA_CUDA_CHECK(cudaStreamSynchronize(dev.stream()));
      return out;
    }
    std::vector<std::uint16_t> bits(count);
    ITERA_CUDA_CHECK(cudaMemcpyAsync(bits.data(), buffer.data(), buffer.bytes(), cudaMemcpyDeviceToHost, dev.stream()));
    ITERA_CUDA_CHECK(cudaStreamSynchronize(dev.stream()));
    for (std::size_t i = 0; i < count; ++i) out[i] = from_16bit(compute, bits[i]);
    return out;
  }
};

void check_tokens(std::int64_t tokens, const char* who) {
  if (tokens < 1 || tokens > k::gemv_max_tokens)
    throw usage_error(cat(who, ": ", tokens, " tokens; the gemv takes 1..", k::gemv_max_tokens));
}

}  // namespace

fused_product_check small_gemm_rms_norm(backend& d, const small_weights& w, std::int64_t out_rows, std::int64_t in,
                                        std::span<const float> x, std::int64_t in_stride, std::int64_t in_offset,
                                        std::span<const std::uint16_t> norm_weight, float eps, std::int64_t tokens,
                                        bool fp32_out, std::span<const float> out_init, dtype compute) {
  constexpr const char* who = "llm small_gemm_rms_norm";
  cuda_backend& dev = cuda::as_cuda(d);
  check_tokens(tokens, who);
  if (in_stride < 1 || in_offset < 0 ||
      static_cast<std::int64_t>(x.size()) < ((tokens - 1) * in_stride + in_offset + 1) * in)
    throw usage_error(cat(who, ": ", x.size(), " inputs hold no ", tokens, " rows of ", in, " at stride ", in_stride,
                          " and offset ", in_offset));
  if (static_cast<std::int64_t>(norm_weight.size()) != in)
    throw usage_error(cat(who, ": ", norm_weight.size(), " norm weights for rows of ", in));
  dev.make_current();
  const cudaStream_t s = dev.stream();
  const device_weights dw = upload_weights(dev, w, out_rows, in, who);
  device_buffer dx = dev.allocate(x.size_bytes()), dnorm = dev.allocate(norm_weight.size_bytes());
  device_buffer dh = dev.allocate(static_cast<std::uint64_t>(tokens * in) * 2);
  ITERA_CUDA_CHECK(cudaMemcpyAsync(dx.data(), x.data(), x.size_bytes(), cudaMemcpyHostToDevice, s));
  ITERA_CUDA_CHECK(cudaMemcpyAsync(dnorm.data(), norm_weight.data(), norm_weight.size_bytes(), cudaMemcpyHostToDevice, s));
  small_output out(dev, static_cast<std::size_t>(out_rows * tokens), fp32_out, out_init, compute, who);
  return with_compute(compute, who, [&](auto a) {
    using A = decltype(a);
    const auto unfused = [&] {
      out.reset();
      k::rms_norm(dx.as<float>(), in_stride, in_offset, dnorm.as<A>(), dh.as<A>(), tokens, in, eps, s);
      run_gemv(dw, out_rows, in, dh.as<A>(), tokens, out.buffer.data(), fp32_out, out.beta(), s);
      return out.read();
    };
    fused_product_check r;
    r.unfused = unfused();
    r.fused_kernel = k::gemv_rms_norm_supported(tokens, in, dw.w.data(), dx.as<float>(), dnorm.data(), dw.fp8());
    if (!r.fused_kernel) {
      r.fused = unfused();
      return r;
    }
    out.reset();
    k::gemv_rms_norm(dw.w.data(), dw.fp8() ? dw.scales.as<float>() : nullptr, out_rows, in, dx.as<float>(), in_stride,
                     in_offset, dnorm.as<A>(), eps, tokens, out.buffer.data(), fp32_out, out.beta(), s);
    r.fused = out.read();
    return r;
  });
}

fused_product_check small_gemm_swiglu(backend& d, const small_weights& w, std::int64_t out_rows,
                                      std::int64_t intermediate, std::span<const std::uint16_t> gate_up,
                                      std::int64_t tokens, bool fp32_out, std::span<const float> out_init,
                                      dtype compute) {
  constexpr const char* who = "llm small_gemm_swiglu";
  cuda_backend& dev = cuda::as_cuda(d);
  check_tokens(tokens, who);
  if (static_cast<std::int64_t>(gate_up.size()) != tokens * 2 * intermediate)
    throw usage_error(cat(who, ": ", gate_up.size(), " gate/up values for ", tokens, " tokens of 2 x ", intermediate));
  dev.make_current();
  const cudaStream_t s = dev.stream();
  const device_weights dw = upload_weights(dev, w, out_rows, intermediate, who);
  device_buffer dgu = dev.allocate(gate_up.size_bytes());
  device_buffer dact = dev.allocate(static_cast<std::uint64_t>(tokens * intermediate) * 2);
  ITERA_CUDA_CHECK(cudaMemcpyAsync(dgu.data(), gate_up.data(), gate_up.size_bytes(), cudaMemcpyHostToDevice, s));
  small_output out(dev, static_cast<std::size_t>(out_rows * tokens), fp32_out, out_init, compute, who);
  return with_compute(compute, who, [&](auto a) {
    using A = decltype(a);
    const auto unfused = [&] {
      out.reset();
      k::swiglu(dgu.as<A>(), dact.as<A>(), tokens, intermediate, s);
      run_gemv(dw, out_rows, intermediate, dact.as<A>(), tokens, out.buffer.data(), fp32_out, out.beta(), s);
      return out.read();
    };
    fused_product_check r;
    r.unfused = unfused();
    r.fused_kernel = k::gemv_swiglu_supported(tokens, intermediate, dw.w.data(), dgu.data(), dw.fp8());
    if (!r.fused_kernel) {
      r.fused = unfused();
      return r;
    }
    out.reset();
    k::gemv_swiglu(dw.w.data(), dw.fp8() ? dw.scales.as<float>() : nullptr, out_rows, intermediate, dgu.as<A>(),
                   tokens, out.buffer.data(), fp32_out, out.beta(), s);
    r.fused = out.read();
    return r;
  });
}

}  // namespace itera::llm
