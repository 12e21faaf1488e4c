// Kernels of the llm cuda engine (llm_kernels.cuh) but the attention ones (llm_prefill_attention.cu,
// llm_decode_attention.cu): embedding, norms, RoPE and the cache store, the general attention,
// SwiGLU, argmax, the gemv (bf16 and fp8), the gemv fused with the norm or the SwiGLU before it,
// and the fp8 conversions. Each is checked against the cpu reference (tests/device/
// test_llm_device.cpp), the fused ones against the unfused pairs (test_llm_fused_gemv.cpp);
// docs/perf records what each change measured. Every kernel that reads or writes 16-bit
// activations is a template on their type A (common.cuh: bf16 or fp16), instantiated for both at
// the end of the file; the bf16 instances are the kernels as they were measured.
#include "src/kernels/llm_kernels.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "itera/cuda/check.hpp"
#include "src/cuda/text.hpp"
#include "src/kernels/common.cuh"
#include "src/kernels/launch.cuh"
#include "src/kernels/llm_formulas.cuh"
#include "src/kernels/mma.cuh"
#include "workloads/llm/weights.hpp"

namespace itera::kernels::llm {
namespace {

constexpr int attention_threads = 128;
constexpr std::size_t default_shared_bytes = 48 * 1024;

// init_value as the host computes it. Its near_one draw, 1 + 0.1 u, would be contracted into one
// fused multiply-add by nvcc (one rounding where the host rounds twice), so it is spelled here with
// explicitly rounded operations; the normal draw has no multiply-add to contract (a sum, then one
// product; random_value's double product by 2^-23 is exact).
__device__ __forceinline__ float host_exact_init_value(int kind, std::uint64_t seed, std::uint64_t index) {
  if (static_cast<itera::llm::init_kind>(kind) == itera::llm::init_kind::near_one)
    return __fadd_rn(1.0f, __fmul_rn(0.1f, itera::gemm::random_value(seed, index)));
  return itera::llm::init_value(itera::llm::init_kind::normal, seed, index);
}

// Stored: the weights' 16-bit type the value is rounded to first; A: the type it is held in (a
// weight stored in the other 16-bit type is rounded a second time, as the host's upload does).
template <class Stored, class A>
__global__ void fill_init_kernel(A* out, std::uint64_t count, int kind, std::uint64_t seed) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    if constexpr (std::is_same_v<Stored, A>)
      out[i] = from_float<A>(host_exact_init_value(kind, seed, i));
    else
      out[i] = from_float<A>(to_float(from_float<Stored>(host_exact_init_value(kind, seed, i))));
  }
}

// A block per token. Vector path (hidden % 8 == 0, 16-byte aligned rows): each thread's 16-byte
// loads are all issued before the first store (the scalar loop waited for each load in turn: one
// llama-3.1-8b row took 6.9 us of a batch-1 step, H200: docs/perf/2026-12-01-graph-kernels.md).
template <class A, int U = 2>
__global__ void embed_kernel(const std::int32_t* tokens, const A* __restrict__ table, float* __restrict__ x,
                             std::int64_t hidden, std::int64_t vocab, bool vec, words clear) {
  grid_dependents_launch();
  grid_dependency_wait();
  const std::int64_t t = blockIdx.x;
  if (t == 0)
    for (int i = static_cast<int>(threadIdx.x); i < clear.count; i += static_cast<int>(blockDim.x)) clear.at[i] = 0;
  std::int64_t id = tokens[t];
  id = id < 0 ? 0 : (id >= vocab ? vocab - 1 : id);
  const A* row = table + id * hidden;
  if (!vec) {
    for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x) x[t * hidden + i] = to_float(row[i]);
    return;
  }
  const auto* row8 = reinterpret_cast<const uint4*>(row);
  auto* out4 = reinterpret_cast<float4*>(x + t * hidden);
  const std::int64_t chunks = hidden / 8, step = blockDim.x;
  for (std::int64_t base = threadIdx.x; base < chunks; base += step * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + u * step < chunks) v[u] = __ldg(row8 + base + u * step);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (const std::int64_t c = base + u * step; c < chunks) {
        float f[8];
        unpack8<A>(v[u], f);
        out4[2 * c] = make_float4(f[0], f[1], f[2], f[3]);
        out4[2 * c + 1] = make_float4(f[4], f[5], f[6], f[7]);
      }
  }
}

__global__ void scatter_rows_kernel(const std::int32_t* rows, const bf16* values, float* x, std::int64_t hidden) {
  grid_dependents_launch();
  grid_dependency_wait();
  const std::int64_t i = blockIdx.x;
  const bf16* in = values + i * hidden;
  float* out = x + static_cast<std::int64_t>(rows[i]) * hidden;
  for (std::int64_t j = threadIdx.x; j < hidden; j += blockDim.x) out[j] = __bfloat162float(in[j]);
}

constexpr int rms_threads = 512;  // the most a row takes
constexpr int rms_cached = 4;  // float4 chunks per thread kept in registers between the two passes

// One block per row. Vector path (hidden % 4 == 0, 16-byte aligned rows): each thread loads its
// chunks (all in flight at once) and keeps them for the scaling pass; chunks past
// rms_cached * blockDim are read again. Scalar path otherwise. With parts (add_rms_norm: in_stride
// 1, offset 0), each element of the row first gets the parts' sums added and is stored back into
// x, by the thread that reads it again (keep_x: with the L2's evict_last priority, vector path);
// without a weight the kernel stops there.
template <class A>
__global__ void __launch_bounds__(rms_threads) rms_norm_kernel(const float* x, std::int64_t in_stride,
                                                               std::int64_t in_offset, const A* weight, A* out,
                                                               std::int64_t hidden, float eps, bool vec,
                                                               residual_parts parts, bool keep_x) {
  grid_dependents_launch();
  grid_dependency_wait();
  __shared__ float scratch[32];
  const std::int64_t r = blockIdx.x;
  const float* in = x + (r * in_stride + in_offset) * hidden;
  A* o = out ? out + r * hidden : nullptr;
  float* const back = parts.count > 0 ? const_cast<float*>(in) : nullptr;  // x itself (add_rms_norm)
  const float* const part0 = parts.sums ? parts.sums + r * hidden : nullptr;
  float ss = 0;
  if (vec) {
    const std::int64_t n4 = hidden / 4;
    const auto* in4 = reinterpret_cast<const float4*>(in);
    // x's chunk c stored back (kept in the L2 where keep_x).
    const auto store_back = [&](std::int64_t c, const float4& v) {
      if (keep_x) store_evict_last(reinterpret_cast<float4*>(back) + c, v);
      else reinterpret_cast<float4*>(back)[c] = v;
    };
    // x's chunk c with the parts added (in part order) and stored back.
    const auto added = [&](std::int64_t c, float4 v) {
      for (int p = 0; p < parts.count; ++p) {
        const float4 d = __ldg(reinterpret_cast<const float4*>(part0 + p * parts.stride) + c);
        v.x += d.x;
        v.y += d.y;
        v.z += d.z;
        v.w += d.w;
      }
      store_back(c, v);
      return v;
    };
    // Every load of x's chunks and then of each part's issued before any store (a store to x
    // between them would hold the next loads back: the compiler cannot tell x from the parts).
    // The norm weight of the kept chunks too, ahead of the block's reduction rather than after it.
    const auto* w2 = reinterpret_cast<const pair_of<A>*>(weight);
    float4 cache[rms_cached];
    pair_of<A> kept_w[rms_cached][2];
#pragma unroll
    for (int k = 0; k < rms_cached; ++k) {
      const std::int64_t c = threadIdx.x + static_cast<std::int64_t>(k) * blockDim.x;
      cache[k] = c < n4 ? in4[c] : make_float4(0, 0, 0, 0);
      if (weight && c < n4) {
        kept_w[k][0] = w2[2 * c];
        kept_w[k][1] = w2[2 * c + 1];
      }
    }
    if (back) {
      for (int p = 0; p < parts.count; ++p) {
        const auto* part4 = reinterpret_cast<const float4*>(part0 + p * parts.stride);
        float4 d[rms_cached];
#pragma unroll
        for (int k = 0; k < rms_cached; ++k) {
          const std::int64_t c = threadIdx.x + static_cast<std::int64_t>(k) * blockDim.x;
          d[k] = c < n4 ? __ldg(part4 + c) : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int k = 0; k < rms_cached; ++k) {
          cache[k].x += d[k].x;
          cache[k].y += d[k].y;
          cache[k].z += d[k].z;
          cache[k].w += d[k].w;
        }
      }
#pragma unroll
      for (int k = 0; k < rms_cached; ++k) {
        const std::int64_t c = threadIdx.x + static_cast<std::int64_t>(k) * blockDim.x;
        if (c < n4) store_back(c, cache[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < rms_cached; ++k)
      ss += cache[k].x * cache[k].x + cache[k].y * cache[k].y + cache[k].z * cache[k].z + cache[k].w * cache[k].w;
    for (std::int64_t c = threadIdx.x + static_cast<std::int64_t>(rms_cached) * blockDim.x; c < n4; c += blockDim.x) {
      const float4 v = back ? added(c, in4[c]) : in4[c];
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    if (!weight) return;
    ss = block_sum(ss, scratch);
    const float scale = rms_scale(ss, hidden, eps);
    auto* o2 = reinterpret_cast<pair_of<A>*>(o);
    const auto store = [&](std::int64_t c, const float4& v, const pair_of<A>& w01, const pair_of<A>& w23) {
      const float2 wa = to_float2(w01), wb = to_float2(w23);
      o2[2 * c] = make_pair<A>(rms_apply<A>(wa.x, v.x, scale), rms_apply<A>(wa.y, v.y, scale));
      o2[2 * c + 1] = make_pair<A>(rms_apply<A>(wb.x, v.z, scale), rms_apply<A>(wb.y, v.w, scale));
    };
#pragma unroll
    for (int k = 0; k < rms_cached; ++k) {
      const std::int64_t c = threadIdx.x + static_cast<std::int64_t>(k) * blockDim.x;
      if (c < n4) store(c, cache[k], kept_w[k][0], kept_w[k][1]);
    }
    for (std::int64_t c = threadIdx.x + static_cast<std::int64_t>(rms_cached) * blockDim.x; c < n4; c += blockDim.x)
      store(c, in4[c], w2[2 * c], w2[2 * c + 1]);
    return;
  }
  for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = in[i];
    if (back) {
      for (int p = 0; p < parts.count; ++p) v += part0[p * parts.stride + i];
      back[i] = v;
    }
    ss += v * v;
  }
  if (!weight) return;
  ss = block_sum(ss, scratch);
  const float scale = rms_scale(ss, hidden, eps);
  for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = rms_apply<A>(to_float(weight[i]), in[i], scale);
}

// Grid (row, slice): the row's work items, (heads + kv_heads) * half rotations then kv_dim value
// copies, spread over the slices' threads, one item per thread when the grid covers the row.
// A: the rows' element; C: the cache's (A or an fp8 code); keep_rows: the rotated k (and a biased
// v) also back into the row.
template <class A, class C, bool keep_rows>
__global__ void bias_rope_store_kernel(A* qkv, const A* bias, const float* inv_freq, const std::int32_t* start,
                                       attention_shape s, C* k_cache, C* v_cache) {
  grid_dependents_launch();
  grid_dependency_wait();
  const std::int64_t t = blockIdx.x;
  std::int64_t seq = 0;
  const std::int64_t pos = row_position(start, t, s.rows_per_seq, &seq);
  const std::int64_t hd = s.head_dim, half = hd / 2;
  const std::int64_t q_dim = s.heads * hd, kv_dim = s.kv_heads * hd, width = q_dim + 2 * kv_dim;
  A* row = qkv + t * width;
  const bool in_cache = pos < s.max_context;  // a device-driven step past the context writes nothing
  const auto value = [&](std::int64_t col) { return to_float(row[col]) + (bias ? to_float(bias[col]) : 0.0f); };
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
      const float2 y = rope_rotate(x1, x2, rope_cos_sin(pos, inv_freq[i]));
      const float y1 = y.x, y2 = y.y;
      if (is_q || keep_rows) {
        row[col + i] = from_float<A>(y1);
        row[col + i + half] = from_float<A>(y2);
      }
      if (!is_q) {
        const std::int64_t kvh = head - s.heads;
        C* dst = k_cache + ((seq * s.kv_heads + kvh) * s.max_context + pos) * hd;
        dst[i] = to_cache<C>(y1);
        dst[i + half] = to_cache<C>(y2);
      }
    } else if (in_cache) {  // a value copied into the cache
      const std::int64_t v_idx = idx - pairs, kvh = v_idx / hd, d = v_idx % hd;
      const float v = value(q_dim + kv_dim + v_idx);
      v_cache[((seq * s.kv_heads + kvh) * s.max_context + pos) * hd + d] = to_cache<C>(v);
      if (keep_rows && bias) row[q_dim + kv_dim + v_idx] = from_float<A>(v);
    }
  }
}

// A: the element of q and the output; C: the element K and V are read in. from_rows (a prefill,
// C = A): the pass's own rows of qkv, the sequences empty before it (key j of a sequence is its
// row j); otherwise the caches.
template <class A, class C, bool from_rows>
__global__ void attention_kernel(const A* qkv, const C* k_cache, const C* v_cache, const std::int32_t* start,
                                 attention_shape s, float scale, A* out) {
  static_assert(!from_rows || std::is_same_v<C, A>, "the pass's rows hold the activations' type");
  grid_dependents_launch();
  grid_dependency_wait();
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
  const A* q_in = qkv + t * width + head * hd;
  for (std::int64_t d = threadIdx.x; d < hd; d += blockDim.x) q[d] = to_float(q_in[d]);
  __syncthreads();

  // Key j's K and V: k + j * stride, v + j * stride.
  const C* k = nullptr;
  const C* v = nullptr;
  std::int64_t stride = hd;
  if constexpr (from_rows) {
    k = qkv + seq * s.rows_per_seq * width + q_dim + kvh * hd;
    v = k + s.kv_heads * hd;
    stride = width;
  } else {
    k = k_cache + (seq * s.kv_heads + kvh) * s.max_context * hd;
    v = v_cache + (seq * s.kv_heads + kvh) * s.max_context * hd;
  }
  float local_max = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    const C* kj = k + j * stride;
    float dot = 0;
    for (std::int64_t d = 0; d < hd; ++d) dot += q[d] * cache_value(kj[d]);
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
    for (std::int64_t j = 0; j < keys; ++j) acc += score[j] * cache_value(v[j * stride + d]);
    out[t * q_dim + head * hd + d] = from_float<A>(acc * inv_total);
  }
}


template <class A>
__global__ void swiglu_kernel(const A* gate_up, A* act, std::int64_t rows, std::int64_t inter) {
  grid_dependents_launch();
  grid_dependency_wait();
  const std::int64_t total = rows * inter;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const std::int64_t t = idx / inter, i = idx % inter;
    const float g = to_float(gate_up[t * 2 * inter + i]);
    const float u = to_float(gate_up[t * 2 * inter + inter + i]);
    act[idx] = from_float<A>(silu_times_fast(g, u));
  }
}

// The same, 8 values per thread with 16-byte loads and stores (intermediate % 8 == 0, 16-byte
// aligned buffers): the same expression and rounding per value. Grid (word blocks, rows): a
// thread's row and word come from its block's place, with no division (a 64-bit one per 8 values
// had been a fifth of the kernel's instructions); rows past gridDim.y are walked in its steps.
template <class A>
__global__ void swiglu8_kernel(const uint4* gate_up, uint4* act, std::int64_t rows, std::int64_t words) {
  grid_dependents_launch();
  grid_dependency_wait();
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= words) return;
  for (std::int64_t t = blockIdx.y; t < rows; t += gridDim.y) {
    float g[8], u[8];
    unpack8<A>(__ldg(gate_up + t * 2 * words + c), g);
    unpack8<A>(__ldg(gate_up + t * 2 * words + words + c), u);
    unsigned packed[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      packed[j] = pack2<A>(silu_times_fast(g[2 * j], u[2 * j]), silu_times_fast(g[2 * j + 1], u[2 * j + 1]));
    act[t * words + c] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

// bias_rope_store_kernel four rotations or eight value copies per thread, with 8- and 16-byte
// accesses (head_dim % 8 == 0, 16-byte aligned buffers): per value the same arithmetic and rounding,
// so bit-identical.
constexpr int rope_max_half = 128;  // the vector kernel's head_dim / 2 at most (its table of angles)
template <class A, class C, bool keep_rows>
__global__ void bias_rope_store_vec_kernel(A* qkv, const A* bias, const float* inv_freq,
                                           const std::int32_t* start, attention_shape s, C* k_cache,
                                           C* v_cache) {
  grid_dependents_launch();
  grid_dependency_wait();
  const std::int64_t t = blockIdx.x;
  std::int64_t seq = 0;
  const std::int64_t pos = row_position(start, t, s.rows_per_seq, &seq);
  const std::int64_t hd = s.head_dim, half = hd / 2, quarter = half / 4;
  const std::int64_t q_dim = s.heads * hd, kv_dim = s.kv_heads * hd, width = q_dim + 2 * kv_dim;
  A* row = qkv + t * width;
  const bool in_cache = pos < s.max_context;
  // The row's cosines and sines, once a block (every head rotates by the same angles): the same
  // angle and sincosf as each rotation computed before, so the same bits.
  __shared__ float2 rot[rope_max_half];
  for (std::int64_t i = threadIdx.x; i < half; i += blockDim.x) rot[i] = rope_cos_sin(pos, inv_freq[i]);
  __syncthreads();
  // A row's items and columns in 32 bits (its width is under 2^31: launch_bias_rope_store): the
  // 64-bit divisions an item took had made the kernel bound by its instructions' issue (Nsight
  // Compute on the 2048-token prefill: issue slots 60% busy, DRAM 32%).
  const int quarter32 = static_cast<int>(quarter), hd32 = static_cast<int>(hd);
  const int quads = static_cast<int>((s.heads + s.kv_heads) * quarter), items = quads + static_cast<int>(kv_dim / 8);
  for (int idx = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x); idx < items;
       idx += static_cast<int>(gridDim.y * blockDim.x)) {
    if (idx < quads) {  // four rotated pairs of a q or k head
      const int head = idx / quarter32, i = (idx - head * quarter32) * 4;
      const bool is_q = head < s.heads;
      if (!is_q && !in_cache) continue;
      const std::int64_t col = is_q ? head * hd : q_dim + (head - s.heads) * hd;
      float x1[4], x2[4];
      load4(row + col + i, x1);
      load4(row + col + i + half, x2);
      if (bias) {
        float b1[4], b2[4];
        load4(bias + col + i, b1);
        load4(bias + col + i + half, b2);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          x1[j] += b1[j];
          x2[j] += b2[j];
        }
      }
      float y1[4], y2[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 y = rope_rotate(x1[j], x2[j], rot[i + j]);
        y1[j] = y.x, y2[j] = y.y;
      }
      if constexpr (std::is_same_v<C, A> && !keep_rows) {
        // A decode into a 16-bit cache: one store through a pointer chosen between the row and the
        // cache (both of type A), instead of two stores each under its own test.
        A* dst = is_q ? row + col : k_cache + ((seq * s.kv_heads + (head - s.heads)) * s.max_context + pos) * hd;
        store4(dst + i, y1);
        store4(dst + i + half, y2);
      } else {
        if (is_q || keep_rows) {
          store4(row + col + i, y1);
          store4(row + col + i + half, y2);
        }
        if (!is_q) {
          C* dst = k_cache + ((seq * s.kv_heads + (head - s.heads)) * s.max_context + pos) * hd;
          store4(dst + i, y1);
          store4(dst + i + half, y2);
        }
      }
    } else if (in_cache) {  // eight values copied into the cache
      const int v_idx = (idx - quads) * 8, kvh = v_idx / hd32, d = v_idx - kvh * hd32;
      float v[8];
      load4(row + q_dim + kv_dim + v_idx, v);
      load4(row + q_dim + kv_dim + v_idx + 4, v + 4);
      if (bias) {
        float b[8];
        load4(bias + q_dim + kv_dim + v_idx, b);
        load4(bias + q_dim + kv_dim + v_idx + 4, b + 4);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] += b[j];
      }
      C* dst = v_cache + ((seq * s.kv_heads + kvh) * s.max_context + pos) * hd + d;
      store4(dst, v);
      store4(dst + 4, v + 4);
      if (keep_rows && bias) {
        store4(row + q_dim + kv_dim + v_idx, v);
        store4(row + q_dim + kv_dim + v_idx + 4, v + 4);
      }
    }
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

// A row's blocks: `parts` of them (a thread block cluster on sm_90 and later, one block before),
// each scanning a slice of the row with 1024 threads; 16-byte loads (argmax_unroll in flight per
// thread) when the row is 16-byte aligned and vocab % 4 == 0, scalar loads otherwise; warp
// shuffles, then one shared-memory pass to merge a block's threads, then the cluster's rank 0
// merges the blocks (the merge takes the larger value, the smaller index on ties, so the result
// does not depend on the order). Rank 0 stores the index and, where `length` is given, advances
// the row's length (a launch of its own before: one fewer a step).
__global__ void __launch_bounds__(argmax_threads) argmax_kernel(const float* logits, std::int64_t in_stride,
                                                                std::int64_t in_offset, std::int64_t vocab,
                                                                std::int32_t* out, bool vec, std::int32_t* length,
                                                                std::int32_t by, std::int32_t limit) {
  grid_dependents_launch();
  grid_dependency_wait();
  __shared__ float warp_value[32];
  __shared__ std::int64_t warp_index[32];
  const std::int64_t r = blockIdx.y, parts = gridDim.x, part = blockIdx.x;
  const float* row = logits + (r * in_stride + in_offset) * vocab;
  const std::int64_t none = vocab;  // "none yet": larger than every index
  float bv = -INFINITY;
  std::int64_t bi = none;
  if (vec) {
    const auto* row4 = reinterpret_cast<const float4*>(row);
    const std::int64_t n4 = vocab / 4, step = static_cast<std::int64_t>(blockDim.x);
    const std::int64_t per = (n4 + parts - 1) / parts, c0 = min(n4, part * per), c1 = min(n4, c0 + per);
    for (std::int64_t base = c0 + threadIdx.x; base < c1; base += step * argmax_unroll) {
      float4 v[argmax_unroll];
#pragma unroll
      for (int u = 0; u < argmax_unroll; ++u) {
        const std::int64_t c = base + u * step;
        v[u] = c < c1 ? __ldg(row4 + c) : make_float4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < argmax_unroll; ++u) {
        const std::int64_t c = base + u * step;
        if (c < c1) {
          argmax_take(v[u].x, 4 * c, none, bv, bi);
          argmax_take(v[u].y, 4 * c + 1, none, bv, bi);
          argmax_take(v[u].z, 4 * c + 2, none, bv, bi);
          argmax_take(v[u].w, 4 * c + 3, none, bv, bi);
        }
      }
    }
  } else {
    const std::int64_t per = (vocab + parts - 1) / parts, e0 = min(vocab, part * per), e1 = min(vocab, e0 + per);
    for (std::int64_t i = e0 + threadIdx.x; i < e1; i += blockDim.x) argmax_take(row[i], i, none, bv, bi);
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
    warp_value[0] = bv;  // the block's result
    warp_index[0] = bi;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (parts > 1) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every block's result written and visible across the cluster
    if (part == 0 && threadIdx.x == 0)
      for (unsigned b = 1; b < static_cast<unsigned>(parts); ++b)
        argmax_merge(*cluster.map_shared_rank(&warp_value[0], b), *cluster.map_shared_rank(&warp_index[0], b), none,
                     bv, bi);
    cluster.sync();  // no block leaves while rank 0 reads its shared memory
  }
#endif
  if (part == 0 && threadIdx.x == 0) {
    out[r] = static_cast<std::int32_t>(bi == none ? 0 : bi);
    if (length) length[r] = min(length[r] + by, limit);
  }
}

// The general kernel's dynamic shared memory: q and one score per key of the longest row.
std::size_t attention_shared_bytes(const attention_shape& s, bool prefill) {
  return static_cast<std::size_t>(s.head_dim + (prefill ? s.rows_per_seq : s.max_context)) * sizeof(float);
}

// The general kernel's instances: prefill (from the pass's rows), decode from a 16-bit cache (of
// the activations' type) or an fp8 one.
template <class A>
constexpr auto attention_rows = attention_kernel<A, A, true>;
template <class A>
constexpr auto attention_16bit_cache = attention_kernel<A, A, false>;
template <class A>
constexpr auto attention_fp8_cache = attention_kernel<A, fp8_code, false>;


// ---------------------------------------------------------------------------------------------
// gemv: R = gemv_rows_per_warp rows per warp, U 16-byte chunks (8 bf16 or fp16) per row per lane per step,
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


// Weights of a gemv, 16 bytes (a chunk) at a time: 16-bit, of the activations' type A (8 values),
// or fp8 e4m3 (16 values, the row's scale applied to the sum at the end).
template <class A>
struct w_16bit {
  static constexpr int per_chunk = 8;
  __device__ static void widen(const uint4& v, float* f) { unpack8<A>(v, f); }
};
struct w_fp8 {
  static constexpr int per_chunk = 16;
  __device__ static void widen(const uint4& v, float* f) { unpack16_fp8(v, f); }
};

// acc[r][t] += w chunk c of row r . x chunk c of token t, for the R rows of a warp; x of type A.
template <class A, class W, int R, int T>
__device__ __forceinline__ void gemv_chunk(const uint4 (&wv)[R], const uint4* __restrict__ xr, int chunks, int c,
                                           float (&acc)[R][T]) {
  constexpr int E = W::per_chunk;
  float wf[R][E];
#pragma unroll
  for (int r = 0; r < R; ++r) W::widen(wv[r], wf[r]);
#pragma unroll
  for (int t = 0; t < T; ++t) {
    float xf[E];
#pragma unroll
    for (int h = 0; h < E / 8; ++h)
      unpack8<A>(__ldg(xr + (static_cast<std::size_t>(t) * chunks + c) * (E / 8) + h), xf + 8 * h);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int j = 0; j < E; ++j) acc[r][t] = fmaf(wf[r][j], xf[j], acc[r][t]);
  }
}

// out = scale x acc (+ beta x out for fp32 output; otherwise rounded to A).
template <class A, bool F32>
__device__ __forceinline__ void gemv_store(void* out, std::size_t at, float sum, float beta) {
  if constexpr (F32) {
    float* o = static_cast<float*>(out);
    o[at] = beta != 0.0f ? sum + beta * o[at] : sum;
  } else {
    static_cast<A*>(out)[at] = from_float<A>(sum);
  }
}

template <class A, class W, int T, bool F32>
__global__ void __launch_bounds__(gemv_threads) gemv_kernel(const void* __restrict__ w, const float* __restrict__ scales,
                                                            int out_rows, int chunks, const A* __restrict__ x,
                                                            void* __restrict__ out, float beta) {
  constexpr int R = gemv_rows_per_warp, U = gemv_unroll;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) >> 5);
  const int row0 = warp * R;
  if (row0 >= out_rows) return;  // whole warps only
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int row = min(row0 + r, out_rows - 1);  // a last partial warp reads a valid row, stores nothing
    wr[r] = static_cast<const uint4*>(w) + static_cast<std::size_t>(row) * chunks;
  }
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  float acc[R][T];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;

  grid_dependents_launch();
  grid_dependency_wait();
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
      if (c < chunks) gemv_chunk<A, W, R, T>(wv[u], xr, chunks, c, acc);
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
      const float scale = scales ? scales[row] : 1.0f;
      gemv_store<A, F32>(out, static_cast<std::size_t>(t) * out_rows + row, acc[r][t] * scale, beta);
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

// The end of a tile (groups x R rows from tile_row0): each warp's sums over its lanes, then with
// split 1 stored by spread lanes (as gemv_kernel does), else added over the group's slices in
// shared memory in slice order (as gemv_split_kernel does) and stored, the block in step after
// (partial free again).
template <class A, int R, int T, bool F32>
__device__ __forceinline__ void finish_tile(float (&acc)[R][T], float (*partial)[R * T], int split, int groups,
                                            int tile_row0, int out_rows, const float* scales, void* out, float beta) {
  constexpr int RT = R * T;
  const int lane = static_cast<int>(threadIdx.x & 31), wib = static_cast<int>(threadIdx.x >> 5);
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) acc[r][t] = warp_sum(acc[r][t]);
  if (split == 1) {
    const int row0 = tile_row0 + wib * R;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const int row = row0 + r;
        if (lane != (r * T + t) % 32 || row >= out_rows) continue;
        gemv_store<A, F32>(out, static_cast<std::size_t>(t) * out_rows + row, acc[r][t] * (scales ? scales[row] : 1.0f),
                           beta);
      }
    return;
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < T; ++t) partial[wib][r * T + t] = acc[r][t];
  }
  __syncthreads();
  const int idx = static_cast<int>(threadIdx.x);
  if (idx < groups * RT) {
    const int g = idx / RT, k = idx % RT, r = k / T, t = k % T;
    const int row = tile_row0 + g * R + r;
    if (row < out_rows) {
      float sum = partial[g * split][k];
      for (int p = 1; p < split; ++p) sum += partial[g * split + p][k];
      gemv_store<A, F32>(out, static_cast<std::size_t>(t) * out_rows + row, sum * (scales ? scales[row] : 1.0f), beta);
    }
  }
  __syncthreads();
}

template <class A, class W, int T, bool F32>
__global__ void __launch_bounds__(gemv_split_threads, 1)
    gemv_split_kernel(const void* __restrict__ w, const float* __restrict__ scales, int out_rows, int chunks, int split,
                      int slice, const A* __restrict__ x, void* __restrict__ out, float beta) {
  constexpr int R = gemv_rows_per_warp, U = gemv_unroll;
  __shared__ float partial[gemv_split_warps][R * T];
  const int lane = static_cast<int>(threadIdx.x & 31), wib = static_cast<int>(threadIdx.x >> 5);
  const int groups = gemv_split_warps / split;
  const int group = wib / split, part = wib % split;
  const int row0 = (static_cast<int>(blockIdx.x) * groups + group) * R;
  const int cbeg = min(chunks, part * slice), cend = min(chunks, cbeg + slice);
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int row = min(row0 + r, out_rows - 1);  // rows past the end read a valid row, store nothing
    wr[r] = static_cast<const uint4*>(w) + static_cast<std::size_t>(row) * chunks;
  }
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  float acc[R][T];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;

  grid_dependents_launch();
  grid_dependency_wait();
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
      if (c < cend) gemv_chunk<A, W, R, T>(wv[u], xr, chunks, c, acc);
    }
  }
  finish_tile<A, R, T, F32>(acc, partial, split, groups, static_cast<int>(blockIdx.x) * groups * R, out_rows, scales,
                            out, beta);
}

// Warps split K when the one-warp-per-R-rows grid is too small to keep enough bytes in flight:
// the smallest power of two (at most 8) reaching gemv_target_warps, while each slice keeps at
// least one full unrolled step. 1: the plain kernel.
// rows_per_warp and min_slice: those of the kernel (the fused down product's differ).
int gemv_split_for(int out_rows, int chunks, int rows_per_warp = gemv_rows_per_warp, int min_slice = gemv_min_slice) {
  const std::uint64_t warps = (static_cast<std::uint64_t>(out_rows) + rows_per_warp - 1) / rows_per_warp;
  int split = 1;
  while (split < gemv_split_warps && warps * static_cast<std::uint64_t>(split) < gemv_target_warps &&
         chunks / (2 * split) >= min_slice)
    split *= 2;
  return split;
}

// A split's slice: whole 32-chunk steps (every lane the same trip count), the last one shorter.
int gemv_slice_for(int chunks, int split) { return ((chunks + split - 1) / split + 31) / 32 * 32; }

template <class A, class W, int T>
void launch_gemv(const void* w, const float* scales, int out_rows, int chunks, const A* x, void* out, bool fp32_out,
                 float beta, cudaStream_t stream) {
  const std::uint64_t warps = (static_cast<std::uint64_t>(out_rows) + gemv_rows_per_warp - 1) / gemv_rows_per_warp;
  if (const int split = gemv_split_for(out_rows, chunks); split > 1) {
    const int slice = gemv_slice_for(chunks, split);
    const auto per_block = static_cast<std::uint64_t>(gemv_split_warps / split);
    const auto blocks = static_cast<unsigned>((warps + per_block - 1) / per_block);
    if (fp32_out)
      launch(gemv_split_kernel<A, W, T, true>, blocks, gemv_split_threads, 0, stream, w, scales, out_rows, chunks, split,
             slice, x, out, beta);
    else
      launch(gemv_split_kernel<A, W, T, false>, blocks, gemv_split_threads, 0, stream, w, scales, out_rows, chunks, split,
             slice, x, out, beta);
    return;
  }
  const auto blocks = static_cast<unsigned>((warps * 32 + gemv_threads - 1) / gemv_threads);
  if (fp32_out)
    launch(gemv_kernel<A, W, T, true>, blocks, gemv_threads, 0, stream, w, scales, out_rows, chunks, x, out, beta);
  else
    launch(gemv_kernel<A, W, T, false>, blocks, gemv_threads, 0, stream, w, scales, out_rows, chunks, x, out, beta);
}

template <class A, class W>
void gemv_tokens(const void* w, const float* scales, int rows, int chunks, const A* x, std::int64_t tokens, void* out,
                 bool fp32_out, float beta, cudaStream_t stream) {
  switch (tokens) {
    case 1: launch_gemv<A, W, 1>(w, scales, rows, chunks, x, out, fp32_out, beta, stream); break;
    case 2: launch_gemv<A, W, 2>(w, scales, rows, chunks, x, out, fp32_out, beta, stream); break;
    case 3: launch_gemv<A, W, 3>(w, scales, rows, chunks, x, out, fp32_out, beta, stream); break;
    default: launch_gemv<A, W, 4>(w, scales, rows, chunks, x, out, fp32_out, beta, stream); break;
  }
}

// ---------------------------------------------------------------------------------------------
// Fused gemv (llm_kernels.cuh: gemv_rms_norm, gemv_swiglu): the split kernel's layout (blocks of
// gemv_split_warps warps, `split` of them per group of rows, each streaming one slice of K), the
// input formed in the kernel instead of read from the 16-bit buffer a small kernel wrote before it.

// The rows of one warp from row0 (rows past the end read the last row, store nothing).
template <int R>
__device__ __forceinline__ void point_rows(const void* w, int chunks, int out_rows, int row0, const uint4* (&wr)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
    wr[r] = static_cast<const uint4*>(w) + static_cast<std::size_t>(min(row0 + r, out_rows - 1)) * chunks;
}

// One step of weights: U chunks (32 apart) of each of the R rows.
template <int R, int U>
__device__ __forceinline__ void load_weights(uint4 (&wv)[U][R], const uint4* const (&wr)[R], int base, int cend) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = base + 32 * u;
#pragma unroll
    for (int r = 0; r < R; ++r) wv[u][r] = c < cend ? load_stream(wr[r] + c) : make_uint4(0, 0, 0, 0);
  }
}

// acc[r][t] += w chunk c of row r . input chunk c of token t, each token's chunk formed once (by
// xs.load<E>(t, c, f): E values widened to fp32) for the R rows. Per accumulator the same fmaf
// sequence as gemv_chunk.
template <class W, int R, int T, class X>
__device__ __forceinline__ void fused_chunk(const uint4 (&wv)[R], const X& xs, int c, float (&acc)[R][T]) {
  constexpr int E = W::per_chunk;
  float xf[T][E];
#pragma unroll
  for (int t = 0; t < T; ++t) xs.template load<E>(t, c, xf[t]);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float wf[E];
    W::widen(wv[r], wf);
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int j = 0; j < E; ++j) acc[r][t] = fmaf(wf[j], xf[t][j], acc[r][t]);
  }
}

// The normalised rows staged in shared memory: [T][words] 16-byte chunks (8 values of A each).
template <class A>
struct x_staged {
  const uint4* rows;
  int words;
  template <int E>
  __device__ __forceinline__ void load(int t, int c, float* f) const {
#pragma unroll
    for (int h = 0; h < E / 8; ++h) unpack8<A>(rows[t * words + c * (E / 8) + h], f + 8 * h);
  }
};

// SwiGLU formed per chunk from gate_up [T][2 words] (16-byte chunks): act = A(silu(g) * u) with
// g and u the same chunk of the token's gate and up halves, as swiglu_kernel rounds it.
template <class A>
struct x_swiglu {
  const uint4* gate_up;
  int words;  // intermediate / 8
  template <int E>
  __device__ __forceinline__ void load(int t, int c, float* f) const {
#pragma unroll
    for (int h = 0; h < E / 8; ++h) {
      const uint4* g4 = gate_up + static_cast<std::size_t>(t) * 2 * words + c * (E / 8) + h;
      float g[8], u[8];
      unpack8<A>(__ldg(g4), g);
      unpack8<A>(__ldg(g4 + words), u);
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        const float2 a =
            to_float2(pair_from_float<A>(silu_times_fast(g[j], u[j]), silu_times_fast(g[j + 1], u[j + 1])));
        f[8 * h + j] = a.x;
        f[8 * h + j + 1] = a.y;
      }
    }
  }
};

// rms_norm of T rows of x (fp32, token t at row t * in_stride + in_offset, `in` wide, 16-byte
// aligned) into staged [T][in] of A, by the whole block: per token the sum of squares (each thread
// over its 8-wide chunks, then warps, then the block's warps in order: the order differs from
// rms_norm_kernel's, so the scale may differ in its last bit), then rms_scale and rms_apply as
// rms_norm_kernel rounds them. The caller synchronises before reading staged.
template <class A, int T>
__device__ __forceinline__ void stage_rms_rows(const float* __restrict__ x, std::int64_t in_stride,
                                               std::int64_t in_offset, const A* __restrict__ norm_weight, float eps,
                                               int in, uint4* staged, float (*sums)[T]) {
  const int words = in / 8;
  const float4* rows[T];
#pragma unroll
  for (int t = 0; t < T; ++t) rows[t] = reinterpret_cast<const float4*>(x + (t * in_stride + in_offset) * in);
  const auto* weight4 = reinterpret_cast<const uint4*>(norm_weight);
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int warps = static_cast<int>((blockDim.x + 31) >> 5);
  const int stride = static_cast<int>(blockDim.x);
  // At 1-2 tokens and up to `held` chunks per thread (hidden 4096 on 256 threads: 2), each thread
  // keeps its x values in registers between the sum of squares and the scaling: one pass over x
  // from L2 instead of two, on the path the fused products wait for. Otherwise x is read twice.
  constexpr int held = 2;
  const bool in_registers = T <= 2 && words <= held * stride;
  float4 kept[T <= 2 ? T : 1][held][2];
  float ss[T];
#pragma unroll
  for (int t = 0; t < T; ++t) ss[t] = 0.0f;
  if (in_registers) {
#pragma unroll
    for (int i = 0; i < held; ++i) {
      const int c = static_cast<int>(threadIdx.x) + i * stride;
      if (c >= words) continue;
      asm volatile("prefetch.global.L1 [%0];" ::"l"(weight4 + c));
#pragma unroll
      for (int t = 0; t < (T <= 2 ? T : 1); ++t) {
        const float4 a = __ldg(rows[t] + 2 * c), b = __ldg(rows[t] + 2 * c + 1);
        kept[t][i][0] = a;
        kept[t][i][1] = b;
        ss[t] += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
      }
    }
  } else {
    for (int c = static_cast<int>(threadIdx.x); c < words; c += stride) {
      // The norm weight into L1 meanwhile (x is there after this pass): the second pass then waits
      // on no L2 round trip.
      asm volatile("prefetch.global.L1 [%0];" ::"l"(weight4 + c));
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const float4 a = __ldg(rows[t] + 2 * c), b = __ldg(rows[t] + 2 * c + 1);
        ss[t] += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < T; ++t) {
    ss[t] = warp_sum(ss[t]);
    if (lane == 0) sums[warp][t] = ss[t];
  }
  __syncthreads();
  float scale[T];
#pragma unroll
  for (int t = 0; t < T; ++t) {
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += sums[w][t];
    scale[t] = rms_scale(total, in, eps);
  }
  // One chunk of 8 values of token t, scaled and rounded as rms_norm_kernel rounds them.
  const auto put = [&](int t, int c, const float4& a, const float4& b, const float (&wf)[8]) {
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    unsigned packed[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const pair_of<A> p =
          make_pair<A>(rms_apply<A>(wf[2 * j], v[2 * j], scale[t]), rms_apply<A>(wf[2 * j + 1], v[2 * j + 1], scale[t]));
      packed[j] = *reinterpret_cast<const unsigned*>(&p);
    }
    staged[t * words + c] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  };
  if (in_registers) {
#pragma unroll
    for (int i = 0; i < held; ++i) {
      const int c = static_cast<int>(threadIdx.x) + i * stride;
      if (c >= words) continue;
      float wf[8];
      unpack8<A>(__ldg(weight4 + c), wf);
#pragma unroll
      for (int t = 0; t < (T <= 2 ? T : 1); ++t) put(t, c, kept[t][i][0], kept[t][i][1], wf);
    }
    return;
  }
  for (int c = static_cast<int>(threadIdx.x); c < words; c += stride) {
    float wf[8];
    unpack8<A>(__ldg(weight4 + c), wf);
#pragma unroll
    for (int t = 0; t < T; ++t) put(t, c, __ldg(rows[t] + 2 * c), __ldg(rows[t] + 2 * c + 1), wf);
  }
}

// Persistent: gridDim.x <= tiles blocks (as many as stay resident), each normalising the T rows
// once into shared memory, then taking tiles blockIdx.x, + gridDim.x, ... of groups x R rows. The
// first step of weights is issued before the normalisation so that its DRAM latency overlaps it.
// Per output the same products in the same order as gemv_split_kernel / gemv_kernel with the same
// split: results equal to rms_norm + gemv but where a normalised element rounds differently.
template <class A, class W, int T, bool F32>
__global__ void __launch_bounds__(gemv_split_threads)
    gemv_rms_norm_kernel(const void* __restrict__ w, const float* __restrict__ scales, int out_rows, int chunks,
                         int split, int slice, int tiles, const float* __restrict__ x, std::int64_t in_stride,
                         std::int64_t in_offset, const A* __restrict__ norm_weight, float eps,
                         void* __restrict__ out, float beta) {
  constexpr int R = gemv_rows_per_warp, U = gemv_unroll, E = W::per_chunk;
  extern __shared__ uint4 staged[];  // [T][in] of A
  __shared__ float partial[gemv_split_warps][R * T];
  __shared__ float sums[gemv_split_warps][T];
  const int lane = static_cast<int>(threadIdx.x & 31), wib = static_cast<int>(threadIdx.x >> 5);
  const int groups = gemv_split_warps / split, group = wib / split, part = wib % split;
  const int cbeg = min(chunks, part * slice), cend = min(chunks, cbeg + slice);
  const int in = chunks * E;
  int tile = static_cast<int>(blockIdx.x);
  const uint4* wr[R];
  point_rows<R>(w, chunks, out_rows, (tile * groups + group) * R, wr);
  uint4 wv[U][R];
  load_weights<R, U>(wv, wr, cbeg + lane, cend);  // weights: written by no kernel before this one

  grid_dependents_launch();
  grid_dependency_wait();
  stage_rms_rows<A, T>(x, in_stride, in_offset, norm_weight, eps, in, staged, sums);
  __syncthreads();
  const x_staged<A> xs{staged, in / 8};
  for (bool loaded = true; tile < tiles; tile += static_cast<int>(gridDim.x), loaded = false) {
    if (!loaded) point_rows<R>(w, chunks, out_rows, (tile * groups + group) * R, wr);
    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;
    for (int base = cbeg + lane; base < cend; base += 32 * U) {
      if (!loaded) load_weights<R, U>(wv, wr, base, cend);
      loaded = false;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = base + 32 * u;
        if (c < cend) fused_chunk<W, R, T>(wv[u], xs, c, acc);
      }
    }
    finish_tile<A, R, T, F32>(acc, partial, split, groups, tile * groups * R, out_rows, scales, out, beta);
  }
}

// One block per tile of groups x gemv_swiglu_rows rows: eight rows per warp and one chunk per row
// per step (the same eight 16-byte weight loads in flight per lane as the gemv's 2 rows x 4
// chunks), so that each activation a lane forms serves eight rows.
//
// Cost model (instruction counts of the PTX; no measurement yet). One activation is an expf (11
// instructions and an ex2), a correctly rounded division (a reciprocal and about 8 more) and a
// product: ~22 instructions, 2 of them MUFU. A warp forms the activations of its K slice for its
// rows, so SwiGLU is repeated out_rows / R times. Per 4 KiB of weights a warp streams (one step:
// 8 rows x 16 B x 32 lanes; about 256 SM clocks at 4 TB/s over 132 SMs, 1024 issue slots) the
// product takes ~150 warp instructions and the activations ~200 per token per 8 values (bf16
// weights) or 16 (fp8): bf16 at 1 token ~35% of the issue slots and 12% of the MUFU throughput, 2
// tokens ~55%, 4 tokens ~100%; fp8 at 1 token ~70%. With the gemv's R = 2 the activations would
// cost four times as much (~90% of the slots at 1 token). gemv_swiglu_pays draws the line.
// 103 registers at 1 token (bf16, sm_90a build): two blocks (16 warps, 64 KiB of weights in
// flight) per SM, where the gemv's split kernel has four.
constexpr int gemv_swiglu_rows = 8;

template <class A, class W, int T, bool F32>
__global__ void __launch_bounds__(gemv_split_threads)
    gemv_swiglu_kernel(const void* __restrict__ w, const float* __restrict__ scales, int out_rows, int chunks,
                       int split, int slice, const A* __restrict__ gate_up, void* __restrict__ out, float beta) {
  constexpr int R = gemv_swiglu_rows, E = W::per_chunk;
  __shared__ float partial[gemv_split_warps][R * T];
  const int lane = static_cast<int>(threadIdx.x & 31), wib = static_cast<int>(threadIdx.x >> 5);
  const int groups = gemv_split_warps / split, group = wib / split, part = wib % split;
  const int cbeg = min(chunks, part * slice), cend = min(chunks, cbeg + slice);
  const int row0 = (static_cast<int>(blockIdx.x) * groups + group) * R;
  // Row r at w0 + min(r, last) * chunks: offsets rather than eight pointers (registers).
  const uint4* w0 = static_cast<const uint4*>(w) + static_cast<std::size_t>(min(row0, out_rows - 1)) * chunks;
  const int last = max(0, out_rows - 1 - row0);
  const x_swiglu<A> xs{reinterpret_cast<const uint4*>(gate_up), chunks * E / 8};
  float acc[R][T];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;

  grid_dependents_launch();
  grid_dependency_wait();
  for (int base = cbeg + lane; base < cend; base += 32) {
    uint4 wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = load_stream(w0 + min(r, last) * chunks + base);
    fused_chunk<W, R, T>(wv, xs, base, acc);
  }
  finish_tile<A, R, T, F32>(acc, partial, split, groups, static_cast<int>(blockIdx.x) * groups * R, out_rows, scales,
                            out, beta);
}

// Blocks of `kernel` (gemv_split_threads threads, `shared` dynamic bytes) resident at once on the
// current device, asked once per (device, kernel, bytes).
int resident_blocks(const void* kernel, std::size_t shared) {
  static std::mutex known_mutex;
  static std::map<std::tuple<int, const void*, std::size_t>, int> known;
  int device = 0;
  ITERA_CUDA_CHECK(cudaGetDevice(&device));
  const auto key = std::make_tuple(device, kernel, shared);
  const std::lock_guard lock(known_mutex);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int per_sm = 0;
  ITERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, gemv_split_threads, shared));
  const int blocks = std::max(1, per_sm) * device_multiprocessors();
  known.emplace(key, blocks);
  return blocks;
}

// The staged rows, of either 16-bit type.
std::size_t rms_staged_bytes(std::int64_t tokens, std::int64_t in) { return static_cast<std::size_t>(tokens * in) * 2; }

template <class A, class W, int T>
void launch_gemv_rms_norm(const void* w, const float* scales, int out_rows, int chunks, const float* x,
                          std::int64_t in_stride, std::int64_t in_offset, const A* norm_weight, float eps,
                          void* out, bool fp32_out, float beta, cudaStream_t stream) {
  const int split = gemv_split_for(out_rows, chunks), slice = gemv_slice_for(chunks, split);
  const int tile_rows = gemv_split_warps / split * gemv_rows_per_warp;
  const int tiles = (out_rows + tile_rows - 1) / tile_rows;
  const std::size_t shared = rms_staged_bytes(T, static_cast<std::int64_t>(chunks) * W::per_chunk);
  const auto kernel = fp32_out ? &gemv_rms_norm_kernel<A, W, T, true> : &gemv_rms_norm_kernel<A, W, T, false>;
  const int blocks = std::min(tiles, resident_blocks(reinterpret_cast<const void*>(kernel), shared));
  launch(kernel, static_cast<unsigned>(blocks), gemv_split_threads, shared, stream, w, scales, out_rows, chunks, split,
         slice, tiles, x, in_stride, in_offset, norm_weight, eps, out, beta);
}

template <class A, class W, int T>
void launch_gemv_swiglu(const void* w, const float* scales, int out_rows, int chunks, const A* gate_up, void* out,
                        bool fp32_out, float beta, cudaStream_t stream) {
  // Slices of at least one step (32 chunks: U is 1).
  const int split = gemv_split_for(out_rows, chunks, gemv_swiglu_rows, 32), slice = gemv_slice_for(chunks, split);
  const auto tile_rows = static_cast<std::uint64_t>(gemv_split_warps / split * gemv_swiglu_rows);
  const auto blocks = static_cast<unsigned>((static_cast<std::uint64_t>(out_rows) + tile_rows - 1) / tile_rows);
  const auto kernel = fp32_out ? &gemv_swiglu_kernel<A, W, T, true> : &gemv_swiglu_kernel<A, W, T, false>;
  launch(kernel, blocks, gemv_split_threads, 0, stream, w, scales, out_rows, chunks, split, slice, gate_up, out, beta);
}

// ---------------------------------------------------------------------------------------------
// fp8 products on tensor cores (llm_kernels.cuh: gemv_fp8 and gemv_rms_norm with fp8 weights,
// where fp8_mma_gemv_takes). The CUDA-core gemv widens each e4m3 code to fp32 (a conversion to
// fp16 pairs, then two more to fp32) and multiplies in fp32: ~3 instructions a weight byte, twice
// the bf16 gemv's, and at batch 1 on the H200 the fp8 products ran at 2.1-3.5 TB/s where the bf16
// ones reach 2.9-4.0 (docs/perf/2026-11-30-vit-tails.md, the fp8 stage table). Here a code pair
// becomes an fp16 pair in one conversion (exact: fp16 holds every e4m3 value) and goes to an
// mma.sync m16n8k16 with fp32 accumulation, the tokens as its 8 columns (1..4 used): ~0.8
// instructions a weight byte.
//
// A block takes tiles of 16 output rows (one m16 tile each); its 8 warps split a tile's k into
// slices of whole 64-wide steps, summed in shared memory in warp order (deterministic). Per step a
// thread loads 16
// codes (16 bytes) of its rows g and g + 8 (g = lane / 4) at k + 16 (lane % 4): the four threads
// of a row read 64 contiguous bytes. The mma's k order is free as long as A and B agree, so
// instruction j of a step gives A's k slots 2t, 2t + 1 (and 2t + 8, 2t + 9) the codes 4j, 4j + 1
// (and 4j + 2, 4j + 3) of thread t's chunk, and B the same k of x, which the block stages in
// shared memory as fp16 [T][in] first (the 16-bit input converted, or rms_norm of the fp32 rows
// as gemv_rms_norm forms it, then converted). Two groups of mma_gemv_unroll steps of loads in
// flight per thread (12 loads of 16 bytes), at most 80 registers so that three blocks (24 warps)
// stay resident per SM: on the H200 at batch 1, fp8 step 3.04 ms with four steps a group at two
// blocks per SM, 2.86 with three at three, 2.98 with two at four
// (docs/perf/2026-11-30-vit-persistent.md).
//
// Numerics: the products are exact in fp32 (fp16 x fp16) and summed in fp32, as the CUDA-core
// gemv does in another order; what differs is x: a bf16 activation becomes fp16 exactly for
// |x| >= 2^-14 (fp16's 11 significant bits hold bf16's 8), below that to fp16's subnormal spacing
// of 2^-24, and beyond +-65504 it saturates (never on the normalised inputs these products take;
// the engine's quality figures compare the outputs with bf16 weights).
constexpr int mma_gemv_rows = 16;
constexpr int mma_gemv_step = 64;  // k per step and per row
constexpr int mma_gemv_unroll = 3;

// One group of steps' codes for the thread: rows g and g + 8, chunks at k, k + 64, ... (zeros past kend).
template <int U>
__device__ __forceinline__ void load_code_steps(uint4 (&lo)[U], uint4 (&hi)[U], const std::uint8_t* row_lo,
                                                const std::uint8_t* row_hi, int k, int kend) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int at = k + u * mma_gemv_step;
    const bool in = at < kend;
    lo[u] = in ? load_stream(reinterpret_cast<const uint4*>(row_lo + at)) : make_uint4(0, 0, 0, 0);
    hi[u] = in ? load_stream(reinterpret_cast<const uint4*>(row_hi + at)) : make_uint4(0, 0, 0, 0);
  }
}

// Persistent, as gemv_rms_norm_kernel: gridDim.x <= tiles blocks (as many as stay resident), each
// staging x once and then taking tiles blockIdx.x, + gridDim.x, ...; the loads run one group of
// steps ahead across the end of a tile into the next one's first.
template <class A, int T, bool F32, bool Norm>
__global__ void __launch_bounds__(gemv_split_threads, 3)
    gemv_fp8_mma_kernel(const std::uint8_t* __restrict__ w, const float* __restrict__ scales, int out_rows, int in,
                        int slice, int tiles, const A* __restrict__ x16, const float* __restrict__ x32,
                        std::int64_t in_stride, std::int64_t in_offset, const A* __restrict__ norm_weight, float eps,
                        void* __restrict__ out, float beta) {
  constexpr int U = mma_gemv_unroll, group_k = U * mma_gemv_step;
  extern __shared__ uint4 staged[];  // x as fp16 [T][in]
  __shared__ float partial[2][gemv_split_warps][mma_gemv_rows][T];  // by tile parity: one barrier a tile
  __shared__ float sums[gemv_split_warps][T];                         // stage_rms_rows' scratch
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int g = lane / 4, t4 = lane % 4;
  const int kbeg = min(in, warp * slice), kend = min(in, kbeg + slice);
  const int groups = (kend - kbeg + group_k - 1) / group_k;  // 0 for a warp past the last slice
  // The thread's rows g and g + 8 of a tile; rows past the end read the last row and store nothing.
  const std::uint8_t* row_lo = nullptr;
  const std::uint8_t* row_hi = nullptr;
  const auto point = [&](int tile) {
    const int row0 = tile * mma_gemv_rows;
    row_lo = w + static_cast<std::size_t>(min(row0 + g, out_rows - 1)) * in + 16 * t4;
    row_hi = w + static_cast<std::size_t>(min(row0 + g + 8, out_rows - 1)) * in + 16 * t4;
  };
  int tile = static_cast<int>(blockIdx.x);
  point(tile);
  uint4 lo[U], hi[U];
  if (groups > 0) load_code_steps<U>(lo, hi, row_lo, row_hi, kbeg, kend);  // weights: no kernel before writes them

  grid_dependents_launch();
  grid_dependency_wait();
  const int words = in / 8;
  if constexpr (Norm) {
    stage_rms_rows<A, T>(x32, in_stride, in_offset, norm_weight, eps, in, staged, sums);
    __syncthreads();
    if constexpr (!is_fp16<A>)
      for (int c = static_cast<int>(threadIdx.x); c < T * words; c += gemv_split_threads)
        staged[c] = fp16_chunk<A>(staged[c]);
  } else {
    (void)x32, (void)in_stride, (void)in_offset, (void)norm_weight, (void)eps, (void)sums;
    const auto* x4 = reinterpret_cast<const uint4*>(x16);
    for (int c = static_cast<int>(threadIdx.x); c < T * words; c += gemv_split_threads)
      staged[c] = fp16_chunk<A>(__ldg(x4 + c));
  }
  __syncthreads();

  // B: token g's x at k + 16 t4 + 4 j (4 fp16, one 8-byte load); zeros for the columns past T.
  const auto* xh = reinterpret_cast<const __half*>(staged) + static_cast<std::size_t>(min(g, T - 1)) * in + 16 * t4;
  for (int parity = 0; tile < tiles; tile += static_cast<int>(gridDim.x), parity ^= 1) {
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int gi = 0; gi < groups; ++gi) {
      const int k = kbeg + gi * group_k;
      uint4 clo[U], chi[U];
#pragma unroll
      for (int u = 0; u < U; ++u) clo[u] = lo[u], chi[u] = hi[u];
      if (gi + 1 < groups) {
        load_code_steps<U>(lo, hi, row_lo, row_hi, k + group_k, kend);
      } else if (tile + static_cast<int>(gridDim.x) < tiles) {  // the next tile's first group
        point(tile + static_cast<int>(gridDim.x));
        load_code_steps<U>(lo, hi, row_lo, row_hi, kbeg, kend);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int at = k + u * mma_gemv_step;
        if (at >= kend) break;
        const unsigned wl[4] = {clo[u].x, clo[u].y, clo[u].z, clo[u].w};
        const unsigned wh[4] = {chi[u].x, chi[u].y, chi[u].z, chi[u].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const unsigned a[4] = {fp16_pair_of_codes(wl[j] & 0xffffu), fp16_pair_of_codes(wh[j] & 0xffffu),
                                 fp16_pair_of_codes(wl[j] >> 16), fp16_pair_of_codes(wh[j] >> 16)};
          uint2 b = make_uint2(0, 0);
          if (g < T) b = *reinterpret_cast<const uint2*>(xh + at + 4 * j);
          mma_m16n8k16<fp16>(c, a, b.x, b.y);
        }
      }
    }
    // c: rows g and g + 8, tokens 2 t4 and 2 t4 + 1; the slices added in warp order.
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = g + (e >= 2 ? 8 : 0), t = 2 * t4 + (e & 1);
      if (t < T) partial[parity][warp][r][t] = c[e];
    }
    __syncthreads();  // also: every thread is past the reads of partial[parity] two tiles ago
    if (const int idx = static_cast<int>(threadIdx.x); idx < mma_gemv_rows * T) {
      const int r = idx / T, t = idx % T, row = tile * mma_gemv_rows + r;
      if (row < out_rows) {
        float sum = partial[parity][0][r][t];
#pragma unroll
        for (int p = 1; p < gemv_split_warps; ++p) sum += partial[parity][p][r][t];
        gemv_store<A, F32>(out, static_cast<std::size_t>(t) * out_rows + row, sum * scales[row], beta);
      }
    }
  }
}

// ITERA_LLM_FP8_MMA_GEMV=0 keeps the CUDA-core products (A/B runs); a test may override it.
overridable_switch fp8_mma_gemv_switch{"ITERA_LLM_FP8_MMA_GEMV", true};

// Whether the tensor-core path takes an fp8 product: the switch, a device with fp8 conversions in
// hardware (compute capability 8.9 and later), whole 64-wide steps, x within the shared memory a
// block gets without opting in.
bool fp8_mma_gemv_takes(std::int64_t tokens, std::int64_t in) {
  return fp8_mma_gemv_switch.on() && tokens >= 1 && tokens <= gemv_max_tokens && in % mma_gemv_step == 0 &&
         static_cast<std::size_t>(tokens * in) * 2 <= static_cast<std::size_t>(gemv_rms_norm_max_staged) &&
         device_compute_major() * 10 + device_compute_minor() >= 89;
}

template <class A, int T, bool Norm>
void launch_gemv_fp8_mma(const std::uint8_t* w, const float* scales, int out_rows, int in, const A* x16,
                         const float* x32, std::int64_t in_stride, std::int64_t in_offset, const A* norm_weight,
                         float eps, void* out, bool fp32_out, float beta, cudaStream_t stream) {
  // Slices of whole steps, as even as they come.
  const int steps = in / mma_gemv_step;
  const int slice = (steps + gemv_split_warps - 1) / gemv_split_warps * mma_gemv_step;
  const int tiles = (out_rows + mma_gemv_rows - 1) / mma_gemv_rows;
  const std::size_t shared = static_cast<std::size_t>(T) * in * 2;
  const auto kernel = fp32_out ? &gemv_fp8_mma_kernel<A, T, true, Norm> : &gemv_fp8_mma_kernel<A, T, false, Norm>;
  const int blocks = std::min(tiles, resident_blocks(reinterpret_cast<const void*>(kernel), shared));
  launch(kernel, static_cast<unsigned>(blocks), gemv_split_threads, shared, stream, w, scales, out_rows, in, slice,
         tiles, x16, x32, in_stride, in_offset, norm_weight, eps, out, beta);
}

// f(std::integral_constant<int, tokens>) for tokens 1..gemv_max_tokens.
template <class F>
void with_tokens(std::int64_t tokens, F&& f) {
  static_assert(gemv_max_tokens == 4);
  switch (tokens) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
  }
}

// Pass 1 of a row: the largest |bf16(init value)|; pass 2: the codes. One block per row.
__global__ void __launch_bounds__(rms_threads)
    fill_init_fp8_kernel(std::uint8_t* codes, float* scales, std::int64_t cols, int kind, std::uint64_t seed) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const auto value = [&](std::int64_t i) {
    return __bfloat162float(__float2bfloat16_rn(host_exact_init_value(kind, seed, static_cast<std::uint64_t>(row * cols + i))));
  };
  float absmax = 0.0f;
  for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x) absmax = fmaxf(absmax, fabsf(value(i)));
  const float scale = itera::llm::fp8_row_scale(block_max(absmax, scratch));
  if (threadIdx.x == 0) scales[row] = scale;
  for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x)
    codes[row * cols + i] = __nv_cvt_float_to_fp8(value(i) / scale, __NV_SATFINITE, __NV_E4M3);
}

// One block per row: the row's largest |value|, then its codes (weights.hpp: quantise_fp8_rows).
template <class A>
__global__ void __launch_bounds__(rms_threads)
    quantise_rows_fp8_kernel(const A* in, std::int64_t cols, std::uint8_t* codes, float* scales) {
  grid_dependents_launch();
  grid_dependency_wait();
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const uint4* src = reinterpret_cast<const uint4*>(in + row * cols);
  const std::int64_t chunks = cols / 8;
  float absmax = 0.0f;
  for (std::int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    float f[8];
    unpack8<A>(src[c], f);
#pragma unroll
    for (int j = 0; j < 8; ++j) absmax = fmaxf(absmax, fabsf(f[j]));
  }
  const float scale = itera::llm::fp8_row_scale(block_max(absmax, scratch));
  if (threadIdx.x == 0) scales[row] = scale;
  for (std::int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    float f[8];
    unpack8<A>(src[c], f);
    unsigned lo = 0, hi = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      lo |= static_cast<unsigned>(__nv_cvt_float_to_fp8(f[j] / scale, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
      hi |= static_cast<unsigned>(__nv_cvt_float_to_fp8(f[4 + j] / scale, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
    }
    reinterpret_cast<uint2*>(codes + row * cols)[c] = make_uint2(lo, hi);
  }
}

// The scales of an fp8 product applied to its unscaled sums d [rows][cols]: element (r, c) times
// col_scale[c] (the weight row's) times row_scale[r] (the token's). Eight elements per thread.
// fp16: the sums were scaled down by the product (llm_kernels.cuh: fp8_sums_scale), `unscale`
// (a power of two: exact) takes that back first.
template <class A>
__global__ void scale_product_16bit_kernel(A* d, std::int64_t cols, std::uint64_t chunks, const float* col_scale,
                                           const float* row_scale, float unscale) {
  grid_dependents_launch();
  grid_dependency_wait();
  const std::uint64_t per_row = static_cast<std::uint64_t>(cols) / 8;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < chunks;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t r = i / per_row, c0 = (i % per_row) * 8;
    uint4* p = reinterpret_cast<uint4*>(d) + i;
    float f[8];
    unpack8<A>(*p, f);
    if constexpr (is_fp16<A>) {
#pragma unroll
      for (int j = 0; j < 8; ++j) f[j] *= unscale;
    } else {
      (void)unscale;
    }
    const float rs = row_scale[r];
    uint4 v;
    unsigned* w = &v.x;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      w[j] = pack2<A>(f[2 * j] * col_scale[c0 + 2 * j] * rs, f[2 * j + 1] * col_scale[c0 + 2 * j + 1] * rs);
    *p = v;
  }
}

__global__ void scale_add_product_f32_kernel(const float* d, float* out, std::int64_t cols, std::uint64_t count,
                                             const float* col_scale, const float* row_scale, float beta) {
  grid_dependents_launch();
  grid_dependency_wait();
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t r = i / static_cast<std::uint64_t>(cols), c = i % static_cast<std::uint64_t>(cols);
    const float v = d[i] * col_scale[c] * row_scale[r];
    out[i] = beta != 0.0f ? fmaf(beta, out[i], v) : v;
  }
}

// Sixteen codes (one 16-byte load, inside one row: cols % 16 == 0) per thread and iteration, the
// row's scale read once for them, 32 bytes of A stored. The element-wise first version (a byte
// load, a 64-bit division and a 2-byte store per weight) made an fp8 batch-64 decode step 39.5 ms
// on the H200 against 6.1 ms in bf16.
template <class A>
__global__ void dequantise_fp8_kernel(const std::uint8_t* codes, const float* scales, std::int64_t cols,
                                      std::uint64_t count, A* out) {
  grid_dependents_launch();
  grid_dependency_wait();
  const std::uint64_t chunks = count / 16, chunks_per_row = static_cast<std::uint64_t>(cols) / 16;
  for (std::uint64_t c = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; c < chunks;
       c += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = load_stream(reinterpret_cast<const uint4*>(codes) + c);
    const float scale = scales[c / chunks_per_row];
    float f[16];
    w_fp8::widen(v, f);
    uint4 lo, hi;
    unsigned* l = &lo.x;
    unsigned* h = &hi.x;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      l[j] = pack2<A>(f[2 * j] * scale, f[2 * j + 1] * scale);
      h[j] = pack2<A>(f[8 + 2 * j] * scale, f[8 + 2 * j + 1] * scale);
    }
    reinterpret_cast<uint4*>(out)[2 * c] = lo;
    reinterpret_cast<uint4*>(out)[2 * c + 1] = hi;
  }
}

}  // namespace

template <class Stored, class A>
void fill_init(A* out, std::uint64_t count, int init_kind, std::uint64_t seed, cudaStream_t stream) {
  if (count == 0) return;
  fill_init_kernel<Stored, A><<<blocks_for(count), block_threads, 0, stream>>>(out, count, init_kind, seed);
  ITERA_CUDA_CHECK_LAUNCH();
}

void scatter_rows(const std::int32_t* rows, const bf16* values, float* x, std::int64_t count, std::int64_t hidden,
                  cudaStream_t stream) {
  if (count <= 0) return;
  launch(scatter_rows_kernel, static_cast<unsigned>(count), block_threads, 0, stream, rows, values, x, hidden);
}

namespace {
bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }
}  // namespace

template <class A>
void embed(const std::int32_t* tokens, const A* table, float* x, std::int64_t rows, std::int64_t hidden,
           std::int64_t vocab, cudaStream_t stream, words clear) {
  const bool vec = hidden % 8 == 0 && aligned16(table) && aligned16(x);
  launch(embed_kernel<A>, static_cast<unsigned>(rows), block_threads, 0, stream, tokens, table, x, hidden, vocab, vec,
         clear);
  ITERA_CUDA_CHECK_LAUNCH();
}

namespace {

// rms_norm_kernel's threads a row: 512 while the rows fit the SMs at four blocks each; past that
// 256, eight rows an SM at a time. H200, llama-3.1-8b: each of a 2048-token prefill's two norm
// stages 0.69 -> 0.45 ms a pass (two waves, not four); at 64 rows 256 threads took 106 us a step
// against 88 (docs/perf/2026-11-30-stream-gemm.md).
unsigned rms_threads_for(std::int64_t rows) {
  return rows > 4 * static_cast<std::int64_t>(device_multiprocessors()) ? 256u : rms_threads;
}

}  // namespace

template <class A>
void rms_norm(const float* x, std::int64_t in_stride, std::int64_t in_offset, const A* weight, A* out,
              std::int64_t rows, std::int64_t hidden, float eps, cudaStream_t stream) {
  // Rows start at multiples of hidden floats: with hidden % 4 == 0 every row keeps x's alignment.
  const bool vec = hidden % 4 == 0 && aligned16(x) && aligned16(weight) && aligned16(out);
  launch(rms_norm_kernel<A>, static_cast<unsigned>(rows), rms_threads_for(rows), 0, stream, x, in_stride, in_offset,
         weight, out, hidden, eps, vec, residual_parts{}, false);
  ITERA_CUDA_CHECK_LAUNCH();
}

// add_rms_norm's x kept in the L2 (store_evict_last) where its rows take at most a sixteenth of
// it: at a decode step's 5-64 rows the residual is read again one norm later, behind a layer's
// weights streamed through the L2 (otherwise from DRAM). H200, llama-3.1-8b, CUDA graph steps in
// paired rounds (docs/perf/2026-12-02-norm-in-gate-up.md): batch 64 5.630 -> 5.608 ms (run 3,
// four rounds, an experimental build without the L2 bound), 5.620 -> 5.602 (run 6, this code,
// three rounds), the norms 8-13 us a step faster; batch 16 and 32 -3 to -14 us (run 3). The lines
// keep their priority after the engine is gone (nothing resets it): at most a sixteenth of the L2
// for each x. ITERA_LLM_KEEP_RESIDUAL=0: stored plainly.
namespace {
overridable_switch keep_residual_switch{"ITERA_LLM_KEEP_RESIDUAL", true};
}  // namespace

template <class A>
void add_rms_norm(float* x, residual_parts parts, const A* weight, A* out, std::int64_t rows, std::int64_t hidden,
                  float eps, cudaStream_t stream) {
  if (parts.count < 1 || !parts.sums || parts.stride < rows * hidden)
    throw std::invalid_argument(itera::cuda::cat("add_rms_norm: ", parts.count, " parts of ", parts.stride,
                                                 " floats apart cannot hold ", rows, " rows of ", hidden));
  const bool vec = hidden % 4 == 0 && parts.stride % 4 == 0 && aligned16(x) && aligned16(parts.sums) &&
                   (!weight || (aligned16(weight) && aligned16(out)));
  const bool keep_x =
      keep_residual_switch.on() &&
      static_cast<double>(rows) * static_cast<double>(hidden) * sizeof(float) <= device_l2_bytes() / 16.0;
  launch(rms_norm_kernel<A>, static_cast<unsigned>(rows), rms_threads_for(rows), 0, stream, static_cast<const float*>(x),
         std::int64_t{1}, std::int64_t{0}, weight, out, hidden, eps, vec, parts, keep_x);
  ITERA_CUDA_CHECK_LAUNCH();
}

namespace {

template <class A, class C, bool keep_rows>
void launch_bias_rope_store(A* qkv, const A* bias, const float* inv_freq, const std::int32_t* start,
                            std::int64_t rows, const attention_shape& s, void* k_cache, void* v_cache,
                            cudaStream_t stream) {
  // Four rotations per thread from 8 rows on: measured on the H200 (llama-3.1-8b decode step), at
  // batch 64 the RoPE stage took 82 us a step against 109; at batch 1 57 against 53 (a quarter of
  // the threads, each with four sincosf in a row, on a step that is all latency).
  C* kc = static_cast<C*>(k_cache);
  C* vc = static_cast<C*>(v_cache);
  const bool narrow_row = (s.heads + 2 * s.kv_heads) * s.head_dim < (std::int64_t{1} << 31);  // 32-bit columns
  if (rows >= 8 && s.head_dim % 8 == 0 && s.head_dim <= 2 * rope_max_half && narrow_row && aligned16(qkv) &&
      aligned16(k_cache) && aligned16(v_cache) && aligned16(inv_freq) && (!bias || aligned16(bias))) {
    const std::int64_t items = (s.heads + s.kv_heads) * (s.head_dim / 8) + s.kv_heads * s.head_dim / 8;
    const dim3 grid(static_cast<unsigned>(rows), std::clamp<unsigned>(blocks_for(static_cast<std::uint64_t>(items)), 1, 64));
    launch(bias_rope_store_vec_kernel<A, C, keep_rows>, grid, block_threads, 0, stream, qkv, bias, inv_freq, start, s,
           kc, vc);
    ITERA_CUDA_CHECK_LAUNCH();
    return;
  }
  const std::int64_t items = (s.heads + s.kv_heads) * (s.head_dim / 2) + s.kv_heads * s.head_dim;
  const dim3 grid(static_cast<unsigned>(rows), std::clamp<unsigned>(blocks_for(static_cast<std::uint64_t>(items)), 1, 64));
  launch(bias_rope_store_kernel<A, C, keep_rows>, grid, block_threads, 0, stream, qkv, bias, inv_freq, start, s, kc,
         vc);
  ITERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class A>
void bias_rope_store(A* qkv, const A* bias, const float* inv_freq, const std::int32_t* start, std::int64_t rows,
                     const attention_shape& s, void* k_cache, void* v_cache, bool keep_rows, cudaStream_t stream) {
  check_cache_type<A>(s, "llm bias_rope_store");
  const bool fp8 = s.kv == kv_storage::fp8_e4m3;
  if (fp8 && keep_rows)
    launch_bias_rope_store<A, fp8_code, true>(qkv, bias, inv_freq, start, rows, s, k_cache, v_cache, stream);
  else if (fp8)
    launch_bias_rope_store<A, fp8_code, false>(qkv, bias, inv_freq, start, rows, s, k_cache, v_cache, stream);
  else if (keep_rows)
    launch_bias_rope_store<A, A, true>(qkv, bias, inv_freq, start, rows, s, k_cache, v_cache, stream);
  else
    launch_bias_rope_store<A, A, false>(qkv, bias, inv_freq, start, rows, s, k_cache, v_cache, stream);
}

template <class A>
void check_cache_type(const attention_shape& s, const char* who) {
  if (s.kv == kv_storage::fp8_e4m3 || s.kv == (is_fp16<A> ? kv_storage::fp16 : kv_storage::bf16)) return;
  throw std::invalid_argument(itera::cuda::cat(who, ": a 16-bit KV cache holds the activations' type (",
                                               is_fp16<A> ? "fp16" : "bf16", "), not the other one"));
}

template <class A>
void prepare_attention(const attention_shape& s) {
  prepare_decode_attention<A>(s);
  // The longest a general kernel may need: scores over max_context keys (a decode, or a prefill
  // of the whole context).
  const std::size_t bytes = attention_shared_bytes(s, false);
  // The general kernel runs only what neither the decode nor the prefill kernel takes, and
  // one-token prefills (a few hundred bytes).
  if (decode_attention_supported(s) && prefill_attention_supported(s)) return;
  if (bytes <= default_shared_bytes) return;
  int device = 0, optin = 0;
  ITERA_CUDA_CHECK(cudaGetDevice(&device));
  ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  // The static scratch of the reductions (32 floats) comes on top of the dynamic part.
  if (bytes + 32 * sizeof(float) > static_cast<std::size_t>(optin))
    throw std::invalid_argument(itera::cuda::cat("llm attention: a context of ", s.max_context,
                                                 " tokens needs ", bytes, " bytes of shared memory for its scores; ",
                                                 "this device allows ", optin, " per block"));
  for (const void* fn : {reinterpret_cast<const void*>(attention_rows<A>),
                         reinterpret_cast<const void*>(attention_16bit_cache<A>),
                         reinterpret_cast<const void*>(attention_fp8_cache<A>)})
    allow_dynamic_shared(fn, bytes);  // only ever grows: an engine of a longer context may still be live
}

template <class A>
void attention(const A* qkv, const void* k_cache, const void* v_cache, const std::int32_t* start, std::int64_t rows,
               const attention_shape& s, bool prefill, float scale, A* out, cudaStream_t stream,
               const decode_rope<A>& rope) {
  check_cache_type<A>(s, "llm attention");
  // (decode_attention refuses it for a kernel that does not take it.)
  if (rope.inv_freq && (prefill || s.rows_per_seq != 1))
    throw std::logic_error("llm attention: RoPE handed to a prefill's attention (decode_attention_rotates)");
  if (prefill && s.rows_per_seq > 1 && prefill_attention(qkv, rows, s, scale, out, stream))
    return;
  if (!prefill && s.rows_per_seq == 1 &&
      decode_attention(qkv, k_cache, v_cache, start, rows, s, scale, out, stream, rope))
    return;
  const std::size_t bytes = attention_shared_bytes(s, prefill);
  if (bytes + 32 * sizeof(float) > 227 * 1024)
    throw std::invalid_argument(itera::cuda::cat("llm attention: no kernel takes head_dim ", s.head_dim, " at ",
                                                 prefill ? s.rows_per_seq : s.max_context, " keys"));
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(s.heads));
  if (prefill)
    launch(attention_rows<A>, grid, attention_threads, bytes, stream, qkv, static_cast<const A*>(nullptr),
           static_cast<const A*>(nullptr), start, s, scale, out);
  else if (s.kv == kv_storage::fp8_e4m3)
    launch(attention_fp8_cache<A>, grid, attention_threads, bytes, stream, qkv, static_cast<const fp8_code*>(k_cache),
           static_cast<const fp8_code*>(v_cache), start, s, scale, out);
  else
    launch(attention_16bit_cache<A>, grid, attention_threads, bytes, stream, qkv, static_cast<const A*>(k_cache),
           static_cast<const A*>(v_cache), start, s, scale, out);
  ITERA_CUDA_CHECK_LAUNCH();
}

template <class A>
void swiglu(const A* gate_up, A* act, std::int64_t rows, std::int64_t intermediate, cudaStream_t stream) {
  if (intermediate % 8 == 0 && aligned16(gate_up) && aligned16(act)) {
    const std::int64_t words = intermediate / 8;
    const dim3 grid(blocks_for(static_cast<std::uint64_t>(words)),
                    static_cast<unsigned>(std::min<std::int64_t>(rows, 65535)));
    launch(swiglu8_kernel<A>, grid, block_threads, 0, stream, reinterpret_cast<const uint4*>(gate_up),
           reinterpret_cast<uint4*>(act), rows, words);
  } else {
    const auto total = static_cast<std::uint64_t>(rows * intermediate);
    launch(swiglu_kernel<A>, blocks_for(total), block_threads, 0, stream, gate_up, act, rows, intermediate);
  }
  ITERA_CUDA_CHECK_LAUNCH();
}

void argmax(const float* logits, std::int64_t in_stride, std::int64_t in_offset, std::int64_t rows, std::int64_t vocab,
            std::int32_t* out, cudaStream_t stream, const advance_lengths& then) {
  const bool vec = vocab % 4 == 0 && reinterpret_cast<std::uintptr_t>(logits) % 16 == 0;
  // A row over a cluster of up to 8 blocks where there are clusters (the portable size), else one
  // block (llama-3.1-8b's 128256 logits: one block 14.7 us, H200: docs/perf/2026-11-30-decode-step-3.md);
  // fewer blocks a row where the rows alone fill the SMs (parts x rows <= SMs): at 64 rows a
  // cluster of 2, 13.8 us where 8 took 38.9 (docs/perf/2026-11-30-stream-gemm.md).
  unsigned parts = device_is_sm90_or_later() && vocab >= 8 * argmax_threads ? 8u : 1u;
  while (parts > 1 && static_cast<std::int64_t>(parts) * rows > device_multiprocessors()) parts /= 2;
  if (rows > 65535)  // the grid's y dimension
    throw std::invalid_argument("argmax: " + std::to_string(rows) + " rows in one launch, at most 65535");
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(parts, static_cast<unsigned>(rows));
  config.blockDim = dim3(argmax_threads);
  config.stream = stream;
  launch_attributes attrs(dim3(parts, 1, 1));
  attrs.apply_to(config);
  ITERA_CUDA_CHECK(cudaLaunchKernelEx(&config, argmax_kernel, logits, in_stride, in_offset, vocab, out, vec, then.length,
                                     then.by, then.limit));
  ITERA_CUDA_CHECK_LAUNCH();
}

bool gemv_supported(std::int64_t tokens, std::int64_t in, const void* w, const void* x, bool fp8) {
  return tokens >= 1 && tokens <= gemv_max_tokens && in > 0 && in % (fp8 ? 16 : 8) == 0 && in / 8 <= INT32_MAX &&
         aligned16(w) && aligned16(x);
}

namespace {
void check_gemv(std::int64_t out_rows, std::int64_t in, const void* w, const void* x, std::int64_t tokens,
                bool fp32_out, float beta, bool fp8) {
  if (!gemv_supported(tokens, in, w, x, fp8))
    throw std::invalid_argument(itera::cuda::cat("llm gemv: tokens ", tokens, " (1..", gemv_max_tokens, "), in ", in,
                                                 " (a multiple of ", fp8 ? 16 : 8,
                                                 ") and 16-byte aligned operands needed"));
  if (out_rows < 1 || out_rows * tokens > INT32_MAX)
    throw std::invalid_argument(itera::cuda::cat("llm gemv: ", out_rows, " output rows out of range"));
  if (!fp32_out && beta != 0.0f) throw std::invalid_argument("llm gemv: 16-bit output takes beta = 0 only");
}
}  // namespace

template <class A>
void gemv(const A* w, std::int64_t out_rows, std::int64_t in, const A* x, std::int64_t tokens, void* out,
          bool fp32_out, float beta, cudaStream_t stream) {
  check_gemv(out_rows, in, w, x, tokens, fp32_out, beta, false);
  gemv_tokens<A, w_16bit<A>>(w, nullptr, static_cast<int>(out_rows), static_cast<int>(in / 8), x, tokens, out, fp32_out,
                             beta, stream);
  ITERA_CUDA_CHECK_LAUNCH();
}

template <class A>
void gemv_fp8(const std::uint8_t* w, const float* scales, std::int64_t out_rows, std::int64_t in, const A* x,
              std::int64_t tokens, void* out, bool fp32_out, float beta, cudaStream_t stream) {
  check_gemv(out_rows, in, w, x, tokens, fp32_out, beta, true);
  if (fp8_mma_gemv_takes(tokens, in))
    with_tokens(tokens, [&](auto t) {
      launch_gemv_fp8_mma<A, decltype(t)::value, false>(w, scales, static_cast<int>(out_rows), static_cast<int>(in), x,
                                                        nullptr, 0, 0, nullptr, 0.0f, out, fp32_out, beta, stream);
    });
  else
    gemv_tokens<A, w_fp8>(w, scales, static_cast<int>(out_rows), static_cast<int>(in / 16), x, tokens, out, fp32_out,
                          beta, stream);
  ITERA_CUDA_CHECK_LAUNCH();
}

bool gemv_fp8_on_tensor_cores(std::int64_t tokens, std::int64_t in) { return fp8_mma_gemv_takes(tokens, in); }

void override_gemv_fp8_on_tensor_cores(std::optional<bool> on) { fp8_mma_gemv_switch.override(on); }

bool gemv_rms_norm_supported(std::int64_t tokens, std::int64_t in, const void* w, const float* x,
                             const void* norm_weight, bool fp8) {
  return gemv_supported(tokens, in, w, x, fp8) && reinterpret_cast<std::uintptr_t>(norm_weight) % 16 == 0 &&
         rms_staged_bytes(tokens, in) <= gemv_rms_norm_max_staged;
}

template <class A>
void prepare_gemv_fp8(std::int64_t tokens, std::int64_t in) {
  if (!fp8_mma_gemv_takes(tokens, in)) return;
  with_tokens(tokens, [&](auto t) {
    constexpr int T = decltype(t)::value;
    const std::size_t shared = static_cast<std::size_t>(T) * static_cast<std::size_t>(in) * 2;
    for (const void* kernel : {reinterpret_cast<const void*>(&gemv_fp8_mma_kernel<A, T, false, false>),
                               reinterpret_cast<const void*>(&gemv_fp8_mma_kernel<A, T, true, false>),
                               reinterpret_cast<const void*>(&gemv_fp8_mma_kernel<A, T, false, true>),
                               reinterpret_cast<const void*>(&gemv_fp8_mma_kernel<A, T, true, true>)})
      (void)resident_blocks(kernel, shared);
  });
}

template <class A>
void prepare_gemv_rms_norm(std::int64_t tokens, std::int64_t in) {
  if (tokens < 1 || tokens > gemv_max_tokens || in < 1 || rms_staged_bytes(tokens, in) > gemv_rms_norm_max_staged)
    return;
  const std::size_t shared = rms_staged_bytes(tokens, in);
  with_tokens(tokens, [&](auto t) {
    constexpr int T = decltype(t)::value;
    for (const void* kernel : {reinterpret_cast<const void*>(&gemv_rms_norm_kernel<A, w_16bit<A>, T, false>),
                               reinterpret_cast<const void*>(&gemv_rms_norm_kernel<A, w_16bit<A>, T, true>),
                               reinterpret_cast<const void*>(&gemv_rms_norm_kernel<A, w_fp8, T, false>),
                               reinterpret_cast<const void*>(&gemv_rms_norm_kernel<A, w_fp8, T, true>)})
      (void)resident_blocks(kernel, shared);
  });
}

template <class A>
void gemv_rms_norm(const void* w, const float* scales, std::int64_t out_rows, std::int64_t in, const float* x,
                   std::int64_t in_stride, std::int64_t in_offset, const A* norm_weight, float eps,
                   std::int64_t tokens, void* out, bool fp32_out, float beta, cudaStream_t stream) {
  const bool fp8 = scales != nullptr;
  if (!gemv_rms_norm_supported(tokens, in, w, x, norm_weight, fp8))
    throw std::invalid_argument(itera::cuda::cat(
        "llm gemv_rms_norm: tokens ", tokens, " (1..", gemv_max_tokens, "), in ", in, " (a multiple of ", fp8 ? 16 : 8,
        ", tokens x in x 2 bytes at most ", gemv_rms_norm_max_staged, ") and 16-byte aligned operands needed"));
  if (out_rows < 1 || out_rows * tokens > INT32_MAX)
    throw std::invalid_argument(itera::cuda::cat("llm gemv_rms_norm: ", out_rows, " output rows out of range"));
  if (!fp32_out && beta != 0.0f) throw std::invalid_argument("llm gemv_rms_norm: 16-bit output takes beta = 0 only");
  const int chunks = static_cast<int>(in / (fp8 ? 16 : 8));
  with_tokens(tokens, [&](auto t) {
    constexpr int T = decltype(t)::value;
    if (fp8 && fp8_mma_gemv_takes(tokens, in))
      launch_gemv_fp8_mma<A, T, true>(static_cast<const std::uint8_t*>(w), scales, static_cast<int>(out_rows),
                                      static_cast<int>(in), nullptr, x, in_stride, in_offset, norm_weight, eps, out,
                                      fp32_out, beta, stream);
    else if (fp8)
      launch_gemv_rms_norm<A, w_fp8, T>(w, scales, static_cast<int>(out_rows), chunks, x, in_stride, in_offset,
                                        norm_weight, eps, out, fp32_out, beta, stream);
    else
      launch_gemv_rms_norm<A, w_16bit<A>, T>(w, nullptr, static_cast<int>(out_rows), chunks, x, in_stride, in_offset,
                                             norm_weight, eps, out, fp32_out, beta, stream);
  });
  ITERA_CUDA_CHECK_LAUNCH();
}

bool gemv_swiglu_supported(std::int64_t tokens, std::int64_t intermediate, const void* w, const void* gate_up,
                           bool fp8) {
  // Each token's up half starts intermediate elements after its gate half: 16-byte aligned because
  // gemv_supported asks intermediate % 8 == 0.
  return gemv_supported(tokens, intermediate, w, gate_up, fp8) && 2 * intermediate / 8 <= INT32_MAX;
}

template <class A>
void gemv_swiglu(const void* w, const float* scales, std::int64_t out_rows, std::int64_t intermediate,
                 const A* gate_up, std::int64_t tokens, void* out, bool fp32_out, float beta, cudaStream_t stream) {
  const bool fp8 = scales != nullptr;
  if (!gemv_swiglu_supported(tokens, intermediate, w, gate_up, fp8))
    throw std::invalid_argument(itera::cuda::cat("llm gemv_swiglu: tokens ", tokens, " (1..", gemv_max_tokens,
                                                 "), intermediate ", intermediate, " (a multiple of ", fp8 ? 16 : 8,
                                                 ") and 16-byte aligned operands needed"));
  if (out_rows < 1 || out_rows * tokens > INT32_MAX)
    throw std::invalid_argument(itera::cuda::cat("llm gemv_swiglu: ", out_rows, " output rows out of range"));
  if (!fp32_out && beta != 0.0f) throw std::invalid_argument("llm gemv_swiglu: 16-bit output takes beta = 0 only");
  const int chunks = static_cast<int>(intermediate / (fp8 ? 16 : 8));
  with_tokens(tokens, [&](auto t) {
    constexpr int T = decltype(t)::value;
    if (fp8)
      launch_gemv_swiglu<A, w_fp8, T>(w, scales, static_cast<int>(out_rows), chunks, gate_up, out, fp32_out, beta,
                                      stream);
    else
      launch_gemv_swiglu<A, w_16bit<A>, T>(w, nullptr, static_cast<int>(out_rows), chunks, gate_up, out, fp32_out,
                                           beta, stream);
  });
  ITERA_CUDA_CHECK_LAUNCH();
}

void fill_init_fp8(std::uint8_t* codes, float* scales, std::int64_t rows, std::int64_t cols, int init_kind,
                   std::uint64_t seed, cudaStream_t stream) {
  if (rows == 0) return;
  fill_init_fp8_kernel<<<static_cast<unsigned>(rows), rms_threads, 0, stream>>>(codes, scales, cols, init_kind, seed);
  ITERA_CUDA_CHECK_LAUNCH();
}

template <class A>
void dequantise_fp8(const std::uint8_t* codes, const float* scales, std::int64_t rows, std::int64_t cols, A* out,
                    cudaStream_t stream) {
  const auto count = static_cast<std::uint64_t>(rows * cols);
  if (count == 0) return;
  if (cols % 16 != 0 || reinterpret_cast<std::uintptr_t>(codes) % 16 != 0 || reinterpret_cast<std::uintptr_t>(out) % 16 != 0)
    throw std::invalid_argument(itera::cuda::cat("llm dequantise_fp8: ", cols,
                                                 " columns (a multiple of 16) and 16-byte aligned buffers needed"));
  launch(dequantise_fp8_kernel<A>, blocks_for(count / 16), block_threads, 0, stream, codes, scales, cols, count, out);
  ITERA_CUDA_CHECK_LAUNCH();
}

template <class A>
void quantise_rows_fp8(const A* in, std::int64_t rows, std::int64_t cols, std::uint8_t* codes, float* scales,
                       cudaStream_t stream) {
  if (rows == 0) return;
  if (cols % 8 != 0 || reinterpret_cast<std::uintptr_t>(in) % 16 != 0 || reinterpret_cast<std::uintptr_t>(codes) % 8 != 0)
    throw std::invalid_argument(itera::cuda::cat("llm quantise_rows_fp8: ", cols,
                                                 " columns (a multiple of 8) and aligned buffers needed"));
  launch(quantise_rows_fp8_kernel<A>, static_cast<unsigned>(rows), rms_threads, 0, stream, in, cols, codes, scales);
}

template <class A>
void scale_product(void* d, void* out, bool fp32, std::int64_t rows, std::int64_t cols, const float* col_scale,
                   const float* row_scale, float beta, float sums_scale, cudaStream_t stream) {
  const auto count = static_cast<std::uint64_t>(rows * cols);
  if (count == 0) return;
  if (!fp32) {
    if (d != out || beta != 0.0f || cols % 8 != 0 || reinterpret_cast<std::uintptr_t>(d) % 16 != 0)
      throw std::invalid_argument("llm scale_product: 16-bit sums are scaled in place, beta 0, columns a multiple of 8");
    if (!is_fp16<A> && sums_scale != 1.0f)
      throw std::invalid_argument("llm scale_product: bf16 sums are never scaled down (fp32's range)");
    launch(scale_product_16bit_kernel<A>, blocks_for(count / 8), block_threads, 0, stream, static_cast<A*>(d), cols,
           count / 8, col_scale, row_scale, 1.0f / sums_scale);
    return;
  }
  if (sums_scale != 1.0f)
    throw std::invalid_argument("llm scale_product: fp32 sums come from a product with alpha 1 (sums_scale must be 1)");
  launch(scale_add_product_f32_kernel, blocks_for(count), block_threads, 0, stream, static_cast<const float*>(d),
         static_cast<float*>(out), cols, count, col_scale, row_scale, beta);
}

// The two compute types' instances of every template above.
#define ITERA_LLM_KERNELS_FOR(A)                                                                                       \
  template void fill_init<A, A>(A*, std::uint64_t, int, std::uint64_t, cudaStream_t);                                   \
  template void embed<A>(const std::int32_t*, const A*, float*, std::int64_t, std::int64_t, std::int64_t, cudaStream_t, words); \
  template void rms_norm<A>(const float*, std::int64_t, std::int64_t, const A*, A*, std::int64_t, std::int64_t, float,  \
                            cudaStream_t);                                                                             \
  template void add_rms_norm<A>(float*, residual_parts, const A*, A*, std::int64_t, std::int64_t, float, cudaStream_t); \
  template void bias_rope_store<A>(A*, const A*, const float*, const std::int32_t*, std::int64_t,                      \
                                   const attention_shape&, void*, void*, bool, cudaStream_t);                          \
  template void check_cache_type<A>(const attention_shape&, const char*);                                              \
  template void prepare_attention<A>(const attention_shape&);                                                          \
  template void attention<A>(const A*, const void*, const void*, const std::int32_t*, std::int64_t,                    \
                             const attention_shape&, bool, float, A*, cudaStream_t, const decode_rope<A>&);            \
  template void swiglu<A>(const A*, A*, std::int64_t, std::int64_t, cudaStream_t);                                     \
  template void gemv<A>(const A*, std::int64_t, std::int64_t, const A*, std::int64_t, void*, bool, float, cudaStream_t); \
  template void gemv_fp8<A>(const std::uint8_t*, const float*, std::int64_t, std::int64_t, const A*, std::int64_t,     \
                            void*, bool, float, cudaStream_t);                                                         \
  template void prepare_gemv_rms_norm<A>(std::int64_t, std::int64_t);                                                  \
  template void prepare_gemv_fp8<A>(std::int64_t, std::int64_t);                                                       \
  template void gemv_rms_norm<A>(const void*, const float*, std::int64_t, std::int64_t, const float*, std::int64_t,    \
                                 std::int64_t, const A*, float, std::int64_t, void*, bool, float, cudaStream_t);       \
  template void gemv_swiglu<A>(const void*, const float*, std::int64_t, std::int64_t, const A*, std::int64_t, void*,   \
                               bool, float, cudaStream_t);                                                             \
  template void dequantise_fp8<A>(const std::uint8_t*, const float*, std::int64_t, std::int64_t, A*, cudaStream_t);    \
  template void quantise_rows_fp8<A>(const A*, std::int64_t, std::int64_t, std::uint8_t*, float*, cudaStream_t);      \
  template void scale_product<A>(void*, void*, bool, std::int64_t, std::int64_t, const float*, const float*, float,    \
                                 float, cudaStream_t);
ITERA_LLM_KERNELS_FOR(bf16)
ITERA_LLM_KERNELS_FOR(fp16)
#undef ITERA_LLM_KERNELS_FOR
// 16-bit weights held in the other 16-bit compute type (converted once, at load).
template void fill_init<fp16, bf16>(bf16*, std::uint64_t, int, std::uint64_t, cudaStream_t);
template void fill_init<bf16, fp16>(fp16*, std::uint64_t, int, std::uint64_t, cudaStream_t);

}  // namespace itera::kernels::llm
