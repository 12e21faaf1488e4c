// The llm decode attention's launch rules (src/kernels/decode_attention_rules.hpp) on the devices
// they were measured on or written for: the H200 (132 SMs, clusters) and an A100 (108 SMs, none).
// The H200's rows are docs/perf/2026-12-01-split-residual.md's: llama-3.1-8b's 8 kv heads, so
// batch b is 8b pairs.
#include <gtest/gtest.h>

#include <cstdint>

#include "src/kernels/decode_attention_rules.hpp"

namespace {

using namespace itera::kernels::llm;

TEST(decode_attention_rules, tensor_core_kernel_on_the_h200) {
  constexpr int sms = 132;
  EXPECT_EQ(tensor_core_decode_pairs(sms, true), 16);  // batch 2 and up
  // The most blocks a pair within two blocks per SM: run 6's fastest at batch 4, 8, 16, 32 and 64.
  const std::int64_t pairs[] = {16, 32, 64, 128, 256, 512, 1200};
  const int splits[] = {8, 8, 4, 2, 1, 1, 1};
  for (std::size_t i = 0; i < std::size(pairs); ++i) {
    EXPECT_EQ(tensor_core_decode_splits(pairs[i], sms, true), splits[i]) << pairs[i] << " pairs";
    EXPECT_LE(pairs[i] * splits[i], 2 * sms > pairs[i] ? 2 * sms : pairs[i]) << "within two blocks per SM";
  }
}

TEST(decode_attention_rules, loader_warps_where_two_blocks_fit_an_sm) {
  constexpr int sms = 132;
  // docs/perf/2026-12-03-attention-stamps.md, run 7 (graph steps): batch 16 and 32 (256 blocks,
  // splits 2 and 1) faster with them; batch 4 and 8 (clusters of 8 and 4) slower; batch 2 even;
  // batch 64's 512 blocks, four an SM, slower (run 6).
  const std::int64_t pairs[] = {16, 32, 64, 128, 256, 512};
  const bool loaders[] = {false, false, false, true, true, false};
  for (std::size_t i = 0; i < std::size(pairs); ++i) {
    const int splits = tensor_core_decode_splits(pairs[i], sms, true);
    EXPECT_EQ(tensor_core_decode_loaders(pairs[i] * splits, splits, sms), loaders[i]) << pairs[i] << " pairs";
  }
  EXPECT_TRUE(tensor_core_decode_loaders(264, 1, sms));
  EXPECT_FALSE(tensor_core_decode_loaders(265, 1, sms));
  EXPECT_FALSE(tensor_core_decode_loaders(128, 4, sms));
}

TEST(decode_attention_rules, cuda_core_kernel_on_the_h200) {
  constexpr int sms = 132;
  // The fewest blocks a pair reaching two blocks per SM: batch 1 (8 pairs) 8, as measured.
  EXPECT_EQ(cuda_core_decode_splits(8, sms, true), 8);
  EXPECT_EQ(cuda_core_decode_splits(1, sms, true), 8);   // capped at a portable cluster
  EXPECT_EQ(cuda_core_decode_splits(66, sms, true), 4);  // 264 blocks
  EXPECT_EQ(cuda_core_decode_splits(67, sms, true), 4);
  EXPECT_EQ(cuda_core_decode_splits(132, sms, true), 2);
  EXPECT_EQ(cuda_core_decode_splits(264, sms, true), 1);
}

TEST(decode_attention_rules, without_clusters_nothing_splits) {
  constexpr int sms = 108;  // an A100
  EXPECT_EQ(tensor_core_decode_pairs(sms, false), 108);  // a pair per SM, the rule measured before
  for (const std::int64_t pairs : {1, 16, 64, 108, 512}) {
    EXPECT_EQ(tensor_core_decode_splits(pairs, sms, false), 1) << pairs << " pairs";
    EXPECT_EQ(cuda_core_decode_splits(pairs, sms, false), 1) << pairs << " pairs";
  }
}

}  // namespace
