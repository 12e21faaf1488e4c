#pragma once
// A GEMM with the bias and the activation in its epilogue, on Hopper's TMA and wgmma
// (vit_gemm.cu): the vision encoder's fc1, whose activation (quick_gelu) cuBLASLt's epilogues do
// not offer, so that it ran as a separate pass over fc1's output (a read and a write of 270 MB per
// layer at batch 128, ~3.6 ms of the 43 ms batch on the H200).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "src/kernels/vit_kernels.cuh"

namespace itera::kernels::vit {

// Whether gemm_bias_activation takes the shape: sm_90a code on a compute capability 9.0 device,
// n a multiple of 256, k a multiple of 64. Its operands must be 16-byte aligned (the TMA's and the
// 16-byte stores' requirement; gemm_bias_activation throws std::invalid_argument otherwise).
bool gemm_bias_activation_supported(std::int64_t rows, std::int64_t n, std::int64_t k);

// out[r][c] = bf16(act(sum_i x[r][i] w[c][i] + bias[c])): x bf16 [rows][k], w bf16 [n][k] (a
// Linear's weight), bias bf16 [n], fp32 sums. round_sums: sum + bias rounded to bf16 before the
// activation (a bf16 Linear, then the activation: vit_gpu.hpp fc1_bf16_sums), else one rounding.
// The activation is activation.cuh's activate_fast (ex2 and rcp approximations; gelu exact).
// max_blocks > 0 caps the persistent grid (one block per SM otherwise): tests use it so that
// each block walks several tiles.
void gemm_bias_activation(const bf16* x, std::int64_t rows, const bf16* w, std::int64_t n, std::int64_t k,
                          const bf16* bias, activation act, bool round_sums, bf16* out, cudaStream_t stream,
                          int max_blocks = 0);

}  // namespace itera::kernels::vit
