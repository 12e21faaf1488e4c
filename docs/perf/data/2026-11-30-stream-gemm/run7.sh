#!/usr/bin/env bash
# run 7: groups dealt round-robin (ITERA_X_SG_DEALT), Nsight Compute on o_proj and gate_up
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
ITERA_X_SG_DEALT=1 timeout 120 $B/itera_device_tests --gtest_filter='llm_stream_gemm.matches*' > $OUT/sg_test.log 2>&1; echo "stream test dealt rc=$?"
f=$OUT/timing.log
for knobs in "" "ITERA_X_SG_DEALT=1" "ITERA_X_SG_DEALT=1 ITERA_X_SG_SUBS=2" "ITERA_X_SG_DEALT=1 ITERA_X_SG_ABLATE=3"; do
  echo "=== knobs: ${knobs:-default}" | tee -a $f
  env $knobs ITERA_LLM_STREAM_TIMING_TOKENS="16 64" timeout 120 $B/itera_device_tests --gtest_filter='*stream_gemm.timing*' 2>&1 | grep "^stream_gemm" | tee -a $f
done
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats"
for knobs in "" "ITERA_X_SG_DEALT=1"; do
  env $knobs ITERA_LLM_STREAM_TIMING_TOKENS=16 timeout 200 ncu --clock-control none --kernel-name stream_gemm_kernel --launch-skip 100 --launch-count 1 $S $B/itera_device_tests --gtest_filter='*stream_gemm.timing*' > $OUT/ncu_o_proj${knobs:+_dealt}.txt 2>&1; echo "ncu o_proj ${knobs} rc=$?"
done
ITERA_LLM_STREAM_TIMING_TOKENS=16 timeout 200 ncu --clock-control none --kernel-name stream_gemm_kernel --launch-skip 150 --launch-count 1 $S $B/itera_device_tests --gtest_filter='*stream_gemm.timing*' > $OUT/ncu_gate_up.txt 2>&1; echo "ncu gate_up rc=$?"
for n in $OUT/ncu_*.txt; do echo "--- $n"; grep -E "Grid Size|Duration|DRAM Throughput|L2 Cache Throughput|Memory Throughput|Mem Busy|Max Bandwidth|L2 Hit|Warp Cycles Per Issued" $n | head -12; done
