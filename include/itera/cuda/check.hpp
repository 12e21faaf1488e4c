#pragma once
// Error checks for the CUDA runtime, cuBLAS(Lt) and CUPTI: one generic macro behind three thin
// ones (llama.cpp's CUDA_CHECK_GEN). A failing call throws std::runtime_error naming the file, the
// line, the statement, the library's error name and text, and the device current on the thread,
// so that the runner records the case as failed and goes on. Library code never exits.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cupti.h>

#include <stdexcept>
#include <string>

namespace itera::cuda::detail {

[[noreturn]] inline void throw_call_error(const char* statement, const char* file, int line, const char* library,
                                          const char* error_name, const char* error_text) {
  // cudaGetDevice works even after a sticky error; -1 says it did not.
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) device = -1;
  std::string message = std::string(library) + " error " + (error_name ? error_name : "?") + " (" +
                        (error_text ? error_text : "no description") + ") in `" + statement + "` at " + file + ":" +
                        std::to_string(line) + " on device " + std::to_string(device);
  throw std::runtime_error(message);
}

inline const char* cupti_error_name(CUptiResult r) {
  const char* s = nullptr;
  return cuptiGetResultString(r, &s) == CUPTI_SUCCESS && s ? s : "CUPTI_ERROR_?";
}
inline const char* cupti_error_text(CUptiResult r) {
  const char* s = nullptr;
  return cuptiGetErrorMessage(r, &s) == CUPTI_SUCCESS && s ? s : "no description";
}

}  // namespace itera::cuda::detail

#define ITERA_CHECK_GEN(statement, success, library, name_fn, text_fn)                                       \
  do {                                                                                                       \
    const auto itera_check_status_ = (statement);                                                            \
    if (itera_check_status_ != (success))                                                                    \
      ::itera::cuda::detail::throw_call_error(#statement, __FILE__, __LINE__, library,                       \
                                              name_fn(itera_check_status_), text_fn(itera_check_status_));   \
  } while (0)

#define ITERA_CUDA_CHECK(statement) ITERA_CHECK_GEN(statement, cudaSuccess, "CUDA", cudaGetErrorName, cudaGetErrorString)
#define ITERA_CUBLAS_CHECK(statement) \
  ITERA_CHECK_GEN(statement, CUBLAS_STATUS_SUCCESS, "cuBLASLt", cublasLtGetStatusName, cublasLtGetStatusString)
#define ITERA_CUPTI_CHECK(statement)                                                       \
  ITERA_CHECK_GEN(statement, CUPTI_SUCCESS, "CUPTI", ::itera::cuda::detail::cupti_error_name, \
                  ::itera::cuda::detail::cupti_error_text)
// After every kernel launch: a bad configuration or a missing kernel image shows here, not later.
#define ITERA_CUDA_CHECK_LAUNCH() ITERA_CUDA_CHECK(cudaGetLastError())
