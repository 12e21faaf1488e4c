#pragma once
// Kernels of the llm cuda engine (workloads/llm/llm_cuda.cu): everything but the larger matrix
// products, which run in cuBLASLt (gemv below takes those of at most gemv_max_tokens rows; a
// prefill's gate/up and qkv products run fused with the step after them: gate_up_swiglu,
// qkv_rope_store).
// Activations are row-major [rows x width]; the residual stream is fp32, everything else of the
// compute type A, bf16 or fp16 (common.cuh): the launchers are templates on it, instantiated for
// both; arithmetic is fp32. 16-bit weights are of type A too (the engine converts weights stored
// in the other 16-bit type at load). Each launcher checks its launch and throws on error.
//
// Rows and positions. A forward pass runs T = sequences x rows_per_seq rows, row t belonging to
// sequence t / rows_per_seq at position start[seq] + t % rows_per_seq, where start (device int32,
// one per sequence) is the number of tokens the sequence held before the pass. Positions are read
// on the device, so a decode step's launches do not change from step to step (CUDA-graph ready).
//
// KV cache of one layer: K and V each [sequence][kv_head][max_context][head_dim], of the compute
// type A or fp8 e4m3 codes (attention_shape::kv; a 16-bit cache of the other type is refused). An
// fp8 cache has one fp32 scale per tensor fixed at 1 (what vLLM runs without calibration): the
// codes are the values, saturated to +-448 when stored, never NaN. Decode reads the cache; a
// prefill (every sequence empty before the pass: the engine's prefill starts at position 0) reads
// the pass's own K and V rows of qkv in A, whatever the cache holds, as serving engines do with an
// fp8 cache (llm_cpu.hpp: the cpu reference does the same).
//
// fp16's range. The residual stream, the scores and the softmax are fp32 and P is below 256, so
// what fp16 holds is bounded by the model: RMSNorm outputs (|w| sqrt(hidden) at most), q, k, v,
// the attention output (a mean of V rows), gate, up and silu(gate) up, the cache. A model whose
// projections exceed 65504 overflows to infinity there in fp16 (and not in bf16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

namespace itera::kernels::llm {

using bf16 = __nv_bfloat16;
using fp16 = __half;

// out[i] = A(Stored(init_value(kind, seed, i))) for i < count: the weights' deterministic init
// (workloads/llm/weights.hpp), rounded to nearest even in their storage type as the host's
// round_to_storage does, then held in the compute type A (a second rounding where they differ).
template <class Stored, class A>
void fill_init(A* out, std::uint64_t count, int init_kind, std::uint64_t seed, cudaStream_t stream);

// x[t][:] = table[tokens[t]][:] widened to fp32 (ids clamped into the vocabulary). clear: words the
// same launch zeroes (decode_step_counters, so that the step needs no memset of its own).
struct words {
  unsigned* at = nullptr;
  int count = 0;
};
template <class A>
void embed(const std::int32_t* tokens, const A* table, float* x, std::int64_t rows, std::int64_t hidden,
           std::int64_t vocab, cudaStream_t stream, words clear = {});

// x[rows[i]][:] = values[i][:] widened to fp32, for i < count: given input vectors (a multimodal
// model's image tokens, bf16 whatever the compute type) over the embedded tokens.
void scatter_rows(const std::int32_t* rows, const bf16* values, float* x, std::int64_t count, std::int64_t hidden,
                  cudaStream_t stream);

// out[r] = A(weight * x[in_row] / sqrt(mean(x[in_row]^2) + eps)), in_row = r * in_stride + in_offset.
template <class A>
void rms_norm(const float* x, std::int64_t in_stride, std::int64_t in_offset, const A* weight, A* out,
              std::int64_t rows, std::int64_t hidden, float eps, cudaStream_t stream);

// Sums a product wrote in parts (its k range cut into `count` slices, one strided batch): part p
// of row r at sums + p * stride + r * hidden.
struct residual_parts {
  const float* sums = nullptr;
  int count = 0;
  std::int64_t stride = 0;  // floats
};

// x[r] += the parts' rows r (added in part order after x), then, with a weight, out[r] =
// rms_norm(x[r]) as rms_norm rounds it: the residual add of a product split in parts and the next
// norm in one pass. Without a weight (nullptr) only the add. std::invalid_argument when the parts
// cannot hold the rows.
template <class A>
void add_rms_norm(float* x, residual_parts parts, const A* weight, A* out, std::int64_t rows, std::int64_t hidden,
                  float eps, cudaStream_t stream);

// The KV cache's element: bf16, fp16 (each only with the compute type of its name), or an fp8
// e4m3 code (one byte).
enum class kv_storage { bf16, fp16, fp8_e4m3 };

struct attention_shape {
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;
  std::int64_t max_context = 0;
  std::int64_t rows_per_seq = 1;
  kv_storage kv = kv_storage::bf16;
};

// std::invalid_argument naming `who` when s.kv is the 16-bit type that is not A.
template <class A>
void check_cache_type(const attention_shape& s, const char* who);

// qkv: [T][q_dim + 2 kv_dim] as the fused projection wrote it (q | k | v). Adds the bias (when not
// null), rotates q and k (rotate_half, angle = float(position) * inv_freq[i]), writes q back in
// place and k, v into the layer's cache at each row's position: rounded from fp32 to A, or to
// e4m3 codes (__nv_cvt_float_to_fp8, nearest even, __NV_SATFINITE) for an fp8 cache. keep_rows
// (a prefill): also the rotated k (and, with a bias, the biased v) back into qkv as A, where the
// prefill's attention reads them.
template <class A>
void bias_rope_store(A* qkv, const A* bias, const float* inv_freq, const std::int32_t* start, std::int64_t rows,
                     const attention_shape& s, void* k_cache, void* v_cache, bool keep_rows, cudaStream_t stream);

// out[t][head] = softmax(q K^T * scale) V over positions 0..position(t) of t's sequence, query
// head h reading kv head h / (heads / kv_heads). Reads q from qkv (row stride q_dim + 2 kv_dim).
// prefill: the sequences were empty before the pass (start 0) and K, V are the pass's own rows of
// qkv (bias_rope_store with keep_rows), of A: prefill_attention where it takes the shape. Otherwise
// (decode) K and V come from the caches, of element s.kv: decode_attention below where it takes
// the shape. What neither takes runs one block per (row, head), the scores in shared memory (one
// float per key: max_context, or rows_per_seq for a prefill).
// bias_rope_store's work (not keep_rows) handed to a decode's attention: null inv_freq, none.
// decode_attention_rotates says where the attention takes it.
template <class A>
struct decode_rope {
  const A* bias = nullptr;
  const float* inv_freq = nullptr;  // 16-byte aligned (read four at a time)
  void* k_cache = nullptr;  // the caches the new k and v go into: the attention's own
  void* v_cache = nullptr;
};
template <class A>
void attention(const A* qkv, const void* k_cache, const void* v_cache, const std::int32_t* start, std::int64_t rows,
               const attention_shape& s, bool prefill, float scale, A* out, cudaStream_t stream,
               const decode_rope<A>& rope = {});
// Decode attention (llm_decode_attention.cu): head_dim 16, 32, 64, 128 or 256, at most 8 query
// heads per kv head. From 16 (row, kv head) pairs with head_dim 64 or 128: on tensor cores (the
// group's query heads as the rows of the mma), a pair's keys on one block or, below two blocks
// per SM, dealt over a cluster of up to 8. Otherwise a
// block per pair streams the keys through shared memory with cp.async on CUDA cores; on sm_90 a
// cluster of decode_attention_splits(rows * kv_heads) blocks shares a row's keys, merged through
// distributed shared memory. Online softmax, merges in a fixed order. Returns false, launching
// nothing, for a shape it does not take. An fp8 cache (s.kv) is copied into shared memory as
// codes (half the bytes) and widened there: to fp32 in registers on CUDA cores, to a tile of A per
// warp for the tensor cores (e4m3 values are exact in bf16 and in fp16).
bool decode_attention_supported(const attention_shape& s);
int decode_attention_splits(std::int64_t pairs);
template <class A>
void prepare_decode_attention(const attention_shape& s);
template <class A>
bool decode_attention(const A* qkv, const void* k_cache, const void* v_cache, const std::int32_t* start,
                      std::int64_t rows, const attention_shape& s, float scale, A* out, cudaStream_t stream,
                      const decode_rope<A>& rope = {});
// Whether decode_attention runs the tensor-core kernel for these rows, which can do
// bias_rope_store's work itself (a decode_rope): q rotated as it is read, the new k and v stored by
// the block holding their position and patched into its copy of the keys. H200, llama-3.1-8b:
// docs/perf/2026-12-01-fused-decode-gate-up.md.
template <class A>
bool decode_attention_rotates(std::int64_t rows, const attention_shape& s);
// Causal attention of a prefill pass (rows_per_seq > 1) on tensor cores, tiles of 64 queries x 64
// keys with an online softmax (llm_prefill_attention.cu): head_dim 16, 32, 64 or 128, sm_80 and
// later. K and V are the pass's own rows of qkv (bias_rope_store with keep_rows), so every
// sequence must have been empty before the pass: row i of a sequence is its position i (no start is
// read). Returns false, launching nothing, for a shape it does not take (attention() then runs its
// general kernel).
bool prefill_attention_supported(const attention_shape& s);
template <class A>
bool prefill_attention(const A* qkv, std::int64_t rows, const attention_shape& s, float scale, A* out,
                       cudaStream_t stream);
// Whether the prefill of `rows` rows runs the warp-specialized kernel (sm_90a, head_dim 64 or 128,
// where the wgmma kernel would run) rather than the three-block one; ITERA_PREFILL_ATTENTION_WS=0
// turns it off, and a test may override the switch (std::nullopt: the environment's choice again).
bool prefill_attention_warp_specialized(const attention_shape& s, std::int64_t rows);
void override_prefill_attention_warp_specialized(std::optional<bool> on);
// The warp-specialized kernel's key tiles: 128 keys (FlashAttention-3's) at head_dim 128 where on
// (the default), 64 otherwise (ITERA_PREFILL_ATTENTION_KEYS_128=0); a test may override the switch.
// prefill_attention_key_tile: the tile that prefill runs, 0 where the warp-specialized kernel does
// not take it.
void override_prefill_attention_wide_keys(std::optional<bool> on);
int prefill_attention_key_tile(const attention_shape& s, std::int64_t rows);
// The dynamic shared memory attention needs, and whether the device allows it (sets the kernel's
// attribute when above the default 48 KiB). Throws when max_context is too long for this kernel.
template <class A>
void prepare_attention(const attention_shape& s);

// act[t][i] = A(silu(gu[t][i]) * gu[t][inter + i]).
template <class A>
void swiglu(const A* gate_up, A* act, std::int64_t rows, std::int64_t intermediate, cudaStream_t stream);

// The prefill's products with their next step fused (llm_fused_products.cu, TMA and wgmma, fp32
// sums; x [rows][hidden] and w [out][hidden] of A, 16-byte aligned). Supported (the _supported
// functions; the launchers throw std::invalid_argument otherwise): an sm_90a device, hidden a
// multiple of 64, and as below. max_blocks > 0 caps the persistent grid (tests: several tiles a
// block).
//
// gate_up_swiglu: act[t][i] = A(silu(A(g)) * A(u)), g = x[t] . w[i], u = x[t] . w[inter + i]:
// the gate/up product and swiglu in one kernel. intermediate a multiple of 128. cols: a tile's act
// columns, 128 or 112 (dividing intermediate); 0, the rule (gate_up_swiglu_cols: 112 where one row
// tile's tiles fill the SMs better).
bool gate_up_swiglu_supported(std::int64_t rows, std::int64_t intermediate, std::int64_t hidden);
int gate_up_swiglu_cols(std::int64_t rows, std::int64_t intermediate, int max_blocks = 0);
template <class A>
void gate_up_swiglu(const A* x, std::int64_t rows, const A* w_gate_up, std::int64_t intermediate, std::int64_t hidden,
                    A* act, cudaStream_t stream, int max_blocks = 0, int cols = 0);
// gate_up_swiglu_norm: gate_up_swiglu on rms_norm(x, norm_weight) where x is the fp32 residual
// itself, at most 64 rows (a decode): the kernel normalises the rows, so no norm kernel runs before
// it. Its product is A(weight * x) . w times the row's rms_scale, in fp32, then rounded as
// gate_up_swiglu rounds (rms_norm rounds A(weight * (x * scale)) before the product: in bf16 the
// two differ by the roundings' order, within A's precision). The operand is not normalised, so in
// fp16 a |weight * x| above 65504 becomes infinite where rms_norm's would not: the engine runs it
// with bf16 only.
bool gate_up_swiglu_norm_supported(std::int64_t rows, std::int64_t intermediate, std::int64_t hidden);
template <class A>
void gate_up_swiglu_norm(const float* x, std::int64_t rows, const A* norm_weight, float eps, const A* w_gate_up,
                         std::int64_t intermediate, std::int64_t hidden, A* act, cudaStream_t stream,
                         int max_blocks = 0, int cols = 0);
// qkv_rope_store: qkv = A(x W_qkv^T), then bias_rope_store with keep_rows on it (the same
// arithmetic and roundings), in one kernel. head_dim dividing 256, q_dim and kv_dim multiples of
// 256.
bool qkv_rope_store_supported(std::int64_t rows, std::int64_t hidden, const attention_shape& s);
template <class A>
void qkv_rope_store(const A* x, std::int64_t rows, std::int64_t hidden, const A* w_qkv, const A* bias,
                    const float* inv_freq, const std::int32_t* start, const attention_shape& s, void* k_cache,
                    void* v_cache, A* qkv, cudaStream_t stream, int max_blocks = 0);

// What argmax does after it, in the same launch: length[r] = min(length[r] + by, limit) for each
// row r. The limit keeps a free slot (which decodes a throwaway token each step it sits inside the
// batch) writing inside its cache; the host never lets a slot that holds a sequence reach it.
struct advance_lengths {
  std::int32_t* length = nullptr;  // none: nothing
  std::int32_t by = 0, limit = 0;
};
// out[r] = first index of the largest value of logits row r * in_stride + in_offset; then `then`.
void argmax(const float* logits, std::int64_t in_stride, std::int64_t in_offset, std::int64_t rows, std::int64_t vocab,
            std::int32_t* out, cudaStream_t stream, const advance_lengths& then = {});

// Small-token matrix product, bandwidth-bound (decode): for t < tokens, o < out_rows,
//   out[t * out_rows + o] = sum_i w[o * in + i] * x[t * in + i]   (+ beta * out[...] for fp32 output)
// w [out_rows][in] row-major and x [tokens][in] of A, fp32 accumulation; out fp32 (fp32_out) or
// A (beta must be 0). Each warp owns gemv_rows_per_warp consecutive output rows and streams them
// with 16-byte loads, several in flight per lane; x is read through L1 (it is tokens * in * 2 bytes).
// When out_rows is small, the warps of a block split K for the same rows (2, 4 or 8 slices, chosen
// from out_rows and in only) and add their partial sums in shared memory in a fixed order, so a
// shape's results are deterministic.
// Needs 1 <= tokens <= gemv_max_tokens, in % 8 == 0 and w, x 16-byte aligned (gemv_supported).
// 4: measured on the H200 (llama-3.1-8b decode, 2026-11-29), the gemv at 8 tokens ran a step in
// 8.15 ms against 5.81 ms for cuBLASLt at 16 (and 6.83 ms for a tensor-core skinny GEMM of the
// project's that was then dropped); at 4 tokens the gemv's 5.80 ms is as good as it gets.
constexpr std::int64_t gemv_max_tokens = 4;
constexpr int gemv_rows_per_warp = 2;
bool gemv_supported(std::int64_t tokens, std::int64_t in, const void* w, const void* x, bool fp8 = false);
template <class A>
void gemv(const A* w, std::int64_t out_rows, std::int64_t in, const A* x, std::int64_t tokens, void* out,
          bool fp32_out, float beta, cudaStream_t stream);
// The same with fp8 e4m3 weights (codes [out_rows][in], in % 16 == 0) and one fp32 scale per
// output row: out = scale[o] * sum_i code[o][i] x[t][i], codes widened to fp32 in registers.
template <class A>
void gemv_fp8(const std::uint8_t* w, const float* scales, std::int64_t out_rows, std::int64_t in, const A* x,
              std::int64_t tokens, void* out, bool fp32_out, float beta, cudaStream_t stream);
// Where a device has fp8 conversions in hardware (compute capability 8.9 and later), in % 64 == 0
// and tokens x in x 2 bytes fit gemv_rms_norm_max_staged, gemv_fp8 and gemv_rms_norm with fp8
// weights run their products on tensor cores instead (llm_kernels.cu says how): each code pair
// becomes an fp16 pair, x is converted to fp16 (exact for |x| >= 2^-14, saturated at +-65504),
// products and sums in fp32. ITERA_LLM_FP8_MMA_GEMV=0 keeps the CUDA-core kernels; a test may
// override the switch for the process (std::nullopt: the environment's choice again).
bool gemv_fp8_on_tensor_cores(std::int64_t tokens, std::int64_t in);
// Those kernels are persistent (as many blocks as stay resident): prepare_gemv_fp8 asks the
// occupancy for an input width once, as prepare_gemv_rms_norm does, before a stream is captured.
template <class A>
void prepare_gemv_fp8(std::int64_t tokens, std::int64_t in);
void override_gemv_fp8_on_tensor_cores(std::optional<bool> on);

// Fused decode products: the gemv above with its input formed in the kernel from what the small
// kernel before it would have read, which then is not launched (each launch of a decode step at
// batch 1 costs a few microseconds, mostly latency). w: [out_rows][in] of A, or fp8 e4m3 codes
// with one fp32 scale per row when scales is not null (in % 16 == 0); out, fp32_out and beta as in
// gemv. Tokens 1..gemv_max_tokens; the results equal the unfused pair's up to the summation order.
//
// gemv_rms_norm: out = rms_norm(x) W^T for x fp32 [tokens] rows at t * in_stride + in_offset (as
// rms_norm reads them; 16-byte aligned, in % 8 == 0), norm_weight [in] of A. Each block normalises
// the rows once into shared memory (A, tokens x in x 2 bytes, at most gemv_rms_norm_max_staged:
// what a block gets without opting in to more, which would need a per-kernel attribute set outside
// stream capture; llama-3.1-8b's 4096 at 4 tokens is 32 KiB) and then runs the product over as many
// tiles of rows as the grid, sized to stay resident, hands it. Rounds each element as rms_norm
// does (A(w * (x * scale)), scale = rsqrt(mean square + eps)); the sum of squares is added in
// another order, so a normalised element can differ from rms_norm's by one ulp of A, rarely. Same
// split and per-output summation order as gemv: otherwise identical results.
// prepare_gemv_rms_norm asks once (per device and shape) how many blocks stay resident, which a
// launch otherwise asks the first time: call it before capturing a stream that launches them.
constexpr std::int64_t gemv_rms_norm_max_staged = 47 * 1024;
bool gemv_rms_norm_supported(std::int64_t tokens, std::int64_t in, const void* w, const float* x,
                             const void* norm_weight, bool fp8);
template <class A>
void prepare_gemv_rms_norm(std::int64_t tokens, std::int64_t in);
template <class A>
void gemv_rms_norm(const void* w, const float* scales, std::int64_t out_rows, std::int64_t in, const float* x,
                   std::int64_t in_stride, std::int64_t in_offset, const A* norm_weight, float eps,
                   std::int64_t tokens, void* out, bool fp32_out, float beta, cudaStream_t stream);
// gemv_swiglu: out = swiglu(gate_up) W^T, gate_up [tokens][2 intermediate] of A (gate | up, 16-byte
// aligned, intermediate % 8 == 0), W [out_rows][intermediate]: each lane forms its 16-byte chunk
// of act = A(silu(g) * u) from the same chunk of g and u in registers, rounded as swiglu does
// (any intermediate: nothing is staged). Every warp forms the activations of its K slice for its
// rows (eight rows per warp, against the gemv's two), so SwiGLU's work is repeated out_rows / 8
// times: instructions that compete with the product's for issue slots. gemv_swiglu_pays: whether
// that stays well under the slots a bandwidth-bound product leaves free (the cost model is in
// llm_kernels.cu): bf16 weights up to 2 tokens; fp8 (twice the values per byte) not, measured.
bool gemv_swiglu_supported(std::int64_t tokens, std::int64_t intermediate, const void* w, const void* gate_up,
                           bool fp8);
// Measured on the H200 (llama-3.1-8b decode step, CUDA graph, 2026-11-30): bf16 at 1 row the
// down product with SwiGLU formed in it took 969 us a step against 967 + 40 for swiglu then gemv;
// at 2 rows the step 4.717 against 4.740 ms; fp8 at 1 row 721 us against 603 + 40: not fused.
constexpr bool gemv_swiglu_pays(std::int64_t tokens, bool fp8) { return !fp8 && tokens <= 2; }
template <class A>
void gemv_swiglu(const void* w, const float* scales, std::int64_t out_rows, std::int64_t intermediate,
                 const A* gate_up, std::int64_t tokens, void* out, bool fp32_out, float beta, cudaStream_t stream);

// fp8 weights generated on the device (weights.hpp: round_tensor): row r of a [rows][cols] tensor
// of init values (bf16-rounded) becomes scales[r] = fp8_row_scale(max |row|) and codes[r][i] =
// e4m3(value / scale), as the host quantises them.
void fill_init_fp8(std::uint8_t* codes, float* scales, std::int64_t rows, std::int64_t cols, int init_kind,
                   std::uint64_t seed, cudaStream_t stream);
// Activations for an fp8 product: row r of in [rows][cols] of A (cols % 8 == 0) becomes scales[r] =
// fp8_row_scale(max |row|) and codes[r][i] = e4m3(in / scale), as quantise_fp8_rows does on the host.
template <class A>
void quantise_rows_fp8(const A* in, std::int64_t rows, std::int64_t cols, std::uint8_t* codes, float* scales,
                       cudaStream_t stream);
// What an fp8 product of reduction length k with 16-bit output (A) multiplies its unscaled sums
// by (its alpha), so that they fit A: 1 for bf16 (fp32's range); for fp16 the largest power of
// two that keeps k x 448^2 (every code at e4m3's largest) within 65504. The activations' codes
// reach 448 in every row (one scale per token) and the weights' in every output channel, so
// without it a typical sum (sqrt(k) x ~110^2, 8e5 at k = 4096) would be far past fp16's range.
// A power of two: exact, and scale_product divides it out exactly.
template <class A>
constexpr float fp8_sums_scale(std::int64_t k) {
  if constexpr (std::is_same_v<A, bf16>) {
    return 1.0f;
  } else {
    double s = 1.0;
    while (s * static_cast<double>(k) * 448.0 * 448.0 > 65504.0) s /= 2;
    return static_cast<float>(s);
  }
}
// The largest power of two that fits: at k = 4096, 4096 x 448^2 = 2^12 x 200704 needs 2^-12 x
// 2^-2 (200704 x 2^-2 = 50176 <= 65504; x 2^-1 would be 100352).
static_assert(fp8_sums_scale<__half>(4096) == 0x1p-14f && fp8_sums_scale<__half>(4096) * 2 * 4096.0 * 448 * 448 > 65504);
static_assert(fp8_sums_scale<bf16>(4096) == 1.0f);
// The scales of an fp8 product applied to its unscaled sums d [rows][cols]: times col_scale[c]
// (per weight row) and row_scale[r] (per token). 16-bit (fp32 false): in place (d == out, beta 0),
// the sums having been multiplied by sums_scale (fp8_sums_scale<A>: 1 for bf16), divided out
// first; fp32: out = beta out + scaled d (sums_scale unused: the product ran with alpha 1).
template <class A>
void scale_product(void* d, void* out, bool fp32, std::int64_t rows, std::int64_t cols, const float* col_scale,
                   const float* row_scale, float beta, float sums_scale, cudaStream_t stream);
// out[r][i] = A(code[r][i] * scales[r]): fp8 weights for a cuBLASLt product in A.
template <class A>
void dequantise_fp8(const std::uint8_t* codes, const float* scales, std::int64_t rows, std::int64_t cols, A* out,
                    cudaStream_t stream);

// Every layer of a batch-1 decode step in one persistent kernel (llm_decode_step.cu says how):
// one block per SM whose producer warp streams every product's weights through shared memory
// while its consumer warps compute, behind grid-wide barriers, what the per-layer kernels compute
// (the fused norm products, bias and RoPE with the cache store, the decode attention, SwiGLU). The
// embedding before it and the final norm, LM head and argmax after it stay separate kernels.
// Per layer, device pointers: the projections as the gemv takes them (fp8 codes with row scales,
// or 16-bit of A), the qkv bias (A, or null), the two norms' weights (A), and the layer's K and V
// caches of the single sequence.
struct decode_layer {
  const void* wqkv = nullptr;
  const float* sqkv = nullptr;
  const void* bqkv = nullptr;
  const void* wo = nullptr;
  const float* so = nullptr;
  const void* wgu = nullptr;
  const float* sgu = nullptr;
  const void* wdown = nullptr;
  const float* sdown = nullptr;
  const void* input_norm = nullptr;
  const void* post_norm = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
};
struct decode_step_shape {
  std::int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0, max_context = 0;
  bool fp8_weights = false;
  kv_storage kv = kv_storage::bf16;
  float eps = 0, scale = 0;  // the norms' epsilon; the attention's score scale
};
// Why the kernel does not take a shape on the current device (or ITERA_LLM_DECODE_STEP=0), empty
// when it does; a test may override the switch (std::nullopt: the environment's choice again).
std::string decode_step_refusal(const decode_step_shape& s);
void override_decode_step(std::optional<bool> on);
// Whether the attention's cached K and V go through shared memory for this shape (each (kv head,
// split) item's keys fit the shared memory the kernel leaves), or are read from L2 (longer
// contexts); false for a shape the kernel does not take.
bool decode_step_keys_in_shared_memory(const decode_step_shape& s);
// Device memory decode_step needs beside its operands (the attention's split states and the
// barrier counter); 0 for a shape it does not take.
std::size_t decode_step_workspace_bytes(const decode_step_shape& s);
// The counters at the start of a decode_step workspace, which must be zero when the kernel starts:
// decode_step zeroes them itself (a memset before the kernel) unless told the launch before did
// (embed's clear).
words decode_step_counters(void* workspace);
// Sets the kernel's shared memory attribute and checks a block fits an SM: before capture.
template <class A>
void prepare_decode_step(const decode_step_shape& s);
// layers: a device array of s.layers entries. x: the fp32 residual [hidden], in (after the
// embedding) and out (before the final norm). qkv, attn, gate_up: scratch of A as the per-layer
// kernels use them (with fp8 weights attn and gate_up's first half are left holding fp16, the
// tensor cores' input). start: the sequence's length before the step (its new position), as
// bias_rope_store reads it. workspace: decode_step_workspace_bytes. Throws std::invalid_argument
// for a shape decode_step_refusal names.
// With ITERA_LLM_DECODE_STEP_TRACE=1, the last launch's time in each phase (block 0's, the mean
// block's, the slowest's, averaged over the layers), its grid barriers' release, its attention
// items, and block 0's ring tile by tile in the middle layer (tables, for tuning); empty otherwise.
std::string decode_step_trace();
template <class A>
void decode_step(const decode_layer* layers, const decode_step_shape& s, float* x, A* qkv, A* attn, A* gate_up,
                 const float* inv_freq, const std::int32_t* start, void* workspace, cudaStream_t stream,
                 bool counters_cleared = false);

}  // namespace itera::kernels::llm
