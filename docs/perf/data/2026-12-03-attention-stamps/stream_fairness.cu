// Probe (2026-12-03, run 4): do the SMs of an H200 get equal shares of DRAM bandwidth when every
// SM streams? Blocks read disjoint parts of a buffer with 16-byte loads and no arithmetic beyond
// an XOR; each block stamps its start and end (globaltimer) and its SM.
//   static:  block b reads bytes [b * share, (b + 1) * share) (the wide decode attention's shape:
//            one (row, kv head) pair a block, all blocks resident in one wave)
//   dynamic: blocks claim 32 KB chunks from a global counter (claimed one ahead) until none is left
// Per variant: time a launch (events over 20 launches), the spread of the blocks' ends within the
// last launch, and (dynamic) the chunks each SM took.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o stream_fairness stream_fairness.cu && ./stream_fairness
#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "probe_common.cuh"

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

struct stamp {
  unsigned long long start, end;
  unsigned sm, chunks;
};

// n16 16-byte words from p by the block, U loads a thread in flight.
template <int U>
__device__ __forceinline__ unsigned read_range(const uint4* p, long long n16) {
  unsigned acc = 0;
  for (long long i = threadIdx.x; i < n16; i += static_cast<long long>(blockDim.x) * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long k = i + static_cast<long long>(u) * blockDim.x;
      v[u] = k < n16 ? load_stream(p + k) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  return acc;
}

template <int U>
__global__ void static_kernel(const uint4* buf, long long share16, stamp* st, unsigned* sink) {
  const unsigned long long t0 = now_ns();
  const unsigned acc = read_range<U>(buf + blockIdx.x * share16, share16);
  __syncthreads();
  if (threadIdx.x == 0) st[blockIdx.x] = {t0, now_ns(), sm_id(), 1};
  if (acc == 0x12345678u) sink[0] = acc;  // keeps the loads
}

template <int U>
__global__ void dynamic_kernel(const uint4* buf, long long chunk16, unsigned chunks, unsigned* counter, stamp* st,
                               unsigned* sink) {
  // counter[0]: the next chunk; counter[1]: blocks done (the last resets both for the next launch).
  __shared__ unsigned next;
  const unsigned long long t0 = now_ns();
  unsigned acc = 0, taken = 0;
  if (threadIdx.x == 0) next = atomicAdd(counter, 1u);
  __syncthreads();
  unsigned c = next;
  while (c < chunks) {
    __syncthreads();  // everyone has read `next`
    if (threadIdx.x == 0) next = atomicAdd(counter, 1u);  // one ahead: its latency under this chunk
    acc ^= read_range<U>(buf + c * chunk16, chunk16);
    ++taken;
    __syncthreads();
    c = next;
  }
  if (threadIdx.x == 0) {
    st[blockIdx.x] = {t0, now_ns(), sm_id(), taken};
    if (atomicAdd(counter + 1, 1u) == gridDim.x - 1) counter[0] = counter[1] = 0;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

struct result {
  double us;
  std::vector<stamp> st;
};

template <class Launch>
result time_it(Launch&& launch, stamp* d_st, int blocks) {
  result r{us_a_launch(launch), std::vector<stamp>(static_cast<std::size_t>(blocks))};
  CHECK(cudaMemcpy(r.st.data(), d_st, sizeof(stamp) * static_cast<std::size_t>(blocks), cudaMemcpyDeviceToHost));
  return r;
}

void report(const char* name, double mb, int blocks, const result& r) {
  unsigned long long s0 = ~0ull, e1 = 0;
  for (const auto& s : r.st) s0 = std::min(s0, s.start), e1 = std::max(e1, s.end);
  std::vector<double> ends;
  std::map<unsigned, std::pair<double, unsigned>> per_sm;  // last end, chunks
  for (const auto& s : r.st) {
    ends.push_back((s.end - s0) / 1e3);
    auto& v = per_sm[s.sm];
    v.first = std::max(v.first, (s.end - s0) / 1e3);
    v.second += s.chunks;
  }
  std::sort(ends.begin(), ends.end());
  auto q = [&](double p) { return ends[static_cast<std::size_t>(p * (ends.size() - 1))]; };
  unsigned cmin = ~0u, cmax = 0;
  for (const auto& [sm, v] : per_sm) cmin = std::min(cmin, v.second), cmax = std::max(cmax, v.second);
  std::printf("%-30s %8.1f MB %4d blocks  %8.2f us a launch (%.2f TB/s)  span %7.2f us  block ends p0 %.2f p10 %.2f "
              "p50 %.2f p90 %.2f max %.2f  units an SM %u-%u\n",
              name, mb, blocks, r.us, mb / r.us, (e1 - s0) / 1e3, q(0), q(0.1), q(0.5), q(0.9), q(1.0),
              cmin, cmax);
  std::printf("  per SM (id:last end us:units)");
  for (const auto& [sm, v] : per_sm) std::printf(" %u:%.1f:%u", sm, v.first, v.second);
  std::printf("\n");
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, sms);
  const std::size_t cap = std::size_t(1) << 30;
  uint4* buf = nullptr;
  unsigned *sink = nullptr, *counter = nullptr;
  stamp* st = nullptr;
  CHECK(cudaMalloc(&buf, cap));
  CHECK(cudaMemset(buf, 0x5a, cap));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMalloc(&counter, 8));
  CHECK(cudaMemset(counter, 0, 8));
  const int max_blocks = 8 * sms;
  CHECK(cudaMalloc(&st, sizeof(stamp) * max_blocks));
  constexpr long long chunk = 32 << 10;  // one pass of 64 threads x 32 loads
  // The attention's bytes at batch 64 (512 pairs x 544 keys x 128 x 2 x 2), and 1 GiB.
  for (const long long total : {512LL * 544 * 512, static_cast<long long>(cap)}) {
    const double mb = total / 1e6;
    for (const int per_sm : {4, 2}) {
      const int blocks = per_sm * sms;
      // static: as the attention, a share a block (512 blocks for the attention's bytes, as it runs)
      const int sblocks = total == 512LL * 544 * 512 && per_sm == 4 ? 512 : blocks;
      const long long share16 = total / 16 / sblocks;
      char name[64];
      std::snprintf(name, sizeof name, "static %d blocks, 64 thr, U32", sblocks);
      report(name, share16 * 16.0 * sblocks / 1e6, sblocks,
             time_it([&] { static_kernel<32><<<sblocks, 64>>>(buf, share16, st, sink); }, st, sblocks));
      std::snprintf(name, sizeof name, "static %d blocks, 256 thr, U8", sblocks);
      report(name, share16 * 16.0 * sblocks / 1e6, sblocks,
             time_it([&] { static_kernel<8><<<sblocks, 256>>>(buf, share16, st, sink); }, st, sblocks));
      const auto chunks = static_cast<unsigned>(total / chunk);
      std::snprintf(name, sizeof name, "dynamic %d blocks, 64 thr, U32", blocks);
      report(name, chunks * chunk / 1e6, blocks,
             time_it([&] { dynamic_kernel<32><<<blocks, 64>>>(buf, chunk / 16, chunks, counter, st, sink); }, st, blocks));
      std::snprintf(name, sizeof name, "dynamic %d blocks, 256 thr, U8", blocks);
      report(name, chunks * chunk / 1e6, blocks,
             time_it([&] { dynamic_kernel<8><<<blocks, 256>>>(buf, chunk / 16, chunks, counter, st, sink); }, st, blocks));
    }
  }
  CHECK(cudaGetLastError());
  return 0;
}
