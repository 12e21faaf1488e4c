// Causal attention of a prefill on tensor cores (llm_kernels.cuh: prefill_attention): the kernels of
// flash_attention.cuh and flash_attention_wgmma.cuh (launch_attention picks one) under the causal
// policy below.
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

#include "itera/cuda/check.hpp"
#include "src/kernels/flash_attention_wgmma.cuh"
#include "src/kernels/launch.cuh"
#include "src/kernels/llm_kernels.cuh"

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

template <class A, int D>
bool run_prefill(const A* qkv, std::int64_t rows, const attention_shape& s, float scale, A* out, cudaStream_t stream) {
  const std::int64_t seqs = rows / s.rows_per_seq;
  const dim3 grid(static_cast<unsigned>(seqs * s.heads), static_cast<unsigned>((s.rows_per_seq + tile_q - 1) / tile_q));
  const causal_prefill_policy<A, D> policy{qkv, s, out};
  flash::launch_attention<D>(policy, grid, scale, stream);
  return true;
}

}  // namespace

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
