// Every layer of a batch-1 decode step in one persistent kernel (llm_kernels.cuh: decode_step).
//
// Why. At batch 1 a step reads ~15 GB of weights once, and the per-layer kernels (fused norm and
// product, RoPE, attention, products) each pay a launch, a ramp to full bandwidth and a tail: on
// the H200 ~25 us a layer over what the bytes take at the copy ceiling (docs/perf). Here the
// weights never wait on the arithmetic: one producer warp per SM streams its share of every
// product's rows, layer after layer, into a ring of shared-memory slots with the bulk copy engine
// (cp.async.bulk, one contiguous run of whole rows a slot), while the consumer warps wait only for
// what really depends on the step: the vector a product multiplies, behind a grid-wide barrier.
// While the consumers sit at a barrier the ring keeps filling, so DRAM stays busy across it.
//
// Work. gridDim.x = G blocks, one per SM (resident together: the launch checks it), each of
// step_consumers consumer warps and one producer warp. Per layer, phases with a grid barrier
// after each:
//   qkv      x_s = rms_norm(x, input_norm); qkv = x_s Wqkv^T (rounded to A)
//   attend   (kv head, split) items: q of the head's group and, in the item holding the new
//            position, k and v from qkv (bias added, RoPE, as bias_rope_store rounds them); k and
//            v stored into the cache; the split's online-softmax state into `part`. The item's
//            cached keys and values (positions before the new one) are in shared memory by then:
//            the producer bulk-copies them once the consumers have begun the layer (where they
//            do not fit, a bulk prefetch into L2 and ld.global.cg)
//   merge    per query head, the splits' states merged in split order into attn (A)
//   o        x += attn Wo^T
//   gate_up  x_s = rms_norm(x, post_norm); act = A(silu(A(gate)) * A(up)) of x_s Wgu^T, the
//            block that sums gate row i summing up row i too (a paired phase_geometry; where
//            two rows do not fit a slot, gate_up is stored and the down phase forms act)
//   down     x_s = act; x += x_s Wdown^T
// A product's rows are cut into tiles of as many whole rows as fit a slot (slot_bytes), dealt to
// the blocks round-robin (tile t to block t % G), so the producer and the consumers of a block
// walk the same list of tiles. Within a tile each consumer thread takes 16-byte chunks
// tid, tid + 256, ... of every row (x_s read from shared memory) and each warp sums its lanes
// (16-bit weights), or the warps split k and multiply on tensor cores (fp8: consume_fp8_tiles);
// the warps' sums of the block's rows are added in warp order at the phase's end: the results
// do not change from run to run.
//
// Data the kernel itself writes (x, qkv, part, attn, gate_up) is read with ld.global.cg (L2, not a
// possibly stale L1 line) after the barrier that orders it.
//
// Where the time goes (H200, llama-3.1-8b; docs/perf/2026-11-30-decode-step-4.md took the kernel
// apart): the producer alone streams a layer's weights at ~4.6 TB/s; the whole kernel spends ~22.5
// us a layer more, for bf16 and fp8 weights alike. Taken out one at a time: the five grid barriers
// (fp8 11.7 us, bf16 6.1), the attention (6.5), the products' arithmetic (5.3, 3.1), the norms and
// staging (4.2, 3.3), the stores at a product's end (2.5, 1.5); they overlap, so they do not add.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "itera/cuda/check.hpp"
#include "src/kernels/common.cuh"
#include "src/kernels/launch.cuh"
#include "src/kernels/llm_formulas.cuh"
#include "src/kernels/llm_kernels.cuh"
#include "src/kernels/mma.cuh"
#include "src/kernels/tma.cuh"

// For sm_80/89 (the release build's other architectures) the kernel body is a trap, which leaves
// its helpers unreferenced there: nvcc's "declared but never referenced" is expected.
#pragma nv_diag_suppress 177

namespace itera::kernels::llm {
namespace {

constexpr int step_consumers = 8;  // consumer warps
constexpr int consumer_threads = step_consumers * 32;
constexpr int step_threads = consumer_threads + 32;  // + the producer warp
constexpr int slot_bytes = 32 * 1024;
constexpr int slots = 5;
constexpr int step_head_dim = 128;  // the attention's lane layout: 4 dims a lane
constexpr int max_group = 8;        // query heads per kv head
constexpr int max_tile_rows = 8;    // rows a tile holds at most (the consumers' accumulators)
constexpr int part_stride = step_head_dim + 2;  // a split's state of one head: acc[HD], m, l

// One weight phase's geometry (host-computed): rows of `in` inputs, `row_bytes` each, tiles of
// tile_rows rows.
// Paired (gate_up): the rows are two halves of `half` rows (gate, then up) and a tile holds
// tile_rows / 2 rows of each at the same index, so the block that sums gate row i also sums up
// row i and forms SwiGLU itself.
// Parts (fp8 rows longer than a slot's eighth): a tile of tile_rows rows is copied and multiplied
// in `parts` slots of k_part inputs each (the last one shorter), the row sums carried across them.
struct phase_geometry {
  int rows = 0, in = 0, row_bytes = 0, tile_rows = 0, tiles = 0, half = 0;
  int parts = 1, k_part = 0;  // k_part: inputs (and bytes: fp8) a part of a row holds
  // Weight row of row r of tile t, and whether it exists.
  __device__ int row_of(int t, int r) const {
    if (!half) return t * tile_rows + r;
    const int h = tile_rows / 2;
    return r < h ? t * h + r : half + t * h + (r - h);
  }
  __device__ bool holds(int t, int r) const {
    return half ? t * (tile_rows / 2) + r % (tile_rows / 2) < half : t * tile_rows + r < rows;
  }
};
enum phase_index { p_qkv = 0, p_o = 1, p_gate_up = 2, p_down = 3, weight_phases = 4 };

struct step_params {
  const decode_layer* layers;
  int layers_count, hidden, heads, kv_heads, group, intermediate, max_context, splits;
  int red_rows;  // capacity of the consumers' per-warp row sums
  // Keys an attention item's cached K and V hold in shared memory (the producer copies them there
  // as it starts each layer), 0 where they do not fit: the item reads them from L2 (prefetched).
  int kv_keys;
  unsigned kv_offset;  // where in shared memory: K [kv_keys][128], then V [kv_keys][128]
  unsigned kv_elem;    // bytes a cached value
  float eps, scale_log2;
  phase_geometry geo[weight_phases];
  float* x;
  void* qkv;
  void* attn;
  void* gate_up;
  const float* inv_freq;
  const std::int32_t* start;
  float* part;
  unsigned* counter;     // the grid barrier's, then one per kv head (the attention's arrivals)
  unsigned long long* trace;       // null, or [layers][blocks][trace_marks] globaltimer stamps
  unsigned long long* tile_trace;  // null, or [tile_trace_tiles][4] of block 0: see stamp_tile
};
// The trace's marks of a layer: phase k runs from mark k to mark k + 1 (phase_marks of them), then
// the attention item's own and each grid barrier's fence (barrier i: mark_fenced + i).
constexpr int phase_marks = 15;
constexpr int mark_item_counted = 15;  // the item's split stored and its arrival counted (a merge may follow)
constexpr int mark_fenced = 16;        // 5 barriers a layer
constexpr int mark_qkv_in_place = 21, mark_keys_done = 22, mark_part_fenced = 23;
constexpr int trace_marks = 24;
constexpr int tile_trace_tiles = 16384, max_traced_layers = 1024;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// ITERA_LLM_DECODE_STEP_TRACE: mark k of this block in this layer (thread 0 only).
__device__ __forceinline__ void stamp_mark(const step_params& p, int layer, int k) {
  if (p.trace && threadIdx.x == 0)
    p.trace[(static_cast<std::size_t>(layer) * gridDim.x + blockIdx.x) * trace_marks + k] = global_ns();
}

// Dynamic shared memory: the ring, then x_s (the vector of the phase, of A; the attention's
// scratch reuses it), the warps' row sums, the barriers.
struct step_layout {
  std::size_t xs = 0, red = 0, bars = 0, bytes = 0;  // offsets (the ring at 0) and the total
};
// Barriers after the ring's: full[slots], empty[slots], then the K/V copy's full and free; then 64
// floats of scratch.
constexpr std::size_t bars_bytes = 2 * slots * 8 + 2 * 8;
step_layout layout_for(std::int64_t xs_bytes, int red_rows) {
  step_layout l;
  l.xs = static_cast<std::size_t>(slots) * slot_bytes;
  l.red = l.xs + (static_cast<std::size_t>(xs_bytes) + 15) / 16 * 16;
  l.bars = l.red + static_cast<std::size_t>(step_consumers) * red_rows * 4;
  l.bars = (l.bars + 15) / 16 * 16;
  l.bytes = l.bars + bars_bytes + 64 * 4;
  return l;
}

__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, %0;" ::"n"(consumer_threads) : "memory"); }

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every block's writes before it are visible to every block after it. Consumers only (the
// producer never waits on one); `target` = barriers passed so far x G. The block's threads meet at
// bar.sync, then thread 0's release add publishes what they wrote (release is cumulative: it
// orders the writes the barrier ordered before it), and its acquire load, with the bar.sync after,
// orders the reads after. The fence every thread issued before (fence.sc.gpu x 256) cost the step
// 0.8% (bf16) and 2% (fp8 weights): docs/perf/2026-11-30-decode-step-3.md.
template <class Mark>
__device__ __forceinline__ void grid_barrier(unsigned* counter, unsigned target, const Mark& fenced) {
  consumer_sync();
  fenced();  // the trace's
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    while (load_acquire(counter) < target) {
    }
  }
  consumer_sync();
}

// Weights are read once a step: their lines go first when L2 needs room, so that what the step
// reads again (x, qkv, the attention's keys prefetched ahead, its parts) stays (H200: -0.5% a step,
// docs/perf/2026-11-30-decode-step-2.md).
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}

__device__ __forceinline__ uint4 ldcg4(const void* p) { return __ldcg(static_cast<const uint4*>(p)); }

// qkv[col] (this kernel wrote it: read from L2) plus the bias, as bias_rope_store adds them.
template <class A>
__device__ __forceinline__ float load_activation(const A* qkv, const A* bias, int col) {
  return to_float(__ldcg(qkv + col)) + (bias ? to_float(bias[col]) : 0.0f);
}

// Four consecutive cache elements widened to fp32 (8 bytes of a 16-bit cache, 4 of an fp8 one).
template <class C>
__device__ __forceinline__ void load4_cache(const C* p, float* f) {
  if constexpr (sizeof(C) == 2)
    unpack4<C>(*reinterpret_cast<const uint2*>(p), f);
  else
    unpack4_fp8(*reinterpret_cast<const unsigned*>(p), f);
}

// The key range of a (kv head, split) item: [begin, end) of the sequence's keys at position pos.
struct key_range {
  int begin, end;
};
__device__ __forceinline__ key_range item_keys(const step_params& p, int split, int pos) {
  const int keys = (pos < p.max_context ? pos : p.max_context - 1) + 1;
  const int chunk = (keys + p.splits - 1) / p.splits;
  const int begin = min(keys, split * chunk);
  return {begin, min(keys, begin + chunk)};
}

// The ring's position, walked alike by the producer and every consumer warp.
struct ring_cursor {
  int slot = 0;
  unsigned pass = 0;
  int seq = 0;  // tiles passed (the tile trace's index)
  __device__ void next() {
    ++seq;
    if (++slot == slots) slot = 0, ++pass;
  }
};
// Block 0's tile trace: per tile of the ring [issued (the producer, after its slot emptied),
// ready (consumer warp 0, its full wait over), released (warp 0 done with it): clock64 of the SM;
// layer * 8 + phase]; after them block 0's clock64 at each layer's start.
__device__ __forceinline__ void stamp_tile(unsigned long long* tt, int seq, int field, unsigned long long v) {
  if (tt && seq < tile_trace_tiles) tt[4 * seq + field] = v;
}

__device__ __forceinline__ const void* phase_weights(const decode_layer& L, int p) {
  return p == p_qkv ? L.wqkv : p == p_o ? L.wo : p == p_gate_up ? L.wgu : L.wdown;
}

// The block's tiles in the order its consumers take them: (layer, weight phase, tile t, part), t
// from blockIdx.x in steps of gridDim.x; a slot's rows come from one run of weight bytes, two for a
// paired phase (the gate rows, then the up rows at the slot's second half), or one a row for a
// tile in parts.
struct slot_run {
  const unsigned char* src;
  unsigned bytes, offset;
};
struct tile_walk {
  int layer = 0, phase = 0, t = 0, part = 0;
  __device__ explicit tile_walk(const step_params& p) : t(static_cast<int>(blockIdx.x)) { settle(p); }
  __device__ bool done(const step_params& p) const { return layer >= p.layers_count; }
  __device__ void next(const step_params& p) {
    if (++part < p.geo[phase].parts) return;
    part = 0;
    t += static_cast<int>(gridDim.x);
    settle(p);
  }
  __device__ void settle(const step_params& p) {
    while (layer < p.layers_count && t >= p.geo[phase].tiles) {
      t = static_cast<int>(blockIdx.x);
      if (++phase == weight_phases) phase = 0, ++layer;
    }
  }
  // The runs of weight bytes the slot of this (tile, part) is copied from: how many, and run k (all
  // of a slot's runs have as many bytes).
  __device__ int run_count(const step_params& p) const {
    const phase_geometry& g = p.geo[phase];
    return g.half ? 2 : g.parts == 1 ? 1 : min(g.tile_rows, g.rows - t * g.tile_rows);
  }
  __device__ slot_run run(const step_params& p, int k) const {
    const phase_geometry& g = p.geo[phase];
    const auto* w = static_cast<const unsigned char*>(phase_weights(p.layers[layer], phase));
    if (g.half) {  // the gate rows, then the up rows at the slot's second half
      const int h = g.tile_rows / 2;
      return {w + static_cast<std::size_t>(g.row_of(t, k * h)) * g.row_bytes,
              static_cast<unsigned>(min(h, g.half - t * h) * g.row_bytes), static_cast<unsigned>(k * h * g.row_bytes)};
    }
    if (g.parts == 1)
      return {w + static_cast<std::size_t>(t) * g.tile_rows * g.row_bytes,
              static_cast<unsigned>(min(g.tile_rows, g.rows - t * g.tile_rows) * g.row_bytes), 0u};
    const int k0 = part * g.k_part;  // fp8: a byte an input
    return {w + static_cast<std::size_t>(t * g.tile_rows + k) * g.row_bytes + k0,
            static_cast<unsigned>(min(g.k_part, g.in - k0)), static_cast<unsigned>(k * g.k_part)};
  }
};

// The producer: every tile into the ring, in the consumers' order, and the block's attention item's
// cached K and V into shared memory at each layer's start where they fit. (Keeping tiles further
// ahead on their way into L2 with bulk prefetches, to extend the ring's buffer across the barriers,
// made the step slower: docs/perf/2026-11-30-decode-step.md; prefetching only while the consumers
// wait at the attention did not help either: docs/perf/2026-11-30-decode-step-3.md.)
__device__ void produce(const step_params& p, unsigned ring, unsigned full, unsigned empty, unsigned kv, unsigned kv_full,
                        unsigned kv_free) {
  unsigned long long* tt = blockIdx.x == 0 ? p.tile_trace : nullptr;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const bool has_item = p.kv_keys > 0 && static_cast<int>(blockIdx.x) < p.kv_heads * p.splits;
  int kv_layer = 0;  // the next layer whose K and V go to shared memory
  // Layer l's, once the consumers are past layer l - 1's attention (when: below).
  const auto copy_kv = [&](int l) {
    if (lane != 0) return;
    tma::barrier_wait(kv_free, (static_cast<unsigned>(l) & 1u) ^ 1u);
    const int item = static_cast<int>(blockIdx.x), kvh = item / p.splits, pos = p.start[0];
    const key_range r = item_keys(p, item % p.splits, pos);
    const int last = min(r.end, pos);  // the new key comes from qkv
    const int keys = last > r.begin ? last - r.begin : 0;
    const unsigned row = step_head_dim * p.kv_elem;
    const std::size_t at = (static_cast<std::size_t>(kvh) * p.max_context + r.begin) * row;
    tma::barrier_expect_bytes(kv_full, 2u * keys * row);
    if (keys > 0) {
      const decode_layer& L = p.layers[l];
      bulk_copy(kv, static_cast<const unsigned char*>(L.k_cache) + at, keys * row, kv_full);
      bulk_copy(kv + p.kv_keys * row, static_cast<const unsigned char*>(L.v_cache) + at, keys * row, kv_full);
    }
  };
  // Layer l's keys go before the layer's tile `slots` (the consumers have then begun the layer: at
  // its first tile instead, the step took 0.4% (bf16) to 0.6% (fp8) longer, the consumers' exit from
  // the grid barrier after the down product slower: docs/perf/2026-11-30-decode-step-3.md), or
  // before its first tile past qkv where the block has fewer qkv tiles (that tile's slot is freed
  // by a tile before the attention: no wait on one behind it).
  tile_walk copy(p);
  int in_layer = 0, cur_layer = 0;  // the block's tiles of cur_layer issued before this one
  for (ring_cursor rc; !copy.done(p); copy.next(p), rc.next(), ++in_layer) {
    if (copy.layer != cur_layer) cur_layer = copy.layer, in_layer = 0;
    if (has_item) {
      while (kv_layer < copy.layer) copy_kv(kv_layer++);
      if (kv_layer == copy.layer && (in_layer >= slots || copy.phase != p_qkv)) copy_kv(kv_layer++);
    }
    // Lane k copies the slot's run k.
    const int n = copy.run_count(p);
    const slot_run r = copy.run(p, lane < n ? lane : 0);
    const unsigned dst = ring + rc.slot * slot_bytes, bar = full + 8 * rc.slot;
    if (lane == 0) {
      tma::barrier_wait(empty + 8 * rc.slot, (rc.pass & 1) ^ 1);
      stamp_tile(tt, rc.seq, 0, clock64());
      stamp_tile(tt, rc.seq, 3, static_cast<unsigned long long>(copy.layer * 8 + copy.phase));
      tma::barrier_expect_bytes(bar, static_cast<unsigned>(n) * r.bytes);
    }
    __syncwarp();
    if (lane < n) bulk_copy(dst + r.offset, r.src, r.bytes, bar);
  }
  if (has_item)
    while (kv_layer < p.layers_count) copy_kv(kv_layer++);  // layers without a tile of this block's
}

// The block's tiles of an fp8 product on tensor cores (mma.sync m16n8k16, fp16 operands, fp32
// sums). A's 16 rows are the tile's 8 rows twice: rows 0..7 at the first half of the slot's k,
// rows 8..15 at its second half; B's column 0 is x at the first half, column 1 x at the second
// (the other columns zero), so row r's sum is C[r][0] + C[r + 8][1], both in lane 4 r, and an
// instruction takes 256 weights (with the rows as B's columns and x as A's row 0 it took 128:
// the step 2.76 -> 2.62-2.64 ms: docs/perf/2026-11-30-decode-step-2.md). x_s holds fp16 here. The
// warps split each half into whole 64-wide steps; per step a lane converts 16 codes of its row
// g = lane / 4 at 16 (lane % 4) in each half, four instructions of four codes each: the k order
// inside a step is the same permutation for A and B, so the products pair up. Rows longer than an
// eighth of a slot come in parts (phase_geometry), the sums carried over them in four accumulators
// (one per instruction of a step: independent chains). Every part's inputs are a multiple of 128
// (plan_for). Returns the rows the block took. (The weight loads read each bank
// twice as often as needed; a layout without it, x's four columns in B and x kept in registers,
// made the step 14-40 us slower on the H200: docs/perf/2026-12-01-ws-fp8-step.md.)
__device__ int consume_fp8_tiles(const phase_geometry& g, const unsigned char* ring_ptr, unsigned full, unsigned empty,
                                 ring_cursor& rc, const void* xs, float* red, int red_rows, unsigned long long* tt) {
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int gq = lane / 4, t4 = lane % 4;
  const int stride = g.parts == 1 ? g.row_bytes : g.k_part;  // a row's bytes in the slot
  int local = 0;
  for (int t = static_cast<int>(blockIdx.x); t < g.tiles; t += static_cast<int>(gridDim.x)) {
    float c[4][4] = {};
    for (int part = 0; part < g.parts; ++part) {
      const int kpart = g.parts == 1 ? g.in : min(g.k_part, g.in - part * g.k_part);
      const int half = kpart / 2;  // inputs
      const int steps = half / 64, per = (steps + step_consumers - 1) / step_consumers;
      const int s0 = min(steps, warp * per), s1 = min(steps, s0 + per);
      // x at k + 16 t4 of the half column gq takes (gq 0 or 1; the other columns zero)
      const auto* xh = static_cast<const unsigned char*>(xs) + 2 * (part * g.k_part + (gq & 1) * half) + 32 * t4;
      tma::barrier_wait(full + 8 * rc.slot, rc.pass & 1);
      if (threadIdx.x == 0) stamp_tile(tt, rc.seq, 1, clock64());
      // Row gq of the tile, or its first row where the tile holds fewer (sums never stored).
      const unsigned char* wrow = ring_ptr + rc.slot * slot_bytes + (gq < g.tile_rows ? gq : 0) * stride + 16 * t4;
      for (int st = s0; st < s1; ++st) {
        const int k = st * 64;
        const uint4 c0 = *reinterpret_cast<const uint4*>(wrow + k), c1 = *reinterpret_cast<const uint4*>(wrow + half + k);
        uint4 x0 = make_uint4(0, 0, 0, 0), x1 = x0;
        if (gq < 2) {
          x0 = *reinterpret_cast<const uint4*>(xh + 2 * k);
          x1 = *reinterpret_cast<const uint4*>(xh + 2 * k + 16);
        }
        const unsigned w0[4] = {c0.x, c0.y, c0.z, c0.w}, w1[4] = {c1.x, c1.y, c1.z, c1.w};
        const unsigned xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const unsigned a[4] = {fp16_pair_of_codes(w0[j] & 0xffffu), fp16_pair_of_codes(w1[j] & 0xffffu),
                                 fp16_pair_of_codes(w0[j] >> 16), fp16_pair_of_codes(w1[j] >> 16)};
          mma_m16n8k16<fp16>(c[j], a, xv[2 * j], xv[2 * j + 1]);
        }
      }
      __syncwarp();
      if (lane == 0) tma::barrier_arrive(empty + 8 * rc.slot);
      if (threadIdx.x == 0) stamp_tile(tt, rc.seq, 2, clock64());
      rc.next();
    }
    if (t4 == 0 && gq < g.tile_rows) {
      const float s0v = (c[0][0] + c[1][0]) + (c[2][0] + c[3][0]), s1v = (c[0][3] + c[1][3]) + (c[2][3] + c[3][3]);
      red[warp * red_rows + local + gq] = s0v + s1v;
    }
    local += g.tile_rows;
  }
  return local;
}

// The same for 16-bit weights on CUDA cores: each consumer thread takes 16-byte chunks tid,
// tid + 256, ... of every row of the slot (x_s from shared memory), each warp sums its lanes.
template <class A>
__device__ int consume_16bit_tiles(const phase_geometry& g, const unsigned char* ring_ptr, unsigned full,
                                   unsigned empty, ring_cursor& rc, const A* xs, float* red, int red_rows,
                                   unsigned long long* tt) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int chunks = g.row_bytes / 16;  // 16-byte chunks a row
  int local = 0;
  for (int t = static_cast<int>(blockIdx.x); t < g.tiles; t += static_cast<int>(gridDim.x)) {
    tma::barrier_wait(full + 8 * rc.slot, rc.pass & 1);
    if (tid == 0) stamp_tile(tt, rc.seq, 1, clock64());
    const auto* tile = reinterpret_cast<const uint4*>(ring_ptr + rc.slot * slot_bytes);
    // Every row of the slot is multiplied, held or not (a partial tile's other rows are whatever
    // the slot held before: sums never stored), so that the loop has no test but its bound.
    float acc[max_tile_rows];
#pragma unroll
    for (int r = 0; r < max_tile_rows; ++r) acc[r] = 0.0f;
    for (int c = tid; c < chunks; c += consumer_threads) {
      float xf[8];
      unpack8<A>(reinterpret_cast<const uint4*>(xs)[c], xf);
#pragma unroll
      for (int r = 0; r < max_tile_rows; ++r) {
        if (r >= g.tile_rows) break;
        float wf[8];
        unpack8<A>(tile[r * chunks + c], wf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] = fmaf(wf[j], xf[j], acc[r]);
      }
    }
    __syncwarp();
    if (lane == 0) tma::barrier_arrive(empty + 8 * rc.slot);  // this warp is done with the slot
    if (tid == 0) stamp_tile(tt, rc.seq, 2, clock64());
    rc.next();
#pragma unroll
    for (int r = 0; r < max_tile_rows; ++r) {
      if (r >= g.tile_rows) break;
      const float s = warp_sum(acc[r]);
      if (lane == 0) red[warp * red_rows + local + r] = s;
    }
    local += g.tile_rows;
  }
  return local;
}

// A product phase on the consumers: x_s (A, g.in values; fp16 for fp8 weights) times the block's
// tiles; each row's sum over its warps in warp order handed to store(row, sum) at the end, or for
// a paired phase store(i, gate row i's sum, up row i's sum). (Loading what the stores read, the
// fp8 scales and the residual, before the tiles moved the wait into the grid barrier after:
// docs/perf/2026-11-30-decode-step-3.md.)
template <class A, bool FP8W, bool Paired = false, class Store>
__device__ void consume_product(const phase_geometry& g, const unsigned char* ring_ptr, unsigned full,
                                unsigned empty, ring_cursor& rc, const A* xs, float* red, int red_rows,
                                unsigned long long* tt, const Store& store) {
  const int tid = static_cast<int>(threadIdx.x);
  int local = 0;  // the block's rows in this phase
  if constexpr (FP8W)
    local = consume_fp8_tiles(g, ring_ptr, full, empty, rc, xs, red, red_rows, tt);
  else
    local = consume_16bit_tiles<A>(g, ring_ptr, full, empty, rc, xs, red, red_rows, tt);
  consumer_sync();
  // Row i of the block's: tile blockIdx.x + (i / tile_rows) G, row i % tile_rows of it.
  const auto sum_of = [&](int i) {
    float s = red[i];
#pragma unroll
    for (int w = 1; w < step_consumers; ++w) s += red[w * red_rows + i];
    return s;
  };
  for (int i = tid; i < local; i += consumer_threads) {
    const int t = static_cast<int>(blockIdx.x) + (i / g.tile_rows) * static_cast<int>(gridDim.x), r = i % g.tile_rows;
    if (!g.holds(t, r)) continue;
    if constexpr (!Paired)
      store(g.row_of(t, r), sum_of(i));
    else if (r < g.tile_rows / 2)
      store(g.row_of(t, r), sum_of(i), sum_of(i + g.tile_rows / 2));
  }
}

// fp8 weights: x_s as the tensor cores take it, fp16 (A's values converted, saturated at +-65504,
// as the per-layer fp8 gemv stages them); nothing to do for fp16 activations. store_input stores
// a product's input so (attn by the attention's merge, act by the paired gate/up), which leaves
// every block's staging of it a copy (fp8 2.502-2.503 -> 2.489-2.490 ms a step against
// converting it at the staging: docs/perf/2026-12-03-step-consumers.md); to_mma_input converts
// x_s in place (the path that forms SwiGLU while staging).
template <class A, bool FP8W>
__device__ __forceinline__ void store_input(void* buf, int i, float v) {
  if constexpr (FP8W && !is_fp16<A>)
    static_cast<__half*>(buf)[i] = __float2half_rn(fp16_saturated(to_float(from_float<A>(v))));
  else
    static_cast<A*>(buf)[i] = from_float<A>(v);
}
template <class A>
__device__ void to_mma_input(A* xs, int values) {
  if constexpr (!is_fp16<A>) {
    for (int c = static_cast<int>(threadIdx.x); c < values / 8; c += consumer_threads)
      reinterpret_cast<uint4*>(xs)[c] = fp16_chunk<A>(reinterpret_cast<const uint4*>(xs)[c]);
    consumer_sync();
  }
}

// x_s = rms_norm(x, weight) as A (rms_norm_kernel's rounding; the sum of squares in another
// order), or those values as fp16 for fp8 weights' tensor cores (MmaInput: to_mma_input's
// conversion, without a pass of its own). x and the weight are loaded together, x kept in
// registers: one round trip to L2 on the path every block waits on (hidden <= 4 x 4 x 256 = 4096
// values in registers; wider ones re-read).
template <class A, bool MmaInput>
__device__ void stage_norm(const float* x, const A* weight, float eps, int hidden, A* xs, float* scratch) {
  constexpr int kept = 4;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int n4 = hidden / 4;
  float4 xv[kept];
  uint2 wv[kept];
#pragma unroll
  for (int i = 0; i < kept; ++i) {
    const int c = tid + i * consumer_threads;
    xv[i] = c < n4 ? __ldcg(reinterpret_cast<const float4*>(x) + c) : make_float4(0, 0, 0, 0);
    wv[i] = c < n4 ? reinterpret_cast<const uint2*>(weight)[c] : make_uint2(0, 0);
  }
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kept; ++i) ss += xv[i].x * xv[i].x + xv[i].y * xv[i].y + xv[i].z * xv[i].z + xv[i].w * xv[i].w;
  for (int c = tid + kept * consumer_threads; c < n4; c += consumer_threads) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(x) + c);
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  ss = warp_sum(ss);
  if (lane == 0) scratch[warp] = ss;
  consumer_sync();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < step_consumers; ++w) total += scratch[w];
  const float scale = rms_scale(total, hidden, eps);
  const auto put = [&](int c, const float4& v, const uint2& w2) {
    float wf[4];
    unpack4<A>(w2, wf);
    const A a[4] = {rms_apply<A>(wf[0], v.x, scale), rms_apply<A>(wf[1], v.y, scale), rms_apply<A>(wf[2], v.z, scale),
                    rms_apply<A>(wf[3], v.w, scale)};
    if constexpr (MmaInput && !is_fp16<A>) {
      const auto sat = [](A x) { return fp16_saturated(to_float(x)); };
      reinterpret_cast<uint2*>(xs)[c] = make_uint2(pack2<fp16>(sat(a[0]), sat(a[1])), pack2<fp16>(sat(a[2]), sat(a[3])));
    } else {
      auto* o = reinterpret_cast<pair_of<A>*>(xs) + 2 * c;
      o[0] = make_pair<A>(a[0], a[1]);
      o[1] = make_pair<A>(a[2], a[3]);
    }
  };
#pragma unroll
  for (int i = 0; i < kept; ++i)
    if (const int c = tid + i * consumer_threads; c < n4) put(c, xv[i], wv[i]);
  for (int c = tid + kept * consumer_threads; c < n4; c += consumer_threads)
    put(c, __ldcg(reinterpret_cast<const float4*>(x) + c), reinterpret_cast<const uint2*>(weight)[c]);
  consumer_sync();  // also: scratch free again
}

// x_s = the 16-bit values at src as they are (this kernel wrote them, store_input: ld.global.cg).
// A thread's chunks (up to 8: 14336 values) are loaded before any is stored, one round trip to
// L2, where a loop of load-then-store took one per chunk (ptxas keeps the loads of the loop's
// remainder iterations behind their branches).
__device__ void stage_vector(const void* src, int values, void* xs) {
  constexpr int batch = 8;
  const int tid = static_cast<int>(threadIdx.x), words = values / 8;
  const auto* s4 = reinterpret_cast<const uint4*>(src);
  for (int c0 = tid; c0 < words; c0 += batch * consumer_threads) {
    uint4 v[batch];
#pragma unroll
    for (int b = 0; b < batch; ++b) {
      const int c = c0 + b * consumer_threads;
      v[b] = c < words ? ldcg4(s4 + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < batch; ++b) {
      const int c = c0 + b * consumer_threads;
      if (c < words) static_cast<uint4*>(xs)[c] = v[b];
    }
  }
  consumer_sync();
}

// x_s = A(silu(gate) * up) from gate_up [gate | up] of A (swiglu_kernel's rounding). A thread's
// chunks are loaded a batch at a time before any is used: one round trip to L2 a batch, where a
// loop of load-then-use would wait on one per chunk.
template <class A>
__device__ void stage_swiglu(const A* gate_up, int intermediate, A* xs) {
  constexpr int batch = 4;
  const int tid = static_cast<int>(threadIdx.x), words = intermediate / 8;
  const auto* g4 = reinterpret_cast<const uint4*>(gate_up);
  for (int c0 = tid; c0 < words; c0 += batch * consumer_threads) {
    uint4 g[batch], u[batch];
#pragma unroll
    for (int b = 0; b < batch; ++b) {
      const int c = c0 + b * consumer_threads;
      g[b] = c < words ? __ldcg(g4 + c) : make_uint4(0, 0, 0, 0);
      u[b] = c < words ? __ldcg(g4 + words + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < batch; ++b) {
      const int c = c0 + b * consumer_threads;
      if (c >= words) break;
      float gf[8], uf[8];
      unpack8<A>(g[b], gf);
      unpack8<A>(u[b], uf);
      unsigned w[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) w[j] = pack2<A>(silu_times(gf[2 * j], uf[2 * j]), silu_times(gf[2 * j + 1], uf[2 * j + 1]));
      reinterpret_cast<uint4*>(xs)[c] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  consumer_sync();
}

// The block's item's cached K and V rows (positions before pos: nothing in this step writes them)
// into L2, one bulk prefetch each, issued before the barrier the attention waits behind.
template <class C>
__device__ void prefetch_item_keys(const step_params& p, const decode_layer& L, int pos) {
  const int item = static_cast<int>(blockIdx.x);
  if (threadIdx.x != 0 || item >= p.kv_heads * p.splits) return;
  const int kvh = item / p.splits;
  const key_range r = item_keys(p, item % p.splits, pos);
  const int last = min(r.end, pos);  // the new key comes from qkv
  if (last <= r.begin) return;
  const std::size_t row = static_cast<std::size_t>(step_head_dim) * sizeof(C);
  const std::size_t at = (static_cast<std::size_t>(kvh) * p.max_context + r.begin) * row;
  const auto bytes = static_cast<unsigned>((last - r.begin) * row);
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(static_cast<const unsigned char*>(L.k_cache) + at),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(static_cast<const unsigned char*>(L.v_cache) + at),
               "r"(bytes)
               : "memory");
}

// One (kv head, split) item of the attention: its keys' online-softmax state per query head of
// the group into part[item][g][acc | m | l]. Scratch (shared, fp32): q [group][128], the new k and
// v [128] each, the warps' states [warps][group][130].
template <class A, bool FP8W, class C, int GM>
__device__ void attend_item(const step_params& p, const decode_layer& L, int layer, int item, int pos,
                            float* scratch_f, const C* kv_s, unsigned kv_full, unsigned kv_free) {
  constexpr int HD = step_head_dim, HALF = HD / 2;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int kvh = item / p.splits, split = item % p.splits, group = p.group;
  const bool in_cache = pos < p.max_context;
  const key_range range = item_keys(p, split, pos);
  const int kbeg = range.begin, kend = range.end;
  const bool owns_new = in_cache && pos >= kbeg && pos < kend;
  float* q_s = scratch_f;                       // [group][HD]
  float* knew = q_s + max_group * HD;           // [HD]
  float* vnew = knew + HD;                      // [HD]
  float* states = vnew + HD;                    // [warps][group][HD + 2]
  const A* qkv = static_cast<const A*>(p.qkv);
  const A* bias = static_cast<const A*>(L.bqkv);
  const int q_dim = p.heads * HD, kv_dim = p.kv_heads * HD;
  // q (and k) pairs: rotated as bias_rope_store does, q rounded to A and widened.
  for (int i = tid; i < (group + (owns_new ? 1 : 0)) * HALF; i += consumer_threads) {
    const int g = i / HALF, d = i % HALF;
    const bool is_k = g == group;
    const int col = is_k ? q_dim + kvh * HD : (kvh * group + g) * HD;
    const float x1 = load_activation<A>(qkv, bias, col + d), x2 = load_activation<A>(qkv, bias, col + d + HALF);
    const float2 y = rope_rotate(x1, x2, rope_cos_sin(pos, p.inv_freq[d]));
    const float y1 = y.x, y2 = y.y;
    if (is_k) {
      const C k1 = to_cache<C>(y1), k2 = to_cache<C>(y2);
      C* dst = static_cast<C*>(L.k_cache) + (static_cast<std::size_t>(kvh) * p.max_context + pos) * HD;
      dst[d] = k1;
      dst[d + HALF] = k2;
      knew[d] = cache_value<C>(k1);
      knew[d + HALF] = cache_value<C>(k2);
    } else {
      q_s[g * HD + d] = to_float(from_float<A>(y1));
      q_s[g * HD + d + HALF] = to_float(from_float<A>(y2));
    }
  }
  if (owns_new)
    for (int d = tid; d < HD; d += consumer_threads) {
      const C v = to_cache<C>(load_activation<A>(qkv, bias, q_dim + kv_dim + kvh * HD + d));
      static_cast<C*>(L.v_cache)[(static_cast<std::size_t>(kvh) * p.max_context + pos) * HD + d] = v;
      vnew[d] = cache_value<C>(v);
    }
  consumer_sync();
  stamp_mark(p, layer, mark_qkv_in_place);

  // Warp w takes keys kbeg + w, + 8, ...; lane l holds dims 4l..4l+3.
  float m[GM], l[GM], acc[GM][4];
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[g][j] = 0.0f;
  }
  // The cached keys: from shared memory where the producer copied them (key kbeg first), else L2.
  const bool in_smem = p.kv_keys > 0;
  if (in_smem) tma::barrier_wait(kv_full, static_cast<unsigned>(layer) & 1u);
  const C* kb = in_smem ? kv_s + 4 * lane
                        : static_cast<const C*>(L.k_cache) + static_cast<std::size_t>(kvh) * p.max_context * HD + 4 * lane;
  const C* vb = in_smem ? kv_s + static_cast<std::size_t>(p.kv_keys) * HD + 4 * lane
                        : static_cast<const C*>(L.v_cache) + static_cast<std::size_t>(kvh) * p.max_context * HD + 4 * lane;
  const int key0 = in_smem ? kbeg : 0;
  constexpr int batch = 4;  // keys a warp has in flight
  for (int k0 = kbeg + warp; k0 < kend; k0 += batch * step_consumers) {
    float kf[batch][4], vf[batch][4];
#pragma unroll
    for (int b = 0; b < batch; ++b) {
      const int key = min(k0 + b * step_consumers, kend - 1);  // past the range: the last key again, never used
      if (owns_new && key == pos) {
#pragma unroll
        for (int j = 0; j < 4; ++j) kf[b][j] = knew[4 * lane + j], vf[b][j] = vnew[4 * lane + j];
      } else {
        load4_cache<C>(kb + static_cast<std::size_t>(key - key0) * HD, kf[b]);
        load4_cache<C>(vb + static_cast<std::size_t>(key - key0) * HD, vf[b]);
      }
    }
    // Every (key, head) score first, their lanes summed together (batch x GM independent chains of
    // shuffles, as warp_sum adds them), then the online softmax in key order.
    float sc[batch][GM];
#pragma unroll
    for (int b = 0; b < batch; ++b)
#pragma unroll
      for (int g = 0; g < GM; ++g) {
        const float4 q = *reinterpret_cast<const float4*>(q_s + g * HD + 4 * lane);
        float s = q.x * kf[b][0];
        s = fmaf(q.y, kf[b][1], s);
        s = fmaf(q.z, kf[b][2], s);
        sc[b][g] = fmaf(q.w, kf[b][3], s);
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int b = 0; b < batch; ++b)
#pragma unroll
        for (int g = 0; g < GM; ++g) sc[b][g] += __shfl_xor_sync(0xffffffffu, sc[b][g], o);
#pragma unroll
    for (int b = 0; b < batch; ++b) {
      if (k0 + b * step_consumers >= kend) break;
#pragma unroll
      for (int g = 0; g < GM; ++g) {
        if (g >= group) break;
        const float s = sc[b][g] * p.scale_log2;
        const float mn = fmaxf(m[g], s);
        const float corr = exp2f(m[g] - mn), pr = exp2f(s - mn);
        m[g] = mn;
        l[g] = l[g] * corr + pr;
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[g][j] = fmaf(pr, vf[b][j], acc[g][j] * corr);
      }
    }
  }
  stamp_mark(p, layer, mark_keys_done);  // thread 0's warp
  // The warps' states, then merged in warp order into the item's part.
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    if (g >= group) break;
    float* st = states + (warp * group + g) * (HD + 2);
#pragma unroll
    for (int j = 0; j < 4; ++j) st[4 * lane + j] = acc[g][j];
    if (lane == 0) st[HD] = m[g], st[HD + 1] = l[g];
  }
  consumer_sync();
  if (in_smem && tid == 0) tma::barrier_arrive(kv_free);  // every warp is past the copied keys
  float* out = p.part + static_cast<std::size_t>(item) * max_group * part_stride;
  for (int i = tid; i < group * (HD + 2); i += consumer_threads) {
    const int g = i / (HD + 2), d = i % (HD + 2);
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < step_consumers; ++w) mx = fmaxf(mx, states[(w * group + g) * (HD + 2) + HD]);
    float r = mx;
    if (d != HD) {
      r = 0.0f;
      if (mx != -INFINITY)
#pragma unroll
        for (int w = 0; w < step_consumers; ++w) {
          const float* st = states + (w * group + g) * (HD + 2);
          r += st[d] * exp2f(st[HD] - mx);
        }
    }
    out[g * part_stride + d] = r;
  }
  // The kv head's last split to arrive merges the splits' states, in split order, into attn.
  __threadfence();
  consumer_sync();
  stamp_mark(p, layer, mark_part_fenced);
  int* last = reinterpret_cast<int*>(states);
  if (tid == 0) last[0] = atomicAdd(p.counter + 1 + kvh, 1u) == static_cast<unsigned>(p.splits - 1);
  stamp_mark(p, layer, mark_item_counted);
  consumer_sync();
  if (last[0]) {
    __threadfence();
    // Per pair of outputs (g, d..d+1): every split's m, l and acc[d..d+1] loaded before any is
    // used (16 splits a round trip), their maximum taken, then the splits added in split order.
    constexpr int at_once = 16;
    for (int i = tid; i < group * HD / 2; i += consumer_threads) {
      const int g = 2 * i / HD, d = 2 * i % HD;
      float mx = -INFINITY, l = 0.0f;
      float2 acc = make_float2(0.0f, 0.0f);
      for (int s0 = 0; s0 < p.splits; s0 += at_once) {
        float ms[at_once], ls[at_once];
        float2 as[at_once];
#pragma unroll
        for (int j = 0; j < at_once; ++j) {
          const float* st =
              p.part + (static_cast<std::size_t>(kvh * p.splits + min(s0 + j, p.splits - 1)) * max_group + g) * part_stride;
          ms[j] = s0 + j < p.splits ? __ldcg(st + HD) : -INFINITY;  // past the last split: weight 0
          ls[j] = __ldcg(st + HD + 1);
          as[j] = __ldcg(reinterpret_cast<const float2*>(st + d));
        }
        float mn = mx;
#pragma unroll
        for (int j = 0; j < at_once; ++j) mn = fmaxf(mn, ms[j]);
        if (mn == -INFINITY) continue;  // no keys yet (a split without keys stores m = -inf, acc = l = 0)
        const float old_f = exp2f(mx - mn);
        acc.x *= old_f, acc.y *= old_f, l *= old_f;
#pragma unroll
        for (int j = 0; j < at_once; ++j) {
          const float f = exp2f(ms[j] - mn);
          acc.x = fmaf(as[j].x, f, acc.x);
          acc.y = fmaf(as[j].y, f, acc.y);
          l = fmaf(ls[j], f, l);
        }
        mx = mn;
      }
      const int at = (kvh * group + g) * HD + d;
      store_input<A, FP8W>(p.attn, at, acc.x / l);
      store_input<A, FP8W>(p.attn, at + 1, acc.y / l);
    }
    if (tid == 0) p.counter[1 + kvh] = 0;  // ready for the next layer
  }
  consumer_sync();  // the scratch is reused by the next item
}

template <class A, bool FP8W, class C>
__global__ void __launch_bounds__(step_threads, 1) decode_step_kernel(const step_params p, int xs_offset, int red_offset,
                                                                      int bars_offset) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // bulk copies need sm_90; the host refuses older devices (plan_for)
#else
  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned ring = smem_addr(smem);
  const unsigned full = smem_addr(smem + bars_offset), empty = full + 8 * slots;
  const unsigned kv_full = full + 16 * slots, kv_free = kv_full + 8;
  float* scratch = reinterpret_cast<float*>(smem + bars_offset + bars_bytes);
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) {
      tma::barrier_init(full + 8 * s, 1);
      tma::barrier_init(empty + 8 * s, step_consumers);
    }
    tma::barrier_init(kv_full, 1);
    tma::barrier_init(kv_free, 1);
    tma::barrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x >= consumer_threads) {  // the producer warp
    produce(p, ring, full, empty, smem_addr(smem + p.kv_offset), kv_full, kv_free);
    return;
  }

  A* xs = reinterpret_cast<A*>(smem + xs_offset);
  const C* kv_s = reinterpret_cast<const C*>(smem + p.kv_offset);
  float* red = reinterpret_cast<float*>(smem + red_offset);
  const int tid = static_cast<int>(threadIdx.x);
  const int pos = p.start[0];
  const unsigned G = gridDim.x;
  unsigned barriers = 0;
  ring_cursor rc;
  unsigned long long* tt = blockIdx.x == 0 ? p.tile_trace : nullptr;
  const auto scaled = [](const float* scales, int row, float s) { return FP8W ? s * scales[row] : s; };
  for (int layer = 0; layer < p.layers_count; ++layer) {
    const decode_layer& L = p.layers[layer];
    // Where the consumers are (ITERA_LLM_DECODE_STEP_TRACE): what each phase takes.
    const auto mark = [&](int k) { stamp_mark(p, layer, k); };
    mark(0);
    if (tt && tid == 0 && layer < max_traced_layers) tt[4 * tile_trace_tiles + layer] = clock64();  // the tiles' clock
    // qkv
    stage_norm<A, FP8W>(p.x, static_cast<const A*>(L.input_norm), p.eps, p.hidden, xs, scratch);
    mark(1);
    consume_product<A, FP8W>(p.geo[p_qkv], smem, full, empty, rc, xs, red, p.red_rows, tt, [&](int row, float s) {
      static_cast<A*>(p.qkv)[row] = from_float<A>(scaled(L.sqkv, row, s));
    });
    if (p.kv_keys == 0) prefetch_item_keys<C>(p, L, pos);
    mark(2);
    grid_barrier(p.counter, ++barriers * G, [&] { mark(mark_fenced + 0); });
    mark(3);
    // attention: the (kv head, split) items, each kv head's last one merging into attn
    for (int item = static_cast<int>(blockIdx.x); item < p.kv_heads * p.splits; item += static_cast<int>(G))
      if (p.group <= 4)
        attend_item<A, FP8W, C, 4>(p, L, layer, item, pos, reinterpret_cast<float*>(xs), kv_s, kv_full, kv_free);
      else
        attend_item<A, FP8W, C, max_group>(p, L, layer, item, pos, reinterpret_cast<float*>(xs), kv_s, kv_full,
                                           kv_free);
    mark(4);
    grid_barrier(p.counter, ++barriers * G, [&] { mark(mark_fenced + 1); });
    mark(5);
    // o: x += attn Wo^T
    stage_vector(p.attn, p.heads * step_head_dim, xs);
    mark(6);
    consume_product<A, FP8W>(p.geo[p_o], smem, full, empty, rc, xs, red, p.red_rows, tt, [&](int row, float s) {
      p.x[row] = scaled(L.so, row, s) + __ldcg(p.x + row);
    });
    mark(7);
    grid_barrier(p.counter, ++barriers * G, [&] { mark(mark_fenced + 2); });
    mark(8);
    // gate_up
    stage_norm<A, FP8W>(p.x, static_cast<const A*>(L.post_norm), p.eps, p.hidden, xs, scratch);
    mark(9);
    if (p.geo[p_gate_up].half) {
      // Paired: SwiGLU of gate and up as swiglu_kernel forms it from their rounded values, into
      // act (gate_up's first half).
      consume_product<A, FP8W, true>(p.geo[p_gate_up], smem, full, empty, rc, xs, red, p.red_rows, tt,
                                     [&](int i, float gate, float up) {
                                       const float g = to_float(from_float<A>(scaled(L.sgu, i, gate)));
                                       const float u = to_float(from_float<A>(scaled(L.sgu, p.intermediate + i, up)));
                                       store_input<A, FP8W>(p.gate_up, i, silu_times(g, u));
                                     });
    } else {
      consume_product<A, FP8W>(p.geo[p_gate_up], smem, full, empty, rc, xs, red, p.red_rows, tt, [&](int row, float s) {
        static_cast<A*>(p.gate_up)[row] = from_float<A>(scaled(L.sgu, row, s));
      });
    }
    mark(10);
    grid_barrier(p.counter, ++barriers * G, [&] { mark(mark_fenced + 3); });
    mark(11);
    // down: x += act Wdown^T
    if (p.geo[p_gate_up].half) {
      stage_vector(p.gate_up, p.intermediate, xs);
    } else {
      stage_swiglu<A>(static_cast<const A*>(p.gate_up), p.intermediate, xs);
      if constexpr (FP8W) to_mma_input<A>(xs, p.intermediate);
    }
    mark(12);
    consume_product<A, FP8W>(p.geo[p_down], smem, full, empty, rc, xs, red, p.red_rows, tt, [&](int row, float s) {
      p.x[row] = scaled(L.sdown, row, s) + __ldcg(p.x + row);
    });
    mark(13);
    grid_barrier(p.counter, ++barriers * G, [&] { mark(mark_fenced + 4); });
    mark(14);
  }
#endif
}


// The host's plan of a shape on the current device.
struct step_plan {
  step_params p{};
  step_layout layout;
  std::string refusal;  // empty: the kernel takes the shape
};

step_plan plan_for(const decode_step_shape& s) {
  step_plan plan;
  auto& p = plan.p;
  const auto refuse = [&](std::string why) {
    plan.refusal = std::move(why);
    return plan;
  };
  if (!device_is_sm90_or_later()) return refuse("needs compute capability 9.0 or later (bulk copies)");
  if (s.head_dim != step_head_dim) return refuse("head_dim must be 128");
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0 || s.heads / s.kv_heads > max_group)
    return refuse("at most 8 query heads per kv head");
  const std::int64_t q_dim = s.heads * s.head_dim, kv_dim = s.kv_heads * s.head_dim;
  const int per = s.fp8_weights ? 128 : 8;  // values a step of the consumers takes (fp8: two halves of 64)
  for (const std::int64_t in : {s.hidden, q_dim, s.intermediate})
    if (in % per != 0 || in * (s.fp8_weights ? 1 : 2) > slot_bytes)
      return refuse("every product's input width must be a multiple of " + std::to_string(per) + " and its row fit " +
                    std::to_string(slot_bytes) + " bytes");
  if (s.hidden % 4 != 0 || s.intermediate % 2 != 0) return refuse("hidden % 4 and intermediate % 2");
  if (s.kv_heads > 63) return refuse("at most 63 kv heads");
  const int G = device_multiprocessors();
  p.layers_count = static_cast<int>(s.layers);
  p.hidden = static_cast<int>(s.hidden);
  p.heads = static_cast<int>(s.heads);
  p.kv_heads = static_cast<int>(s.kv_heads);
  p.group = static_cast<int>(s.heads / s.kv_heads);
  p.intermediate = static_cast<int>(s.intermediate);
  p.max_context = static_cast<int>(s.max_context);
  p.splits = static_cast<int>(std::clamp<std::int64_t>(G / s.kv_heads, 1, 32));
  p.eps = s.eps;
  p.scale_log2 = s.scale * 1.4426950408889634f;
  const std::int64_t rows[weight_phases] = {q_dim + 2 * kv_dim, s.hidden, 2 * s.intermediate, s.hidden};
  const std::int64_t ins[weight_phases] = {s.hidden, q_dim, s.hidden, s.intermediate};
  int red_rows = 0;
  for (int i = 0; i < weight_phases; ++i) {
    phase_geometry& g = p.geo[i];
    g.rows = static_cast<int>(rows[i]);
    g.in = static_cast<int>(ins[i]);
    g.row_bytes = static_cast<int>(ins[i] * (s.fp8_weights ? 1 : 2));
    g.tile_rows = std::min(max_tile_rows, slot_bytes / g.row_bytes);
    g.k_part = static_cast<int>(ins[i]);
    if (s.fp8_weights && g.tile_rows < max_tile_rows && i != p_gate_up) {
      // The tensor-core consumers take 8 rows a tile: longer rows go in parts of whole 64-wide steps.
      g.k_part = slot_bytes / max_tile_rows / 128 * 128;
      g.parts = static_cast<int>((ins[i] + g.k_part - 1) / g.k_part);
      g.tile_rows = max_tile_rows;
    }
    if (i == p_gate_up && g.tile_rows >= 2) {  // paired where two rows fit a slot: an even count
      g.tile_rows -= g.tile_rows % 2;
      g.half = static_cast<int>(s.intermediate);
      g.tiles = (g.half + g.tile_rows / 2 - 1) / (g.tile_rows / 2);
    } else {
      g.tiles = (g.rows + g.tile_rows - 1) / g.tile_rows;
    }
    red_rows = std::max(red_rows, (g.tiles + G - 1) / G * g.tile_rows);
  }
  p.red_rows = red_rows;
  const std::int64_t vector_bytes = 2 * std::max({s.hidden, q_dim, s.intermediate});
  const std::int64_t scratch_bytes =
      4 * (max_group * step_head_dim + 2 * step_head_dim + step_consumers * p.group * (step_head_dim + 2));
  plan.layout = layout_for(std::max(vector_bytes, scratch_bytes), red_rows);
  int device = 0, optin = 0;
  ITERA_CUDA_CHECK(cudaGetDevice(&device));
  ITERA_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (plan.layout.bytes > static_cast<std::size_t>(optin))
    return refuse("needs " + std::to_string(plan.layout.bytes) + " bytes of shared memory a block, the device has " +
                  std::to_string(optin));
  // The attention items' cached K and V in the shared memory left, where an item's keys fit (one
  // item a block: kv_heads x splits <= G).
  p.kv_elem = s.kv == kv_storage::fp8_e4m3 ? 1u : 2u;
  const std::int64_t item_keys_max = (s.max_context + p.splits - 1) / p.splits;
  const std::size_t kv_at = (plan.layout.bytes + 127) / 128 * 128;
  const std::size_t kv_bytes = 2 * static_cast<std::size_t>(item_keys_max) * step_head_dim * p.kv_elem;
  p.kv_keys = 0;
  p.kv_offset = 0;
  if (p.kv_heads * p.splits <= G && kv_at + kv_bytes <= static_cast<std::size_t>(optin)) {
    p.kv_keys = static_cast<int>(item_keys_max);
    p.kv_offset = static_cast<unsigned>(kv_at);
    plan.layout.bytes = kv_at + kv_bytes;
  }
  return plan;
}

constexpr std::size_t counter_bytes = 256;  // the grid barrier's counter and one per kv head

std::size_t part_bytes(const step_params& p) {
  return static_cast<std::size_t>(p.kv_heads) * p.splits * max_group * part_stride * 4;
}

template <class A, bool FP8W, class C>
constexpr auto step_kernel = decode_step_kernel<A, FP8W, C>;

template <class A>
const void* kernel_for(const decode_step_shape& s) {
  const bool kv8 = s.kv == kv_storage::fp8_e4m3;
  if (s.fp8_weights)
    return kv8 ? reinterpret_cast<const void*>(step_kernel<A, true, fp8_code>)
               : reinterpret_cast<const void*>(step_kernel<A, true, A>);
  return kv8 ? reinterpret_cast<const void*>(step_kernel<A, false, fp8_code>)
             : reinterpret_cast<const void*>(step_kernel<A, false, A>);
}

// ITERA_LLM_DECODE_STEP=0 keeps the per-layer kernels (A/B runs); a test may override it.
overridable_switch decode_step_switch{"ITERA_LLM_DECODE_STEP", true};

// ITERA_LLM_DECODE_STEP_TRACE=1: every block stamps each phase of each layer (globaltimer), and
// block 0 each tile of its ring, into buffers allocated by prepare_decode_step;
// decode_step_trace() reads the last launch's.
struct step_trace {
  std::mutex mutex;
  unsigned long long* device = nullptr;  // the marks
  unsigned long long* tiles = nullptr;   // block 0's tile trace
  std::size_t marks = 0;                 // what the marks' buffer holds
  std::int64_t launched_layers = 0;      // the last traced launch's
  int launched_blocks = 0;
};
step_trace& trace_state() {
  static step_trace t;
  return t;
}
bool tracing() {
  static const bool on = env_switch("ITERA_LLM_DECODE_STEP_TRACE", false);
  return on;
}

}  // namespace

std::string decode_step_refusal(const decode_step_shape& s) {
  if (!decode_step_switch.on()) return "ITERA_LLM_DECODE_STEP=0";
  return plan_for(s).refusal;
}

bool decode_step_keys_in_shared_memory(const decode_step_shape& s) {
  const step_plan plan = plan_for(s);
  return plan.refusal.empty() && plan.p.kv_keys > 0;
}

void override_decode_step(std::optional<bool> on) {
  decode_step_switch.override(on);
}

std::size_t decode_step_workspace_bytes(const decode_step_shape& s) {
  const step_plan plan = plan_for(s);
  if (!plan.refusal.empty()) return 0;
  return counter_bytes + part_bytes(plan.p);  // the barriers' counters, then the parts
}

template <class A>
void prepare_decode_step(const decode_step_shape& s) {
  const step_plan plan = plan_for(s);
  if (!plan.refusal.empty()) return;
  const void* kernel = kernel_for<A>(s);
  allow_dynamic_shared(kernel, plan.layout.bytes);
  if (tracing()) {
    step_trace& t = trace_state();
    const std::lock_guard lock(t.mutex);
    const std::size_t marks = static_cast<std::size_t>(s.layers) * device_multiprocessors() * trace_marks;
    if (t.marks < marks) {
      if (t.device) ITERA_CUDA_CHECK(cudaFree(t.device));
      ITERA_CUDA_CHECK(cudaMalloc(&t.device, marks * 8));
      ITERA_CUDA_CHECK(cudaMemset(t.device, 0, marks * 8));  // mark 15 is only stamped by blocks with an item
      t.marks = marks;
    }
    if (!t.tiles) {
      const std::size_t bytes = (std::size_t{tile_trace_tiles} * 4 + max_traced_layers) * 8;
      ITERA_CUDA_CHECK(cudaMalloc(&t.tiles, bytes));
      ITERA_CUDA_CHECK(cudaMemset(t.tiles, 0, bytes));
    }
    // The memsets ran on the legacy stream; the step kernel runs on a non-blocking one.
    ITERA_CUDA_CHECK(cudaDeviceSynchronize());
  }
  int per_sm = 0;
  ITERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, step_threads, plan.layout.bytes));
  if (per_sm < 1)
    throw std::runtime_error("llm decode_step: a block of " + std::to_string(step_threads) + " threads and " +
                             std::to_string(plan.layout.bytes) + " bytes of shared memory does not fit an SM");
}

words decode_step_counters(void* workspace) {
  return {static_cast<unsigned*>(workspace), static_cast<int>(counter_bytes / sizeof(unsigned))};
}

template <class A>
void decode_step(const decode_layer* layers, const decode_step_shape& s, float* x, A* qkv, A* attn, A* gate_up,
                 const float* inv_freq, const std::int32_t* start, void* workspace, cudaStream_t stream,
                 bool counters_cleared) {
  step_plan plan = plan_for(s);
  if (!plan.refusal.empty()) throw std::invalid_argument("llm decode_step: " + plan.refusal);
  step_params& p = plan.p;
  p.layers = layers;
  p.x = x;
  p.qkv = qkv;
  p.attn = attn;
  p.gate_up = gate_up;
  p.inv_freq = inv_freq;
  p.start = start;
  p.counter = decode_step_counters(workspace).at;
  p.part = reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) + counter_bytes);
  p.trace = tracing() ? trace_state().device : nullptr;
  p.tile_trace = tracing() ? trace_state().tiles : nullptr;
  if (!counters_cleared) ITERA_CUDA_CHECK(cudaMemsetAsync(p.counter, 0, counter_bytes, stream));
  const void* kernel = kernel_for<A>(s);
  allow_dynamic_shared(kernel, plan.layout.bytes);
  const auto& l = plan.layout;
  int xs = static_cast<int>(l.xs), red = static_cast<int>(l.red), bars = static_cast<int>(l.bars);
  void* args[] = {&p, &xs, &red, &bars};  // decode_step_kernel's parameters, in order
  ITERA_CUDA_CHECK(cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(device_multiprocessors())), dim3(step_threads),
                                    args, l.bytes, stream));
  if (p.trace) {
    step_trace& t = trace_state();
    const std::lock_guard lock(t.mutex);
    t.launched_layers = s.layers;
    t.launched_blocks = device_multiprocessors();
  }
}

std::string decode_step_trace() {
  step_trace& t = trace_state();
  const std::lock_guard lock(t.mutex);
  const std::int64_t layers = t.launched_layers;
  const int G = t.launched_blocks;
  if (!t.device || layers < 2) return {};  // the means are over layers 1.. (layer 0 starts cold)
  std::vector<unsigned long long> stamps(static_cast<std::size_t>(layers) * G * trace_marks);
  std::vector<unsigned long long> tiles(std::size_t{tile_trace_tiles} * 4 + max_traced_layers);
  ITERA_CUDA_CHECK(cudaDeviceSynchronize());
  ITERA_CUDA_CHECK(cudaMemcpy(stamps.data(), t.device, stamps.size() * 8, cudaMemcpyDeviceToHost));
  ITERA_CUDA_CHECK(cudaMemcpy(tiles.data(), t.tiles, tiles.size() * 8, cudaMemcpyDeviceToHost));
  const auto at = [&](std::int64_t l, int b, int k) {
    return static_cast<double>(stamps[(static_cast<std::size_t>(l) * G + b) * trace_marks + k]);
  };
  const double n = static_cast<double>(layers - 1);
  static const char* names[phase_marks - 1] = {"qkv norm",     "qkv product",     "barrier",      "attention",
                                               "barrier",      "o staging",       "o product",    "barrier",
                                               "gate_up norm", "gate_up product", "barrier",      "down staging",
                                               "down product", "barrier"};
  char line[160];
  std::string out = "decode_step phases, us a layer (means over layers 1..): block 0, the mean block, the slowest\n";
  for (int k = 0; k + 1 < phase_marks; ++k) {
    double b0 = 0, mean = 0, slowest = 0;
    for (std::int64_t l = 1; l < layers; ++l) {
      double worst = 0;
      for (int b = 0; b < G; ++b) {
        const double d = at(l, b, k + 1) - at(l, b, k);
        if (b == 0) b0 += d;
        mean += d / G;
        worst = std::max(worst, d);
      }
      slowest += worst;
    }
    std::snprintf(line, sizeof line, "  %-16s %8.2f %8.2f %8.2f\n", names[k], b0 / 1e3 / n, mean / 1e3 / n,
                  slowest / 1e3 / n);
    out += line;
  }
  // Each grid barrier: from the last block's arrival to the first and the last block's exit.
  out += "grid barriers, us from the last arrival: its fence done, the first exit, the last exit:\n";
  for (int k = 0, i = 0; k + 1 < phase_marks; ++k) {
    if (std::string_view(names[k]) != "barrier") continue;  // phase k: from the arrival (mark k) to the exit
    double fenced = 0, first = 0, last = 0;
    for (std::int64_t l = 1; l < layers; ++l) {
      double arrive = 0, lo = 1e300, hi = 0;
      int latest = 0;
      for (int b = 0; b < G; ++b) {
        if (at(l, b, k) > arrive) arrive = at(l, b, k), latest = b;
        lo = std::min(lo, at(l, b, k + 1));
        hi = std::max(hi, at(l, b, k + 1));
      }
      fenced += at(l, latest, mark_fenced + i) - arrive;
      first += lo - arrive;
      last += hi - arrive;
    }
    std::snprintf(line, sizeof line, "  after %-16s %8.2f %8.2f %8.2f\n", names[k - 1], fenced / 1e3 / n, first / 1e3 / n,
                  last / 1e3 / n);
    out += line;
    ++i;
  }
  // The attention: a block's own split (to its arrival counted), inside it, then the merge where
  // it came last.
  double own = 0, own_max = 0, after = 0, q = 0, keys = 0, part = 0, counted = 0;
  int items = 0;
  for (std::int64_t l = 1; l < layers; ++l) {
    double worst_own = 0, worst_after = 0;
    for (int b = 0; b < G; ++b) {
      const double end = at(l, b, mark_item_counted);
      if (end == 0) continue;  // no item
      ++items;
      own += end - at(l, b, 3);
      worst_own = std::max(worst_own, end - at(l, b, 3));
      worst_after = std::max(worst_after, at(l, b, 4) - end);
      q += at(l, b, mark_qkv_in_place) - at(l, b, 3);
      keys += at(l, b, mark_keys_done) - at(l, b, mark_qkv_in_place);
      part += at(l, b, mark_part_fenced) - at(l, b, mark_keys_done);
      counted += end - at(l, b, mark_part_fenced);
    }
    own_max += worst_own;
    after += worst_after;
  }
  if (items > 0) {
    std::snprintf(line, sizeof line,
                  "attention items, us (means): q, k, v in place %.2f; keys %.2f; part stored and fenced %.2f; "
                  "arrival counted %.2f\n",
                  q / 1e3 / items, keys / 1e3 / items, part / 1e3 / items, counted / 1e3 / items);
    out += line;
    std::snprintf(line, sizeof line,
                  "attention items, us: own split %.2f (mean), %.2f (slowest); after it (a merge where last) %.2f "
                  "(slowest)\n",
                  own / 1e3 / items, own_max / 1e3 / n, after / 1e3 / n);
    out += line;
  }
  // Block 0's tiles of the middle layer: issued, ready, released, from the layer's first mark.
  const std::int64_t mid = layers / 2;
  const unsigned long long* clocks = &tiles[std::size_t{tile_trace_tiles} * 4];  // block 0's clock64 at each layer's start
  const std::int64_t last_clock = std::min<std::int64_t>(layers, max_traced_layers) - 1;
  const double per_ns = last_clock > 1 ? static_cast<double>(clocks[last_clock] - clocks[1]) /
                                             (at(last_clock, 0, 0) - at(1, 0, 0))
                                       : 1.0;
  const double base = static_cast<double>(clocks[std::min<std::int64_t>(mid, last_clock)]);
  static const char* phase_names[weight_phases] = {"qkv", "o", "gate_up", "down"};
  out += "block 0's tiles of layer " + std::to_string(mid) + ", us from its start (clock64, " + std::to_string(per_ns) +
         " cycles a ns): issued, ready, released\n";
  for (int i = 0; i < tile_trace_tiles; ++i) {
    const unsigned long long* r = &tiles[static_cast<std::size_t>(i) * 4];
    if (static_cast<std::int64_t>(r[3] / 8) != mid || r[0] == 0) continue;
    std::snprintf(line, sizeof line, "  tile %5d %-8s %9.3f %9.3f %9.3f\n", i, phase_names[r[3] % 8],
                  (static_cast<double>(r[0]) - base) / per_ns / 1e3, (static_cast<double>(r[1]) - base) / per_ns / 1e3,
                  (static_cast<double>(r[2]) - base) / per_ns / 1e3);
    out += line;
  }
  return out;
}

template void prepare_decode_step<bf16>(const decode_step_shape&);
template void prepare_decode_step<fp16>(const decode_step_shape&);
template void decode_step<bf16>(const decode_layer*, const decode_step_shape&, float*, bf16*, bf16*, bf16*,
                                const float*, const std::int32_t*, void*, cudaStream_t, bool);
template void decode_step<fp16>(const decode_layer*, const decode_step_shape&, float*, fp16*, fp16*, fp16*,
                                const float*, const std::int32_t*, void*, cudaStream_t, bool);

}  // namespace itera::kernels::llm
