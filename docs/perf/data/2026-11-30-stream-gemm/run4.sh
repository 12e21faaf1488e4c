#!/usr/bin/env bash
# run 4: stream_gemm ablations (no x loads, no products) and Nsight Compute on o_proj and gate_up
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
f=$OUT/timing.log
for knobs in "" "ITERA_X_SG_ABLATE=1" "ITERA_X_SG_ABLATE=2" "ITERA_X_SG_ABLATE=3"; do
  echo "=== knobs: ${knobs:-default}" | tee -a $f
  env $knobs ITERA_LLM_STREAM_TIMING_TOKENS=16 timeout 120 $B/itera_device_tests --gtest_filter='*stream_gemm.timing*' 2>&1 | grep "^stream_gemm" | tee -a $f
done
# o_proj is the 2nd product, COLS=4 kernels (Li4E); skip into the timed launches
ITERA_LLM_STREAM_TIMING_TOKENS=16 timeout 300 ncu --clock-control none --kernel-name regex:'stream_gemm_kernel.*Li4ELb1E' --launch-skip 40 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats $B/itera_device_tests --gtest_filter='*stream_gemm.timing*' > $OUT/ncu_o_proj.txt 2>&1; echo "ncu rc=$?"
ITERA_LLM_STREAM_TIMING_TOKENS=16 timeout 300 ncu --clock-control none --kernel-name regex:'stream_gemm_kernel.*Li1ELb0E' --launch-skip 40 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats $B/itera_device_tests --gtest_filter='*stream_gemm.timing*' > $OUT/ncu_gate_up.txt 2>&1; echo "ncu rc=$?"
grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Block Size|Grid Size" $OUT/ncu_o_proj.txt | head -30
