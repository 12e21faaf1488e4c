#pragma once
// Device tests' common fixture: the cuda backend on device 0, or the test skipped with the reason
// where no CUDA device is usable (or the build has no cuda backend). Cuda builds only include it.
#include <cuda_runtime.h>

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
  // A launch that failed in this test (its error returned and thrown, but also kept as the
  // runtime's last error) is not left for the next test's launch check to find: on the H200 a
  // launch refused in one test failed the next one too (docs/perf/2026-12-02-prefetch-tma-search.md).
  void TearDown() override {
    if (m_dev) (void)cudaGetLastError();
  }
  std::unique_ptr<backend> m_dev;
};

// A kernel choice a test pins for the life of a scope through its override function (an
// overridable_switch's, launch.cuh, or attention_choice.hpp's), then the environment's choice
// again: lets one test run both kernels. Engines made inside the scope keep the choice they read.
template <class T, void (*Override)(std::optional<T>)>
class override_scope {
 public:
  explicit override_scope(T choice) { Override(choice); }
  ~override_scope() { Override(std::nullopt); }
  override_scope(const override_scope&) = delete;
  override_scope& operator=(const override_scope&) = delete;
};

// The tensor-core attention kernel (attention_choice.hpp).
using attention_kernel_scope = override_scope<kernels::attention_kernel, &kernels::override_attention_kernel>;

}  // namespace itera::test
