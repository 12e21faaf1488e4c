#pragma once
// The vision encoder and projector on the cuda backend (vit_model.hpp gives the model): bf16
// weights and activations, fp32 accumulation, cuBLASLt for the GEMMs (fc1 on sm_90a: a kernel of
// ours with the bias and activation in its epilogue, src/kernels/vit_gemm.cuh), the kernels of
// src/kernels/vit_kernels.cuh for the rest. Implemented in vit_cuda.cu (cuda builds only); this
// header has no CUDA types.
//
// Numerics: the bf16 rounding points of the cpu reference (vit_cpu.hpp), each tensor's fused work
// in fp32 and one rounding where it is stored:
//   patch_embed  GEMM into fp32, then one kernel adds the patch bias and the position row (the
//                class row: class token + position 0) and rounds
//   LayerNorms   statistics in fp32 from the bf16 input, one rounding of the output
//   qkv          cuBLASLt with the bias in its epilogue, bf16 output
//   attention    FlashAttention-2-style on tensor cores: scores and probabilities on chip in fp32
//                (the probabilities rounded to bf16 as the P V product's operand), one rounding
//   out, fc2     cuBLASLt with beta = 1 and C = D = the bf16 residual, the bias in the epilogue:
//                x + a W^T + b summed in fp32, rounded once
//   fc1          quick_gelu and gelu: GEMM into fp32, then bias + activation in one kernel and one
//                rounding; gelu_tanh: cuBLASLt's GELU+bias epilogue (the tanh form), bf16 output
//                (or the kernel, gelu_tanh_epilogue = false). fc1_bf16_sums leaves the reference's
//                rounding points for speed: the GEMM adds the bias and rounds to bf16, the
//                activation kernel rounds again in place (half the bytes of the fp32 path).
//                fused_fc1 (sm_90a, any activation cuBLASLt's epilogue does not run): the same
//                rounding points in one kernel, the activation on the ex2 and rcp approximations
//   projector    the selected tokens gathered (a strided copy when the class token is left out),
//                fc1 in fp32 + exact-erf GELU kernel, fc2 with the bias in the epilogue
// Every image of a batch is one block of rows of the same GEMMs (M = images x tokens).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "itera/core/backend.hpp"
#include "workloads/multimodal/vit_cpu.hpp"
#include "workloads/multimodal/vit_model.hpp"
#include "workloads/multimodal/vit_weights.hpp"

namespace itera {
class stage_recorder;
}

namespace itera::mm {

// How the engine names its stages in a stage recorder.
//   kinds:  one path per kind of stage, every layer entering the same ones (their calls count the
//           layers): "patch_embed", "pre_norm", "layers" (all the layers) with "layers/norm1",
//           "layers/qkv", "layers/attention", "layers/out", "layers/norm2", "layers/fc1",
//           "layers/fc2" inside it, "post_norm", "projector.fc1", "projector.fc2"
//   layers: one path per stage of vit_stages(), its name there: "layer.L.norm1" ...
enum class vit_stage_names { kinds, layers };
std::string_view stage_names_name(vit_stage_names n);
vit_stage_names parse_stage_names(std::string_view name);  // usage_error naming the choices
// The recorder path the engine gives stage `s` (encode and project called at the top level).
std::string stage_path(const vit_stage& s, vit_stage_names names);

struct vit_engine_options {
  std::int64_t max_images = 1;     // workspace sized for this many images per call
  bool tune_gemms = true;          // time cuBLASLt's candidates for each GEMM of at least 8 GFLOP
  bool gelu_tanh_epilogue = true;  // fc1 with gelu_tanh in cuBLASLt's epilogue (false: fp32 + kernel)
  bool fc1_bf16_sums = false;      // quick_gelu, gelu: fc1's sums rounded to bf16 before the activation
  // sm_90a, unless gelu_tanh runs in cuBLASLt's epilogue: fc1, its bias and activation in one kernel of ours
  // (src/kernels/vit_gemm.cuh) rather than cuBLASLt and a pass over its output;
  // ITERA_VIT_FUSED_FC1=0 turns it off (A/B measurements).
  bool fused_fc1 = true;
  bool attention_tensor_cores = true;  // false: the CUDA-core attention kernel (tests)
  // Weights and activations (all but the image tokens) in evictable device memory, so that
  // offload() can give them back between uses (residency=staged in the multimodal pipeline).
  bool evictable = false;
};

struct vit_engine_memory {
  std::uint64_t weights = 0, activations = 0, workspace = 0;
};

class gpu_vit {
 public:
  // `dev` must be the cuda backend (std::invalid_argument otherwise); weights stored as bf16
  // (usage_error otherwise: load or draw them as bf16). case_skipped when the buffers do not fit.
  gpu_vit(backend& dev, const vit_weights& weights, const vit_engine_options& options);
  ~gpu_vit();
  gpu_vit(const gpu_vit&) = delete;
  gpu_vit& operator=(const gpu_vit&) = delete;

  const vit_config& config() const;
  const vit_engine_options& options() const;
  vit_engine_memory memory() const;
  // What an engine of `config` with `options` allocates, computed without allocating (the same
  // sizes as memory() of such an engine). usage_error for the shapes the constructor refuses.
  static vit_engine_memory plan(backend& dev, const vit_config& config, const vit_engine_options& options);

  // Residency (options.evictable only; std::logic_error otherwise). offload() waits for the stream
  // and gives back the device memory of the weights and activations (the image tokens of the last
  // project() stay); restore() maps it again at the same addresses (case_skipped "does not fit"
  // when the device has not the memory) with undefined contents: write the weights back
  // (weights_device(), weights_bytes()) before the next encode. Plans, tuning and a captured graph
  // survive both.
  void offload();
  void restore();
  bool resident() const;
  void* weights_device() const;  // the weight arena, as one block of weights_bytes()
  std::uint64_t weights_bytes() const;
  std::string precision_note() const;

  // Rounds patch rows [images, G*G, C*P*P] (vit_cpu.hpp: patch_rows) to bf16 into the engine's
  // own input buffer and returns it (a device pointer), the copy finished.
  const std::uint16_t* upload_patches(std::span<const float> patches, std::int64_t images);

  // Plans every GEMM for `images` images and, with tune_gemms, times cuBLASLt's candidates for the
  // large ones (into scratch: no result is touched) and keeps the fastest. encode() and project()
  // do it for a count they have not seen; call it before timing.
  void prepare(std::int64_t images);

  // The encoder on patches [images, G*G, C*P*P] bf16 (a device pointer, 256-byte aligned as
  // cudaMalloc's are: cuBLASLt's algorithms assume it; usage_error otherwise),
  // images in 1..max_images: enqueues every stage on the backend's stream without waiting and
  // returns the features [images, T, D] bf16 (a device pointer, valid until the next encode).
  // With a recorder, each stage runs in a scope named by `names` that declares its FLOPs and bytes
  // (vit_stages() for `images` images; weights once).
  const std::uint16_t* encode(const std::uint16_t* patches, std::int64_t images, stage_recorder* rec = nullptr,
                              vit_stage_names names = vit_stage_names::kinds);
  // The projector on features [images, T, D] bf16 (encode's, or any device pointer): image tokens
  // [images, T', llm_hidden] bf16 in the engine (a device pointer, valid until the next project).
  const std::uint16_t* project(const std::uint16_t* features, std::int64_t images, stage_recorder* rec = nullptr,
                               vit_stage_names names = vit_stage_names::kinds);

  // Wait for the stream, then copy back the first `images` of the last encode's features and of
  // the last project's image tokens, widened to fp32.
  token_tensor download_features(std::int64_t images) const;
  token_tensor download_image_tokens(std::int64_t images) const;

  // encode + project of `images` from `patches` captured once as a CUDA graph; run_graph() replays
  // the last capture on the stream (no stage scopes: one launch).
  void capture(const std::uint16_t* patches, std::int64_t images);
  void run_graph();

  void synchronize();

  // What cuBLASLt runs for each GEMM prepared: "qkv M=1024...: candidate 2 of 8 (timed), 0.412 ms".
  std::vector<std::pair<std::string, std::string>> gemm_choices() const;

 private:
  struct impl;
  std::unique_ptr<impl> m;
};

// ---------------------------------------------------------------------------------------------
// The kernels alone, for the device tests: host values in (rounded to bf16 where the kernel reads
// bf16), host values out (bf16 outputs widened); each waits for its result.

// bf16(act(in[r][c] + bias[c])), in fp32 [rows][bias.size()].
std::vector<float> gpu_bias_activation(backend& dev, vit_activation act, std::span<const float> in,
                                       std::span<const float> bias);
// LayerNorm of rows of gamma.size() values.
std::vector<float> gpu_layer_norm(backend& dev, std::span<const float> x, std::span<const float> gamma,
                                  std::span<const float> beta, float eps);
// Attention of qkv [images x tokens][3 x heads x head_dim] on the tensor cores or the CUDA cores:
// [images x tokens][heads x head_dim]. std::invalid_argument when the path does not take the shape.
std::vector<float> gpu_attention(backend& dev, std::span<const float> qkv, std::int64_t images, std::int64_t tokens,
                                 std::int64_t heads, std::int64_t head_dim, bool tensor_cores);
// Whether the tensor-core attention kernel takes this head size on this device.
bool gpu_attention_on_tensor_cores(backend& dev, std::int64_t head_dim);

}  // namespace itera::mm
