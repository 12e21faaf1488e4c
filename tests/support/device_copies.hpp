#pragma once
// Host vectors to and from device buffers for the device tests (cuda builds only): a buffer sized
// to the vector, filled; a buffer read back whole. Synchronous copies, checked. The plain upload
// runs on the legacy stream, for kernels launched on stream 0; the one given a backend copies in
// its stream's order, for kernels on that (non-blocking) stream.
#include <cuda_runtime.h>

#include <vector>

#include "itera/cuda/check.hpp"
#include "src/cuda/cuda_backend_impl.hpp"
#include "src/cuda/memory.hpp"

namespace itera::test {

template <class T>
cuda::device_buffer upload(const cuda::cuda_backend& dev, const std::vector<T>& host) {
  cuda::device_buffer b(host.size() * sizeof(T), nullptr);
  dev.upload(b.data(), host.data(), b.bytes());
  return b;
}

template <class T>
cuda::device_buffer upload(const std::vector<T>& host) {
  cuda::device_buffer b(host.size() * sizeof(T), nullptr);
  ITERA_CUDA_CHECK(cudaMemcpy(b.data(), host.data(), b.bytes(), cudaMemcpyHostToDevice));
  return b;
}

template <class T>
std::vector<T> download(const cuda::device_buffer& b) {
  std::vector<T> host(b.bytes() / sizeof(T));
  ITERA_CUDA_CHECK(cudaMemcpy(host.data(), b.data(), b.bytes(), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace itera::test
