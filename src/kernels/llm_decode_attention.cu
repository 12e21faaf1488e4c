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
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "itera/cuda/check.hpp"
#include "src/kernels/launch.cuh"
#include "src/kernels/llm_kernels.cuh"

namespace itera::kernels::llm {
namespace {

using itera::kernels::device_is_sm90_or_later;
using itera::kernels::grid_dependency_wait;
using itera::kernels::grid_dependents_launch;
using itera::kernels::programmatic_launch_enabled;

constexpr int decode_warps = 4;
constexpr int decode_threads = decode_warps * 32;
constexpr int tile_keys = 16;
constexpr int stages = 3;
// The most blocks one row's keys are split over (a portable cluster size).
constexpr int max_splits = 8;

// Shared memory of decode_attention_kernel<HD, MG>, in bytes, every part 16-byte aligned:
//   q      fp32 [MG][2][HD/2 + 4]      (the two halves of a head apart by 4 banks)
//   ring   per warp, stages x (K tile [16][HD + 8] bf16 | V tile [16][HD] bf16)
//   p      per warp, fp32 [16][MG]
// After the key loop the ring is reused for the warps' states, fp32 [warps][MG][HD + 2], and the
// block's merged state, fp32 [MG][HD + 2] (both fit: a ring holds far more).
template <int HD, int MG>
struct decode_layout {
  static constexpr int q_half = HD / 2 + 4;
  static constexpr int k_row = HD + 8;  // bf16 elements: rows 16 bytes apart in bank terms
  static constexpr std::size_t q = 0;
  static constexpr std::size_t ring = q + static_cast<std::size_t>(MG) * 2 * q_half * 4;
  static constexpr std::size_t k_tile = static_cast<std::size_t>(tile_keys) * k_row * 2;
  static constexpr std::size_t v_tile = static_cast<std::size_t>(tile_keys) * HD * 2;
  static constexpr std::size_t stage = k_tile + v_tile;
  static constexpr std::size_t warp_ring = stages * stage;
  static constexpr std::size_t p = ring + decode_warps * warp_ring;
  static constexpr std::size_t bytes = p + static_cast<std::size_t>(decode_warps) * tile_keys * MG * 4;
  static constexpr std::size_t states = static_cast<std::size_t>(decode_warps + 1) * MG * (HD + 2) * 4;
  static_assert(states <= decode_warps * warp_ring, "the warps' states must fit in the ring");
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Eight bf16 (16 bytes) widened to fp32: a bf16 is the high half of its fp32.
__device__ __forceinline__ void widen8(const uint4& v, float* f) {
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f[2 * j] = __uint_as_float(words[j] << 16);
    f[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
  }
}

int multiprocessors() {
  static const int sms = [] {
    int device = 0, count = 0;
    ITERA_CUDA_CHECK(cudaGetDevice(&device));
    ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  return sms;
}

template <int HD, int MG>
__global__ void __launch_bounds__(decode_threads)
    decode_attention_kernel(const bf16* __restrict__ qkv, const bf16* __restrict__ k_cache,
                            const bf16* __restrict__ v_cache, const std::int32_t* __restrict__ start,
                            attention_shape s, float scale_log2, bf16* __restrict__ out) {
  using L = decode_layout<HD, MG>;
  constexpr int HALF = HD / 2;
  // P V: each lane owns DPL consecutive dims of a V row; LPR lanes cover a row, KS key subsets.
  constexpr int DPL = HD >= 128 ? HD / 32 : 4, LPR = HD / DPL, KS = 32 / LPR;
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


  const bf16* kb = k_cache + (seq * s.kv_heads + kvh) * s.max_context * HD;
  const bf16* vb = v_cache + (seq * s.kv_heads + kvh) * s.max_context * HD;
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
      bf16* kt = reinterpret_cast<bf16*>(ring + b * L::stage);
      bf16* vt = reinterpret_cast<bf16*>(ring + b * L::stage + L::k_tile);
      constexpr int chunks = HD / 8;  // 16-byte chunks per row
#pragma unroll
      for (int c = lane; c < tile_keys * chunks; c += 32) {
        const int r = c / chunks, x = c % chunks;
        const std::int64_t key = min(k0 + r, end - 1);
        cp_async16(kt + r * L::k_row + x * 8, kb + key * HD + x * 8);
        cp_async16(vt + r * HD + x * 8, vb + key * HD + x * 8);
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
    q_s[(g * 2 + d / HALF) * L::q_half + d % HALF] =
        __bfloat162float(qkv[t * width + (kvh * group + g) * HD + d]);
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
    const bf16* kt = reinterpret_cast<const bf16*>(ring + b * L::stage);
    const bf16* vt = reinterpret_cast<const bf16*>(ring + b * L::stage + L::k_tile);
    const std::int64_t k0 = begin + (warp + i * decode_warps) * tile_keys;

    // Scores of key kl over half `half` of the dims, every head of the group.
    float sc[MG];
#pragma unroll
    for (int g = 0; g < MG; ++g) sc[g] = 0.0f;
    const bf16* krow = kt + kl * L::k_row + half * HALF;
#pragma unroll
    for (int c = 0; c < HALF / 8; ++c) {
      float kf[8];
      widen8(*reinterpret_cast<const uint4*>(krow + c * 8), kf);
#pragma unroll
      for (int g = 0; g < MG; ++g) {
        if (g >= group) continue;
        const float4* qv = reinterpret_cast<const float4*>(q_s + (g * 2 + half) * L::q_half + c * 8);
        const float4 a = qv[0], bq = qv[1];
        sc[g] = fmaf(a.x, kf[0], sc[g]);
        sc[g] = fmaf(a.y, kf[1], sc[g]);
        sc[g] = fmaf(a.z, kf[2], sc[g]);
        sc[g] = fmaf(a.w, kf[3], sc[g]);
        sc[g] = fmaf(bq.x, kf[4], sc[g]);
        sc[g] = fmaf(bq.y, kf[5], sc[g]);
        sc[g] = fmaf(bq.z, kf[6], sc[g]);
        sc[g] = fmaf(bq.w, kf[7], sc[g]);
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
      if constexpr (DPL == 4) {
        const uint2 raw = *reinterpret_cast<const uint2*>(vt + k * HD + dim0);
        vf[0] = __uint_as_float(raw.x << 16);
        vf[1] = __uint_as_float(raw.x & 0xffff0000u);
        vf[2] = __uint_as_float(raw.y << 16);
        vf[3] = __uint_as_float(raw.y & 0xffff0000u);
      } else {
#pragma unroll
        for (int d = 0; d < DPL; d += 8) widen8(*reinterpret_cast<const uint4*>(vt + k * HD + dim0 + d), vf + d);
      }
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
      out[t * q_dim + (kvh * group + g) * HD + d] = __float2bfloat16_rn(st[d] / st[HD + 1]);
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
    out[t * q_dim + (kvh * group + g) * HD + d] = __float2bfloat16_rn(num / den);
  }
  cluster.sync();  // keep every block's shared memory alive until the others have read it
#else
  __trap();  // splits > 1 is launched on sm_90 and later only
#endif
}

using decode_fn = void (*)(const bf16*, const bf16*, const bf16*, const std::int32_t*, attention_shape, float, bf16*);

struct decode_choice {
  decode_fn fn = nullptr;
  std::size_t shared_bytes = 0;
};

template <int HD>
decode_choice choose_group(std::int64_t group) {
  if (group <= 4) return {decode_attention_kernel<HD, 4>, decode_layout<HD, 4>::bytes};
  return {decode_attention_kernel<HD, 8>, decode_layout<HD, 8>::bytes};
}

decode_choice decode_kernel_for(const attention_shape& s) {
  if (s.rows_per_seq != 1 || s.kv_heads < 1 || s.heads % s.kv_heads != 0 || s.heads / s.kv_heads > 8) return {};
  const std::int64_t group = s.heads / s.kv_heads;
  switch (s.head_dim) {
    case 16: return choose_group<16>(group);
    case 32: return choose_group<32>(group);
    case 64: return choose_group<64>(group);
    case 128: return choose_group<128>(group);
    case 256: return choose_group<256>(group);
    default: return {};
  }
}

}  // namespace

// The fewest splits (1, 2, 4 or 8) giving at least two blocks per SM, on devices with clusters.
// Measured on the H200 with the previous kernel: at batch 64 (512 pairs) splitting only added
// merges; at batch 1 (8 pairs) eight blocks per pair ran 499 us a step against 711 us for four.
int decode_attention_splits(std::int64_t pairs) {
  if (!device_is_sm90_or_later()) return 1;
  int splits = 1;
  while (splits < max_splits && pairs * splits < 2 * static_cast<std::int64_t>(multiprocessors())) splits *= 2;
  return splits;
}

bool decode_attention_supported(const attention_shape& s) { return decode_kernel_for(s).fn != nullptr; }

void prepare_decode_attention(const attention_shape& s) {
  if (const decode_choice d = decode_kernel_for(s); d.fn && d.shared_bytes > 48 * 1024)
    ITERA_CUDA_CHECK(
        cudaFuncSetAttribute(d.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(d.shared_bytes)));
}

bool decode_attention(const bf16* qkv, const bf16* k_cache, const bf16* v_cache, const std::int32_t* start,
                      std::int64_t rows, const attention_shape& s, float scale, bf16* out, cudaStream_t stream) {
  const decode_choice d = decode_kernel_for(s);
  if (!d.fn) return false;
  const int splits = decode_attention_splits(rows * s.kv_heads);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(rows), static_cast<unsigned>(s.kv_heads), static_cast<unsigned>(splits));
  config.blockDim = dim3(decode_threads);
  config.dynamicSmemBytes = d.shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
  unsigned count = 0;
  if (splits > 1) {
    attrs[count].id = cudaLaunchAttributeClusterDimension;
    attrs[count].val.clusterDim.x = 1;
    attrs[count].val.clusterDim.y = 1;
    attrs[count].val.clusterDim.z = static_cast<unsigned>(splits);
    ++count;
  }
  if (programmatic_launch_enabled()) {  // launch.cuh
    attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = attrs;
  config.numAttrs = count;
  // Scores in base 2: exp(x) = exp2(x * log2(e)).
  const float scale_log2 = scale * 1.4426950408889634f;
  ITERA_CUDA_CHECK(cudaLaunchKernelEx(&config, d.fn, qkv, k_cache, v_cache, start, s, scale_log2, out));
  return true;
}

}  // namespace itera::kernels::llm
