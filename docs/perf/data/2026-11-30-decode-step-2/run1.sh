#!/usr/bin/env bash
# session 8, run 1: device tests on the head (+ all-block trace); bf16/fp8 traces; head against the warp-wide producer
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
timeout 200 $B/itera_device_tests --gtest_filter='-*timing*' >$OUT/device_tests.log 2>&1
echo "device tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/device_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/device_tests.log | head -20
tr() { ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_DECODE_STEP_FP8=1 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/trace_$1_$2.log 2>&1; echo "trace $1 $2 rc $?"; }
tr itera_device_tests bf16
tr dt_wp bf16
tr itera_device_tests fp8_e4m3
tr dt_wp fp8_e4m3
t() { ITERA_LLM_DECODE_STEP_FP8=1 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >>$OUT/timing.log 2>&1
  echo "$3 $1 $2: rc $? $(grep -E 'CUDA graph' $OUT/timing.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in a b; do t itera_device_tests bf16 $r; t dt_wp bf16 $r; done
for r in a b; do t itera_device_tests fp8_e4m3 $r; t dt_wp fp8_e4m3 $r; done
timeout 60 $B/dt_wp --gtest_filter='*decode_step*' >$OUT/wp_step_test.log 2>&1; echo "wp step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/wp_step_test.log | tr '\n' ' ')"
sed -n '/decode_step phases/,/attention items/p' $OUT/trace_itera_device_tests_bf16.log
