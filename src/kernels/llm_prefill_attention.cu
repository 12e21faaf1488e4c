// Causal attention of a prefill on tensor cores (llm_kernels.cuh: prefill_attention): the kernels of
// flash_attention.cuh and flash_attention_wgmma.cuh (launch_attention picks one) under the causal
// policy below.
//
// On sm_90a at head_dim 64 and 128 the warp-specialized kernel below (namespace ws) runs instead:
// 128 rows a block, K and V copied by the TMA for two consumer warpgroups
// (ITERA_PREFILL_ATTENTION_WS=0 keeps the kernels above, for comparisons).
//
// One block takes a tile of 64 consecutive query rows of one sequence and one query head and walks
// the keys from position 0 to the tile's last query position, so the work follows the causal
// triangle. The heaviest tiles are launched first over all heads and sequences (the grid's x is the
// (sequence, head) pair, its y the tile). With the head in y and the sequence in z, each head's
// tiles heaviest first, the last heads started their longest tiles when most of the grid was done
// and the pass ended on them: a list schedule of the 2048-token prefill (1024 blocks, two an SM)
// puts its end 30% past the mean load, heaviest first over the grid 2%; on the H200 the attention
// went from 4.34-4.45 to 3.63-3.71 ms a pass (docs/perf/2026-12-01-prefill-balance.md). Q, K and V
// all come from the pass's fused qkv rows (row stride q_dim + 2 kv_dim; bias_rope_store left the
// rotated k there): the sequence was empty before the pass, so whatever the cache stores (16-bit or
// fp8), the prefill attends in the compute type A (bf16 or fp16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <optional>

#include "itera/cuda/check.hpp"
#include "src/kernels/flash_attention_wgmma.cuh"
#include "src/kernels/launch.cuh"
#include "src/kernels/llm_kernels.cuh"
#include "src/kernels/tma.cuh"
#include "src/kernels/wgmma.cuh"
#include "src/kernels/wgmma_gemm.cuh"

namespace itera::kernels::llm {
namespace {

using flash::tile_q;

// Grid (sequences x heads, query tiles); block (x, y) takes tile (tiles - 1 - y) of head x % heads
// of sequence x / heads: the blocks launched first hold every head's heaviest tiles.
template <class A, int D>
struct causal_prefill_policy {
  using element = A;
  static constexpr bool causal = true;
  const A* qkv;
  attention_shape sh;
  A* out;

  __device__ flash::block_work<A> work() const {
    const std::int64_t seq = blockIdx.x / sh.heads;
    const int head = static_cast<int>(blockIdx.x % sh.heads);
    const std::int64_t q0 = static_cast<std::int64_t>(gridDim.y - 1 - blockIdx.y) * tile_q;
    const int rows = static_cast<int>(min(static_cast<std::int64_t>(tile_q), sh.rows_per_seq - q0));
    const std::int64_t qkv_width = (sh.heads + 2 * sh.kv_heads) * D;
    const std::int64_t first_pos = q0;  // the sequence was empty: row i of the pass is position i
    const std::int64_t row0 = seq * sh.rows_per_seq + q0;  // the tile's first row in the pass
    flash::block_work<A> w;
    w.q = qkv + row0 * qkv_width + static_cast<std::int64_t>(head) * D;
    w.q_stride = qkv_width;
    w.rows = rows;
    w.first_pos = first_pos;
    w.keys = first_pos + rows;  // keys 0 .. the tile's last position
    return w;
  }

  // The K and V of the head's kv head in this sequence's own rows of the pass (bias_rope_store
  // left the rotated k and the biased v there), of A whatever the cache stores: a prefill starts
  // from an empty sequence (start 0, as the engine's prefill does), so key j is the sequence's row j.
  __device__ flash::kv_rows<A> kv() const {
    const std::int64_t seq = blockIdx.x / sh.heads;
    const int kv_head = static_cast<int>(blockIdx.x % sh.heads) / static_cast<int>(sh.heads / sh.kv_heads);
    const std::int64_t qkv_width = (sh.heads + 2 * sh.kv_heads) * D;
    const A* k = qkv + seq * sh.rows_per_seq * qkv_width + (sh.heads + kv_head) * D;
    return {k, k + sh.kv_heads * D, qkv_width};
  }

  __device__ flash::block_output<A> output() const {
    const std::int64_t q0 = static_cast<std::int64_t>(gridDim.y - 1 - blockIdx.y) * tile_q;
    const std::int64_t row0 = blockIdx.x / sh.heads * sh.rows_per_seq + q0;
    const std::int64_t q_dim = sh.heads * D;
    return {out + row0 * q_dim + static_cast<std::int64_t>(blockIdx.x % sh.heads) * D, q_dim};
  }
};

// The warp-specialized causal kernel (sm_90a; with ITERA_PREFILL_ATTENTION_WS=0 the three-block
// kernel of flash_attention_wgmma.cuh runs): FlashAttention-3's
// layout of a block. One block takes 128 query rows of one (sequence, head): warpgroup 0's first
// thread is the producer, asking the TMA for the rows' Q once and for each key tile's K and V
// ([64][64] boxes of the qkv rows, the 128-byte swizzle the wgmma kernels read) into rings of
// stages, full and empty barriers each; warpgroups 1 and 2 each take 64 of the rows and run the
// wgmma kernel's steps on them (flash_attention_wgmma.cuh: tile_pass, scores, the same softmax,
// order and, with 64-key tiles, roundings), sharing each K and V tile, so a tile is copied once for
// 128 rows instead of once for 64 and no consumer thread issues a copy. The first warpgroup's rows
// end 64 keys earlier: with 64-key tiles it passes over the last one, releasing its stages once
// they have come (as does a warpgroup with no rows, in a sequence's last block).
//
// Measured on the H200 (llama-3.1-8b, 2048 tokens; docs/perf/2026-12-01-fused-products.md, runs
// 12-13): the attention itself 3.44-3.49 ms a pass against 3.23-3.29 for the three-block kernel
// (one block of two consumers an SM, against three of one), yet the whole prefill 0.2-1.1 ms
// shorter in each of four alternating pairs, its products faster after it (gate/up 22.2-22.5 against
// 22.5-23.1 ms): the copies made once for 128 rows by the TMA, not twice by every thread, leave
// the card's 700 W to its clock. FlashAttention-3's turns at the tensor cores (the consumers
// passing a token after each issue of products, so that one's softmax runs under the other's
// products) measured the same as none (3.46-3.49 against 3.46-3.47) and were taken out. This form
// (2a4c7d4) on the H200 (docs/perf/2026-12-01-ws-fp8-step.md, run 1): the llm, prefill and attention
// device tests passed with it; the prefill held 4 s, 48.20-48.25 ms against 48.33-48.45 for the
// three-block kernel, alternating. Hence the default.
//
// Key tiles of 128 at head_dim 128 (FlashAttention-3's; ITERA_PREFILL_ATTENTION_KEYS_128=0 keeps 64,
// and head_dim 64 keeps them, not measured with 128):
// S = Q K^T as wgmma m64n128k16, the softmax over 64 scores a thread, P V over eight 16-key steps,
// half the steps' fixed costs (barriers, waits, the row max's shuffles) per key; K and V in rings of
// two stages (three measured no faster), the setmaxnreg split below for the registers (without it
// ptxas spills and serialises the products). The reference max moves per tile, so P's roundings
// differ from the 64-key kernel's (logits 2e-3 apart in bf16, 3e-4 in fp16). The first
// warpgroup computes the diagonal tile's scores over all 128 keys (the second half masked for its
// rows) and skips P V past its keys. H200, llama-3.1-8b (docs/perf/2026-12-02-attention-keys-clusters.md):
// the attention of a 2048-token pass 3.42 -> 3.26 ms, of an 8192-token pass 43.6 -> 38.5 ms
// (403 -> 457 TFLOP/s, the pass 222.2 -> 220.0 ms); the 2048-token pass held 4 s the same
// (48.1-48.3 ms both ways: the card's 700 W cap, the time the attention saves going to the power).
namespace ws {

constexpr int threads = 384, rows = 128;
// Key tiles of KT keys (128, or 64 with ITERA_PREFILL_ATTENTION_KEYS_128=0) in rings of `stages` K
// and V tiles (three of 64 keys; two of 128).
template <int D, int KT>
struct layout {
  static constexpr int stages = KT == 64 ? 3 : 2;
  static constexpr unsigned q_bytes = flash::tile_q * D * 2;  // one warpgroup's 64 rows
  static constexpr unsigned tile = KT * D * 2;                // a K or V tile: [D / 64][KT][64]
  static constexpr unsigned q = 0, k = 2 * q_bytes, v = k + stages * tile, bars = v + stages * tile;
  // q_full, then k_full, k_empty, v_full, v_empty [stages] each
  static constexpr unsigned bytes = bars + 8 * (1 + 4 * stages);
  static_assert(bytes <= 227 * 1024, "the sm_90 limit of dynamic shared memory a block");
};

// The registers a warpgroup holds from here on (setmaxnreg): with 128-key tiles the consumers'
// scores, P and O (64 + 32 + 64 a thread at head_dim 128) need more than the 168 a thread of three
// warpgroups, so the producer's warpgroup gives some back (FlashAttention-3's split: 40 and 232).
// setmaxnreg.inc waits until the block's pool holds what it asks for: the split must fit the 168 a
// thread that __launch_bounds__(threads, 1) gives all three warpgroups at launch, or the consumers
// would wait forever.
constexpr int producer_registers = 40, consumer_registers = 232;
static_assert(128 * producer_registers + 256 * consumer_registers <= 65536 / threads / 8 * 8 * threads,
              "the register split within the block's allocation at launch");
template <int N>
[[maybe_unused]] __device__ __forceinline__ void registers_down() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
[[maybe_unused]] __device__ __forceinline__ void registers_up() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

struct shape {
  int heads, kv_heads, q_dim, kv_dim;
  std::int64_t rows_per_seq;
};

template <class A, int D, int KT>
__global__ void __launch_bounds__(threads, 1)
    causal_kernel(const __grid_constant__ CUtensorMap map, const shape sh, A* out, float scale_log2) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = layout<D, KT>;
  constexpr int stages = L::stages;
  constexpr int boxes = D / 64;  // [64][64] boxes a row of D
  extern __shared__ __align__(1024) unsigned char smem[];
  // The warpgroup broadcast from lane 0: uniform to the compiler, which otherwise takes the
  // consumers' branches on it (their key counts, the products they skip) as divergent and
  // serialises their wgmma.
  const int tid = static_cast<int>(threadIdx.x), wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int warp = tid % 128 / 32, lane = tid % 32;
  const unsigned base = smem_addr(smem), bars = base + L::bars;
  const unsigned q_full = bars, k_full = bars + 8, k_empty = k_full + 8 * stages, v_full = k_empty + 8 * stages,
                 v_empty = v_full + 8 * stages;
  const std::int64_t seq = blockIdx.x / sh.heads;
  const int head = static_cast<int>(blockIdx.x % sh.heads), kv_head = head / (sh.heads / sh.kv_heads);
  const std::int64_t q0 = static_cast<std::int64_t>(gridDim.y - 1 - blockIdx.y) * rows;
  const int block_rows = static_cast<int>(min(static_cast<std::int64_t>(rows), sh.rows_per_seq - q0));
  const int row0 = static_cast<int>(seq * sh.rows_per_seq + q0);  // the block's first row of the pass
  const int n = static_cast<int>((q0 + block_rows + KT - 1) / KT);  // key tiles
  if (tid == 0) {
    tma::barrier_init(q_full, 1);
    for (int i = 0; i < stages; ++i) {
      tma::barrier_init(k_full + 8 * i, 1);
      tma::barrier_init(v_full + 8 * i, 1);
      tma::barrier_init(k_empty + 8 * i, 8);  // a warp of each consumer
      tma::barrier_init(v_empty + 8 * i, 8);
    }
    tma::barrier_init_fence();
  }
  __syncthreads();
  // Launched with PDL where programmatic_launch_enabled() (launch.cuh): qkv is read, and out
  // written, only after the previous kernel (qkv_rope_store or bias_rope_store) completed.
  grid_dependents_launch();
  grid_dependency_wait();

  if (wg == 0) {
    if constexpr (KT == 128) registers_down<producer_registers>();
    if (tid != 0) return;
    const int q_col = head * D, k_col = sh.q_dim + kv_head * D, v_col = sh.q_dim + sh.kv_dim + kv_head * D;
    const int key_row0 = static_cast<int>(seq * sh.rows_per_seq);
    tma::barrier_expect_bytes(q_full, 2 * L::q_bytes);
    for (int c = 0; c < 2; ++c)
      for (int b = 0; b < boxes; ++b)
        tma::load_2d(base + L::q + c * L::q_bytes + b * 64 * 128, map, q_col + 64 * b, row0 + 64 * c, q_full);
    for (int j = 0; j < n; ++j) {
      const int st = j % stages;
      const unsigned parity = static_cast<unsigned>((j / stages - 1) & 1);
      const auto load = [&](unsigned full, unsigned empty, unsigned dst, int col) {
        if (j >= stages) tma::barrier_wait(empty + 8 * st, parity);
        tma::barrier_expect_bytes(full + 8 * st, L::tile);
        for (int b = 0; b < boxes; ++b)
          for (int rb = 0; rb < KT / 64; ++rb)
            tma::load_2d(dst + st * L::tile + (b * KT + rb * 64) * 128, map, col + 64 * b, key_row0 + KT * j + 64 * rb,
                         full + 8 * st);
      };
      load(k_full, k_empty, base + L::k, k_col);
      load(v_full, v_empty, base + L::v, v_col);
    }
    return;
  }

  if constexpr (KT == 128) registers_up<consumer_registers>();
  const int c = wg - 1, g = lane / 4;
  flash::block_work<A> w;  // the consumer's 64 rows: their positions and keys
  w.first_pos = q0 + 64 * c;
  w.rows = max(0, min(64, block_rows - 64 * c));
  w.keys = w.first_pos + w.rows;
  const int nc = w.rows > 0 ? static_cast<int>((w.keys + KT - 1) / KT) : 0;
  const int my_first = warp * flash::warp_rows_per_warp;
  const flash::key_mask<true> allowed(w, my_first, g);
  flash::warp_rows<D> st;
  st.reset();
  flash::sm90::tile_pass<A, D, true, KT> tp{st, allowed, scale_log2, lane};
  const unsigned q_addr = base + L::q + c * L::q_bytes;
  const auto k_addr = [&](int j) { return base + L::k + static_cast<unsigned>(j % stages) * L::tile; };
  const auto v_addr = [&](int j) { return base + L::v + static_cast<unsigned>(j % stages) * L::tile; };
  const auto parity = [](int j) { return static_cast<unsigned>((j / stages) & 1); };
  const auto release = [&](unsigned empty, int j) {
    __syncwarp();
    if (lane == 0) tma::barrier_arrive(empty + 8 * (j % stages));
  };
  if (nc > 0) {
    tma::barrier_wait(q_full, 0);
    tma::barrier_wait(k_full, 0);
    wgmma::fence();
    flash::sm90::scores<A, D>(tp.s, q_addr, k_addr(0));
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(tp.s);
    release(k_empty, 0);
    tp.softmax(0);
    tp.pack();
    for (int j = 0; j + 1 < nc; ++j) {
      tma::barrier_wait(k_full + 8 * ((j + 1) % stages), parity(j + 1));
      tma::barrier_wait(v_full + 8 * (j % stages), parity(j));
      // K(j + 1) is free once its scores are done, V(j) once P V of tile j is.
      flash::sm90::overlapped_step<A, D>(
          tp.s, st.o, q_addr, k_addr(j + 1), j, [&](int t) { tp.add_pv(t, v_addr(t)); },
          [&](int t) {
            release(k_empty, t);
            tp.softmax(t);
          },
          [&] {
            release(v_empty, j);
            tp.rescale();
          },
          [&] { tp.pack(); });
    }
    tma::barrier_wait(v_full + 8 * ((nc - 1) % stages), parity(nc - 1));
    tp.add_pv(nc - 1, v_addr(nc - 1));
    wgmma::wait<0>();
    wgmma::fence_operands(st.o);
    release(v_empty, nc - 1);
  }
  // The key tiles past this consumer's rows: released once they have come, so that the producer
  // goes on.
  for (int j = nc; j < n; ++j) {
    tma::barrier_wait(k_full + 8 * (j % stages), parity(j));
    release(k_empty, j);
    tma::barrier_wait(v_full + 8 * (j % stages), parity(j));
    release(v_empty, j);
  }
  if (w.rows > 0)
    flash::store_rows<D, D>(st, out + (static_cast<std::int64_t>(row0) + 64 * c) * sh.q_dim + head * D, sh.q_dim,
                            my_first, w.rows, lane);
#else
  (void)map, (void)sh, (void)out, (void)scale_log2;
  (void)layout<D, KT>::q;  // read by the sm_90a body only (nvcc's "declared but never referenced")
  __trap();  // launched only where wgmma_available()
#endif
}

template <class A, int D, int KT>
void launch(const A* qkv, std::int64_t rows_total, const attention_shape& s, float scale, A* out,
            cudaStream_t stream) {
  const std::int64_t width = (s.heads + 2 * s.kv_heads) * D;
  const CUtensorMap map = wgmma::gemm_operand_map(qkv, rows_total, width, 64, "llm prefill attention");
  const shape sh{static_cast<int>(s.heads), static_cast<int>(s.kv_heads), static_cast<int>(s.heads * D),
                 static_cast<int>(s.kv_heads * D), s.rows_per_seq};
  const dim3 grid(static_cast<unsigned>(rows_total / s.rows_per_seq * s.heads),
                  static_cast<unsigned>((s.rows_per_seq + rows - 1) / rows));
  constexpr auto kernel = causal_kernel<A, D, KT>;
  allow_dynamic_shared(reinterpret_cast<const void*>(kernel), layout<D, KT>::bytes);
  itera::kernels::launch(kernel, grid, threads, layout<D, KT>::bytes, stream, map, sh, out,
                         scale * 1.4426950408889634f);
  ITERA_CUDA_CHECK_LAUNCH();
}

// ITERA_PREFILL_ATTENTION_WS=0 keeps the three-block kernel (A/B runs); a test may override it.
overridable_switch ws_switch{"ITERA_PREFILL_ATTENTION_WS", true};
// ITERA_PREFILL_ATTENTION_KEYS_128=0 keeps key tiles of 64 (A/B runs); a test may override it.
overridable_switch wide_keys_switch{"ITERA_PREFILL_ATTENTION_KEYS_128", true};
// Key tiles of 128 where switched on, at head_dim 128 (measured there; 64 keeps 64-key tiles).
int key_tile(std::int64_t head_dim) { return wide_keys_switch.on() && head_dim == 128 ? 128 : 64; }

// Whether the warp-specialized kernel takes this prefill: switched on, where the wgmma kernel
// would run (attention_choice.hpp; so a test pinning mma.sync still gets it), head_dim 64 or 128,
// row indices within the TMA's 32-bit coordinates.
bool takes(const attention_shape& s, std::int64_t rows_total) {
  return ws_switch.on() && (s.head_dim == 64 || s.head_dim == 128) &&
         attention_kernel_for(static_cast<int>(s.head_dim)) == attention_kernel::wgmma &&
         rows_total < (std::int64_t{1} << 31) - rows && (s.heads + 2 * s.kv_heads) * s.head_dim < (1 << 30);
}

}  // namespace ws

template <class A, int D>
bool run_prefill(const A* qkv, std::int64_t rows, const attention_shape& s, float scale, A* out, cudaStream_t stream) {
  if constexpr (D == 64 || D == 128)
    if (ws::takes(s, rows)) {
      if constexpr (D == 128)
        if (ws::key_tile(D) == 128) {
          ws::launch<A, D, 128>(qkv, rows, s, scale, out, stream);
          return true;
        }
      ws::launch<A, D, 64>(qkv, rows, s, scale, out, stream);
      return true;
    }
  const std::int64_t seqs = rows / s.rows_per_seq;
  const dim3 grid(static_cast<unsigned>(seqs * s.heads), static_cast<unsigned>((s.rows_per_seq + tile_q - 1) / tile_q));
  const causal_prefill_policy<A, D> policy{qkv, s, out};
  flash::launch_attention<D>(policy, grid, scale, stream);
  return true;
}

}  // namespace

bool prefill_attention_warp_specialized(const attention_shape& s, std::int64_t rows) { return ws::takes(s, rows); }

int prefill_attention_key_tile(const attention_shape& s, std::int64_t rows) {
  return ws::takes(s, rows) ? ws::key_tile(s.head_dim) : 0;
}

void override_prefill_attention_warp_specialized(std::optional<bool> on) { ws::ws_switch.override(on); }

void override_prefill_attention_wide_keys(std::optional<bool> on) { ws::wide_keys_switch.override(on); }

bool prefill_attention_supported(const attention_shape& s) {
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0) return false;
  if (s.head_dim != 16 && s.head_dim != 32 && s.head_dim != 64 && s.head_dim != 128) return false;
  return device_compute_major() >= 8;  // bf16 (and fp16 m16n8k16) mma.sync and ldmatrix need sm_80
}

template <class A>
bool prefill_attention(const A* qkv, std::int64_t rows, const attention_shape& s, float scale, A* out,
                       cudaStream_t stream) {
  if (s.rows_per_seq < 2 || rows % s.rows_per_seq != 0 || rows / s.rows_per_seq * s.heads >= (std::int64_t{1} << 31) ||
      (s.rows_per_seq + tile_q - 1) / tile_q > 65535)
    return false;
  if (!prefill_attention_supported(s)) return false;
  switch (s.head_dim) {
    case 16: return run_prefill<A, 16>(qkv, rows, s, scale, out, stream);
    case 32: return run_prefill<A, 32>(qkv, rows, s, scale, out, stream);
    case 64: return run_prefill<A, 64>(qkv, rows, s, scale, out, stream);
    case 128: return run_prefill<A, 128>(qkv, rows, s, scale, out, stream);
    default: return false;
  }
}

template bool prefill_attention<bf16>(const bf16*, std::int64_t, const attention_shape&, float, bf16*, cudaStream_t);
template bool prefill_attention<fp16>(const fp16*, std::int64_t, const attention_shape&, float, fp16*, cudaStream_t);

}  // namespace itera::kernels::llm
