// The greedy choice on the GPU (k::argmax, llm_kernels.cu) against the first index of the largest
// value computed here: rows split over a cluster of blocks (sm_90 and later; vocab 128256 as
// llama-3's, 16-byte loads, and an odd vocab, scalar loads; 5 rows on clusters of 8, 20-70 rows on
// smaller ones), and one block (a small vocab); the largest value tied in two blocks' slices (the
// smaller index wins, whichever block merges first), in one slice, and a row of -inf; rows read
// with a stride and an offset as the engine reads each sequence's last row; and the lengths it
// advances in the same launch, at and below their limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#if ITERA_WITH_CUDA
#include <cuda_runtime.h>

#include "itera/cuda/check.hpp"
#include "src/cuda/memory.hpp"
#include "src/kernels/llm_kernels.cuh"
#include "tests/support/cuda_test.hpp"
#include "tests/support/device_copies.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(llm_argmax, matches_first_largest) { GTEST_SKIP() << "built without the cuda backend"; }

#else

namespace k = itera::kernels::llm;

class llm_argmax : public itera::test::cuda_test {};

// The values on the device, and back.
using itera::test::download;
using itera::test::upload;

std::int32_t first_largest(const float* row, std::int64_t vocab) {
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < vocab; ++i)
    if (row[i] > row[best]) best = i;
  return static_cast<std::int32_t>(best);
}

TEST_F(llm_argmax, matches_first_largest_and_advances_lengths) {
  struct argmax_case {
    const char* name;
    std::int64_t vocab, rows_per_seq;
    std::int64_t seqs = 5;
  };
  // With more rows a row is split over fewer blocks (parts x rows <= SMs): on the H200's 132 SMs
  // 20, 40 and 70 rows take clusters of 4, 2 and 1.
  const argmax_case cases[] = {
      {"vocab 128256, 16-byte loads", 128256, 1},
      {"vocab 128256, each sequence's last of 3 rows", 128256, 3},
      {"vocab 50001, scalar loads", 50001, 1},
      {"vocab 1000, one block", 1000, 2},
      {"vocab 128256, 20 sequences", 128256, 1, 20},
      {"vocab 128256, 40 sequences", 128256, 1, 40},
      {"vocab 128256, 70 sequences", 128256, 1, 70},
  };
  std::mt19937 rng(20261130);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const argmax_case& ac : cases) {
    SCOPED_TRACE(ac.name);
    const std::int64_t seqs = ac.seqs, vocab = ac.vocab, rows = seqs * ac.rows_per_seq;
    std::vector<float> logits(static_cast<std::size_t>(rows * vocab));
    for (float& v : logits) v = normal(rng);
    const auto last_row = [&](std::int64_t s) { return logits.data() + ((s + 1) * ac.rows_per_seq - 1) * vocab; };
    // Sequence 1: its largest value twice, near the end and near the start (other blocks' slices
    // where the row is split); sequence 2: twice in adjacent places; sequence 3: every value -inf;
    // sequence 4: the largest at the very last index.
    last_row(1)[vocab - 7] = 100.0f;
    last_row(1)[13] = 100.0f;
    last_row(2)[vocab / 2] = 50.0f;
    last_row(2)[vocab / 2 + 1] = 50.0f;
    std::fill(last_row(3), last_row(3) + vocab, -std::numeric_limits<float>::infinity());
    last_row(4)[vocab - 1] = 200.0f;
    std::vector<std::int32_t> want(seqs);
    for (std::int64_t s = 0; s < seqs; ++s) want[static_cast<std::size_t>(s)] = first_largest(last_row(s), vocab);
    ASSERT_EQ(want[1], 13);
    ASSERT_EQ(want[2], vocab / 2);
    ASSERT_EQ(want[3], 0);
    ASSERT_EQ(want[4], vocab - 1);

    constexpr std::int32_t by = 1, limit = 10;  // 9 -> 10 and 10 -> 10: at the limit
    std::vector<std::int32_t> lengths{5, 9, 10, 0, 3}, advanced{6, 10, 10, 1, 4};
    for (std::int64_t s = 5; s < seqs; ++s) {
      lengths.push_back(static_cast<std::int32_t>(s % 11));
      advanced.push_back(std::min(lengths.back() + by, limit));
    }
    const auto d_logits = upload(logits);
    const auto d_out = upload(std::vector<std::int32_t>(seqs, -1));
    const auto d_lengths = upload(lengths);
    k::argmax(d_logits.as<float>(), ac.rows_per_seq, ac.rows_per_seq - 1, seqs, vocab, d_out.as<std::int32_t>(),
              nullptr, k::advance_lengths{d_lengths.as<std::int32_t>(), by, limit});
    ITERA_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(download<std::int32_t>(d_out), want);
    EXPECT_EQ(download<std::int32_t>(d_lengths), advanced);

    // Without lengths: the choice alone, the lengths untouched.
    const auto d_out2 = upload(std::vector<std::int32_t>(seqs, -1));
    k::argmax(d_logits.as<float>(), ac.rows_per_seq, ac.rows_per_seq - 1, seqs, vocab, d_out2.as<std::int32_t>(),
              nullptr);
    ITERA_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(download<std::int32_t>(d_out2), want);
    EXPECT_EQ(download<std::int32_t>(d_lengths), advanced);
  }
}

#endif

}  // namespace
