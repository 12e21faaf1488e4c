#!/usr/bin/env bash
# decode_step: L2 lookahead (AHEAD tiles) and gate/up paired in a tile (SwiGLU in the gate_up phase), swept against the last commit
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 100 $B/itera_device_tests --gtest_filter='llm_decode_step*' >$OUT/step_test.log 2>&1
echo "step test (defaults) rc $?"; grep -E "logits one kernel|FAILED|Failure" $OUT/step_test.log | head -12
t() { # binary ahead paired label
  ITERA_LLM_DECODE_STEP_AHEAD=$2 ITERA_LLM_DECODE_STEP_PAIRED=$3 ITERA_LLM_TIMING_WEIGHTS=bf16 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >>$OUT/timing.log 2>&1
  echo "$4 $1 ahead=$2 paired=$3: rc $? $(grep -E 'CUDA graph' $OUT/timing.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in a b; do
  t dt_head 0 0 $r; t itera_device_tests 0 0 $r; t itera_device_tests 0 1 $r; t itera_device_tests 6 0 $r; t itera_device_tests 6 1 $r; t itera_device_tests 12 1 $r; t itera_device_tests 3 1 $r
done
ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=bf16 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >$OUT/trace_bf16.log 2>&1
grep -A16 "decode_step phases" $OUT/trace_bf16.log | grep -v "^\["
