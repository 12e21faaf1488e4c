#!/usr/bin/env bash
# Session 24, call 5: Nsight Compute on one 2048-token prefill attention launch (the
# warp-specialized causal kernel, 327 TFLOP/s in the pass) and one fused qkv launch (617): where
# their cycles go (pipes, stalls), to choose the next prefill change.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
prof() {  # name, regex
  ITERA_LLM_PREFILL_TOKENS=2048 timeout 240 $NCU --clock-control none --kernel-name-base demangled --kernel-name regex:"$2" \
    --launch-skip 20 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section InstructionStats --section LaunchStats --section Occupancy \
    --metrics smsp__average_warp_latency_issue_stalled_barrier,smsp__average_warp_latency_issue_stalled_long_scoreboard,smsp__average_warp_latency_issue_stalled_math_pipe_throttle,smsp__average_warp_latency_issue_stalled_wait,smsp__average_warp_latency_issue_stalled_short_scoreboard,smsp__average_warp_latency_issue_stalled_mio_throttle,smsp__average_warp_latency_issue_stalled_membar,smsp__average_warp_latency_issue_stalled_sleeping,smsp__average_warp_latency_issue_stalled_dispatch_stall,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active \
    $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/ncu_$1.txt 2>&1
  echo "ncu $1 rc=$?"
  sed -n '/Section: Command line/,$p' $OUT/ncu_$1.txt | grep -E "stalled|pct_of_peak|Duration|SM Frequency|Compute \(SM\)|Warp Cycles Per Issued|Issued Warp|Executed Ipc A|Pipe" | head -40
}
prof attention 'causal_kernel'
prof qkv 'fused_product_kernel.*rope'
