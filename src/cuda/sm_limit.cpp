#include "src/cuda/sm_limit.hpp"

#include <cuda.h>

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "itera/core/errors.hpp"

namespace itera::cuda {

namespace {

template <class Fn>
Fn driver_entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, CUDA_VERSION, cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || !fn) {
    (void)cudaGetLastError();
    throw std::runtime_error(fmt::format("ITERA_CUDA_SM_LIMIT needs green contexts (a driver for CUDA 12.5 or later): "
                                         "{} is not available from this driver",
                                         name));
  }
  return reinterpret_cast<Fn>(fn);
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw std::runtime_error(fmt::format("ITERA_CUDA_SM_LIMIT: {} failed (CUresult {})", what, static_cast<int>(r)));
}

}  // namespace

std::optional<unsigned> sm_limit_from_env() {
  const char* v = std::getenv("ITERA_CUDA_SM_LIMIT");
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > 100000)
    throw usage_error(fmt::format("ITERA_CUDA_SM_LIMIT={}: expected a whole number of SMs, at least 1", v));
  return static_cast<unsigned>(n);
}

sm_limited_stream make_sm_limited_stream(int device, unsigned sms) {
  using get_resource_fn = CUresult (*)(CUdevice, CUdevResource*, CUdevResourceType);
  using split_fn = CUresult (*)(CUdevResource*, unsigned*, const CUdevResource*, CUdevResource*, unsigned, unsigned);
  using desc_fn = CUresult (*)(CUdevResourceDesc*, CUdevResource*, unsigned);
  using create_fn = CUresult (*)(CUgreenCtx*, CUdevResourceDesc, CUdevice, unsigned);
  using stream_fn = CUresult (*)(CUstream*, CUgreenCtx, unsigned, int);
  using resource_of_fn = CUresult (*)(CUgreenCtx, CUdevResource*, CUdevResourceType);
  using destroy_fn = CUresult (*)(CUgreenCtx);
  const auto get_resource = driver_entry<get_resource_fn>("cuDeviceGetDevResource");
  const auto split = driver_entry<split_fn>("cuDevSmResourceSplitByCount");
  const auto generate = driver_entry<desc_fn>("cuDevResourceGenerateDesc");
  const auto create = driver_entry<create_fn>("cuGreenCtxCreate");
  const auto make_stream = driver_entry<stream_fn>("cuGreenCtxStreamCreate");
  const auto resource_of = driver_entry<resource_of_fn>("cuGreenCtxGetDevResource");
  const auto destroy_ctx = driver_entry<destroy_fn>("cuGreenCtxDestroy");

  CUdevResource all{};
  check(get_resource(static_cast<CUdevice>(device), &all, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource");
  if (sms >= all.sm.smCount)
    throw usage_error(fmt::format("ITERA_CUDA_SM_LIMIT={}: the device has {} SMs; ask for fewer to limit it", sms,
                                  all.sm.smCount));
  CUdevResource part{}, rest{};
  unsigned groups = 1;
  check(split(&part, &groups, &all, &rest, 0, sms), "cuDevSmResourceSplitByCount");
  if (groups != 1) throw std::runtime_error(fmt::format("ITERA_CUDA_SM_LIMIT={}: no partition of that size", sms));
  CUdevResourceDesc desc{};
  check(generate(&desc, &part, 1), "cuDevResourceGenerateDesc");
  sm_limited_stream s;
  s.requested = sms;
  CUgreenCtx ctx = nullptr;
  check(create(&ctx, desc, static_cast<CUdevice>(device), CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate");
  s.green_ctx = ctx;
  try {
    CUdevResource granted{};
    check(resource_of(ctx, &granted, CU_DEV_RESOURCE_TYPE_SM), "cuGreenCtxGetDevResource");
    s.granted = granted.sm.smCount;
    CUstream st = nullptr;
    check(make_stream(&st, ctx, CU_STREAM_NON_BLOCKING, 0), "cuGreenCtxStreamCreate");
    s.stream = reinterpret_cast<cudaStream_t>(st);
  } catch (...) {
    (void)destroy_ctx(ctx);
    throw;
  }
  return s;
}

void destroy(sm_limited_stream& s) {
  if (s.stream) (void)cudaStreamDestroy(s.stream);
  s.stream = nullptr;
  if (s.green_ctx) {
    try {
      using destroy_fn = CUresult (*)(CUgreenCtx);
      (void)driver_entry<destroy_fn>("cuGreenCtxDestroy")(static_cast<CUgreenCtx>(s.green_ctx));
    } catch (...) {
    }
  }
  s.green_ctx = nullptr;
}

}  // namespace itera::cuda
