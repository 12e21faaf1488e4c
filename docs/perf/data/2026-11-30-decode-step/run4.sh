#!/usr/bin/env bash
# decode_step v3 (K/V prefetched to L2 before the barrier, batched swiglu staging, merge loads at once): correctness, phase trace, timing against the per-layer kernels
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 120 $B/itera_device_tests --gtest_filter='llm_decode_step*' >$OUT/step_test.log 2>&1
echo "step test rc $?"; grep -E "logits one kernel|FAILED|Failure|error|exception" $OUT/step_test.log | head -30
ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=bf16 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >$OUT/trace_bf16.log 2>&1
grep -A20 "decode_step phases" $OUT/trace_bf16.log
ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >$OUT/trace_fp8.log 2>&1
grep -A20 "decode_step phases" $OUT/trace_fp8.log
t() { # step weights label
  ITERA_LLM_DECODE_STEP=$1 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >>$OUT/timing.log 2>&1
  echo "$3 step=$1 $2: rc $? $(grep -E 'CUDA graph' $OUT/timing.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in a b; do for w in bf16 fp8_e4m3; do t 1 $w $r; t 0 $w $r; done; done
