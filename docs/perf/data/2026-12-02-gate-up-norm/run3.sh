#!/usr/bin/env bash
# Session 27, call 3: Nsight Compute on the batch-64 decode's fused gate/up, as is (GATE_UP_NORM=0,
# 16-bit x boxes) and normalising (fp32 x boxes, A from registers): DRAM, L2 and tensor busy,
# warp stalls. One launch each (the 41st of the kernel: inside the timed graph's eager warm-up).
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for m in 0 1; do
  ITERA_LLM_GATE_UP_NORM=$m ITERA_LLM_TIMING_BATCH=64 timeout 280 $NCU --clock-control none --graph-profiling node \
    --kernel-name-base demangled -k 'regex:\(int\)112, \(int\)64' --launch-skip 8 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section ComputeWorkloadAnalysis \
    $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/ncu_norm$m.txt 2>&1
  echo "ncu norm=$m rc=$?"
  grep -E "swiglu_epilogue|Grid Size|Duration|DRAM Throughput|L2 Cache Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Compute \(SM\)|Issue Slots|Warp Cycles Per Issued|Stall|SM Frequency|Busy|Executed Ipc" $OUT/ncu_norm$m.txt | head -40
done
