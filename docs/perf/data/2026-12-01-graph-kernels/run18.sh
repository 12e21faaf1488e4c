#!/usr/bin/env bash
# run 18: the product trial as is (one pass, the layers making 4x the L2) against three passes over
# 16 layers (ITERA_LLM_TRIAL_PASSES=3 ITERA_LLM_TRIAL_LAYERS=16), six processes each, alternating,
# batch 64: the graph step each process measures, and its picks' kernels.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for r in 1 2 3 4 5 6; do
for cfg in "1 0" "3 16"; do
  set -- $cfg
  ITERA_LLM_TRIAL_LOG=1 ITERA_LLM_TRIAL_PASSES=$1 ITERA_LLM_TRIAL_LAYERS=$2 ITERA_LLM_TIMING_BATCH=64 timeout 200 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run18_p$1_l$2_r$r.log 2>&1
  echo "passes $1 layers $2 round $r rc=$? $(grep -E 'CUDA graph:' $OUT/run18_p$1_l$2_r$r.log | sed 's/.*CUDA graph: //' | cut -d, -f1) | $(grep -oE 'graph step by kernel[^:]*: [0-9.]+ us' $OUT/run18_p$1_l$2_r$r.log | sed 's/.*: //') | picks $(grep -oE '^llm product trial, [a-z_]+ .*picked #[0-9]+' $OUT/run18_p$1_l$2_r$r.log | sed -E 's/llm product trial, ([a-z_]+) .*picked (#[0-9]+)/\1 \2/' | tr '\n' ' ')"
done; done
