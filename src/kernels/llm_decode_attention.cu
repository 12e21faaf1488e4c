// Decode attention, flash-decoding style (llm_kernels.cuh: decode_attention).
//
// A block of decode_warps warps takes one (row, kv head) and a contiguous slice of that row's keys;
// the blocks sharing a row's keys form a thread block cluster of 1, 2, 4 or 8 along z (sm_90; one
// block per pair elsewhere). The slice is cut into tiles of 16 keys dealt round-robin to the warps.
// Each warp streams its tiles through a private ring of `stages` shared-memory buffers filled with
// cp.async (16-byte copies, coalesced: a tile of K or V is 16 contiguous cache rows), so several
// tiles per warp are in flight while it computes on the oldest. Per tile:
//   scores  lane (k, h) = (lane % 16, lane / 16) takes key k and half h of the head dims, for every
//           query head of the group (q in shared memory as fp32, read as broadcasts); the halves
//           are added with one shuffle.
//   softmax online, in base 2: the tile's max per head over the 16 keys (4 shuffles), the running
//           sum kept per lane (added up once at the end).
//   P V     lane owns a few head dims (and, for head_dim < 128, a subset of the keys): p read back
//           from shared memory as a broadcast, V rows from the tile.
// The warps' states are merged in shared memory, then the cluster's blocks merge the blocks' states
// through distributed shared memory, each block writing a share of the outputs. Merges run in a
// fixed order, so the result for a given shape and split does not change from run to run.
//
// Both kernels take the activations' type A (q and the output: bf16 or fp16) and the cache's
// element C: A itself, or fp8 e4m3 codes (llm_kernels.cuh: scale 1). An fp8 tile is copied as
// codes (half the bytes of a 16-bit one) and widened in shared memory: the CUDA-core kernel widens
// each load to fp32 in registers (16 codes per 16-byte load where 16-bit values give 8), the
// tensor-core kernel has each warp widen its 16 keys of K and V into a tile of A that the 16-bit
// path's ldmatrix and mma then read (e4m3 values are exact in bf16 and in fp16).
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <type_traits>

#include "itera/cuda/check.hpp"
#include "src/cuda/text.hpp"
#include "src/kernels/common.cuh"
#include "src/kernels/decode_attention_rules.hpp"
#include "src/kernels/launch.cuh"
#include "src/kernels/llm_formulas.cuh"
#include "src/kernels/llm_kernels.cuh"
#include "src/kernels/mma.cuh"

namespace itera::kernels::llm {
namespace {

constexpr int decode_warps = 4;
constexpr int decode_threads = decode_warps * 32;
constexpr int tile_keys = 16;
constexpr int stages = 3;
// The most blocks one row's keys are split over (a portable cluster size); unreferenced where the
// cluster code compiles out (sm_80/89 in a release build: nvcc's warning 177 without the attribute).
[[maybe_unused]] constexpr int max_splits = max_decode_splits;

// Shared memory of decode_attention_kernel<HD, MG, C>, in bytes, every part 16-byte aligned:
//   q      fp32 [MG][2][HD/2 + 4]      (the two halves of a head apart by 4 banks)
//   ring   per warp, stages x (K tile [16][HD + 16 bytes] | V tile [16][HD]), of the cache's C
//   p      per warp, fp32 [16][MG]
// After the key loop the ring is reused for the warps' states, fp32 [warps][MG][HD + 2], and the
// block's merged state, fp32 [MG][HD + 2] (both fit: a ring holds far more).
template <int HD, int MG, class C>
struct decode_layout {
  static constexpr int q_half = HD / 2 + 4;
  // K rows (elements) 16 bytes apart in bank terms: the 16-byte loads of eight consecutive rows at
  // one column fall in distinct banks.
  static constexpr int k_row = HD + 16 / static_cast<int>(sizeof(C));
  static constexpr std::size_t q = 0;
  static constexpr std::size_t ring = q + static_cast<std::size_t>(MG) * 2 * q_half * 4;
  static constexpr std::size_t k_tile = static_cast<std::size_t>(tile_keys) * k_row * sizeof(C);
  static constexpr std::size_t v_tile = static_cast<std::size_t>(tile_keys) * HD * sizeof(C);
  static constexpr std::size_t stage = k_tile + v_tile;
  static constexpr std::size_t warp_ring = stages * stage;
  static constexpr std::size_t p = ring + decode_warps * warp_ring;
  static constexpr std::size_t bytes = p + static_cast<std::size_t>(decode_warps) * tile_keys * MG * 4;
  static constexpr std::size_t states = static_cast<std::size_t>(decode_warps + 1) * MG * (HD + 2) * 4;
  static_assert(states <= decode_warps * warp_ring, "the warps' states must fit in the ring");
};


// N consecutive cache elements C from shared memory (aligned to the read), widened to fp32. bf16
// and fp16: 4 (8 bytes) or a multiple of 8 (16-byte chunks); fp8: 4 (4 bytes), 8 (8 bytes) or a
// multiple of 16 (16-byte chunks).
template <class C, int N>
__device__ __forceinline__ void widen_smem(const C* p, float* f) {
  if constexpr (std::is_same_v<C, bf16> || std::is_same_v<C, fp16>) {
    if constexpr (N == 4) {
      unpack4<C>(*reinterpret_cast<const uint2*>(p), f);
    } else {
      static_assert(N % 8 == 0, "16-bit: 4 or a multiple of 8 values");
#pragma unroll
      for (int i = 0; i < N; i += 8) unpack8<C>(*reinterpret_cast<const uint4*>(p + i), f + i);
    }
  } else {
    if constexpr (N == 4) {
      unpack4_fp8(*reinterpret_cast<const unsigned*>(p), f);
    } else if constexpr (N == 8) {
      const uint2 raw = *reinterpret_cast<const uint2*>(p);
      unpack4_fp8(raw.x, f);
      unpack4_fp8(raw.y, f + 4);
    } else {
      static_assert(N % 16 == 0, "fp8: 4, 8 or a multiple of 16 values");
#pragma unroll
      for (int i = 0; i < N; i += 16) unpack16_fp8(*reinterpret_cast<const uint4*>(p + i), f + i);
    }
  }
}

template <class A, int HD, int MG, class C>
__global__ void __launch_bounds__(decode_threads)
    decode_attention_kernel(const A* __restrict__ qkv, const void* __restrict__ k_cache,
                            const void* __restrict__ v_cache, const std::int32_t* __restrict__ start,
                            attention_shape s, float scale_log2, A* __restrict__ out, decode_rope<A> rope) {
  (void)rope;  // the wide kernel's alone: decode_attention passes none here
  using L = decode_layout<HD, MG, C>;
  constexpr int HALF = HD / 2, E = static_cast<int>(sizeof(C));
  // P V: each lane owns DPL consecutive dims of a V row; LPR lanes cover a row, KS key subsets.
  constexpr int DPL = HD >= 128 ? HD / 32 : 4, LPR = HD / DPL, KS = 32 / LPR;
  // Scores: key values widened per load, a 16-byte chunk where the half-head holds one (8 16-bit
  // values, 16 fp8), else 8 fp8 (head_dim 16). The bf16 statements are the ones before fp8 caches came,
  // written out: the same code (a loop over the chunk's quarters was compiled with other registers).
  constexpr int KC = E == 1 && HALF >= 16 ? 16 : 8;
  static_assert(HD % 16 == 0 && HD >= 16 && HD <= 256, "head_dim 16..256, a multiple of 16");
  extern __shared__ __align__(16) unsigned char smem[];
  float* q_s = reinterpret_cast<float*>(smem + L::q);

  grid_dependents_launch();
  grid_dependency_wait();
  const int group = static_cast<int>(s.heads / s.kv_heads);
  const std::int64_t t = blockIdx.x, kvh = blockIdx.y, seq = t;  // decode: one row per sequence
  const std::int64_t pos = static_cast<std::int64_t>(start[seq]);
  const std::int64_t keys = (pos < s.max_context ? pos : s.max_context - 1) + 1;
  const int splits = static_cast<int>(gridDim.z);
  const std::int64_t chunk = (keys + splits - 1) / splits;
  const std::int64_t begin = min(keys, static_cast<std::int64_t>(blockIdx.z) * chunk);
  const std::int64_t end = min(keys, begin + chunk);
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const std::int64_t q_dim = s.heads * HD, width = q_dim + 2 * s.kv_heads * HD;


  const C* kb = static_cast<const C*>(k_cache) + (seq * s.kv_heads + kvh) * s.max_context * HD;
  const C* vb = static_cast<const C*>(v_cache) + (seq * s.kv_heads + kvh) * s.max_context * HD;
  unsigned char* ring = smem + L::ring + warp * L::warp_ring;
  float* p_s = reinterpret_cast<float*>(smem + L::p) + warp * tile_keys * MG;
  const std::int64_t tiles = (end - begin + tile_keys - 1) / tile_keys;
  // This warp's tiles: warp, warp + warps, ...
  const std::int64_t mine = tiles > warp ? (tiles - warp + decode_warps - 1) / decode_warps : 0;

  // One tile's K and V rows into ring buffer b. Keys past the slice copy the slice's last row
  // (finite values, masked out of the softmax): the cache there may hold anything, NaN included.
  const auto issue = [&](std::int64_t i, int b) {
    if (i < mine) {
      const std::int64_t k0 = begin + (warp + i * decode_warps) * tile_keys;
      C* kt = reinterpret_cast<C*>(ring + b * L::stage);
      C* vt = reinterpret_cast<C*>(ring + b * L::stage + L::k_tile);
      constexpr int chunks = HD * E / 16, per_chunk = 16 / E;  // 16-byte chunks per row, elements per chunk
#pragma unroll
      for (int c = lane; c < tile_keys * chunks; c += 32) {
        const int r = c / chunks, x = c % chunks;
        const std::int64_t key = min(k0 + r, end - 1);
        cp_async16(smem_addr(kt + r * L::k_row + x * per_chunk), kb + key * HD + x * per_chunk);
        cp_async16(smem_addr(vt + r * HD + x * per_chunk), vb + key * HD + x * per_chunk);
      }
    }
    cp_async_commit();  // an empty group past the last tile keeps the wait counts uniform
  };
#pragma unroll
  for (int b = 0; b < stages - 1; ++b) issue(b, b);
  // q of the group's heads, fp32, each half of a head on its own bank offset (while the first
  // tiles are in flight).
  for (int i = static_cast<int>(threadIdx.x); i < group * HD; i += decode_threads) {
    const int g = i / HD, d = i % HD;
    q_s[(g * 2 + d / HALF) * L::q_half + d % HALF] = to_float(qkv[t * width + (kvh * group + g) * HD + d]);
  }
  __syncthreads();  // q_s written

  const int kl = lane % tile_keys, half = lane / tile_keys;
  const int dim0 = (lane % LPR) * DPL, ks = lane / LPR;
  float m[MG], l[MG], acc[MG][DPL];
#pragma unroll
  for (int g = 0; g < MG; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int d = 0; d < DPL; ++d) acc[g][d] = 0.0f;
  }

  for (std::int64_t i = 0; i < mine; ++i) {
    issue(i + stages - 1, static_cast<int>((i + stages - 1) % stages));
    cp_async_wait<stages - 1>();
    __syncwarp();
    const int b = static_cast<int>(i % stages);
    const C* kt = reinterpret_cast<const C*>(ring + b * L::stage);
    const C* vt = reinterpret_cast<const C*>(ring + b * L::stage + L::k_tile);
    const std::int64_t k0 = begin + (warp + i * decode_warps) * tile_keys;

    // Scores of key kl over half `half` of the dims, every head of the group.
    float sc[MG];
#pragma unroll
    for (int g = 0; g < MG; ++g) sc[g] = 0.0f;
    const C* krow = kt + kl * L::k_row + half * HALF;
#pragma unroll
    for (int c = 0; c < HALF / KC; ++c) {
      float kf[KC];
      widen_smem<C, KC>(krow + c * KC, kf);
#pragma unroll
      for (int g = 0; g < MG; ++g) {
        if (g >= group) continue;
        const float4* qv = reinterpret_cast<const float4*>(q_s + (g * 2 + half) * L::q_half + c * KC);
        const float4 a = qv[0], bq = qv[1];
        sc[g] = fmaf(a.x, kf[0], sc[g]);
        sc[g] = fmaf(a.y, kf[1], sc[g]);
        sc[g] = fmaf(a.z, kf[2], sc[g]);
        sc[g] = fmaf(a.w, kf[3], sc[g]);
        sc[g] = fmaf(bq.x, kf[4], sc[g]);
        sc[g] = fmaf(bq.y, kf[5], sc[g]);
        sc[g] = fmaf(bq.z, kf[6], sc[g]);
        sc[g] = fmaf(bq.w, kf[7], sc[g]);
        if constexpr (KC == 16) {  // the chunk's second half
          const float4 cq = qv[2], dq = qv[3];
          sc[g] = fmaf(cq.x, kf[8], sc[g]);
          sc[g] = fmaf(cq.y, kf[9], sc[g]);
          sc[g] = fmaf(cq.z, kf[10], sc[g]);
          sc[g] = fmaf(cq.w, kf[11], sc[g]);
          sc[g] = fmaf(dq.x, kf[12], sc[g]);
          sc[g] = fmaf(dq.y, kf[13], sc[g]);
          sc[g] = fmaf(dq.z, kf[14], sc[g]);
          sc[g] = fmaf(dq.w, kf[15], sc[g]);
        }
      }
    }
    const bool valid = k0 + kl < end;
    float corr[MG];
#pragma unroll
    for (int g = 0; g < MG; ++g) {
      if (g >= group) continue;
      float v = sc[g] + __shfl_xor_sync(0xffffffffu, sc[g], 16);
      v = valid ? v * scale_log2 : -INFINITY;
      float tmax = v;
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
      const float mn = fmaxf(m[g], tmax);  // finite: every tile holds at least one valid key
      corr[g] = exp2f(m[g] - mn);
      m[g] = mn;
      const float p = exp2f(v - mn);
      l[g] = l[g] * corr[g] + (half == 0 ? p : 0.0f);
      if (half == 0) p_s[kl * MG + g] = p;
    }
    __syncwarp();
    // P V over this lane's dims and key subset.
#pragma unroll
    for (int g = 0; g < MG; ++g) {
      if (g >= group) continue;
#pragma unroll
      for (int d = 0; d < DPL; ++d) acc[g][d] *= corr[g];
    }
#pragma unroll
    for (int k = ks; k < tile_keys; k += KS) {
      float vf[DPL];
      widen_smem<C, DPL>(vt + k * HD + dim0, vf);
#pragma unroll
      for (int g = 0; g < MG; ++g) {
        if (g >= group) continue;
        const float p = p_s[k * MG + g];
#pragma unroll
        for (int d = 0; d < DPL; ++d) acc[g][d] = fmaf(p, vf[d], acc[g][d]);
      }
    }
    __syncwarp();  // the ring buffer and p_s are rewritten by the next iteration
  }
  cp_async_wait<0>();

  // Warp totals: the sum over the lanes holding keys, the accumulators over the key subsets.
#pragma unroll
  for (int g = 0; g < MG; ++g) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) l[g] += __shfl_xor_sync(0xffffffffu, l[g], o);
#pragma unroll
    for (int o = LPR; o < 32; o <<= 1)
#pragma unroll
      for (int d = 0; d < DPL; ++d) acc[g][d] += __shfl_xor_sync(0xffffffffu, acc[g][d], o);
  }
  __syncthreads();  // every warp is done with its ring: it becomes the states' space
  float* states = reinterpret_cast<float*>(smem + L::ring);
#pragma unroll
  for (int g = 0; g < MG; ++g) {
    if (g >= group) continue;
    float* st = states + (static_cast<std::size_t>(warp) * MG + g) * (HD + 2);
    if (ks == 0) {
#pragma unroll
      for (int d = 0; d < DPL; ++d) st[dim0 + d] = acc[g][d];
    }
    if (lane == 0) {
      st[HD] = m[g];
      st[HD + 1] = l[g];
    }
  }
  __syncthreads();
  float* merged = states + static_cast<std::size_t>(decode_warps) * MG * (HD + 2);
  for (int idx = static_cast<int>(threadIdx.x); idx < group * (HD + 2); idx += decode_threads) {
    const int g = idx / (HD + 2), d = idx % (HD + 2);
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < decode_warps; ++w) mx = fmaxf(mx, states[(w * MG + g) * (HD + 2) + HD]);
    float r = mx;
    if (d != HD) {
      r = 0.0f;
#pragma unroll
      for (int w = 0; w < decode_warps; ++w) {
        const float* st = states + (w * MG + g) * (HD + 2);
        if (st[HD] != -INFINITY) r = fmaf(exp2f(st[HD] - mx), st[d], r);
      }
    }
    merged[g * (HD + 2) + d] = r;
  }
  if (splits == 1) {  // no cluster: this block holds every key of the row
    __syncthreads();
    for (int idx = static_cast<int>(threadIdx.x); idx < group * HD; idx += decode_threads) {
      const int g = idx / HD, d = idx % HD;
      const float* st = merged + g * (HD + 2);
      out[t * q_dim + (kvh * group + g) * HD + d] = from_float<A>(st[d] / st[HD + 1]);
    }
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's merged state is written and visible across the cluster
  // The outputs are dealt over the cluster's blocks; each thread loads the states of all the
  // blocks at once (the remote loads in flight together), then merges them in rank order.
  const int rank = static_cast<int>(cluster.block_rank());
  for (int idx = rank * decode_threads + static_cast<int>(threadIdx.x); idx < group * HD;
       idx += splits * decode_threads) {
    const int g = idx / HD, d = idx % HD;
    float mb[max_splits], lb[max_splits], ab[max_splits];
#pragma unroll
    for (int b = 0; b < max_splits; ++b) {
      if (b < splits) {
        const float* other = cluster.map_shared_rank(merged, b) + g * (HD + 2);
        mb[b] = other[HD];
        lb[b] = other[HD + 1];
        ab[b] = other[d];
      }
    }
    float mx = -INFINITY;
#pragma unroll
    for (int b = 0; b < max_splits; ++b)
      if (b < splits) mx = fmaxf(mx, mb[b]);
    float num = 0.0f, den = 0.0f;
#pragma unroll
    for (int b = 0; b < max_splits; ++b) {
      if (b < splits && mb[b] != -INFINITY) {
        const float w = exp2f(mb[b] - mx);
        num = fmaf(w, ab[b], num);
        den = fmaf(w, lb[b], den);
      }
    }
    out[t * q_dim + (kvh * group + g) * HD + d] = from_float<A>(num / den);
  }
  cluster.sync();  // keep every block's shared memory alive until the others have read it
#else
  __trap();  // splits > 1 is launched on sm_90 and later only
#endif
}


// ---------------------------------------------------------------------------------------------
// The wide variant, on tensor cores: a block of wide_warps warps per (row, kv head) holding all of
// the row's keys, or a cluster of 2-8 blocks dealing them out (wide_decode_pairs,
// wide_decode_splits; each block's warps' states merged through distributed shared memory). The
// group's query heads are the rows of one m16n8k16 A operand (zero rows past the group), so a
// warp computes scores for every head of the group at once. Keys come in tiles of 16 per warp
// through a ring of wide_stages shared-memory buffers (cp.async, swizzled as in the prefill
// kernel), so two tiles are in flight while one is computed; warp w takes keys 16w .. 16w + 15 of
// each tile with its own online softmax. At the end a block holding all of a row's keys has its two
// warps exchange half of their states through shared memory and merge in registers; a cluster
// merges every block's warps' states through distributed shared memory. P is rounded to A for
// the P V product, as in the prefill kernel. Where few blocks run (at most two an SM), two more
// warps a block share the copies' issue and compute nothing (Loaders, below).
//
// Sized so that the blocks of a batch-64 llama-3.1-8b step (512) fit the H200 in one wave: with
// four warps and two buffers (80 KB, three blocks per SM) the second wave ran a quarter full and
// the attention took 1.68 ms a step (2.9 TB/s).
//
// With a decode_rope it also does bias_rope_store's work for its row (decode_attention_rotates):
// q rotated into its tile while the first key tiles are in flight, and the new position's k and v
// stored into the cache by the block holding that key and written over its ring's copy of the row.
constexpr int wide_warps = 2, wide_stages = 3, wide_tile = 16 * wide_warps;
// Loaders: warps past the wide_warps that only issue the ring's copies and keep its barriers
// (0, or 2 where tensor_core_decode_loaders allows). H200, llama-3.1-8b, bf16, graph steps
// (docs/perf/2026-12-03-attention-stamps.md, runs 6 and 7), attention us a step: batch 32 (256
// blocks) 806 -> 766, step 5.016 -> 4.986 ms; batch 16 (256 blocks, pairs of 2) 538 -> 507, step
// 4.725 -> 4.694; batch 2 249 -> 233, step even; in clusters of 4 and 8 slower (batch 8 376 ->
// 510, batch 4 269 -> 435); batch 64 (512 blocks, four an SM at 64 threads; at 128 threads and
// 190 registers only two fit) 1309 -> 1488.
template <int Loaders>
constexpr int wide_threads = (wide_warps + Loaders) * 32;

//
// An fp8 cache: the ring holds the tiles as codes, row-major (half the bytes), and each warp widens
// its 16 keys of K and V into a tile of A of its own (swizzled as the ring's 16-bit tiles are),
// from which the 16-bit path's fragments are read: per tile, one pass over the warp's codes in shared
// memory (an 8-byte read, a 16-byte write per lane and step, without bank conflicts) and no
// barrier beyond the warp's.
template <int HD, class C>
struct wide_layout {
  static constexpr bool fp8 = sizeof(C) == 1;
  static constexpr std::size_t tile = static_cast<std::size_t>(wide_tile) * HD * sizeof(C);  // as stored
  static constexpr std::size_t widened_tile = static_cast<std::size_t>(wide_tile) * HD * 2;
  static constexpr std::size_t q = 0;                           // 16-bit [16][HD], swizzled
  static constexpr std::size_t ring = q + 16 * HD * 2;          // per stage: K tile, then V tile
  static constexpr std::size_t widened = ring + wide_stages * 2 * tile;  // fp8: K then V, 16-bit [32][HD]
  static constexpr std::size_t bytes = widened + (fp8 ? 2 * widened_tile : 0);
  // After the loop, over the ring. In a cluster: per warp O [16][HD] fp32, then m and l [16] each.
  static constexpr std::size_t states = static_cast<std::size_t>(wide_warps) * 16 * (HD + 2) * 4;
  static_assert(states <= bytes - ring, "the warps' states must fit over the ring");
  // One block a row: per warp the other warp's half of its O fragments, then its m and l, a float4
  // a lane each.
  static constexpr std::size_t exchange = static_cast<std::size_t>(wide_warps) * (HD / 16 + 1) * 32 * 16;
  static_assert(exchange <= bytes - ring, "the warps' exchange must fit over the ring");
};

// `count` rows of HD fp8 codes from src (rows HD apart) into a row-major tile, rows at or past
// `valid` zero-filled, the 16-byte chunks dealt over `threads` threads.
template <int HD, int threads>
__device__ __forceinline__ void load_fp8_rows(unsigned char* dst, const fp8_code* src, int count, int valid) {
  constexpr int chunks = HD / 16;
  for (int i = static_cast<int>(threadIdx.x); i < count * chunks; i += threads) {
    const int r = i / chunks, c = i % chunks;
    const bool ok = r < valid;
    cp_async16(smem_addr(dst + i * 16), ok ? src + r * HD + c * 16 : src, ok ? 16 : 0);
  }
}

// Rows first .. first + 15 of a row-major fp8 tile widened into the same rows of a swizzled
// [rows][HD] tile of A (mma.cuh: swizzle), by one warp: each lane takes 8 codes and writes their
// 16-byte chunk of A.
template <class A, int HD>
__device__ __forceinline__ void widen_fp8_rows(const unsigned char* src, unsigned char* dst, int first, int lane) {
  constexpr int chunks = HD / 8;  // 16-bit chunks per row
#pragma unroll
  for (int i = lane; i < 16 * chunks; i += 32) {
    const int r = first + i / chunks, c = i % chunks;
    const uint2 raw = *reinterpret_cast<const uint2*>(src + r * HD + c * 8);
    float f[8];
    unpack4_fp8(raw.x, f);
    unpack4_fp8(raw.y, f + 4);
    *reinterpret_cast<uint4*>(dst + swizzle<HD>(r, c)) =
        make_uint4(pack2<A>(f[0], f[1]), pack2<A>(f[2], f[3]), pack2<A>(f[4], f[5]), pack2<A>(f[6], f[7]));
  }
}

// A tile of `count` cache rows (HD 16-bit elements each, contiguous: the cache's row stride is HD)
// into a swizzled tile (mma.cuh: swizzle), rows at or past `valid` zero-filled: load_tile with the
// row count and stride known at compile time, so that a thread's chunk and its rows' addresses are
// worked out once and each copy adds a constant (load_tile's per-chunk division, 64-bit multiply
// and swizzle were half of this kernel's instructions: at batch 64 on the H200 the kernel issued on
// 44% of the cycles, now 22%, and the attention took 1368-1372 us a llama-3.1-8b step, now 1322:
// docs/perf/2026-12-01-prefill-balance.md).
template <int HD, int threads, int count, class E>
__device__ __forceinline__ void load_cache_tile(unsigned char* dst, const E* src, int valid) {
  static_assert(sizeof(E) == 2, "rows of 16-bit elements");
  constexpr int chunks = HD / 8, rows_per_pass = threads / chunks;
  static_assert(threads % chunks == 0 && count % rows_per_pass == 0, "whole rows a pass");
  const int c = static_cast<int>(threadIdx.x) % chunks, r0 = static_cast<int>(threadIdx.x) / chunks;
  const unsigned base = smem_addr(dst);
  const E* from = src + r0 * HD + c * 8;
#pragma unroll
  for (int pass = 0; pass < count / rows_per_pass; ++pass) {
    const int r = r0 + pass * rows_per_pass;
    const bool ok = r < valid;
    cp_async16(base + swizzle<HD>(r, c), ok ? from + pass * rows_per_pass * HD : src, ok ? 16 : 0);
  }
}

// Where column `col` (a multiple of 4) of row r of a ring tile lies: in a 16-bit tile, swizzled (16-byte
// chunk col / 8); in an fp8 tile, row-major codes.
template <int HD, class C>
__device__ __forceinline__ C* tile_element(unsigned char* tile, int r, int col) {
  if constexpr (sizeof(C) == 1)
    return reinterpret_cast<C*>(tile + r * HD + col);
  else
    return reinterpret_cast<C*>(tile + swizzle<HD>(r, col / 8) + (col % 8) * 2);
}

// Eight values of one head of a row as loaded, still as A's bits (so that nothing waits on the
// loads until their values are used): four at lo and four at hi (q or k: j and j + HD / 2 of the
// head, rotated as pairs; v: d and d + 4), the bias's at the same places, and for a rotated quad
// its four inverse frequencies. load_quad issues the loads; finish_quad is
// bias_rope_store_vec_kernel's arithmetic (the bias added in fp32, the angle's sincosf and the
// rotation in fp32), leaving x1 (lo) and x2 (hi) not yet rounded.
struct quad_bits {
  uint2 x1, x2, b1, b2;
  float4 freq;
  bool bias, rotate;
};
template <class A>
__device__ __forceinline__ quad_bits load_quad(const A* lo, const A* hi, const A* bias_lo, const A* bias_hi,
                                               const float* freq) {
  quad_bits q{};
  q.x1 = *reinterpret_cast<const uint2*>(lo);
  q.x2 = *reinterpret_cast<const uint2*>(hi);
  q.bias = bias_lo != nullptr;
  if (q.bias) {
    q.b1 = *reinterpret_cast<const uint2*>(bias_lo);
    q.b2 = *reinterpret_cast<const uint2*>(bias_hi);
  }
  q.rotate = freq != nullptr;
  if (q.rotate) q.freq = *reinterpret_cast<const float4*>(freq);
  return q;
}
template <class A>
__device__ __forceinline__ void finish_quad(const quad_bits& q, std::int64_t pos, float (&x1)[4], float (&x2)[4]) {
  unpack4<A>(q.x1, x1);
  unpack4<A>(q.x2, x2);
  if (q.bias) {
    float b1[4], b2[4];
    unpack4<A>(q.b1, b1);
    unpack4<A>(q.b2, b2);
#pragma unroll
    for (int e = 0; e < 4; ++e) x1[e] += b1[e], x2[e] += b2[e];
  }
  if (!q.rotate) return;
  const float f[4] = {q.freq.x, q.freq.y, q.freq.z, q.freq.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 y = rope_rotate(x1[e], x2[e], rope_cos_sin(pos, f[e]));
    x1[e] = y.x, x2[e] = y.y;
  }
}

// p + off, or null where p is.
template <class T>
__device__ __forceinline__ const T* offset_or_null(const T* p, std::int64_t off) {
  return p ? p + off : nullptr;
}

// Quad j / 4 of a q or k head at x (its first element): four rotated pairs (j + e, j + e + HD / 2).
// inv_freq 16-byte aligned (one float4 load).
template <class A, int HD>
__device__ __forceinline__ quad_bits load_rotated_quad(const A* x, const A* bias, const float* inv_freq, int j) {
  return load_quad<A>(x + j, x + j + HD / 2, offset_or_null(bias, j), offset_or_null(bias, j + HD / 2), inv_freq + j);
}

// bias_rope_store's step for one row of the wide kernel's (row, kv head) pair, done by the
// attention itself (decode_rope): item i of HD / 4. Items below HD / 8 take four rotated pairs (j,
// j + HD / 2) of k, j = 4 i; the others eight values of v at 8 (i - HD / 8), the bias added in
// fp32. load_new_item issues the loads; store_new_item rounds once to the cache's element and
// stores at the row's position, leaving x1 and x2 holding the fp32 values before that rounding (k's
// two halves, or v's two fours), which the ring's copy of the row is stored from the same way
// (new_item_place: where item i lies in its head, k or v, and the first elements of its two fours).
struct item_place {
  bool k;
  int lo, hi;
};
template <int HD>
__device__ __forceinline__ item_place new_item_place(int i) {
  constexpr int quads = HD / 8;
  if (i < quads) return {true, 4 * i, 4 * i + HD / 2};
  return {false, 8 * (i - quads), 8 * (i - quads) + 4};
}
template <class A, int HD>
__device__ __forceinline__ quad_bits load_new_item(const A* row_k, const A* row_v, const A* bias_k, const A* bias_v,
                                                   const float* inv_freq, int i) {
  const item_place at = new_item_place<HD>(i);
  if (at.k) return load_rotated_quad<A, HD>(row_k, bias_k, inv_freq, at.lo);
  return load_quad<A>(row_v + at.lo, row_v + at.hi, offset_or_null(bias_v, at.lo), offset_or_null(bias_v, at.hi),
                      nullptr);
}
template <class A, int HD, class C>
__device__ __forceinline__ void store_new_item(const quad_bits& q, std::int64_t pos, int i, C* k_row, C* v_row,
                                               float (&x1)[4], float (&x2)[4]) {
  finish_quad<A>(q, pos, x1, x2);
  const item_place at = new_item_place<HD>(i);
  C* to = at.k ? k_row : v_row;
  store4(to + at.lo, x1);
  store4(to + at.hi, x2);
}

template <class A, int HD, class C, int Loaders>
__global__ void __launch_bounds__(wide_threads<Loaders>)
    decode_attention_wide_kernel(const A* __restrict__ qkv, const void* k_cache, const void* v_cache,
                                 const std::int32_t* __restrict__ start, attention_shape s, float scale_log2,
                                 A* __restrict__ out, decode_rope<A> rope) {
  using L = wide_layout<HD, C>;
  constexpr int KS = HD / 16, NT = HD / 8, threads = wide_threads<Loaders>;
  extern __shared__ __align__(128) unsigned char smem[];
  grid_dependents_launch();
  grid_dependency_wait();
  const int group = static_cast<int>(s.heads / s.kv_heads);
  const std::int64_t t = blockIdx.x, kvh = blockIdx.y, seq = t;
  const std::int64_t pos = static_cast<std::int64_t>(start[seq]);
  const int keys = static_cast<int>((pos < s.max_context ? pos : s.max_context - 1) + 1);
  // This block's keys [first_key, end_key): the row's keys dealt over the cluster's blocks in
  // whole tiles (gridDim.z of them; all of them where 1).
  const int splits = static_cast<int>(gridDim.z);
  const int per = ((keys + splits - 1) / splits + wide_tile - 1) / wide_tile * wide_tile;
  const int first_key = min(keys, static_cast<int>(blockIdx.z) * per), end_key = min(keys, first_key + per);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t4 = lane % 4;
  const std::int64_t q_dim = s.heads * HD, width = q_dim + 2 * s.kv_heads * HD;
  const C* kb = static_cast<const C*>(k_cache) + (seq * s.kv_heads + kvh) * s.max_context * HD;
  const C* vb = static_cast<const C*>(v_cache) + (seq * s.kv_heads + kvh) * s.max_context * HD;

  unsigned char* sq = smem + L::q;
  const auto k_buf = [&](int b) { return smem + L::ring + b * 2 * L::tile; };
  const auto v_buf = [&](int b) { return smem + L::ring + b * 2 * L::tile + L::tile; };
  const int tiles = (end_key - first_key + wide_tile - 1) / wide_tile;
  const auto issue = [&](int j) {
    if (j < tiles) {
      const int k0 = first_key + j * wide_tile, valid = min(wide_tile, end_key - k0);
      if constexpr (L::fp8) {
        load_fp8_rows<HD, threads>(k_buf(j % wide_stages), kb + static_cast<std::int64_t>(k0) * HD, wide_tile, valid);
        load_fp8_rows<HD, threads>(v_buf(j % wide_stages), vb + static_cast<std::int64_t>(k0) * HD, wide_tile, valid);
      } else {
        load_cache_tile<HD, threads, wide_tile>(k_buf(j % wide_stages), kb + static_cast<std::int64_t>(k0) * HD, valid);
        load_cache_tile<HD, threads, wide_tile>(v_buf(j % wide_stages), vb + static_cast<std::int64_t>(k0) * HD, valid);
      }
    }
    cp_async_commit();  // an empty group past the last tile keeps the wait counts uniform
  };
  // decode_rope: bias_rope_store's work on this row, while the first tiles are in flight. q of the
  // group's heads rotated into rows 0 .. group - 1 of sq (rounded to A, as bias_rope_store writes
  // them back), the rest zero. The new position's k (rotated) and v into the cache by the block
  // whose keys hold it, their values kept for its ring's copy of that row, which the cp.async
  // brought from the cache before or while the row was stored (patched below). A thread's first q
  // quad and its item of the new row are loaded before the ring's copies are issued, so that those
  // loads do not queue behind the copies (the qkv row is in the L2, the cache is not).
  const bool rotates = rope.inv_freq != nullptr;
  constexpr int quads = HD / 8, row_items = HD / 4;  // row_items: k's quads, then v's octets
  const A* row = qkv + t * width;
  const int tid = static_cast<int>(threadIdx.x);
  const bool in_cache = pos < s.max_context;
  const int new_tile = rotates && in_cache && pos >= first_key && pos < end_key
                           ? (static_cast<int>(pos) - first_key) / wide_tile
                           : -1;  // this block's tile holding the new key, if any
  const auto q_quad = [&](int i) {
    const std::int64_t head = (kvh * group + i / quads) * HD;
    return load_rotated_quad<A, HD>(row + head, offset_or_null(rope.bias, head), rope.inv_freq, 4 * (i % quads));
  };
  quad_bits first_q{}, new_item{};
  if (rotates && tid < group * quads) first_q = q_quad(tid);
  const bool stores_new = new_tile >= 0 && tid < row_items;
  if (stores_new) {
    const std::int64_t kv_dim = s.kv_heads * HD;
    new_item = load_new_item<A, HD>(row + q_dim + kvh * HD, row + q_dim + kv_dim + kvh * HD,
                                    offset_or_null(rope.bias, q_dim + kvh * HD),
                                    offset_or_null(rope.bias, q_dim + kv_dim + kvh * HD), rope.inv_freq, tid);
  }
  if (!rotates) {
    // q of the group's heads as rows 0 .. group - 1, the rest zero; it rides with tile 0.
    load_tile<HD, threads>(sq, row + kvh * group * HD, HD, 16, group);
  }
  // Every buffer of the ring issued: the loop issues tile j + wide_stages - 1 from j = 1 on.
#pragma unroll
  for (int j = 0; j < wide_stages; ++j) issue(j);
  float new_lo[4], new_hi[4];
  if (rotates) {
    for (int i = tid; i < group * quads; i += threads) {
      float x1[4], x2[4];
      finish_quad<A>(i == tid ? first_q : q_quad(i), pos, x1, x2);
      const int g = i / quads, j = 4 * (i % quads);
      store4(tile_element<HD, A>(sq, g, j), x1);
      store4(tile_element<HD, A>(sq, g, j + HD / 2), x2);
    }
    for (int i = tid; i < (16 - group) * quads; i += threads)  // (a row of HD is `quads` 16-byte chunks)
      *reinterpret_cast<uint4*>(sq + swizzle<HD>(group + i / quads, i % quads)) = make_uint4(0, 0, 0, 0);
    if (stores_new) {
      const std::int64_t at = ((seq * s.kv_heads + kvh) * s.max_context + pos) * HD;
      store_new_item<A, HD, C>(new_item, pos, tid, static_cast<C*>(rope.k_cache) + at,
                               static_cast<C*>(rope.v_cache) + at, new_lo, new_hi);
    }
  }

  unsigned qf[KS][4];
  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;

  for (int j = 0; j < tiles; ++j) {
    // Groups committed before this wait: tiles 0 .. wide_stages - 1, then one a pass from j = 1.
    if (j == 0)
      cp_async_wait<wide_stages - 1>();
    else
      cp_async_wait<wide_stages - 2>();
    __syncthreads();  // tile j (and q) landed; everyone is done with the buffer tile j - 1 used
    if (j > 0) issue(j + wide_stages - 1);
    if (j == new_tile) {  // the new key's row, as stored, over what the copy brought
      const int r = static_cast<int>(pos) - (first_key + j * wide_tile);
      if (tid < row_items) {
        const item_place at = new_item_place<HD>(tid);
        unsigned char* tile = at.k ? k_buf(j % wide_stages) : v_buf(j % wide_stages);
        store4(tile_element<HD, C>(tile, r, at.lo), new_lo);
        store4(tile_element<HD, C>(tile, r, at.hi), new_hi);
      }
      __syncthreads();
    }
    if (warp >= wide_warps) continue;  // a loader: copies and barriers only
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        const int r = (lane % 8) + ((lane / 8) % 2) * 8, c = 2 * kk + lane / 16;
        ldmatrix_x4(smem_addr(sq + swizzle<HD>(r, c)), qf[kk]);
      }
    }
    const int k0 = first_key + j * wide_tile + warp * 16;  // this warp's 16 keys
    if (k0 >= end_key) continue;
    // The tiles the fragments are read from: the ring's, or (fp8) this warp's rows widened.
    const unsigned char* kt = k_buf(j % wide_stages);
    if constexpr (L::fp8) {
      widen_fp8_rows<A, HD>(kt, smem + L::widened, warp * 16, lane);
      widen_fp8_rows<A, HD>(v_buf(j % wide_stages), smem + L::widened + L::widened_tile, warp * 16, lane);
      __syncwarp();  // the warp's rows widened before its lanes read them
      kt = smem + L::widened;
    }
    float sc[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      unsigned kf[4];
      const int r = warp * 16 + (lane % 8) + (lane / 16) * 8, c = 2 * kk + (lane / 8) % 2;
      ldmatrix_x4(smem_addr(kt + swizzle<HD>(r, c)), kf);
      mma_m16n8k16<A>(sc[0], qf[kk], kf[0], kf[1]);
      mma_m16n8k16<A>(sc[1], qf[kk], kf[2], kf[3]);
    }
    float tmax_lo = -INFINITY, tmax_hi = -INFINITY;
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool ok = k0 + n * 8 + 2 * t4 + e < end_key;
        sc[n][e] = ok ? sc[n][e] * scale_log2 : -INFINITY;
        sc[n][2 + e] = ok ? sc[n][2 + e] * scale_log2 : -INFINITY;
        tmax_lo = fmaxf(tmax_lo, sc[n][e]);
        tmax_hi = fmaxf(tmax_hi, sc[n][2 + e]);
      }
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      tmax_lo = fmaxf(tmax_lo, __shfl_xor_sync(0xffffffffu, tmax_lo, off));
      tmax_hi = fmaxf(tmax_hi, __shfl_xor_sync(0xffffffffu, tmax_hi, off));
    }
    // k0 < end_key: the warp's first key is valid, so the maxima are finite.
    const float mn_lo = fmaxf(m_lo, tmax_lo), mn_hi = fmaxf(m_hi, tmax_hi);
    const float a_lo = exp2f(m_lo - mn_lo), a_hi = exp2f(m_hi - mn_hi);
    m_lo = mn_lo;
    m_hi = mn_hi;
    l_lo *= a_lo;
    l_hi *= a_hi;
    scale_rows(o, a_lo, a_hi);
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      sc[n][0] = exp2f(sc[n][0] - mn_lo);
      sc[n][1] = exp2f(sc[n][1] - mn_lo);
      sc[n][2] = exp2f(sc[n][2] - mn_hi);
      sc[n][3] = exp2f(sc[n][3] - mn_hi);
      l_lo += sc[n][0] + sc[n][1];
      l_hi += sc[n][2] + sc[n][3];
    }
    const unsigned pa[4] = {pack2<A>(sc[0][0], sc[0][1]), pack2<A>(sc[0][2], sc[0][3]), pack2<A>(sc[1][0], sc[1][1]),
                            pack2<A>(sc[1][2], sc[1][3])};
    const unsigned char* vt = L::fp8 ? smem + L::widened + L::widened_tile : v_buf(j % wide_stages);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      unsigned vf[4];
      const int r = warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8, c = 2 * np + lane / 16;
      ldmatrix_x4_trans(smem_addr(vt + swizzle<HD>(r, c)), vf);
      mma_m16n8k16<A>(o[2 * np], pa, vf[0], vf[1]);
      mma_m16n8k16<A>(o[2 * np + 1], pa, vf[2], vf[3]);
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  __syncthreads();  // the ring becomes the warps' states
  if (splits == 1) {
    // No cluster: this block's two warps hold every key of the row, in the same fragment layout.
    // Each finishes half of the head's columns: it hands the other warp that warp's half of its
    // accumulators (and its m and l) through shared memory in fragment order, 16 bytes a lane, and
    // merges the other's into its own, in registers (one barrier, no pass over a row-major copy).
    static_assert(wide_warps == 2 && NT % 2 == 0, "two warps, each finishing half of the columns");
    constexpr int half = NT / 2, words = half + 1;  // float4s a lane: the other half's o, then m and l
    float4* mine = reinterpret_cast<float4*>(smem + L::ring) + warp * words * 32 + lane;
    const float4* theirs = reinterpret_cast<const float4*>(smem + L::ring) + (1 - warp) * words * 32 + lane;
    // The accumulators indexed at compile time on either side of the warp's branch (a runtime
    // index would put o in local memory).
    const auto hand = [&](auto w_c) {
      constexpr int give = (1 - decltype(w_c)::value) * half;
#pragma unroll
      for (int n = 0; n < half; ++n)
        mine[n * 32] = make_float4(o[give + n][0], o[give + n][1], o[give + n][2], o[give + n][3]);
      mine[half * 32] = make_float4(m_lo, m_hi, l_lo, l_hi);
    };
    const auto merge = [&](auto w_c) {
      constexpr int w = decltype(w_c)::value, keep = w * half;
      // Warp 0's state first, as a row-major merge over the warps takes them (a warp without keys
      // holds m = -inf, l = 0 and o = 0).
      const float4 ml = theirs[half * 32];
      const float m0[2] = {w == 0 ? m_lo : ml.x, w == 0 ? m_hi : ml.y};
      const float l0[2] = {w == 0 ? l_lo : ml.z, w == 0 ? l_hi : ml.w};
      const float m1[2] = {w == 0 ? ml.x : m_lo, w == 0 ? ml.y : m_hi};
      const float l1[2] = {w == 0 ? ml.z : l_lo, w == 0 ? ml.w : l_hi};
      float w0[2], w1[2], den[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float mx = fmaxf(m0[h], m1[h]);
        w0[h] = m0[h] == -INFINITY ? 0.0f : exp2f(m0[h] - mx);
        w1[h] = m1[h] == -INFINITY ? 0.0f : exp2f(m1[h] - mx);
        den[h] = fmaf(w1[h], l1[h], w0[h] * l0[h]);
      }
      A* out_row = out + t * q_dim + kvh * group * HD;
#pragma unroll
      for (int n = 0; n < half; ++n) {
        const float4 other = theirs[n * 32];
        const float own[4] = {o[keep + n][0], o[keep + n][1], o[keep + n][2], o[keep + n][3]};
        const float got[4] = {other.x, other.y, other.z, other.w};
        const int col = (keep + n) * 8 + 2 * t4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // rows g, then g + 8
          const int r = g + 8 * h;
          if (r >= group) continue;
          float v[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float a0 = w == 0 ? own[2 * h + e] : got[2 * h + e], a1 = w == 0 ? got[2 * h + e] : own[2 * h + e];
            v[e] = fmaf(w1[h], a1, w0[h] * a0) / den[h];
          }
          *reinterpret_cast<unsigned*>(out_row + r * HD + col) = pack2<A>(v[0], v[1]);
        }
      }
    };
    const auto by_warp = [&](const auto& step) {
      if (warp == 0)
        step(std::integral_constant<int, 0>{});
      else
        step(std::integral_constant<int, 1>{});
    };
    if (warp < wide_warps) by_warp(hand);
    __syncthreads();
    if (warp < wide_warps) by_warp(merge);
    return;
  }
  float* st = reinterpret_cast<float*>(smem + L::ring) + static_cast<std::size_t>(warp) * 16 * (HD + 2);
  if (warp < wide_warps) {  // (a loader holds no state)
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      st[g * (HD + 2) + n * 8 + 2 * t4] = o[n][0];
      st[g * (HD + 2) + n * 8 + 2 * t4 + 1] = o[n][1];
      st[(g + 8) * (HD + 2) + n * 8 + 2 * t4] = o[n][2];
      st[(g + 8) * (HD + 2) + n * 8 + 2 * t4 + 1] = o[n][3];
    }
  }
  if (t4 == 0 && warp < wide_warps) {
    st[g * (HD + 2) + HD] = m_lo;
    st[g * (HD + 2) + HD + 1] = l_lo;
    st[(g + 8) * (HD + 2) + HD] = m_hi;
    st[(g + 8) * (HD + 2) + HD + 1] = l_hi;
  }
  const float* states = reinterpret_cast<const float*>(smem + L::ring);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Split over a cluster: every block's warps' states merged by each block for its share of the
  // outputs, in (block rank, warp) order, the remote loads of a row's states in flight together.
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's states written and visible across the cluster
  const int rank = static_cast<int>(cluster.block_rank());
  for (int idx = rank * threads + static_cast<int>(threadIdx.x); idx < group * HD; idx += splits * threads) {
    const int r = idx / HD, d = idx % HD;
    float mb[max_splits][wide_warps], lb[max_splits][wide_warps], ab[max_splits][wide_warps];
#pragma unroll
    for (int b = 0; b < max_splits; ++b) {
      if (b >= splits) continue;
      const float* other = cluster.map_shared_rank(states, b);
#pragma unroll
      for (int w = 0; w < wide_warps; ++w) {
        const float* row = other + (w * 16 + r) * (HD + 2);
        mb[b][w] = row[HD];
        lb[b][w] = row[HD + 1];
        ab[b][w] = row[d];
      }
    }
    float mx = -INFINITY;
#pragma unroll
    for (int b = 0; b < max_splits; ++b)
#pragma unroll
      for (int w = 0; w < wide_warps; ++w)
        if (b < splits) mx = fmaxf(mx, mb[b][w]);
    float num = 0.0f, den = 0.0f;
#pragma unroll
    for (int b = 0; b < max_splits; ++b)
#pragma unroll
      for (int w = 0; w < wide_warps; ++w)
        if (b < splits && mb[b][w] != -INFINITY) {  // a warp without keys holds -inf
          const float wgt = exp2f(mb[b][w] - mx);
          num = fmaf(wgt, ab[b][w], num);
          den = fmaf(wgt, lb[b][w], den);
        }
    out[t * q_dim + (kvh * group + r) * HD + d] = from_float<A>(num / den);
  }
  cluster.sync();  // keep every block's shared memory alive until the others have read it
#else
  __trap();  // splits > 1 is launched on sm_90 and later only
#endif
}

template <class A>
using decode_fn = void (*)(const A*, const void*, const void*, const std::int32_t*, attention_shape, float, A*,
                           decode_rope<A>);

template <class A>
struct decode_choice {
  decode_fn<A> fn = nullptr;
  std::size_t shared_bytes = 0;
  int threads = decode_threads;
  bool rotates = false;  // the tensor-core kernel, which takes a decode_rope
};

template <class A, int HD, class C>
decode_choice<A> choose_group(std::int64_t group) {
  if (group <= 4) return {decode_attention_kernel<A, HD, 4, C>, decode_layout<HD, 4, C>::bytes};
  return {decode_attention_kernel<A, HD, 8, C>, decode_layout<HD, 8, C>::bytes};
}

template <class A, int HD, class C>
decode_choice<A> wide_kernel(bool loaders) {
  if (loaders) return {decode_attention_wide_kernel<A, HD, C, 2>, wide_layout<HD, C>::bytes, wide_threads<2>, true};
  return {decode_attention_wide_kernel<A, HD, C, 0>, wide_layout<HD, C>::bytes, wide_threads<0>, true};
}

// The kernel for activations A and the cache's element C. wide: the tensor-core kernel, for head
// dims 64 and 128 on sm_80 and later (a block per (row, kv head), or a cluster on sm_90), with
// loader warps where `loaders`.
template <class A, class C>
decode_choice<A> decode_kernel_for(const attention_shape& s, bool wide, bool loaders) {
  if (s.rows_per_seq != 1 || s.kv_heads < 1 || s.heads % s.kv_heads != 0 || s.heads / s.kv_heads > 8) return {};
  const std::int64_t group = s.heads / s.kv_heads;
  if (wide && s.head_dim == 64) return wide_kernel<A, 64, C>(loaders);
  if (wide && s.head_dim == 128) return wide_kernel<A, 128, C>(loaders);
  switch (s.head_dim) {
    case 16: return choose_group<A, 16, C>(group);
    case 32: return choose_group<A, 32, C>(group);
    case 64: return choose_group<A, 64, C>(group);
    case 128: return choose_group<A, 128, C>(group);
    case 256: return choose_group<A, 256, C>(group);
    default: return {};
  }
}

// None for a 16-bit cache of the other type than A.
template <class A>
decode_choice<A> decode_kernel_for(const attention_shape& s, bool wide = false, bool loaders = false) {
  if (s.kv == kv_storage::fp8_e4m3) return decode_kernel_for<A, fp8_code>(s, wide, loaders);
  if (s.kv == (is_fp16<A> ? kv_storage::fp16 : kv_storage::bf16)) return decode_kernel_for<A, A>(s, wide, loaders);
  return {};
}

}  // namespace

// The fewest splits (1, 2, 4 or 8) giving at least two blocks per SM, on devices with clusters.
// Measured on the H200 with the previous kernel: at batch 64 (512 pairs) splitting only added
// merges; at batch 1 (8 pairs) eight blocks per pair ran 499 us a step against 711 us for four.
int decode_attention_splits(std::int64_t pairs) {
  return cuda_core_decode_splits(pairs, device_multiprocessors(), device_is_sm90_or_later());
}

namespace {
// ITERA_LLM_WIDE_DECODE=0 keeps the CUDA-core kernel for wide grids too (A/B measurements).
bool wide_decode_off() {
  static const bool off = !env_switch("ITERA_LLM_WIDE_DECODE", true);
  return off;
}
// The fewest (row, kv head) pairs the tensor-core kernel takes, or ITERA_LLM_WIDE_DECODE_PAIRS
// (A/B measurements). Measured on the H200 (llama-3.1-8b, context ~561, graph steps;
// docs/perf/2026-12-01-split-residual.md): with one block a pair (run 4) against the CUDA-core
// kernel with its keys split over a cluster, batch 16 (128 pairs) 514 against 1305 us a step,
// batch 8 491 against 1009, batch 4 (32 pairs) 485 against 658; with its keys split too (run 6),
// batch 2 (16 pairs, 8 blocks a pair) 219 against 337. The rule before (a pair per SM, 132 here)
// left all of those on the CUDA-core kernel. Below 16 pairs (batch 1 where the one-kernel step
// does not run) the CUDA-core kernel stays: not measured against. Without clusters (before sm_90)
// the tensor-core kernel cannot split a pair's keys and the rule stays a pair per SM, as measured
// before (batch 32 on the H200: the CUDA-core kernel split in two took 1.46 ms a step).
std::int64_t wide_decode_pairs() {
  static const std::int64_t forced = env_count("ITERA_LLM_WIDE_DECODE_PAIRS", 0,
                                               "the fewest (row, kv head) pairs the wide decode attention takes "
                                               "(0: the rule)");
  if (forced != 0) return forced;
  return tensor_core_decode_pairs(device_multiprocessors(), device_is_sm90_or_later());
}

// ITERA_LLM_WIDE_LOADERS=0 keeps the wide kernel's blocks without loader warps (A/B measurements).
bool wide_decode_loaders() {
  static const bool on = env_switch("ITERA_LLM_WIDE_LOADERS", true);
  return on;
}

// The blocks (a cluster of 1, 2, 4 or 8) the wide kernel deals a row's keys over: the most that
// keep the launch within two blocks per SM, on devices with clusters; ITERA_LLM_WIDE_SPLITS forces
// one (A/B). H200, run 6 (attention us a step for 1 / 2 / 4 / 8 blocks a pair): batch 32 (256
// pairs) 749 / 842 / 1079 / 1203; batch 16 546 / 519 / 675 / 712; batch 8 527 / 434 / 355 / 461;
// batch 4 518 / 417 / 295 / 265: the fastest near 256 blocks, the rule's 1, 2, 4 and 8.
int wide_decode_splits(std::int64_t pairs) {
  static const std::int64_t forced = env_count("ITERA_LLM_WIDE_SPLITS", 0,
                                               "the blocks the wide decode attention splits a row over (0: the rule)");
  if (forced != 0 && forced != 1 && forced != 2 && forced != 4 && forced != 8)
    throw std::invalid_argument(itera::cuda::cat("ITERA_LLM_WIDE_SPLITS=", forced, ": choose 1, 2, 4 or 8 (0: the rule)"));
  if (!device_is_sm90_or_later()) return 1;
  if (forced != 0) return static_cast<int>(forced);
  return tensor_core_decode_splits(pairs, device_multiprocessors(), true);
}
}  // namespace

// The shape alone decides, for activations of the cache's 16-bit type (either with an fp8 cache).
bool decode_attention_supported(const attention_shape& s) {
  return s.kv == kv_storage::fp16 ? decode_kernel_for<fp16>(s).fn != nullptr : decode_kernel_for<bf16>(s).fn != nullptr;
}

template <class A>
void prepare_decode_attention(const attention_shape& s) {
  (void)wide_decode_splits(1);  // a bad ITERA_LLM_WIDE_SPLITS refused here, not inside a step
  for (const bool wide : {false, true})
    for (const bool loaders : {false, true})
      if (const decode_choice<A> d = decode_kernel_for<A>(s, wide, loaders); d.fn && d.shared_bytes > 48 * 1024)
        allow_dynamic_shared(reinterpret_cast<const void*>(d.fn), d.shared_bytes);  // only ever grows
}

namespace {
// The tensor-core kernel from wide_decode_pairs() (row, kv head) pairs where it takes the shape
// (rotates), else the CUDA-core kernel for those rows' other head dims, or none.
template <class A>
decode_choice<A> wide_choice(std::int64_t rows, const attention_shape& s) {
  return rows * s.kv_heads >= wide_decode_pairs() && !wide_decode_off() ? decode_kernel_for<A>(s, true)
                                                                        : decode_choice<A>{};
}
}  // namespace

template <class A>
bool decode_attention_rotates(std::int64_t rows, const attention_shape& s) {
  return s.rows_per_seq == 1 && wide_choice<A>(rows, s).rotates;
}

template <class A>
bool decode_attention(const A* qkv, const void* k_cache, const void* v_cache, const std::int32_t* start,
                      std::int64_t rows, const attention_shape& s, float scale, A* out, cudaStream_t stream,
                      const decode_rope<A>& rope) {
  // The tensor-core kernel from wide_decode_pairs() (row, kv head) pairs, a pair's keys over
  // wide_decode_splits() blocks; below that the CUDA-core kernel with its keys split over a
  // cluster.
  const std::int64_t pairs = rows * s.kv_heads;
  decode_choice<A> d = wide_choice<A>(rows, s);
  const int splits = d.fn ? wide_decode_splits(pairs) : decode_attention_splits(pairs);
  if (rope.inv_freq && !d.rotates)
    throw std::logic_error("llm decode_attention: RoPE asked of the CUDA-core kernel (decode_attention_rotates)");
  if (!d.fn) d = decode_kernel_for<A>(s, false);
  if (!d.fn) return false;
  if (d.rotates && wide_decode_loaders() &&
      tensor_core_decode_loaders(pairs * splits, splits, device_multiprocessors()))
    d = decode_kernel_for<A>(s, true, true);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(rows), static_cast<unsigned>(s.kv_heads), static_cast<unsigned>(splits));
  config.blockDim = dim3(d.threads);
  config.dynamicSmemBytes = d.shared_bytes;
  config.stream = stream;
  launch_attributes attrs(dim3(1, 1, static_cast<unsigned>(splits)));
  attrs.apply_to(config);
  // Scores in base 2: exp(x) = exp2(x * log2(e)).
  const float scale_log2 = scale * 1.4426950408889634f;
  ITERA_CUDA_CHECK(cudaLaunchKernelEx(&config, d.fn, qkv, k_cache, v_cache, start, s, scale_log2, out, rope));
  return true;
}

template void prepare_decode_attention<bf16>(const attention_shape&);
template void prepare_decode_attention<fp16>(const attention_shape&);
template bool decode_attention_rotates<bf16>(std::int64_t, const attention_shape&);
template bool decode_attention_rotates<fp16>(std::int64_t, const attention_shape&);
template bool decode_attention<bf16>(const bf16*, const void*, const void*, const std::int32_t*, std::int64_t,
                                     const attention_shape&, float, bf16*, cudaStream_t, const decode_rope<bf16>&);
template bool decode_attention<fp16>(const fp16*, const void*, const void*, const std::int32_t*, std::int64_t,
                                     const attention_shape&, float, fp16*, cudaStream_t, const decode_rope<fp16>&);

}  // namespace itera::kernels::llm
