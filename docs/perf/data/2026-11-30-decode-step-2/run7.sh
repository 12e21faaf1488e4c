#!/usr/bin/env bash
# session 8, run 7: attention scores summed together, the merge in one round trip (dt_att) against dt_sub
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 120 $B/dt_att --gtest_filter='*decode_step*' >$OUT/att_step_test.log 2>&1; echo "att step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/att_step_test.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|step [0-9]" $OUT/att_step_test.log | head -10
t() { env $4 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t_$3.log 2>&1
  echo "$3 $1 $4 $2: rc $? $(grep -E 'CUDA graph' $OUT/t_$3.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in 1 2 3; do t dt_sub bf16 sub$r X=1; t dt_att bf16 att$r X=1; done
for r in 1 2; do t dt_sub fp8_e4m3 f8sub$r ITERA_LLM_DECODE_STEP_FP8=1; t dt_att fp8_e4m3 f8att$r ITERA_LLM_DECODE_STEP_FP8=1; done
t dt_att fp8_e4m3 f8per ITERA_LLM_DECODE_STEP=0
t dt_att bf16 tratt ITERA_LLM_DECODE_STEP_TRACE=1
for f in $OUT/t_tratt.log; do echo "== $f"; sed -n '/decode_step phases/,/arrival counted/p' $f ; done
