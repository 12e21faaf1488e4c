// The GEMM with bias and activation of vit_gemm.cuh.
//
// Persistent: one block per SM walks over [128][256] tiles of out (n fastest, so the blocks
// running at once share their rows of x in the L2; w, 8 MB for ViT-L/14's fc1, stays there).
// Three warpgroups with three jobs:
//   producer   one thread of the first warpgroup asks the TMA, per step of 64 columns of k, for
//              x's [128][64] tile and w's [256][64] tile (the 128-byte swizzle layout wgmma reads;
//              rows past the end come in as zeros) into one of `stages` buffers, whose `full`
//              barrier completes on their bytes (tma.cuh), over all of the block's tiles;
//   consumers  the other two warpgroups each multiply 64 rows of x by the 256 rows of w (four
//              wgmma m64n256k16 a step, both operands K-major in shared memory, fp32 accumulators
//              in registers), keep one step's products in flight and free a buffer (its `empty`
//              barrier) once the products that read it are done; after a tile's last step they
//              add the bias and leave bf16(sum + bias) in a staging tile (with round_sums; else
//              the activated value) and go on with the next tile;
//   epilogue   warps 1-3 of the first warpgroup apply the activation to the staged tile and store
//              it in 16-byte chunks of rows, while the consumers run the next tile's products.
// The staging tile has its own full and empty barriers, so a tile's epilogue overlaps the next
// tile's products.
//
// Measured on the H200, ViT-L/14 fc1 at batch 128 (docs/perf/2026-11-30-own-gemms.md), against
// cuBLASLt with the bias epilogue then the activation pass, 0.58-0.60 ms a layer: this kernel
// with the consumers doing the epilogue 0.788-0.848 ms (4832ed4 .. 96814d3; Nsight Compute put 60%
// of the consumer warps' samples in the epilogue), with the epilogue warps and expf / IEEE
// division 0.932 ms (the epilogue warps became the bottleneck), with __expf / __fdividef
// (activation.cuh: activate_fast) 0.523 ms. Then (docs/perf/2026-11-30-vit-tails.md): the
// epilogue on ex2/rcp.approx.ftz with a lane per chunk of a row 0.472-0.495 ms over the session's
// runs, against 0.573 for cuBLASLt and the pass in the same run (Nsight: tensor pipe 72% of its
// peak; cuBLASLt's products of the same k reach 80%; the consumers wait for a stage ~11% of their
// time, and both drain at a tile's end). Tried and slower: k steps of 32 in six stages (39883df: a ring two steps deep at
// the same shared memory), the consumers staging their rows in turn through a half-size tile with
// four stages (e3dd52b: 0.565 ms; one warpgroup alone does not keep the tensor cores busy while
// the other waits for the staging tile), clusters of two sharing w's tile by multicast (110f359:
// 0.590 ms; each buffer waits for both blocks' consumers, so the pair runs at its slower one's pace).
// Then (docs/perf/2026-11-30-vit-persistent.md) the consumers' part between tiles trimmed (the
// first product overwrites the accumulators, stmatrix stores, the bias converted before the main
// loop): 0.475 -> 0.449 ms; and the next tile's bias loaded a tile ahead: 0.451-0.462 -> 0.445 ms.
// Tried and not kept: ViT's norm2 folded into this product (cefcf6b; it saves norm2 what its two
// FMAs a value cost here, where both consumers stall the tensor cores).
#include "src/kernels/vit_gemm.cuh"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "itera/cuda/check.hpp"
#include "src/kernels/activation.cuh"
#include "src/kernels/common.cuh"
#include "src/kernels/launch.cuh"
#include "src/kernels/mma.cuh"
#include "src/kernels/tma.cuh"
#include "src/kernels/wgmma.cuh"
#include "src/kernels/wgmma_gemm.cuh"

namespace itera::kernels::vit {
namespace {

constexpr int threads = 384;  // the producer's warpgroup, then two consumers
constexpr int tile_m = 128, tile_n = 256, tile_k = wgmma::gemm_tile_k;
constexpr int stages = 3;
constexpr unsigned x_bytes = tile_m * tile_k * 2;             // 16 KiB
constexpr unsigned w_bytes = tile_n * tile_k * 2;             // 32 KiB
constexpr unsigned stage_bytes = x_bytes + w_bytes;           // 48 KiB
constexpr unsigned ring_bytes = stages * stage_bytes;         // 144 KiB
constexpr int out_stride = tile_n + 8;                        // bf16 [128][264]: rows 4 banks apart
constexpr unsigned out_bytes = tile_m * out_stride * 2;       // 66 KiB, after the ring
constexpr unsigned bias_bytes = tile_n * 4;                   // the tile's bias (fp32), after the staging tile
// + each stage's full and empty barriers, then the staging tile's (full, empty).
constexpr unsigned shared_bytes = ring_bytes + out_bytes + bias_bytes + 2 * stages * 8 + 16;
[[maybe_unused]] constexpr int epilogue_warps = 3;  // warps 1-3 of the producer's warpgroup
[[maybe_unused]] constexpr int epilogue_threads = 32 * epilogue_warps;


// Consumers only (256 threads): named barrier 1, so that the producer runs on meanwhile.
[[maybe_unused]] __device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

template <activation A, bool round_sums>
__global__ void __launch_bounds__(threads, 1)
    gemm_bias_activation_kernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map,
                                const bf16* __restrict__ bias, bf16* __restrict__ out, int rows, int n, int ksteps,
                                int tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int n_tiles = n / tile_n;
  const unsigned ring = smem_addr(smem);
  const unsigned full = ring + ring_bytes + out_bytes + bias_bytes, empty = full + stages * 8;  // barrier s at + 8 s
  auto* staged = reinterpret_cast<bf16*>(smem + ring_bytes);
  auto* bias_tile = reinterpret_cast<float*>(smem + ring_bytes + out_bytes);

  const unsigned staged_full = empty + stages * 8, staged_empty = staged_full + 8;
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      tma::barrier_init(full + 8 * s, 1);   // the producer's arrival with the byte count
      tma::barrier_init(empty + 8 * s, 2);  // one arrival per consumer warpgroup
    }
    tma::barrier_init(staged_full, 1);                  // the consumers' leader, after their barrier
    tma::barrier_init(staged_empty, epilogue_threads);  // every epilogue thread, done reading
    tma::barrier_init_fence();
  }
  __syncthreads();
  grid_dependents_launch();
  grid_dependency_wait();

  // Tiles blockIdx.x, + gridDim.x, ...: n fastest, so the blocks running at once share rows of x.
  // Step g counts this block's steps over all its tiles: buffer g % stages, its use g / stages;
  // tile i of the block uses the staging tile for the i-th time.
  const auto post = [](bf16 v) {  // what the epilogue threads apply to a staged value
    if constexpr (round_sums) return __float2bfloat16_rn(activate_fast(A, __bfloat162float(v)));
    else return v;
  };
  if (wg == 0) {
    if (tid == 0) {
      int g = 0;
      for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x)) {
        const int n0 = (t % n_tiles) * tile_n, m0 = (t / n_tiles) * tile_m;
        for (int j = 0; j < ksteps; ++j, ++g) {
          unsigned bar;
          const unsigned base = wgmma::fill_stage<stages, stage_bytes>(ring, full, empty, g, bar);
          tma::load_2d(base, x_map, j * tile_k, m0, bar);
          tma::load_2d(base + x_bytes, w_map, j * tile_k, n0, bar);
        }
      }
    } else if (tid >= 32) {
      // The epilogue threads: each staged tile's activation (round_sums) and its stores, while the
      // consumers run the next tile's products. A warp takes a row's 32 16-byte chunks (512
      // contiguous bytes, one per lane), each epilogue warp every epilogue_warps-th row: the
      // addresses step by a constant (the index arithmetic of a flat loop over the tile's chunks was
      // a fifth of these threads' instructions).
      constexpr int chunks = tile_n / 8;
      static_assert(chunks == 32, "a lane per 16-byte chunk of a row");
      const int r0 = warp - 1;
      int i = 0;
      for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x), ++i) {
        const int n0 = (t % n_tiles) * tile_n, m0 = (t / n_tiles) * tile_m;
        const int valid = min(tile_m, rows - m0);
        tma::barrier_wait(staged_full, static_cast<unsigned>(i & 1));
        const bf16* from = staged + r0 * out_stride + 8 * lane;
        bf16* to = out + static_cast<std::int64_t>(m0 + r0) * n + n0 + 8 * lane;
        const std::int64_t to_step = epilogue_warps * static_cast<std::int64_t>(n);
#pragma unroll 2
        for (int r = r0; r < valid; r += epilogue_warps, from += epilogue_warps * out_stride, to += to_step) {
          uint4 v = *reinterpret_cast<const uint4*>(from);
          bf16* e = reinterpret_cast<bf16*>(&v);
#pragma unroll
          for (int k = 0; k < 8; ++k) e[k] = post(e[k]);
          *reinterpret_cast<uint4*>(to) = v;
        }
        tma::barrier_arrive(staged_empty);
      }
    }
    return;
  }
  const int c = wg - 1;  // rows 64 c .. 64 c + 63 of each tile
  const bool leader = tid % 128 == 0;
  // D fragment (wgmma.cuh): warp `warp` holds rows 16 warp + lane / 4 (+ 8) of its 64, columns
  // 8j + t2 (+ 1).
  const int t2 = 2 * (lane % 4);
  // stmatrix_x4 of columns 8j .. 8j + 15 (two 8x8 matrices each of rows 0-7 and 8-15 of the warp's
  // 16): lane l gives the row l % 16 of the warp's, columns 8 (l / 16) on.
  const unsigned stage_at =
      smem_addr(staged + (c * 64 + warp * 16 + lane % 16) * out_stride + 8 * (lane / 16));
  int g = 0, i = 0;
  float d[32][4] = {};  // defined once; each tile's first product overwrites them (accumulate false)
  // A thread's column of the bias, one tile ahead: loaded while the tile before runs its products,
  // stored to the bias tile (fp32: no conversion after the main loop) as its tile starts. Loaded
  // where it is stored, the store waited for the load (an L2 round trip) before the tile's first
  // product, at the tile boundary where the tensor cores already wait for the consumers (~0.2 us
  // a tile, measured); a load per thread after the main loop (32 dependent ones) was worse still.
  const auto bias_of = [&](int t) { return t < tiles ? bias[(t % n_tiles) * tile_n + tid - 128] : bf16{}; };
  bf16 next_bias = bias_of(static_cast<int>(blockIdx.x));
  for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x), ++i) {
    bias_tile[tid - 128] = __bfloat162float(next_bias);  // every consumer is past the last tile's reads
    next_bias = bias_of(t + static_cast<int>(gridDim.x));
    wgmma::multiply_tile<bf16, stages, stage_bytes, x_bytes>(d, ring, full, empty, g, ksteps, c, leader);

    // Sums + bias into the staging tile: bf16(sum + bias) with round_sums (the epilogue threads
    // apply the activation), else the activation here and one rounding; four 8x8 matrices a
    // stmatrix. Both consumers are here at once and the tensor cores wait for them: every
    // instruction of this part costs fc1 ~0.1 us a ViT-L/14 layer at batch 128 (zeroing the
    // accumulators, a store per pair and the bias's conversion taken out: 475 -> 449 us; the bias
    // read as one pair per two columns).
    consumers_sync();  // the bias tile is written
    if (i > 0) tma::barrier_wait(staged_empty, static_cast<unsigned>((i - 1) & 1));  // the last tile is out
    {
      const auto value = [&](float v) {
        if constexpr (round_sums) return v;
        else return activate_fast(A, v);
      };
      // Columns 8j + t2 and the next, of the thread's first row (e 0) or second (e 2).
      const auto pair = [&](int j, int e) {
        const float2 b = *reinterpret_cast<const float2*>(bias_tile + 8 * j + t2);
        return pack2<bf16>(value(d[j][e] + b.x), value(d[j][e + 1] + b.y));
      };
#pragma unroll
      for (int j = 0; j < 32; j += 2) {
        const unsigned m[4] = {pair(j, 0), pair(j, 2), pair(j + 1, 0), pair(j + 1, 2)};
        stmatrix_x4(stage_at + static_cast<unsigned>(j) * 16, m);
      }
    }
    consumers_sync();  // the tile is staged, and every consumer is done with the bias
    if (tid == 128) tma::barrier_arrive(staged_full);
  }
#else
  (void)x_map, (void)w_map, (void)bias, (void)out, (void)rows, (void)n, (void)ksteps, (void)tiles;
  __trap();  // launched only where wgmma_available()
#endif
}

template <activation A, bool R>
void launch_gemm(const bf16* x, std::int64_t rows, const bf16* w, std::int64_t n, std::int64_t k, const bf16* bias,
                 bf16* out, cudaStream_t stream, int max_blocks) {
  constexpr auto kernel = gemm_bias_activation_kernel<A, R>;
  allow_dynamic_shared(reinterpret_cast<const void*>(kernel), shared_bytes);
  constexpr const char* who = "vit gemm_bias_activation";
  const CUtensorMap x_map = wgmma::gemm_operand_map(x, rows, k, tile_m, who),
                    w_map = wgmma::gemm_operand_map(w, n, k, tile_n, who);
  const std::int64_t tiles = (n / tile_n) * ((rows + tile_m - 1) / tile_m);
  const int blocks = max_blocks > 0 ? std::min(max_blocks, device_multiprocessors()) : device_multiprocessors();
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(tiles, blocks));
  itera::kernels::launch(kernel, grid, threads, shared_bytes, stream, x_map, w_map, bias, out, static_cast<int>(rows),
                         static_cast<int>(n), static_cast<int>(k / tile_k), static_cast<int>(tiles));
}

}  // namespace

bool gemm_bias_activation_supported(std::int64_t rows, std::int64_t n, std::int64_t k) {
  return rows >= 1 && rows < (std::int64_t{1} << 31) - tile_m && n >= tile_n && n % tile_n == 0 && n < (1 << 30) &&
         k >= tile_k && k % tile_k == 0 && k < (1 << 30) && wgmma_available();
}

void gemm_bias_activation(const bf16* x, std::int64_t rows, const bf16* w, std::int64_t n, std::int64_t k,
                          const bf16* bias, activation act, bool round_sums, bf16* out, cudaStream_t stream,
                          int max_blocks) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  if (!aligned(x) || !aligned(w) || !aligned(bias) || !aligned(out))
    throw std::invalid_argument("vit gemm_bias_activation: x, w, bias and out must be 16-byte aligned");
  const auto run = [&]<activation A>() {
    if (round_sums) launch_gemm<A, true>(x, rows, w, n, k, bias, out, stream, max_blocks);
    else launch_gemm<A, false>(x, rows, w, n, k, bias, out, stream, max_blocks);
  };
  switch (act) {
    case activation::quick_gelu: run.template operator()<activation::quick_gelu>(); break;
    case activation::gelu: run.template operator()<activation::gelu>(); break;
    case activation::gelu_tanh: run.template operator()<activation::gelu_tanh>(); break;
  }
  ITERA_CUDA_CHECK_LAUNCH();
}

}  // namespace itera::kernels::vit
