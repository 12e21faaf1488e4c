// Kernels of the vision encoder's cuda engine (vit_kernels.cuh): LayerNorm, bias + activation, the
// embeddings, and attention (the shared FlashAttention-2-style kernel under a non-causal policy
// that reads K and V from the qkv GEMM's output, on sm_90a at head_dim 64 and up to 264 tokens the
// persistent one of flash_attention_persistent.cuh, or a CUDA-core kernel for other head sizes).
// Checked against the cpu reference and naive ones in tests/device/test_vit_device.cpp.
#include "src/kernels/vit_kernels.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "itera/cuda/check.hpp"
#include "src/cuda/text.hpp"
#include "src/kernels/activation.cuh"
#include "src/kernels/common.cuh"
#include "src/kernels/flash_attention_persistent.cuh"
#include "src/kernels/flash_attention_wgmma.cuh"
#include "src/kernels/launch.cuh"

namespace itera::kernels::vit {
namespace {

using cuda::cat;

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Eight bf16 in one 16-byte word, widened.
__device__ __forceinline__ void unpack8(const uint4& raw, float (&f)[8]) {
  const auto* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 v = __bfloat1622float2(p[e]);
    f[2 * e] = v.x;
    f[2 * e + 1] = v.y;
  }
}

__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint4 raw;
  auto* p = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int e = 0; e < 4; ++e) p[e] = __floats2bfloat162_rn(f[2 * e], f[2 * e + 1]);
  return raw;
}

// ---------------------------------------------------------------------------------------------
// LayerNorm

constexpr int ln_rows_per_block = block_threads / 32;

// One warp per row; lane l holds chunks l, l + 32, ... (CH of them, eight values each).
template <int CH>
__global__ void __launch_bounds__(block_threads)
    layer_norm_warp_kernel(const bf16* x, const bf16* gamma, const bf16* beta, bf16* out, std::int64_t rows,
                           int width, float eps) {
  grid_dependents_launch();
  grid_dependency_wait();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * ln_rows_per_block + threadIdx.x / 32;
  if (row >= rows) return;
  const int chunks = width / 8;
  const auto* in = reinterpret_cast<const uint4*>(x + row * width);
  float v[CH][8];
  float sum = 0;
#pragma unroll
  for (int i = 0; i < CH; ++i) {
    const int c = lane + 32 * i;
    if (c < chunks) {
      unpack8(in[c], v[i]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[i][e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) sum += v[i][e];
  }
  const float inv_width = 1.0f / static_cast<float>(width);
  const float mean = warp_sum(sum) * inv_width;
  // v becomes v - mean (the same fp32 difference the output needs: one subtraction a value, not two).
  float sq = 0;
#pragma unroll
  for (int i = 0; i < CH; ++i) {
    if (lane + 32 * i >= chunks) continue;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      v[i][e] -= mean;
      sq += v[i][e] * v[i][e];
    }
  }
  const float rstd = 1.0f / sqrtf(warp_sum(sq) * inv_width + eps);
  const auto* g4 = reinterpret_cast<const uint4*>(gamma);
  const auto* b4 = reinterpret_cast<const uint4*>(beta);
  auto* o4 = reinterpret_cast<uint4*>(out + row * width);
#pragma unroll
  for (int i = 0; i < CH; ++i) {
    const int c = lane + 32 * i;
    if (c >= chunks) continue;
    float gf[8], bf[8], y[8];
    unpack8(g4[c], gf);
    unpack8(b4[c], bf);
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = v[i][e] * rstd * gf[e] + bf[e];
    o4[c] = pack8(y);
  }
}

// One block per row, any width: statistics over the row read from memory, then the output.
__global__ void __launch_bounds__(block_threads)
    layer_norm_block_kernel(const bf16* x, const bf16* gamma, const bf16* beta, bf16* out, std::int64_t width,
                            float eps) {
  grid_dependents_launch();
  grid_dependency_wait();
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const bf16* in = x + row * width;
  float sum = 0;
  for (std::int64_t i = threadIdx.x; i < width; i += blockDim.x) sum += __bfloat162float(in[i]);
  const float inv_width = 1.0f / static_cast<float>(width);
  const float mean = block_sum(sum, scratch) * inv_width;
  float sq = 0;
  for (std::int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const float d = __bfloat162float(in[i]) - mean;
    sq += d * d;
  }
  const float rstd = 1.0f / sqrtf(block_sum(sq, scratch) * inv_width + eps);
  // Every read of the row happened before the barriers inside block_sum: out may be x.
  for (std::int64_t i = threadIdx.x; i < width; i += blockDim.x)
    out[row * width + i] = __float2bfloat16_rn((__bfloat162float(in[i]) - mean) * rstd * __bfloat162float(gamma[i]) +
                                               __bfloat162float(beta[i]));
}

template <int CH>
void launch_layer_norm_warp(const bf16* x, const bf16* gamma, const bf16* beta, bf16* out, std::int64_t rows,
                            std::int64_t width, float eps, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((rows + ln_rows_per_block - 1) / ln_rows_per_block);
  launch(layer_norm_warp_kernel<CH>, blocks, block_threads, 0, stream, x, gamma, beta, out, rows,
         static_cast<int>(width), eps);
}

// ---------------------------------------------------------------------------------------------
// Bias + activation, embeddings

template <activation A>
__global__ void bias_activation_vec_kernel(const float* in, const bf16* bias, bf16* out, std::uint64_t items,
                                           std::int64_t width) {
  grid_dependents_launch();
  grid_dependency_wait();
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items; i += stride) {
    const std::uint64_t e = 8 * i;
    const auto col = static_cast<std::int64_t>(e % static_cast<std::uint64_t>(width));
    const auto* in4 = reinterpret_cast<const float4*>(in + e);
    const float4 a = in4[0], b = in4[1];
    float bias_f[8];
    unpack8(*reinterpret_cast<const uint4*>(bias + col), bias_f);
    float y[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) y[k] = activate(A, y[k] + bias_f[k]);
    *reinterpret_cast<uint4*>(out + e) = pack8(y);
  }
}

__global__ void bias_activation_kernel(const float* in, const bf16* bias, bf16* out, std::uint64_t count,
                                       std::int64_t width, activation act) {
  grid_dependents_launch();
  grid_dependency_wait();
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const auto col = static_cast<std::int64_t>(i % static_cast<std::uint64_t>(width));
    out[i] = __float2bfloat16_rn(activate(act, in[i] + __bfloat162float(bias[col])));
  }
}

template <activation A>
__global__ void activation_in_place_vec_kernel(bf16* x, std::uint64_t items) {
  grid_dependents_launch();
  grid_dependency_wait();
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items; i += stride) {
    auto* p = reinterpret_cast<uint4*>(x + 8 * i);
    float y[8];
    unpack8(*p, y);
#pragma unroll
    for (int k = 0; k < 8; ++k) y[k] = activate(A, y[k]);
    *p = pack8(y);
  }
}

__global__ void activation_in_place_kernel(bf16* x, std::uint64_t count, activation act) {
  grid_dependents_launch();
  grid_dependency_wait();
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    x[i] = __float2bfloat16_rn(activate(act, __bfloat162float(x[i])));
}

// Element e of the embeddings (row = image x tokens + token, column c): its source value in fp32.
struct embed_args {
  const float* patch_out;
  const bf16* patch_bias;
  const bf16* class_token;
  const bf16* position;
  bf16* x;
  std::int64_t tokens, width;
};

__device__ __forceinline__ float embed_value(const embed_args& a, std::int64_t row, std::int64_t col) {
  const std::int64_t cls = a.class_token ? 1 : 0;
  const std::int64_t n = row / a.tokens, t = row % a.tokens;
  const float pos = __bfloat162float(a.position[t * a.width + col]);
  if (t < cls) return __bfloat162float(a.class_token[col]) + pos;
  const std::int64_t patches = a.tokens - cls;
  float v = a.patch_out[(n * patches + t - cls) * a.width + col];
  if (a.patch_bias) v += __bfloat162float(a.patch_bias[col]);
  return v + pos;
}

__global__ void embed_kernel(embed_args a, std::uint64_t items, int per_item) {
  grid_dependents_launch();
  grid_dependency_wait();
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items; i += stride) {
    const std::uint64_t e = i * static_cast<std::uint64_t>(per_item);
    const auto row = static_cast<std::int64_t>(e / static_cast<std::uint64_t>(a.width));
    const auto col = static_cast<std::int64_t>(e % static_cast<std::uint64_t>(a.width));
    if (per_item == 8) {  // the eight share a row (width % 8 == 0)
      float y[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) y[k] = embed_value(a, row, col + k);
      *reinterpret_cast<uint4*>(a.x + e) = pack8(y);
    } else {
      a.x[e] = __float2bfloat16_rn(embed_value(a, row, col));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Attention

// Grid (query tiles, heads, images): the block's 64 tokens of one head of one image, every token
// of the image as keys. The last block takes every token left: fewer than 64, or 64 and the few
// after them where the grid was sized for the wgmma kernel (flash::query_tiles).
template <int D>
struct image_policy {
  using element = bf16;
  static constexpr bool causal = false;
  const bf16* qkv;
  bf16* out;
  std::int64_t tokens, hidden;

  __device__ flash::block_work<bf16> work() const {
    const std::int64_t image = blockIdx.z;
    const std::int64_t head = blockIdx.y;
    const std::int64_t q0 = static_cast<std::int64_t>(blockIdx.x) * flash::tile_q;
    const std::int64_t width = 3 * hidden;
    const bf16* base = qkv + image * tokens * width + head * D;
    flash::block_work<bf16> w;
    w.q = base + q0 * width;
    w.q_stride = width;
    w.rows = static_cast<int>(blockIdx.x + 1 == gridDim.x ? tokens - q0 : flash::tile_q);
    w.keys = tokens;
    w.first_pos = 0;
    return w;
  }

  // K and V: the column blocks after q of the image's rows.
  __device__ flash::kv_rows<bf16> kv() const {
    const std::int64_t width = 3 * hidden;
    const bf16* base = qkv + static_cast<std::int64_t>(blockIdx.z) * tokens * width + static_cast<std::int64_t>(blockIdx.y) * D;
    return {base + hidden, base + 2 * hidden, width};
  }

  __device__ flash::block_output<bf16> output() const {
    const std::int64_t q0 = static_cast<std::int64_t>(blockIdx.x) * flash::tile_q;
    const std::int64_t image = blockIdx.z, head = blockIdx.y;
    return {out + (image * tokens + q0) * hidden + head * D, hidden};
  }
};

// Whether the persistent kernel takes the launch: the shape (flash::persistent::covers), the
// pointers (the TMA's tensor maps need 16-byte aligned ones) and the counts (images and heads at
// most 65535 each, as the other tensor-core kernels take them: the kernel's offsets and the
// tensor map's coordinates are 32-bit).
bool persistent_takes(const bf16* qkv, const bf16* out, std::int64_t images, std::int64_t tokens, std::int64_t heads,
                      std::int64_t head_dim) {
  return head_dim == flash::persistent::head_dim && flash::persistent::covers(tokens) && aligned16(qkv) &&
         aligned16(out) && images >= 1 && heads >= 1 && images <= 65535 && heads <= 65535;
}

overridable_switch persistent_switch{"ITERA_VIT_ATTENTION_PERSISTENT", true};

template <int D>
void run_tensor_core_attention(const bf16* qkv, bf16* out, std::int64_t images, std::int64_t tokens,
                               std::int64_t heads, float scale, cudaStream_t stream) {
  const attention_kernel kernel = attention_kernel_for(D);
  // Where the wgmma kernel is the choice, the persistent one takes the shapes it covers.
  if (kernel == attention_kernel::wgmma && persistent_takes(qkv, out, images, tokens, heads, D) &&
      attention_persistent_enabled())
    return flash::persistent::launch(qkv, out, images, tokens, heads, scale, stream, 0);
  const dim3 grid(static_cast<unsigned>(flash::query_tiles<D>(tokens, kernel)), static_cast<unsigned>(heads),
                  static_cast<unsigned>(images));
  const image_policy<D> policy{qkv, out, tokens, heads * D};
  flash::launch_attention<D>(policy, grid, scale, stream, kernel);
}

constexpr int cc_rows_per_block = 4;  // warps of the CUDA-core kernel, one query row each
constexpr int cc_values = attention_max_head_dim / 32;

// One warp per (query row, head, image): lane l holds dimensions l, l + 32, ... of q and of the
// output; per key, the score is a warp reduction, then an online softmax step in fp32.
__global__ void __launch_bounds__(cc_rows_per_block * 32)
    attention_cuda_core_kernel(const bf16* qkv, bf16* out, std::int64_t tokens, std::int64_t hidden, int head_dim,
                               float scale) {
  grid_dependents_launch();
  grid_dependency_wait();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * cc_rows_per_block + threadIdx.x / 32;
  if (t >= tokens) return;
  const std::int64_t head = blockIdx.y, image = blockIdx.z, width = 3 * hidden;
  const bf16* base = qkv + image * tokens * width + head * head_dim;
  const bf16* q = base + t * width;
  float qv[cc_values], acc[cc_values];
#pragma unroll
  for (int i = 0; i < cc_values; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < head_dim ? __bfloat162float(q[d]) : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (std::int64_t j = 0; j < tokens; ++j) {
    const bf16* k = base + hidden + j * width;
    const bf16* v = base + 2 * hidden + j * width;
    float part = 0.0f;
#pragma unroll
    for (int i = 0; i < cc_values; ++i) {
      const int d = lane + 32 * i;
      if (d < head_dim) part += qv[i] * __bfloat162float(k[d]);
    }
    const float s = warp_sum(part) * scale;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new), p = expf(s - m_new);
    l = l * correction + p;
#pragma unroll
    for (int i = 0; i < cc_values; ++i) {
      const int d = lane + 32 * i;
      if (d < head_dim) acc[i] = acc[i] * correction + p * __bfloat162float(v[d]);
    }
    m = m_new;
  }
  bf16* o = out + (image * tokens + t) * hidden + head * head_dim;
#pragma unroll
  for (int i = 0; i < cc_values; ++i) {
    const int d = lane + 32 * i;
    if (d < head_dim) o[d] = __float2bfloat16_rn(acc[i] / l);
  }
}

}  // namespace

void layer_norm(const bf16* x, const bf16* gamma, const bf16* beta, bf16* out, std::int64_t rows, std::int64_t width,
                float eps, cudaStream_t stream) {
  if (rows < 1 || width < 1) throw std::invalid_argument(cat("vit layer_norm: ", rows, " rows of ", width));
  const std::int64_t chunks = width / 8;
  const bool vec = width % 8 == 0 && chunks <= 8 * 32 && aligned16(x) && aligned16(out) && aligned16(gamma) &&
                   aligned16(beta);
  if (vec) {
    switch ((chunks + 31) / 32) {
      case 1: return launch_layer_norm_warp<1>(x, gamma, beta, out, rows, width, eps, stream);
      case 2: return launch_layer_norm_warp<2>(x, gamma, beta, out, rows, width, eps, stream);
      case 3: return launch_layer_norm_warp<3>(x, gamma, beta, out, rows, width, eps, stream);
      case 4: return launch_layer_norm_warp<4>(x, gamma, beta, out, rows, width, eps, stream);
      case 5: return launch_layer_norm_warp<5>(x, gamma, beta, out, rows, width, eps, stream);
      case 6: return launch_layer_norm_warp<6>(x, gamma, beta, out, rows, width, eps, stream);
      case 7: return launch_layer_norm_warp<7>(x, gamma, beta, out, rows, width, eps, stream);
      case 8: return launch_layer_norm_warp<8>(x, gamma, beta, out, rows, width, eps, stream);
      default: break;
    }
  }
  if (rows > 0x7fffffff) throw std::invalid_argument(cat("vit layer_norm: ", rows, " rows exceed one grid"));
  launch(layer_norm_block_kernel, static_cast<unsigned>(rows), block_threads, 0, stream, x, gamma, beta, out, width,
         eps);
}

void bias_activation(const float* in, const bf16* bias, bf16* out, std::int64_t rows, std::int64_t width,
                     activation act, cudaStream_t stream) {
  if (rows < 1 || width < 1) throw std::invalid_argument(cat("vit bias_activation: ", rows, " rows of ", width));
  const auto count = static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(width);
  if (width % 8 == 0 && aligned16(in) && aligned16(bias) && aligned16(out)) {
    const std::uint64_t items = count / 8;
    const unsigned blocks = blocks_for(items);
    switch (act) {
      case activation::quick_gelu:
        return launch(bias_activation_vec_kernel<activation::quick_gelu>, blocks, block_threads, 0, stream, in, bias,
                      out, items, width);
      case activation::gelu:
        return launch(bias_activation_vec_kernel<activation::gelu>, blocks, block_threads, 0, stream, in, bias, out,
                      items, width);
      case activation::gelu_tanh:
        return launch(bias_activation_vec_kernel<activation::gelu_tanh>, blocks, block_threads, 0, stream, in, bias,
                      out, items, width);
    }
  }
  launch(bias_activation_kernel, blocks_for(count), block_threads, 0, stream, in, bias, out, count, width, act);
}

void activation_in_place(bf16* x, std::int64_t count, activation act, cudaStream_t stream) {
  if (count < 1) throw std::invalid_argument(cat("vit activation_in_place: ", count, " values"));
  const auto n = static_cast<std::uint64_t>(count);
  if (n % 8 == 0 && aligned16(x)) {
    const std::uint64_t items = n / 8;
    const unsigned blocks = blocks_for(items);
    switch (act) {
      case activation::quick_gelu:
        return launch(activation_in_place_vec_kernel<activation::quick_gelu>, blocks, block_threads, 0, stream, x, items);
      case activation::gelu:
        return launch(activation_in_place_vec_kernel<activation::gelu>, blocks, block_threads, 0, stream, x, items);
      case activation::gelu_tanh:
        return launch(activation_in_place_vec_kernel<activation::gelu_tanh>, blocks, block_threads, 0, stream, x, items);
    }
  }
  launch(activation_in_place_kernel, blocks_for(n), block_threads, 0, stream, x, n, act);
}

void embed(const float* patch_out, const bf16* patch_bias, const bf16* class_token, const bf16* position, bf16* x,
           std::int64_t images, std::int64_t tokens, std::int64_t width, cudaStream_t stream) {
  if (images < 1 || width < 1 || tokens < (class_token ? 2 : 1))
    throw std::invalid_argument(cat("vit embed: ", images, " images of ", tokens, " tokens of ", width));
  const embed_args a{patch_out, patch_bias, class_token, position, x, tokens, width};
  const auto count = static_cast<std::uint64_t>(images * tokens) * static_cast<std::uint64_t>(width);
  const bool vec = width % 8 == 0 && aligned16(x);
  const int per_item = vec ? 8 : 1;
  const std::uint64_t items = count / static_cast<std::uint64_t>(per_item);
  launch(embed_kernel, blocks_for(items), block_threads, 0, stream, a, items, per_item);
}

bool attention_persistent_supported(std::int64_t tokens, std::int64_t head_dim) {
  return head_dim == flash::persistent::head_dim && flash::persistent::covers(tokens) && wgmma_available();
}

void attention_persistent(const bf16* qkv, bf16* out, std::int64_t images, std::int64_t tokens, std::int64_t heads,
                          float scale, cudaStream_t stream, int max_blocks) {
  if (!attention_persistent_supported(tokens, flash::persistent::head_dim) ||
      !persistent_takes(qkv, out, images, tokens, heads, flash::persistent::head_dim))
    throw std::invalid_argument(cat("vit attention_persistent: ", images, " images, ", tokens, " tokens, ", heads,
                                    " heads of 64 (it takes 65 .. 264 tokens, at most 65535 images and heads, "
                                    "16-byte aligned qkv and out, on sm_90a code on a compute capability 9.0 "
                                    "device)"));
  flash::persistent::launch(qkv, out, images, tokens, heads, scale, stream, max_blocks);
}

bool attention_persistent_enabled() { return persistent_switch.on(); }

void override_attention_persistent(std::optional<bool> on) { persistent_switch.override(on); }

bool attention_on_tensor_cores(std::int64_t head_dim, std::int64_t images, std::int64_t heads) {
  if (head_dim != 16 && head_dim != 32 && head_dim != 64 && head_dim != 72 && head_dim != 80 && head_dim != 128)
    return false;
  if (images < 1 || images > 65535 || heads < 1 || heads > 65535) return false;
  return device_compute_major() >= 8;  // bf16 mma.sync and ldmatrix need sm_80
}

void attention(const bf16* qkv, bf16* out, std::int64_t images, std::int64_t tokens, std::int64_t heads,
               std::int64_t head_dim, float scale, cudaStream_t stream, attention_path path) {
  if (images < 1 || tokens < 1 || heads < 1 || head_dim < 1 || tokens > 0x7fffffff)
    throw std::invalid_argument(cat("vit attention: ", images, " images, ", tokens, " tokens, ", heads, " heads of ",
                                    head_dim));
  const bool tc = attention_on_tensor_cores(head_dim, images, heads);
  if (path == attention_path::tensor_cores && !tc)
    throw std::invalid_argument(cat("vit attention: the tensor-core kernel does not take head_dim ", head_dim, " (",
                                    images, " images, ", heads, " heads) on this device"));
  if (path != attention_path::cuda_cores && tc) {
    switch (head_dim) {
      case 16: return run_tensor_core_attention<16>(qkv, out, images, tokens, heads, scale, stream);
      case 32: return run_tensor_core_attention<32>(qkv, out, images, tokens, heads, scale, stream);
      case 64: return run_tensor_core_attention<64>(qkv, out, images, tokens, heads, scale, stream);
      case 72: return run_tensor_core_attention<72>(qkv, out, images, tokens, heads, scale, stream);
      case 80: return run_tensor_core_attention<80>(qkv, out, images, tokens, heads, scale, stream);
      case 128: return run_tensor_core_attention<128>(qkv, out, images, tokens, heads, scale, stream);
      default: break;
    }
  }
  if (head_dim > attention_max_head_dim || images > 65535 || heads > 65535)
    throw std::invalid_argument(cat("vit attention: head_dim ", head_dim, " (at most ", attention_max_head_dim,
                                    "), images ", images, " and heads ", heads, " (at most 65535 each)"));
  const dim3 grid(static_cast<unsigned>((tokens + cc_rows_per_block - 1) / cc_rows_per_block),
                  static_cast<unsigned>(heads), static_cast<unsigned>(images));
  launch(attention_cuda_core_kernel, grid, cc_rows_per_block * 32, 0, stream, qkv, out, tokens, heads * head_dim,
         static_cast<int>(head_dim), scale);
}

}  // namespace itera::kernels::vit
