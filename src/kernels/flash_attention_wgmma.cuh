#pragma once
// The attention of flash_attention.cuh on Hopper's warpgroup instructions (wgmma, sm_90a), and
// launch_attention, which picks the kernel (attention_choice.hpp): this one on compute capability
// 9.0 when the binary holds sm_90a code and the padded head dimension is 64 or 128, the mma.sync
// kernel of flash_attention.cuh everywhere else. Policies, tiles and results are the same.
//
// Why: the mma.sync kernel reached 111 TFLOP/s on the H200 on the llama-3.1-8b prefill of 2048
// tokens (causal, head_dim 128): 8 warps per SM (255 registers), an issue slot every ~2 cycles per
// scheduler, ~11 instructions per mma (Nsight Compute, 2026-11-30), against 182 for PyTorch's
// FlashAttention-2 and 312 for cuDNN on the same shape (scripts/attention_reference.py).
//
// One block is one warpgroup (four warps, 128 threads) and takes 64 query rows, as before; per
// tile of 64 keys:
//   S = Q K^T   D / 16 wgmma m64n64k16, Q and K read from shared memory by descriptor
//   softmax     softmax_tile of flash_attention.cuh on the accumulators (the same layout)
//   O += P V    4 wgmma m64nDk16, P from registers (A fragments), V from shared memory,
//               transposed by the instruction (N-major)
// The scores of tile j + 1 and P V of tile j are issued together, and the softmax of tile j + 1
// runs while P V does (the order of FlashAttention-3, within one warpgroup). K and V go through three
// cp.async buffers (tile j + 2 loads meanwhile); each thread fences its copies into the async
// proxy before the barrier that hands a tile to wgmma. Tiles use the 128-byte swizzle
// layout of wgmma.cuh (rows of 64 16-bit elements; a 128-wide head is two such tiles side by side).
// The policy's element (bf16 or fp16) picks the instructions' input type; nothing else changes.
// Every warp of the warpgroup computes every key tile of the block (wgmma is warpgroup-wide): on a
// causal diagonal tile the warps whose rows end before the tile's keys compute masked scores.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "src/kernels/flash_attention.cuh"
#include "src/kernels/launch.cuh"
#include "src/kernels/mma.cuh"
#include "src/kernels/wgmma.cuh"

namespace itera::kernels::flash {

namespace sm90 {

// Byte offset of 16-byte chunk c of row r in a tile of `rows` rows x D 16-bit elements in the 128-byte swizzle
// layout: 64-column halves one after the other, each [rows][64] with chunk (c % 8) ^ (r % 8).
template <int D>
__device__ __forceinline__ unsigned offset(int rows, int r, int c) {
  return static_cast<unsigned>((c / 8) * rows * 128 + r * 128 + (((c % 8) ^ (r % 8)) * 16));
}

// `count` rows (a multiple of threads / (D / 8)) of D 16-bit elements E from src (row stride
// `stride`) into such a tile, rows at or past `valid` zero-filled. Each thread keeps one 16-byte column chunk and
// takes every (threads / chunks)-th row, so its shared-memory offsets step by a constant; a whole
// tile (valid >= count, every tile but a sequence's last) is copied without the per-row test.
template <int D, class E>
__device__ __forceinline__ void load_tile(unsigned char* dst, const E* src, std::int64_t stride, int count, int valid) {
  constexpr int chunks = D / 8, rows_per_pass = threads / chunks;
  static_assert(threads % chunks == 0 && rows_per_pass % 8 == 0, "rows of one pass cover whole swizzle groups");
  const int c = static_cast<int>(threadIdx.x) % chunks, r0 = static_cast<int>(threadIdx.x) / chunks;
  // r % 8 is r0 % 8 on every pass: the swizzled chunk stays, the row moves by rows_per_pass.
  const unsigned base = smem_addr(dst) + offset<D>(count, r0, c);
  const E* from = src + r0 * stride + c * 8;
  const std::int64_t pass_stride = rows_per_pass * stride;
  if (valid >= count) {
    for (int p = 0; p < count / rows_per_pass; ++p)
      cp_async16(base + static_cast<unsigned>(p * rows_per_pass * 128), from + p * pass_stride);
    return;
  }
  for (int p = 0; p < count / rows_per_pass; ++p) {
    const bool ok = r0 + p * rows_per_pass < valid;
    cp_async16(base + static_cast<unsigned>(p * rows_per_pass * 128), ok ? from + p * pass_stride : src, ok ? 16 : 0);
  }
}

// Q, then three buffers of K and of V: tile j in buffer j % 3, so that tile j + 2 can load while
// S = Q K^T of tile j + 1 and P V of tile j run.
constexpr int stages = 3;
template <int D>
struct layout {
  static constexpr std::size_t tile = static_cast<std::size_t>(tile_k) * D * 2;  // a multiple of 1024
  static constexpr std::size_t q = 0;
  static constexpr std::size_t k = q + static_cast<std::size_t>(tile_q) * D * 2;
  static constexpr std::size_t v = k + stages * tile;
  static constexpr std::size_t bytes = v + stages * tile;  // D = 128: 112 KiB, two blocks per SM
};

// Q K^T of one key tile: s = Q [64][D] x K [64][D]^T, both tiles in the swizzle layout.
template <class A, int D>
__device__ __forceinline__ void scores(float (&s)[tile_k / 8][4], unsigned q, unsigned k) {
  constexpr unsigned half = tile_q * 128;  // bytes of a [64][64] half (tile_q == tile_k)
  const std::uint64_t dq = wgmma::descriptor(q, 16, 1024), dk = wgmma::descriptor(k, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const unsigned step = static_cast<unsigned>(kk / 4) * half + static_cast<unsigned>(kk % 4) * 32;
    wgmma::mma_64x64_ss<A>(s, wgmma::advance(dq, step), wgmma::advance(dk, step), kk > 0);
  }
}

// O += P V over the first `groups` 16-key steps of the tile: P's A fragments (p_fragment, all
// made before the wgmma fence, so that no register the instructions read changes between them),
// V [64][D].
template <class A, int D>
__device__ __forceinline__ void accumulate(float (&o)[D / 8][4], const unsigned (&pa)[tile_k / 16][4], unsigned v,
                                           int groups) {
  constexpr unsigned half = tile_k * 128;  // LBO: the second 64 columns of V
  const std::uint64_t dv = wgmma::descriptor(v, half, 1024);
#pragma unroll
  for (int kk = 0; kk < tile_k / 16; ++kk) {
    if (kk >= groups) break;  // uniform over the warpgroup
    const std::uint64_t desc = wgmma::advance(dv, static_cast<unsigned>(kk) * 16 * 128);
    if constexpr (D == 128) wgmma::mma_64x128_rs<A>(o, pa[kk], desc);
    else wgmma::mma_64x64_rs<A>(o, pa[kk], desc);
  }
}

template <int D, class Policy>
__global__ void __launch_bounds__(threads, D == 64 ? 4 : 2) attention_kernel(const Policy policy, float scale_log2) {
  static_assert(D == 64 || D == 128, "the wgmma attention takes head_dim 64 or 128");
  static_assert(threads == 128 && tile_q == 64 && tile_k == 64 && warp_rows_per_warp == 16, "one warpgroup, 64 rows");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = layout<D>;
  using A = typename Policy::element;
  extern __shared__ __align__(1024) unsigned char smem[];
  grid_dependents_launch();
  grid_dependency_wait();

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;
  const block_work<A> w = policy.work();
  const int rows = w.rows;

  unsigned char* sq = smem + L::q;
  const auto k_buf = [&](int b) { return smem + L::k + b * L::tile; };
  const auto v_buf = [&](int b) { return smem + L::v + b * L::tile; };
  const kv_rows<A> kv = policy.kv();  // kept in registers: this kernel has room (the mma.sync one has not)
  const auto issue_kv = [&](std::int64_t k0, int b) {
    const int valid = static_cast<int>(min(static_cast<std::int64_t>(tile_k), w.keys - k0));
    load_tile<D>(k_buf(b), kv.k + k0 * kv.stride, kv.stride, tile_k, valid);
    load_tile<D>(v_buf(b), kv.v + k0 * kv.stride, kv.stride, tile_k, valid);
  };
  load_tile<D>(sq, w.q, w.q_stride, tile_q, rows);
  issue_kv(0, 0);
  cp_async_commit();

  const int my_first = warp * warp_rows_per_warp;
  const key_mask<Policy::causal> allowed(w, my_first, g);
  const int keys = allowed.keys;

  warp_rows<D> st;
  st.reset();
  const unsigned q_addr = smem_addr(sq);
  const std::int64_t tiles = (w.keys + tile_k - 1) / tile_k;
  if (tiles == 0) {  // no policy asks for zero keys; nothing to read, so nothing is written
    cp_async_wait<0>();
    return;
  }
  const auto buffer = [](std::int64_t j) { return static_cast<int>(j % stages); };
  // Tile 0 (with Q) and tile 1 in flight; S of tile 0.
  if (tiles > 1) issue_kv(tile_k, 1);
  cp_async_commit();
  cp_async_wait<1>();
  wgmma::fence_proxy_async();
  __syncthreads();
  // The softmax of tile t: P (fp32) in s, O's rescale factor into a_lo, a_hi. P becomes the A
  // fragments (pa) only once the P V before it is done: that one reads pa while it runs.
  float s[tile_k / 8][4];
  unsigned pa[tile_k / 16][4];
  float a_lo = 0.0f, a_hi = 0.0f;
  bool moved = false;  // O needs the rescale by a_lo, a_hi (warp-uniform)
  const auto softmax = [&](std::int64_t t) {
    const int k0 = static_cast<int>(t) * tile_k;
    if (allowed.tile_needs_mask(k0)) moved = softmax_tile<true, D>(st, s, k0, allowed, scale_log2, lane, a_lo, a_hi);
    else moved = softmax_tile<false, D>(st, s, k0, allowed, scale_log2, lane, a_lo, a_hi);
  };
  const auto pack = [&] {
#pragma unroll
    for (int kk = 0; kk < tile_k / 16; ++kk) p_fragment<A>(s, kk, pa[kk]);
  };
  wgmma::fence();
  scores<A, D>(s, q_addr, smem_addr(k_buf(0)));
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operands(s);
  softmax(0);
  pack();

  // Step j, P of tile j in pa: S of tile j + 1 and then P V of tile j go to the tensor cores; the
  // softmax of tile j + 1 runs on the others while P V does (the order of FlashAttention-3). The
  // last tile's P V is peeled off, so that every step issues both (ptxas serialises the products
  // when the groups in flight differ between paths).
  // O rescaled by the factor of the tile whose P V comes next, once nothing is in flight: ptxas
  // serialises the products when registers of one may be written between the issue of another
  // and the wait.
  const auto rescale_o = [&] {
    if (moved) scale_rows(st.o, a_lo, a_hi);
  };
  const auto add_pv = [&](std::int64_t j) {
    const int groups = (min(tile_k, keys - static_cast<int>(j) * tile_k) + 15) / 16;
    wgmma::fence_operands(st.o);
    wgmma::fence();
    accumulate<A, D>(st.o, pa, smem_addr(v_buf(buffer(j))), groups);
    wgmma::commit();
  };
  for (std::int64_t j = 0; j + 1 < tiles; ++j) {
    cp_async_wait<0>();  // tile j + 1, issued a step ago
    wgmma::fence_proxy_async();
    __syncthreads();  // ... visible to wgmma; every warp is past step j - 1, so tile j - 1's buffer is free
    if (j + 2 < tiles) issue_kv((j + 2) * tile_k, buffer(j + 2));
    cp_async_commit();
    wgmma::fence_operands(s);
    wgmma::fence();
    scores<A, D>(s, q_addr, smem_addr(k_buf(buffer(j + 1))));
    wgmma::commit();
    add_pv(j);
    wgmma::wait<1>();  // the scores of tile j + 1
    wgmma::fence_operands(s);
    softmax(j + 1);
    wgmma::wait<0>();
    wgmma::fence_operands(st.o);
    rescale_o();  // for P V of tile j + 1 (tile 0's needs none: O is 0)
    pack();
  }
  add_pv(tiles - 1);
  wgmma::wait<0>();
  wgmma::fence_operands(st.o);
  cp_async_wait<0>();
  if (my_first >= rows) return;
  const block_output<A> dst = policy.output();
  store_rows<D, D>(st, dst.out, dst.stride, my_first, rows, lane);
#else
  (void)policy;
  (void)scale_log2;
  __trap();  // launched only where wgmma_available(): never here
#endif
}

template <int D, class Policy>
void launch(const Policy& policy, dim3 grid, float scale, cudaStream_t stream) {
  constexpr std::size_t bytes = layout<D>::bytes;
  static const bool ready = [] {
    ITERA_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<D, Policy>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
    return true;
  }();
  (void)ready;
  const float scale_log2 = scale * 1.4426950408889634f;
  itera::kernels::launch(attention_kernel<D, Policy>, grid, threads, bytes, stream, policy, scale_log2);
}

}  // namespace sm90

// The attention of one launch over `grid` (the policy reads blockIdx): the wgmma kernel where it
// runs (head_dim 64 or 128 on sm_90a), the mma.sync kernel otherwise. `scale` multiplies the
// scores (natural base).
template <int D, class Policy>
void launch_attention(const Policy& policy, dim3 grid, float scale, cudaStream_t stream) {
  if constexpr (D == 64 || D == 128) {
    if (attention_kernel_for(D) == attention_kernel::wgmma) return sm90::launch<D>(policy, grid, scale, stream);
  }
  launch_mma_sync_attention<D>(policy, grid, scale, stream);
}

}  // namespace itera::kernels::flash
