// The prefill's gate/up product with SwiGLU in its epilogue (llm_kernels.cuh: gate_up_swiglu), on
// Hopper's TMA and wgmma: the product's [rows][2 inter] output (gate, then up) never leaves the
// SM; each tile's 128 act columns are formed from the gate and up sums of the same 128 indices
// and stored, where cuBLASLt wrote gate_up and a SwiGLU pass read it back (H200, llama-3.1-8b,
// 2048 tokens: 1.29 ms a prefill for the pass, docs/perf/2026-12-01-prefill-balance.md).
//
// The structure is vit_gemm.cu's (its fc1 with the activation fused), with what this product asks:
//   tiles    [128 rows][128 act columns], each multiplying x's [128][k] by 256 rows of w: gate rows
//            n0 .. n0 + 127 and up rows inter + n0 .. (two TMA boxes a step, one after the other in
//            shared memory, so wgmma reads them as one [256][64] operand); a consumer warpgroup's
//            accumulators d[j] hold gate column 8j + t2 for j < 16 and up column 8(j - 16) + t2
//            above, the same thread's, so SwiGLU needs no exchange.
//   order    tiles walk m fastest inside groups of up to 16 row tiles: the blocks running at once
//            share a few w tiles (2 MB each) and x's rows of the group (16 MB at 4096 inputs), so
//            w comes from DRAM once a group (once a prefill of <= 2048 tokens). vit_gemm walks n
//            fastest, its w (8 MB) being the small operand.
//   stages   four: the staging tile is half of vit_gemm's (128 act columns), which leaves room.
// Roundings as the unfused path's: gate and up rounded to A (cuBLASLt's output), then
// A(silu_times_fast(gate, up)) (swiglu8_kernel); the sums' order is this kernel's, not cuBLASLt's.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "itera/cuda/check.hpp"
#include "src/kernels/common.cuh"
#include "src/kernels/launch.cuh"
#include "src/kernels/llm_formulas.cuh"
#include "src/kernels/llm_kernels.cuh"
#include "src/kernels/mma.cuh"
#include "src/kernels/tma.cuh"
#include "src/kernels/wgmma.cuh"

namespace itera::kernels::llm {
namespace {

constexpr int threads = 384;  // the producer's warpgroup, then two consumers
constexpr int tile_m = 128, tile_n = 128, tile_k = 64;  // tile_n act columns: 2 tile_n rows of w
constexpr int stages = 4;
constexpr int group_m = 16;                                   // row tiles walked together
constexpr unsigned x_bytes = tile_m * tile_k * 2;             // 16 KiB
constexpr unsigned half_bytes = tile_n * tile_k * 2;          // 16 KiB: the gate rows, then the up rows
constexpr unsigned stage_bytes = x_bytes + 2 * half_bytes;    // 48 KiB
constexpr unsigned ring_bytes = stages * stage_bytes;         // 192 KiB
constexpr int out_stride = tile_n + 8;                        // [128][136]: rows 4 banks apart
constexpr unsigned out_bytes = tile_m * out_stride * 2;       // 34 KiB, after the ring
// + each stage's full and empty barriers, then the staging tile's (full, empty).
constexpr unsigned shared_bytes = ring_bytes + out_bytes + 2 * stages * 8 + 16;
static_assert(shared_bytes <= 227 * 1024, "the sm_90 limit of dynamic shared memory a block");
[[maybe_unused]] constexpr int epilogue_warps = 3;  // warps 1-3 of the producer's warpgroup
[[maybe_unused]] constexpr int epilogue_threads = 32 * epilogue_warps;

[[maybe_unused]] __device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

// Tile t's first row and first act column: groups of group_m row tiles (fewer in the last), m
// fastest inside a group.
[[maybe_unused]] __device__ __forceinline__ void tile_origin(int t, int m_tiles, int n_tiles, int& m0, int& n0) {
  const int per_group = group_m * n_tiles;
  const int first = t / per_group * group_m, within = t % per_group;
  const int rows_here = min(group_m, m_tiles - first);
  m0 = (first + within % rows_here) * tile_m;
  n0 = within / rows_here * tile_n;
}

template <class A>
__global__ void __launch_bounds__(threads, 1)
    gate_up_swiglu_kernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map,
                          A* __restrict__ act, int rows, int inter, int ksteps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int m_tiles = (rows + tile_m - 1) / tile_m, n_tiles = inter / tile_n, tiles = m_tiles * n_tiles;
  const unsigned ring = smem_addr(smem);
  const unsigned full = ring + ring_bytes + out_bytes, empty = full + stages * 8;  // barrier s at + 8 s
  const unsigned staged_full = empty + stages * 8, staged_empty = staged_full + 8;
  auto* staged = reinterpret_cast<A*>(smem + ring_bytes);
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      tma::barrier_init(full + 8 * s, 1);   // the producer's arrival with the byte count
      tma::barrier_init(empty + 8 * s, 2);  // one arrival per consumer warpgroup
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
        tile_origin(t, m_tiles, n_tiles, m0, n0);
        for (int j = 0; j < ksteps; ++j, ++g) {
          const int s = g % stages, use = g / stages;
          if (use > 0) tma::barrier_wait(empty + 8 * s, static_cast<unsigned>((use - 1) & 1));
          const unsigned bar = full + 8 * s, base = ring + static_cast<unsigned>(s) * stage_bytes;
          tma::barrier_expect_bytes(bar, stage_bytes);
          tma::load_2d(base, x_map, j * tile_k, m0, bar);
          tma::load_2d(base + x_bytes, w_map, j * tile_k, n0, bar);
          tma::load_2d(base + x_bytes + half_bytes, w_map, j * tile_k, inter + n0, bar);
        }
      }
    } else if (tid >= 32) {
      // The epilogue warps store each staged tile while the consumers run the next one's products:
      // a row is 16 chunks of 16 bytes, so a warp stores two rows at a time (lane / 16 the row).
      const int r0 = 2 * (warp - 1) + lane / 16, chunk = lane % 16;
      int i = 0;
      for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x), ++i) {
        int m0, n0;
        tile_origin(t, m_tiles, n_tiles, m0, n0);
        const int valid = min(tile_m, rows - m0);
        tma::barrier_wait(staged_full, static_cast<unsigned>(i & 1));
        const A* from = staged + r0 * out_stride + 8 * chunk;
        A* to = act + static_cast<std::int64_t>(m0 + r0) * inter + n0 + 8 * chunk;
        constexpr int row_step = 2 * epilogue_warps;
        const std::int64_t to_step = row_step * static_cast<std::int64_t>(inter);
#pragma unroll 2
        for (int r = r0; r < valid; r += row_step, from += row_step * out_stride, to += to_step)
          *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(from);
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
  const unsigned stage_at =
      smem_addr(staged + (c * 64 + warp * 16 + lane % 16) * out_stride + 8 * (lane / 16));
  int g = 0, i = 0;
  float d[32][4] = {};  // each tile's first product overwrites them (accumulate false)
  for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x), ++i) {
    for (int j = 0; j < ksteps; ++j, ++g) {
      const int s = g % stages;
      tma::barrier_wait(full + 8 * s, static_cast<unsigned>((g / stages) & 1));
      const unsigned base = ring + static_cast<unsigned>(s) * stage_bytes;
      const std::uint64_t a = wgmma::descriptor(base + static_cast<unsigned>(c) * (x_bytes / 2), 16, 1024);
      const std::uint64_t b = wgmma::descriptor(base + x_bytes, 16, 1024);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < tile_k / 16; ++kk)
        wgmma::mma_64x256_ss<A>(d, wgmma::advance(a, static_cast<unsigned>(kk) * 32),
                                wgmma::advance(b, static_cast<unsigned>(kk) * 32), j > 0 || kk > 0);
      wgmma::commit();
      wgmma::wait<1>();  // the previous step's products are done: its buffer is free
      if (j > 0 && leader) tma::barrier_arrive(empty + 8 * ((g - 1) % stages));
    }
    wgmma::wait<0>();
    wgmma::fence_operands(d);
    if (leader) tma::barrier_arrive(empty + 8 * ((g - 1) % stages));  // the tile's last buffer

    if (i > 0) tma::barrier_wait(staged_empty, static_cast<unsigned>((i - 1) & 1));  // the last tile is out
    {
      // act of gate column 8j + t2 (+ 1) from d[j] and up's from d[j + 16], gate and up rounded to
      // A first; four 8x8 matrices a stmatrix.
      const auto value = [](float gate, float up) {
        return silu_times_fast(to_float(from_float<A>(gate)), to_float(from_float<A>(up)));
      };
      const auto pair = [&](int j, int e) {
        return pack2<A>(value(d[j][e], d[j + 16][e]), value(d[j][e + 1], d[j + 16][e + 1]));
      };
#pragma unroll
      for (int j = 0; j < 16; j += 2) {
        const unsigned m[4] = {pair(j, 0), pair(j, 2), pair(j + 1, 0), pair(j + 1, 2)};
        stmatrix_x4(stage_at + static_cast<unsigned>(j) * 16, m);
      }
    }
    consumers_sync();  // the tile is staged
    if (tid == 128) tma::barrier_arrive(staged_full);
  }
#else
  (void)x_map, (void)w_map, (void)act, (void)rows, (void)inter, (void)ksteps;
  __trap();  // launched only where gate_up_swiglu_supported
#endif
}

// A row-major [rows][k] matrix of A read as [box_rows][64] boxes, 128-byte swizzle; boxes past the
// last row are filled with zeros.
template <class A>
CUtensorMap tile_map(const A* base, std::int64_t rows, std::int64_t k, unsigned box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {tile_k, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const auto type = std::is_same_v<A, fp16> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult r = tma::encode_tiled()(&map, type, 2, const_cast<A*>(base), dims, strides, box, element_strides,
                                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("llm gate_up_swiglu: cuTensorMapEncodeTiled failed (error " +
                             std::to_string(static_cast<int>(r)) + ") for a [" + std::to_string(rows) + "][" +
                             std::to_string(k) + "] matrix");
  return map;
}

}  // namespace

bool gate_up_swiglu_supported(std::int64_t rows, std::int64_t intermediate, std::int64_t hidden) {
  return rows >= 1 && rows < (std::int64_t{1} << 31) - tile_m && intermediate >= tile_n &&
         intermediate % tile_n == 0 && intermediate < (1 << 29) && hidden >= tile_k && hidden % tile_k == 0 &&
         hidden < (1 << 30) && rows * intermediate < (std::int64_t{1} << 62) && wgmma_available();
}

template <class A>
void gate_up_swiglu(const A* x, std::int64_t rows, const A* w_gate_up, std::int64_t intermediate, std::int64_t hidden,
                    A* act, cudaStream_t stream, int max_blocks) {
  if (!gate_up_swiglu_supported(rows, intermediate, hidden))
    throw std::invalid_argument("llm gate_up_swiglu: " + std::to_string(rows) + " rows, intermediate " +
                                std::to_string(intermediate) + ", hidden " + std::to_string(hidden) +
                                ": needs an sm_90a device, the intermediate size a multiple of 128 and the hidden "
                                "size a multiple of 64");
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  if (!aligned(x) || !aligned(w_gate_up) || !aligned(act))
    throw std::invalid_argument("llm gate_up_swiglu: x, w and act must be 16-byte aligned");
  constexpr auto kernel = gate_up_swiglu_kernel<A>;
  allow_dynamic_shared(reinterpret_cast<const void*>(kernel), shared_bytes);
  const CUtensorMap x_map = tile_map(x, rows, hidden, tile_m), w_map = tile_map(w_gate_up, 2 * intermediate, hidden, tile_n);
  const std::int64_t tiles = (rows + tile_m - 1) / tile_m * (intermediate / tile_n);
  const int blocks = max_blocks > 0 ? std::min(max_blocks, device_multiprocessors()) : device_multiprocessors();
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(tiles, blocks));
  launch(kernel, grid, threads, shared_bytes, stream, x_map, w_map, act, static_cast<int>(rows),
         static_cast<int>(intermediate), static_cast<int>(hidden / tile_k));
  ITERA_CUDA_CHECK_LAUNCH();
}

template void gate_up_swiglu<bf16>(const bf16*, std::int64_t, const bf16*, std::int64_t, std::int64_t, bf16*,
                                   cudaStream_t, int);
template void gate_up_swiglu<fp16>(const fp16*, std::int64_t, const fp16*, std::int64_t, std::int64_t, fp16*,
                                   cudaStream_t, int);

}  // namespace itera::kernels::llm
