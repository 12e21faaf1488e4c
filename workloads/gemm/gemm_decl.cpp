#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "workloads/gemm/gemm.hpp"

namespace itera::gemm {

// Tolerances are normalised errors against an fp64 reference computed from the very inputs the
// device read (decoded from their storage type), so they cover accumulation order and output
// rounding only: fp32 ~1e-6 observed, tf32 ~3e-4, fp16 output ~3e-4, bf16 output ~2e-3.
const std::vector<format_traits>& all_formats() {
  static const std::vector<format_traits> formats = {
      {format::fp32, "fp32", "fp32", "fp32", "fp32", "fp32", "fp32", 50, 1e-4, 4, 4, 4},
      {format::tf32, "tf32", "fp32", "fp32", "fp32", "tf32 tensor core", "fp32", 80, 5e-3, 4, 4, 4},
      {format::fp16, "fp16", "fp16", "fp16", "fp16", "fp16 tensor core", "fp32", 70, 5e-3, 2, 2, 2},
      {format::bf16, "bf16", "bf16", "bf16", "bf16", "bf16 tensor core", "fp32", 80, 1e-2, 2, 2, 2},
      {format::fp8_e4m3, "fp8_e4m3", "fp8_e4m3", "fp8_e4m3", "bf16", "fp8 tensor core", "fp32", 89, 1e-2, 1, 1, 2},
      // cuBLASLt has no e5m2 x e5m2 kernel: the e5m2 case multiplies e5m2 A by e4m3 B, and says so.
      {format::fp8_e5m2, "fp8_e5m2", "fp8_e5m2", "fp8_e4m3", "bf16", "fp8 tensor core", "fp32", 89, 1e-2, 1, 1, 2},
      {format::int8, "int8", "int8", "int8", "int32", "int8 tensor core", "int32", 75, 0.0, 1, 1, 4},
      {format::fp4_e2m1, "fp4_e2m1", "fp4_e2m1", "fp4_e2m1", "bf16", "fp4 tensor core", "fp32", 100, 5e-2, 0.5, 0.5, 2},
  };
  return formats;
}

const format_traits& traits(format f) {
  for (const auto& t : all_formats())
    if (t.id == f) return t;
  throw std::logic_error("gemm format without traits");
}

const format_traits& traits(std::string_view name) {
  for (const auto& t : all_formats())
    if (t.name == name) return t;
  std::string names;
  for (const auto& t : all_formats()) names += (names.empty() ? "" : ", ") + std::string(t.name);
  throw usage_error(fmt::format("unknown gemm format '{}': choose from {}", name, names));
}

std::vector<std::int64_t> sampled_rows(std::int64_t m, std::uint64_t seed, std::size_t count) {
  std::vector<std::int64_t> rows;
  if (static_cast<std::size_t>(m) <= count) {
    for (std::int64_t i = 0; i < m; ++i) rows.push_back(i);
    return rows;
  }
  // First and last rows catch edge-tile bugs; the rest are spread at random.
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> pick(1, m - 2);
  rows = {0, m - 1};
  while (rows.size() < count) {
    const auto r = pick(rng);
    if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

double normalised_error(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) throw std::logic_error("normalised_error: sizes differ");
  double num = 0, den = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

workload_decl declaration() {
  workload_decl w;
  w.name = "gemm";
  w.version = workload_version;
  w.summary = "D = A x B (cuBLASLt on cuda, OpenBLAS on cpu); TFLOP/s and share of the measured GEMM ceiling";
  std::vector<std::string> names;
  for (const auto& t : all_formats()) names.emplace_back(t.name);
  w.axes = {
      {"M", axis_kind::integer, "1024,4096", "rows of A and D", {}, 1, std::int64_t{1} << 20},
      {"N", axis_kind::integer, "1024,4096", "columns of B and D", {}, 1, std::int64_t{1} << 20},
      {"K", axis_kind::integer, "1024,4096", "inner dimension", {}, 1, std::int64_t{1} << 20},
      {"format", axis_kind::string, "bf16", "operand format (precision fields record what really ran)", names, 0, 0},
  };
  w.suite = [](const backend& dev) -> std::vector<axis_overrides> {
    // Square sizes; the 8192^3 products are the ceilings, measured before the suite.
    std::vector<axis_overrides> groups;
    if (dev.name() == "cpu") {
      for (const char* n : {"256", "512"}) groups.push_back({{"M", n}, {"N", n}, {"K", n}, {"format", "fp32,bf16"}});
      return groups;
    }
    for (const char* n : {"1024", "4096"})
      groups.push_back({{"M", n}, {"N", n}, {"K", n}, {"format", "fp32,tf32,fp16,bf16,fp8_e4m3,fp8_e5m2,int8"}});
    return groups;
  };
  return w;
}

}  // namespace itera::gemm
