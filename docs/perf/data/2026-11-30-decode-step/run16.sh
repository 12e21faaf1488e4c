#!/usr/bin/env bash
# decode_step: the producer sends each layer's attention keys and o tiles to L2 when its copies pass qkv; against 363fcbd
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 100 $B/itera_device_tests --gtest_filter='llm_decode_step*' >$OUT/step_test.log 2>&1
echo "step test rc $?"; grep -E "FAILED|Failure" $OUT/step_test.log | head -5
t() { ITERA_LLM_DECODE_STEP_FP8=1 ITERA_LLM_DECODE_STEP_PREFETCH_O=$2 ITERA_LLM_TIMING_WEIGHTS=$3 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >>$OUT/timing.log 2>&1
  echo "$4 $1 prefetch_o=$2 $3: rc $? $(grep -E 'CUDA graph' $OUT/timing.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in a b; do t itera_device_tests 1 bf16 $r; t itera_device_tests 0 bf16 $r; t dt_head 1 bf16 $r; t itera_device_tests 1 fp8_e4m3 $r; t dt_head 1 fp8_e4m3 $r; done
ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=bf16 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >$OUT/trace_bf16.log 2>&1
grep -A16 "decode_step phases" $OUT/trace_bf16.log | grep -v "^\["
