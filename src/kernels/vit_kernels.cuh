#pragma once
// Kernels of the vision encoder's cuda engine (workloads/multimodal/vit_cuda.cu): everything but the
// matrix products, which run in cuBLASLt. Activations are row-major [rows x width] bf16 (the patch
// GEMM's and fc1's pre-activation sums fp32); arithmetic is fp32; each result is rounded to bf16
// once, where the cpu reference rounds it (workloads/multimodal/vit_cpu.hpp). Each launcher checks
// its launch and throws on error.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

namespace itera::kernels::vit {

using bf16 = __nv_bfloat16;

// out[r] = bf16((x[r] - mean) / sqrt(var + eps) * gamma + beta): mean and biased variance of the
// row in fp32 (two passes over values held in registers). out may be x. Width a multiple of 8 up
// to 2048 with 16-byte aligned rows: one warp per row, 16-byte loads and stores; otherwise one
// block per row.
void layer_norm(const bf16* x, const bf16* gamma, const bf16* beta, bf16* out, std::int64_t rows, std::int64_t width,
                float eps, cudaStream_t stream);

// The activations of vit_model.hpp: x sigmoid(1.702 x); 0.5 x (1 + erf(x / sqrt 2)); and the tanh
// approximation 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
enum class activation { quick_gelu, gelu, gelu_tanh };

// out[r][c] = bf16(act(in[r][c] + bias[c])), in fp32 [rows][width] (a GEMM's sums). Eight
// elements per thread when width % 8 == 0 and the pointers are 16-byte aligned.
void bias_activation(const float* in, const bf16* bias, bf16* out, std::int64_t rows, std::int64_t width,
                     activation act, cudaStream_t stream);

// x[i] = bf16(act(x[i])) in place over count values (the sums already hold the bias, rounded to
// bf16 by the GEMM's epilogue). Eight values per thread when count % 8 == 0 and x is 16-byte
// aligned.
void activation_in_place(bf16* x, std::int64_t count, activation act, cudaStream_t stream);

// The embeddings: x [images][tokens][width] with tokens = patches + (class_token ? 1 : 0);
//   class row (t = 0, when class_token is not null): bf16(class_token + position[0])
//   patch rows: bf16(patch_out[n][t - cls] + patch_bias (when not null) + position[t])
// patch_out: the patch GEMM's fp32 sums [images][patches][width].
void embed(const float* patch_out, const bf16* patch_bias, const bf16* class_token, const bf16* position, bf16* x,
           std::int64_t images, std::int64_t tokens, std::int64_t width, cudaStream_t stream);

// Attention of the encoder: for image n, head h and token t,
//   out[n T + t][h hd ..] = softmax(q k^T * scale) v over the T tokens of image n (no mask),
// q, k and v the column blocks [0, D), [D, 2D), [2D, 3D) of qkv [images T][3D] (D = heads x hd),
// head h at columns h hd of each. Scores and probabilities stay on chip, in fp32 (probabilities
// rounded to bf16 for the P V product on tensor cores).
//   tensor_cores: the FlashAttention-2-style kernel of flash_attention.cuh (sm_80 and later;
//                 head_dim 16, 32, 64, 72 (held as 80), 80 or 128; images and heads <= 65535),
//                 its wgmma form where attention_kernel_for says so, and there at head_dim 64
//                 over 65 .. 264 tokens the persistent kernel below (unless switched off)
//   cuda_cores:   one warp per query row, online softmax in fp32 (any head_dim up to 256)
//   automatic:    tensor cores where they take the shape
enum class attention_path { automatic, tensor_cores, cuda_cores };
constexpr std::int64_t attention_max_head_dim = 256;
bool attention_on_tensor_cores(std::int64_t head_dim, std::int64_t images, std::int64_t heads);
// Throws std::invalid_argument for a shape the chosen path does not take.
void attention(const bf16* qkv, bf16* out, std::int64_t images, std::int64_t tokens, std::int64_t heads,
               std::int64_t head_dim, float scale, cudaStream_t stream, attention_path path = attention_path::automatic);

// The persistent attention (flash_attention_persistent.cuh: one block per SM walks the (image,
// head) pairs, each head's Q, K and V resident in shared memory while the next one loads).
// Supported: head_dim 64, 65 .. 264 tokens, sm_90a code on a compute capability 9.0 device.
// attention() takes it on the tensor-core path where it is supported, the wgmma kernel is the one
// attention_kernel_for(64) gives, qkv and out are 16-byte aligned, images and heads are at most
// 65535 each and the switch is on.
bool attention_persistent_supported(std::int64_t tokens, std::int64_t head_dim);
// The same computation as attention() on it alone; max_blocks > 0 caps its grid (one block per SM
// otherwise): tests use that so that each block walks several items. Throws
// std::invalid_argument for a shape or device it does not take, or unaligned pointers.
void attention_persistent(const bf16* qkv, bf16* out, std::int64_t images, std::int64_t tokens, std::int64_t heads,
                          float scale, cudaStream_t stream, int max_blocks = 0);
// The switch: ITERA_VIT_ATTENTION_PERSISTENT unset or 1, on; 0, off (attention() keeps the wgmma
// kernel: A/B runs in one binary); anything else a usage error. A test may override it for the
// process (std::nullopt: the environment's choice again).
bool attention_persistent_enabled();
void override_attention_persistent(std::optional<bool> on);

}  // namespace itera::kernels::vit
