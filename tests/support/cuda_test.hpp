#pragma once
// Device tests' common fixture: the cuda backend on device 0, or the test skipped with the reason
// where no CUDA device is usable (or the build has no cuda backend). Cuda builds only include it.
#include <memory>

#include <gtest/gtest.h>

#include "itera/core/backend.hpp"
#include "itera/cuda/cuda_backend.hpp"

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

}  // namespace itera::test
