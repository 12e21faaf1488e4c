#include "itera/core/workload.hpp"
#include "workloads/gemm/gemm.hpp"
#include "workloads/llm/llm.hpp"
#include "workloads/multimodal/pipeline.hpp"
#include "workloads/multimodal/vision_encoder.hpp"
#include "workloads/transfer/transfer.hpp"

namespace itera {

const workload_registry& builtin_workloads() {
  static const workload_registry registry = [] {
    workload_registry r;
    auto transfer = transfer::declaration();
    transfer.backends["cpu"] = transfer::run_cpu;
    auto gemm = gemm::declaration();
    gemm.backends["cpu"] = gemm::run_cpu;
    auto llm = llm::declaration();
    llm.backends["cpu"] = llm::run_cpu;
    auto vision = mm::vision_encoder_declaration();
    vision.backends["cpu"] = mm::run_vision_encoder_cpu;
    auto multimodal = mm::pipeline_declaration();
    multimodal.backends["cpu"] = mm::run_pipeline_cpu;
#if ITERA_WITH_CUDA
    transfer.backends["cuda"] = transfer::run_cuda;
    gemm.backends["cuda"] = gemm::run_cuda;
    llm.backends["cuda"] = llm::run_cuda;
    vision.backends["cuda"] = mm::run_vision_encoder_cuda;
    multimodal.backends["cuda"] = mm::run_pipeline_cuda;
#endif
    r.add(std::move(transfer));
    r.add(std::move(gemm));
    r.add(std::move(llm));
    r.add(std::move(vision));
    r.add(std::move(multimodal));
    return r;
  }();
  return registry;
}

}  // namespace itera
