// The product trials' layer count (workloads/llm/product_trial_rules.hpp) on the H200 it was
// measured on: 60 MB of L2, llama-3.1-8b's products (16-bit weights, 32 layers).
#include <gtest/gtest.h>

#include <cstdint>

#include "workloads/llm/product_trial_rules.hpp"

namespace {

using itera::llm::trial_layer_count;

constexpr std::uint64_t h200_l2 = 62914560;  // cudaDevAttrL2CacheSize on the H200
constexpr double mb(std::int64_t rows, std::int64_t cols) { return 2.0 * static_cast<double>(rows * cols); }

TEST(product_trial_rules, layers_on_the_h200) {
  // gate/up 234.9 MB a layer, down 117.4, qkv 50.3, o_proj 33.6: four times the L2 is 251.7 MB.
  EXPECT_EQ(trial_layer_count(h200_l2, mb(28672, 4096), 32), 2);
  EXPECT_EQ(trial_layer_count(h200_l2, mb(4096, 14336), 32), 3);
  EXPECT_EQ(trial_layer_count(h200_l2, mb(6144, 4096), 32), 5);
  EXPECT_EQ(trial_layer_count(h200_l2, mb(4096, 4096), 32), 8);
  // The pair trials: o_proj with gate/up, down with qkv.
  EXPECT_EQ(trial_layer_count(h200_l2, mb(4096, 4096) + mb(28672, 4096), 32), 2);
  EXPECT_EQ(trial_layer_count(h200_l2, mb(4096, 14336) + mb(6144, 4096), 32), 2);
}

TEST(product_trial_rules, bounds) {
  EXPECT_EQ(trial_layer_count(h200_l2, 1e3, 2), 2);        // a tiny model: every layer
  EXPECT_EQ(trial_layer_count(h200_l2, 1e3, 1), 1);        // one layer: that one
  EXPECT_EQ(trial_layer_count(h200_l2, 1e12, 32), 2);      // past the L2 in one layer: still two
  EXPECT_EQ(trial_layer_count(h200_l2, 1e3, 32, 7), 7);    // forced
  EXPECT_EQ(trial_layer_count(h200_l2, 1e3, 32, 99), 32);  // forced, at most every layer
}

}  // namespace
