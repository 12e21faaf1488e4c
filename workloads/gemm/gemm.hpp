#pragma once
// gemm: D = A x B through cuBLASLt (cuda) or OpenBLAS (cpu), over axes M, N, K and format.
// FLOPs per repetition: 2*M*N*K. Bytes: A, B read once, D written once (in their storage types).
// Each case is verified against a cpu reference on random data before it is timed.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "itera/core/workload.hpp"

#if defined(__CUDACC__)
#define ITERA_HOST_DEVICE __host__ __device__
#else
#define ITERA_HOST_DEVICE
#endif

namespace itera::gemm {

inline constexpr int workload_version = 1;

enum class format { fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2, int8, fp4_e2m1 };

// What really runs for a format: storage of each operand, the compute mode, accumulation, output
// (R6). Written into every case as separate recipe fields.
struct format_traits {
  format id;
  std::string_view name;           // axis value: "bf16"
  std::string_view input_a, input_b, output;  // storage: "bf16", "fp8_e4m3", "fp32", "int32"
  std::string_view compute;        // "fp32", "tf32", "bf16 tensor core", ...
  std::string_view accumulate;     // "fp32", "int32"
  int min_compute_capability;      // x10: 80 for 8.0; hardware support
  double tolerance;                // normalised error allowed against the reference
  double bytes_a, bytes_b, bytes_out;  // storage per element (fp4: 0.5)
};

const std::vector<format_traits>& all_formats();
const format_traits& traits(format f);
const format_traits& traits(std::string_view name);  // usage_error for an unknown name

// The axis declarations and the `itera run` suite; backends are filled in by src/lib/registry.cpp.
workload_decl declaration();

// Rows of A the verification samples (all rows when M is smaller), the same on every backend.
std::vector<std::int64_t> sampled_rows(std::int64_t m, std::uint64_t seed, std::size_t count = 32);

// Normalised error ||out - ref||_2 / ||ref||_2.
double normalised_error(const std::vector<double>& out, const std::vector<double>& ref);

// cpu backend (OpenBLAS sgemm): fp32, and bf16 values widened to fp32; others are skipped with the reason.
void run_cpu(case_state& state);

// cuda backend (cuBLASLt), in gemm_cuda.cu.
void run_cuda(case_state& state);

// Formats table (R14): runs one small GEMM of `f` on the device and checks it against the cpu
// reference. Nothing is reported as enabled without this run.
struct format_probe {
  bool ran = false;
  bool passed = false;
  double error = 0;
  double tolerance = 0;
  std::string message;  // why it did not run, or the library's error
};
format_probe probe_cuda(backend& dev, format f);

// Deterministic random values in [-1, 1) from a counter-based hash: the same on host and device,
// never zeros, so the reference can regenerate any element it needs.
ITERA_HOST_DEVICE inline float random_value(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 40) * (2.0 / 16777216.0) - 1.0);
}

}  // namespace itera::gemm
