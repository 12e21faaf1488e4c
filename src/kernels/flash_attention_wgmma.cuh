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
//
// Short tails (non-causal policies only): a length just past a multiple of 64, like the vision
// encoder's 257 tokens (256 patches and a class token), would spend a whole key tile on each block
// for a few keys and a whole block on a few query rows. Instead the last few keys (up to
// tail_keys_max) are copied with the last full tile and folded into each row's softmax on CUDA
// cores once the tiles are done (fold_tail_keys), and the last few query rows (up to
// tail_rows_max) are taken by the block before them, which after its own rows computes theirs on
// CUDA cores against every key, read from L2 (attend_tail_rows). A launch sizes its grid for that
// (query_tiles) and launches the kernel it sized it for.
//
// Causal policies (the llm prefill) run causal_attention_kernel instead: the same steps with one K
// buffer and two V buffers, so that three blocks fit an SM (its comment says why and how).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

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

// Q K^T of one key tile of 8 NS keys (64, or 128 in the Hopper prefill's kernel): s = Q [64][D] x
// K [8 NS][D]^T, both tiles in the swizzle layout (64-column halves of 64 and 8 NS rows).
template <class A, int D, int NS>
__device__ __forceinline__ void scores(float (&s)[NS][4], unsigned q, unsigned k) {
  static_assert(NS == 8 || NS == 16, "key tiles of 64 or 128");
  constexpr unsigned q_half = tile_q * 128, k_half = NS * 8 * 128;  // bytes of a 64-column half
  const std::uint64_t dq = wgmma::descriptor(q, 16, 1024), dk = wgmma::descriptor(k, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const unsigned within = static_cast<unsigned>(kk % 4) * 32, half = static_cast<unsigned>(kk / 4);
    const std::uint64_t a = wgmma::advance(dq, half * q_half + within), b = wgmma::advance(dk, half * k_half + within);
    if constexpr (NS == 8) wgmma::mma_64x64_ss<A>(s, a, b, kk > 0);
    else wgmma::mma_64x128_ss<A>(s, a, b, kk > 0);
  }
}

// O += P V over the first `groups` 16-key steps of the tile: P's A fragments (p_fragment, all
// made before the wgmma fence, so that no register the instructions read changes between them),
// V [16 NP][D].
template <class A, int D, int NP>
__device__ __forceinline__ void accumulate(float (&o)[D / 8][4], const unsigned (&pa)[NP][4], unsigned v, int groups) {
  constexpr unsigned half = NP * 16 * 128;  // LBO: the second 64 columns of V (a tile of 16 NP keys)
  const std::uint64_t dv = wgmma::descriptor(v, half, 1024);
#pragma unroll
  for (int kk = 0; kk < NP; ++kk) {
    if (kk >= groups) break;  // uniform over the warpgroup
    const std::uint64_t desc = wgmma::advance(dv, static_cast<unsigned>(kk) * 16 * 128);
    if constexpr (D == 128) wgmma::mma_64x128_rs<A>(o, pa[kk], desc);
    else wgmma::mma_64x64_rs<A>(o, pa[kk], desc);
  }
}

// One step of the order of FlashAttention-3, P of tile j in the A fragments: S of tile j + 1 (its
// K at k_next) and P V of tile j (add_pv(j) issues and commits it) go to the tensor cores
// together, the softmax of tile j + 1 (softmax(j + 1)) runs on the others while P V does, then O
// is rescaled for the P V of tile j + 1 (rescale()) and its P packed (pack()). Shared by the
// streaming kernel below and the persistent one (flash_attention_persistent.cuh).
template <class A, int D, class J, class AddPv, class Softmax, class Rescale, class Pack, int NS>
__device__ __forceinline__ void overlapped_step(float (&s)[NS][4], float (&o)[D / 8][4], unsigned q_addr,
                                                unsigned k_next, J j, const AddPv& add_pv, const Softmax& softmax,
                                                const Rescale& rescale, const Pack& pack) {
  wgmma::fence_operands(s);
  wgmma::fence();
  scores<A, D>(s, q_addr, k_next);
  wgmma::commit();
  add_pv(j);
  wgmma::wait<1>();  // the scores of tile j + 1
  wgmma::fence_operands(s);
  softmax(j + 1);
  wgmma::wait<0>();
  wgmma::fence_operands(o);
  rescale();
  pack();
}

// The tails of non-causal work that the kernel takes on CUDA cores, each past at least one full
// tile of 64: of a block's keys, a last tile of 1 .. tail_keys_max keys (fold_tail_keys); of a
// sequence's query rows, a last tile of 1 .. tail_rows_max rows, which the block of the tile
// before takes on (attend_tail_rows; query_tiles sizes the grid, and the policy gives that block
// its 64 + r rows). ViT-L/14 at 224 (257 tokens) has one of each.
//
// The bounds weigh what the CUDA cores issue against what they replace. At head_dim 64, on
// ViT-L/14's 257 tokens at batch 128, the kernel took ~1000 SM cycles per block and key tile
// (215 us for 51200 of them on 132 SMs), while its warps issue on under half of those cycles
// (~390 instructions a thread per tile: ~320 for the masked softmax and packing, the rest copies,
// products and barrier; the S -> softmax -> P V chain and the tensor cores take the other cycles).
// Instruction counts here are from each path's sm_90a code compiled alone; the tiles' costs at
// head_dim 128 are estimates (products and copies twice as large, softmax the same).
//   A tail key costs a thread ~160 instructions at head_dim 64, ~240 at 128 (its score over a
//   quarter of the head on two rows, the quad sum, p, p v into D / 4 columns of two rows). Eight
//   keys at 64 issue about what the tile takes in time, in slots the other blocks' chains leave
//   free; at 128, four (with room to spare: the tile there is dearer).
//   A tail row costs a warp ~450 instructions per 32 keys at head_dim 64, ~900 at 128 (the keys'
//   scores and p v over the whole head, split over the block): at 257 tokens ~1000 SM cycles of
//   issue against ~4200 for a block of 64 rows, so four rows at 64 cost a little less than the
//   block they save; at 128, two (~2000 each against ~5600).
template <int D>
constexpr int tail_keys_max = 512 / D;
template <int D>
constexpr int tail_rows_max = 256 / D;

// The tail a count of rows (or keys) leaves for CUDA cores: n % 64 where that is 1 .. max and a
// full tile comes before it, else 0.
__host__ __device__ constexpr int short_tail(std::int64_t n, int max) {
  const int r = static_cast<int>(n % tile_k);
  return n > tile_k && r <= max ? r : 0;
}

// The `count` tail keys (every tile before them done, O rescaled to the reference max) folded
// into the warp's rows on CUDA cores, one key at a time: softmax_tile's online softmax (base 2,
// the max scaled, moved only past rescale_threshold) on tiles of one key, O rescaled at once.
// Their K and V rows lie one after another at kt and vt (in a ring buffer: the kernel copied them
// there with the last full tile), Q is the block's tile. A thread holds rows g and g + 8 of the
// warp's 16 (from the block's row `first`) in the C fragment layout; the four threads of a quad
// split each score over quarters of the head (D / 4 columns each) and add up across the quad, so
// all four hold the same score and the same max. Each then adds p v into its own columns of O
// (8n + 2 t4 and the one after), and only the quad's first adds p to the row sum (store_rows adds
// up the quad's four). P stays fp32 here; the tensor cores take it rounded to A.
template <class A, int D>
__device__ __forceinline__ void fold_tail_keys(warp_rows<D>& st, const unsigned char* sq, const unsigned char* kt,
                                               const unsigned char* vt, int count, int first, int lane,
                                               float scale_log2) {
  constexpr int quarter = D / 32;  // 16-byte chunks in a quarter of a row
  const int g = lane / 4, t4 = lane % 4;
  float q_lo[quarter][8], q_hi[quarter][8];  // widened once (the tile's registers are free by now)
#pragma unroll
  for (int u = 0; u < quarter; ++u) {
    unpack8<A>(*reinterpret_cast<const uint4*>(sq + offset<D>(tile_q, first + g, t4 * quarter + u)), q_lo[u]);
    unpack8<A>(*reinterpret_cast<const uint4*>(sq + offset<D>(tile_q, first + g + 8, t4 * quarter + u)), q_hi[u]);
  }
#pragma unroll 1
  for (int i = 0; i < count; ++i) {
    float s_lo = 0.0f, s_hi = 0.0f;
#pragma unroll
    for (int u = 0; u < quarter; ++u) {
      float k[8];
      unpack8<A>(*reinterpret_cast<const uint4*>(kt + i * D * 2 + (t4 * quarter + u) * 16), k);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        s_lo = fmaf(q_lo[u][e], k[e], s_lo);
        s_hi = fmaf(q_hi[u][e], k[e], s_hi);
      }
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      s_lo += __shfl_xor_sync(0xffffffffu, s_lo, off);
      s_hi += __shfl_xor_sync(0xffffffffu, s_hi, off);
    }
    float a_lo, a_hi;
    if (move_reference(st, s_lo * scale_log2, s_hi * scale_log2, a_lo, a_hi)) {
      st.l_lo *= a_lo;
      st.l_hi *= a_hi;
      scale_rows(st.o, a_lo, a_hi);
    }
    const float p_lo = exp2_approx(fmaf(s_lo, scale_log2, -st.m_lo));
    const float p_hi = exp2_approx(fmaf(s_hi, scale_log2, -st.m_hi));
    if (t4 == 0) {
      st.l_lo += p_lo;
      st.l_hi += p_hi;
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const float2 v = to_float2(*reinterpret_cast<const pair_of<A>*>(vt + i * D * 2 + n * 16 + 4 * t4));
      st.o[n][0] = fmaf(p_lo, v.x, st.o[n][0]);
      st.o[n][1] = fmaf(p_lo, v.y, st.o[n][1]);
      st.o[n][2] = fmaf(p_hi, v.x, st.o[n][2]);
      st.o[n][3] = fmaf(p_hi, v.y, st.o[n][3]);
    }
  }
}

// Scratch of attend_tail_rows, in floats: per warp, the running max, the sum and O of one row.
template <int D>
constexpr std::size_t tail_row_scratch = static_cast<std::size_t>(warps) * (2 + D);

// Where attend_tail_rows reads K and V, a 16-byte chunk (`part`) of a key's row at a time: here
// global memory, as the wgmma kernel does (the head's K and V are in L2: every block of the head
// reads them). flash_attention_persistent.cuh reads its resident copy in shared memory instead.
template <class A>
struct global_key_rows {
  kv_rows<A> kv;
  __device__ __forceinline__ uint4 k(int row, int part) const {
    return __ldg(reinterpret_cast<const uint4*>(kv.k + row * kv.stride) + part);
  }
  __device__ __forceinline__ uint4 v(int row, int part) const {
    return __ldg(reinterpret_cast<const uint4*>(kv.v + row * kv.stride) + part);
  }
};

// `count` tail rows (q and out point at the first, row strides q_stride and out_stride) against
// all `keys` keys on CUDA cores, written to out, by one group of four warps: `thread` is the
// thread's index in it (0 .. 127) and sync() a barrier over it (the wgmma kernel: the block and
// __syncthreads; the persistent kernel: a warpgroup and its named barrier). In the wgmma kernel the
// block's own tiles are gone by now, so K and V come from global memory (global_key_rows); Keys
// gives chunks of their rows. Per row, warp w takes the keys in steps of 32 (steps w, w + 4, ...);
// eight lanes (D = 64; sixteen for 128) share a key, each holding one 16-byte chunk of q and of O,
// so that the loads of K and V are of whole rows and a score is a sum over those lanes. The warp
// keeps an online softmax in base 2 (its max the rounded scaled score, so p <= 1 within a few
// ulp); then the four warps' maxima, sums and O meet in `scratch` (the wgmma kernel: shared memory
// of the ring, free once every warp is past its products and fold_tail_keys' reads: the barrier
// below), and O / l goes out as A.
template <class A, int D, class Keys, class Sync>
__device__ __forceinline__ void attend_tail_rows(float* scratch, const A* q, std::int64_t q_stride, const Keys& kv,
                                                 int keys, A* out, std::int64_t out_stride, int count,
                                                 float scale_log2, int thread, Sync sync) {
  constexpr int parts = D / 8, groups = 32 / parts, per_lane = parts;  // a step: groups x per_lane = 32 keys
  const int warp = thread / 32, lane = thread % 32;
  const int part = lane % parts, grp = lane / parts;
  float* const part_m = scratch;             // [warp]
  float* const part_l = part_m + warps;      // [warp]
  float* const part_o = part_l + warps;      // [warp][D]
  for (int e = 0; e < count; ++e) {
    float qf[8], o[8];
    unpack8<A>(__ldg(reinterpret_cast<const uint4*>(q + e * q_stride) + part), qf);
#pragma unroll
    for (int d = 0; d < 8; ++d) o[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int k0 = warp * 32; k0 < keys; k0 += warps * 32) {
      // A lane's keys past the last one read the last one's rows instead, their scores then
      // masked (p = 0): the loads stay in bounds without branches, so that all of them are in
      // flight together.
      const auto row_of = [&](int u) { return min(k0 + grp + groups * u, keys - 1); };
      float s[per_lane];
#pragma unroll
      for (int u = 0; u < per_lane; ++u) {
        float k[8];
        unpack8<A>(kv.k(row_of(u), part), k);
        float dot = 0.0f;
#pragma unroll
        for (int d = 0; d < 8; ++d) dot = fmaf(qf[d], k[d], dot);
#pragma unroll
        for (int off = 1; off < parts; off <<= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        s[u] = k0 + grp + groups * u < keys ? dot : -INFINITY;
      }
      // The step's max over the warp (key k0 is in the step: finite), then the online softmax.
      float smax = s[0];
#pragma unroll
      for (int u = 1; u < per_lane; ++u) smax = fmaxf(smax, s[u]);
#pragma unroll
      for (int off = parts; off < 32; off <<= 1) smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, off));
      const float mn = fmaxf(m, smax * scale_log2), a = exp2_approx(m - mn);
      m = mn;
      l *= a;
#pragma unroll
      for (int d = 0; d < 8; ++d) o[d] *= a;
#pragma unroll
      for (int u = 0; u < per_lane; ++u) {
        const float p = exp2_approx(fmaf(s[u], scale_log2, -mn));
        l += part == 0 ? p : 0.0f;  // each key once
        float v[8];
        unpack8<A>(kv.v(row_of(u), part), v);
#pragma unroll
        for (int d = 0; d < 8; ++d) o[d] = fmaf(p, v[d], o[d]);
      }
    }
    // The warp's groups of lanes took different keys: their O (the same chunk of it) adds up.
#pragma unroll
    for (int off = parts; off < 32; off <<= 1)
#pragma unroll
      for (int d = 0; d < 8; ++d) o[d] += __shfl_xor_sync(0xffffffffu, o[d], off);
    l = warp_sum(l);
    sync();  // the ring free (every warp past its products), or the last row combined
    if (lane < parts) {
      float4* to = reinterpret_cast<float4*>(part_o + warp * D + 8 * part);
      to[0] = make_float4(o[0], o[1], o[2], o[3]);
      to[1] = make_float4(o[4], o[5], o[6], o[7]);
    }
    if (lane == 0) {
      part_m[warp] = m;  // -inf where the warp took no keys (its sum and O are 0)
      part_l[warp] = l;
    }
    sync();
    // The warps' parts in the largest warp's max (key 0's warp took keys: it is finite), a pair of
    // columns per thread.
    static_assert(D <= 2 * threads, "a pair of columns per thread");
    if (const int d = 2 * thread; d < D) {
      float mx = part_m[0];
#pragma unroll
      for (int w = 1; w < warps; ++w) mx = fmaxf(mx, part_m[w]);
      float sum = 0.0f, o0 = 0.0f, o1 = 0.0f;
#pragma unroll
      for (int w = 0; w < warps; ++w) {
        const float f = exp2_approx(part_m[w] - mx);
        sum = fmaf(f, part_l[w], sum);
        o0 = fmaf(f, part_o[w * D + d], o0);
        o1 = fmaf(f, part_o[w * D + d + 1], o1);
      }
      *reinterpret_cast<pair_of<A>*>(out + e * out_stride + d) = pair_from_float<A>(o0 / sum, o1 / sum);
    }
  }
}

// What both kernels below do with a key tile, in the order overlapped_step calls it: the softmax of
// tile t (P as fp32 in s, O's rescale factor into a_lo, a_hi), O rescaled by it once nothing is in
// flight (ptxas serialises the products when registers of one may be written between the issue of
// another and the wait), P packed into the A fragments pa once the P V before it is done (that one
// reads pa while it runs), and P V of tile j issued.
template <class A, int D, bool Causal, int KT = tile_k>
struct tile_pass {
  static_assert(KT == 64 || KT == 128, "key tiles of 64 or 128");
  warp_rows<D>& st;
  const key_mask<Causal>& allowed;
  float scale_log2;
  int lane;
  float s[KT / 8][4];
  unsigned pa[KT / 16][4];
  float a_lo = 0.0f, a_hi = 0.0f;
  bool moved = false;  // O needs the rescale by a_lo, a_hi (warp-uniform)

  __device__ __forceinline__ void softmax(std::int64_t t) {
    const int k0 = static_cast<int>(t) * KT;
    if (allowed.template tile_needs_mask<KT>(k0))
      moved = softmax_tile<true, D>(st, s, k0, allowed, scale_log2, lane, a_lo, a_hi);
    else
      moved = softmax_tile<false, D>(st, s, k0, allowed, scale_log2, lane, a_lo, a_hi);
  }
  __device__ __forceinline__ void pack() {
#pragma unroll
    for (int kk = 0; kk < KT / 16; ++kk) p_fragment<A>(s, kk, pa[kk]);
  }
  __device__ __forceinline__ void rescale() {
    if (moved) scale_rows(st.o, a_lo, a_hi);
  }
  // P V of tile j, its V tile at v (a shared-memory address).
  __device__ __forceinline__ void add_pv(std::int64_t j, unsigned v) {
    const int groups = (min(KT, allowed.keys - static_cast<int>(j) * KT) + 15) / 16;
    wgmma::fence_operands(st.o);
    wgmma::fence();
    accumulate<A, D>(st.o, pa, v, groups);
    wgmma::commit();
  }
};

template <int D, class Policy>
__global__ void __launch_bounds__(threads, D == 64 ? 4 : 2) attention_kernel(const Policy policy, float scale_log2) {
  static_assert(D == 64 || D == 128, "the wgmma attention takes head_dim 64 or 128");
  static_assert(threads == 128 && tile_q == 64 && tile_k == 64 && warp_rows_per_warp == 16, "one warpgroup, 64 rows");
  static_assert(!Policy::causal, "causal policies run causal_attention_kernel");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = layout<D>;
  using A = typename Policy::element;
  extern __shared__ __align__(1024) unsigned char smem[];
  grid_dependents_launch();
  grid_dependency_wait();

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;
  const block_work<A> w = policy.work();
  // Rows past the block's 64 are its tail rows (attend_tail_rows), and a short last tile of keys
  // is folded in on CUDA cores (fold_tail_keys) instead of running as a tile.
  const int rows = min(w.rows, tile_q);
  const int tail = short_tail(w.keys, tail_keys_max<D>);

  unsigned char* sq = smem + L::q;
  const auto k_buf = [&](int b) { return smem + L::k + b * L::tile; };
  const auto v_buf = [&](int b) { return smem + L::v + b * L::tile; };
  const kv_rows<A> kv = policy.kv();  // kept in registers: this kernel has room (the mma.sync one has not)
  const auto issue_kv = [&](std::int64_t k0, int b) {
    const int valid = static_cast<int>(min(static_cast<std::int64_t>(tile_k), w.keys - k0));
    load_tile<D>(k_buf(b), kv.k + k0 * kv.stride, kv.stride, tile_k, valid);
    load_tile<D>(v_buf(b), kv.v + k0 * kv.stride, kv.stride, tile_k, valid);
  };
  // The tail keys' K and V rows into buffer b (the one after the last full tile's), a 16-byte
  // chunk of each per thread, row after row: fold_tail_keys reads them, not wgmma, so they skip
  // the swizzle (its reads of one row are broadcasts or fall in distinct banks either way).
  static_assert(tail_keys_max<D> * (D / 8) <= threads, "one chunk of the tail keys per thread");
  const auto issue_tail = [&](int b) {
    const int r = static_cast<int>(threadIdx.x) / (D / 8), c = static_cast<int>(threadIdx.x) % (D / 8);
    if (r >= tail) return;
    const std::int64_t from = (w.keys - tail + r) * kv.stride + c * 8;
    cp_async16(smem_addr(k_buf(b)) + static_cast<unsigned>(threadIdx.x) * 16, kv.k + from);
    cp_async16(smem_addr(v_buf(b)) + static_cast<unsigned>(threadIdx.x) * 16, kv.v + from);
  };
  load_tile<D>(sq, w.q, w.q_stride, tile_q, rows);
  issue_kv(0, 0);
  cp_async_commit();

  const int my_first = warp * warp_rows_per_warp;
  const key_mask<false> allowed(w, my_first, g);
  const int keys = allowed.keys;

  warp_rows<D> st;
  st.reset();
  tile_pass<A, D, false> tp{st, allowed, scale_log2, lane};
  const unsigned q_addr = smem_addr(sq);
  const std::int64_t tiles = (w.keys - tail + tile_k - 1) / tile_k;
  if (tiles == 0) {  // no policy asks for zero keys; nothing to read, so nothing is written
    cp_async_wait<0>();
    return;
  }
  const auto buffer = [](std::int64_t j) { return static_cast<int>(j % stages); };
  // Tile 0 (with Q) and tile 1 in flight; S of tile 0.
  if (tiles > 1) issue_kv(tile_k, 1);
  if (tiles == 1 && tail > 0) issue_tail(1);
  cp_async_commit();
  cp_async_wait<1>();
  wgmma::fence_proxy_async();
  __syncthreads();
  wgmma::fence();
  scores<A, D>(tp.s, q_addr, smem_addr(k_buf(0)));
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operands(tp.s);
  tp.softmax(0);
  tp.pack();

  // Step j, P of tile j in pa: S of tile j + 1 and then P V of tile j go to the tensor cores; the
  // softmax of tile j + 1 runs on the others while P V does (the order of FlashAttention-3). The
  // last tile's P V is peeled off, so that every step issues both (ptxas serialises the products
  // when the groups in flight differ between paths). O is rescaled by the factor of the tile whose
  // P V comes next.
  const auto softmax = [&](std::int64_t t) { tp.softmax(t); };
  const auto pack = [&] { tp.pack(); };
  const auto rescale_o = [&] { tp.rescale(); };
  const auto add_pv = [&](std::int64_t j) { tp.add_pv(j, smem_addr(v_buf(buffer(j)))); };
  for (std::int64_t j = 0; j + 1 < tiles; ++j) {
    cp_async_wait<0>();  // tile j + 1, issued a step ago
    wgmma::fence_proxy_async();
    __syncthreads();  // ... visible to wgmma; every warp is past step j - 1, so tile j - 1's buffer is free
    if (j + 2 < tiles) issue_kv((j + 2) * tile_k, buffer(j + 2));
    if (j + 2 == tiles && tail > 0) issue_tail(buffer(j + 2));
    cp_async_commit();
    // O's rescale is for P V of tile j + 1 (tile 0's needs none: O is 0).
    overlapped_step<A, D>(tp.s, st.o, q_addr, smem_addr(k_buf(buffer(j + 1))), j, add_pv, softmax, rescale_o, pack);
  }
  add_pv(tiles - 1);
  wgmma::wait<0>();
  wgmma::fence_operands(st.o);
  cp_async_wait<0>();
  if (tail > 0) __syncthreads();  // the tail keys' copies, each thread's own waited for, seen by all
  if (my_first >= rows) return;  // never where the block has tail rows (rows is 64 then)
  if (tail > 0)
    fold_tail_keys<A, D>(st, sq, k_buf(buffer(tiles)), v_buf(buffer(tiles)), tail, my_first, lane, scale_log2);
  const block_output<A> dst = policy.output();
  store_rows<D, D>(st, dst.out, dst.stride, my_first, rows, lane);
  static_assert(tail_row_scratch<D> * sizeof(float) <= L::tile, "the tail rows' scratch fits a K buffer");
  if (w.rows > tile_q)
    attend_tail_rows<A, D>(reinterpret_cast<float*>(smem + L::k), w.q + tile_q * w.q_stride, w.q_stride,
                           global_key_rows<A>{kv}, keys, dst.out + tile_q * dst.stride, dst.stride, w.rows - tile_q,
                           scale_log2, static_cast<int>(threadIdx.x), [] { __syncthreads(); });
#else
  (void)policy;
  (void)scale_log2;
  __trap();  // launched only where wgmma_available(): never here
#endif
}

// The causal kernel (the llm prefill; launch takes it for a causal policy), three blocks an SM. The
// kernel above holds Q and three buffers each of K and V: 112 KiB at head_dim 128, two blocks an SM,
// and at that occupancy the 2048-token llama-3.1-8b prefill issued on 36% of the cycles with the
// tensor pipe at 40% and no eligible warp 63% of the time (Nsight Compute). Here Q, one K buffer and
// two V buffers (64 KiB at 128): step j (P of tile j in registers) needs K(j + 1) and V(j); V(j + 1)
// loads into the other V buffer from the step's start (V(j - 1), its last reader, is done), and
// K(j + 2) into the K buffer as soon as S(j + 1) is (mid-step, so that it has the softmax of tile
// j + 1 and P V of tile j to land). The products, softmax and order are the kernel above's: the same
// bits (the prefill test's logits equal the mma.sync kernel's at every position). On the H200 the
// 2048-token prefill's attention took 3.70-3.71 ms a pass on the kernel above, 3.24-3.26 here
// (docs/perf/2026-12-01-prefill-balance.md). The cp.async groups: Q with K(0) and V(0), then V(1),
// then K(1); per step one group at its start (V(j + 1), empty at step 0) and one mid-step (K(j + 2),
// or empty), so that "all but the newest" is always K(j + 1) and V(j) landed.
template <int D>
struct causal_layout {
  static constexpr std::size_t tile = static_cast<std::size_t>(tile_k) * D * 2;
  static constexpr std::size_t q = 0;
  static constexpr std::size_t k = q + static_cast<std::size_t>(tile_q) * D * 2;  // one K tile
  static constexpr std::size_t v = k + tile;                                      // two V tiles
  static constexpr std::size_t bytes = v + 2 * tile;  // D = 128: 64 KiB, three blocks per SM
};

template <int D, class Policy>
__global__ void __launch_bounds__(threads, 3) causal_attention_kernel(const Policy policy, float scale_log2) {
  static_assert(D == 64 || D == 128, "the wgmma attention takes head_dim 64 or 128");
  static_assert(Policy::causal, "the causal kernel");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = causal_layout<D>;
  using A = typename Policy::element;
  extern __shared__ __align__(1024) unsigned char smem[];
  grid_dependents_launch();
  grid_dependency_wait();

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;
  const block_work<A> w = policy.work();
  const int rows = w.rows;
  unsigned char* sq = smem + L::q;
  unsigned char* kt = smem + L::k;
  const auto v_buf = [&](std::int64_t j) { return smem + L::v + (j % 2) * L::tile; };
  const kv_rows<A> kv = policy.kv();
  const std::int64_t tiles = (w.keys + tile_k - 1) / tile_k;  // causal: keys >= 1
  const auto load_keys = [&](unsigned char* dst, const A* from, std::int64_t j) {
    const std::int64_t k0 = j * tile_k;
    const int valid = static_cast<int>(min(std::int64_t{tile_k}, w.keys - k0));
    load_tile<D>(dst, from + k0 * kv.stride, kv.stride, tile_k, valid);
  };
  load_tile<D>(sq, w.q, w.q_stride, tile_q, rows);
  load_keys(kt, kv.k, 0);
  load_keys(v_buf(0), kv.v, 0);
  cp_async_commit();
  if (tiles > 1) load_keys(v_buf(1), kv.v, 1);
  cp_async_commit();

  const int my_first = warp * warp_rows_per_warp;
  const key_mask<true> allowed(w, my_first, g);
  warp_rows<D> st;
  st.reset();
  tile_pass<A, D, true> tp{st, allowed, scale_log2, lane};
  const unsigned q_addr = smem_addr(sq), k_addr = smem_addr(kt);
  const auto pack = [&] { tp.pack(); };
  const auto rescale_o = [&] { tp.rescale(); };
  const auto add_pv = [&](std::int64_t j) { tp.add_pv(j, smem_addr(v_buf(j))); };
  // K(j + 2) into the K buffer once S(j + 1) is done in every warp (the buffer's last reader).
  const auto next_keys = [&](std::int64_t j) {
    __syncthreads();
    if (j + 2 < tiles) load_keys(kt, kv.k, j + 2);
    cp_async_commit();
  };

  // S(0) from Q and K(0); then K(1) may take the K buffer.
  cp_async_wait<1>();
  wgmma::fence_proxy_async();
  __syncthreads();
  wgmma::fence();
  scores<A, D>(tp.s, q_addr, k_addr);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operands(tp.s);
  next_keys(-1);
  tp.softmax(0);
  tp.pack();
  for (std::int64_t j = 0; j + 1 < tiles; ++j) {
    __syncthreads();  // every warp is past step j - 1: V(j - 1)'s buffer is free
    if (j > 0) load_keys(v_buf(j + 1), kv.v, j + 1);
    cp_async_commit();
    cp_async_wait<1>();  // K(j + 1) and V(j), each thread's own
    wgmma::fence_proxy_async();
    __syncthreads();  // ... and every thread's, visible to wgmma
    overlapped_step<A, D>(
        tp.s, st.o, q_addr, k_addr, j, add_pv,
        [&](std::int64_t t) {
          next_keys(j);
          tp.softmax(t);
        },
        rescale_o, pack);
  }
  cp_async_wait<0>();  // V(tiles - 1) (the groups after it are empty)
  wgmma::fence_proxy_async();
  __syncthreads();
  add_pv(tiles - 1);
  wgmma::wait<0>();
  wgmma::fence_operands(st.o);
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
  const float scale_log2 = scale * 1.4426950408889634f;
  if constexpr (Policy::causal) {
    constexpr std::size_t bytes = causal_layout<D>::bytes;
    allow_dynamic_shared(reinterpret_cast<const void*>(causal_attention_kernel<D, Policy>), bytes);
    itera::kernels::launch(causal_attention_kernel<D, Policy>, grid, threads, bytes, stream, policy, scale_log2);
  } else {
    constexpr std::size_t bytes = layout<D>::bytes;
    allow_dynamic_shared(reinterpret_cast<const void*>(attention_kernel<D, Policy>), bytes);
    itera::kernels::launch(attention_kernel<D, Policy>, grid, threads, bytes, stream, policy, scale_log2);
  }
}

}  // namespace sm90

// The attention of one launch over `grid` (the policy reads blockIdx) on kernel k: the wgmma
// kernel where k asks for it (attention_kernel_for(D) gives it only where it runs: head_dim 64 or
// 128 on sm_90a), the mma.sync kernel otherwise. `scale` multiplies the scores (natural base).
template <int D, class Policy>
void launch_attention(const Policy& policy, dim3 grid, float scale, cudaStream_t stream, kernels::attention_kernel k) {
  if (k == attention_kernel::wgmma) {
    // The kernel traps where it does not run: a caller that asks for it there is wrong.
    if (!(D == 64 || D == 128) || !wgmma_available())
      throw std::logic_error("flash attention: the wgmma kernel asked for at head_dim " + std::to_string(D) +
                             " on a device or build without it (attention_kernel_for says which kernel runs)");
    if constexpr (D == 64 || D == 128) return sm90::launch<D>(policy, grid, scale, stream);
  }
  launch_mma_sync_attention<D>(policy, grid, scale, stream);
}
template <int D, class Policy>
void launch_attention(const Policy& policy, dim3 grid, float scale, cudaStream_t stream) {
  launch_attention<D>(policy, grid, scale, stream, attention_kernel_for(D));
}

// Query tiles of a sequence of `rows` rows under a non-causal policy on kernel k: one per 64
// rows, except that the wgmma kernel's block of the last full tile takes a short last one with it
// (sm90::short_tail); the policy then gives that block all the rows left, 64 + r. Launch with the
// same k.
template <int D>
std::int64_t query_tiles(std::int64_t rows, kernels::attention_kernel k) {
  const bool folds = (D == 64 || D == 128) && k == attention_kernel::wgmma;
  return (rows + tile_q - 1) / tile_q - (folds && sm90::short_tail(rows, sm90::tail_rows_max<D>) > 0 ? 1 : 0);
}

}  // namespace itera::kernels::flash
