// gemm on the cuda backend: cuBLASLt, every format in the "TN" form.
//
// Layout. cuBLASLt is column-major. A is stored K x M column-major and used transposed (op T), B
// is stored K x N column-major (op N), D is M x N column-major; C is D with beta = 0. TN is the one
// form FP8 and IMMA (int8) kernels accept on Hopper and Ada, so every format uses it and the
// formats differ only in types. Stored that way, row i of A (as the M x K operand) is K contiguous
// elements at i*K, column j of B is K contiguous elements at j*K, and D(i, j) is at j*M + i.
//
// Each case: inputs generated on the device in their storage format (never zeros), the fastest of
// cuBLASLt's heuristic candidates picked by a short trial, one verified run against an fp64
// reference computed from the very bytes the device multiplied, then the runner's timing.
#include <cblas.h>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "itera/cuda/check.hpp"
#include "itera/env/versions.hpp"
#include "src/cuda/cublaslt_util.hpp"
#include "src/cuda/cuda_backend_impl.hpp"
#include "src/cuda/text.hpp"
#include "workloads/gemm/gemm.hpp"
#include "workloads/gemm/numeric.hpp"

namespace itera::gemm {
namespace {

using cuda::cat;
using cuda::cuda_backend;
using cuda::device_buffer;
using cuda::sig3;

// ---------------------------------------------------------------------------------------------
// What each format runs as in cuBLASLt

struct lt_types {
  cudaDataType_t a, b, d;  // storage; C has D's type
  cublasComputeType_t compute;
  cudaDataType_t scale;  // type of alpha and beta
  int bits_a, bits_b, bits_d;
  bool block_scaled;  // fp4: one ue4m3 scale per 16 elements of A and of B
};

lt_types lt_types_of(format f) {
  switch (f) {
    case format::fp32:
      return {CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, 32, 32, 32, false};
    case format::tf32:
      return {CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, 32, 32, 32, false};
    case format::fp16:
      return {CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F, 16, 16, 16, false};
    case format::bf16:
      return {CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F, 16, 16, 16, false};
    case format::fp8_e4m3:
      return {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F, 8, 8, 16, false};
    case format::fp8_e5m2:
      // cuBLASLt has no e5m2 x e5m2 kernel; e5m2 x e4m3 is the closest pair it runs.
      return {CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F, 8, 8, 16, false};
    case format::int8:
      return {CUDA_R_8I, CUDA_R_8I, CUDA_R_32I, CUBLAS_COMPUTE_32I, CUDA_R_32I, 8, 8, 32, false};
    case format::fp4_e2m1:
      return {CUDA_R_4F_E2M1, CUDA_R_4F_E2M1, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F, 4, 4, 16, true};
  }
  throw std::logic_error("gemm: format without cuBLASLt types");
}

const char* storage_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return "fp32";
    case CUDA_R_16F: return "fp16";
    case CUDA_R_16BF: return "bf16";
    case CUDA_R_8F_E4M3: return "fp8_e4m3";
    case CUDA_R_8F_E5M2: return "fp8_e5m2";
    case CUDA_R_8I: return "int8";
    case CUDA_R_32I: return "int32";
    case CUDA_R_4F_E2M1: return "fp4_e2m1";
    default: return "?";
  }
}

// The precision fields come from the traits table and the launch from lt_types_of(): they must
// describe the same thing (R6), so a divergence is a bug, reported before anything runs.
void check_traits_match(const format_traits& t, const lt_types& lt) {
  const auto mismatch = [&](const char* what, std::string_view trait, std::string_view launched) {
    throw std::logic_error(cat("gemm ", t.name, ": traits say ", what, " is ", trait, " but cuBLASLt is given ", launched));
  };
  if (t.input_a != storage_name(lt.a)) mismatch("input_a", t.input_a, storage_name(lt.a));
  if (t.input_b != storage_name(lt.b)) mismatch("input_b", t.input_b, storage_name(lt.b));
  if (t.output != storage_name(lt.d)) mismatch("output", t.output, storage_name(lt.d));
  if (t.bytes_a * 8 != lt.bits_a || t.bytes_b * 8 != lt.bits_b || t.bytes_out * 8 != lt.bits_d)
    mismatch("the element sizes", cat(t.bytes_a, "/", t.bytes_b, "/", t.bytes_out, " bytes"),
             cat(lt.bits_a, "/", lt.bits_b, "/", lt.bits_d, " bits"));
}

std::uint64_t storage_bytes(std::uint64_t elements, int bits) { return (elements * static_cast<std::uint64_t>(bits) + 7) / 8; }

// Shape rules of the kernels cuBLASLt has for a format (cuBLASLt documentation, cublasLtMatmul):
// an empty string when the shape is accepted.
std::string shape_requirement(format f, std::int64_t m, std::int64_t n, std::int64_t k) {
  switch (f) {
    case format::fp8_e4m3:
    case format::fp8_e5m2:
      if (m % 16 || n % 16 || k % 16)
        return "fp8 GEMMs need M, N and K to be multiples of 16 (cuBLASLt FP8 kernels need 16-byte aligned "
               "rows in the TN layout)";
      return {};
    case format::int8:
      if (m % 4 || k % 4)
        return "int8 GEMMs need M and K to be multiples of 4 (cuBLASLt IMMA kernels in the TN layout need "
               "leading dimensions that are multiples of 4)";
      return {};
    case format::fp4_e2m1:
      if (m % 32 || n % 32 || k % 32)
        return "fp4 GEMMs need M, N and K to be multiples of 32 (two elements per byte, 16-element scale "
               "blocks, 16-byte aligned rows)";
      return {};
    default:
      return {};
  }
}

// fp4 block scales: one ue4m3 per 16 elements along K, tiled by cuBLASLt in 128 x 4 blocks of scales
// (outer dimension padded to 128, scale columns to 4). All scales are 1.0 here, so their order
// within the tiles does not matter, only that the tensor is large enough.
std::uint64_t block_scale_count(std::int64_t outer, std::int64_t k) {
  const auto round_up = [](std::int64_t v, std::int64_t q) { return (v + q - 1) / q * q; };
  return static_cast<std::uint64_t>(round_up(outer, 128) * round_up((k + 15) / 16, 4));
}
constexpr unsigned char ue4m3_one = 0x38;  // 1.0: exponent 7 (the bias), mantissa 0

// ---------------------------------------------------------------------------------------------
// Input generation on the device

// random_value() mapped away from zero: magnitudes in [0.125, 1), the sign kept. No format rounds
// these to zero, so an unwritten or mis-indexed element cannot hide.
__device__ __forceinline__ float nonzero_value(std::uint64_t seed, std::uint64_t index) {
  const float u = random_value(seed, index);
  const float magnitude = 0.125f + 0.875f * fabsf(u);
  return u < 0.0f ? -magnitude : magnitude;
}

struct encode_fp32 {
  __device__ float operator()(float x) const { return x; }
};
struct encode_fp16 {
  __device__ std::uint16_t operator()(float x) const { return __half_as_ushort(__float2half_rn(x)); }
};
struct encode_bf16 {
  __device__ std::uint16_t operator()(float x) const { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};
struct encode_e4m3 {
  __device__ std::uint8_t operator()(float x) const { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
};
struct encode_e5m2 {
  __device__ std::uint8_t operator()(float x) const { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2); }
};
struct encode_int8 {
  // Magnitudes 16..127: int8 products summed over K stay far inside int32 for any K this tool takes.
  __device__ std::int8_t operator()(float x) const { return static_cast<std::int8_t>(__float2int_rn(x * 127.0f)); }
};

template <typename T, typename Encode>
__global__ void fill_kernel(T* out, std::uint64_t count, std::uint64_t seed, Encode encode) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    out[i] = encode(nonzero_value(seed, i));
}

// e2m1, two per byte, the even element in the low nibble. Scaled by 4 so magnitudes land in
// [0.5, 4): e2m1's nonzero values start at 0.5.
__global__ void fill_fp4_kernel(std::uint8_t* out, std::uint64_t count, std::uint64_t seed) {
  const std::uint64_t bytes = (count + 1) / 2;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t b = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < bytes; b += stride) {
    const std::uint64_t i = 2 * b;
    const unsigned lo = __nv_cvt_float_to_fp4(4.0f * nonzero_value(seed, i), __NV_E2M1, cudaRoundNearest) & 0xfu;
    const unsigned hi =
        i + 1 < count ? __nv_cvt_float_to_fp4(4.0f * nonzero_value(seed, i + 1), __NV_E2M1, cudaRoundNearest) & 0xfu
                      : 0u;
    out[b] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
}

// D rows into a dense block: out[r * n + j] = D(rows[r], j) = d[j * m + rows[r]].
template <typename T>
__global__ void gather_rows_kernel(const T* d, std::int64_t m, std::int64_t n, const std::int64_t* rows,
                                   std::int64_t row_count, T* out) {
  const std::int64_t total = row_count * n;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const std::int64_t r = i / n, j = i % n;
    out[i] = d[j * m + rows[r]];
  }
}

unsigned grid_for(std::uint64_t work, int multiprocessors) {
  const std::uint64_t blocks = (work + 255) / 256;
  const std::uint64_t cap = static_cast<std::uint64_t>(std::max(multiprocessors, 1)) * 32;
  return static_cast<unsigned>(std::max<std::uint64_t>(1, std::min(blocks, cap)));
}

template <typename T, typename Encode>
void fill(const device_buffer& buf, std::uint64_t count, std::uint64_t seed, Encode encode, cudaStream_t stream,
          int sms) {
  fill_kernel<<<grid_for(count, sms), 256, 0, stream>>>(buf.as<T>(), count, seed, encode);
  ITERA_CUDA_CHECK_LAUNCH();
}

void fill_operand(cudaDataType_t type, const device_buffer& buf, std::uint64_t count, std::uint64_t seed,
                  cudaStream_t stream, int sms) {
  switch (type) {
    case CUDA_R_32F: return fill<float>(buf, count, seed, encode_fp32{}, stream, sms);
    case CUDA_R_16F: return fill<std::uint16_t>(buf, count, seed, encode_fp16{}, stream, sms);
    case CUDA_R_16BF: return fill<std::uint16_t>(buf, count, seed, encode_bf16{}, stream, sms);
    case CUDA_R_8F_E4M3: return fill<std::uint8_t>(buf, count, seed, encode_e4m3{}, stream, sms);
    case CUDA_R_8F_E5M2: return fill<std::uint8_t>(buf, count, seed, encode_e5m2{}, stream, sms);
    case CUDA_R_8I: return fill<std::int8_t>(buf, count, seed, encode_int8{}, stream, sms);
    case CUDA_R_4F_E2M1:
      fill_fp4_kernel<<<grid_for((count + 1) / 2, sms), 256, 0, stream>>>(buf.as<std::uint8_t>(), count, seed);
      ITERA_CUDA_CHECK_LAUNCH();
      return;
    default: throw std::logic_error(cat("gemm: no generator for storage ", storage_name(type)));
  }
}

// ---------------------------------------------------------------------------------------------
// Host decoding of raw device bytes

// Elements [0, count) of a raw array of `type`, widened to double.
void decode(cudaDataType_t type, const std::uint8_t* raw, std::uint64_t count, double* out) {
  namespace nu = numeric;
  switch (type) {
    case CUDA_R_32F:
      for (std::uint64_t i = 0; i < count; ++i) {
        float v;
        std::memcpy(&v, raw + 4 * i, 4);
        out[i] = v;
      }
      return;
    case CUDA_R_32I:
      for (std::uint64_t i = 0; i < count; ++i) {
        std::int32_t v;
        std::memcpy(&v, raw + 4 * i, 4);
        out[i] = v;
      }
      return;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      for (std::uint64_t i = 0; i < count; ++i) {
        std::uint16_t v;
        std::memcpy(&v, raw + 2 * i, 2);
        out[i] = type == CUDA_R_16F ? nu::fp16_to_float(v) : nu::bf16_to_float(v);
      }
      return;
    case CUDA_R_8F_E4M3:
      for (std::uint64_t i = 0; i < count; ++i) out[i] = nu::fp8_e4m3_to_float(raw[i]);
      return;
    case CUDA_R_8F_E5M2:
      for (std::uint64_t i = 0; i < count; ++i) out[i] = nu::fp8_e5m2_to_float(raw[i]);
      return;
    case CUDA_R_8I:
      for (std::uint64_t i = 0; i < count; ++i) out[i] = static_cast<std::int8_t>(raw[i]);
      return;
    case CUDA_R_4F_E2M1:
      for (std::uint64_t i = 0; i < count; ++i) out[i] = nu::fp4_e2m1_packed_at(raw, i);
      return;
    default: throw std::logic_error(cat("gemm: no decoder for storage ", storage_name(type)));
  }
}

// ---------------------------------------------------------------------------------------------
// cuBLASLt objects

using cuda::make_layout;
using cuda::matmul_desc;
using cuda::matmul_preference;
using cuda::matrix_layout;

std::string cublaslt_version() {
  return "cuBLASLt " + cublaslt_version_string(static_cast<long long>(cublasLtGetVersion()));
}

// A named holder: nvcc 13.0 (C++20) crashes destroying a std::vector of cublasLtMatmulAlgo_t, an
// anonymous struct behind a typedef ("internal error ... find_allocated_name_reference").
struct algorithm {
  cublasLtMatmulAlgo_t algo;
  int heuristic_rank;  // position in cuBLASLt's answer, 0 = its first choice
};

std::atomic<std::uint64_t> next_seed{1};

constexpr std::uint64_t device_memory_margin = std::uint64_t{256} << 20;  // context growth, library scratch
constexpr int max_algorithms = 8;

struct verification_result {
  double error = 0;
  std::size_t rows = 0;
};

// One GEMM problem on the device: buffers, inputs, cuBLASLt descriptors, candidate algorithms.
class gemm_case {
 public:
  gemm_case(cuda_backend& dev, std::int64_t m, std::int64_t n, std::int64_t k, const format_traits& t)
      : m_dev(dev), m_m(m), m_n(n), m_k(k), m_traits(t), m_types(lt_types_of(t.id)) {
    check_traits_match(t, m_types);
    const int cc = dev.compute_capability_x10();
    if (cc < t.min_compute_capability)
      throw case_skipped(cat("format ", t.name, " needs compute capability ", t.min_compute_capability / 10, ".",
                             t.min_compute_capability % 10, "; ", dev.device_name(), " has ", cc / 10, ".", cc % 10));
    if (const auto rule = shape_requirement(t.id, m, n, k); !rule.empty())
      throw case_skipped(cat("M=", m, " N=", n, " K=", k, ": ", rule));

    const auto um = static_cast<std::uint64_t>(m), un = static_cast<std::uint64_t>(n),
               uk = static_cast<std::uint64_t>(k);
    m_bytes_a = storage_bytes(um * uk, m_types.bits_a);
    m_bytes_b = storage_bytes(uk * un, m_types.bits_b);
    m_bytes_d = storage_bytes(um * un, m_types.bits_d);
    std::uint64_t scale_bytes = 0;
    if (m_types.block_scaled) scale_bytes = block_scale_count(m, k) + block_scale_count(n, k);
    const std::uint64_t gather_bytes = storage_bytes(std::min<std::uint64_t>(um, 32) * un, m_types.bits_d);
    const std::uint64_t needed = m_bytes_a + m_bytes_b + m_bytes_d + scale_bytes + gather_bytes;
    const device_memory mem = dev.memory();
    if (needed + device_memory_margin > mem.free_bytes)
      throw case_skipped(cat("does not fit: needs ", cuda::format_gib(needed), " (A ", cuda::format_gib(m_bytes_a),
                             ", B ", cuda::format_gib(m_bytes_b), ", D ", cuda::format_gib(m_bytes_d), "), ",
                             cuda::format_gib(mem.free_bytes), " free on ", dev.device_name()));
    try {
      m_a = dev.allocate(m_bytes_a);
      m_b = dev.allocate(m_bytes_b);
      m_d = dev.allocate(m_bytes_d);
      if (m_types.block_scaled) {
        m_scale_a = dev.allocate(block_scale_count(m, k));
        m_scale_b = dev.allocate(block_scale_count(n, k));
      }
    } catch (const cuda::out_of_memory& e) {
      throw case_skipped(cat("does not fit: ", e.what(), " (", cuda::format_gib(needed), " needed in all)"));
    }
    build_descriptors();
  }

  std::uint64_t bytes_a() const { return m_bytes_a; }
  std::uint64_t bytes_b() const { return m_bytes_b; }
  std::uint64_t bytes_d() const { return m_bytes_d; }

  void generate() {
    const std::uint64_t seed = next_seed.fetch_add(1);
    m_seed_a = 0xA11CE0000ull + 2 * seed;
    m_seed_b = 0xA11CE0000ull + 2 * seed + 1;
    const cudaStream_t s = m_dev.stream();
    const int sms = m_dev.properties().multiProcessorCount;
    const auto um = static_cast<std::uint64_t>(m_m), un = static_cast<std::uint64_t>(m_n),
               uk = static_cast<std::uint64_t>(m_k);
    fill_operand(m_types.a, m_a, um * uk, m_seed_a, s, sms);
    fill_operand(m_types.b, m_b, uk * un, m_seed_b, s, sms);
    if (m_types.block_scaled) {
      ITERA_CUDA_CHECK(cudaMemsetAsync(m_scale_a.data(), ue4m3_one, m_scale_a.bytes(), s));
      ITERA_CUDA_CHECK(cudaMemsetAsync(m_scale_b.data(), ue4m3_one, m_scale_b.bytes(), s));
    }
    ITERA_CUDA_CHECK(cudaStreamSynchronize(s));
  }

  // cuBLASLt's candidates for this problem, best first by its heuristic. Skips the case when it
  // has none.
  void find_algorithms() {
    const matmul_preference pref = cuda::make_preference(m_dev.lt_workspace_size());
    cublasLtMatmulHeuristicResult_t results[max_algorithms] = {};
    int returned = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(m_dev.lt_handle(), m_op.get(), m_layout_a.get(), m_layout_b.get(),
                                       m_layout_d.get(), m_layout_d.get(), pref.get(), max_algorithms, results, &returned);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && returned == 0))
      throw case_skipped(cat(cublaslt_version(), " has no ", m_traits.name, " algorithm for M=", m_m, " N=", m_n,
                             " K=", m_k, " on ", m_dev.device_name(), " (heuristic: ", cublasLtGetStatusName(status),
                             ", ", returned, " candidates)"));
    ITERA_CUBLAS_CHECK(status);  // any other status is a wrong call of ours: a failure, not a skip
    m_algorithms.clear();
    for (int i = 0; i < returned; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS) m_algorithms.push_back({results[i].algo, i});
    if (m_algorithms.empty())
      throw case_skipped(cat(cublaslt_version(), " returned ", returned, " ", m_traits.name, " candidates for M=", m_m,
                             " N=", m_n, " K=", m_k, ", none usable"));
    m_chosen = 0;
    m_tried = 1;
  }

  // Times each candidate briefly with the backend's own timer, one launch per timed region, and
  // keeps the one with the smallest median. Both choices matter. A pair of events around a few
  // short launches measures the launch path, not the kernels (about 250 us per launch after an
  // idle gap on the H200 VM, docs/perf), and picked a 3x slower fp32 algorithm at 1024^3. A CUPTI
  // span over many back-to-back launches of a 5 us kernel measures the launch rate (about 7 us per
  // launch with CUPTI's API records), so every candidate looked alike. One launch per region is
  // the kernel's own duration. A candidate whose launch fails is passed over.
  void choose_fastest() {
    const auto timer = m_dev.make_timer();
    m_selection_method = std::string(timer->method());
    const auto time_candidate = [&](std::size_t index, int regions) -> double {
      if (launch_status(m_algorithms[index].algo) != CUBLAS_STATUS_SUCCESS) return -1;  // warm
      std::vector<double> ms;
      for (int r = 0; r < regions; ++r) {
        timer->start();
        const cublasStatus_t status = launch_status(m_algorithms[index].algo);
        timer->stop();
        const double ns = timer->elapsed_ns();
        if (status != CUBLAS_STATUS_SUCCESS) return -1;
        ms.push_back(ns * 1e-6);
      }
      std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
      return ms[ms.size() / 2];
    };
    const double first_ms = time_candidate(0, 1);
    if (first_ms < 0)
      throw std::runtime_error(cat(cublaslt_version(), " failed to launch its first-ranked ", m_traits.name, " algorithm"));
    // A trial costs about 2 ms of kernels per candidate (3 to 15 regions), and none at all past
    // 50 ms a launch, where the heuristic's first choice is kept.
    m_chosen = 0;
    m_tried = 1;
    if (first_ms > 50.0 || m_algorithms.size() == 1) return;
    const int repetitions = static_cast<int>(std::clamp(2.0 / std::max(first_ms, 1e-3), 3.0, 15.0));
    double best_ms = std::numeric_limits<double>::infinity();
    m_tried = 0;
    for (std::size_t i = 0; i < m_algorithms.size(); ++i) {
      const double ms = time_candidate(i, repetitions);
      ++m_tried;
      if (ms >= 0 && ms < best_ms) {
        best_ms = ms;
        m_chosen = i;
      }
    }
    // A failed cuBLASLt launch can leave a launch error behind; the chosen one worked.
    (void)cudaGetLastError();
  }

  const std::string& selection_method() const { return m_selection_method; }
  int chosen_rank() const { return m_algorithms.at(m_chosen).heuristic_rank; }
  std::size_t tried() const { return m_tried; }

  cublasStatus_t launch_status(const cublasLtMatmulAlgo_t& algo) {
    const void* alpha = m_types.scale == CUDA_R_32I ? static_cast<const void*>(&m_alpha_i) : &m_alpha_f;
    const void* beta = m_types.scale == CUDA_R_32I ? static_cast<const void*>(&m_beta_i) : &m_beta_f;
    return cublasLtMatmul(m_dev.lt_handle(), m_op.get(), alpha, m_a.data(), m_layout_a.get(), m_b.data(),
                          m_layout_b.get(), beta, m_d.data(), m_layout_d.get(), m_d.data(), m_layout_d.get(), &algo,
                          m_dev.lt_workspace(), m_dev.lt_workspace_size(), m_dev.stream());
  }
  void launch() { ITERA_CUBLAS_CHECK(launch_status(m_algorithms[m_chosen].algo)); }

  // Poisons D, runs the chosen algorithm once and waits for it.
  void run_once() {
    // NaN in every float format; for int32, 0x7f7f7f7f, far beyond any sum of K int8 products.
    const int poison = m_types.d == CUDA_R_32I ? 0x7f : 0xff;
    ITERA_CUDA_CHECK(cudaMemsetAsync(m_d.data(), poison, m_d.bytes(), m_dev.stream()));
    launch();
    ITERA_CUDA_CHECK(cudaStreamSynchronize(m_dev.stream()));
  }

  // Normalised error of the sampled rows of D against an fp64 reference from the device's own
  // input bytes (all of B, the sampled rows of A).
  verification_result verify() {
    const cudaStream_t s = m_dev.stream();
    const auto rows = sampled_rows(m_m, m_seed_a);
    const auto row_count = static_cast<std::int64_t>(rows.size());
    const auto uk = static_cast<std::uint64_t>(m_k), un = static_cast<std::uint64_t>(m_n);

    // Rows of A: row i is K contiguous elements at element i*K (whole bytes: K is even for fp4).
    const std::uint64_t row_bytes = storage_bytes(uk, m_types.bits_a);
    std::vector<std::uint8_t> raw(row_bytes);
    std::vector<double> a_rows(rows.size() * uk);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto* src = m_a.as<std::uint8_t>() + static_cast<std::uint64_t>(rows[r]) * row_bytes;
      ITERA_CUDA_CHECK(cudaMemcpyAsync(raw.data(), src, row_bytes, cudaMemcpyDeviceToHost, s));
      ITERA_CUDA_CHECK(cudaStreamSynchronize(s));
      decode(m_types.a, raw.data(), uk, a_rows.data() + r * uk);
    }

    // The sampled rows of D, gathered on the device into one dense block.
    device_buffer rows_dev = m_dev.allocate(rows.size() * sizeof(std::int64_t));
    const std::uint64_t gathered_elements = rows.size() * un;
    device_buffer gathered = m_dev.allocate(storage_bytes(gathered_elements, m_types.bits_d));
    ITERA_CUDA_CHECK(cudaMemcpyAsync(rows_dev.data(), rows.data(), rows_dev.bytes(), cudaMemcpyHostToDevice, s));
    const unsigned grid = grid_for(gathered_elements, m_dev.properties().multiProcessorCount);
    if (m_types.bits_d == 32)
      gather_rows_kernel<<<grid, 256, 0, s>>>(m_d.as<std::uint32_t>(), m_m, m_n, rows_dev.as<std::int64_t>(),
                                              row_count, gathered.as<std::uint32_t>());
    else if (m_types.bits_d == 16)
      gather_rows_kernel<<<grid, 256, 0, s>>>(m_d.as<std::uint16_t>(), m_m, m_n, rows_dev.as<std::int64_t>(),
                                              row_count, gathered.as<std::uint16_t>());
    else
      throw std::logic_error("gemm: no gather for this output size");
    ITERA_CUDA_CHECK_LAUNCH();
    std::vector<std::uint8_t> d_raw(gathered.bytes());
    ITERA_CUDA_CHECK(cudaMemcpyAsync(d_raw.data(), gathered.data(), gathered.bytes(), cudaMemcpyDeviceToHost, s));
    ITERA_CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<double> d_rows(gathered_elements);
    decode(m_types.d, d_raw.data(), gathered_elements, d_rows.data());

    // B by blocks of columns (contiguous in its layout), so host memory stays bounded (<= 64 MiB of
    // doubles) whatever N and K are: ref(r, j) = sum_p A(rows[r], p) * B(p, j).
    const std::uint64_t block_columns = std::max<std::uint64_t>(1, std::min<std::uint64_t>((std::uint64_t{8} << 20) / uk, un));
    std::vector<double> b_block(block_columns * uk), ref_block(rows.size() * block_columns);
    std::vector<double> out(gathered_elements), ref(gathered_elements);
    std::vector<std::uint8_t> b_raw(storage_bytes(block_columns * uk, m_types.bits_b));
    for (std::uint64_t j0 = 0; j0 < un; j0 += block_columns) {
      const std::uint64_t cols = std::min(block_columns, un - j0);
      const std::uint64_t first_byte = storage_bytes(j0 * uk, m_types.bits_b);  // whole bytes: K is even for fp4
      const std::uint64_t bytes = storage_bytes(cols * uk, m_types.bits_b);
      ITERA_CUDA_CHECK(
          cudaMemcpyAsync(b_raw.data(), m_b.as<std::uint8_t>() + first_byte, bytes, cudaMemcpyDeviceToHost, s));
      ITERA_CUDA_CHECK(cudaStreamSynchronize(s));
      decode(m_types.b, b_raw.data(), cols * uk, b_block.data());
      // Row-major views: a_rows is R x K, b_block is cols x K (column j of B is row j here).
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(row_count),
                  static_cast<blasint>(cols), static_cast<blasint>(m_k), 1.0, a_rows.data(), static_cast<blasint>(m_k),
                  b_block.data(), static_cast<blasint>(m_k), 0.0, ref_block.data(), static_cast<blasint>(cols));
      for (std::int64_t r = 0; r < row_count; ++r)
        for (std::uint64_t c = 0; c < cols; ++c) {
          const std::uint64_t at = static_cast<std::uint64_t>(r) * un + j0 + c;
          ref[at] = ref_block[static_cast<std::uint64_t>(r) * cols + c];
          out[at] = d_rows[at];
        }
    }
    return {normalised_error(out, ref), rows.size()};
  }

 private:
  void build_descriptors() {
    cublasLtMatmulDesc_t op = nullptr;
    ITERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, m_types.compute, m_types.scale));
    m_op.reset(op);
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    ITERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
    ITERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
    if (m_types.block_scaled) {
      const std::int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
      ITERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
      ITERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
      const void* scale_a = m_scale_a.data();
      const void* scale_b = m_scale_b.data();
      ITERA_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a, sizeof scale_a));
      ITERA_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b, sizeof scale_b));
    }
    m_layout_a = make_layout(m_types.a, m_k, m_m, m_k);  // K x M, used as its transpose
    m_layout_b = make_layout(m_types.b, m_k, m_n, m_k);  // K x N
    m_layout_d = make_layout(m_types.d, m_m, m_n, m_m);  // M x N, also C
  }

  cuda_backend& m_dev;
  std::int64_t m_m, m_n, m_k;
  const format_traits& m_traits;
  lt_types m_types;
  std::uint64_t m_bytes_a = 0, m_bytes_b = 0, m_bytes_d = 0;
  std::uint64_t m_seed_a = 0, m_seed_b = 0;
  device_buffer m_a, m_b, m_d, m_scale_a, m_scale_b;
  matmul_desc m_op;
  matrix_layout m_layout_a, m_layout_b, m_layout_d;
  std::vector<algorithm> m_algorithms;
  std::size_t m_chosen = 0, m_tried = 0;
  std::string m_selection_method;
  float m_alpha_f = 1.0f, m_beta_f = 0.0f;
  std::int32_t m_alpha_i = 1, m_beta_i = 0;
};

std::string verification_method(std::size_t rows) {
  return cat("fp64 reference over ", rows, " sampled rows x all columns");
}

}  // namespace

void run_cuda(case_state& state) {
  cuda_backend& dev = cuda::as_cuda(state.device());
  dev.make_current();
  const format_traits& t = traits(state.get_string("format"));
  const std::int64_t m = state.get_int("M"), n = state.get_int("N"), k = state.get_int("K");

  gemm_case g(dev, m, n, k, t);  // skips: format the card lacks, shape rules, does not fit
  g.generate();
  g.find_algorithms();
  g.choose_fastest();

  state.set_field("precision.input_a", std::string(t.input_a));
  state.set_field("precision.input_b", std::string(t.input_b));
  state.set_field("precision.output", std::string(t.output));
  state.set_field("precision.compute", std::string(t.compute));
  state.set_field("precision.accumulate", std::string(t.accumulate));
  if (t.id == format::fp8_e4m3 || t.id == format::fp8_e5m2)
    state.set_field("precision.fp8_fast_accumulation", "off");  // cuBLASLt's default: full-precision accumulation
  if (t.id == format::fp4_e2m1) state.set_field("precision.block_scale", "ue4m3 per 16 elements, all 1.0");
  state.set_field("library", cublaslt_version());
  state.set_detail("algo.heuristic_rank", std::to_string(g.chosen_rank()));
  state.set_detail("algo.count_tried", std::to_string(g.tried()));
  state.set_detail("algo.selection_timer", g.selection_method());

  if (state.options().verify) {
    g.run_once();
    const verification_result v = g.verify();
    const bool passed = v.error <= t.tolerance;  // NaN (an unwritten element) compares false
    state.set_verification(passed, v.error, t.tolerance, verification_method(v.rows));
    if (!passed)
      throw std::runtime_error(cat("gemm ", t.name, " verification failed on ", dev.device_name(), ": normalised error ",
                                   sig3(v.error), " > tolerance ", sig3(t.tolerance)));
  }

  state.set_work(2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k),
                 static_cast<double>(g.bytes_a() + g.bytes_b()), static_cast<double>(g.bytes_d()));
  state.set_ceiling_key(cat("gemm.", t.name));
  state.exec([&] { g.launch(); });
}

format_probe probe_cuda(backend& dev, format f) {
  format_probe probe;
  const format_traits& t = traits(f);
  probe.tolerance = t.tolerance;
  try {
    cuda_backend& cu = cuda::as_cuda(dev);
    cu.make_current();
    // The smallest size every format's shape rules accept, large enough to take tensor-core paths.
    constexpr std::int64_t size = 256;
    gemm_case g(cu, size, size, size, t);
    g.generate();
    g.find_algorithms();  // the heuristic's first choice: a probe times nothing
    g.run_once();
    probe.ran = true;
    const verification_result v = g.verify();
    probe.error = v.error;
    probe.passed = v.error <= t.tolerance;
    probe.message = probe.passed ? verification_method(v.rows)
                                 : cat("normalised error ", sig3(v.error), " > tolerance ", sig3(t.tolerance), " (",
                                       verification_method(v.rows), ")");
  } catch (const std::exception& e) {
    probe.passed = false;
    probe.message = e.what();
  }
  // Leave the device usable for whatever the caller does next.
  try {
    dev.synchronize();
  } catch (const std::exception& e) {
    probe.passed = false;
    probe.message += cat(" (and the device did not synchronize afterwards: ", e.what(), ")");
  }
  return probe;
}

}  // namespace itera::gemm
