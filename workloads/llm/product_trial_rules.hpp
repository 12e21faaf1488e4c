#pragma once
// The decode graph's product trials' rules (llm_cuda.cu: product_trial, pair_trial) as plain
// functions, so that unit tests pin them (tests/unit/test_product_trial_rules.cpp); the
// measurements behind them are in docs/perf/2026-12-01-trials-and-warmup.md.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace itera::llm {

// How many layers a trial times each candidate over, for products of `layer_bytes` of weights a
// layer on a device of `l2_bytes` of L2: enough that the weights are four times the L2 (so that
// they stream from DRAM, as in a step), at least two, at most `layers`; `forced` > 0 instead
// (ITERA_LLM_TRIAL_LAYERS). Over all 32 layers of llama-3.1-8b the trials took ~8 s before a
// batch-64 server run's 64 graphs and picked no better than over these (run 8).
inline std::int64_t trial_layer_count(std::uint64_t l2_bytes, double layer_bytes, std::int64_t layers,
                                      std::int64_t forced = 0) {
  const std::int64_t want =
      forced > 0 ? forced : static_cast<std::int64_t>(std::ceil(4.0 * static_cast<double>(l2_bytes) / layer_bytes));
  return std::clamp<std::int64_t>(want, std::min<std::int64_t>(2, layers), layers);
}

}  // namespace itera::llm
