#!/usr/bin/env bash
# run 5: blocks starting at different k (ITERA_X_SG_STAGGER): DRAM channels camped by lockstep columns?
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
ITERA_X_SG_STAGGER=1 timeout 120 $B/itera_device_tests --gtest_filter='llm_stream_gemm.matches*' > $OUT/sg_test.log 2>&1; echo "stream test stagger rc=$?"
f=$OUT/timing.log
for knobs in "" "ITERA_X_SG_STAGGER=1" "ITERA_X_SG_STAGGER=1 ITERA_X_SG_ABLATE=3" "ITERA_X_SG_STAGGER=1 ITERA_X_SG_SUBS=2" "ITERA_X_SG_STAGGER=1 ITERA_X_SG_STAGES=12"; do
  echo "=== knobs: ${knobs:-default}" | tee -a $f
  env $knobs ITERA_LLM_STREAM_TIMING_TOKENS="16 64" timeout 120 $B/itera_device_tests --gtest_filter='*stream_gemm.timing*' 2>&1 | grep "^stream_gemm" | tee -a $f
done
