#pragma once
// Version numbers as NVIDIA's libraries return them, written the way their docs and `itera env`
// show them. Header-only and free of CUDA headers: the env readers (dlopen) and the cuda backend
// (linked) both use it, so a version reads the same wherever it is printed or compared.
#include <cstdint>
#include <string>

namespace itera {

// "13.0" from 13000: cudaRuntimeGetVersion, cudaDriverGetVersion, nvmlSystemGetCudaDriverVersion
// (1000 * major + 10 * minor).
inline std::string cuda_version_string(long long v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// "13.1.0" from 130100: cublasLtGetVersion (CUBLAS_VERSION = major * 10000 + minor * 100 + patch).
inline std::string cublaslt_version_string(long long v) {
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

}  // namespace itera
