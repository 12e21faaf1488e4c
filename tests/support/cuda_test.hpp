#pragma once
// Device tests' common fixture: the cuda backend on device 0, or the test skipped with the reason
// where no CUDA device is usable (or the build has no cuda backend). Cuda builds only include it.
#include <memory>
#include <optional>

#include <gtest/gtest.h>

#include "itera/core/backend.hpp"
#include "itera/cuda/cuda_backend.hpp"
#include "src/kernels/attention_choice.hpp"

namespace itera::test {

class cuda_test : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto availability = cuda_availability();
    if (!availability.usable) GTEST_SKIP() << "no usable CUDA device: " << availability.reason;
    m_dev = make_cuda_backend(0);
  }
  std::unique_ptr<backend> m_dev;
};

// The tensor-core attention kernel for the life of a scope (attention_choice.hpp), then the
// environment's choice again: lets one test run both kernels.
class attention_kernel_scope {
 public:
  explicit attention_kernel_scope(kernels::attention_kernel k) { kernels::override_attention_kernel(k); }
  ~attention_kernel_scope() { kernels::override_attention_kernel(std::nullopt); }
  attention_kernel_scope(const attention_kernel_scope&) = delete;
  attention_kernel_scope& operator=(const attention_kernel_scope&) = delete;
};

}  // namespace itera::test
