#pragma once
// cuBLASLt object holders shared by the cuda workloads (workloads/gemm/gemm_cuda.cu,
// workloads/llm/llm_cuda.cu, workloads/multimodal/vit_cuda.cu): owning pointers to the
// descriptors, a checked layout maker and the algorithm search's preference.
#include <cublasLt.h>

#include <cstdint>
#include <memory>

#include "itera/cuda/check.hpp"

namespace itera::cuda {

struct lt_deleter {
  void operator()(cublasLtMatmulDescOpaque_t* p) const { (void)cublasLtMatmulDescDestroy(p); }
  void operator()(cublasLtMatrixLayoutOpaque_t* p) const { (void)cublasLtMatrixLayoutDestroy(p); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { (void)cublasLtMatmulPreferenceDestroy(p); }
};
using matmul_desc = std::unique_ptr<cublasLtMatmulDescOpaque_t, lt_deleter>;
using matrix_layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, lt_deleter>;
using matmul_preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, lt_deleter>;

// A named holder: nvcc 13.0 (C++20) crashes on containers of the anonymous cublasLtMatmulAlgo_t, a
// struct behind a typedef ("internal error ... find_allocated_name_reference").
struct lt_algorithm {
  cublasLtMatmulAlgo_t algo;
};

// A column-major `rows` x `cols` matrix of `type` with leading dimension `ld` (elements).
inline matrix_layout make_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  ITERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<std::uint64_t>(rows),
                                                static_cast<std::uint64_t>(cols), ld));
  return matrix_layout(layout);
}

// The preference the workloads search cuBLASLt's algorithms with: at most `workspace_bytes` of
// workspace (the backend's).
inline matmul_preference make_preference(std::uint64_t workspace_bytes) {
  cublasLtMatmulPreference_t raw = nullptr;
  ITERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw));
  matmul_preference pref(raw);
  ITERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &workspace_bytes, sizeof workspace_bytes));
  return pref;
}

}  // namespace itera::cuda
