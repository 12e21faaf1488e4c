#pragma once
// The Tensor Memory Accelerator and shared-memory barriers (sm_90), for kernels whose producer
// thread copies tiles that consumer warpgroups multiply (vit_gemm.cu, flash_attention_persistent.cuh),
// and the driver's tensor map encoder that the host side of such a kernel describes its operands with
// (tma.cu).
//
// A stage's `full` barrier is armed by the producer with the stage's byte count
// (barrier_expect_bytes) and completes when the TMA copies have written that many bytes; its
// `empty` barrier completes when every consumer has arrived, done reading the stage. A barrier's
// n-th completion has parity n % 2 (barrier_wait).
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>

namespace itera::kernels::tma {

__device__ __forceinline__ void barrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// After the barriers of a block are initialised, before any other thread or the TMA uses them.
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void barrier_expect_bytes(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void barrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Returns once the barrier's completion of parity `parity` has happened.
__device__ __forceinline__ void barrier_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_again:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_again;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// The box of the 2-D tensor `map` at (column c, row r) into shared memory at dst, its bytes
// counted on `bar`.
__device__ __forceinline__ void load_2d(unsigned dst, const CUtensorMap& map, int c, int r, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<std::uint64_t>(&map)), "r"(c), "r"(r), "r"(bar)
      : "memory");
}
// The same for a 3-D tensor, its box at (column c, row r, plane p): elements outside the tensor
// (past its last row, say) arrive as zeros and count in the bytes like the others.
__device__ __forceinline__ void load_3d(unsigned dst, const CUtensorMap& map, int c, int r, int p, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(&map)), "r"(c), "r"(r), "r"(p), "r"(bar)
      : "memory");
}

// cuTensorMapEncodeTiled from the driver, found once through the runtime (no link to libcuda);
// throws std::runtime_error where the driver has none.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled();

}  // namespace itera::kernels::tma
