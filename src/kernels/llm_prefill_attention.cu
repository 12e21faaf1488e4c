// Causal attention of a prefill on tensor cores (llm_kernels.cuh: prefill_attention), in the
// manner of FlashAttention-2.
//
// One block of four warps takes a tile of 64 consecutive query rows of one sequence and one query
// head, each warp 16 rows; it walks the keys in tiles of 64 from position 0 to the tile's last
// query position, so the work follows the causal triangle (the heaviest tiles are launched first).
//   Q        loaded once (cp.async), kept in registers as mma A fragments
//   K, V     tiles double-buffered in shared memory with cp.async: the next tile is in flight
//            while this one is computed; rows are 16-byte chunks XOR-swizzled by row, so ldmatrix
//            reads eight rows without bank conflicts
//   S = QK^T mma.sync m16n8k16 bf16 -> fp32, K fragments by ldmatrix
//   softmax  online, base 2, in registers: each thread holds two rows' values, the row max is
//            taken across the four threads of a quad; the running sum stays per thread until the end
//   O += PV  P converted to bf16 A fragments straight from the S accumulators, V fragments by
//            ldmatrix.trans, O in registers (fp32)
// and at the end O / l is written as bf16. K and V rows past the block's last position are
// zero-filled by the copies (the cache there may hold anything, NaN included).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "itera/cuda/check.hpp"
#include "src/kernels/launch.cuh"
#include "src/kernels/llm_kernels.cuh"
#include "src/kernels/mma.cuh"

namespace itera::kernels::llm {
namespace {

constexpr int tile_q = 64, tile_k = 64, warps = 4, warp_rows = 16;

// Shared memory for head dimension D, in bytes: Q [64][D], then K and V, two buffers each.
template <int D>
struct prefill_layout {
  static constexpr std::size_t tile = static_cast<std::size_t>(tile_k) * D * 2;
  static constexpr std::size_t q = 0;
  static constexpr std::size_t k = q + static_cast<std::size_t>(tile_q) * D * 2;
  static constexpr std::size_t v = k + 2 * tile;
  static constexpr std::size_t bytes = v + 2 * tile;
};

template <int D>
__global__ void __launch_bounds__(warps * 32)
    prefill_attention_kernel(const bf16* __restrict__ qkv, const bf16* __restrict__ k_cache,
                             const bf16* __restrict__ v_cache, const std::int32_t* __restrict__ start,
                             attention_shape sh, float scale_log2, bf16* __restrict__ out) {
  using L = prefill_layout<D>;
  constexpr int KS = D / 16;  // k-steps of Q K^T
  constexpr int NT = D / 8;   // n-tiles of O
  extern __shared__ __align__(128) unsigned char smem[];
  grid_dependents_launch();
  grid_dependency_wait();

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t4 = lane % 4;  // mma fragment row (and row + 8) and column pair
  const std::int64_t seq = blockIdx.z;
  const int head = static_cast<int>(blockIdx.y);
  // Heaviest tiles (the most keys) first: block x takes tile (tiles - 1 - x).
  const std::int64_t q0 = static_cast<std::int64_t>(gridDim.x - 1 - blockIdx.x) * tile_q;
  const int rows = static_cast<int>(min(static_cast<std::int64_t>(tile_q), sh.rows_per_seq - q0));
  const int kv_head = head / static_cast<int>(sh.heads / sh.kv_heads);
  const std::int64_t qkv_width = (sh.heads + 2 * sh.kv_heads) * D;
  const std::int64_t first_pos = start[seq] + q0;  // position of the tile's first row
  const std::int64_t last_pos = first_pos + rows - 1;
  const std::int64_t cache_base = ((seq * sh.kv_heads + kv_head) * sh.max_context) * D;
  const std::int64_t row0 = seq * sh.rows_per_seq + q0;  // the tile's first row in the pass

  unsigned char* sq = smem + L::q;
  const auto k_buf = [&](int b) { return smem + L::k + b * L::tile; };
  const auto v_buf = [&](int b) { return smem + L::v + b * L::tile; };
  const auto issue_kv = [&](std::int64_t k0, int b) {
    const int valid = static_cast<int>(min(static_cast<std::int64_t>(tile_k), last_pos + 1 - k0));
    load_tile<D, warps * 32>(k_buf(b), k_cache + cache_base + k0 * D, D, tile_k, valid);
    load_tile<D, warps * 32>(v_buf(b), v_cache + cache_base + k0 * D, D, tile_k, valid);
  };
  load_tile<D, warps * 32>(sq, qkv + row0 * qkv_width + static_cast<std::int64_t>(head) * D, qkv_width, tile_q, rows);
  issue_kv(0, 0);
  cp_async_commit();

  const int my_first = warp * warp_rows;
  const std::int64_t warp_last_pos = first_pos + min(my_first + warp_rows, rows) - 1;
  const bool warp_active = my_first < rows;
  // This thread's two rows' positions (positions fit in int: max_context is far below 2^31).
  const int pos_lo = static_cast<int>(first_pos) + my_first + g, pos_hi = pos_lo + 8;
  const int diag_from = static_cast<int>(first_pos) + my_first - tile_k + 1;  // tiles from here need masking

  unsigned qf[KS][4];
  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;

  const std::int64_t tiles = last_pos / tile_k + 1;
  for (std::int64_t j = 0; j < tiles; ++j) {
    const int b = static_cast<int>(j & 1);
    cp_async_wait<0>();
    __syncthreads();  // tile j (and Q) landed; everyone is done with the other buffer
    if (j + 1 < tiles) issue_kv((j + 1) * tile_k, b ^ 1);
    cp_async_commit();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        const int r = my_first + (lane % 8) + ((lane / 8) % 2) * 8, c = 2 * kk + lane / 16;
        ldmatrix_x4(smem_addr(sq + swizzle<D>(r, c)), qf[kk]);
      }
    }
    const int k0 = static_cast<int>(j) * tile_k;
    if (!warp_active || k0 > warp_last_pos) continue;  // every key of the tile is after the warp's rows

    // S = Q K^T: 16 rows x 64 keys per warp, n-tile n holds keys k0 + 8n .. + 7.
    float s[tile_k / 8][4];
#pragma unroll
    for (int n = 0; n < tile_k / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    const unsigned char* kt = k_buf(b);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
      for (int np = 0; np < tile_k / 16; ++np) {
        unsigned kb[4];
        const int r = np * 16 + (lane % 8) + (lane / 16) * 8, c = 2 * kk + (lane / 8) % 2;
        ldmatrix_x4(smem_addr(kt + swizzle<D>(r, c)), kb);
        mma_bf16(s[2 * np], qf[kk], kb[0], kb[1]);
        mma_bf16(s[2 * np + 1], qf[kk], kb[2], kb[3]);
      }
    }

    // Online softmax (base 2). Keys after a row's position are masked (the diagonal tiles).
    const bool diagonal = k0 > diag_from - 1;
    float tmax_lo = -INFINITY, tmax_hi = -INFINITY;
#pragma unroll
    for (int n = 0; n < tile_k / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = k0 + n * 8 + 2 * t4 + e;
        s[n][e] = (!diagonal || key <= pos_lo) ? s[n][e] * scale_log2 : -INFINITY;
        s[n][2 + e] = (!diagonal || key <= pos_hi) ? s[n][2 + e] * scale_log2 : -INFINITY;
        tmax_lo = fmaxf(tmax_lo, s[n][e]);
        tmax_hi = fmaxf(tmax_hi, s[n][2 + e]);
      }
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      tmax_lo = fmaxf(tmax_lo, __shfl_xor_sync(0xffffffffu, tmax_lo, off));
      tmax_hi = fmaxf(tmax_hi, __shfl_xor_sync(0xffffffffu, tmax_hi, off));
    }
    // Every row's first tile holds key 0 <= its position, so the running max is finite from then on.
    const float mn_lo = fmaxf(m_lo, tmax_lo), mn_hi = fmaxf(m_hi, tmax_hi);
    const float a_lo = exp2f(m_lo - mn_lo), a_hi = exp2f(m_hi - mn_hi);
    m_lo = mn_lo;
    m_hi = mn_hi;
    l_lo *= a_lo;
    l_hi *= a_hi;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      o[n][0] *= a_lo;
      o[n][1] *= a_lo;
      o[n][2] *= a_hi;
      o[n][3] *= a_hi;
    }
#pragma unroll
    for (int n = 0; n < tile_k / 8; ++n) {
      s[n][0] = exp2f(s[n][0] - mn_lo);
      s[n][1] = exp2f(s[n][1] - mn_lo);
      s[n][2] = exp2f(s[n][2] - mn_hi);
      s[n][3] = exp2f(s[n][3] - mn_hi);
      l_lo += s[n][0] + s[n][1];
      l_hi += s[n][2] + s[n][3];
    }

    // O += P V: P's A fragments from the S accumulators (keys 16 kk .. + 15), V by ldmatrix.trans.
    const unsigned char* vt = v_buf(b);
#pragma unroll
    for (int kk = 0; kk < tile_k / 16; ++kk) {
      const unsigned pa[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                              pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        unsigned vb[4];
        const int r = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8, c = 2 * np + lane / 16;
        ldmatrix_x4_trans(smem_addr(vt + swizzle<D>(r, c)), vb);
        mma_bf16(o[2 * np], pa, vb[0], vb[1]);
        mma_bf16(o[2 * np + 1], pa, vb[2], vb[3]);
      }
    }
  }
  cp_async_wait<0>();
  if (!warp_active) return;

  // Row sums across the quad, then O / l as bf16 pairs.
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  const std::int64_t q_dim = sh.heads * D;
  const int r_lo = my_first + g, r_hi = r_lo + 8;
  bf16* base = out + row0 * q_dim + static_cast<std::int64_t>(head) * D + 2 * t4;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    if (r_lo < rows)
      *reinterpret_cast<__nv_bfloat162*>(base + r_lo * q_dim + n * 8) =
          __floats2bfloat162_rn(o[n][0] / l_lo, o[n][1] / l_lo);
    if (r_hi < rows)
      *reinterpret_cast<__nv_bfloat162*>(base + r_hi * q_dim + n * 8) =
          __floats2bfloat162_rn(o[n][2] / l_hi, o[n][3] / l_hi);
  }
}

template <int D>
bool run_prefill(const bf16* qkv, const bf16* k_cache, const bf16* v_cache, const std::int32_t* start,
                 std::int64_t rows, const attention_shape& s, float scale, bf16* out, cudaStream_t stream) {
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
  // Scores in base 2: exp(x) = exp2(x * log2(e)).
  const float scale_log2 = scale * 1.4426950408889634f;
  itera::kernels::launch(prefill_attention_kernel<D>, grid, warps * 32, bytes, stream, qkv, k_cache, v_cache, start, s,
                         scale_log2, out);
  return true;
}

}  // namespace

bool prefill_attention_supported(const attention_shape& s) {
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0) return false;
  if (s.head_dim != 16 && s.head_dim != 32 && s.head_dim != 64 && s.head_dim != 128) return false;
  return device_compute_major() >= 8;  // bf16 mma.sync and ldmatrix need sm_80
}

bool prefill_attention(const bf16* qkv, const bf16* k_cache, const bf16* v_cache, const std::int32_t* start,
                       std::int64_t rows, const attention_shape& s, float scale, bf16* out, cudaStream_t stream) {
  if (s.rows_per_seq < 2 || rows % s.rows_per_seq != 0 || rows / s.rows_per_seq > 65535) return false;
  if (!prefill_attention_supported(s)) return false;
  switch (s.head_dim) {
    case 16: return run_prefill<16>(qkv, k_cache, v_cache, start, rows, s, scale, out, stream);
    case 32: return run_prefill<32>(qkv, k_cache, v_cache, start, rows, s, scale, out, stream);
    case 64: return run_prefill<64>(qkv, k_cache, v_cache, start, rows, s, scale, out, stream);
    case 128: return run_prefill<128>(qkv, k_cache, v_cache, start, rows, s, scale, out, stream);
    default: return false;
  }
}

}  // namespace itera::kernels::llm
