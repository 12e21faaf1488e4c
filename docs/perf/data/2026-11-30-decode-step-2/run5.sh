#!/usr/bin/env bash
# session 8, run 5: CUDA-core consumers with the rows' chunks loaded before use and a transposed butterfly (dt) against 4b5b07d (dt_base)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 120 $B/itera_device_tests --gtest_filter='*decode_step*' >$OUT/step_test.log 2>&1; echo "step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/step_test.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|step [0-9]" $OUT/step_test.log | head -10
t() { env $4 ITERA_LLM_DECODE_STEP_FP8=1 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t_$3.log 2>&1
  echo "$3 $1 $4 $2: rc $? $(grep -E 'CUDA graph' $OUT/t_$3.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in 1 2 3; do t dt_base bf16 base$r X=1; t itera_device_tests bf16 new$r X=1; done
t itera_device_tests bf16 trnew ITERA_LLM_DECODE_STEP_TRACE=1
t dt_base bf16 trbase ITERA_LLM_DECODE_STEP_TRACE=1
for f in $OUT/t_trnew.log $OUT/t_trbase.log; do echo "== $f"; sed -n '/decode_step phases/,/attention items/p' $f; grep -A200 "block 0's tiles" $f | grep -E "tiles| o " | head -10; done
