#!/usr/bin/env bash
# run 6: Nsight Compute with source counters (warp stall sampling by SASS line) on the fused gate/up
# and qkv kernels, and the speed-of-light / warp-state sections of the qkv one
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section SourceCounters --section MemoryWorkloadAnalysis"
for k in gate_up:'fused_product_kernel.*swiglu' qkv:'fused_product_kernel.*rope'; do
  name=${k%%:*} re=${k#*:}
  ITERA_LLM_PREFILL_TOKENS=2048 timeout 200 ncu --clock-control none --kernel-name-base demangled --kernel-name regex:"$re" --launch-skip 10 --launch-count 1 $S --print-details all $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/ncu_$name.txt 2>&1; echo "ncu $name rc=$?"
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" $OUT/ncu_$name.txt | head -10
done
