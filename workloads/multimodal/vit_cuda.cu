// The vision encoder and projector on the cuda backend (workloads/multimodal/vit_gpu.hpp).
//
// Weights: one device arena, each tensor at a 256-byte aligned offset (cuBLASLt's default
// alignment assumption), bf16, linear weights [out][in] as in checkpoints; q, k and v of a layer
// fused at upload into one [3D][D] matrix and one [3D] bias (fuse_qkv's order), the patch weight
// flattened [D][C*P*P].
//
// Every GEMM but a fused fc1 (src/kernels/vit_gemm.cuh, below) runs in cuBLASLt's TN form, as the
// llm engine's: A = W stored K x M column-major (its [out][in] rows) used transposed, B =
// activations [rows][K] (K x rows column-major), D = [rows][M] (M x rows column-major); bf16
// inputs, fp32 compute; the bias in the epilogue where it is the last operation before the one
// rounding; out and fc2 with beta = 1 and C = D = the residual.
//
// Activations, for the image count the engine was sized for (R = images x T rows):
//   in [images G*G][C*P*P]   x, h, attn [R][D]   qkv [R][3D]   f [R][MLP]
//   sums: fp32 scratch for the patch GEMM, fc1 (not when fused) and the projector's fc1, also
//         where candidate algorithms write while they are timed
//   selected [images T'][D] (the projector's rows when the class token is left out), g and
//   tokens [images T'][llm_hidden]
#include "workloads/multimodal/vit_gpu.hpp"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <utility>

#include "itera/core/errors.hpp"
#include "itera/core/recorder.hpp"
#include "itera/cuda/check.hpp"
#include "itera/cuda/cuda_backend.hpp"
#include "src/cuda/cublaslt_util.hpp"
#include "src/cuda/cuda_backend_impl.hpp"
#include "src/cuda/graph_capture.hpp"
#include "src/cuda/text.hpp"
#include "src/kernels/attention_choice.hpp"
#include "src/kernels/launch.cuh"
#include "src/kernels/vit_gemm.cuh"
#include "src/kernels/vit_kernels.cuh"
#include "workloads/gemm/numeric.hpp"

namespace itera::mm {
namespace {

namespace k = itera::kernels::vit;
using bf16 = __nv_bfloat16;
using cuda::cat;
using cuda::cuda_backend;
using cuda::device_buffer;
using cuda::make_layout;
using cuda::matmul_desc;
using cuda::matmul_preference;
using cuda::matrix_layout;

constexpr std::uint64_t arena_alignment = 256;
std::uint64_t align_up(std::uint64_t v) { return (v + arena_alignment - 1) / arena_alignment * arena_alignment; }

using algorithm = cuda::lt_algorithm;

// The GEMMs of the model; every layer shares its kind's plan.
enum class gemm_id { patch, qkv, out, fc1, fc2, projector_fc1, projector_fc2 };
const char* gemm_name(gemm_id g) {
  switch (g) {
    case gemm_id::patch: return "patch_embed";
    case gemm_id::qkv: return "qkv";
    case gemm_id::out: return "out";
    case gemm_id::fc1: return "fc1";
    case gemm_id::fc2: return "fc2";
    case gemm_id::projector_fc1: return "projector.fc1";
    case gemm_id::projector_fc2: return "projector.fc2";
  }
  return "?";
}

enum class epilogue { none, bias, gelu_bias };

// out[rows][m] = in[rows][kk] W^T (+ bias, GELU) (+ beta * out).
struct gemm_shape {
  std::int64_t m = 0, rows = 0, kk = 0;
  bool fp32_out = false;
  epilogue ep = epilogue::none;
  float beta = 0.0f;
};

struct gemm_plan {
  gemm_shape shape;
  matmul_desc op;
  matrix_layout a, b, d;
  algorithm chosen{};
  std::string choice;  // how it was chosen, for the record
};

// Offsets of one layer's tensors in the arena.
struct layer_offsets {
  std::uint64_t wqkv = 0, bqkv = 0, wo = 0, bo = 0, n1w = 0, n1b = 0, n2w = 0, n2b = 0, w1 = 0, b1 = 0, w2 = 0, b2 = 0;
};

// A recorder scope when there is a recorder, nothing otherwise.
struct scope {
  std::optional<stage_recorder::scope> s;
  scope(stage_recorder* rec, std::string_view name) {
    if (rec) s.emplace(rec->enter(name));
  }
};

k::activation kernel_activation(vit_activation a) {
  switch (a) {
    case vit_activation::quick_gelu: return k::activation::quick_gelu;
    case vit_activation::gelu: return k::activation::gelu;
    case vit_activation::gelu_tanh: return k::activation::gelu_tanh;
  }
  throw std::logic_error("vit cuda engine: activation without a kernel");
}

// cuBLASLt's algorithms assume 256-byte aligned operands unless told otherwise.
bool lt_aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 256 == 0; }

std::vector<std::uint16_t> to_bf16_bits(std::span<const float> v) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = gemm::numeric::float_to_bf16(v[i]);
  return out;
}

std::vector<float> widen(const std::vector<std::uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = gemm::numeric::bf16_to_float(bits[i]);
  return out;
}

}  // namespace

struct gpu_vit::impl {
  cuda_backend& dev;
  vit_config c;
  vit_engine_options o;
  std::int64_t T = 0, D = 0, M = 0, Np = 0, K = 0, H = 0, Tp = 0;
  bool fc1_epilogue = false;  // gelu_tanh in cuBLASLt's epilogue
  bool fc1_fused = false;     // fc1 + bias + activation in k::gemm_bias_activation
  float attention_scale = 0;

  // Stages, for the recorder: vit_stages() and, per stage, its two paths.
  std::vector<vit_stage> stages;
  std::vector<std::string> kind_names;  // the scope name of each stage under kinds (no parent)
  int idx_patch = -1, idx_pre = -1, idx_post = -1, idx_p1 = -1, idx_p2 = -1;
  std::vector<std::array<int, 7>> idx_layer;  // norm1 qkv attention out norm2 fc1 fc2

  std::uint64_t arena_bytes = 0;
  std::uint64_t off_patch_w = 0, off_patch_b = 0, off_class = 0, off_position = 0, off_pre_w = 0, off_pre_b = 0,
                off_post_w = 0, off_post_b = 0, off_p1w = 0, off_p1b = 0, off_p2w = 0, off_p2b = 0;
  std::vector<layer_offsets> layer_off;
  device_buffer weights;
  device_buffer in, x, h, qkv, attn, sums, f, selected, g, tokens;
  std::int64_t features_images = 0, tokens_images = 0;  // images of the last encode and project

  std::map<std::pair<std::int64_t, gemm_id>, gemm_plan> plans;
  cudaGraphExec_t graph = nullptr;

  // The layout and sizes of `config`'s engine; with `allocate`, its buffers too (evictable ones
  // with options.evictable), zeroed.
  impl(backend& d, const vit_config& config, const vit_engine_options& options, bool allocate)
      : dev(cuda::as_cuda(d)), c(config), o(options) {
    validate(c);
    if (o.max_images < 1) throw usage_error(cat("vision encoder cuda engine: max_images ", o.max_images, " must be at least 1"));
    if (c.head_dim() > k::attention_max_head_dim)
      throw usage_error(cat("vision encoder cuda engine: head_dim ", c.head_dim(), " exceeds ",
                            k::attention_max_head_dim, " (more heads, or a smaller hidden size)"));
    if (o.max_images > 65535)
      throw usage_error(cat("vision encoder cuda engine: ", o.max_images, " images per call exceed 65535"));
    T = c.tokens();
    D = c.hidden;
    M = c.mlp;
    Np = c.patches();
    K = c.patch_dim();
    H = c.llm_hidden;
    Tp = c.projector_tokens();
    fc1_epilogue = c.activation == vit_activation::gelu_tanh && o.gelu_tanh_epilogue;
    // The arena's 256-byte offsets align every weight and activation buffer for the kernel; whether
    // it runs is the engine's device's question.
    dev.make_current();
    fc1_fused = !fc1_epilogue && o.fused_fc1 && kernels::env_switch("ITERA_VIT_FUSED_FC1", true) &&
                k::gemm_bias_activation_supported(o.max_images * T, M, D);
    attention_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim())));
    index_stages();
    plan_arena();
    if (!allocate) return;
    dev.make_current();
    const auto sizes = activation_sizes();
    // The projector's output stays mapped when the engine is offloaded: the language model's
    // prefill reads it after the encoder has given its memory back.
    const auto get = [&](std::uint64_t bytes, bool keep) {
      if (bytes == 0) return device_buffer();
      return o.evictable && !keep ? dev.allocate_evictable(bytes) : dev.allocate(bytes);
    };
    try {
      weights = get(arena_bytes, false);
      std::size_t i = 0;
      for (device_buffer* b : activation_buffers()) {
        *b = get(sizes[i], b == &tokens);
        ++i;
      }
    } catch (const cuda::out_of_memory& e) {
      throw case_skipped(cat("does not fit: ", e.what()));
    }
    zero_activations();
  }

  // Defined contents before any GEMM is timed on them.
  void zero_activations() {
    for (device_buffer* b : activation_buffers())
      if (b->bytes()) ITERA_CUDA_CHECK(cudaMemsetAsync(b->data(), 0, b->bytes(), dev.stream()));
  }

  std::array<device_buffer*, 10> activation_buffers() {
    return {&in, &x, &h, &qkv, &attn, &f, &sums, &selected, &g, &tokens};
  }

  // The bytes of each of activation_buffers(), for o.max_images images (0: not needed).
  std::array<std::uint64_t, 10> activation_sizes() const {
    const std::uint64_t n = static_cast<std::uint64_t>(o.max_images), rows = n * static_cast<std::uint64_t>(T);
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    // fp32 sums of the patch GEMM, fc1 (unless fused: its kernel writes f; in bf16 only a timed
    // candidate's output), the projector's fc1, and any GEMM's output while timed.
    const std::uint64_t fc1_bytes = fc1_fused ? 0 : rows * u(M) * (o.fc1_bf16_sums || fc1_epilogue ? 2 : 4);
    const std::uint64_t sum_bytes = std::max({fc1_bytes, rows * u(3 * D) * 2, n * u(Np * D) * 4, n * u(Tp * H) * 4});
    return {n * u(Np * K) * 2,
            rows * u(D) * 2,
            rows * u(D) * 2,
            rows * u(3 * D) * 2,
            rows * u(D) * 2,
            rows * u(M) * 2,
            sum_bytes,
            c.projector_first_token() != 0 ? n * u(Tp * D) * 2 : 0,
            n * u(Tp * H) * 2,
            n * u(Tp * H) * 2};
  }

  ~impl() {
    if (weights.data()) (void)cudaStreamSynchronize(dev.stream());  // nothing queued may outlive the buffers
    if (graph) (void)cudaGraphExecDestroy(graph);
  }

  void index_stages() {
    stages = vit_stages(c, dtype::bf16, dtype::bf16);
    idx_layer.assign(static_cast<std::size_t>(c.layers), {-1, -1, -1, -1, -1, -1, -1});
    for (std::size_t i = 0; i < stages.size(); ++i) {
      const vit_stage& s = stages[i];
      kind_names.emplace_back(stage_kind_name(s.kind));
      const int at = static_cast<int>(i);
      const auto layer_slot = [&](int slot) { idx_layer.at(static_cast<std::size_t>(s.layer))[static_cast<std::size_t>(slot)] = at; };
      switch (s.kind) {
        case vit_stage_kind::patch_embed: idx_patch = at; break;
        case vit_stage_kind::pre_norm: idx_pre = at; break;
        case vit_stage_kind::norm1: layer_slot(0); break;
        case vit_stage_kind::qkv: layer_slot(1); break;
        case vit_stage_kind::attention: layer_slot(2); break;
        case vit_stage_kind::out: layer_slot(3); break;
        case vit_stage_kind::norm2: layer_slot(4); break;
        case vit_stage_kind::fc1: layer_slot(5); break;
        case vit_stage_kind::fc2: layer_slot(6); break;
        case vit_stage_kind::post_norm: idx_post = at; break;
        case vit_stage_kind::projector_fc1: idx_p1 = at; break;
        case vit_stage_kind::projector_fc2: idx_p2 = at; break;
      }
    }
  }

  void plan_arena() {
    const auto elems = [](std::int64_t n) { return static_cast<std::uint64_t>(n) * 2; };  // bf16 bytes
    const auto reserve = [&](std::uint64_t bytes) {
      const std::uint64_t at = arena_bytes;
      arena_bytes = align_up(arena_bytes + bytes);
      return at;
    };
    off_patch_w = reserve(elems(D * K));
    if (c.patch_bias) off_patch_b = reserve(elems(D));
    if (c.class_token) off_class = reserve(elems(D));
    off_position = reserve(elems(T * D));
    if (c.pre_norm()) {
      off_pre_w = reserve(elems(D));
      off_pre_b = reserve(elems(D));
    }
    layer_off.resize(static_cast<std::size_t>(c.layers));
    for (auto& l : layer_off) {
      l.wqkv = reserve(elems(3 * D * D));
      l.bqkv = reserve(elems(3 * D));
      l.wo = reserve(elems(D * D));
      l.bo = reserve(elems(D));
      l.n1w = reserve(elems(D));
      l.n1b = reserve(elems(D));
      l.n2w = reserve(elems(D));
      l.n2b = reserve(elems(D));
      l.w1 = reserve(elems(M * D));
      l.b1 = reserve(elems(M));
      l.w2 = reserve(elems(D * M));
      l.b2 = reserve(elems(D));
    }
    if (c.post_norm()) {
      off_post_w = reserve(elems(D));
      off_post_b = reserve(elems(D));
    }
    off_p1w = reserve(elems(H * D));
    off_p1b = reserve(elems(H));
    off_p2w = reserve(elems(H * H));
    off_p2b = reserve(elems(H));
  }

  void upload(const vit_weights& w) {
    for (const auto& spec : vit_tensor_specs(c))
      if (static_cast<std::int64_t>(w.tensor(spec).size()) != spec.elements())
        throw std::logic_error(cat("vision encoder cuda engine: tensor '", spec.name, "' holds ", w.tensor(spec).size(),
                                   " values, its shape needs ", spec.elements()));
    std::vector<std::uint16_t> staging(arena_bytes / 2, 0);
    const auto put = [&](std::uint64_t offset, const std::vector<float>& values) {
      std::uint16_t* dst = staging.data() + offset / 2;
      for (std::size_t i = 0; i < values.size(); ++i) dst[i] = gemm::numeric::float_to_bf16(values[i]);
    };
    put(off_patch_w, w.patch_weight);
    if (c.patch_bias) put(off_patch_b, w.patch_bias);
    if (c.class_token) put(off_class, w.class_embedding);
    put(off_position, w.position);
    if (c.pre_norm()) {
      put(off_pre_w, w.pre_norm_weight);
      put(off_pre_b, w.pre_norm_bias);
    }
    for (std::size_t l = 0; l < layer_off.size(); ++l) {
      const auto& lo = layer_off[l];
      const auto& lw = w.layers.at(l);
      const fused_qkv fused = fuse_qkv(lw);
      put(lo.wqkv, fused.weight);
      put(lo.bqkv, fused.bias);
      put(lo.wo, lw.out_weight);
      put(lo.bo, lw.out_bias);
      put(lo.n1w, lw.norm1_weight);
      put(lo.n1b, lw.norm1_bias);
      put(lo.n2w, lw.norm2_weight);
      put(lo.n2b, lw.norm2_bias);
      put(lo.w1, lw.fc1_weight);
      put(lo.b1, lw.fc1_bias);
      put(lo.w2, lw.fc2_weight);
      put(lo.b2, lw.fc2_bias);
    }
    if (c.post_norm()) {
      put(off_post_w, w.post_norm_weight);
      put(off_post_b, w.post_norm_bias);
    }
    put(off_p1w, w.projector_fc1_weight);
    put(off_p1b, w.projector_fc1_bias);
    put(off_p2w, w.projector_fc2_weight);
    put(off_p2b, w.projector_fc2_bias);
    dev.upload(weights.data(), staging.data(), arena_bytes);  // returns when done: staging goes out of scope
  }

  bf16* w_at(std::uint64_t offset) const { return reinterpret_cast<bf16*>(weights.as<unsigned char>() + offset); }

  // ---------------------------------------------------------------------------------------------
  // GEMMs

  gemm_shape shape_of(gemm_id id, std::int64_t images) const {
    const std::int64_t rows = images * T;
    switch (id) {
      case gemm_id::patch: return {D, images * Np, K, true, epilogue::none, 0.0f};
      case gemm_id::qkv: return {3 * D, rows, D, false, epilogue::bias, 0.0f};
      case gemm_id::out: return {D, rows, D, false, epilogue::bias, 1.0f};
      case gemm_id::fc1:
        if (fc1_epilogue) return {M, rows, D, false, epilogue::gelu_bias, 0.0f};
        if (o.fc1_bf16_sums) return {M, rows, D, false, epilogue::bias, 0.0f};
        return {M, rows, D, true, epilogue::none, 0.0f};
      case gemm_id::fc2: return {D, rows, M, false, epilogue::bias, 1.0f};
      case gemm_id::projector_fc1: return {H, images * Tp, D, true, epilogue::none, 0.0f};
      case gemm_id::projector_fc2: return {H, images * Tp, H, false, epilogue::bias, 0.0f};
    }
    throw std::logic_error("vit cuda engine: gemm without a shape");
  }

  // The operands a timed candidate reads: layer 0's weight and bias, and the buffer the GEMM reads.
  std::pair<const void*, const void*> tuning_operands(gemm_id id) const {
    const auto& l0 = layer_off.front();
    switch (id) {
      case gemm_id::patch: return {w_at(off_patch_w), in.data()};
      case gemm_id::qkv: return {w_at(l0.wqkv), h.data()};
      case gemm_id::out: return {w_at(l0.wo), attn.data()};
      case gemm_id::fc1: return {w_at(l0.w1), h.data()};
      case gemm_id::fc2: return {w_at(l0.w2), f.data()};
      case gemm_id::projector_fc1: return {w_at(off_p1w), x.data()};
      case gemm_id::projector_fc2: return {w_at(off_p2w), g.data()};
    }
    return {nullptr, nullptr};
  }
  const bf16* tuning_bias(gemm_id id) const {
    const auto& l0 = layer_off.front();
    switch (id) {
      case gemm_id::qkv: return w_at(l0.bqkv);
      case gemm_id::out: return w_at(l0.bo);
      case gemm_id::fc1: return w_at(l0.b1);
      case gemm_id::fc2: return w_at(l0.b2);
      case gemm_id::projector_fc2: return w_at(off_p2b);
      default: return nullptr;
    }
  }

  void set_bias(const gemm_plan& p, const bf16* bias) const {
    if (p.shape.ep == epilogue::none) return;
    const void* ptr = bias;
    ITERA_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof ptr));
  }

  cublasStatus_t launch_status(const gemm_plan& p, const cublasLtMatmulAlgo_t& algo, const void* w, const void* input,
                               void* out) const {
    const float alpha = 1.0f, beta = p.shape.beta;
    return cublasLtMatmul(dev.lt_handle(), p.op.get(), &alpha, w, p.a.get(), input, p.b.get(), &beta, out, p.d.get(),
                          out, p.d.get(), &algo, dev.lt_workspace(), dev.lt_workspace_size(), dev.stream());
  }

  gemm_plan build_plan(gemm_id id, std::int64_t images) {
    gemm_plan p;
    p.shape = shape_of(id, images);
    const gemm_shape& s = p.shape;
    cublasLtMatmulDesc_t op = nullptr;
    ITERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    p.op.reset(op);
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    ITERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
    ITERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
    const cublasLtEpilogue_t ep = s.ep == epilogue::bias        ? CUBLASLT_EPILOGUE_BIAS
                                  : s.ep == epilogue::gelu_bias ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                                : CUBLASLT_EPILOGUE_DEFAULT;
    ITERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    if (s.ep != epilogue::none) {
      const cudaDataType_t bias_type = CUDA_R_16BF;
      ITERA_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
      set_bias(p, tuning_bias(id));
    }
    p.a = make_layout(CUDA_R_16BF, s.kk, s.m, s.kk);     // W: K x M, used transposed
    p.b = make_layout(CUDA_R_16BF, s.kk, s.rows, s.kk);  // activations [rows][K]
    p.d = make_layout(s.fp32_out ? CUDA_R_32F : CUDA_R_16BF, s.m, s.rows, s.m);  // [rows][M], also C

    const matmul_preference pref = cuda::make_preference(dev.lt_workspace_size());
    constexpr int max_candidates = 8;
    cublasLtMatmulHeuristicResult_t results[max_candidates] = {};
    int returned = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(dev.lt_handle(), p.op.get(), p.a.get(), p.b.get(), p.d.get(), p.d.get(),
                                       pref.get(), o.tune_gemms ? max_candidates : 1, results, &returned);
    std::vector<algorithm> candidates;
    if (status == CUBLAS_STATUS_SUCCESS)
      for (int i = 0; i < returned; ++i)
        if (results[i].state == CUBLAS_STATUS_SUCCESS) candidates.push_back({results[i].algo});
    if (candidates.empty())
      throw std::runtime_error(cat("vision encoder cuda engine: cuBLASLt has no bf16 algorithm for ", gemm_name(id),
                                   " M=", s.m, " N=", s.rows, " K=", s.kk, " (", s.fp32_out ? "fp32" : "bf16",
                                   " output; heuristic ", cublasLtGetStatusName(status), ", ", returned,
                                   " candidates)"));
    p.chosen = candidates.front();
    const double gflop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.rows) * static_cast<double>(s.kk) * 1e-9;
    p.choice = cat("cuBLASLt heuristic's first of ", candidates.size());
    if (o.tune_gemms && candidates.size() > 1 && gflop >= 8.0) tune(id, p, candidates, gflop);
    return p;
  }

  // Times each candidate (one warm launch, then 5 back to back between two events) writing into
  // the scratch sums, and keeps the fastest. A candidate whose launch fails is passed over.
  void tune(gemm_id id, gemm_plan& p, const std::vector<algorithm>& candidates, double gflop) {
    const auto [w, input] = tuning_operands(id);
    void* out = sums.data();
    cudaEvent_t start = nullptr, stop = nullptr;
    ITERA_CUDA_CHECK(cudaEventCreate(&start));
    ITERA_CUDA_CHECK(cudaEventCreate(&stop));
    constexpr int launches = 5;
    double best_ms = -1;
    std::size_t best = 0;
    try {
      for (std::size_t i = 0; i < candidates.size(); ++i) {
        if (launch_status(p, candidates[i].algo, w, input, out) != CUBLAS_STATUS_SUCCESS) continue;
        ITERA_CUDA_CHECK(cudaEventRecord(start, dev.stream()));
        bool ok = true;
        for (int r = 0; r < launches && ok; ++r) ok = launch_status(p, candidates[i].algo, w, input, out) == CUBLAS_STATUS_SUCCESS;
        ITERA_CUDA_CHECK(cudaEventRecord(stop, dev.stream()));
        ITERA_CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        ITERA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        const double per = static_cast<double>(ms) / launches;
        if (ok && (best_ms < 0 || per < best_ms)) {
          best_ms = per;
          best = i;
        }
      }
    } catch (...) {
      (void)cudaEventDestroy(start);
      (void)cudaEventDestroy(stop);
      throw;
    }
    ITERA_CUDA_CHECK(cudaEventDestroy(start));
    ITERA_CUDA_CHECK(cudaEventDestroy(stop));
    (void)cudaGetLastError();  // a failed candidate can leave a launch error behind; the chosen one worked
    if (best_ms < 0)
      throw std::runtime_error(cat("vision encoder cuda engine: no cuBLASLt candidate for ", gemm_name(id),
                                   " launched"));
    p.chosen = candidates[best];
    p.choice = cat("candidate ", best + 1, " of ", candidates.size(), " timed, ", cuda::sig3(best_ms), " ms, ",
                   cuda::sig3(gflop / best_ms), " TFLOP/s");
  }

  gemm_plan& plan(gemm_id id, std::int64_t images) {
    const auto key = std::make_pair(images, id);
    if (auto it = plans.find(key); it != plans.end()) return it->second;
    return plans.emplace(key, build_plan(id, images)).first->second;
  }

  void prepare(std::int64_t images) {
    check_images(images);
    dev.make_current();
    for (const gemm_id id : {gemm_id::patch, gemm_id::qkv, gemm_id::out, gemm_id::fc1, gemm_id::fc2,
                             gemm_id::projector_fc1, gemm_id::projector_fc2})
      if (id != gemm_id::fc1 || !fc1_fused) (void)plan(id, images);
  }

  void gemm(gemm_id id, std::int64_t images, const void* w, const bf16* bias, const void* input, void* out) {
    const gemm_plan& p = plan(id, images);
    set_bias(p, bias);
    ITERA_CUBLAS_CHECK(launch_status(p, p.chosen.algo, w, input, out));
  }

  void check_images(std::int64_t images) const {
    if (images < 1 || images > o.max_images)
      throw usage_error(cat("vision encoder cuda engine: ", images, " images; the engine was sized for 1..",
                            o.max_images));
  }

  // ---------------------------------------------------------------------------------------------
  // Stages

  // A stage's scope: its name under `names`, and what it declares for `images` images.
  std::optional<stage_recorder::scope> open(stage_recorder* rec, int index, vit_stage_names names,
                                            std::int64_t images) const {
    if (!rec) return std::nullopt;
    const vit_stage& s = stages.at(static_cast<std::size_t>(index));
    std::optional<stage_recorder::scope> sc;
    sc.emplace(rec->enter(names == vit_stage_names::layers ? std::string_view(s.name)
                                                             : std::string_view(kind_names[static_cast<std::size_t>(index)])));
    const auto n = static_cast<double>(images);
    sc->add_flops(n * s.flops());
    sc->add_bytes_read(n * s.bytes_read + s.weight_bytes);
    sc->add_bytes_written(n * s.bytes_written);
    return sc;
  }

  // Enqueues only (the device current, the plans made): capture() records it as it is.
  const bf16* encode(const bf16* patches, std::int64_t images, stage_recorder* rec, vit_stage_names names) {
    const cudaStream_t s = dev.stream();
    const std::int64_t rows = images * T;
    const auto eps = static_cast<float>(c.layer_norm_eps);
    bf16* xs = x.as<bf16>();
    {
      auto sc = open(rec, idx_patch, names, images);
      gemm(gemm_id::patch, images, w_at(off_patch_w), nullptr, patches, sums.data());
      k::embed(sums.as<float>(), c.patch_bias ? w_at(off_patch_b) : nullptr, c.class_token ? w_at(off_class) : nullptr,
               w_at(off_position), xs, images, T, D, s);
    }
    if (c.pre_norm()) {
      auto sc = open(rec, idx_pre, names, images);
      k::layer_norm(xs, w_at(off_pre_w), w_at(off_pre_b), xs, rows, D, eps, s);
    }
    {
      scope all(names == vit_stage_names::kinds ? rec : nullptr, "layers");
      for (std::int64_t l = 0; l < c.layers; ++l) {
        const auto& lo = layer_off[static_cast<std::size_t>(l)];
        const auto& idx = idx_layer[static_cast<std::size_t>(l)];
        {
          auto sc = open(rec, idx[0], names, images);
          k::layer_norm(xs, w_at(lo.n1w), w_at(lo.n1b), h.as<bf16>(), rows, D, eps, s);
        }
        {
          auto sc = open(rec, idx[1], names, images);
          gemm(gemm_id::qkv, images, w_at(lo.wqkv), w_at(lo.bqkv), h.data(), qkv.data());
        }
        {
          auto sc = open(rec, idx[2], names, images);
          k::attention(qkv.as<bf16>(), attn.as<bf16>(), images, T, c.heads, c.head_dim(), attention_scale, s,
                       o.attention_tensor_cores ? k::attention_path::automatic : k::attention_path::cuda_cores);
        }
        {
          auto sc = open(rec, idx[3], names, images);
          gemm(gemm_id::out, images, w_at(lo.wo), w_at(lo.bo), attn.data(), xs);
        }
        {
          auto sc = open(rec, idx[4], names, images);
          k::layer_norm(xs, w_at(lo.n2w), w_at(lo.n2b), h.as<bf16>(), rows, D, eps, s);
        }
        {
          auto sc = open(rec, idx[5], names, images);
          if (fc1_epilogue) {
            gemm(gemm_id::fc1, images, w_at(lo.w1), w_at(lo.b1), h.data(), f.data());
          } else if (fc1_fused) {
            k::gemm_bias_activation(h.as<bf16>(), rows, w_at(lo.w1), M, D, w_at(lo.b1), kernel_activation(c.activation),
                                    o.fc1_bf16_sums, f.as<bf16>(), s);
          } else if (o.fc1_bf16_sums) {
            gemm(gemm_id::fc1, images, w_at(lo.w1), w_at(lo.b1), h.data(), f.data());
            k::activation_in_place(f.as<bf16>(), rows * M, kernel_activation(c.activation), s);
          } else {
            gemm(gemm_id::fc1, images, w_at(lo.w1), nullptr, h.data(), sums.data());
            k::bias_activation(sums.as<float>(), w_at(lo.b1), f.as<bf16>(), rows, M, kernel_activation(c.activation), s);
          }
        }
        {
          auto sc = open(rec, idx[6], names, images);
          gemm(gemm_id::fc2, images, w_at(lo.w2), w_at(lo.b2), f.data(), xs);
        }
      }
    }
    if (c.post_norm()) {
      auto sc = open(rec, idx_post, names, images);
      k::layer_norm(xs, w_at(off_post_w), w_at(off_post_b), xs, rows, D, eps, s);
    }
    features_images = images;
    return xs;
  }

  const bf16* project(const bf16* features, std::int64_t images, stage_recorder* rec, vit_stage_names names) {
    const cudaStream_t s = dev.stream();
    const std::int64_t rows = images * Tp;
    {
      auto sc = open(rec, idx_p1, names, images);
      const bf16* input = features;
      if (c.projector_first_token() != 0) {  // the patch rows of each image, the class row left out
        const auto row_bytes = static_cast<std::size_t>(D) * 2;
        ITERA_CUDA_CHECK(cudaMemcpy2DAsync(selected.data(), static_cast<std::size_t>(Tp) * row_bytes,
                                           features + c.projector_first_token() * D,
                                           static_cast<std::size_t>(T) * row_bytes, static_cast<std::size_t>(Tp) * row_bytes,
                                           static_cast<std::size_t>(images), cudaMemcpyDeviceToDevice, s));
        input = selected.as<bf16>();
      }
      gemm(gemm_id::projector_fc1, images, w_at(off_p1w), nullptr, input, sums.data());
      k::bias_activation(sums.as<float>(), w_at(off_p1b), g.as<bf16>(), rows, H, k::activation::gelu, s);
    }
    {
      auto sc = open(rec, idx_p2, names, images);
      gemm(gemm_id::projector_fc2, images, w_at(off_p2w), w_at(off_p2b), g.data(), tokens.data());
    }
    tokens_images = images;
    return tokens.as<bf16>();
  }

  token_tensor download(const device_buffer& b, std::int64_t images, std::int64_t have, std::int64_t rows_per_image,
                        std::int64_t width, const char* what) const {
    if (images < 1 || images > have)
      throw usage_error(cat("vision encoder cuda engine: ", images, " images of ", what, " asked; the last call made ",
                            have));
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(images * rows_per_image * width));
    ITERA_CUDA_CHECK(cudaStreamSynchronize(dev.stream()));
    ITERA_CUDA_CHECK(cudaMemcpy(bits.data(), b.data(), bits.size() * 2, cudaMemcpyDeviceToHost));
    return {images, rows_per_image, width, widen(bits)};
  }
};

gpu_vit::gpu_vit(backend& dev, const vit_weights& weights, const vit_engine_options& options) {
  if (weights.storage != dtype::bf16)
    throw usage_error(cat("vision encoder cuda engine: weights are stored as bf16; these are ",
                          llm::dtype_name(weights.storage), " (load or draw them as bf16)"));
  m = std::make_unique<impl>(dev, weights.config, options, true);
  m->upload(weights);
}

vit_engine_memory gpu_vit::plan(backend& dev, const vit_config& config, const vit_engine_options& options) {
  const impl sizes(dev, config, options, false);
  vit_engine_memory r;
  r.weights = sizes.arena_bytes;
  for (const auto b : sizes.activation_sizes()) r.activations += b;
  r.workspace = cuda::as_cuda(dev).lt_workspace_size();
  return r;
}

void gpu_vit::offload() {
  if (!m->o.evictable) throw std::logic_error("gpu_vit::offload: the engine was not made with options.evictable");
  ITERA_CUDA_CHECK(cudaStreamSynchronize(m->dev.stream()));
  m->weights.evict();
  for (device_buffer* b : m->activation_buffers())
    if (b->is_evictable()) b->evict();
}

void gpu_vit::restore() {
  if (!m->o.evictable) throw std::logic_error("gpu_vit::restore: the engine was not made with options.evictable");
  m->dev.make_current();
  try {
    m->weights.restore();
    for (device_buffer* b : m->activation_buffers())
      if (b->is_evictable()) b->restore();
  } catch (const cuda::out_of_memory& e) {
    // All or nothing: what this call mapped goes back.
    m->weights.evict();
    for (device_buffer* b : m->activation_buffers())
      if (b->is_evictable()) b->evict();
    throw case_skipped(cat("does not fit: restoring the vision encoder: ", e.what()));
  }
  m->zero_activations();  // defined contents again, as after construction (GEMM tuning times on them)
}

bool gpu_vit::resident() const { return m->weights.resident(); }
void* gpu_vit::weights_device() const { return m->weights.data(); }
std::uint64_t gpu_vit::weights_bytes() const { return m->weights.bytes(); }

gpu_vit::~gpu_vit() = default;

const vit_config& gpu_vit::config() const { return m->c; }
const vit_engine_options& gpu_vit::options() const { return m->o; }

vit_engine_memory gpu_vit::memory() const {
  vit_engine_memory r;
  r.weights = m->weights.bytes();
  for (const device_buffer* b : m->activation_buffers()) r.activations += b->bytes();
  r.workspace = m->dev.lt_workspace_size();
  return r;
}

std::string gpu_vit::precision_note() const {
  const vit_config& c = m->c;
  m->dev.make_current();  // the attention kernel named below is the current device's
  // The choice k::attention() makes for this shape (vit_kernels.cuh); its pointers are the engine's
  // 256-byte aligned buffers.
  const bool persistent_attention =
      kernels::attention_kernel_for(c.head_dim()) == kernels::attention_kernel::wgmma &&
      k::attention_persistent_enabled() && k::attention_persistent_supported(c.tokens(), c.head_dim());
  std::string fc1;
  if (m->fc1_epilogue)
    fc1 = "fc1 with cuBLASLt's GELU (tanh form) + bias epilogue";
  else if (m->fc1_fused && m->o.fc1_bf16_sums)
    fc1 = cat("fc1, bias and ", activation_name(c.activation), " in one kernel of ours (TMA + wgmma): sums + bias ",
              "rounded to bf16, then the activation in fp32 (ex2 and rcp approximations) and a second rounding, as a bf16 ",
              "Linear and its activation");
  else if (m->fc1_fused)
    fc1 = cat("fc1, bias and ", activation_name(c.activation), " in one kernel of ours (TMA + wgmma): fp32 sums + ",
              "bias, the activation in fp32 (ex2 and rcp approximations), one rounding");
  else if (m->o.fc1_bf16_sums)
    fc1 = cat("fc1's sums + bias rounded to bf16 by cuBLASLt's epilogue, then ", activation_name(c.activation),
              " in fp32 and a second rounding (not the reference's single rounding)");
  else
    fc1 = cat("fc1 summed in fp32, then bias + ", activation_name(c.activation), " in fp32 and one rounding");
  return cat("bf16 weights and activations, fp32 accumulation (cuBLASLt bf16 tensor-core GEMMs, compute 32F); ",
             "LayerNorm statistics in fp32; residual stream bf16 (out and fc2 add it in fp32 with beta = 1 and round ",
             "once); ", fc1, "; attention ",
             m->o.attention_tensor_cores && kernels::vit::attention_on_tensor_cores(c.head_dim(), 1, c.heads)
                 ? cat("on tensor cores (",
                       kernels::attention_kernel_name(
                           kernels::attention_kernel_for(c.head_dim())),
                       persistent_attention ? ", persistent: a head's Q, K and V resident in shared memory" : "",
                       ", FlashAttention style; scores and softmax fp32, probabilities bf16 for P V)")
                 : std::string("on CUDA cores (fp32 throughout)"),
             "; projector GELU exact (erf) in fp32");
}

const std::uint16_t* gpu_vit::upload_patches(std::span<const float> patches, std::int64_t images) {
  m->check_images(images);
  const auto want = static_cast<std::size_t>(images * m->Np * m->K);
  if (patches.size() != want)
    throw usage_error(cat("vision encoder cuda engine: ", patches.size(), " patch values for ", images,
                          " images; each has ", m->Np, " patches of ", m->K));
  const auto bits = to_bf16_bits(patches);
  m->dev.upload(m->in.data(), bits.data(), bits.size() * 2);
  return m->in.as<std::uint16_t>();
}

void gpu_vit::prepare(std::int64_t images) { m->prepare(images); }

const std::uint16_t* gpu_vit::encode(const std::uint16_t* patches, std::int64_t images, stage_recorder* rec,
                                     vit_stage_names names) {
  if (!lt_aligned(patches))
    throw usage_error("vision encoder cuda engine: the patches must be 256-byte aligned, as cuBLASLt's algorithms assume (a "
                      "cudaMalloc'd buffer is)");
  m->prepare(images);  // checks the count, makes the device current
  return reinterpret_cast<const std::uint16_t*>(m->encode(reinterpret_cast<const bf16*>(patches), images, rec, names));
}

const std::uint16_t* gpu_vit::project(const std::uint16_t* features, std::int64_t images, stage_recorder* rec,
                                      vit_stage_names names) {
  if (!lt_aligned(features))
    throw usage_error("vision encoder cuda engine: the features must be 256-byte aligned, as cuBLASLt's algorithms assume (a "
                      "cudaMalloc'd buffer is)");
  m->prepare(images);
  return reinterpret_cast<const std::uint16_t*>(m->project(reinterpret_cast<const bf16*>(features), images, rec, names));
}

token_tensor gpu_vit::download_features(std::int64_t images) const {
  return m->download(m->x, images, m->features_images, m->T, m->D, "features");
}

token_tensor gpu_vit::download_image_tokens(std::int64_t images) const {
  return m->download(m->tokens, images, m->tokens_images, m->Tp, m->H, "image tokens");
}

void gpu_vit::capture(const std::uint16_t* patches, std::int64_t images) {
  if (!lt_aligned(patches))
    throw usage_error("vision encoder cuda engine: the patches must be 256-byte aligned, as cuBLASLt's algorithms assume (a "
                      "cudaMalloc'd buffer is)");
  m->prepare(images);  // plans and timing outside the capture: it records launches only
  if (m->graph) {
    ITERA_CUDA_CHECK(cudaGraphExecDestroy(m->graph));
    m->graph = nullptr;
  }
  const cudaStream_t s = m->dev.stream();
  ITERA_CUDA_CHECK(cudaStreamSynchronize(s));
  m->graph = cuda::capture_graph(s, [&] {
    const bf16* features = m->encode(reinterpret_cast<const bf16*>(patches), images, nullptr, vit_stage_names::kinds);
    (void)m->project(features, images, nullptr, vit_stage_names::kinds);
  });
}

void gpu_vit::run_graph() {
  if (!m->graph) throw std::logic_error("vision encoder cuda engine: run_graph before capture");
  m->dev.make_current();
  ITERA_CUDA_CHECK(cudaGraphLaunch(m->graph, m->dev.stream()));
}

void gpu_vit::synchronize() { ITERA_CUDA_CHECK(cudaStreamSynchronize(m->dev.stream())); }

std::vector<std::pair<std::string, std::string>> gpu_vit::gemm_choices() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, p] : m->plans)
    out.emplace_back(cat(gemm_name(key.second), " images=", key.first, " M=", p.shape.rows, " N=", p.shape.m, " K=",
                         p.shape.kk),
                     p.choice);
  if (m->fc1_fused)
    out.emplace_back(cat("fc1 N=", m->M, " K=", m->D),
                     "gemm_bias_activation (src/kernels/vit_gemm.cu): TMA + wgmma, bias and activation in its epilogue");
  return out;
}

// ---------------------------------------------------------------------------------------------
// The kernels alone

namespace {

struct test_stream {
  cuda_backend& dev;
  explicit test_stream(backend& d) : dev(cuda::as_cuda(d)) { dev.make_current(); }
  device_buffer put_bf16(std::span<const float> v) {
    const auto bits = to_bf16_bits(v);
    device_buffer b = dev.allocate(std::max<std::size_t>(bits.size() * 2, 16));
    dev.upload(b.data(), bits.data(), bits.size() * 2);
    return b;
  }
  device_buffer put_f32(std::span<const float> v) {
    device_buffer b = dev.allocate(std::max<std::size_t>(v.size() * 4, 16));
    dev.upload(b.data(), v.data(), v.size() * 4);
    return b;
  }
  device_buffer poisoned(std::size_t bf16_values) {
    device_buffer b = dev.allocate(std::max<std::size_t>(bf16_values * 2, 16));
    dev.fill(b.data(), 0xff, b.bytes());  // NaN in bf16
    return b;
  }
  std::vector<float> get_bf16(const device_buffer& b, std::size_t count) {
    std::vector<std::uint16_t> bits(count);
    ITERA_CUDA_CHECK(cudaStreamSynchronize(dev.stream()));
    ITERA_CUDA_CHECK(cudaMemcpy(bits.data(), b.data(), count * 2, cudaMemcpyDeviceToHost));
    return widen(bits);
  }
};

}  // namespace

std::vector<float> gpu_bias_activation(backend& d, vit_activation act, std::span<const float> in,
                                       std::span<const float> bias) {
  if (bias.empty() || in.size() % bias.size() != 0)
    throw usage_error(cat("gpu_bias_activation: ", in.size(), " values are not rows of ", bias.size()));
  test_stream t(d);
  const device_buffer din = t.put_f32(in), dbias = t.put_bf16(bias), dout = t.poisoned(in.size());
  const auto width = static_cast<std::int64_t>(bias.size());
  k::bias_activation(din.as<float>(), dbias.as<bf16>(), dout.as<bf16>(), static_cast<std::int64_t>(in.size()) / width,
                     width, kernel_activation(act), t.dev.stream());
  return t.get_bf16(dout, in.size());
}

std::vector<float> gpu_layer_norm(backend& d, std::span<const float> x, std::span<const float> gamma,
                                  std::span<const float> beta, float eps) {
  if (gamma.empty() || gamma.size() != beta.size() || x.size() % gamma.size() != 0)
    throw usage_error(cat("gpu_layer_norm: ", x.size(), " values, ", gamma.size(), " weights and ", beta.size(),
                          " biases"));
  test_stream t(d);
  const device_buffer dx = t.put_bf16(x), dg = t.put_bf16(gamma), db = t.put_bf16(beta), dout = t.poisoned(x.size());
  const auto width = static_cast<std::int64_t>(gamma.size());
  k::layer_norm(dx.as<bf16>(), dg.as<bf16>(), db.as<bf16>(), dout.as<bf16>(), static_cast<std::int64_t>(x.size()) / width,
                width, eps, t.dev.stream());
  return t.get_bf16(dout, x.size());
}

std::vector<float> gpu_attention(backend& d, std::span<const float> qkv, std::int64_t images, std::int64_t tokens,
                                 std::int64_t heads, std::int64_t head_dim, bool tensor_cores) {
  const std::int64_t hidden = heads * head_dim;
  if (images < 1 || tokens < 1 || heads < 1 || head_dim < 1 ||
      static_cast<std::int64_t>(qkv.size()) != images * tokens * 3 * hidden)
    throw usage_error(cat("gpu_attention: ", qkv.size(), " values for ", images, " x ", tokens, " rows of 3 x ", heads,
                          " x ", head_dim));
  test_stream t(d);
  const device_buffer dqkv = t.put_bf16(qkv);
  const auto out_count = static_cast<std::size_t>(images * tokens * hidden);
  const device_buffer dout = t.poisoned(out_count);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  k::attention(dqkv.as<bf16>(), dout.as<bf16>(), images, tokens, heads, head_dim, scale, t.dev.stream(),
               tensor_cores ? k::attention_path::tensor_cores : k::attention_path::cuda_cores);
  return t.get_bf16(dout, out_count);
}

bool gpu_attention_on_tensor_cores(backend& d, std::int64_t head_dim) {
  cuda::as_cuda(d).make_current();
  return k::attention_on_tensor_cores(head_dim, 1, 1);
}

}  // namespace itera::mm
