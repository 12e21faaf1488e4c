#!/usr/bin/env bash
# Session 24, call 3: Nsight Compute on one 2048-token gate/up launch, clustered (multicast w) and
# not, to see why the clusters ran 24% slower with the grid full (run 2: 66 clusters).
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for c in 0 1; do
  ITERA_LLM_PRODUCT_CLUSTER=$c ITERA_LLM_PREFILL_TOKENS=2048 timeout 240 $NCU --clock-control none \
    --kernel-name-base demangled --kernel-name regex:"fused_product_kernel.*swiglu" --launch-skip 40 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats --section LaunchStats \
    --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum,lts__t_sectors_srcunit_tex.sum,sm__cycles_active.avg,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard \
    $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/ncu_c$c.txt 2>&1
  echo "ncu cluster=$c rc=$?"
  grep -E "Duration|SM Frequency|gmma|lts__t_bytes|Memory Throughput|L2 Cache Throughput|Compute \(SM\)|Stall|Warp Cycles Per Issued|Issue Slots Busy|Cluster|Grid Size|Registers" $OUT/ncu_c$c.txt | head -30
done
