// Causal attention of a prefill on tensor cores (llm_kernels.cuh: prefill_attention).
//
// One block of four warps takes a tile of 64 consecutive query rows of one sequence and one query
// head; it walks the keys in tiles of 64 from position 0 to the tile's last query position, so
// the work follows the causal triangle. Per key tile, each warp owns 16 query rows:
//   S = Q K^T         wmma bf16 16x16x16, fp32 accumulation, into shared memory
//   online softmax    fp32, two lanes per row: running max m and sum l, p = exp(s * scale - m)
//   O = O alpha + P V O kept in shared memory (fp32): its rows scaled by alpha = exp(m_old - m_new)
//                     there, then loaded as the accumulator of the P V product and stored back
// and at the end O / l is written as bf16. The K and V rows past the tile's last position are
// zero-filled (the cache there may hold anything, NaN included, and 0 x NaN is NaN in a product).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdint>

#include "itera/cuda/check.hpp"
#include "src/kernels/llm_kernels.cuh"

namespace itera::kernels::llm {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int tile_q = 64, tile_k = 64, warps = 4, warp_rows = 16;

// Shared memory layout for head dimension D, in bytes; every part 128-byte aligned.
template <int D>
struct prefill_layout {
  static constexpr std::size_t q = 0;                                           // bf16 [tile_q][D]
  static constexpr std::size_t k = q + tile_q * D * 2;                          // bf16 [tile_k][D]
  static constexpr std::size_t v = k + tile_k * D * 2;                          // bf16 [tile_k][D]
  static constexpr std::size_t s = v + tile_k * D * 2;                          // f32 [warps][16][tile_k]
  static constexpr std::size_t p = s + warps * warp_rows * tile_k * 4;          // bf16 [warps][16][tile_k]
  static constexpr std::size_t o = p + warps * warp_rows * tile_k * 2;          // f32 [warps][16][D]
  static constexpr std::size_t stats = o + static_cast<std::size_t>(warps) * warp_rows * D * 4;  // m, l, alpha
  static constexpr std::size_t bytes = stats + 3 * tile_q * 4;
};

// Copies `count` rows of D bf16 from src (row stride src_stride elements) into dst [rows][D],
// zero-filling rows at or past `valid`. 16-byte chunks across the block.
template <int D>
__device__ __forceinline__ void load_rows(bf16* dst, const bf16* src, std::int64_t src_stride, int count, int valid) {
  constexpr int chunks = D / 8;
  for (int i = threadIdx.x; i < count * chunks; i += blockDim.x) {
    const int row = i / chunks, c = i % chunks;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (row < valid) value = *reinterpret_cast<const uint4*>(src + row * src_stride + c * 8);
    *reinterpret_cast<uint4*>(dst + row * D + c * 8) = value;
  }
}

template <int D>
__global__ void __launch_bounds__(warps * 32)
    prefill_attention_kernel(const bf16* qkv, const bf16* k_cache, const bf16* v_cache, const std::int32_t* start,
                             attention_shape sh, float scale, bf16* out) {
  using L = prefill_layout<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sq = reinterpret_cast<bf16*>(smem + L::q);
  bf16* sk = reinterpret_cast<bf16*>(smem + L::k);
  bf16* sv = reinterpret_cast<bf16*>(smem + L::v);
  float* stats = reinterpret_cast<float*>(smem + L::stats);
  float* sm = stats;
  float* sl = stats + tile_q;
  float* salpha = stats + 2 * tile_q;

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t seq = blockIdx.z;
  const int head = static_cast<int>(blockIdx.y);
  const std::int64_t q0 = static_cast<std::int64_t>(blockIdx.x) * tile_q;  // first row of the tile in its sequence
  const int rows = static_cast<int>(min(static_cast<std::int64_t>(tile_q), sh.rows_per_seq - q0));
  const int kv_head = head / static_cast<int>(sh.heads / sh.kv_heads);
  const std::int64_t qkv_width = (sh.heads + 2 * sh.kv_heads) * D;
  const std::int64_t first_pos = start[seq] + q0;  // position of the tile's first row
  const std::int64_t last_pos = first_pos + rows - 1;
  const std::int64_t cache_base = ((seq * sh.kv_heads + kv_head) * sh.max_context) * D;
  const std::int64_t row0 = seq * sh.rows_per_seq + q0;  // the tile's first row in the pass

  load_rows<D>(sq, qkv + row0 * qkv_width + static_cast<std::int64_t>(head) * D, qkv_width, tile_q, rows);
  float* so = reinterpret_cast<float*>(smem + L::o) + warp * warp_rows * D;
  float* ss = reinterpret_cast<float*>(smem + L::s) + warp * warp_rows * tile_k;
  bf16* sp = reinterpret_cast<bf16*>(smem + L::p) + warp * warp_rows * tile_k;
  for (int i = lane; i < warp_rows * D; i += 32) so[i] = 0.0f;
  if (lane < warp_rows) {
    sm[warp * warp_rows + lane] = -INFINITY;
    sl[warp * warp_rows + lane] = 0.0f;
  }

  const int my_first = warp * warp_rows;  // the warp's first row in the tile
  const bool warp_active = my_first < rows;
  const std::int64_t warp_last_pos = first_pos + min(my_first + warp_rows, rows) - 1;
  // Softmax: lanes 2r and 2r + 1 share row r, 32 columns each.
  const int r = lane / 2, half = lane % 2;
  const std::int64_t row_pos = first_pos + my_first + r;
  const bool row_valid = my_first + r < rows;

  for (std::int64_t k0 = 0; k0 <= last_pos; k0 += tile_k) {
    __syncthreads();  // everyone is done with the previous K and V tiles
    const int valid = static_cast<int>(min(static_cast<std::int64_t>(tile_k), last_pos + 1 - k0));
    load_rows<D>(sk, k_cache + cache_base + k0 * D, D, tile_k, valid);
    load_rows<D>(sv, v_cache + cache_base + k0 * D, D, tile_k, valid);
    __syncthreads();
    if (!warp_active || k0 > warp_last_pos) continue;  // every key of the tile is after the warp's rows

    // S = Q K^T for the warp's 16 rows.
    for (int n = 0; n < tile_k / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
        wmma::load_matrix_sync(a, sq + my_first * D + kk * 16, D);
        wmma::load_matrix_sync(b, sk + n * 16 * D + kk * 16, D);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(ss + n * 16, acc, tile_k, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax of the warp's rows over this tile.
    float vals[32];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int c = half * 32 + j;
      const bool keep = row_valid && k0 + c <= row_pos;
      vals[j] = keep ? ss[r * tile_k + c] * scale : -INFINITY;
      tile_max = fmaxf(tile_max, vals[j]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const int srow = my_first + r;
    const float m_old = sm[srow];
    const float m_new = fmaxf(m_old, tile_max);
    // A row with nothing kept so far (m_new = -inf) keeps p = 0 and alpha = 1.
    const float alpha = m_new == -INFINITY ? 1.0f : __expf(m_old - m_new);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float p = vals[j] == -INFINITY ? 0.0f : __expf(vals[j] - m_new);
      sum += p;
      sp[r * tile_k + half * 32 + j] = __float2bfloat16(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    __syncwarp();
    if (half == 0) {
      sm[srow] = m_new;
      sl[srow] = sl[srow] * alpha + sum;
      salpha[srow] = alpha;
    }
    __syncwarp();
    for (int i = lane; i < warp_rows * D; i += 32) so[i] *= salpha[my_first + i / D];
    __syncwarp();

    // O += P V.
    for (int n = 0; n < D / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, so + n * 16, D, wmma::mem_row_major);
      for (int kk = 0; kk < tile_k / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
        wmma::load_matrix_sync(a, sp + kk * 16, tile_k);
        wmma::load_matrix_sync(b, sv + kk * 16 * D + n * 16, D);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(so + n * 16, acc, D, wmma::mem_row_major);
    }
    __syncwarp();
  }

  if (!warp_active) return;
  __syncwarp();
  const std::int64_t q_dim = sh.heads * D;
  for (int i = lane; i < warp_rows * D; i += 32) {
    const int rr = i / D, d = i % D;
    if (my_first + rr >= rows) break;
    const float l = sl[my_first + rr];
    out[(row0 + my_first + rr) * q_dim + static_cast<std::int64_t>(head) * D + d] = __float2bfloat16(so[i] / l);
  }
}

template <int D>
bool launch(const bf16* qkv, const bf16* k_cache, const bf16* v_cache, const std::int32_t* start, std::int64_t rows,
            const attention_shape& s, float scale, bf16* out, cudaStream_t stream) {
  constexpr std::size_t bytes = prefill_layout<D>::bytes;
  static const bool ready = [] {
    ITERA_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
    return true;
  }();
  (void)ready;
  const std::int64_t seqs = rows / s.rows_per_seq;
  const dim3 grid(static_cast<unsigned>((s.rows_per_seq + tile_q - 1) / tile_q), static_cast<unsigned>(s.heads),
                  static_cast<unsigned>(seqs));
  prefill_attention_kernel<D><<<grid, warps * 32, bytes, stream>>>(qkv, k_cache, v_cache, start, s, scale, out);
  ITERA_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace

bool prefill_attention_supported(const attention_shape& s) {
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0) return false;
  if (s.head_dim != 16 && s.head_dim != 32 && s.head_dim != 64 && s.head_dim != 128) return false;
  int device = 0, major = 0;
  ITERA_CUDA_CHECK(cudaGetDevice(&device));
  ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 8;  // bf16 wmma needs sm_80
}

bool prefill_attention(const bf16* qkv, const bf16* k_cache, const bf16* v_cache, const std::int32_t* start,
                       std::int64_t rows, const attention_shape& s, float scale, bf16* out, cudaStream_t stream) {
  if (s.rows_per_seq < 2 || rows % s.rows_per_seq != 0 || rows / s.rows_per_seq > 65535) return false;
  if (!prefill_attention_supported(s)) return false;
  switch (s.head_dim) {
    case 16: return launch<16>(qkv, k_cache, v_cache, start, rows, s, scale, out, stream);
    case 32: return launch<32>(qkv, k_cache, v_cache, start, rows, s, scale, out, stream);
    case 64: return launch<64>(qkv, k_cache, v_cache, start, rows, s, scale, out, stream);
    case 128: return launch<128>(qkv, k_cache, v_cache, start, rows, s, scale, out, stream);
    default: return false;
  }
}

}  // namespace itera::kernels::llm
