// Kernels of the llm cuda engine: straightforward versions, written to be checked against the cpu
// reference first (tests/device/test_llm_device.cpp); tuning comes later.
#include "src/kernels/llm_kernels.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "itera/cuda/check.hpp"
#include "src/cuda/text.hpp"
#include "workloads/llm/weights.hpp"

namespace itera::kernels::llm {
namespace {

constexpr int block_threads = 256;
constexpr int attention_threads = 128;
constexpr std::size_t default_shared_bytes = 48 * 1024;

unsigned blocks_for(std::uint64_t work, std::uint64_t per_block = block_threads) {
  const std::uint64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<std::uint64_t>(blocks, 1, 65535ull * 32));
}

// Reductions over a block of at most 1024 threads; `scratch` holds 32 floats. Every thread gets
// the result. Ends with a barrier so scratch can be reused at once.
__device__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

__device__ float block_max(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < warps; ++w) m = fmaxf(m, scratch[w]);
  __syncthreads();
  return m;
}

// init_value as the host computes it. Its near_one draw, 1 + 0.1 u, would be contracted into one
// fused multiply-add by nvcc (one rounding where the host rounds twice), so it is spelled here with
// explicitly rounded operations; the normal draw has no multiply-add to contract (a sum, then one
// product; random_value's double product by 2^-23 is exact).
__device__ __forceinline__ float host_exact_init_value(int kind, std::uint64_t seed, std::uint64_t index) {
  if (static_cast<itera::llm::init_kind>(kind) == itera::llm::init_kind::near_one)
    return __fadd_rn(1.0f, __fmul_rn(0.1f, itera::gemm::random_value(seed, index)));
  return itera::llm::init_value(itera::llm::init_kind::normal, seed, index);
}

__global__ void fill_init_kernel(bf16* out, std::uint64_t count, int kind, std::uint64_t seed) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    out[i] = __float2bfloat16_rn(host_exact_init_value(kind, seed, i));
}

__global__ void embed_kernel(const std::int32_t* tokens, const bf16* table, float* x, std::int64_t hidden,
                             std::int64_t vocab) {
  const std::int64_t t = blockIdx.x;
  std::int64_t id = tokens[t];
  id = id < 0 ? 0 : (id >= vocab ? vocab - 1 : id);
  const bf16* row = table + id * hidden;
  for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x) x[t * hidden + i] = __bfloat162float(row[i]);
}

__global__ void rms_norm_kernel(const float* x, std::int64_t in_stride, std::int64_t in_offset, const bf16* weight,
                                bf16* out, std::int64_t hidden, float eps) {
  __shared__ float scratch[32];
  const std::int64_t r = blockIdx.x;
  const float* in = x + (r * in_stride + in_offset) * hidden;
  float ss = 0;
  for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x) ss += in[i] * in[i];
  ss = block_sum(ss, scratch);
  const float scale = rsqrtf(ss / static_cast<float>(hidden) + eps);
  for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x)
    out[r * hidden + i] = __float2bfloat16_rn(__bfloat162float(weight[i]) * (in[i] * scale));
}

__device__ __forceinline__ std::int64_t row_position(const std::int32_t* start, std::int64_t t, std::int64_t per_seq,
                                                     std::int64_t* seq) {
  *seq = t / per_seq;
  return static_cast<std::int64_t>(start[*seq]) + t % per_seq;
}

__global__ void bias_rope_store_kernel(bf16* qkv, const bf16* bias, const float* inv_freq, const std::int32_t* start,
                                       attention_shape s, bf16* k_cache, bf16* v_cache) {
  const std::int64_t t = blockIdx.x;
  std::int64_t seq = 0;
  const std::int64_t pos = row_position(start, t, s.rows_per_seq, &seq);
  const std::int64_t hd = s.head_dim, half = hd / 2;
  const std::int64_t q_dim = s.heads * hd, kv_dim = s.kv_heads * hd, width = q_dim + 2 * kv_dim;
  bf16* row = qkv + t * width;
  const bool in_cache = pos < s.max_context;  // a device-driven step past the context writes nothing
  const auto value = [&](std::int64_t col) {
    return __bfloat162float(row[col]) + (bias ? __bfloat162float(bias[col]) : 0.0f);
  };
  // q and k heads: one thread per rotated pair.
  const std::int64_t pairs = (s.heads + s.kv_heads) * half;
  for (std::int64_t idx = threadIdx.x; idx < pairs; idx += blockDim.x) {
    const std::int64_t head = idx / half, i = idx % half;
    const bool is_q = head < s.heads;
    const std::int64_t col = is_q ? head * hd : q_dim + (head - s.heads) * hd;
    const float x1 = value(col + i), x2 = value(col + i + half);
    // As the reference: the angle in fp32, its cosine and sine through double, rounded to fp32.
    const float angle = static_cast<float>(pos) * inv_freq[i];
    const float c = static_cast<float>(cos(static_cast<double>(angle)));
    const float sn = static_cast<float>(sin(static_cast<double>(angle)));
    const float y1 = x1 * c - x2 * sn, y2 = x2 * c + x1 * sn;
    if (is_q) {
      row[col + i] = __float2bfloat16_rn(y1);
      row[col + i + half] = __float2bfloat16_rn(y2);
    } else if (in_cache) {
      const std::int64_t kvh = head - s.heads;
      bf16* dst = k_cache + ((seq * s.kv_heads + kvh) * s.max_context + pos) * hd;
      dst[i] = __float2bfloat16_rn(y1);
      dst[i + half] = __float2bfloat16_rn(y2);
    }
  }
  if (!in_cache) return;
  for (std::int64_t idx = threadIdx.x; idx < kv_dim; idx += blockDim.x) {
    const std::int64_t kvh = idx / hd, d = idx % hd;
    v_cache[((seq * s.kv_heads + kvh) * s.max_context + pos) * hd + d] = __float2bfloat16_rn(value(q_dim + kv_dim + idx));
  }
}

__global__ void attention_kernel(const bf16* qkv, const bf16* k_cache, const bf16* v_cache, const std::int32_t* start,
                                 attention_shape s, float scale, bf16* out) {
  extern __shared__ float shared[];  // head_dim floats of q, then one score per key
  __shared__ float scratch[32];
  const std::int64_t t = blockIdx.x, head = blockIdx.y;
  std::int64_t seq = 0;
  const std::int64_t pos = row_position(start, t, s.rows_per_seq, &seq);
  const std::int64_t hd = s.head_dim, q_dim = s.heads * hd, width = q_dim + 2 * s.kv_heads * hd;
  const std::int64_t kvh = head / (s.heads / s.kv_heads);
  const std::int64_t keys = (pos < s.max_context ? pos : s.max_context - 1) + 1;
  float* q = shared;
  float* score = shared + hd;
  const bf16* q_in = qkv + t * width + head * hd;
  for (std::int64_t d = threadIdx.x; d < hd; d += blockDim.x) q[d] = __bfloat162float(q_in[d]);
  __syncthreads();

  const bf16* k = k_cache + (seq * s.kv_heads + kvh) * s.max_context * hd;
  const bf16* v = v_cache + (seq * s.kv_heads + kvh) * s.max_context * hd;
  float local_max = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    const bf16* kj = k + j * hd;
    float dot = 0;
    for (std::int64_t d = 0; d < hd; ++d) dot += q[d] * __bfloat162float(kj[d]);
    score[j] = dot * scale;
    local_max = fmaxf(local_max, score[j]);
  }
  const float m = block_max(local_max, scratch);
  float local_sum = 0;
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    const float e = expf(score[j] - m);
    score[j] = e;
    local_sum += e;
  }
  const float total = block_sum(local_sum, scratch);  // its barriers also publish score[]
  const float inv_total = 1.0f / total;
  for (std::int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0;
    for (std::int64_t j = 0; j < keys; ++j) acc += score[j] * __bfloat162float(v[j * hd + d]);
    out[t * q_dim + head * hd + d] = __float2bfloat16_rn(acc * inv_total);
  }
}

__global__ void swiglu_kernel(const bf16* gate_up, bf16* act, std::int64_t rows, std::int64_t inter) {
  const std::int64_t total = rows * inter;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const std::int64_t t = idx / inter, i = idx % inter;
    const float g = __bfloat162float(gate_up[t * 2 * inter + i]);
    const float u = __bfloat162float(gate_up[t * 2 * inter + inter + i]);
    act[idx] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
  }
}

__global__ void argmax_kernel(const float* logits, std::int64_t in_stride, std::int64_t in_offset, std::int64_t vocab,
                              std::int32_t* out) {
  __shared__ float best_value[block_threads];
  __shared__ std::int64_t best_index[block_threads];
  const float* row = logits + (static_cast<std::int64_t>(blockIdx.x) * in_stride + in_offset) * vocab;
  float bv = -INFINITY;
  std::int64_t bi = vocab;  // "none yet": larger than every index
  for (std::int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
    if (row[i] > bv || (bi == vocab && !(row[i] < bv))) {  // strictly larger, or the first value seen
      bv = row[i];
      bi = i;
    }
  best_value[threadIdx.x] = bv;
  best_index[threadIdx.x] = bi;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) {
      const float ov = best_value[threadIdx.x + half];
      const std::int64_t oi = best_index[threadIdx.x + half];
      const float mv = best_value[threadIdx.x];
      const std::int64_t mi = best_index[threadIdx.x];
      if (oi != vocab && (mi == vocab || ov > mv || (ov == mv && oi < mi))) {
        best_value[threadIdx.x] = ov;
        best_index[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<std::int32_t>(best_index[0] == vocab ? 0 : best_index[0]);
}

__global__ void advance_kernel(std::int32_t* length, std::int64_t count, std::int32_t by) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) length[i] += by;
}

std::size_t attention_shared_bytes(const attention_shape& s) {
  return static_cast<std::size_t>(s.head_dim + s.max_context) * sizeof(float);
}


// ---------------------------------------------------------------------------------------------
// gemv: R = gemv_rows_per_warp rows per warp, U 16-byte chunks (8 bf16) per row per lane per step,
// so R * U = 8 independent 16-byte weight loads in flight per lane before the first use.

constexpr int gemv_threads = 128;
constexpr int gemv_unroll = 4;

// Weights are read once per step: bypass L1 (no reuse), keep L1 for x.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Eight bf16 (one 16-byte chunk) widened to fp32: a bf16 is the high half of its fp32.
__device__ __forceinline__ void unpack8(const uint4& v, float* f) {
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f[2 * j] = __uint_as_float(words[j] << 16);
    f[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
  }
}

template <int T, bool F32>
__global__ void __launch_bounds__(gemv_threads) gemv_kernel(const bf16* __restrict__ w, int out_rows, int chunks,
                                                            const bf16* __restrict__ x, void* __restrict__ out,
                                                            float beta) {
  constexpr int R = gemv_rows_per_warp, U = gemv_unroll;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) >> 5);
  const int row0 = warp * R;
  if (row0 >= out_rows) return;  // whole warps only
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int row = min(row0 + r, out_rows - 1);  // a last partial warp reads a valid row, stores nothing
    wr[r] = reinterpret_cast<const uint4*>(w) + static_cast<std::size_t>(row) * chunks;
  }
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  float acc[R][T];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;

  for (int base = lane; base < chunks; base += 32 * U) {
    uint4 wv[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = base + 32 * u;
#pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = c < chunks ? load_stream(wr[r] + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = base + 32 * u;
      if (c < chunks) {
        float wf[R][8];
#pragma unroll
        for (int r = 0; r < R; ++r) unpack8(wv[u][r], wf[r]);
#pragma unroll
        for (int t = 0; t < T; ++t) {
          float xf[8];
          unpack8(__ldg(xr + static_cast<std::size_t>(t) * chunks + c), xf);
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[r][t] = fmaf(wf[r][j], xf[j], acc[r][t]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], o);
  // Every lane holds every sum; lane r * T + t (mod 32) stores (r, t): the stores spread over lanes.
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int row = row0 + r;
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (lane != (r * T + t) % 32 || row >= out_rows) continue;
      const std::size_t at = static_cast<std::size_t>(t) * out_rows + row;
      if constexpr (F32) {
        float* o = static_cast<float*>(out);
        o[at] = beta != 0.0f ? acc[r][t] + beta * o[at] : acc[r][t];
      } else {
        static_cast<bf16*>(out)[at] = __float2bfloat16_rn(acc[r][t]);
      }
    }
  }
}

template <int T>
void launch_gemv(const bf16* w, int out_rows, int chunks, const bf16* x, void* out, bool fp32_out, float beta,
                 cudaStream_t stream) {
  const std::uint64_t warps = (static_cast<std::uint64_t>(out_rows) + gemv_rows_per_warp - 1) / gemv_rows_per_warp;
  const auto blocks = static_cast<unsigned>((warps * 32 + gemv_threads - 1) / gemv_threads);
  if (fp32_out)
    gemv_kernel<T, true><<<blocks, gemv_threads, 0, stream>>>(w, out_rows, chunks, x, out, beta);
  else
    gemv_kernel<T, false><<<blocks, gemv_threads, 0, stream>>>(w, out_rows, chunks, x, out, beta);
}

}  // namespace

void fill_init_bf16(bf16* out, std::uint64_t count, int init_kind, std::uint64_t seed, cudaStream_t stream) {
  if (count == 0) return;
  fill_init_kernel<<<blocks_for(count), block_threads, 0, stream>>>(out, count, init_kind, seed);
  ITERA_CUDA_CHECK_LAUNCH();
}

void embed(const std::int32_t* tokens, const bf16* table, float* x, std::int64_t rows, std::int64_t hidden,
           std::int64_t vocab, cudaStream_t stream) {
  embed_kernel<<<static_cast<unsigned>(rows), block_threads, 0, stream>>>(tokens, table, x, hidden, vocab);
  ITERA_CUDA_CHECK_LAUNCH();
}

void rms_norm(const float* x, std::int64_t in_stride, std::int64_t in_offset, const bf16* weight, bf16* out,
              std::int64_t rows, std::int64_t hidden, float eps, cudaStream_t stream) {
  rms_norm_kernel<<<static_cast<unsigned>(rows), block_threads, 0, stream>>>(x, in_stride, in_offset, weight, out,
                                                                             hidden, eps);
  ITERA_CUDA_CHECK_LAUNCH();
}

void bias_rope_store(bf16* qkv, const bf16* bias, const float* inv_freq, const std::int32_t* start,
                     std::int64_t rows, const attention_shape& s, bf16* k_cache, bf16* v_cache, cudaStream_t stream) {
  bias_rope_store_kernel<<<static_cast<unsigned>(rows), block_threads, 0, stream>>>(qkv, bias, inv_freq, start, s,
                                                                                    k_cache, v_cache);
  ITERA_CUDA_CHECK_LAUNCH();
}

void prepare_attention(const attention_shape& s) {
  const std::size_t bytes = attention_shared_bytes(s);
  if (bytes <= default_shared_bytes) return;
  int device = 0, optin = 0;
  ITERA_CUDA_CHECK(cudaGetDevice(&device));
  ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  // The static scratch of the reductions (32 floats) comes on top of the dynamic part.
  if (bytes + 32 * sizeof(float) > static_cast<std::size_t>(optin))
    throw std::invalid_argument(itera::cuda::cat("llm attention: a context of ", s.max_context,
                                                 " tokens needs ", bytes, " bytes of shared memory for its scores; ",
                                                 "this device allows ", optin, " per block"));
  ITERA_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
}

void attention(const bf16* qkv, const bf16* k_cache, const bf16* v_cache, const std::int32_t* start,
               std::int64_t rows, const attention_shape& s, float scale, bf16* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(s.heads));
  attention_kernel<<<grid, attention_threads, attention_shared_bytes(s), stream>>>(qkv, k_cache, v_cache, start, s,
                                                                                   scale, out);
  ITERA_CUDA_CHECK_LAUNCH();
}

void swiglu(const bf16* gate_up, bf16* act, std::int64_t rows, std::int64_t intermediate, cudaStream_t stream) {
  const auto total = static_cast<std::uint64_t>(rows * intermediate);
  swiglu_kernel<<<blocks_for(total), block_threads, 0, stream>>>(gate_up, act, rows, intermediate);
  ITERA_CUDA_CHECK_LAUNCH();
}

void argmax(const float* logits, std::int64_t in_stride, std::int64_t in_offset, std::int64_t rows, std::int64_t vocab,
            std::int32_t* out, cudaStream_t stream) {
  argmax_kernel<<<static_cast<unsigned>(rows), block_threads, 0, stream>>>(logits, in_stride, in_offset, vocab, out);
  ITERA_CUDA_CHECK_LAUNCH();
}

void advance(std::int32_t* length, std::int64_t count, std::int32_t by, cudaStream_t stream) {
  advance_kernel<<<blocks_for(static_cast<std::uint64_t>(count)), block_threads, 0, stream>>>(length, count, by);
  ITERA_CUDA_CHECK_LAUNCH();
}

bool gemv_supported(std::int64_t tokens, std::int64_t in, const void* w, const void* x) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return tokens >= 1 && tokens <= gemv_max_tokens && in > 0 && in % 8 == 0 && in / 8 <= INT32_MAX && aligned(w) &&
         aligned(x);
}

void gemv(const bf16* w, std::int64_t out_rows, std::int64_t in, const bf16* x, std::int64_t tokens, void* out,
          bool fp32_out, float beta, cudaStream_t stream) {
  if (!gemv_supported(tokens, in, w, x))
    throw std::invalid_argument(itera::cuda::cat("llm gemv: tokens ", tokens, " (1..", gemv_max_tokens, "), in ", in,
                                                 " (a multiple of 8) and 16-byte aligned operands needed"));
  if (out_rows < 1 || out_rows * tokens > INT32_MAX)
    throw std::invalid_argument(itera::cuda::cat("llm gemv: ", out_rows, " output rows out of range"));
  if (!fp32_out && beta != 0.0f) throw std::invalid_argument("llm gemv: bf16 output takes beta = 0 only");
  const int rows = static_cast<int>(out_rows), chunks = static_cast<int>(in / 8);
  switch (tokens) {
    case 1: launch_gemv<1>(w, rows, chunks, x, out, fp32_out, beta, stream); break;
    case 2: launch_gemv<2>(w, rows, chunks, x, out, fp32_out, beta, stream); break;
    case 3: launch_gemv<3>(w, rows, chunks, x, out, fp32_out, beta, stream); break;
    case 4: launch_gemv<4>(w, rows, chunks, x, out, fp32_out, beta, stream); break;
    case 5: launch_gemv<5>(w, rows, chunks, x, out, fp32_out, beta, stream); break;
    case 6: launch_gemv<6>(w, rows, chunks, x, out, fp32_out, beta, stream); break;
    case 7: launch_gemv<7>(w, rows, chunks, x, out, fp32_out, beta, stream); break;
    default: launch_gemv<8>(w, rows, chunks, x, out, fp32_out, beta, stream); break;
  }
  ITERA_CUDA_CHECK_LAUNCH();
}

}  // namespace itera::kernels::llm
