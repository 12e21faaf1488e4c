#pragma once
// The vision encoder of the multimodal workload and the projector after it: a ViT shaped like
// CLIP (transformers' CLIPVisionModel) or SigLIP (SiglipVisionModel), then a LLaVA-1.5 projector
// (Linear -> GELU -> Linear) to the language model's width. This file holds the shape (presets,
// overrides from an axis string, validation) and the work each stage must do per image (FLOPs and
// bytes), so a backend can declare them. vit_weights.hpp holds the weights, vit_cpu.hpp the
// reference. docs/multimodal.md ("Vision encoder") gives the formulas; tests/multimodal/vit pins them.
//
// The model (transformers' modeling_clip.py / modeling_siglip.py, read for the math and names):
//   pixels [N, C, S, S] -> patches [N, G*G, C*P*P] (G = floor(S / P): a Conv2d of stride P without
//                          padding leaves the last S mod P rows and columns unread; element order
//                          as preprocess.hpp's patchify)
//   x = patches W_patch^T (+ b_patch)           a Conv2d(C, D, P, stride P) as one GEMM
//   class token: x = [class_embedding; x]        CLIP only; T = G*G (+ 1) tokens
//   x += position_embedding[0..T)
//   norm pre:  x = LayerNorm(x)                  CLIP's pre_layrnorm
//   per layer (pre-LN, both families):
//     h = LN1(x); q, k, v = h Wq^T + bq, h Wk^T + bk, h Wv^T + bv
//     x += softmax(q k^T / sqrt(head_dim)) v Wo^T + bo      (per head; no mask: every token sees all)
//     h = LN2(x); x += act(h W1^T + b1) W2^T + b2
//   norm post: x = LayerNorm(x)                  SigLIP's post_layernorm on last_hidden_state
//   features = x  [N, T, D]
//   projector: f = the selected tokens (all, or the patches without the class token: LLaVA's
//              "default" strategy); out = gelu(f P1^T + c1) P2^T + c2   [N, T', llm_hidden]
// CLIPVisionModel's last_hidden_state is the features with norm=pre (its post_layernorm applies to
// the pooled class token only); SiglipVisionModel's is the features with norm=post.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "workloads/llm/model.hpp"  // llm::dtype, bytes_per_element

namespace itera::mm {

using llm::dtype;

// Hugging Face ACT2FN names: "quick_gelu" x * sigmoid(1.702 x); "gelu" 0.5 x (1 + erf(x / sqrt 2));
// "gelu_pytorch_tanh" 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) ("gelu_new" is read as it).
enum class vit_activation { quick_gelu, gelu, gelu_tanh };
std::string_view activation_name(vit_activation a);  // the Hugging Face name
vit_activation parse_activation(std::string_view name);  // usage_error naming the choices

// Where LayerNorms stand outside the layers: pre (after the embeddings: CLIP), post (on the output
// tokens: SigLIP), both, or none (LLaVA reading a hidden state from inside the encoder).
enum class vit_norm { pre, post, both, none };
std::string_view norm_name(vit_norm n);
vit_norm parse_norm(std::string_view name);

// Which encoder tokens the projector maps: all of them, or the patches only (the class token left
// out; the same as all when there is no class token).
enum class feature_select { all, patches };
std::string_view select_name(feature_select s);
feature_select parse_select(std::string_view name);

struct vit_config {
  std::string name;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;   // D
  std::int64_t heads = 0;
  std::int64_t mlp = 0;      // intermediate size
  std::int64_t patch = 0;    // P
  std::int64_t image = 0;    // S: the input side
  std::int64_t channels = 3; // C
  bool class_token = true;
  bool patch_bias = false;   // the patch Conv2d has a bias (SigLIP)
  vit_activation activation = vit_activation::quick_gelu;
  vit_norm norm = vit_norm::pre;
  double layer_norm_eps = 1e-5;
  // Projector (LLaVA-1.5: linear_1 [llm_hidden, D], gelu, linear_2 [llm_hidden, llm_hidden]).
  std::int64_t llm_hidden = 0;
  feature_select select = feature_select::patches;

  std::int64_t grid() const { return patch > 0 ? image / patch : 0; }
  std::int64_t patches() const { return grid() * grid(); }
  std::int64_t tokens() const { return patches() + (class_token ? 1 : 0); }  // T
  std::int64_t head_dim() const { return heads > 0 ? hidden / heads : 0; }
  std::int64_t patch_dim() const { return channels * patch * patch; }  // K of the patch GEMM
  bool pre_norm() const { return norm == vit_norm::pre || norm == vit_norm::both; }
  bool post_norm() const { return norm == vit_norm::post || norm == vit_norm::both; }
  // Tokens the projector maps per image.
  std::int64_t projector_tokens() const {
    return select == feature_select::patches ? patches() : tokens();
  }
  // Row of the first projected token in the features: 1 when the class token is left out.
  std::int64_t projector_first_token() const {
    return select == feature_select::patches && class_token ? 1 : 0;
  }
  bool operator==(const vit_config&) const = default;
};

// "clip-vit-large-patch14" (224 px), "clip-vit-large-patch14-336", "siglip-so400m-patch14-384",
// "tiny" (CLIP-shaped, for tests) and "tiny-siglip".
const std::vector<std::string>& vit_preset_names();
vit_config vit_preset(std::string_view name);  // usage_error naming the presets

// usage_error saying which constraint failed, with the numbers and what to change.
void validate(const vit_config& c);

// The fields a shape spec may set: layers, hidden, heads, mlp, patch, image, channels, class_token
// (yes/no), patch_bias (yes/no), activation, norm (pre/post/both/none), llm_hidden, select
// (all/patches). "FIELD=VALUE;FIELD=VALUE" over `base`; "preset" or "" keeps it. Validates.
const std::vector<std::string>& vit_shape_fields();
vit_config apply_vit_shape(vit_config base, std::string_view spec);
vit_config apply_vit_shape(vit_config base, const std::vector<std::pair<std::string, std::string>>& fields);

// Parameters by part (all tensors the model runs; the projector separately).
struct vit_params {
  std::int64_t embeddings = 0;  // patch weight (+ bias), class token, position table
  std::int64_t per_layer = 0;   // q, k, v, out (weights + biases), fc1, fc2 (+ biases), two LayerNorms
  std::int64_t layers = 0;
  std::int64_t outer_norms = 0; // pre and post LayerNorms present
  std::int64_t projector = 0;
  std::int64_t encoder() const { return embeddings + layers * per_layer + outer_norms; }
  std::int64_t total() const { return encoder() + projector; }
};
vit_params count_params(const vit_config& c);

// The stages an encoder + projector run, in order. Names: "patch_embed", "pre_norm",
// "layer.L.norm1|qkv|attention|out|norm2|fc1|fc2", "post_norm", "projector.fc1|fc2".
enum class vit_stage_kind { patch_embed, pre_norm, norm1, qkv, attention, out, norm2, fc1, fc2, post_norm,
                            projector_fc1, projector_fc2 };
std::string_view stage_kind_name(vit_stage_kind k);

// What one stage must do. FLOPs and activation bytes are per image; weight bytes are per batch
// (read once however many images it holds). Conventions (docs/multimodal.md):
//   matmul_flops: 2 m n k of each matrix product (attention: QK^T and PV, 2 T^2 D each).
//   other_flops, nominal: 1 per bias, residual or position add; 8 per element for a LayerNorm;
//     5 per attention score for the softmax (scale, max, subtract, exp, sum) and 1 per output
//     element for its division; per activation element quick_gelu 4, gelu 5, gelu_tanh 9.
//   bytes: the least a fused implementation moves: each stored activation read and written once in
//     the activation type; attention reads q, k, v and writes its output (no T x T matrix stored);
//     out and fc2 read the residual and write the sum; weights and biases in the weight type.
struct vit_stage {
  std::string name;
  vit_stage_kind kind = vit_stage_kind::patch_embed;
  std::int64_t layer = -1;
  double matmul_flops = 0;
  double other_flops = 0;
  double bytes_read = 0;     // activations, per image
  double bytes_written = 0;  // activations, per image
  double weight_bytes = 0;   // per batch
  // The stage's GEMM when it is one: [gemm_m x gemm_k] x [gemm_k x gemm_n], gemm_m rows per image.
  std::int64_t gemm_m = 0, gemm_n = 0, gemm_k = 0;

  double flops() const { return matmul_flops + other_flops; }
};
std::vector<vit_stage> vit_stages(const vit_config& c, dtype weights, dtype activations);

// Sums over stages for `images` images: FLOPs and activation bytes times images, weights once.
struct vit_work {
  double matmul_flops = 0;
  double gemm_flops = 0;       // the part of matmul_flops in stages that are one GEMM (not attention)
  double attention_flops = 0;  // QK^T and PV
  double other_flops = 0;
  double activation_bytes = 0; // read + written
  double weight_bytes = 0;
  double flops() const { return matmul_flops + other_flops; }
  double bytes() const { return activation_bytes + weight_bytes; }
};
enum class vit_part { encoder, projector, both };
vit_work sum_work(const std::vector<vit_stage>& stages, std::int64_t images, vit_part part = vit_part::both);

}  // namespace itera::mm
