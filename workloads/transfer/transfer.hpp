#pragma once
// transfer: copies between host and device memory over axes direction, memory and bytes.
// Bandwidth counts each byte once for h2d and d2h and twice (read + write) for d2d, as the
// device-copy ceiling does (DESIGN.md, Definitions).
#include <string>
#include <string_view>

#include "itera/core/workload.hpp"

namespace itera::transfer {

inline constexpr int workload_version = 1;

workload_decl declaration();

// cpu backend: memcpy between two host buffers ("device" memory is host memory there).
void run_cpu(case_state& state);

// cuda backend: cudaMemcpyAsync on the backend's stream, pageable or pinned host memory.
void run_cuda(case_state& state);

// Theoretical PCIe rate in bytes/s per direction for a generation and width (after encoding).
double pcie_bytes_per_s(int generation, int width);

}  // namespace itera::transfer
