#!/usr/bin/env bash
# run 3: stream_gemm alone on llama's products, knobs: k boxes a stage, grid, stages
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for s in 1 4; do ITERA_X_SG_SUBS=$s timeout 120 $B/itera_device_tests --gtest_filter='llm_stream_gemm.matches*' > $OUT/sg_test_$s.log 2>&1; echo "stream test subs=$s rc=$?"; done
f=$OUT/timing.log
for knobs in "" "ITERA_X_SG_SUBS=2" "ITERA_X_SG_SUBS=4" "ITERA_X_SG_GRID=66" "ITERA_X_SG_STAGES=8" "ITERA_X_SG_SUBS=4 ITERA_X_SG_GRID=66"; do
  echo "=== knobs: ${knobs:-default}" | tee -a $f
  env $knobs timeout 120 $B/itera_device_tests --gtest_filter='*stream_gemm.timing*' 2>&1 | grep "^stream_gemm" | tee -a $f
done
