#!/usr/bin/env bash
# run 17: the decode graph's product trial, as is (one pass over the layers making 4x the L2)
# against five passes over 16 layers, two processes each, batch 64: the trial's times and picks
# (ITERA_LLM_TRIAL_LOG) and the graph step.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for r in 1 2; do
for cfg in "1 0" "5 16"; do
  set -- $cfg
  ITERA_LLM_TRIAL_LOG=1 ITERA_LLM_TRIAL_PASSES=$1 ITERA_LLM_TRIAL_LAYERS=$2 ITERA_LLM_TIMING_BATCH=64 timeout 200 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run17_p$1_l$2_r$r.log 2>&1
  echo "=== passes $1 layers $2 round $r rc=$? $(grep -E 'CUDA graph:' $OUT/run17_p$1_l$2_r$r.log | sed 's/.*CUDA graph: //')"
  grep -E "llm product trial" $OUT/run17_p$1_l$2_r$r.log | sed 's/llm product trial, //' | cut -c1-230
  grep -E "nvjet" $OUT/run17_p$1_l$2_r$r.log | head -6
done; done
