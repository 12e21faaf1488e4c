#!/usr/bin/env bash
# run 14: the vectorized embedding kernel: the LLM device tests, then the graph kernel tables.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 400 $B/itera_device_tests --gtest_filter='*llm*:-*decode_timing*:*search*' > $OUT/run14_llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |tests? ran|FAILED  \]" $OUT/run14_llm_tests.log | head -20
for cfg in "1 bf16" "1 fp8_e4m3" "64 bf16"; do
  set -- $cfg
  ITERA_LLM_TIMING_BATCH=$1 ITERA_LLM_TIMING_WEIGHTS=$2 timeout 150 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run14_b$1_$2.log 2>&1
  echo "=== batch $1 $2 rc=$?"; grep -E "CUDA graph:|eager launches:" $OUT/run14_b$1_$2.log | sed 's/llama-3.1-8b //'
  sed -n '/graph step by kernel/,/decode step by stage/p' $OUT/run14_b$1_$2.log | grep -v "decode step by stage" | head -24
done
