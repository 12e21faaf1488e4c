#pragma once
// A CUDA graph of the work one call enqueues on a stream: captured (thread-local mode, so that
// another thread's unsafe calls are not refused) and instantiated. The caller owns the result
// (cudaGraphExecDestroy). Where the work throws, the partial capture is ended and dropped and the
// exception goes on; the stream is no longer capturing either way.
#include <cuda_runtime_api.h>

#include "itera/cuda/check.hpp"

namespace itera::cuda {

template <class Work>
cudaGraphExec_t capture_graph(cudaStream_t stream, const Work& work) {
  ITERA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    work();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(stream, &partial) == cudaSuccess && partial) (void)cudaGraphDestroy(partial);
    (void)cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  ITERA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  ITERA_CUDA_CHECK(made);
  return exec;
}

}  // namespace itera::cuda
