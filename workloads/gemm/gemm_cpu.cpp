// gemm on the cpu backend: OpenBLAS sgemm, with the same inputs and verification as the cuda side.
// Debian's OpenBLAS has no sbgemm, so format=bf16 rounds the inputs to bf16 and multiplies them
// widened to fp32: bf16 values, fp32 arithmetic, and the recipe fields say exactly that (R6).
#include <cblas.h>

#include <cstring>

#include <fmt/format.h>

#include "itera/core/runner.hpp"
#include "itera/cpu/cpu_backend.hpp"
#include "itera/env/fingerprint.hpp"
#include "workloads/gemm/gemm.hpp"
#include "workloads/gemm/numeric.hpp"

namespace itera::gemm {
namespace {

constexpr std::uint64_t seed_a = 0xA11CE, seed_b = 0xB0B;

// Rounds to the nearest bf16 value, as the cuda side stores its inputs (numeric.hpp).
float round_to_bf16(float f) { return numeric::bf16_to_float(numeric::float_to_bf16(f)); }

}  // namespace

void run_cpu(case_state& state) {
  const auto& t = traits(state.get_string("format"));
  if (t.id != format::fp32 && t.id != format::bf16)
    state.skip(fmt::format("the cpu backend runs gemm in fp32 and bf16 only; {} needs the cuda backend", t.name));
  const std::int64_t m = state.get_int("M"), n = state.get_int("N"), k = state.get_int("K");
  const bool bf16 = t.id == format::bf16;

  // Row-major A (M x K), B (K x N), D (M x N); values from the shared counter-based generator.
  // The fp64 copies for the reference exist only when verifying.
  const std::size_t elem = 4;
  const auto mk = static_cast<std::size_t>(m * k), kn = static_cast<std::size_t>(k * n), mn = static_cast<std::size_t>(m * n);
  const bool verify = state.options().verify;
  const double needed = static_cast<double>((mk + kn + mn) * elem + (verify ? (mk + kn) * sizeof(double) : 0));
  if (const auto mem = state.device().memory(); mem.free_bytes > 0 && needed > static_cast<double>(mem.free_bytes))
    state.skip(fmt::format("does not fit: needs {:.2f} GiB of host memory, {:.2f} GiB available", needed / (1 << 30),
                           static_cast<double>(mem.free_bytes) / (1 << 30)));
  memory_tracker& mem = state.device().memory_tracking();
  host_buffer a(mk * elem, mem), b(kn * elem, mem), d(mn * 4, mem);
  std::vector<double> a_values(verify ? mk : 0), b_values(verify ? kn : 0);
  for (std::size_t i = 0; i < mk; ++i) {
    float v = random_value(seed_a, i);
    if (bf16) v = round_to_bf16(v);
    a.as<float>()[i] = v;
    if (verify) a_values[i] = v;
  }
  for (std::size_t i = 0; i < kn; ++i) {
    float v = random_value(seed_b, i);
    if (bf16) v = round_to_bf16(v);
    b.as<float>()[i] = v;
    if (verify) b_values[i] = v;
  }

  const std::string input = bf16 ? "bf16 values in fp32 storage" : "fp32";
  state.set_field("precision.input_a", input);
  state.set_field("precision.input_b", input);
  state.set_field("precision.output", "fp32");
  state.set_field("precision.compute", "fp32 (OpenBLAS sgemm)");
  state.set_field("precision.accumulate", "fp32");
  state.set_field("library", blas_version());

  const auto launch = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
                  static_cast<blasint>(k), 1.0f, a.as<float>(), static_cast<blasint>(k), b.as<float>(),
                  static_cast<blasint>(n), 0.0f, d.as<float>(), static_cast<blasint>(n));
  };

  if (verify) {
    std::memset(d.data(), 0xFF, d.size());  // poison: NaN everywhere, so an unwritten element fails
    launch();
    const auto rows = sampled_rows(m, seed_a);
    std::vector<double> out, ref;
    for (const auto i : rows) {
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < k; ++p)
          sum += a_values[static_cast<std::size_t>(i * k + p)] * b_values[static_cast<std::size_t>(p * n + j)];
        ref.push_back(sum);
        out.push_back(d.as<float>()[i * n + j]);
      }
    }
    const double err = normalised_error(out, ref);
    const bool passed = err <= t.tolerance;
    state.set_verification(passed, err, t.tolerance,
                           fmt::format("fp64 reference over {} sampled rows x all columns", rows.size()));
    if (!passed)
      throw std::runtime_error(
          fmt::format("gemm {} verification failed: normalised error {:.3g} > tolerance {:.3g}", t.name, err, t.tolerance));
  }

  state.set_work(2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k),
                 static_cast<double>(m * k + k * n) * static_cast<double>(elem), static_cast<double>(m * n) * 4.0);
  state.set_ceiling_key(fmt::format("gemm.{}", t.name));
  state.exec(launch);
}

}  // namespace itera::gemm
