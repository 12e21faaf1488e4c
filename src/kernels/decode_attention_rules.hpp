#pragma once
// The llm decode attention's launch rules (llm_decode_attention.cu) as functions of the device's SM
// count and whether it has thread block clusters (sm_90 and later): plain C++, so that unit tests
// pin them (tests/unit/test_decode_attention_rules.cpp). A "pair" is a (row, kv head) of the step;
// each rule's measurements are beside its use in llm_decode_attention.cu.
#include <cstdint>

namespace itera::kernels::llm {

// The most blocks a pair's keys are dealt over (a portable cluster size).
inline constexpr int max_decode_splits = 8;

// The CUDA-core kernel: the fewest blocks a pair (1, 2, 4 or 8) giving at least two blocks per SM;
// 1 without clusters.
constexpr int cuda_core_decode_splits(std::int64_t pairs, int sms, bool clusters) {
  if (!clusters) return 1;
  int splits = 1;
  while (splits < max_decode_splits && pairs * splits < 2 * static_cast<std::int64_t>(sms)) splits *= 2;
  return splits;
}

// The fewest pairs the tensor-core kernel takes: 16 with clusters (its keys then split), a pair
// per SM without.
constexpr std::int64_t tensor_core_decode_pairs(int sms, bool clusters) { return clusters ? 16 : sms; }

// The tensor-core kernel: the most blocks a pair (1, 2, 4 or 8) that keep the launch within two
// blocks per SM; 1 without clusters.
constexpr int tensor_core_decode_splits(std::int64_t pairs, int sms, bool clusters) {
  if (!clusters) return 1;
  int splits = 1;
  while (splits < max_decode_splits && pairs * (2 * splits) <= 2 * static_cast<std::int64_t>(sms)) splits *= 2;
  return splits;
}

// The tensor-core kernel's blocks carry two more warps that only issue the ring's copies (128
// threads instead of 64; two such blocks fit an SM by registers) where its launch holds at most
// two blocks per SM and a pair's keys go to at most two blocks: there, with four warps an SM, the
// copies' issue held the stream back. At four blocks per SM (batch 64) the 128-thread blocks would
// not fit in one wave; in clusters of 4 and 8 (batch 8 and 4) they ran slower.
constexpr bool tensor_core_decode_loaders(std::int64_t blocks, int splits, int sms) {
  return splits <= 2 && blocks <= 2 * static_cast<std::int64_t>(sms);
}

}  // namespace itera::kernels::llm
