// Two of a layer's products with their next step in the epilogue (llm_kernels.cuh: gate_up_swiglu,
// from 5 rows, qkv_rope_store in a prefill), on Hopper's TMA and wgmma:
//   gate/up + SwiGLU   each tile's 128 (or 112) act columns formed from the gate and up sums of the
//                      same indices: the [rows][2 inter] product never leaves the SM, where cuBLASLt
//                      wrote it and a SwiGLU pass read it back (H200, llama-3.1-8b, 2048 tokens:
//                      1.29 ms a prefill for the pass, docs/perf/2026-12-01-prefill-balance.md);
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
// rounding; the sums' order is this kernel's, not cuBLASLt's.
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
template <int Stages, int Cols, int BoxRows, int TileM = max_tile_m>
struct product_layout {
  static_assert(TileM == 64 || TileM == 128, "one or two consumer warpgroups");
  static constexpr int stages = Stages, cols = Cols, stride = Cols + 8, box_rows = BoxRows, acc = 2 * BoxRows / 8;
  static constexpr int tile_m = TileM, consumers = TileM / 64, threads = 128 * (1 + consumers);
  static constexpr int all_warps = epilogue_warps + 4 * consumers;  // and the consumers', at a block's last tile
  // (These also keep nvcc's warning 177 away where the kernel's sm_90a body, their reader, compiles out.)
  static_assert(threads == 32 * (1 + all_warps), "the producer's warp, the epilogue warps, the consumers' warps");
  static_assert(cols % 8 == 0 && box_rows % 8 == 0, "16-byte chunks of staged rows, 8-row groups of w");
  static constexpr unsigned x_bytes = TileM * tile_k * 2;
  static constexpr unsigned box_bytes = BoxRows * tile_k * 2;
  static constexpr unsigned stage_bytes = x_bytes + 2 * box_bytes;
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
template <class A, int Cols, int TileM = max_tile_m>
struct swiglu_epilogue {
  static_assert(Cols == 128 || Cols == 112, "wgmma_gemm.cuh's tiles: 256 or 224 rows of w");
  using layout = product_layout<TileM == 64 ? 5 : 4, Cols, Cols, TileM>;
  static constexpr int groups = Cols / 8;  // of gate columns: d[0 .. groups - 1], up's after
  static_assert(groups % 2 == 0, "stage() stores pairs of column groups");
  A* act;
  int inter;

  __device__ int second_box(int n0) const { return inter + n0; }
  // The consumer's 64 rows: act of gate column 8j + t2 (+ 1) from d[j] and up's from d[j + groups],
  // gate and up rounded to A first; four 8x8 matrices a stmatrix (columns 8j .. 8j + 15).
  __device__ __forceinline__ void stage(float (&d)[layout::acc][4], unsigned stage_at) const {
    const auto value = [](float gate, float up) {
      return silu_times_fast(to_float(from_float<A>(gate)), to_float(from_float<A>(up)));
    };
    const auto pair = [&](int j, int e) {
      return pack2<A>(value(d[j][e], d[j + groups][e]), value(d[j][e + 1], d[j + groups][e + 1]));
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
          tma::load_2d(base, x_map, j * tile_k, m0, bar);
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
  for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x), ++i) {
    wgmma::multiply_tile<A, stages, stage_bytes, x_bytes>(d, ring, full, empty, g, ksteps, c, leader);

    if (i > 0) tma::barrier_wait(staged_empty, static_cast<unsigned>((i - 1) & 1));  // the last tile is out
    epilogue.stage(d, stage_at);
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

// x [rows][k] times w [w_rows][k] into n_tiles tiles of columns, the epilogue e on each.
template <class A, class E>
void launch_product(const A* x, std::int64_t rows, const A* w, std::int64_t w_rows, std::int64_t k, int n_tiles,
                    const E& e, cudaStream_t stream, int max_blocks, const char* who) {
  constexpr auto kernel = fused_product_kernel<A, E>;
  constexpr unsigned shared_bytes = E::layout::shared_bytes;
  constexpr int tile_m = E::layout::tile_m;
  allow_dynamic_shared(reinterpret_cast<const void*>(kernel), shared_bytes);
  const CUtensorMap x_map = wgmma::gemm_operand_map(x, rows, k, tile_m, who),
                    w_map = wgmma::gemm_operand_map(w, w_rows, k, E::layout::box_rows, who);
  const std::int64_t tiles = (rows + tile_m - 1) / tile_m * n_tiles;
  const int blocks = max_blocks > 0 ? std::min(max_blocks, device_multiprocessors()) : device_multiprocessors();
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(tiles, blocks));
  launch(kernel, grid, E::layout::threads, shared_bytes, stream, x_map, w_map, e, static_cast<int>(rows), n_tiles,
         static_cast<int>(k / tile_k));
  ITERA_CUDA_CHECK_LAUNCH();
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
  template void qkv_rope_store<A>(const A*, std::int64_t, std::int64_t, const A*, const A*, const float*,              \
                                  const std::int32_t*, const attention_shape&, void*, void*, A*, cudaStream_t, int);
ITERA_FUSED_PRODUCTS(bf16)
ITERA_FUSED_PRODUCTS(fp16)
#undef ITERA_FUSED_PRODUCTS

}  // namespace itera::kernels::llm
