#pragma once
// The cpu reference of the vision encoder and projector (vit_model.hpp gives the model): the oracle
// a GPU engine is checked against, by normalised error. OpenBLAS sgemm in fp32 for every matrix
// product (the patch embedding, q/k/v, attention's QK^T and PV per head, out, fc1, fc2, the
// projector), plain loops for the rest (LayerNorm statistics in double), written to be read rather
// than to be fast. Weights hold values of their storage type (vit_weights.hpp), widened.
//
// Activations: fp32 keeps every intermediate in fp32. bf16 rounds (to nearest even) exactly where
// a GPU engine stores a bf16 tensor, after doing that tensor's fused work in fp32:
//   1. the patches (pixels) before the patch GEMM
//   2. x = bf16(patch GEMM + patch bias + position)       class row: bf16(class + position[0])
//   3. x = bf16(LayerNorm(x))                              pre_norm, when present
//   per layer:
//   4. h = bf16(LayerNorm1(x))
//   5. q|k|v = bf16(h Wqkv^T + bqkv)
//   6. a = bf16(softmax(q k^T / sqrt(head_dim)) v)         scores and probabilities stay fp32 (a
//                                                          flash kernel keeps them on chip)
//   7. x = bf16(x + a Wo^T + bo)                           residual added in fp32, rounded once
//   8. h = bf16(LayerNorm2(x))
//   9. f = bf16(act(h W1^T + b1))                          with set_fc1_bf16_sums(true), as PyTorch
//                                                          runs a bf16 Linear and then its activation:
//                                                          f = bf16(act(bf16(h W1^T + b1)))
//  10. x = bf16(x + f W2^T + b2)
//  11. x = bf16(LayerNorm(x))                              post_norm, when present: the features
//  projector, on the selected tokens of the features:
//  12. g = bf16(gelu(x P1^T + c1))
//  13. out = bf16(g P2^T + c2)
// Every GEMM accumulates in fp32 from those rounded inputs, as tensor cores do.
#include <cstdint>
#include <span>
#include <vector>

#include "workloads/multimodal/preprocess.hpp"
#include "workloads/multimodal/vit_weights.hpp"

namespace itera::mm {

// [images, tokens, width], row-major.
struct token_tensor {
  std::int64_t images = 0, tokens = 0, width = 0;
  std::vector<float> values;
};

class vit_reference {
 public:
  // Keeps a reference to `weights`: they must outlive it. activations: fp32 or bf16 (usage_error
  // otherwise).
  vit_reference(const vit_weights& weights, dtype activations);
  vit_reference(vit_weights&&, dtype) = delete;  // a temporary would not outlive the reference

  const vit_config& config() const { return m_weights.config; }
  // Step 9 with fc1's sums rounded to bf16 before the activation (bf16 activations only).
  void set_fc1_bf16_sums(bool on) { m_fc1_bf16_sums = on; }
  dtype activations() const { return m_activations; }

  // The encoder on preprocess.hpp's NCHW float32 output [N, C, S, S]: features [N, T, D].
  // usage_error when the tensor is not N x C x S x S of this encoder (naming both shapes).
  token_tensor encode(const pixel_tensor& pixels) const;
  // The same from patchified pixels [N, G*G, C*P*P] (patch_rows below).
  token_tensor encode_patches(std::span<const float> patches, std::int64_t images) const;
  // The projector on features [N, T, D]: image tokens [N, T', llm_hidden] (T' = projector_tokens).
  token_tensor project(const token_tensor& features) const;

  struct output {
    token_tensor features, image_tokens;
  };
  output run(const pixel_tensor& pixels) const;

 private:
  void round(std::vector<float>& values) const;

  const vit_weights& m_weights;
  dtype m_activations;
  std::vector<fused_qkv> m_qkv;  // one per layer
  bool m_fc1_bf16_sums = false;
};

// [N, G*G, C*P*P] from NCHW with G = floor(side / P) per axis: preprocess.hpp's patchify where P
// divides the side, and the same order over the top-left G*P square where it does not (what a
// Conv2d of stride P without padding reads). std::invalid_argument when no patch fits.
std::vector<float> patch_rows(const pixel_tensor& pixels, std::int64_t patch);

// The activation of vit_model.hpp at one value (computed in double).
float activate(vit_activation a, float x);

// ||out - ref||_2 / ||ref||_2 over all elements, accumulated in double; 0 when both are zero,
// infinity when only the reference is. std::invalid_argument when the sizes differ.
double normalised_error(std::span<const float> out, std::span<const float> ref);

}  // namespace itera::mm
