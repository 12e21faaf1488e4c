#pragma once
// Attention on tensor cores in the manner of FlashAttention-2, shared by the llm prefill (causal,
// K and V from the KV cache: llm_prefill_attention.cu) and the vision encoder (every token sees
// every token of its image, K and V straight from the qkv GEMM output: vit_kernels.cu). A policy
// says which rows, keys and output one block takes, and the element they hold (common.cuh: the
// compute type A, bf16 or fp16; the vision encoder's is bf16); the kernel is the same.
//
// One block of four warps takes a tile of 64 consecutive query rows of one head, each warp 16
// rows; it walks the keys in tiles of 64 from key 0 to the block's last key.
//   Q        loaded once (cp.async), kept in registers as mma A fragments
//   K, V     tiles double-buffered in shared memory with cp.async: the next tile is in flight
//            while this one is computed; rows are 16-byte chunks swizzled by row (mma.cuh:
//            swizzle), so ldmatrix reads eight rows without bank conflicts
//   S = QK^T mma.sync m16n8k16 A -> fp32, K fragments by ldmatrix
//   softmax  online, base 2, in registers: each thread holds two rows' values, the row max is
//            taken across the four threads of a quad; the running sum stays per thread until the end
//   O += PV  P converted to A fragments (of type A) straight from the S accumulators, V fragments
//            by ldmatrix.trans, O in registers (fp32)
// and at the end O / l is written as A. Nothing of A's range is at stake: P is below 2^8 (see
// softmax_tile), O / l is a weighted mean of V rows. Rows of K and V past the block's last key are
// zero-filled by the copies (a cache there may hold anything, NaN included) and masked.
//
// Head dimension D (a multiple of 8) is held in shared memory and registers as DP, D rounded up to
// a multiple of 16 (mma's k-step): the padding columns are zero-filled, so they add nothing to
// Q K^T, and the output columns they make are not stored. SigLIP's 72 runs as 80.
//
// A policy P provides
//   using element = bf16 or fp16;               // Q, K, V and the output
//   static constexpr bool causal;
//   __device__ block_work<element> work() const;      // from blockIdx: this block's rows and key count
//   __device__ kv_rows<element> kv() const;           // from blockIdx: where its keys and values are
//   __device__ block_output<element> output() const;  // from blockIdx: where its rows go
// kv() is asked at each tile and output() at the end, so that nothing about them stays in
// registers through the loop (the compiler recomputes them from the kernel's parameters).
// Causal: keys after a row's position are masked, and a warp skips key tiles wholly after its
// rows. Otherwise keys at or past block_work::keys are masked (the last tile of a length that is
// not a multiple of 64).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "src/kernels/common.cuh"
#include "src/kernels/launch.cuh"
#include "src/kernels/mma.cuh"

namespace itera::kernels::flash {

constexpr int tile_q = 64, tile_k = 64, warps = 4, warp_rows_per_warp = 16, threads = warps * 32;

// D rounded up to mma's k-step.
constexpr int padded_head_dim(int d) { return (d + 15) / 16 * 16; }

// Shared memory for padded head dimension DP, in bytes: Q [64][DP], then K and V, two buffers each.
template <int DP>
struct layout {
  static constexpr std::size_t tile = static_cast<std::size_t>(tile_k) * DP * 2;
  static constexpr std::size_t q = 0;
  static constexpr std::size_t k = q + static_cast<std::size_t>(tile_q) * DP * 2;
  static constexpr std::size_t v = k + 2 * tile;
  static constexpr std::size_t bytes = v + 2 * tile;
};

// What one block computes. Row i of the block's queries is q + i * q_stride (D wide).
template <class A>
struct block_work {
  const A* q = nullptr;
  std::int64_t q_stride = 0;
  int rows = 0;                // query rows in this block (1..64; more where a non-causal launch sized
                               // for the wgmma kernel gives the last block a short tile after its
                               // own: flash_attention_wgmma.cuh, query_tiles)
  std::int64_t keys = 0;       // keys [0, keys) are read
  std::int64_t first_pos = 0;  // causal: the position of the block's first row (its keys are <= it)
};
// Key j's K and V rows are k + j * stride and v + j * stride.
template <class A>
struct kv_rows {
  const A* k = nullptr;
  const A* v = nullptr;
  std::int64_t stride = 0;
};
// Output row i of the block is out + i * stride.
template <class A>
struct block_output {
  A* out = nullptr;
  std::int64_t stride = 0;
};

// Blocks per SM the register allocation must leave room for, by padded head dimension: what ptxas
// chose for the llm prefill kernel before it was generalised (255, 168, 128 and 96 registers at
// 128, 64, 32 and 16), kept so that the kernel's occupancy does not change with the policy.
constexpr int min_blocks(int dp) { return dp >= 128 ? 1 : dp >= 80 ? 2 : dp >= 64 ? 3 : dp >= 32 ? 4 : 5; }

// One warp's 16 query rows: the online softmax's running max and sum per row (each thread holds
// rows g and g + 8 of its quad) and the output accumulators, O[n] holding columns 8n .. 8n + 7.
template <int DP>
struct warp_rows {
  float o[DP / 8][4];
  float m_lo, m_hi, l_lo, l_hi;
  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    m_lo = m_hi = -INFINITY;
    l_lo = l_hi = 0.0f;
  }
};

// The warp's Q fragments of its 16 rows from a swizzled [rows][DP] shared tile, from row `first`.
template <int DP>
__device__ __forceinline__ void load_q_fragments(const unsigned char* sq, int first, int lane,
                                                 unsigned (&qf)[DP / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < DP / 16; ++kk) {
    const int r = first + (lane % 8) + ((lane / 8) % 2) * 8, c = 2 * kk + lane / 16;
    ldmatrix_x4(smem_addr(sq + swizzle<DP>(r, c)), qf[kk]);
  }
}

// The online softmax moves its reference max only when a row's scores exceed it by more than this
// (log2 units): softmax_tile says why.
constexpr float rescale_threshold = 8.0f;

// Probabilities go through common.cuh's exp2_approx: results below 2^-126 flush to zero, and
// probabilities that small add nothing to a sum that holds at least one 1.

// The lazy move of the running max (softmax_tile says why): when some row of the warp would pass
// its reference by more than rescale_threshold, both rows' references move to the larger of
// reference and candidate (scaled scores), and a_lo, a_hi get the factor O and l must be rescaled
// by; otherwise nothing moves and the factors are 1. Returns whether it moved (warp-uniform).
template <int DP>
__device__ __forceinline__ bool move_reference(warp_rows<DP>& st, float cand_lo, float cand_hi, float& a_lo,
                                               float& a_hi) {
  const bool moves =
      __any_sync(0xffffffffu, cand_lo > st.m_lo + rescale_threshold || cand_hi > st.m_hi + rescale_threshold);
  const float mn_lo = moves ? fmaxf(st.m_lo, cand_lo) : st.m_lo, mn_hi = moves ? fmaxf(st.m_hi, cand_hi) : st.m_hi;
  a_lo = moves ? exp2_approx(st.m_lo - mn_lo) : 1.0f;
  a_hi = moves ? exp2_approx(st.m_hi - mn_hi) : 1.0f;
  st.m_lo = mn_lo;
  st.m_hi = mn_hi;
  return moves;
}

// The online softmax of one tile's scores s (the warp's 16 rows x 8 NS keys k0 .., mma C fragments:
// s[n] holds keys k0 + 8n ..), in base 2: with Masking, keys for which allowed(key, row_hi) is
// false are set to -inf first (only the tiles that need it pay for the test). The running max is
// kept scaled (m = max(s) x scale_log2: the scale is positive), so each probability is one fused
// multiply-add and one ex2: p = 2^(s x scale_log2 - m). The running max and sum move on, s is left
// holding P, the unnormalised probabilities (fp32), and a_lo, a_hi get the factor O must be
// rescaled by (mma.cuh: scale_rows) before P V is added; returns false when that factor is 1 for all the
// warp's rows (warp-uniform: the rescale may be skipped). Shared by the mma.sync and the wgmma (sm_90a)
// kernels, whose accumulators have this layout.
// Tiles of 8 NS keys: NS = tile_k / 8 here, 16 for the Hopper prefill's 128-key tiles.
template <bool Masking, int DP, class Allowed, int NS>
__device__ __forceinline__ bool softmax_tile(warp_rows<DP>& st, float (&s)[NS][4], int k0, const Allowed& allowed,
                                             float scale_log2, int lane, float& a_lo, float& a_hi) {
  if constexpr (Masking) {
    const int t4 = lane % 4;
#pragma unroll
    for (int n = 0; n < NS; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = k0 + n * 8 + 2 * t4 + e;
        if (!allowed(key, false)) s[n][e] = -INFINITY;
        if (!allowed(key, true)) s[n][2 + e] = -INFINITY;
      }
    }
  }
  float tmax_lo = -INFINITY, tmax_hi = -INFINITY;
#pragma unroll
  for (int n = 0; n < NS; ++n) {
    tmax_lo = fmaxf(tmax_lo, fmaxf(s[n][0], s[n][1]));
    tmax_hi = fmaxf(tmax_hi, fmaxf(s[n][2], s[n][3]));
  }
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    tmax_lo = fmaxf(tmax_lo, __shfl_xor_sync(0xffffffffu, tmax_lo, off));
    tmax_hi = fmaxf(tmax_hi, __shfl_xor_sync(0xffffffffu, tmax_hi, off));
  }
  // The reference max moves only when some row of the warp would exceed it by more than
  // rescale_threshold (log2 units): otherwise the probabilities stay below 2^threshold = 256 (safe
  // in fp32, bf16 and fp16, and exact after the final division by l), O needs no rescale and the warp
  // skips its O x 1 multiplies (FlashAttention-4's conditional rescaling). Every row's first tile
  // holds key 0, which no row masks, so the reference is finite from then on.
  const bool moves = move_reference(st, tmax_lo * scale_log2, tmax_hi * scale_log2, a_lo, a_hi);
  const float mn_lo = st.m_lo, mn_hi = st.m_hi;
  float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
  for (int n = 0; n < NS; ++n) {
    s[n][0] = exp2_approx(fmaf(s[n][0], scale_log2, -mn_lo));
    s[n][1] = exp2_approx(fmaf(s[n][1], scale_log2, -mn_lo));
    s[n][2] = exp2_approx(fmaf(s[n][2], scale_log2, -mn_hi));
    s[n][3] = exp2_approx(fmaf(s[n][3], scale_log2, -mn_hi));
    sum_lo += s[n][0] + s[n][1];
    sum_hi += s[n][2] + s[n][3];
  }
  st.l_lo = fmaf(st.l_lo, a_lo, sum_lo);
  st.l_hi = fmaf(st.l_hi, a_hi, sum_hi);
  return moves;
}

// softmax_tile, then O rescaled at once (the mma.sync kernel).
template <bool Masking, int DP, class Allowed>
__device__ __forceinline__ void online_softmax(warp_rows<DP>& st, float (&s)[tile_k / 8][4], int k0,
                                               const Allowed& allowed, float scale_log2, int lane) {
  float a_lo, a_hi;
  if (softmax_tile<Masking, DP>(st, s, k0, allowed, scale_log2, lane, a_lo, a_hi)) scale_rows(st.o, a_lo, a_hi);
}

// P's A fragment (of type A) for keys 16 kk .. 16 kk + 15, straight from the softmax's registers.
template <class A, int NS>
__device__ __forceinline__ void p_fragment(const float (&s)[NS][4], int kk, unsigned (&pa)[4]) {
  pa[0] = pack2<A>(s[2 * kk][0], s[2 * kk][1]);
  pa[1] = pack2<A>(s[2 * kk][2], s[2 * kk][3]);
  pa[2] = pack2<A>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  pa[3] = pack2<A>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// One tile of 64 keys (k0 ..) against the warp's 16 rows: S = Q K^T on tensor cores, the online
// softmax, O += P V. Only the first `groups` 16-key groups of the tile are computed (the rest hold
// no key).
template <class A, int DP, class Allowed>
__device__ __forceinline__ void attend_tile(warp_rows<DP>& st, const unsigned (&qf)[DP / 16][4], const unsigned char* kt,
                                            const unsigned char* vt, int k0, int groups, bool masking,
                                            const Allowed& allowed, float scale_log2, int lane) {
  constexpr int KS = DP / 16, NT = DP / 8;
  // S = Q K^T: 16 rows x 64 keys per warp, n-tile n holds keys k0 + 8n .. + 7.
  float s[tile_k / 8][4];
#pragma unroll
  for (int n = 0; n < tile_k / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
    for (int np = 0; np < tile_k / 16; ++np) {
      if (np >= groups) continue;
      unsigned kb[4];
      const int r = np * 16 + (lane % 8) + (lane / 16) * 8, c = 2 * kk + (lane / 8) % 2;
      ldmatrix_x4(smem_addr(kt + swizzle<DP>(r, c)), kb);
      mma_m16n8k16<A>(s[2 * np], qf[kk], kb[0], kb[1]);
      mma_m16n8k16<A>(s[2 * np + 1], qf[kk], kb[2], kb[3]);
    }
  }
  if (masking) online_softmax<true, DP>(st, s, k0, allowed, scale_log2, lane);
  else online_softmax<false, DP>(st, s, k0, allowed, scale_log2, lane);
  // O += P V: P's A fragments from the S accumulators (keys 16 kk .. + 15), V by ldmatrix.trans.
#pragma unroll
  for (int kk = 0; kk < tile_k / 16; ++kk) {
    if (kk >= groups) continue;
    unsigned pa[4];
    p_fragment<A>(s, kk, pa);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      unsigned vb[4];
      const int r = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8, c = 2 * np + lane / 16;
      ldmatrix_x4_trans(smem_addr(vt + swizzle<DP>(r, c)), vb);
      mma_m16n8k16<A>(st.o[2 * np], pa, vb[0], vb[1]);
      mma_m16n8k16<A>(st.o[2 * np + 1], pa, vb[2], vb[3]);
    }
  }
}

// Row sums across the quad, then O / l as pairs of A into rows first .. first + 15 of `out` (row
// stride `stride`), rows at or past `rows` left alone, the padding columns (D .. DP) not stored.
template <int D, int DP, class A>
__device__ __forceinline__ void store_rows(warp_rows<DP>& st, A* out, std::int64_t stride, int first, int rows,
                                           int lane) {
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    st.l_lo += __shfl_xor_sync(0xffffffffu, st.l_lo, off);
    st.l_hi += __shfl_xor_sync(0xffffffffu, st.l_hi, off);
  }
  const int g = lane / 4, t4 = lane % 4;
  const int r_lo = first + g, r_hi = r_lo + 8;
  A* base = out + 2 * t4;
#pragma unroll
  for (int n = 0; n < DP / 8; ++n) {
    if (n * 8 >= D) continue;
    if (r_lo < rows)
      *reinterpret_cast<pair_of<A>*>(base + r_lo * stride + n * 8) =
          pair_from_float<A>(st.o[n][0] / st.l_lo, st.o[n][1] / st.l_lo);
    if (r_hi < rows)
      *reinterpret_cast<pair_of<A>*>(base + r_hi * stride + n * 8) =
          pair_from_float<A>(st.o[n][2] / st.l_hi, st.o[n][3] / st.l_hi);
  }
}

// Which keys a thread's two rows (g and g + 8 of its warp's 16, from the block's row my_first) may
// see. Causal: keys after a row's position (positions fit in int: max_context is far below 2^31),
// so only the diagonal tiles need the test. Otherwise: keys at or past the last (the partial last
// tile).
template <bool Causal>
struct key_mask {
  int pos_lo, pos_hi, diag_from, keys;
  template <class A>
  __device__ key_mask(const block_work<A>& w, int my_first, int g)
      : pos_lo(static_cast<int>(w.first_pos) + my_first + g),
        pos_hi(pos_lo + 8),
        diag_from(static_cast<int>(w.first_pos) + my_first - tile_k + 1),
        keys(static_cast<int>(w.keys)) {}
  __device__ bool operator()(int key, bool hi) const {
    if constexpr (Causal) return key <= (hi ? pos_hi : pos_lo);
    else return key < keys;
  }
  // Whether the tile of keys k0 .. k0 + KT - 1 holds a key some row may not see.
  template <int KT = tile_k>
  __device__ bool tile_needs_mask(int k0) const {
    if constexpr (Causal) return k0 + (KT - tile_k) > diag_from - 1;
    else return k0 + KT > keys;
  }
};

template <int D, int DP, class Policy>
__global__ void __launch_bounds__(threads, min_blocks(DP))
    attention_kernel(const Policy policy, float scale_log2) {
  static_assert(D % 8 == 0 && DP % 16 == 0 && D <= DP && DP - D < 16, "head dimension padding");
  using L = layout<DP>;
  using A = typename Policy::element;
  extern __shared__ __align__(128) unsigned char smem[];
  grid_dependents_launch();
  grid_dependency_wait();

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;  // mma fragment row (and row + 8)
  const block_work<A> w = policy.work();
  const int rows = w.rows;
  // A block's rows past its 64 are the wgmma kernel's tail rows (its query_tiles grid): this kernel
  // would leave them unwritten, so a grid sized for the other kernel stops here, loudly.
  if constexpr (!Policy::causal) {
    if (rows > tile_q) __trap();
  }

  unsigned char* sq = smem + L::q;
  const auto k_buf = [&](int b) { return smem + L::k + b * L::tile; };
  const auto v_buf = [&](int b) { return smem + L::v + b * L::tile; };
  const auto issue_kv = [&](std::int64_t k0, int b) {
    const int valid = static_cast<int>(min(static_cast<std::int64_t>(tile_k), w.keys - k0));
    const kv_rows<A> kv = policy.kv();
    load_tile_padded<D, DP, threads>(k_buf(b), kv.k + k0 * kv.stride, kv.stride, tile_k, valid);
    load_tile_padded<D, DP, threads>(v_buf(b), kv.v + k0 * kv.stride, kv.stride, tile_k, valid);
  };
  load_tile_padded<D, DP, threads>(sq, w.q, w.q_stride, tile_q, rows);
  issue_kv(0, 0);
  cp_async_commit();

  const int my_first = warp * warp_rows_per_warp;
  const bool warp_active = my_first < rows;
  // Causal: the last position of the warp's rows (tiles after it are skipped).
  const std::int64_t warp_last_pos = w.first_pos + min(my_first + warp_rows_per_warp, rows) - 1;
  const key_mask<Policy::causal> allowed(w, my_first, g);
  const int keys = allowed.keys;

  unsigned qf[DP / 16][4];
  warp_rows<DP> st;
  st.reset();

  const std::int64_t tiles = (w.keys + tile_k - 1) / tile_k;
  for (std::int64_t j = 0; j < tiles; ++j) {
    const int b = static_cast<int>(j & 1);
    cp_async_wait<0>();
    __syncthreads();  // tile j (and Q) landed; everyone is done with the other buffer
    if (j + 1 < tiles) issue_kv((j + 1) * tile_k, b ^ 1);
    cp_async_commit();
    if (j == 0) load_q_fragments<DP>(sq, my_first, lane, qf);
    const int k0 = static_cast<int>(j) * tile_k;
    if (!warp_active) continue;
    if constexpr (Policy::causal) {
      if (k0 > warp_last_pos) continue;  // every key of the tile is after the warp's rows
    }
    // 16-key groups of the tile that hold keys: the rest (past the last key: zero-filled, masked)
    // is skipped in both products. T = 257 leaves one key in the last tile.
    const int groups = (min(tile_k, keys - k0) + 15) / 16;
    attend_tile<A, DP>(st, qf, k_buf(b), v_buf(b), k0, groups, allowed.tile_needs_mask(k0), allowed, scale_log2, lane);
  }
  cp_async_wait<0>();
  if (!warp_active) return;
  const block_output<A> dst = policy.output();
  store_rows<D, DP>(st, dst.out, dst.stride, my_first, rows, lane);
}

// Launches attention_kernel<D, DP, Policy> over `grid` (the policy reads blockIdx), setting the
// kernel's shared memory limit once per process when it needs more than the default 48 KiB.
// `scale` multiplies the scores (natural base; the kernel works in base 2). Callers use
// flash_attention_wgmma.cuh: launch_attention, which takes the wgmma kernel where it runs.
template <int D, class Policy>
void launch_mma_sync_attention(const Policy& policy, dim3 grid, float scale, cudaStream_t stream) {
  constexpr int DP = padded_head_dim(D);
  constexpr std::size_t bytes = layout<DP>::bytes;
  allow_dynamic_shared(reinterpret_cast<const void*>(attention_kernel<D, DP, Policy>), bytes);
  // Scores in base 2: exp(x) = exp2(x * log2(e)).
  const float scale_log2 = scale * 1.4426950408889634f;
  itera::kernels::launch(attention_kernel<D, DP, Policy>, grid, threads, bytes, stream, policy, scale_log2);
}

}  // namespace itera::kernels::flash
