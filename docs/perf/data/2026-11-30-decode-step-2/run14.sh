#!/usr/bin/env bash
# session 8, run 14: fp8 tiles of 16 rows as mma.sync's A, x as B's column 0 (dt_f8a) against 32416a0 (dt_head)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
timeout 120 $B/dt_f8a --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; echo "f8a step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L
grep -E "Failure|Expected|Which is|logits one kernel" $OUT/t.log | head -14
t() { echo "=== $3 $1 $4 $2" >>$L; env $4 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; rc=$?; cat $OUT/t.log >>$L
  echo "$3 $1 $4 $2: rc $rc $(grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in 1 2 3; do t dt_head fp8_e4m3 head$r X=1; t dt_f8a fp8_e4m3 f8a$r X=1; done
t dt_f8a bf16 bf16 X=1
t dt_f8a fp8_e4m3 trf8a ITERA_LLM_DECODE_STEP_TRACE=1
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | head -16
grep -A200 "block 0's tiles" $OUT/t.log | grep -E " o " | head -6
rm -f $OUT/t.log
