#!/usr/bin/env bash
# session 9, run 1: the attention items' cached K and V copied by the producer into shared memory (dt_kv) against 176da59 (dt_head)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
timeout 120 $B/dt_kv --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; echo "kv step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L
grep -E "Failure|Expected|Which is" $OUT/t.log | head -14
t() { echo "=== $3 $1 $4 $2" >>$L; env $4 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; rc=$?; cat $OUT/t.log >>$L
  echo "$3 $1 $4 $2: rc $rc $(grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in 1 2; do for w in bf16 fp8_e4m3; do t dt_head $w head$r X=1; t dt_kv $w kv$r X=1; done; done
t dt_kv bf16 trkv ITERA_LLM_DECODE_STEP_TRACE=1
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | head -24
t dt_kv fp8_e4m3 trkvf8 ITERA_LLM_DECODE_STEP_TRACE=1
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | head -24
rm -f $OUT/t.log
