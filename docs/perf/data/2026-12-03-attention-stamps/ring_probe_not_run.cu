// Prepared, not run (device time ran out, 2026-12-03): the wide decode attention's way of reading
// K and V, without its arithmetic, against stream_fairness.cu's plain stream on one machine. Each
// block streams a (row, kv head) pair's bytes (K then V, 544 keys x 256 bytes each, as run 1's
// launch 1000) through a ring of three 16 KB stages (8 KB of K and 8 KB of V a stage) filled by
// 16-byte cp.async, a wait and a barrier a stage, and a few XORs from the landed stage; 512 blocks
// of 64 threads (four an SM, as the kernel), or of 128 threads (the loader form). Stamps per block
// as in stream_fairness.cu. If the 64-thread ring shows the attention's spread by SM (run 5: loop
// ends 27.9-36.2 us against the stream's 29.3-32.3), the copy path is the cause; if not, the
// kernel's compute and barriers are.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o ring_probe ring_probe_not_run.cu && ./ring_probe
#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "probe_common.cuh"

__device__ __forceinline__ void cp_async16(void* smem, const void* global) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(global) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

struct stamp {
  unsigned long long start, first, end;
  unsigned sm;
};

constexpr int stages = 3, tile_keys = 32, row_bytes = 256, half_tile = tile_keys * row_bytes;  // 8 KB

// Block b: pair b's K at k + b * pair_bytes and V at v + b * pair_bytes, `keys` rows each.
template <int Threads>
__global__ void __launch_bounds__(Threads) ring_kernel(const unsigned char* k, const unsigned char* v,
                                                       long long pair_bytes, int keys, stamp* st, unsigned* sink) {
  extern __shared__ __align__(128) unsigned char ring[];  // stages x (K tile, V tile)
  const unsigned long long t0 = now_ns();
  const unsigned char* kb = k + blockIdx.x * pair_bytes;
  const unsigned char* vb = v + blockIdx.x * pair_bytes;
  const int tiles = (keys + tile_keys - 1) / tile_keys;
  const auto issue = [&](int j) {
    if (j < tiles) {
      const int rows = min(tile_keys, keys - j * tile_keys);
      unsigned char* kt = ring + (j % stages) * 2 * half_tile;
      for (int i = static_cast<int>(threadIdx.x); i < rows * row_bytes / 16; i += Threads) {
        cp_async16(kt + i * 16, kb + static_cast<long long>(j) * half_tile + i * 16);
        cp_async16(kt + half_tile + i * 16, vb + static_cast<long long>(j) * half_tile + i * 16);
      }
    }
    cp_async_commit();
  };
  for (int j = 0; j < stages; ++j) issue(j);
  unsigned acc = 0;
  unsigned long long first = 0;
  for (int j = 0; j < tiles; ++j) {
    if (j == 0)
      cp_async_wait<stages - 1>();
    else
      cp_async_wait<stages - 2>();
    __syncthreads();
    if (j == 0) first = now_ns();
    if (j > 0) issue(j + stages - 1);
    const unsigned* w = reinterpret_cast<const unsigned*>(ring + (j % stages) * 2 * half_tile);
    acc ^= w[threadIdx.x] ^ w[threadIdx.x + 2048];  // a word of K and of V a thread
  }
  cp_async_wait<0>();
  __syncthreads();
  if (threadIdx.x == 0) st[blockIdx.x] = {t0, first, now_ns(), sm_id()};
  if (acc == 0x12345678u) sink[0] = acc;
}

template <int Threads>
void run(const unsigned char* k, const unsigned char* v, long long pair_bytes, int keys, int blocks, stamp* d_st,
         unsigned* sink) {
  const int smem = stages * 2 * half_tile;
  CHECK(cudaFuncSetAttribute(ring_kernel<Threads>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const auto launch = [&] { ring_kernel<Threads><<<blocks, Threads, smem>>>(k, v, pair_bytes, keys, d_st, sink); };
  const double us = us_a_launch(launch);
  std::vector<stamp> st(static_cast<std::size_t>(blocks));
  CHECK(cudaMemcpy(st.data(), d_st, sizeof(stamp) * st.size(), cudaMemcpyDeviceToHost));
  unsigned long long s0 = ~0ull;
  for (const auto& s : st) s0 = std::min(s0, s.start);
  std::vector<double> ends, firsts;
  std::map<unsigned, double> sm_end;
  for (const auto& s : st) {
    ends.push_back((s.end - s0) / 1e3);
    firsts.push_back((s.first - s0) / 1e3);
    sm_end[s.sm] = std::max(sm_end[s.sm], (s.end - s0) / 1e3);
  }
  std::sort(ends.begin(), ends.end());
  std::sort(firsts.begin(), firsts.end());
  auto q = [](const std::vector<double>& v, double p) { return v[static_cast<std::size_t>(p * (v.size() - 1))]; };
  const double mb = 2.0 * keys * row_bytes * blocks / 1e6;
  std::printf("ring, %d threads a block, %d blocks, %.1f MB: %.2f us a launch (%.2f TB/s); tile 0 p50 %.2f; ends min "
              "%.2f p10 %.2f p50 %.2f p90 %.2f max %.2f\n",
              Threads, blocks, mb, us, mb / us, q(firsts, 0.5), q(ends, 0), q(ends, 0.1),
              q(ends, 0.5), q(ends, 0.9), q(ends, 1));
  std::printf("  per SM (id:last end us)");
  for (const auto& [sm, e] : sm_end) std::printf(" %u:%.1f", sm, e);
  std::printf("\n");
}

int main() {
  constexpr int blocks = 512, keys = 544;
  constexpr long long pair_bytes = 596LL * row_bytes;  // the engine's max_context for that test, a pair's stride
  unsigned char *k = nullptr, *v = nullptr;
  unsigned* sink = nullptr;
  stamp* st = nullptr;
  CHECK(cudaMalloc(&k, pair_bytes * blocks));
  CHECK(cudaMalloc(&v, pair_bytes * blocks));
  CHECK(cudaMemset(k, 0x5a, pair_bytes * blocks));
  CHECK(cudaMemset(v, 0xa5, pair_bytes * blocks));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMalloc(&st, sizeof(stamp) * blocks));
  for (int pass = 0; pass < 2; ++pass) {
    run<64>(k, v, pair_bytes, keys, blocks, st, sink);
    run<128>(k, v, pair_bytes, keys, blocks, st, sink);
  }
  CHECK(cudaGetLastError());
  return 0;
}
