#!/usr/bin/env bash
# decode_step v4 (SwiGLU formed in the gate_up phase by pairing gate and up rows in a tile): all device tests, trace, timing, the bench
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 200 $B/itera_device_tests --gtest_filter='-*timing*' >$OUT/device_tests.log 2>&1
echo "device tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/device_tests.log | tr '\n' ' ')"
grep -E "logits one kernel|^\[  FAILED|Failure" $OUT/device_tests.log | head -20
ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=bf16 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >$OUT/trace_bf16.log 2>&1
grep -A16 "decode_step phases" $OUT/trace_bf16.log
t() { # binary step weights label
  ITERA_LLM_DECODE_STEP=$2 ITERA_LLM_TIMING_WEIGHTS=$3 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >>$OUT/timing.log 2>&1
  echo "$4 $1 step=$2 $3: rc $? $(grep -E 'CUDA graph' $OUT/timing.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in a b; do t itera_device_tests 1 bf16 $r; t itera_device_tests 0 bf16 $r; t dt_before 1 bf16 $r; done
t itera_device_tests 1 fp8_e4m3 a
timeout 200 $B/itera bench llm --max-time 20 --axis batch=1 --axis weights=bf16,fp8_e4m3 --out $OUT/bench >$OUT/bench.log 2>&1
echo "bench rc $?"; tail -25 $OUT/bench.log
