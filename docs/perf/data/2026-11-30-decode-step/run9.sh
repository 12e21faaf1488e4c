#!/usr/bin/env bash
# decode_step: one thread fences at the barriers, the attention's first K/V batch (8 keys a warp) loaded before q; against 3e718fc
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 100 $B/itera_device_tests --gtest_filter='llm_decode_step*' >$OUT/step_test.log 2>&1
echo "step test rc $?"; grep -E "logits one kernel|FAILED|Failure" $OUT/step_test.log | head -12
t() { ITERA_LLM_DECODE_STEP=$2 ITERA_LLM_TIMING_WEIGHTS=bf16 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >>$OUT/timing.log 2>&1
  echo "$3 $1 step=$2: rc $? $(grep -E 'CUDA graph' $OUT/timing.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in a b c; do t itera_device_tests 1 $r; t dt_head 1 $r; done
t dt_head 0 a
ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=bf16 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >$OUT/trace_bf16.log 2>&1
grep -A16 "decode_step phases" $OUT/trace_bf16.log | grep -v "^\["
