#!/usr/bin/env bash
# run 2 (1c2a260): Nsight Compute on one batch-1 decode step kernel (decode_step_kernel), fp8 and bf16
# weights: warp states and per-instruction stall samples (where the consumer and producer warps wait)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for w in fp8_e4m3 bf16; do
  ITERA_LLM_TIMING_WEIGHTS=$w ITERA_LLM_TIMING_BATCH=1 timeout 280 $NCU --clock-control none --kernel-name-base demangled \
    --kernel-name regex:decode_step_kernel --launch-skip 12 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters --section SchedulerStats --section LaunchStats --section Occupancy \
    -o $OUT/step_$w -f $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/ncu_$w.log 2>&1
  echo "ncu $w rc=$?"; tail -3 $OUT/ncu_$w.log
  $NCU --import $OUT/step_$w.ncu-rep --page details > $OUT/details_$w.txt 2>&1
  $NCU --import $OUT/step_$w.ncu-rep --page source --print-source sass --csv > $OUT/sass_$w.csv 2>&1
  gzip -9 $OUT/sass_$w.csv; ls -la $OUT
  grep -E "Duration|DRAM Throughput|Stall|Warp Cycles|Issued Warp|No Eligible|Active Warps" $OUT/details_$w.txt | head -20
done
