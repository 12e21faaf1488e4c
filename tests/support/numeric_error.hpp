#pragma once
// How far a result is from its reference, for the tests that compare an engine against the cpu
// oracle: ||got - ref||_2 / ||ref||_2 in double (a reference of all zeros counts as norm 1e-30,
// so any difference shows). Sizes that differ are a test failure; the common prefix is compared.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>

namespace itera::test {

inline double normalised_error(std::span<const float> got, std::span<const float> ref) {
  EXPECT_EQ(got.size(), ref.size());
  const std::size_t n = std::min(got.size(), ref.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

}  // namespace itera::test
