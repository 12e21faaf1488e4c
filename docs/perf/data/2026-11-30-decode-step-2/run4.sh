#!/usr/bin/env bash
# session 8, run 4: consumers on tensor cores (dt_mma) against CUDA cores on the same padded slots (dt_cc) and 4b5b07d (dt_base); clock64 tile traces, barrier fences
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 120 $B/dt_cc --gtest_filter='*decode_step*' >$OUT/cc_step_test.log 2>&1; echo "cc step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/cc_step_test.log | tr '\n' ' ')"
t() { env $4 ITERA_LLM_DECODE_STEP_FP8=1 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t_$3.log 2>&1
  echo "$3 $1 $4 $2: rc $? $(grep -E 'CUDA graph' $OUT/t_$3.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in 1 2; do t dt_base bf16 base$r X=1; t dt_mma bf16 mma$r X=1; t dt_cc bf16 cc$r X=1; done
t dt_mma bf16 trmma ITERA_LLM_DECODE_STEP_TRACE=1
t dt_cc bf16 trcc ITERA_LLM_DECODE_STEP_TRACE=1
t dt_mma fp8_e4m3 trf8 ITERA_LLM_DECODE_STEP_TRACE=1
for f in $OUT/t_trmma.log $OUT/t_trcc.log; do echo "== $f"; sed -n '/decode_step phases/,/attention items/p' $f; grep -A200 "block 0's tiles" $f | grep -E "tiles| o | qkv " | head -22; done
