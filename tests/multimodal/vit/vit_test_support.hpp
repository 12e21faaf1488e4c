#pragma once
// Helpers of the vision encoder tests: error-message checks and deterministic pixel tensors.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

#include "itera/core/errors.hpp"
#include "tests/multimodal/test_support.hpp"  // temp_dir
#include "workloads/gemm/gemm.hpp"
#include "workloads/multimodal/preprocess.hpp"

namespace itera::mm::test {

// Runs `fn`, which must throw E with every one of `parts` in its message.
template <class E>
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string_view> parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception thrown; expected one containing '" << *parts.begin() << "'";
  } catch (const E& e) {
    const std::string what = e.what();
    for (const auto part : parts)
      EXPECT_NE(what.find(part), std::string::npos) << "message: " << what << "\nlacks: " << part;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type; message: " << e.what();
  }
}

inline void expect_usage_error(const std::function<void()>& fn, std::initializer_list<std::string_view> parts) {
  expect_error<usage_error>(fn, parts);
}
inline void expect_input_error(const std::function<void()>& fn, std::initializer_list<std::string_view> parts) {
  expect_error<input_error>(fn, parts);
}

// N images of C x S x S with values of normalised pixels' scale (about -1.8..2.1 for CLIP's
// mean and std): uniform in [-2, 2), from a seed.
inline pixel_tensor random_pixels(std::uint32_t images, std::uint32_t channels, std::uint32_t side,
                                  std::uint64_t seed) {
  pixel_tensor t;
  t.views = images;
  t.channels = channels;
  t.height = side;
  t.width = side;
  t.values.resize(std::size_t{images} * channels * side * side);
  for (std::size_t i = 0; i < t.values.size(); ++i) t.values[i] = 2.0f * gemm::random_value(seed, i);
  return t;
}

}  // namespace itera::mm::test
