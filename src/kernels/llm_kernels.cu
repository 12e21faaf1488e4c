// Kernels of the llm cuda engine: straightforward versions, written to be checked against the cpu
// reference first (tests/device/test_llm_device.cpp); tuning comes later.
#include "src/kernels/llm_kernels.cuh"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
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

constexpr int rms_threads = 512;
constexpr int rms_cached = 4;  // float4 chunks per thread kept in registers between the two passes

// One block per row. Vector path (hidden % 4 == 0, 16-byte aligned rows): each thread loads its
// chunks (all in flight at once) and keeps them for the scaling pass; chunks past
// rms_cached * blockDim are read again. Scalar path otherwise.
__global__ void __launch_bounds__(rms_threads) rms_norm_kernel(const float* x, std::int64_t in_stride,
                                                               std::int64_t in_offset, const bf16* weight, bf16* out,
                                                               std::int64_t hidden, float eps, bool vec) {
  __shared__ float scratch[32];
  const std::int64_t r = blockIdx.x;
  const float* in = x + (r * in_stride + in_offset) * hidden;
  bf16* o = out + r * hidden;
  float ss = 0;
  if (vec) {
    const std::int64_t n4 = hidden / 4;
    const auto* in4 = reinterpret_cast<const float4*>(in);
    float4 cache[rms_cached];
#pragma unroll
    for (int k = 0; k < rms_cached; ++k) {
      const std::int64_t c = threadIdx.x + static_cast<std::int64_t>(k) * blockDim.x;
      cache[k] = c < n4 ? in4[c] : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < rms_cached; ++k)
      ss += cache[k].x * cache[k].x + cache[k].y * cache[k].y + cache[k].z * cache[k].z + cache[k].w * cache[k].w;
    for (std::int64_t c = threadIdx.x + static_cast<std::int64_t>(rms_cached) * blockDim.x; c < n4; c += blockDim.x) {
      const float4 v = in4[c];
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = block_sum(ss, scratch);
    const float scale = rsqrtf(ss / static_cast<float>(hidden) + eps);
    const auto* w2 = reinterpret_cast<const __nv_bfloat162*>(weight);
    auto* o2 = reinterpret_cast<__nv_bfloat162*>(o);
    const auto store = [&](std::int64_t c, const float4& v) {
      const float2 wa = __bfloat1622float2(w2[2 * c]), wb = __bfloat1622float2(w2[2 * c + 1]);
      o2[2 * c] = __halves2bfloat162(__float2bfloat16_rn(wa.x * (v.x * scale)), __float2bfloat16_rn(wa.y * (v.y * scale)));
      o2[2 * c + 1] =
          __halves2bfloat162(__float2bfloat16_rn(wb.x * (v.z * scale)), __float2bfloat16_rn(wb.y * (v.w * scale)));
    };
#pragma unroll
    for (int k = 0; k < rms_cached; ++k) {
      const std::int64_t c = threadIdx.x + static_cast<std::int64_t>(k) * blockDim.x;
      if (c < n4) store(c, cache[k]);
    }
    for (std::int64_t c = threadIdx.x + static_cast<std::int64_t>(rms_cached) * blockDim.x; c < n4; c += blockDim.x)
      store(c, in4[c]);
    return;
  }
  for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x) ss += in[i] * in[i];
  ss = block_sum(ss, scratch);
  const float scale = rsqrtf(ss / static_cast<float>(hidden) + eps);
  for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x)
    o[i] = __float2bfloat16_rn(__bfloat162float(weight[i]) * (in[i] * scale));
}

__device__ __forceinline__ std::int64_t row_position(const std::int32_t* start, std::int64_t t, std::int64_t per_seq,
                                                     std::int64_t* seq) {
  *seq = t / per_seq;
  return static_cast<std::int64_t>(start[*seq]) + t % per_seq;
}

// Grid (row, slice): the row's work items, (heads + kv_heads) * half rotations then kv_dim value
// copies, spread over the slices' threads, one item per thread when the grid covers the row.
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
  const std::int64_t pairs = (s.heads + s.kv_heads) * half, items = pairs + kv_dim;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.y) * blockDim.x;
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; idx < items;
       idx += stride) {
    if (idx < pairs) {  // q and k heads: one rotated pair
      const std::int64_t head = idx / half, i = idx % half;
      const bool is_q = head < s.heads;
      if (!is_q && !in_cache) continue;
      const std::int64_t col = is_q ? head * hd : q_dim + (head - s.heads) * hd;
      const float x1 = value(col + i), x2 = value(col + i + half);
      // The angle in fp32 as the reference; its cosine and sine in fp32 (the reference rounds
      // double ones: within an ulp or two).
      const float angle = static_cast<float>(pos) * inv_freq[i];
      float sn = 0, c = 0;
      sincosf(angle, &sn, &c);
      const float y1 = x1 * c - x2 * sn, y2 = x2 * c + x1 * sn;
      if (is_q) {
        row[col + i] = __float2bfloat16_rn(y1);
        row[col + i + half] = __float2bfloat16_rn(y2);
      } else {
        const std::int64_t kvh = head - s.heads;
        bf16* dst = k_cache + ((seq * s.kv_heads + kvh) * s.max_context + pos) * hd;
        dst[i] = __float2bfloat16_rn(y1);
        dst[i + half] = __float2bfloat16_rn(y2);
      }
    } else if (in_cache) {  // a value copied into the cache
      const std::int64_t v_idx = idx - pairs, kvh = v_idx / hd, d = v_idx % hd;
      v_cache[((seq * s.kv_heads + kvh) * s.max_context + pos) * hd + d] = __float2bfloat16_rn(value(q_dim + kv_dim + v_idx));
    }
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

constexpr int argmax_threads = 1024;
constexpr int argmax_unroll = 8;

// (value, index) better than (bv, bi) for a thread scanning in increasing index order: strictly
// larger, or the first value seen (bi == none).
__device__ __forceinline__ void argmax_take(float v, std::int64_t i, std::int64_t none, float& bv, std::int64_t& bi) {
  if (v > bv || (bi == none && !(v < bv))) {
    bv = v;
    bi = i;
  }
}

// Merge of two partial results: the larger value, the smaller index on ties; "none" loses.
__device__ __forceinline__ void argmax_merge(float ov, std::int64_t oi, std::int64_t none, float& bv,
                                             std::int64_t& bi) {
  if (oi != none && (bi == none || ov > bv || (ov == bv && oi < bi))) {
    bv = ov;
    bi = oi;
  }
}

// One block of 1024 threads per row; 16-byte loads (argmax_unroll in flight per thread) when the
// row is 16-byte aligned and vocab % 4 == 0, scalar loads otherwise; warp shuffles then one
// shared-memory pass to merge.
__global__ void __launch_bounds__(argmax_threads) argmax_kernel(const float* logits, std::int64_t in_stride,
                                                                std::int64_t in_offset, std::int64_t vocab,
                                                                std::int32_t* out, bool vec) {
  __shared__ float warp_value[32];
  __shared__ std::int64_t warp_index[32];
  const float* row = logits + (static_cast<std::int64_t>(blockIdx.x) * in_stride + in_offset) * vocab;
  const std::int64_t none = vocab;  // "none yet": larger than every index
  float bv = -INFINITY;
  std::int64_t bi = none;
  if (vec) {
    const auto* row4 = reinterpret_cast<const float4*>(row);
    const std::int64_t n4 = vocab / 4, step = static_cast<std::int64_t>(blockDim.x);
    for (std::int64_t base = threadIdx.x; base < n4; base += step * argmax_unroll) {
      float4 v[argmax_unroll];
#pragma unroll
      for (int u = 0; u < argmax_unroll; ++u) {
        const std::int64_t c = base + u * step;
        v[u] = c < n4 ? __ldg(row4 + c) : make_float4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < argmax_unroll; ++u) {
        const std::int64_t c = base + u * step;
        if (c < n4) {
          argmax_take(v[u].x, 4 * c, none, bv, bi);
          argmax_take(v[u].y, 4 * c + 1, none, bv, bi);
          argmax_take(v[u].z, 4 * c + 2, none, bv, bi);
          argmax_take(v[u].w, 4 * c + 3, none, bv, bi);
        }
      }
    }
  } else {
    for (std::int64_t i = threadIdx.x; i < vocab; i += blockDim.x) argmax_take(row[i], i, none, bv, bi);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const auto oi = static_cast<std::int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(bi), o));
    argmax_merge(ov, oi, none, bv, bi);
  }
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  if (lane == 0) {
    warp_value[warp] = bv;
    warp_index[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int warps = static_cast<int>((blockDim.x + 31) >> 5);
    for (int w = 1; w < warps; ++w) argmax_merge(warp_value[w], warp_index[w], none, bv, bi);
    out[blockIdx.x] = static_cast<std::int32_t>(bi == none ? 0 : bi);
  }
}

__global__ void advance_kernel(std::int32_t* length, std::int64_t count, std::int32_t by, std::int32_t limit) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) length[i] = min(length[i] + by, limit);
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

// Split-K gemv for few output rows: a block of gemv_split_threads (8 warps) holds 8 / split groups
// of R rows; the split warps of a group each stream a contiguous slice of K (a whole number of
// 32-chunk steps where possible), then the group's partial sums are added in shared memory in
// slice order (deterministic), and one thread per (row, token) writes the result.
constexpr int gemv_split_threads = 256;
constexpr int gemv_split_warps = gemv_split_threads / 32;
// Warps wanted in flight: about 4 x 132 SMs x 16 warps on an H200.
constexpr std::uint64_t gemv_target_warps = 8192;
// Fewest 16-byte chunks per lane-row a slice keeps (one full unrolled step: 32 lanes x U).
constexpr int gemv_min_slice = 32 * gemv_unroll;

template <int T, bool F32>
__global__ void __launch_bounds__(gemv_split_threads, 1)
    gemv_split_kernel(const bf16* __restrict__ w, int out_rows, int chunks, int split, int slice,
                      const bf16* __restrict__ x, void* __restrict__ out, float beta) {
  constexpr int R = gemv_rows_per_warp, U = gemv_unroll, RT = R * T;
  __shared__ float partial[gemv_split_warps][RT];
  const int lane = static_cast<int>(threadIdx.x & 31), wib = static_cast<int>(threadIdx.x >> 5);
  const int groups = gemv_split_warps / split;
  const int group = wib / split, part = wib % split;
  const int row0 = (static_cast<int>(blockIdx.x) * groups + group) * R;
  const int cbeg = min(chunks, part * slice), cend = min(chunks, cbeg + slice);
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int row = min(row0 + r, out_rows - 1);  // rows past the end read a valid row, store nothing
    wr[r] = reinterpret_cast<const uint4*>(w) + static_cast<std::size_t>(row) * chunks;
  }
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  float acc[R][T];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;

  for (int base = cbeg + lane; base < cend; base += 32 * U) {
    uint4 wv[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = base + 32 * u;
#pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = c < cend ? load_stream(wr[r] + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = base + 32 * u;
      if (c < cend) {
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
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < T; ++t) partial[wib][r * T + t] = acc[r][t];
  }
  __syncthreads();
  const int idx = static_cast<int>(threadIdx.x);
  if (idx >= groups * RT) return;
  const int g = idx / RT, k = idx % RT, r = k / T, t = k % T;
  const int row = (static_cast<int>(blockIdx.x) * groups + g) * R + r;
  if (row >= out_rows) return;
  float sum = partial[g * split][k];
  for (int p = 1; p < split; ++p) sum += partial[g * split + p][k];
  const std::size_t at = static_cast<std::size_t>(t) * out_rows + row;
  if constexpr (F32) {
    float* o = static_cast<float*>(out);
    o[at] = beta != 0.0f ? sum + beta * o[at] : sum;
  } else {
    static_cast<bf16*>(out)[at] = __float2bfloat16_rn(sum);
  }
}

// Warps split K when the one-warp-per-R-rows grid is too small to keep enough bytes in flight:
// the smallest power of two (at most 8) reaching gemv_target_warps, while each slice keeps at
// least one full unrolled step. 1: the plain kernel.
int gemv_split_for(int out_rows, int chunks) {
  const std::uint64_t warps = (static_cast<std::uint64_t>(out_rows) + gemv_rows_per_warp - 1) / gemv_rows_per_warp;
  int split = 1;
  while (split < gemv_split_warps && warps * static_cast<std::uint64_t>(split) < gemv_target_warps &&
         chunks / (2 * split) >= gemv_min_slice)
    split *= 2;
  return split;
}

template <int T>
void launch_gemv(const bf16* w, int out_rows, int chunks, const bf16* x, void* out, bool fp32_out, float beta,
                 cudaStream_t stream) {
  const std::uint64_t warps = (static_cast<std::uint64_t>(out_rows) + gemv_rows_per_warp - 1) / gemv_rows_per_warp;
  if (const int split = gemv_split_for(out_rows, chunks); split > 1) {
    // Slices of whole 32-chunk steps (every lane the same trip count), the last one shorter.
    const int slice = ((chunks + split - 1) / split + 31) / 32 * 32;
    const auto per_block = static_cast<std::uint64_t>(gemv_split_warps / split);
    const auto blocks = static_cast<unsigned>((warps + per_block - 1) / per_block);
    if (fp32_out)
      gemv_split_kernel<T, true><<<blocks, gemv_split_threads, 0, stream>>>(w, out_rows, chunks, split, slice, x, out,
                                                                            beta);
    else
      gemv_split_kernel<T, false><<<blocks, gemv_split_threads, 0, stream>>>(w, out_rows, chunks, split, slice, x,
                                                                             out, beta);
    return;
  }
  const auto blocks = static_cast<unsigned>((warps * 32 + gemv_threads - 1) / gemv_threads);
  if (fp32_out)
    gemv_kernel<T, true><<<blocks, gemv_threads, 0, stream>>>(w, out_rows, chunks, x, out, beta);
  else
    gemv_kernel<T, false><<<blocks, gemv_threads, 0, stream>>>(w, out_rows, chunks, x, out, beta);
}

// ---------------------------------------------------------------------------------------------
// Decode attention (flash-decoding). One cluster of decode_splits blocks per (row, kv head): block z
// takes a contiguous slice of the row's keys and serves the whole group of query heads sharing the
// kv head. Head dims split over G = head_dim / V lanes (V bf16 per lane, one 8- or 16-byte load),
// so a warp handles 32 / G keys side by side, U (decode_unroll) such passes in flight per iteration. Each
// (warp, key lane-group) keeps an online softmax state (max, sum, V-weighted accumulator) per
// query head; the block merges its states in shared memory, then block 0 of the cluster merges
// the blocks' through distributed shared memory and writes the output. Merges run in a fixed
// order, so results are deterministic.

constexpr int decode_threads = 256;
constexpr int decode_warps = decode_threads / 32;
// Cluster size: the most blocks one row's keys are split over. Measured on the H200 (llama-3.1-8b,
// batch 1, context ~529, attention per decode step over 32 layers): 4 blocks 711 us, 8 blocks
// 499 us, 16 blocks 815 us (above 8 also needs cudaFuncAttributeNonPortableClusterSizeAllowed).
// Splitting pays only while the (row, kv head) pairs alone leave SMs idle: at batch 64 the 8-way
// split ran 4096 blocks of 72 keys each and spent its time in merges (16.6 ms a step, 295 GB/s),
// so the launch takes the fewest splits (1, 2, 4 or 8) that give at least two blocks per SM.
constexpr int decode_splits = 8;

int decode_splits_for(std::int64_t pairs) {
  static const int sms = [] {
    int device = 0, count = 0;
    ITERA_CUDA_CHECK(cudaGetDevice(&device));
    ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  int splits = 1;
  while (splits < decode_splits && pairs * splits < 2 * static_cast<std::int64_t>(sms)) splits *= 2;
  return splits;
}
// Key passes in flight per warp iteration. 8 for head_dim <= 128 was tried and measured slower on
// the H200 (llama-3.1-8b, context ~529: 19.0 against 15.6 us per layer, with more registers), so 4.
template <int V>
constexpr int decode_unroll = 4;
constexpr int decode_max_group = 8;

template <int V>
struct bf16_vec;
template <>
struct bf16_vec<4> {
  using type = uint2;
};
template <>
struct bf16_vec<8> {
  using type = uint4;
};

template <int V>
__device__ __forceinline__ void load_bf16(const bf16* p, float* f) {
  if constexpr (V == 4) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    f[0] = __uint_as_float(v.x << 16);
    f[1] = __uint_as_float(v.x & 0xffff0000u);
    f[2] = __uint_as_float(v.y << 16);
    f[3] = __uint_as_float(v.y & 0xffff0000u);
  } else {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    unpack8(v, f);
  }
}

// Shared memory of the decode kernel: per block state (warps * 32/G states x group x (head_dim + 2)
// floats), then the block's merged state (group x (head_dim + 2) floats).
std::size_t decode_shared_bytes(std::int64_t head_dim, std::int64_t group, int lanes_per_key) {
  const auto states = static_cast<std::size_t>(decode_warps * (32 / lanes_per_key));
  return (states + 1) * static_cast<std::size_t>(group) * static_cast<std::size_t>(head_dim + 2) * sizeof(float);
}

template <int V, int G>
// Launched with a cluster of decode_splits blocks along z (cudaLaunchKernelEx in attention()): the
// cluster is a launch attribute, not __cluster_dims__, which sm_80 and sm_89 builds refuse.
__global__ void __launch_bounds__(decode_threads)
    decode_attention_kernel(const bf16* __restrict__ qkv, const bf16* __restrict__ k_cache,
                            const bf16* __restrict__ v_cache, const std::int32_t* __restrict__ start, attention_shape s,
                            float scale, bf16* __restrict__ out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  // Thread block clusters exist from sm_90 on; decode_kernel_for never picks this kernel below.
  __trap();
#else
  namespace cg = cooperative_groups;
  constexpr int HD = V * G, KPW = 32 / G, U = decode_unroll<V>, MG = decode_max_group, STATES = decode_warps * KPW;
  extern __shared__ float shared[];
  cg::cluster_group cluster = cg::this_cluster();
  const int group = static_cast<int>(s.heads / s.kv_heads);
  const std::int64_t t = blockIdx.x, kvh = blockIdx.y;
  std::int64_t seq = 0;
  const std::int64_t pos = row_position(start, t, s.rows_per_seq, &seq);
  const std::int64_t keys = (pos < s.max_context ? pos : s.max_context - 1) + 1;
  const int splits = static_cast<int>(gridDim.z);  // the cluster: blocks sharing this row's keys
  const std::int64_t chunk = (keys + splits - 1) / splits;
  const std::int64_t begin = min(keys, static_cast<std::int64_t>(blockIdx.z) * chunk);
  const std::int64_t end = min(keys, begin + chunk);
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int sub = lane / G, li = lane % G;  // key lane-group, lane within it
  const std::int64_t q_dim = s.heads * HD, width = q_dim + 2 * s.kv_heads * HD;

  float q[MG][V];
#pragma unroll
  for (int g = 0; g < MG; ++g) {
    if (g < group) {
      load_bf16<V>(qkv + t * width + (kvh * group + g) * HD + li * V, q[g]);
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) q[g][v] = 0.0f;
    }
  }
  float m[MG], l[MG], acc[MG][V];
#pragma unroll
  for (int g = 0; g < MG; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int v = 0; v < V; ++v) acc[g][v] = 0.0f;
  }

  const bf16* kb = k_cache + (seq * s.kv_heads + kvh) * s.max_context * HD + li * V;
  const bf16* vb = v_cache + (seq * s.kv_heads + kvh) * s.max_context * HD + li * V;
  for (std::int64_t j0 = begin + static_cast<std::int64_t>(warp) * KPW * U; j0 < end;
       j0 += static_cast<std::int64_t>(decode_warps) * KPW * U) {
    float kf[U][V], vf[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::int64_t j = j0 + u * KPW + sub;
      if (j < end) {
        load_bf16<V>(kb + j * HD, kf[u]);
        load_bf16<V>(vb + j * HD, vf[u]);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) kf[u][v] = vf[u][v] = 0.0f;
      }
    }
#pragma unroll
    for (int g = 0; g < MG; ++g) {
      if (g >= group) continue;
      float sc[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float d = 0.0f;
#pragma unroll
        for (int v = 0; v < V; ++v) d = fmaf(q[g][v], kf[u][v], d);
#pragma unroll
        for (int o = G / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        sc[u] = j0 + u * KPW + sub < end ? d * scale : -INFINITY;
      }
      float mc = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) mc = fmaxf(mc, sc[u]);
      if (mc == -INFINITY) continue;  // no key yet for this lane-group
      const float corr = expf(m[g] - mc);
      m[g] = mc;
      l[g] *= corr;
#pragma unroll
      for (int v = 0; v < V; ++v) acc[g][v] *= corr;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float p = expf(sc[u] - mc);
        l[g] += p;
#pragma unroll
        for (int v = 0; v < V; ++v) acc[g][v] = fmaf(p, vf[u][v], acc[g][v]);
      }
    }
  }

  // This block's states: [state][g][HD + 2] (accumulator, then max and sum).
  const int state = warp * KPW + sub;
#pragma unroll
  for (int g = 0; g < MG; ++g) {
    if (g >= group) continue;
    float* st = shared + (static_cast<std::size_t>(state) * group + g) * (HD + 2);
#pragma unroll
    for (int v = 0; v < V; ++v) st[li * V + v] = acc[g][v];
    if (li == 0) {
      st[HD] = m[g];
      st[HD + 1] = l[g];
    }
  }
  __syncthreads();
  float* merged = shared + static_cast<std::size_t>(STATES) * group * (HD + 2);
  for (int idx = static_cast<int>(threadIdx.x); idx < group * (HD + 2); idx += decode_threads) {
    const int g = idx / (HD + 2), d = idx % (HD + 2);
    float mx = -INFINITY;
    for (int k = 0; k < STATES; ++k) mx = fmaxf(mx, shared[(static_cast<std::size_t>(k) * group + g) * (HD + 2) + HD]);
    float r = mx;
    if (d != HD) {
      r = 0.0f;
      for (int k = 0; k < STATES; ++k) {
        const float* st = shared + (static_cast<std::size_t>(k) * group + g) * (HD + 2);
        if (st[HD] != -INFINITY) r = fmaf(expf(st[HD] - mx), st[d], r);
      }
    }
    merged[idx] = r;
  }
  cluster.sync();  // every block's merged state is written and visible across the cluster
  if (cluster.block_rank() == 0) {
    for (int idx = static_cast<int>(threadIdx.x); idx < group * HD; idx += decode_threads) {
      const int g = idx / HD, d = idx % HD;
      float mx = -INFINITY;
      for (int b = 0; b < splits; ++b) {
        const float* other = cluster.map_shared_rank(merged, b);
        mx = fmaxf(mx, other[g * (HD + 2) + HD]);
      }
      float num = 0.0f, den = 0.0f;
      for (int b = 0; b < splits; ++b) {
        const float* other = cluster.map_shared_rank(merged, b) + g * (HD + 2);
        if (other[HD] == -INFINITY) continue;
        const float w = expf(other[HD] - mx);
        num = fmaf(w, other[d], num);
        den = fmaf(w, other[HD + 1], den);
      }
      out[t * q_dim + (kvh * group + g) * HD + d] = __float2bfloat16_rn(num / den);
    }
  }
  cluster.sync();  // keep every block's shared memory alive until block 0 has read it
#endif
}

using decode_fn = void (*)(const bf16*, const bf16*, const bf16*, const std::int32_t*, attention_shape, float, bf16*);

struct decode_choice {
  decode_fn fn = nullptr;
  int lanes_per_key = 0;
};

// Whether the current device runs thread block clusters (compute capability 9.0 and later).
bool device_has_clusters() {
  constexpr int max_devices = 64;
  static std::atomic<int> major[max_devices] = {};  // 0: not asked yet
  int device = 0;
  ITERA_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= max_devices) return false;
  int m = major[device].load(std::memory_order_relaxed);
  if (m == 0) {
    ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, device));
    major[device].store(m, std::memory_order_relaxed);
  }
  return m >= 9;
}

// The decode kernel for a shape, or none (fn null) when the shape is outside what it handles or
// the device has no clusters (A100, L4, L40S: the general attention kernel runs there). `wide`:
// the launch has a block per (row, kv head) and no key split (a large batch); head dims 64 and 128
// then take 16-byte loads and fewer lanes per key (fewer shuffle levels per key, more keys side by
// side), which the latency-bound small grid of batch 1 did not favour.
decode_choice decode_kernel_for(const attention_shape& s, bool wide = false) {
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0 || s.heads / s.kv_heads > decode_max_group) return {};
  if (!device_has_clusters()) return {};
  if (wide && s.head_dim == 64) return {decode_attention_kernel<8, 8>, 8};
  if (wide && s.head_dim == 128) return {decode_attention_kernel<8, 16>, 16};
  switch (s.head_dim) {
    case 16: return {decode_attention_kernel<4, 4>, 4};
    case 32: return {decode_attention_kernel<4, 8>, 8};
    case 64: return {decode_attention_kernel<4, 16>, 16};
    case 128: return {decode_attention_kernel<4, 32>, 32};
    case 256: return {decode_attention_kernel<8, 32>, 32};
    default: return {};
  }
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
  const auto aligned16 = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  // Rows start at multiples of hidden floats: with hidden % 4 == 0 every row keeps x's alignment.
  const bool vec = hidden % 4 == 0 && aligned16(x) && aligned16(weight) && aligned16(out);
  rms_norm_kernel<<<static_cast<unsigned>(rows), rms_threads, 0, stream>>>(x, in_stride, in_offset, weight, out,
                                                                           hidden, eps, vec);
  ITERA_CUDA_CHECK_LAUNCH();
}

void bias_rope_store(bf16* qkv, const bf16* bias, const float* inv_freq, const std::int32_t* start,
                     std::int64_t rows, const attention_shape& s, bf16* k_cache, bf16* v_cache, cudaStream_t stream) {
  const std::int64_t items = (s.heads + s.kv_heads) * (s.head_dim / 2) + s.kv_heads * s.head_dim;
  const dim3 grid(static_cast<unsigned>(rows), std::clamp<unsigned>(blocks_for(static_cast<std::uint64_t>(items)), 1, 64));
  bias_rope_store_kernel<<<grid, block_threads, 0, stream>>>(qkv, bias, inv_freq, start, s, k_cache, v_cache);
  ITERA_CUDA_CHECK_LAUNCH();
}

void prepare_attention(const attention_shape& s) {
  for (const bool wide : {false, true}) {
    if (const decode_choice d = decode_kernel_for(s, wide); d.fn) {
      const std::size_t dbytes = decode_shared_bytes(s.head_dim, s.heads / s.kv_heads, d.lanes_per_key);
      if (dbytes > default_shared_bytes)
        ITERA_CUDA_CHECK(
            cudaFuncSetAttribute(d.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dbytes)));
    }
  }
  const std::size_t bytes = attention_shared_bytes(s);
  // The general kernel runs only what neither the decode nor the prefill kernel takes.
  if (decode_kernel_for(s).fn && prefill_attention_supported(s)) return;
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
  const int splits = decode_splits_for(rows * s.kv_heads);
  if (const decode_choice d = decode_kernel_for(s, splits == 1); d.fn && s.rows_per_seq == 1) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(rows), static_cast<unsigned>(s.kv_heads), static_cast<unsigned>(splits));
    config.blockDim = dim3(decode_threads);
    config.dynamicSmemBytes = decode_shared_bytes(s.head_dim, s.heads / s.kv_heads, d.lanes_per_key);
    config.stream = stream;
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 1;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = static_cast<unsigned>(splits);
    config.attrs = &cluster;
    config.numAttrs = 1;
    ITERA_CUDA_CHECK(cudaLaunchKernelEx(&config, d.fn, qkv, k_cache, v_cache, start, s, scale, out));
    return;
  }
  if (s.rows_per_seq > 1 && prefill_attention(qkv, k_cache, v_cache, start, rows, s, scale, out, stream)) return;
  if (attention_shared_bytes(s) + 32 * sizeof(float) > 227 * 1024)
    throw std::invalid_argument(itera::cuda::cat("llm attention: no kernel takes head_dim ", s.head_dim,
                                                 " at a context of ", s.max_context, " tokens"));
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
  const bool vec = vocab % 4 == 0 && reinterpret_cast<std::uintptr_t>(logits) % 16 == 0;
  argmax_kernel<<<static_cast<unsigned>(rows), argmax_threads, 0, stream>>>(logits, in_stride, in_offset, vocab, out,
                                                                            vec);
  ITERA_CUDA_CHECK_LAUNCH();
}

void advance(std::int32_t* length, std::int64_t count, std::int32_t by, std::int32_t limit, cudaStream_t stream) {
  advance_kernel<<<blocks_for(static_cast<std::uint64_t>(count)), block_threads, 0, stream>>>(length, count, by, limit);
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
