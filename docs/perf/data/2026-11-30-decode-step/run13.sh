#!/usr/bin/env bash
# decode_step with fp8 weights on tensor cores (mma.sync, rows as B's columns): correctness, fp8 one kernel against per-layer, bf16 check
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 100 $B/itera_device_tests --gtest_filter='llm_decode_step*' >$OUT/step_test.log 2>&1
echo "step test rc $?"; grep -E "logits one kernel|FAILED|Failure" $OUT/step_test.log | head -12
t() { ITERA_LLM_DECODE_STEP_FP8=$1 ITERA_LLM_DECODE_STEP=$2 ITERA_LLM_TIMING_WEIGHTS=$3 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >>$OUT/timing.log 2>&1
  echo "$4 fp8step=$1 step=$2 $3: rc $? $(grep -E 'CUDA graph' $OUT/timing.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in a b; do t 1 1 fp8_e4m3 $r; t 0 1 fp8_e4m3 $r; t 1 1 bf16 $r; t 0 0 bf16 $r; done
ITERA_LLM_DECODE_STEP_FP8=1 ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >$OUT/trace_fp8.log 2>&1
grep -A16 "decode_step phases" $OUT/trace_fp8.log | grep -v "^\["
