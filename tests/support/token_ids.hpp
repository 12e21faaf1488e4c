#pragma once
// Prompt token ids for the llm tests: n ids in 1 .. vocab - 1 (never token 0), from a seeded
// std::mt19937 (the same ids for a seed wherever the tests were built with the same library).
#include <cstdint>
#include <random>
#include <vector>

#include "workloads/llm/model.hpp"

namespace itera::test {

inline std::vector<std::int32_t> random_ids(const llm::model_config& c, std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> id(1, static_cast<std::int32_t>(c.vocab - 1));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (auto& t : ids) t = id(rng);
  return ids;
}

}  // namespace itera::test
