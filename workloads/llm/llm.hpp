#pragma once
// The llm workload: a Llama-family decoder generating text on the engine of each backend, in the
// offline, server and single-stream scenarios and in both loops (scenarios.hpp; docs/llm.md).
#include "itera/core/workload.hpp"

namespace itera::llm {

// The axis declarations and the `itera run` suite; backends are filled in by src/lib/registry.cpp.
workload_decl declaration();

// The cpu backend: the reference model behind the engine interface (cpu_engine.hpp).
void run_cpu(case_state& state);

// The cuda backend (llm_run_cuda.cpp).
void run_cuda(case_state& state);

}  // namespace itera::llm
