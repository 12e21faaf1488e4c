// Two of a layer's products with their next step in the epilogue (llm_kernels.cuh: gate_up_swiglu,
// from 5 rows, qkv_rope_store in a prefill), on Hopper's TMA and wgmma:
//   gate/up + SwiGLU   each tile's 128 (or 112) act columns formed from the gate and up sums of the
//                      same indices: the [rows][2 inter] product never leaves the SM, where cuBLASLt
//                      wrote it and a SwiGLU pass read it back (H200, llama-3.1-8b, 2048 tokens:
//                      1.29 ms a prefill for the pass, docs/perf/2026-12-01-prefill-balance.md);
//   gate/up from the residual (gate_up_swiglu_norm, a decode's at most 64 rows): the same with
//                      the rms norm before it done by the consumers on x's fp32 rows, so that
//                      no norm kernel runs between o_proj and the gate/up;
//   qkv + bias, RoPE and the cache store   bias_rope_store (keep_rows) on each staged tile: the
//                      rotated q and k and the (biased) v into the qkv rows, k and v into the cache,
//                      where the product's rows went to DRAM and a RoPE pass read them back (0.64 ms).
//
// The structure is vit_gemm.cu's (its fc1 with the activation fused). Persistent, one block per
// SM, three warpgroups (two where a tile is 64 rows: product_layout). As for 128-row tiles of 256
// columns of w (a 64-row tile: x's box [64][64], one consumer; 112 act columns: boxes of 112 rows,
// m64n224k16, d[j + 14]):
//   producer   one thread asks the TMA, per step of 64 columns of k, for x's [128][64] box and two
//              [128][64] boxes of w (the 128-byte swizzle wgmma reads), one after the other in the
//              stage so that wgmma reads them as one [256][64] operand: gate rows n0 .. n0 + 127 and
//              up rows inter + n0 .. (SwiGLU), or rows n0 .. n0 + 255 (qkv);
//   consumers  two warpgroups, 64 rows each, four wgmma m64n256k16 a step, fp32 accumulators; at a
//              tile's end they leave its values in the staging tile (SwiGLU: act, formed in their
//              registers, gate column 8j + t2 in d[j] and up's in d[j + 16], the same thread's;
//              qkv: the sums rounded to A) and go on with the next tile;
//   epilogue   warps 1-3 of the first warpgroup store the staged tile (qkv: with the bias, the
//              rotation and the cache), while the consumers run the next tile's products; a
//              block's last tile, which nothing overlaps, with the consumers' warps too.
// Tiles walk m fastest inside groups of up to 16 row tiles: the blocks running at once share a few
// w tiles and x's rows of the group (16 MB at 4096 inputs), so w comes from DRAM once a group (once
// a prefill of <= 2048 tokens). vit_gemm walks n fastest, its w (8 MB) being the small operand.
//
// Roundings are the unfused path's: the products rounded to A (cuBLASLt's output), then SwiGLU's
// A(silu_times_fast(gate, up)) (swiglu8_kernel) or bias_rope_store's fp32 bias, rotation and
// rounding; the sums' order is this kernel's, not cuBLASLt's. gate_up_swiglu_norm's operand is
// A(weight * x), not rms_norm's A(weight * x * scale): the scale multiplies the fp32 sums.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "itera/cuda/check.hpp"
#include "src/cuda/text.hpp"
#include "src/kernels/common.cuh"
#include "src/kernels/launch.cuh"
#include "src/kernels/llm_formulas.cuh"
#include "src/kernels/llm_kernels.cuh"
#include "src/kernels/mma.cuh"
#include "src/kernels/tma.cuh"
#include "src/kernels/wgmma.cuh"
#include "src/kernels/wgmma_gemm.cuh"

namespace itera::kernels::llm {
namespace {

constexpr int tile_k = wgmma::gemm_tile_k;
constexpr int max_tile_m = 128;
constexpr int group_m = 16;  // row tiles walked together
[[maybe_unused]] constexpr int epilogue_warps = 3;  // warps 1-3 of the producer's warpgroup
[[maybe_unused]] constexpr int epilogue_threads = 32 * epilogue_warps;

// A product whose tiles are TileM rows of x (a consumer warpgroup per 64) by `Cols` staged
// columns, with `Stages` buffers in the ring, each holding x's box and two boxes of `BoxRows` rows
// of w (acc: the accumulators' 8-column groups, wgmma_gemm.cuh). Shared memory: the ring, the
// staging tile (rows padded by 16 bytes: 4 banks apart), each stage's full and empty barriers, then
// the staging tile's (full, empty).
//
// X32 (gate_up_swiglu_norm): no 16-bit box of x; after w's boxes each stage holds x's rows as fp32,
// two [TileM][32] boxes in the 128-byte swizzle, from which the consumers form their operand in
// registers; the norm weight (hidden values of A) follows shared_bytes (launch_product's
// extra_shared).
template <int Stages, int Cols, int BoxRows, int TileM = max_tile_m, bool X32 = false>
struct product_layout {
  static_assert(TileM == 64 || TileM == 128, "one or two consumer warpgroups");
  static constexpr int stages = Stages, cols = Cols, stride = Cols + 8, box_rows = BoxRows, acc = 2 * BoxRows / 8;
  static constexpr int tile_m = TileM, consumers = TileM / 64, threads = 128 * (1 + consumers);
  static constexpr int all_warps = epilogue_warps + 4 * consumers;  // and the consumers', at a block's last tile
  // (These also keep nvcc's warning 177 away where the kernel's sm_90a body, their reader, compiles out.)
  static_assert(threads == 32 * (1 + all_warps), "the producer's warp, the epilogue warps, the consumers' warps");
  static_assert(cols % 8 == 0 && box_rows % 8 == 0, "16-byte chunks of staged rows, 8-row groups of w");
  static constexpr unsigned x_bytes = X32 ? 0 : TileM * tile_k * 2;
  static constexpr unsigned box_bytes = BoxRows * tile_k * 2;
  static constexpr unsigned x32_bytes = X32 ? TileM * tile_k * 4 : 0;
  static constexpr unsigned stage_bytes = x_bytes + 2 * box_bytes + x32_bytes;
  static_assert(stage_bytes % 1024 == 0, "every stage's boxes on the 128-byte swizzle's 1024-byte alignment");
  static constexpr unsigned ring_bytes = Stages * stage_bytes;
  static constexpr unsigned out_bytes = TileM * stride * 2;
  static constexpr unsigned shared_bytes = ring_bytes + out_bytes + 2 * Stages * 8 + 16;
  static_assert(shared_bytes <= 227 * 1024, "the sm_90 limit of dynamic shared memory a block");
};

template <int Threads>
[[maybe_unused]] __device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(Threads) : "memory");
}

// gate/up + SwiGLU: Cols act columns a tile (gate rows n0 .. n0 + Cols - 1 and the up rows of the
// same indices), 128, or 112 where that deals a decode's one row tile over the SMs better; TileM
// rows of x, 64 for at most 64 rows (a decode: one consumer warpgroup, and the ring's x boxes half
// the size, so five stages fit where 128 rows fit four: more of w in flight); gate_up_swiglu
// chooses. Four stages at 128 rows (the staging tile is at most half of qkv's).
//
// Norm (gate_up_swiglu_norm, 64-row tiles): x is the residual itself, fp32, and the rows are
// normalised in the kernel: the consumers form their wgmma operand A(weight * x) in registers from
// each stage's fp32 boxes, summing x's squares as they go, and scale a tile's gate and up sums by
// each row's rms_scale before rounding them. Four stages (a fifth does not fit beside the staging
// tile).
template <class A, int Cols, int TileM = max_tile_m, bool Norm = false>
struct swiglu_epilogue {
  static_assert(Cols == 128 || Cols == 112, "wgmma_gemm.cuh's tiles: 256 or 224 rows of w");
  static_assert(!Norm || TileM == 64, "the normalising kernel takes one row tile of 64");
  static constexpr int stages = Norm ? 4 : TileM == 64 ? 5 : 4;
  using layout = product_layout<stages, Cols, Cols, TileM, Norm>;
  static constexpr int groups = Cols / 8;  // of gate columns: d[0 .. groups - 1], up's after
  static_assert(groups % 2 == 0, "stage() stores pairs of column groups");
  A* act;
  int inter;
  const A* norm_weight = nullptr;  // Norm: the rms norm's weight [hidden]
  float eps = 0.0f;
  int hidden = 0;

  __device__ int second_box(int n0) const { return inter + n0; }
  // The consumer's 64 rows: act of gate column 8j + t2 (+ 1) from d[j] and up's from d[j + groups],
  // gate and up (Norm: times the row's scale, lo for rows lane / 4, hi 8 below) rounded to A first;
  // four 8x8 matrices a stmatrix (columns 8j .. 8j + 15).
  __device__ __forceinline__ void stage(float (&d)[layout::acc][4], unsigned stage_at, float lo = 1.0f,
                                        float hi = 1.0f) const {
    const auto value = [](float gate, float up) {
      return silu_times_fast(to_float(from_float<A>(gate)), to_float(from_float<A>(up)));
    };
    const auto pair = [&](int j, int e) {
      if constexpr (Norm) {
        const float r = e < 2 ? lo : hi;
        return pack2<A>(value(d[j][e] * r, d[j + groups][e] * r), value(d[j][e + 1] * r, d[j + groups][e + 1] * r));
      } else {
        return pack2<A>(value(d[j][e], d[j + groups][e]), value(d[j][e + 1], d[j + groups][e + 1]));
      }
    };
#pragma unroll
    for (int j = 0; j < groups; j += 2) {
      const unsigned m[4] = {pair(j, 0), pair(j, 2), pair(j + 1, 0), pair(j + 1, 2)};
      stmatrix_x4(stage_at + static_cast<unsigned>(j) * 16, m);
    }
  }
  // A row is `groups` chunks of 16 bytes (16 or 14): a warp stores two rows at a time (lane / 16
  // the row, lanes past the row's chunks idle), warp `warp` of `warps` every warps-th pair.
  __device__ __forceinline__ void store(const A* staged, int m0, int n0, int valid, int warp, int warps,
                                        int lane) const {
    const int row_step = 2 * warps;
    const int r0 = 2 * warp + lane / 16, chunk = lane % 16;
    if (chunk >= groups) return;
    const A* from = staged + r0 * layout::stride + 8 * chunk;
    A* to = act + static_cast<std::int64_t>(m0 + r0) * inter + n0 + 8 * chunk;
    const std::int64_t to_step = row_step * static_cast<std::int64_t>(inter);
#pragma unroll 2
    for (int r = r0; r < valid; r += row_step, from += row_step * layout::stride, to += to_step)
      *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(from);
  }
};

// qkv + bias, RoPE and the cache store: 256 columns a tile, all of q, of k or of v (q_dim and
// kv_dim are multiples of 256: qkv_rope_store_supported), 256 / head_dim heads; three stages (a
// fourth does not fit beside the 256-column staging tile; without a staging tile, the consumers
// storing the rounded sums to the rows, four stages measured slower: 6.09-6.11 ms a 2048-token
// pass against 5.74-5.75, docs/perf/2026-12-01-fused-products.md).
template <class A, class C>
struct rope_epilogue {
  using layout = product_layout<3, 256, 128>;
  A* qkv;
  const A* bias;  // or null
  const float* inv_freq;
  const std::int32_t* start;
  attention_shape s;
  C* k_cache;
  C* v_cache;

  __device__ int second_box(int n0) const { return n0 + layout::box_rows; }
  // The sums rounded to A, as cuBLASLt's output.
  __device__ __forceinline__ void stage(float (&d)[layout::acc][4], unsigned stage_at) const {
#pragma unroll
    for (int j = 0; j < 32; j += 2) {
      const unsigned m[4] = {pack2<A>(d[j][0], d[j][1]), pack2<A>(d[j][2], d[j][3]), pack2<A>(d[j + 1][0], d[j + 1][1]),
                             pack2<A>(d[j + 1][2], d[j + 1][3])};
      stmatrix_x4(stage_at + static_cast<unsigned>(j) * 16, m);
    }
  }
  // A warp a row, 32 items a row: in a q or k tile, lane l rotates four pairs (i, i + half) of head
  // l / (head_dim / 8) of the tile, i = 4 (l % (head_dim / 8)), as bias_rope_store_vec_kernel does
  // (the bias added in fp32, the row's angles from the same sincosf, the rotation in fp32, one
  // rounding); in a v tile lane l copies 8 values. The rotated q and k and the biased v go to the
  // qkv rows (the prefill's attention reads them there), k and v into the cache at the row's
  // position. A row past the cache (no prefill has one: the engine refuses a prompt longer than
  // the context) is not stored in it; its k is rotated in the row all the same. Warp `warp` of
  // `warps` takes every warps-th row.
  __device__ __forceinline__ void store(const A* staged, int m0, int n0, int valid, int warp, int warps,
                                        int lane) const {
    const int hd = static_cast<int>(s.head_dim), half = hd / 2, per_head = hd / 8;
    const int q_dim = static_cast<int>(s.heads) * hd, kv_dim = static_cast<int>(s.kv_heads) * hd;
    const std::int64_t width = q_dim + 2 * kv_dim;
    const bool is_v = n0 >= q_dim + kv_dim, is_k = !is_v && n0 >= q_dim;
    const int head = lane / per_head, i = 4 * (lane % per_head);
    const int col = is_v ? n0 + 8 * lane : n0 + head * hd + i;  // the lane's first column
    float freq[4], b1[4] = {}, b2[4] = {};
    if (!is_v) {
#pragma unroll
      for (int j = 0; j < 4; ++j) freq[j] = inv_freq[i + j];
      if (bias) load4(bias + col, b1), load4(bias + col + half, b2);
    } else if (bias) {
      load4(bias + col, b1), load4(bias + col + 4, b2);
    }
    const int kvh = is_v ? (col - q_dim - kv_dim) / hd : (col - q_dim) / hd, d = is_v ? (col - q_dim - kv_dim) % hd : i;
    for (int r = warp; r < valid; r += warps) {
      const std::int64_t t = m0 + r;
      std::int64_t seq = 0;
      const std::int64_t pos = row_position(start, t, s.rows_per_seq, &seq);
      const bool in_cache = pos < s.max_context;
      A* row = qkv + t * width;
      const A* from = staged + r * layout::stride + (col - n0);
      float x1[4], x2[4];
      load4(from, x1);
      load4(from + (is_v ? 4 : half), x2);
#pragma unroll
      for (int j = 0; j < 4; ++j) x1[j] += b1[j], x2[j] += b2[j];
      if (is_v) {
        store4(row + col, x1), store4(row + col + 4, x2);
        if (in_cache) {
          C* dst = v_cache + ((seq * s.kv_heads + kvh) * s.max_context + pos) * hd + d;
          store4(dst, x1), store4(dst + 4, x2);
        }
        continue;
      }
      float y1[4], y2[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 y = rope_rotate(x1[j], x2[j], rope_cos_sin(pos, freq[j]));
        y1[j] = y.x, y2[j] = y.y;
      }
      store4(row + col, y1), store4(row + col + half, y2);
      if (is_k && in_cache) {
        C* dst = k_cache + ((seq * s.kv_heads + kvh) * s.max_context + pos) * hd + d;
        store4(dst, y1), store4(dst + half, y2);
      }
    }
  }
};

// Tile t's first row and first output column: groups of group_m row tiles (fewer in the last), m
// fastest inside a group.
[[maybe_unused]] __device__ __forceinline__ void tile_origin(int t, int m_tiles, int n_tiles, int tile_m, int cols,
                                                             int& m0, int& n0) {
  const int per_group = group_m * n_tiles;
  const int first = t / per_group * group_m, within = t % per_group;
  const int rows_here = min(group_m, m_tiles - first);
  m0 = (first + within % rows_here) * tile_m;
  n0 = within / rows_here * cols;
}

// One tile's products for gate_up_swiglu_norm's single consumer warpgroup (wgmma_gemm.cuh's
// multiply_tile with A from registers): each step, the thread's part of the A fragments of its
// warp's 16 rows (rows lane / 4 and 8 below, columns 2 (lane % 4) (+ 1) and 8 on, of each 16) read
// from the stage's fp32 boxes and formed as A(weight * x), their squares summed. Then each row's
// sum of squares over the four lanes holding its columns and its rms_scale (as rms_norm_kernel's,
// the sum's order aside) in lo (row lane / 4) and hi (8 below).
template <class A, class L, class E>
__device__ __forceinline__ void normalised_tile(const E& e, float (&d)[L::acc][4], unsigned char* smem, unsigned ring,
                                                unsigned full, unsigned empty, int& g, int ksteps, bool leader,
                                                int warp, int lane, float& lo, float& hi) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(L::tile_m == 64 && L::consumers == 1 && L::x_bytes == 0, "one warpgroup of 64 rows, fp32 boxes");
  constexpr unsigned half_box = L::x32_bytes / 2;  // [64][32] fp32, 128-byte rows
  const int r0 = 16 * warp + lane / 4, t4 = lane % 4;
  // The norm weight as the kernel staged it in shared memory, in pairs of A: the thread's columns
  // of a step are pairs (16 kk + 2 t4, + 1) and 8 on, of each kk.
  const auto* weight = reinterpret_cast<const unsigned*>(smem + L::shared_bytes) + t4;
  float ss_lo = 0.0f, ss_hi = 0.0f;
  // A step's x and weight values, as loaded: for each kk, x's pairs at (r0, c0), (r0 + 8, c0),
  // (r0, c0 + 8), (r0 + 8, c0 + 8), c0 = 16 kk + 2 t4, and the weight's pairs at c0 and c0 + 8.
  struct step_values {
    float2 v[4][4];
    unsigned w[8];
  };
  // Step j's values from its stage (base): x's pair at (row, column c) from box c / 32, the 16-byte
  // chunk swizzled by the row (the 8 rows of a lane group on 8 different chunks).
  const auto load = [&](step_values& sv, unsigned base, int j) {
    const unsigned char* x32 = smem + (base - ring) + 2 * L::box_bytes;
    const auto pair_at = [&](int row, int c) {
      const int cb = c % 32;
      return *reinterpret_cast<const float2*>(x32 + (c / 32) * half_box + row * 128 +
                                              (((cb / 4) ^ (row & 7)) << 4) + (cb % 4) * 4);
    };
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int c0 = 16 * kk + 2 * t4;
      sv.v[kk][0] = pair_at(r0, c0), sv.v[kk][1] = pair_at(r0 + 8, c0);
      sv.v[kk][2] = pair_at(r0, c0 + 8), sv.v[kk][3] = pair_at(r0 + 8, c0 + 8);
      sv.w[2 * kk] = weight[(j * tile_k + 16 * kk) / 2];
      sv.w[2 * kk + 1] = weight[(j * tile_k + 16 * kk + 8) / 2];
    }
  };
  // The fragments A(weight * x) and the squares' sums.
  const auto form = [&](unsigned (&a)[4][4], const step_values& sv) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const float2* v = sv.v[kk];
      float w0[2], w1[2];
      unpack2<A>(sv.w[2 * kk], w0);
      unpack2<A>(sv.w[2 * kk + 1], w1);
      ss_lo += v[0].x * v[0].x + v[0].y * v[0].y + v[2].x * v[2].x + v[2].y * v[2].y;
      ss_hi += v[1].x * v[1].x + v[1].y * v[1].y + v[3].x * v[3].x + v[3].y * v[3].y;
      a[kk][0] = pack2<A>(w0[0] * v[0].x, w0[1] * v[0].y);
      a[kk][1] = pack2<A>(w0[0] * v[1].x, w0[1] * v[1].y);
      a[kk][2] = pack2<A>(w1[0] * v[2].x, w1[1] * v[2].y);
      a[kk][3] = pack2<A>(w1[0] * v[3].x, w1[1] * v[3].y);
    }
  };
  const auto wait_stage = [&](int at) {  // stage g = at landed; its address
    const int s = at % L::stages;
    tma::barrier_wait(full + 8 * s, static_cast<unsigned>((at / L::stages) & 1));
    return ring + static_cast<unsigned>(s) * L::stage_bytes;
  };
  const auto products = [&](const unsigned (&a)[4][4], unsigned base, int j) {
    const std::uint64_t b = wgmma::descriptor(base, 16, 1024);
    wgmma::fence();  // a written (and d, by the last step's products)
#pragma unroll
    for (int kk = 0; kk < tile_k / 16; ++kk) {
      if constexpr (L::acc == 32)
        wgmma::mma_64x256_rs<A>(d, a[kk], wgmma::advance(b, static_cast<unsigned>(kk) * 32), j > 0 || kk > 0);
      else
        wgmma::mma_64x224_rs<A>(d, a[kk], wgmma::advance(b, static_cast<unsigned>(kk) * 32), j > 0 || kk > 0);
    }
    wgmma::commit();
  };
  // The next step's stage waited for and its values loaded while this step's products run, into
  // registers no product reads (a, their operand, is formed after they are done: writing it
  // under them, ptxas serialised the products, C7513, and the step was slower).
  unsigned a[4][4];
  step_values sv;
  unsigned base = wait_stage(g);
  load(sv, base, 0);
  for (int j = 0; j < ksteps; ++j, ++g) {
    form(a, sv);
    products(a, base, j);
    if (j + 1 < ksteps) {
      base = wait_stage(g + 1);
      load(sv, base, j + 1);
    }
    wgmma::wait<0>();
    if (leader) tma::barrier_arrive(empty + 8 * (g % L::stages));  // step j's stage is free
  }
  wgmma::fence_operands(d);
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    ss_lo += __shfl_xor_sync(0xffffffffu, ss_lo, off);
    ss_hi += __shfl_xor_sync(0xffffffffu, ss_hi, off);
  }
  lo = rms_scale(ss_lo, e.hidden, e.eps);
  hi = rms_scale(ss_hi, e.hidden, e.eps);
#else
  (void)e, (void)d, (void)smem, (void)ring, (void)full, (void)empty, (void)g, (void)ksteps, (void)leader, (void)warp;
  (void)lane;
  lo = hi = 0.0f;
#endif
}

template <class A, class E>
__global__ void __launch_bounds__(E::layout::threads, 1)
    fused_product_kernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map,
                         const E epilogue, int rows, int n_tiles, int ksteps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = typename E::layout;
  constexpr int stages = L::stages;
  constexpr unsigned stage_bytes = L::stage_bytes, x_bytes = L::x_bytes;
  constexpr int tile_m = L::tile_m;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int m_tiles = (rows + tile_m - 1) / tile_m, tiles = m_tiles * n_tiles;
  const unsigned ring = smem_addr(smem);
  const unsigned full = ring + L::ring_bytes + L::out_bytes, empty = full + stages * 8;  // barrier s at + 8 s
  const unsigned staged_full = empty + stages * 8, staged_empty = staged_full + 8;
  auto* staged = reinterpret_cast<A*>(smem + L::ring_bytes);
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      tma::barrier_init(full + 8 * s, 1);   // the producer's arrival with the byte count
      tma::barrier_init(empty + 8 * s, L::consumers);  // one arrival per consumer warpgroup
    }
    tma::barrier_init(staged_full, 1);
    tma::barrier_init(staged_empty, epilogue_threads);
    tma::barrier_init_fence();
  }
  __syncthreads();
  grid_dependents_launch();
  grid_dependency_wait();

  if (wg == 0) {
    if (tid == 0) {  // the producer: x's box and w's two boxes a step, over all of the block's tiles
      int g = 0;
      for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x)) {
        int m0, n0;
        tile_origin(t, m_tiles, n_tiles, tile_m, L::cols, m0, n0);
        for (int j = 0; j < ksteps; ++j, ++g) {
          unsigned bar;
          const unsigned base = wgmma::fill_stage<stages, stage_bytes>(ring, full, empty, g, bar);
          if constexpr (L::x32_bytes > 0) {  // the residual's two fp32 boxes after w's
            tma::load_2d(base + 2 * L::box_bytes, x_map, j * tile_k, m0, bar);
            tma::load_2d(base + 2 * L::box_bytes + L::x32_bytes / 2, x_map, j * tile_k + tile_k / 2, m0, bar);
          } else {
            tma::load_2d(base, x_map, j * tile_k, m0, bar);
          }
          tma::load_2d(base + x_bytes, w_map, j * tile_k, n0, bar);
          tma::load_2d(base + x_bytes + L::box_bytes, w_map, j * tile_k, epilogue.second_box(n0), bar);
        }
      }
    } else if (tid >= 32) {  // the epilogue warps, each staged tile while the consumers run the next
      int i = 0;
      for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x), ++i) {
        int m0, n0;
        tile_origin(t, m_tiles, n_tiles, tile_m, L::cols, m0, n0);
        tma::barrier_wait(staged_full, static_cast<unsigned>(i & 1));
        // The block's last tile with the consumers' warps too (they have nothing left to multiply).
        const bool last = t + static_cast<int>(gridDim.x) >= tiles;
        epilogue.store(staged, m0, n0, min(tile_m, rows - m0), warp - 1, last ? L::all_warps : epilogue_warps, lane);
        tma::barrier_arrive(staged_empty);
      }
    }
    return;
  }
  const int c = wg - 1;  // rows 64 c .. 64 c + 63 of each tile
  const bool leader = tid % 128 == 0;
  // D fragment (wgmma.cuh): rows 16 warp + lane / 4 (+ 8) of the consumer's 64, columns 8j + 2
  // (lane % 4) (+ 1); stmatrix_x4 of columns 8j .. 8j + 15: lane l gives row l % 16 of the warp's,
  // columns 8 (l / 16) on.
  const unsigned stage_at = smem_addr(staged + (c * 64 + warp * 16 + lane % 16) * L::stride + 8 * (lane / 16));
  int g = 0, i = 0, last_t = -1;
  float d[L::acc][4] = {};  // each tile's first product overwrites them (accumulate false)
  if constexpr (L::x32_bytes > 0) {
    // The norm weight into shared memory after the layout's bytes, 16 bytes a thread at a time,
    // read there every step (loaded from global memory a step ahead, behind the stream of w, it
    // held the consumers: 68.4 us a batch-64 launch against 63.1, Nsight Compute on the H200,
    // docs/perf/2026-12-02-gate-up-norm.md).
    const auto* from = reinterpret_cast<const uint4*>(epilogue.norm_weight);
    auto* to = reinterpret_cast<uint4*>(smem + L::shared_bytes);
    for (int q = tid - 128; q < epilogue.hidden / 8; q += 128) to[q] = __ldg(from + q);
    consumers_sync<128>();
  }
  for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x), ++i) {
    if constexpr (L::x32_bytes > 0) {
      float lo, hi;
      normalised_tile<A, L>(epilogue, d, smem, ring, full, empty, g, ksteps, leader, warp, lane, lo, hi);
      if (i > 0) tma::barrier_wait(staged_empty, static_cast<unsigned>((i - 1) & 1));  // the last tile is out
      epilogue.stage(d, stage_at, lo, hi);
    } else {
      wgmma::multiply_tile<A, stages, stage_bytes, x_bytes>(d, ring, full, empty, g, ksteps, c, leader);
      if (i > 0) tma::barrier_wait(staged_empty, static_cast<unsigned>((i - 1) & 1));  // the last tile is out
      epilogue.stage(d, stage_at);
    }
    consumers_sync<128 * L::consumers>();  // the tile is staged
    if (tid == 128) tma::barrier_arrive(staged_full);
    last_t = t;
  }
  // The block's last tile: its stores shared with the epilogue warps. After the loop, where the
  // accumulators are no longer live (inside it the qkv store's registers spilled, 140 bytes).
  if (last_t >= 0) {
    int m0, n0;
    tile_origin(last_t, m_tiles, n_tiles, tile_m, L::cols, m0, n0);
    epilogue.store(staged, m0, n0, min(tile_m, rows - m0), epilogue_warps + 4 * c + warp, L::all_warps, lane);
  }
#else
  (void)x_map, (void)w_map, (void)epilogue, (void)rows, (void)n_tiles, (void)ksteps;
  (void)E::layout::stages;  // read by the sm_90a body only (nvcc's "declared but never referenced")
  __trap();  // launched only where the supported() checks pass
#endif
}

// The residual x [rows][k] (fp32) read as [64][32] boxes (128-byte rows) in the 128-byte swizzle
// (gate_up_swiglu_norm's stages), rows past the last as zeros. Throws std::runtime_error naming
// `who`.
CUtensorMap residual_map(const float* x, std::int64_t rows, std::int64_t k, const char* who) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 4};
  const cuuint32_t box[2] = {tile_k / 2, 64};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = tma::encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(x), dims,
                                         strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                         CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error(itera::cuda::cat(who, ": cuTensorMapEncodeTiled failed (error ", static_cast<int>(r),
                                              ") for a [", rows, "][", k, "] fp32 matrix"));
  return map;
}

// x [rows][k] times w [w_rows][k] into n_tiles tiles of columns, the epilogue e on each; x's map
// made by the caller (16-bit: gemm_operand_map; the residual: residual_map).
template <class A, class E>
void launch_product(const CUtensorMap& x_map, std::int64_t rows, const A* w, std::int64_t w_rows, std::int64_t k,
                    int n_tiles, const E& e, cudaStream_t stream, int max_blocks, const char* who,
                    unsigned extra_shared = 0) {
  constexpr auto kernel = fused_product_kernel<A, E>;
  const unsigned shared_bytes = E::layout::shared_bytes + extra_shared;
  constexpr int tile_m = E::layout::tile_m;
  allow_dynamic_shared(reinterpret_cast<const void*>(kernel), shared_bytes);
  const CUtensorMap w_map = wgmma::gemm_operand_map(w, w_rows, k, E::layout::box_rows, who);
  const std::int64_t tiles = (rows + tile_m - 1) / tile_m * n_tiles;
  const int blocks = max_blocks > 0 ? std::min(max_blocks, device_multiprocessors()) : device_multiprocessors();
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(tiles, blocks));
  launch(kernel, grid, E::layout::threads, shared_bytes, stream, x_map, w_map, e, static_cast<int>(rows), n_tiles,
         static_cast<int>(k / tile_k));
  ITERA_CUDA_CHECK_LAUNCH();
}
template <class A, class E>
void launch_product(const A* x, std::int64_t rows, const A* w, std::int64_t w_rows, std::int64_t k, int n_tiles,
                    const E& e, cudaStream_t stream, int max_blocks, const char* who) {
  launch_product(wgmma::gemm_operand_map(x, rows, k, E::layout::tile_m, who), rows, w, w_rows, k, n_tiles, e, stream,
                 max_blocks, who);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// What both products take: an sm_90a device, rows, k and the tile count (n_tiles column tiles a
// row tile) within the kernel's 32-bit indices, k a multiple of 64.
bool product_supported(std::int64_t rows, std::int64_t k, std::int64_t n_tiles) {
  return rows >= 1 && rows < (std::int64_t{1} << 31) - max_tile_m && k >= tile_k && k % tile_k == 0 &&
         k < (1 << 30) && (rows + 63) / 64 * n_tiles < (std::int64_t{1} << 31) && wgmma_available();
}

}  // namespace

bool gate_up_swiglu_supported(std::int64_t rows, std::int64_t intermediate, std::int64_t hidden) {
  constexpr std::int64_t cols = swiglu_epilogue<bf16, 128>::layout::cols;
  return product_supported(rows, hidden, intermediate / cols) && intermediate >= cols && intermediate % cols == 0 &&
         intermediate < (1 << 29) && rows * intermediate < (std::int64_t{1} << 62);
}

// The act columns of a tile: 128, or 112 where the rows are one row tile (a decode) and 112-column
// tiles, dividing the intermediate size, leave fewer of the grid's SMs idle. llama-3.1-8b's 14336 on
// the H200's 132 SMs: 112 tiles of 128 (20 SMs idle), 128 tiles of 112 (4). A prefill's many row
// tiles fill the SMs either way.
int gate_up_swiglu_cols(std::int64_t rows, std::int64_t intermediate, int max_blocks) {
  if (rows > max_tile_m || intermediate % 112 != 0) return 128;
  const std::int64_t sms = max_blocks > 0 ? std::min(max_blocks, device_multiprocessors()) : device_multiprocessors();
  const auto busy = [&](std::int64_t tiles) {  // the share of the SMs' tile slots holding a tile
    return static_cast<double>(tiles) / static_cast<double>((tiles + sms - 1) / sms * sms);
  };
  return busy(intermediate / 112) > busy(intermediate / 128) ? 112 : 128;
}

template <class A>
void gate_up_swiglu(const A* x, std::int64_t rows, const A* w_gate_up, std::int64_t intermediate, std::int64_t hidden,
                    A* act, cudaStream_t stream, int max_blocks, int cols) {
  constexpr const char* who = "llm gate_up_swiglu";
  if (!gate_up_swiglu_supported(rows, intermediate, hidden))
    throw std::invalid_argument(itera::cuda::cat(who, ": ", rows, " rows, intermediate ", intermediate, ", hidden ",
                                                 hidden, ": needs an sm_90a device, the intermediate size a multiple ",
                                                 "of 128 and the hidden size a multiple of 64"));
  if (!aligned16(x) || !aligned16(w_gate_up) || !aligned16(act))
    throw std::invalid_argument(itera::cuda::cat(who, ": x, w and act must be 16-byte aligned"));
  if (cols == 0) cols = gate_up_swiglu_cols(rows, intermediate, max_blocks);
  if (cols != 128 && (cols != 112 || intermediate % 112 != 0))
    throw std::invalid_argument(itera::cuda::cat(who, ": tiles of ", cols, " columns: choose 128, or 112 where it ",
                                                 "divides the intermediate size (", intermediate, ")"));
  const auto run = [&]<int Cols>() {
    const auto with = [&]<int TileM>() {
      using E = swiglu_epilogue<A, Cols, TileM>;
      launch_product(x, rows, w_gate_up, 2 * intermediate, hidden, static_cast<int>(intermediate / Cols),
                     E{act, static_cast<int>(intermediate)}, stream, max_blocks, who);
    };
    if (rows <= 64) with.template operator()<64>();
    else with.template operator()<128>();
  };
  if (cols == 112) run.template operator()<112>();
  else run.template operator()<128>();
}

bool gate_up_swiglu_norm_supported(std::int64_t rows, std::int64_t intermediate, std::int64_t hidden) {
  // The norm weight beside the larger (128-column) layout in the 227 KiB a block may have.
  constexpr std::int64_t layout_bytes = swiglu_epilogue<bf16, 128, 64, true>::layout::shared_bytes;
  return rows <= 64 && gate_up_swiglu_supported(rows, intermediate, hidden) && layout_bytes + 2 * hidden <= 227 * 1024;
}

template <class A>
void gate_up_swiglu_norm(const float* x, std::int64_t rows, const A* norm_weight, float eps, const A* w_gate_up,
                         std::int64_t intermediate, std::int64_t hidden, A* act, cudaStream_t stream, int max_blocks,
                         int cols) {
  constexpr const char* who = "llm gate_up_swiglu_norm";
  if (!gate_up_swiglu_norm_supported(rows, intermediate, hidden))
    throw std::invalid_argument(itera::cuda::cat(who, ": ", rows, " rows, intermediate ", intermediate, ", hidden ",
                                                 hidden, ": needs an sm_90a device, at most 64 rows, the intermediate ",
                                                 "size a multiple of 128 and the hidden size a multiple of 64"));
  if (!aligned16(x) || !aligned16(norm_weight) || !aligned16(w_gate_up) || !aligned16(act))
    throw std::invalid_argument(itera::cuda::cat(who, ": x, the norm weight, w and act must be 16-byte aligned"));
  if (cols == 0) cols = gate_up_swiglu_cols(rows, intermediate, max_blocks);
  if (cols != 128 && (cols != 112 || intermediate % 112 != 0))
    throw std::invalid_argument(itera::cuda::cat(who, ": tiles of ", cols, " columns: choose 128, or 112 where it ",
                                                 "divides the intermediate size (", intermediate, ")"));
  const CUtensorMap x_map = residual_map(x, rows, hidden, who);
  const auto run = [&]<int Cols>() {
    using E = swiglu_epilogue<A, Cols, 64, true>;
    launch_product(x_map, rows, w_gate_up, 2 * intermediate, hidden, static_cast<int>(intermediate / Cols),
                   E{act, static_cast<int>(intermediate), norm_weight, eps, static_cast<int>(hidden)}, stream,
                   max_blocks, who, static_cast<unsigned>(hidden) * 2);
  };
  if (cols == 112) run.template operator()<112>();
  else run.template operator()<128>();
}

bool qkv_rope_store_supported(std::int64_t rows, std::int64_t hidden, const attention_shape& s) {
  constexpr std::int64_t cols = rope_epilogue<bf16, bf16>::layout::cols;
  const std::int64_t q_dim = s.heads * s.head_dim, kv_dim = s.kv_heads * s.head_dim;
  return product_supported(rows, hidden, (q_dim + 2 * kv_dim) / cols) && s.head_dim >= 8 && cols % s.head_dim == 0 &&
         q_dim % cols == 0 &&
         kv_dim >= cols && kv_dim % cols == 0 && q_dim + 2 * kv_dim < (1 << 30) && s.rows_per_seq >= 1 &&
         rows * (q_dim + 2 * kv_dim) < (std::int64_t{1} << 62);
}

template <class A>
void qkv_rope_store(const A* x, std::int64_t rows, std::int64_t hidden, const A* w_qkv, const A* bias,
                    const float* inv_freq, const std::int32_t* start, const attention_shape& s, void* k_cache,
                    void* v_cache, A* qkv, cudaStream_t stream, int max_blocks) {
  constexpr const char* who = "llm qkv_rope_store";
  check_cache_type<A>(s, who);
  if (!qkv_rope_store_supported(rows, hidden, s))
    throw std::invalid_argument(itera::cuda::cat(
        who, ": ", rows, " rows, hidden ", hidden, ", head_dim ", s.head_dim, ", ", s.heads, " heads, ", s.kv_heads,
        " kv heads: needs an sm_90a device, the hidden size a multiple of 64, head_dim dividing 256 and the q and kv ",
        "widths multiples of 256"));
  if (!aligned16(x) || !aligned16(w_qkv) || !aligned16(qkv) || !aligned16(k_cache) || !aligned16(v_cache) ||
      !aligned16(inv_freq) || (bias && !aligned16(bias)))
    throw std::invalid_argument(itera::cuda::cat(who, ": every buffer must be 16-byte aligned"));
  const std::int64_t width = (s.heads + 2 * s.kv_heads) * s.head_dim;
  const auto run = [&]<class C>() {
    using E = rope_epilogue<A, C>;
    const E e{qkv, bias, inv_freq, start, s, static_cast<C*>(k_cache), static_cast<C*>(v_cache)};
    launch_product(x, rows, w_qkv, width, hidden, static_cast<int>(width / E::layout::cols), e, stream, max_blocks,
                   who);
  };
  if (s.kv == kv_storage::fp8_e4m3) run.template operator()<fp8_code>();
  else run.template operator()<A>();
}

#define ITERA_FUSED_PRODUCTS(A)                                                                                      \
  template void gate_up_swiglu<A>(const A*, std::int64_t, const A*, std::int64_t, std::int64_t, A*, cudaStream_t, int, \
                                  int);                                                                              \
  template void gate_up_swiglu_norm<A>(const float*, std::int64_t, const A*, float, const A*, std::int64_t,            \
                                       std::int64_t, A*, cudaStream_t, int, int);                                    \
  template void qkv_rope_store<A>(const A*, std::int64_t, std::int64_t, const A*, const A*, const float*,              \
                                  const std::int32_t*, const attention_shape&, void*, void*, A*, cudaStream_t, int);
ITERA_FUSED_PRODUCTS(bf16)
ITERA_FUSED_PRODUCTS(fp16)
#undef ITERA_FUSED_PRODUCTS

}  // namespace itera::kernels::llm
