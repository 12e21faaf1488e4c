#pragma once
// Test inputs of a known scale in which every element matters: magnitudes uniform in [0, 1) times
// `scale`, clamped below at 2^-12 times `scale` (never zero), signs at random, from splitmix64
// seeded with `seed` (the same values on every platform). Callers round them to the storage type
// they test (rounding can take a magnitude up to `scale` itself).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace itera::test {

inline std::vector<float> nonzero_uniform(std::size_t count, std::uint64_t seed, float scale) {
  std::vector<float> out(count);
  std::uint64_t s = seed;
  for (auto& v : out) {
    s += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = (s ^ (s >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = std::max(static_cast<float>(z >> 40) * 0x1p-24f, 0x1p-12f) * scale;
    v = (z & 1) ? u : -u;
  }
  return out;
}

}  // namespace itera::test
