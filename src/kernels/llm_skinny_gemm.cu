// Skinny products on wgmma (skinny_gemm.cuh).
//
// A block of two warpgroups takes 256 rows of W and the 64 (padded) rows of x over one slice of
// k. Per step of 64 columns of k: W's [256][64] and x's [64][64] bf16 tiles are copied with
// cp.async into one of `stages` shared-memory buffers (the 128-byte swizzle layout of wgmma.cuh,
// four [64][64] tiles of W), so that stages - 1 steps are in flight while the oldest is
// multiplied: per warpgroup and step eight wgmma m64n64k16 (its two 64-row tiles of W as A, x as
// B, both K-major), D = two [64 W rows][64 x rows] fp32 accumulators in registers.
//
// 256 rows rather than 128: x is read from the L2 once per tile, and at 128 rows (x half the
// bytes of W) Nsight Compute put the L2 at 80% of its throughput with the DRAM at 73% (gate/up,
// batch 64): the first version of this kernel ran 3.6 TB/s there and 1.5-2.2 on the products of
// few tiles.
//
// The slices of k of one 256-row tile form a thread block cluster of `split` blocks (1, 2, 4 or 8,
// along z): each block leaves its sums in shared memory, then block r adds the blocks' sums in rank
// order for a share of the outputs, read through distributed shared memory, and stores them. The
// split is the largest keeping the blocks within one wave (one block per SM: the ring takes 200
// KiB) while each block keeps at least `stages` steps.
//
// W is read once (its tiles bypass L1 with cp.async.cg); x is read once per 128-row tile, from
// the L2 (x is at most 64 rows: 512 KB at k = 4096).
#include "src/kernels/skinny_gemm.cuh"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "itera/cuda/check.hpp"
#include "src/kernels/launch.cuh"
#include "src/kernels/mma.cuh"
#include "src/kernels/wgmma.cuh"

namespace itera::kernels::llm {
namespace {

using bf16 = __nv_bfloat16;

constexpr int threads = 256;      // two warpgroups
constexpr int tile_k = 64;        // columns of k per step: one 128-byte swizzle row
constexpr int max_split = 8;
constexpr unsigned half_bytes = 64 * tile_k * 2;  // a [64][64] bf16 tile: 8 KiB

// H: 64-row tiles of W per warpgroup (1: 128 rows a block, 96 KiB, two blocks per SM; 2: 256
// rows, 200 KiB, one). PF: the L2 prefetch size asked with each copy of W (0, 128 or 256 bytes).
template <int H>
struct shape_of {
  static constexpr int tile_rows = 128 * H;
  static constexpr int stages = H == 1 ? 4 : 5;
  static constexpr unsigned stage_bytes = (2 * H + 1) * half_bytes;  // W's tiles, then x
  static constexpr unsigned ring_bytes = stages * stage_bytes;
  static constexpr int blocks_per_sm = H == 1 ? 2 : 1;
  static constexpr int sums_stride = tile_rows + 4;  // fp32 [64 x rows][tile_rows + 4]
  static_assert(skinny_max_rows * sums_stride * 4 <= static_cast<int>(ring_bytes), "the sums reuse the ring");
};

// Byte offset of 16-byte chunk c of row r (r < 64) in a [64][64] bf16 tile, 128-byte swizzle.
__device__ __forceinline__ unsigned swizzled(int r, int c) {
  return static_cast<unsigned>(r * 128 + ((c ^ (r % 8)) * 16));
}

template <int PF>
__device__ __forceinline__ void cp_async16_prefetch(unsigned dst, const void* src, int src_bytes) {
  if constexpr (PF == 256)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
  else if constexpr (PF == 128)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
  else
    cp_async16(dst, src, src_bytes);
}

template <int H, int PF>
__global__ void __launch_bounds__(threads, shape_of<H>::blocks_per_sm)
    skinny_gemm_kernel(const bf16* __restrict__ w, int m, int k, const bf16* __restrict__ x, int n,
                       int steps_per_slice, void* __restrict__ out, bool fp32_out, float beta) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = shape_of<H>;
  constexpr int tile_rows = S::tile_rows, stages = S::stages, sums_stride = S::sums_stride;
  constexpr unsigned stage_bytes = S::stage_bytes;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int row0 = static_cast<int>(blockIdx.x) * tile_rows;
  const int split = static_cast<int>(gridDim.z), rank = static_cast<int>(blockIdx.z);
  const int ksteps = k / tile_k;
  const int first = min(ksteps, rank * steps_per_slice), steps = min(ksteps, first + steps_per_slice) - first;

  grid_dependents_launch();
  grid_dependency_wait();

  // Step j's tiles into buffer j % stages: tile_rows * 8 chunks of W, 512 of x (two per thread).
  const auto issue = [&](int j) {
    if (j < steps) {
      const unsigned base = smem_addr(smem) + static_cast<unsigned>(j % stages) * stage_bytes;
      const std::int64_t col = static_cast<std::int64_t>(first + j) * tile_k;
#pragma unroll
      for (int p = 0; p < tile_rows * 8 / threads; ++p) {
        const int i = tid + p * threads, r = i / 8, c = i % 8;
        const int row = row0 + r;
        const bool ok = row < m;
        const bf16* src = w + (ok ? static_cast<std::int64_t>(row) * k + col + c * 8 : 0);
        cp_async16_prefetch<PF>(base + static_cast<unsigned>(r / 64) * half_bytes + swizzled(r % 64, c), src,
                                ok ? 16 : 0);
      }
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int i = tid + p * threads, r = i / 8, c = i % 8;
        const bool ok = r < n;
        const bf16* src = x + (ok ? static_cast<std::int64_t>(r) * k + col + c * 8 : 0);
        cp_async16(base + 2 * H * half_bytes + swizzled(r, c), src, ok ? 16 : 0);
      }
    }
    cp_async_commit();  // an empty group past the last step keeps the wait counts uniform
  };

  float d[H][8][4];  // the warpgroup's 64-row tiles
#pragma unroll
  for (int h = 0; h < H; ++h)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) d[h][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < stages - 1; ++s) issue(s);
  for (int j = 0; j < steps; ++j) {
    cp_async_wait<stages - 2>();  // step j's tiles landed (this thread's copies)
    wgmma::fence_proxy_async();
    __syncthreads();  // ... every thread's, visible to wgmma; step j - 1's buffer is free again
    issue(j + stages - 1);
    const unsigned base = smem_addr(smem) + static_cast<unsigned>(j % stages) * stage_bytes;
    const std::uint64_t a0 = wgmma::descriptor(base + static_cast<unsigned>(H * wg) * half_bytes, 16, 1024);
    const std::uint64_t b = wgmma::descriptor(base + 2 * H * half_bytes, 16, 1024);
#pragma unroll
    for (int h = 0; h < H; ++h) wgmma::fence_operands(d[h]);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < tile_k / 16; ++kk) {
      const unsigned step = static_cast<unsigned>(kk) * 32;
#pragma unroll
      for (int h = 0; h < H; ++h)
        wgmma::mma_64x64_ss(d[h], wgmma::advance(a0, static_cast<unsigned>(h) * half_bytes + step),
                            wgmma::advance(b, step), true);
    }
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int h = 0; h < H; ++h) wgmma::fence_operands(d[h]);
  }
  cp_async_wait<0>();
  __syncthreads();  // every warpgroup is done with the ring: it holds the sums now

  // D fragment (wgmma.cuh): warp `warp` of the warpgroup holds rows 16 warp + g (+ 8) of each of
  // its tiles, x rows 8j + 2 (lane % 4) (+ 1). Sums as [x row][W row], padded so that a warp's
  // stores hit 32 banks (the row stride is 4 banks past a multiple of 32).
  float* sums = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int h = 0; h < H; ++h) {
    const int g = lane / 4, t2 = 2 * (lane % 4), r = wg * 64 * H + h * 64 + warp * 16 + g;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int t = 8 * j + t2;
      sums[t * sums_stride + r] = d[h][j][0];
      sums[(t + 1) * sums_stride + r] = d[h][j][1];
      sums[t * sums_stride + r + 8] = d[h][j][2];
      sums[(t + 1) * sums_stride + r + 8] = d[h][j][3];
    }
  }
  namespace cg = cooperative_groups;
  const auto store = [&](int idx, float sum) {
    const int t = idx / tile_rows, r = idx % tile_rows, row = row0 + r;
    if (t >= n || row >= m) return;
    const std::int64_t at = static_cast<std::int64_t>(t) * m + row;
    if (fp32_out) {
      float* o = static_cast<float*>(out);
      o[at] = beta != 0.0f ? sum + beta * o[at] : sum;
    } else {
      static_cast<bf16*>(out)[at] = __float2bfloat16_rn(sum);
    }
  };
  const int outputs = min(n, skinny_max_rows) * tile_rows;
  if (split == 1) {
    __syncthreads();
    for (int idx = tid; idx < outputs; idx += threads) store(idx, sums[(idx / tile_rows) * sums_stride + idx % tile_rows]);
    return;
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's sums are written and visible across the cluster
  for (int idx = rank * threads + tid; idx < outputs; idx += split * threads) {
    const int at = (idx / tile_rows) * sums_stride + idx % tile_rows;
    float part[max_split];
#pragma unroll
    for (int b = 0; b < max_split; ++b)
      if (b < split) part[b] = cluster.map_shared_rank(sums, b)[at];  // the remote loads in flight together
    float sum = 0.0f;
#pragma unroll
    for (int b = 0; b < max_split; ++b)
      if (b < split) sum += part[b];
    store(idx, sum);
  }
  cluster.sync();  // keep every block's shared memory alive until the others have read it
#else
  (void)w, (void)m, (void)k, (void)x, (void)n, (void)steps_per_slice, (void)out, (void)fp32_out, (void)beta;
  __trap();  // launched only where wgmma_available()
#endif
}

// ITERA_LLM_SKINNY_GEMM=0: cuBLASLt for these products too (A/B measurements).
bool skinny_off() {
  static const bool off = !env_switch("ITERA_LLM_SKINNY_GEMM", true);
  return off;
}

}  // namespace

bool skinny_gemm_supported(std::int64_t n, std::int64_t m, std::int64_t k, const void* w, const void* x,
                           const void* out) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return n >= 1 && n <= skinny_max_rows && m >= 1 && m < (std::int64_t{1} << 30) && k >= tile_k && k % tile_k == 0 &&
         k < (std::int64_t{1} << 30) && aligned(w) && aligned(x) && aligned(out) && !skinny_off() &&
         wgmma_available();
}

namespace {

template <int H, int PF>
void launch_skinny(const bf16* w, std::int64_t m, std::int64_t k, const bf16* x, std::int64_t n, void* out,
                   bool fp32_out, float beta, cudaStream_t stream) {
  using S = shape_of<H>;
  static const bool ready = [] {
    ITERA_CUDA_CHECK(cudaFuncSetAttribute(skinny_gemm_kernel<H, PF>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(S::ring_bytes)));
    return true;
  }();
  (void)ready;
  const std::int64_t tiles = (m + S::tile_rows - 1) / S::tile_rows, ksteps = k / tile_k;
  const std::int64_t slots = static_cast<std::int64_t>(device_multiprocessors()) * S::blocks_per_sm;
  int split = 1;
  while (split < max_split && tiles * 2 * split <= slots && ksteps / (2 * split) >= S::stages) split *= 2;
  const int per_slice = static_cast<int>((ksteps + split - 1) / split);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(tiles), 1, static_cast<unsigned>(split));
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = S::ring_bytes;
  config.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
  unsigned count = 0;
  attrs[count].id = cudaLaunchAttributeClusterDimension;
  attrs[count].val.clusterDim.x = 1;
  attrs[count].val.clusterDim.y = 1;
  attrs[count].val.clusterDim.z = static_cast<unsigned>(split);
  ++count;
  if (programmatic_launch_enabled()) {
    attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = attrs;
  config.numAttrs = count;
  ITERA_CUDA_CHECK(cudaLaunchKernelEx(&config, skinny_gemm_kernel<H, PF>, w, static_cast<int>(m), static_cast<int>(k),
                                      x, static_cast<int>(n), per_slice, out, fp32_out, beta));
}

}  // namespace

void skinny_gemm(const bf16* w, std::int64_t m, std::int64_t k, const bf16* x, std::int64_t n, void* out,
                 bool fp32_out, float beta, cudaStream_t stream) {
  static const int variant = [] {
    const char* v = std::getenv("ITERA_SKINNY_VARIANT");
    return v ? std::atoi(v) : 0;
  }();
  switch (variant) {
    case 1: return launch_skinny<1, 128>(w, m, k, x, n, out, fp32_out, beta, stream);
    case 2: return launch_skinny<1, 256>(w, m, k, x, n, out, fp32_out, beta, stream);
    case 3: return launch_skinny<2, 0>(w, m, k, x, n, out, fp32_out, beta, stream);
    case 4: return launch_skinny<2, 256>(w, m, k, x, n, out, fp32_out, beta, stream);
    default: return launch_skinny<1, 0>(w, m, k, x, n, out, fp32_out, beta, stream);
  }
}

}  // namespace itera::kernels::llm
