#pragma once
// Skinny products on Hopper's wgmma (llm_skinny_gemm.cu): out[n][m] = x[n][k] W^T (+ beta out)
// for n of 5 to 64 rows (a decode step at batch 5 to 64), W bf16 [m][k], x bf16 [n][k], fp32 sums.
//
// Why: at those row counts a product reads its weights once and is bound by memory, yet cuBLASLt's
// kernels read them at 2.9-3.8 TB/s on the H200 (llama-3.1-8b decode at batch 64, 2026-11-30:
// qkv 3.0, o_proj 2.9, gate_up 3.8, down 3.2 TB/s; the copy ceiling is 4.28). This kernel streams
// W through a ring of cp.async stages at a depth that keeps the DRAM busy and leaves the
// arithmetic to one warpgroup instruction per 16 columns of k.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace itera::kernels::llm {

inline constexpr int skinny_max_rows = 64;

// Whether skinny_gemm takes the product: sm_90a code on a compute capability 9.0 device, n in
// 1..64, k a multiple of 64, 16-byte aligned operands, and ITERA_LLM_SKINNY_GEMM not 0.
bool skinny_gemm_supported(std::int64_t n, std::int64_t m, std::int64_t k, const void* w, const void* x,
                           const void* out);

// out[t][r] = sum_i x[t][i] w[r][i] for t < n, r < m: bf16 (fp32_out false, beta must be 0) or
// fp32 = sum + beta * out. The k range is split over a cluster of 1, 2, 4 or 8 blocks whose sums
// are added through distributed shared memory in rank order: the result does not change from run
// to run.
void skinny_gemm(const __nv_bfloat16* w, std::int64_t m, std::int64_t k, const __nv_bfloat16* x, std::int64_t n,
                 void* out, bool fp32_out, float beta, cudaStream_t stream);

}  // namespace itera::kernels::llm
