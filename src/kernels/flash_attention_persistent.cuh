#pragma once
// The vision encoder's attention at head_dim 64 for sequences of at most 264 tokens (ViT-L/14 at
// 224: 257), non-causal, on Hopper (sm_90a): a persistent kernel that keeps a whole head's Q, K
// and V in shared memory and loads the next head's while it computes this one. The arithmetic is
// the wgmma kernel's (flash_attention_wgmma.cuh), its device functions reused: scores, softmax_tile,
// p_fragment, accumulate, overlapped_step, fold_tail_keys, attend_tail_rows, store_rows.
//
// Why: ViT-L/14 at batch 128 spent ~200 us a layer in the wgmma kernel (174 TFLOP/s, Nsight
// Compute: tensor pipe 21%, issue slots 58% busy, 110 registers, four one-warpgroup blocks per
// SM). Its grid is (4 query tiles, 16 heads, 128 images) = 8192 blocks of four key tiles each:
// every block copies its head's K and V by cp.async from all its threads (each head's K and V are
// read four times, by four blocks), waits at a block barrier for each tile, and starts by waiting
// for Q and the first tile from DRAM with nothing of its own to overlap, then drains its last
// products alone. A kernel that kept K and V of a whole head resident was tried before
// (7c07cc7, taken out in 7de408b): one pass over all 256 keys, half the instructions, but 189
// registers, two or three blocks per SM and nothing loading while a block computed: at most 3%.
//
// Design: one block per SM (grid = min(work items, SMs)), four warpgroups (512 threads, at most
// 128 registers each: the same 16 warps per SM as before). Work items are (image, head) pairs,
// image-major (item = image x heads + head), so that the blocks running at once read whole rows
// of qkv [images][T][3 hidden] between them; a block takes items blockIdx.x, + gridDim.x, ...
//   Shared memory: two buffers, each a whole head: Q, K and V [256][64] in the 128-byte swizzle
//   layout of wgmma.cuh (sm90::offset), then the short tail's K and V rows ([8][64], unswizzled,
//   as fold_tail_keys reads them); 98 KiB each. Item k of the block goes to buffer k % 2.
//   Loads: the TMA, through a 3-D tensor map of qkv (64 columns, T rows, images): a box of 64 x
//   256 per operand, 128-byte swizzle, and a box of 64 x 8 without swizzle for the tail keys.
//   Rows past the image's last token are outside the tensor and arrive as zeros (never another
//   image's rows); they are masked or never read (key_mask, the tail key count). One `full`
//   mbarrier per buffer counts the item's bytes.
//   Warpgroup w takes query rows 64 w .. 64 w + 63 of each item, in the order of the wgmma kernel
//   (S of tile j + 1 and P V of tile j issued together, the softmax of tile j + 1 while P V runs)
//   over the resident key tiles, with no copies and no barrier between tiles; then it folds the
//   tail keys in (fold_tail_keys) and stores its rows (store_rows). Query rows past 256 (1 .. 8 at
//   T = 257 .. 264) go to attend_tail_rows on CUDA cores, K and V read from the resident copy:
//   row 256 + e to warpgroup (k + e) % 4, so the extra work turns round the warpgroups from item to
//   item instead of slowing one of them down on every item (a buffer is free only when the last of
//   them is done with it). Each warpgroup has its own scratch for them and its own named barrier.
//   Freeing: a warpgroup done with a buffer (its products waited for, its generic reads past its
//   named barrier) arrives on the buffer's counter (one thread, an atomic add); the last of the
//   item's warpgroups to arrive issues the loads of item k + 2 into it (after a CTA fence, and a
//   proxy fence: generic-proxy reads of the buffer came before the TMA's async-proxy writes). No
//   warpgroup waits for another but through the data: the loads of the next item are in flight
//   while this one computes, and a warpgroup that is ahead goes on with the next buffer.
//
// Limits: head_dim 64, non-causal (the vision encoder's image_policy), 65 .. 264 tokens
// (covers()): at most four key tiles resident and a short tail of up to tail_keys_max<64> = 8 keys
// (T - short_tail(T) <= 256), at most 8 query rows past 256, two per warpgroup. At T <= 192 the
// warpgroups past the last query tile have no rows and leave at once (the item is smaller than the
// block); the last query tile may be partial, its rows past T zero in Q and not stored. One block
// per SM and two items in flight: a block's first item waits for its loads, and the last round of
// items over the SMs is as ragged as the wgmma kernel's last wave (2048 items on 132 SMs: 15.5
// each).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "itera/cuda/check.hpp"
#include "src/kernels/flash_attention_wgmma.cuh"
#include "src/kernels/launch.cuh"
#include "src/kernels/tma.cuh"
#include "src/kernels/wgmma.cuh"

namespace itera::kernels::flash::persistent {

constexpr int head_dim = 64;
constexpr int warpgroups = 4, block_size = warpgroups * threads;  // threads: one warpgroup (128)
constexpr int resident_rows = warpgroups * tile_q;                // 256 rows of Q, of K and of V
constexpr int tail_keys = sm90::tail_keys_max<head_dim>;          // 8
constexpr int tail_rows_max = 2 * warpgroups;                     // rows past 256, two per warpgroup

// Whether the kernel takes a sequence of `tokens` (65 .. 264): past one tile, its keys before the
// short tail resident, its rows past them within tail_rows_max.
__host__ __device__ constexpr bool covers(std::int64_t tokens) {
  return tokens > tile_k && tokens - sm90::short_tail(tokens, tail_keys) <= resident_rows &&
         tokens - resident_rows <= tail_rows_max;
}
static_assert(covers(65) && covers(257) && covers(264) && !covers(64) && !covers(265), "65 .. 264 tokens");

// Shared memory, in bytes: two buffers of one head each, then each warpgroup's scratch for
// attend_tail_rows, the buffers' `full` barriers and their counters of warpgroups done.
struct layout {
  static constexpr unsigned operand = resident_rows * head_dim * 2;  // [256][64] 16-bit: 32 KiB
  static constexpr unsigned q = 0, k = operand, v = 2 * operand;
  static constexpr unsigned tail_k = 3 * operand, tail_v = tail_k + tail_keys * head_dim * 2;
  static constexpr unsigned buffer = tail_v + tail_keys * head_dim * 2;  // 98 KiB
  static constexpr unsigned scratch = 2 * buffer;
  static constexpr unsigned scratch_bytes = static_cast<unsigned>(sm90::tail_row_scratch<head_dim> * sizeof(float));
  static constexpr unsigned full = scratch + warpgroups * scratch_bytes;  // two mbarriers
  static constexpr unsigned done = full + 2 * 8;                         // two counters
  static constexpr unsigned bytes = done + 2 * 4;                        // ~200 KiB: one block per SM
};
static_assert(layout::buffer % 1024 == 0, "both buffers start on the 1024-byte boundary of the 128-byte swizzle");
static_assert(layout::full % 8 == 0, "mbarriers are 8-byte aligned");

// The encoder's attention operands (vit_kernels.cu): qkv [images][tokens][3 hidden], the qkv
// GEMM's output (q, k and v column blocks, head h at columns 64 h of each), and out
// [images][tokens][hidden], of the compute type A (the encoder's is bf16). Item i is image
// i / heads, head i % heads.
template <class A>
struct image_heads {
  const A* qkv;
  A* out;
  int tokens, heads, hidden, items;
};

// K and V rows for attend_tail_rows from a buffer: rows before `from` in the swizzled [256][64]
// tiles, the tail keys' rows after them (unswizzled).
struct resident_key_rows {
  const unsigned char* k_rows;
  const unsigned char* v_rows;
  const unsigned char* tail_k_rows;
  const unsigned char* tail_v_rows;
  int from;
  __device__ __forceinline__ uint4 k(int row, int part) const { return chunk(k_rows, tail_k_rows, row, part); }
  __device__ __forceinline__ uint4 v(int row, int part) const { return chunk(v_rows, tail_v_rows, row, part); }
  __device__ __forceinline__ uint4 chunk(const unsigned char* tiles, const unsigned char* tail, int row,
                                         int part) const {
    const unsigned char* at = row < from ? tiles + sm90::offset<head_dim>(resident_rows, row, part)
                                         : tail + (row - from) * (head_dim * 2) + part * 16;
    return *reinterpret_cast<const uint4*>(at);
  }
};

// A barrier over the 128 threads of warpgroup wg (named barrier 1 + wg; 0 is __syncthreads').
__device__ __forceinline__ void warpgroup_sync(int wg) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(wg + 1), "n"(threads) : "memory");
}

template <class A>
__global__ void __launch_bounds__(block_size, 1)
    attention_kernel(const __grid_constant__ CUtensorMap tiles_map, const __grid_constant__ CUtensorMap tail_map,
                     const image_heads<A> p, float scale_log2) {
  static_assert(threads == 128 && tile_q == 64 && tile_k == 64 && warp_rows_per_warp == 16, "warpgroups of 64 rows");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = head_dim;
  using L = layout;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / threads, thread = tid % threads, warp = thread / 32, lane = thread % 32;
  const int g = lane / 4;
  const int tokens = p.tokens;
  // Keys: `key_tiles` resident tiles (the last one partial and masked where no short tail follows
  // it), then `tail` keys folded in on CUDA cores. Query rows: a tile of up to 64 per warpgroup up
  // to 256, then `tail_rows` on CUDA cores.
  const int tail = sm90::short_tail(tokens, tail_keys);
  const int key_tiles = (tokens - tail + tile_k - 1) / tile_k;
  const int query_tiles = (min(tokens, resident_rows) + tile_q - 1) / tile_q;
  const int tail_rows = max(tokens - resident_rows, 0);
  const unsigned base = smem_addr(smem), full = base + L::full;
  unsigned* const done = reinterpret_cast<unsigned*>(smem + L::done);
  const unsigned item_bytes = 3 * L::operand + (tail > 0 ? 2 * tail_keys * D * 2 : 0);

  // One thread: item's Q, K and V (and its tail keys) into buffer b.
  const auto issue = [&](int item, int b) {
    const int image = item / p.heads, col = (item % p.heads) * D;
    const unsigned to = base + static_cast<unsigned>(b) * L::buffer, bar = full + 8 * b;
    tma::barrier_expect_bytes(bar, item_bytes);
    tma::load_3d(to + L::q, tiles_map, col, 0, image, bar);
    tma::load_3d(to + L::k, tiles_map, p.hidden + col, 0, image, bar);
    tma::load_3d(to + L::v, tiles_map, 2 * p.hidden + col, 0, image, bar);
    if (tail > 0) {
      tma::load_3d(to + L::tail_k, tail_map, p.hidden + col, tokens - tail, image, bar);
      tma::load_3d(to + L::tail_v, tail_map, 2 * p.hidden + col, tokens - tail, image, bar);
    }
  };
  if (tid == 0) {
    tma::barrier_init(full, 1);  // the issuing thread's arrival with the byte count
    tma::barrier_init(full + 8, 1);
    done[0] = done[1] = 0;
    tma::barrier_init_fence();
  }
  __syncthreads();
  grid_dependents_launch();
  grid_dependency_wait();
  const int first = static_cast<int>(blockIdx.x), step = static_cast<int>(gridDim.x);
  if (tid == 0) {
    for (int b = 0; b < 2 && first + b * step < p.items; ++b) issue(first + b * step, b);
  }
  // The warpgroups an item has: past T = 256 all four (each has a query tile and takes tail rows);
  // below, those with a query tile. The others have nothing to do on any item.
  const int participants = tail_rows > 0 ? warpgroups : query_tiles;
  if (wg >= participants) return;

  const int rows = min(tile_q, tokens - wg * tile_q);  // of the warpgroup's tile, 1 .. 64
  const int my_first = warp * warp_rows_per_warp;
  block_work<A> w;
  w.keys = tokens;
  const key_mask<false> allowed(w, my_first, g);
  const int keys = allowed.keys;
  float* const scratch = reinterpret_cast<float*>(smem + L::scratch + wg * L::scratch_bytes);
  const std::int64_t width = 3 * static_cast<std::int64_t>(p.hidden);

  int nth = 0;
  for (int item = first; item < p.items; item += step, ++nth) {
    const int b = nth & 1;
    unsigned char* const buf = smem + b * L::buffer;
    const unsigned buf_addr = base + static_cast<unsigned>(b) * L::buffer;
    const unsigned q_addr = buf_addr + L::q + static_cast<unsigned>(wg) * (tile_q * 128);
    const auto k_addr = [&](int j) { return buf_addr + L::k + static_cast<unsigned>(j) * (tile_k * 128); };
    const auto v_addr = [&](int j) { return buf_addr + L::v + static_cast<unsigned>(j) * (tile_k * 128); };
    tma::barrier_wait(full + 8 * b, static_cast<unsigned>((nth >> 1) & 1));

    // The resident tiles, as the wgmma kernel's loop runs them (overlapped_step; the comments
    // there and in the wgmma kernel say why each fence and wait is where it is), with nothing to
    // copy and nobody to wait for between tiles.
    warp_rows<D> st;
    st.reset();
    float s[tile_k / 8][4];
    unsigned pa[tile_k / 16][4];
    float a_lo = 0.0f, a_hi = 0.0f;
    bool moved = false;
    const auto softmax = [&](int t) {
      const int k0 = t * tile_k;
      if (allowed.tile_needs_mask(k0)) moved = softmax_tile<true, D>(st, s, k0, allowed, scale_log2, lane, a_lo, a_hi);
      else moved = softmax_tile<false, D>(st, s, k0, allowed, scale_log2, lane, a_lo, a_hi);
    };
    const auto pack = [&] {
#pragma unroll
      for (int kk = 0; kk < tile_k / 16; ++kk) p_fragment<A>(s, kk, pa[kk]);
    };
    const auto add_pv = [&](int j) {
      const int groups = (min(tile_k, keys - j * tile_k) + 15) / 16;
      wgmma::fence_operands(st.o);
      wgmma::fence();
      sm90::accumulate<A, D>(st.o, pa, v_addr(j), groups);
      wgmma::commit();
    };
    wgmma::fence();
    sm90::scores<A, D>(s, q_addr, k_addr(0));
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(s);
    softmax(0);
    pack();
    const auto rescale_o = [&] {  // for P V of tile j + 1
      if (moved) scale_rows(st.o, a_lo, a_hi);
    };
    for (int j = 0; j + 1 < key_tiles; ++j)
      sm90::overlapped_step<A, D>(s, st.o, q_addr, k_addr(j + 1), j, add_pv, softmax, rescale_o, pack);
    add_pv(key_tiles - 1);
    wgmma::wait<0>();
    wgmma::fence_operands(st.o);

    const std::int64_t image = item / p.heads, head = item % p.heads;
    const std::int64_t row0 = image * tokens;  // the image's first row of qkv and of out
    if (my_first < rows) {
      if (tail > 0)
        sm90::fold_tail_keys<A, D>(st, buf + L::q + wg * (tile_q * 128), buf + L::tail_k, buf + L::tail_v, tail,
                                   my_first, lane, scale_log2);
      store_rows<D, D>(st, p.out + (row0 + wg * tile_q) * p.hidden + head * D, p.hidden, my_first, rows, lane);
    }
    if (tail_rows > 0) {
      // Rows 256 + e with e = (wg - nth) mod 4, + 4, ...: item nth's first tail row to warpgroup nth % 4.
      const int e0 = (wg - nth) & (warpgroups - 1);
      const int count = e0 < tail_rows ? (tail_rows - e0 + warpgroups - 1) / warpgroups : 0;
      if (count > 0) {
        const resident_key_rows kv{buf + L::k, buf + L::v, buf + L::tail_k, buf + L::tail_v, tokens - tail};
        const std::int64_t r = row0 + resident_rows + e0;
        sm90::attend_tail_rows<A, D>(scratch, p.qkv + r * width + head * D, warpgroups * width, kv, keys,
                                     p.out + r * p.hidden + head * D, warpgroups * static_cast<std::int64_t>(p.hidden),
                                     count, scale_log2, thread, [wg] { warpgroup_sync(wg); });
      }
    }

    // The warpgroup is done with buffer b: its products waited for above, its reads before the
    // barrier. The last of the item's warpgroups to arrive loads item nth + 2 into it. The counter
    // only grows (every participants-th arrival is an item's last), so nobody resets it while
    // another warpgroup may be arriving for the next item.
    warpgroup_sync(wg);
    if (thread == 0) {
      __threadfence_block();  // the warpgroup's reads before its arrival
      const unsigned arrived = atomicAdd(done + b, 1u) + 1u;
      const int next = item + 2 * step;
      if (arrived % static_cast<unsigned>(participants) == 0 && next < p.items) {
        __threadfence_block();       // ... and the other warpgroups' before the copies
        wgmma::fence_proxy_async();  // generic-proxy reads of the buffer before the TMA's writes
        issue(next, b);
      }
    }
  }
#else
  (void)tiles_map;
  (void)tail_map;
  (void)p;
  (void)scale_log2;
  __trap();  // launched only where wgmma_available(): never here
#endif
}

// qkv [images][tokens][width] of A as a 3-D tensor read in boxes of 64 columns x `box_rows` rows
// of one image; rows past an image's last token are outside the tensor (zeros in the box).
template <class A>
CUtensorMap qkv_map(const A* qkv, std::int64_t images, std::int64_t tokens, std::int64_t width, unsigned box_rows,
                    CUtensorMapSwizzle swizzle) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(width), static_cast<cuuint64_t>(tokens),
                              static_cast<cuuint64_t>(images)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(width) * 2, static_cast<cuuint64_t>(tokens * width) * 2};
  const cuuint32_t box[3] = {head_dim, box_rows, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUtensorMapDataType type = is_fp16<A> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult r = tma::encode_tiled()(&map, type, 3, const_cast<A*>(qkv), dims, strides, box, element_strides,
                                         CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("persistent attention: cuTensorMapEncodeTiled failed (error " +
                             std::to_string(static_cast<int>(r)) + ") for qkv [" + std::to_string(images) + "][" +
                             std::to_string(tokens) + "][" + std::to_string(width) + "]");
  return map;
}

// The attention of `heads` heads of 64 over `images` images of `tokens` tokens (covers(tokens)),
// qkv and out as image_heads says, both 16-byte aligned, at most 65535 images and heads; on one
// block per SM, or max_blocks (> 0) at most: tests use that so that each block walks several
// items. `scale` multiplies the scores (natural base). The caller checks the shape and the device
// (vit_kernels.cu: attention_persistent).
template <class A>
void launch(const A* qkv, A* out, std::int64_t images, std::int64_t tokens, std::int64_t heads, float scale,
            cudaStream_t stream, int max_blocks) {
  allow_dynamic_shared(reinterpret_cast<const void*>(attention_kernel<A>), layout::bytes);
  const std::int64_t hidden = heads * head_dim, items = images * heads;
  const CUtensorMap tiles_map = qkv_map(qkv, images, tokens, 3 * hidden, resident_rows, CU_TENSOR_MAP_SWIZZLE_128B);
  const CUtensorMap tail_map = qkv_map(qkv, images, tokens, 3 * hidden, tail_keys, CU_TENSOR_MAP_SWIZZLE_NONE);
  const int sms = device_multiprocessors();
  const int blocks = max_blocks > 0 ? std::min(max_blocks, sms) : sms;
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(items, blocks));
  const image_heads<A> p{qkv, out, static_cast<int>(tokens), static_cast<int>(heads), static_cast<int>(hidden),
                         static_cast<int>(items)};
  itera::kernels::launch(attention_kernel<A>, grid, block_size, layout::bytes, stream, tiles_map, tail_map, p,
                         scale * 1.4426950408889634f);
}

}  // namespace itera::kernels::flash::persistent
