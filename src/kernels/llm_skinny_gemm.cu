// Skinny products on wgmma (skinny_gemm.cuh), fed by the Tensor Memory Accelerator.
//
// A block of three warpgroups takes 256 rows of W and the 64 (padded) rows of x over one slice of
// k. One thread of the first warpgroup is the producer: per step of 64 columns of k it asks the
// TMA for W's four [64][64] bf16 tiles and x's [64][64] tile (the 128-byte swizzle layout that
// wgmma reads; rows past m or n come in as zeros) into one of `stages` buffers, and the copies
// complete that buffer's `full` barrier by their byte count. The other two warpgroups consume:
// each waits for the buffer, multiplies its two tiles of W by x (eight wgmma m64n64k16, both
// operands K-major in shared memory, D = two [64 W rows][64 x rows] fp32 accumulators) and
// arrives on the buffer's `empty` barrier, which the producer waits for before it fills the
// buffer again. No barrier spans the block inside the loop, so up to `stages` steps are in flight.
//
// Why this shape (measured on the H200, llama-3.1-8b decode at batch 64; data in
// docs/perf/data/2026-11-30-skinny/): the first version copied the tiles with cp.async from every
// thread and synchronised the block at every step (commit 74b6853): 2.3-3.7 TB/s, slower than
// cuBLASLt. 256 rows a block: x is read from the L2 once per tile, and with 128 rows (x half the
// bytes of W) Nsight Compute put the L2 at 80% of its throughput with the DRAM at 73%.
//
// The slices of k of one tile form a thread block cluster of `split` blocks (1, 2, 4 or 8, along
// z): each block leaves its sums in shared memory, then block r adds the blocks' sums in rank
// order for a share of the outputs, read through distributed shared memory, and stores them. The
// split is the largest keeping every cluster resident at once (one block per SM: the ring takes
// 200 KiB) with at least `stages` steps per block.
#include "src/kernels/skinny_gemm.cuh"

#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

#include "itera/cuda/check.hpp"
#include "src/kernels/launch.cuh"
#include "src/kernels/mma.cuh"
#include "src/kernels/wgmma.cuh"

namespace itera::kernels::llm {
namespace {

using bf16 = __nv_bfloat16;

constexpr int threads = 384;       // the producer's warpgroup, then two consumers
constexpr int tile_rows = 256;     // rows of W per block, 128 per consumer warpgroup
constexpr int tile_k = 64;         // columns of k per step: one 128-byte swizzle row
constexpr int stages = 5;
constexpr int max_split = 8;
constexpr unsigned tile_bytes = 64 * tile_k * 2;           // a [64][64] bf16 tile: 8 KiB
constexpr unsigned stage_bytes = 5 * tile_bytes;           // W's four tiles, then x's
constexpr unsigned ring_bytes = stages * stage_bytes;      // 200 KiB
constexpr unsigned shared_bytes = ring_bytes + 2 * stages * 8;  // + the full and empty barriers
constexpr int sums_stride = tile_rows + 4;                 // fp32 [64 x rows][260]
static_assert(skinny_max_rows * sums_stride * 4 <= static_cast<int>(ring_bytes), "the sums reuse the ring");

__device__ __forceinline__ void barrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void barrier_expect_bytes(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void barrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Returns once the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void barrier_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_again:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_again;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// The [64][64] box of `map` at (column c, row r) into shared memory at dst, completing `bar`.
__device__ __forceinline__ void tma_load(unsigned dst, const CUtensorMap& map, int c, int r, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<std::uint64_t>(&map)), "r"(c), "r"(r), "r"(bar)
      : "memory");
}

__global__ void __launch_bounds__(threads, 1)
    skinny_gemm_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map, int m,
                       int n, int ksteps, int steps_per_slice, void* __restrict__ out, bool fp32_out, float beta) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int row0 = static_cast<int>(blockIdx.x) * tile_rows;
  const int split = static_cast<int>(gridDim.z), rank = static_cast<int>(blockIdx.z);
  const int first = min(ksteps, rank * steps_per_slice), steps = min(ksteps, first + steps_per_slice) - first;
  const unsigned ring = smem_addr(smem);
  const unsigned full = ring + ring_bytes, empty = full + stages * 8;  // barrier s at + 8 s

  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      barrier_init(full + 8 * s, 1);   // the producer's expect_tx arrival; the copies' bytes
      barrier_init(empty + 8 * s, 2);  // one arrival per consumer warpgroup
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  grid_dependents_launch();
  grid_dependency_wait();

  float d[2][8][4];  // a consumer's two 64-row tiles
  if (wg == 0) {
    if (tid == 0) {
      for (int j = 0; j < steps; ++j) {
        const int s = j % stages, use = j / stages;
        if (use > 0) barrier_wait(empty + 8 * s, static_cast<unsigned>((use - 1) & 1));
        const unsigned bar = full + 8 * s, base = ring + static_cast<unsigned>(s) * stage_bytes;
        barrier_expect_bytes(bar, stage_bytes);
        const int col = (first + j) * tile_k;
#pragma unroll
        for (int t = 0; t < 4; ++t) tma_load(base + t * tile_bytes, w_map, col, row0 + 64 * t, bar);
        tma_load(base + 4 * tile_bytes, x_map, col, 0, bar);
      }
    }
  } else {
    const int c = wg - 1;  // rows 128 c .. 128 c + 127 of the tile
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[h][j][e] = 0.0f;
    for (int j = 0; j < steps; ++j) {
      const int s = j % stages;
      barrier_wait(full + 8 * s, static_cast<unsigned>((j / stages) & 1));
      const unsigned base = ring + static_cast<unsigned>(s) * stage_bytes;
      const std::uint64_t a0 = wgmma::descriptor(base + static_cast<unsigned>(2 * c) * tile_bytes, 16, 1024);
      const std::uint64_t a1 = wgmma::advance(a0, tile_bytes);
      const std::uint64_t b = wgmma::descriptor(base + 4 * tile_bytes, 16, 1024);
      wgmma::fence_operands(d[0]);
      wgmma::fence_operands(d[1]);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < tile_k / 16; ++kk) {
        const unsigned step = static_cast<unsigned>(kk) * 32;
        wgmma::mma_64x64_ss(d[0], wgmma::advance(a0, step), wgmma::advance(b, step), true);
        wgmma::mma_64x64_ss(d[1], wgmma::advance(a1, step), wgmma::advance(b, step), true);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(d[0]);
      wgmma::fence_operands(d[1]);
      if (tid % 128 == 0) barrier_arrive(empty + 8 * s);  // this warpgroup is done reading buffer s
    }
  }
  __syncthreads();  // every copy landed and every product ran: the ring holds the sums now

  // D fragment (wgmma.cuh): warp `warp` of a consumer holds rows 16 warp + g (+ 8) of each of its
  // tiles, x rows 8j + 2 (lane % 4) (+ 1). Sums as [x row][W row], padded so that a warp's stores
  // hit 32 banks (the row stride is 4 banks past a multiple of 32).
  float* sums = reinterpret_cast<float*>(smem);
  if (wg > 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int g = lane / 4, t2 = 2 * (lane % 4), r = (wg - 1) * 128 + h * 64 + warp * 16 + g;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int t = 8 * j + t2;
        sums[t * sums_stride + r] = d[h][j][0];
        sums[(t + 1) * sums_stride + r] = d[h][j][1];
        sums[t * sums_stride + r + 8] = d[h][j][2];
        sums[(t + 1) * sums_stride + r + 8] = d[h][j][3];
      }
    }
  }
  const auto store = [&](int idx, float sum) {
    const int t = idx / tile_rows, r = idx % tile_rows, row = row0 + r;
    if (row >= m) return;
    const std::int64_t at = static_cast<std::int64_t>(t) * m + row;
    if (fp32_out) {
      float* o = static_cast<float*>(out);
      o[at] = beta != 0.0f ? sum + beta * o[at] : sum;
    } else {
      static_cast<bf16*>(out)[at] = __float2bfloat16_rn(sum);
    }
  };
  const int outputs = n * tile_rows;
  if (split == 1) {
    __syncthreads();
    for (int idx = tid; idx < outputs; idx += threads) store(idx, sums[(idx / tile_rows) * sums_stride + idx % tile_rows]);
    return;
  }
  namespace cg = cooperative_groups;
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
  (void)w_map, (void)x_map, (void)m, (void)n, (void)ksteps, (void)steps_per_slice, (void)out, (void)fp32_out,
      (void)beta;
  __trap();  // launched only where wgmma_available()
#endif
}

// ITERA_LLM_SKINNY_GEMM=0: cuBLASLt for these products too (A/B measurements).
bool skinny_off() {
  static const bool off = !env_switch("ITERA_LLM_SKINNY_GEMM", true);
  return off;
}

// cuTensorMapEncodeTiled from the driver, found once through the runtime (no link to libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    ITERA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || p == nullptr)
      throw std::runtime_error("skinny_gemm: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A row-major [rows][k] bf16 matrix read as [64][64] boxes, 128-byte swizzle; boxes past the last
// row are filled with zeros.
CUtensorMap tile_map(const bf16* base, std::int64_t rows, std::int64_t k) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {tile_k, 64};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(base), dims, strides,
                                    box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("skinny_gemm: cuTensorMapEncodeTiled failed (error " + std::to_string(static_cast<int>(r)) +
                             ") for a [" + std::to_string(rows) + "][" + std::to_string(k) + "] bf16 matrix");
  return map;
}

// Clusters of `split` blocks of this kernel resident at once on the current device, asked once
// per (device, split).
int resident_clusters(int split) {
  static std::mutex known_mutex;
  static std::array<std::array<int, max_split + 1>, 64> known{};
  int device = 0;
  ITERA_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard lock(known_mutex);
  int& slot = known.at(static_cast<std::size_t>(device)).at(static_cast<std::size_t>(split));
  if (slot != 0) return slot;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1, 1, static_cast<unsigned>(split));
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = shared_bytes;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 1;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = static_cast<unsigned>(split);
  config.attrs = &cluster;
  config.numAttrs = 1;
  int clusters = 0;
  ITERA_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, skinny_gemm_kernel, &config));
  slot = clusters > 0 ? clusters : -1;
  return slot;
}

}  // namespace

bool skinny_gemm_supported(std::int64_t n, std::int64_t m, std::int64_t k, const void* w, const void* x,
                           const void* out) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return n >= 1 && n <= skinny_max_rows && m >= 1 && m < (std::int64_t{1} << 30) && k >= tile_k && k % tile_k == 0 &&
         k < (std::int64_t{1} << 30) && aligned(w) && aligned(x) && aligned(out) && !skinny_off() &&
         wgmma_available();
}

void skinny_gemm(const bf16* w, std::int64_t m, std::int64_t k, const bf16* x, std::int64_t n, void* out,
                 bool fp32_out, float beta, cudaStream_t stream) {
  static const bool ready = [] {
    ITERA_CUDA_CHECK(cudaFuncSetAttribute(skinny_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(shared_bytes)));
    return true;
  }();
  (void)ready;
  const std::int64_t tiles = (m + tile_rows - 1) / tile_rows, ksteps = k / tile_k;
  int split = 1;
  for (int next = 2; next <= max_split; next *= 2) {
    if (tiles * next > device_multiprocessors() || ksteps / next < stages || tiles > resident_clusters(next)) break;
    split = next;
  }
  const int per_slice = static_cast<int>((ksteps + split - 1) / split);
  const CUtensorMap w_map = tile_map(w, m, k), x_map = tile_map(x, n, k);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(tiles), 1, static_cast<unsigned>(split));
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = shared_bytes;
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
  ITERA_CUDA_CHECK(cudaLaunchKernelEx(&config, skinny_gemm_kernel, w_map, x_map, static_cast<int>(m),
                                      static_cast<int>(n), static_cast<int>(ksteps), per_slice, out, fp32_out, beta));
}

}  // namespace itera::kernels::llm
