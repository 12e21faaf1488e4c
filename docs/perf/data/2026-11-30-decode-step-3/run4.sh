#!/usr/bin/env bash
# session 9, run 4: grid barrier without the consumers' fence (kept), A/B in one binary: ITERA_X_PARTREL=1 (the attention's part published by thread 0's atom.acq_rel, no __threadfence), ITERA_X_WINDOW=n (n tiles bulk-prefetched into L2 once the consumers pass the qkv barrier: an mbarrier from the consumers)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
ITERA_X_PARTREL=1 ITERA_X_WINDOW=5 timeout 120 $B/dt_x --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; echo "partrel+window step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L
grep -E "Failure|Expected|Which is" $OUT/t.log | head -14
t() { echo "=== $3 $1 $4 $2" >>$L; env $4 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; rc=$?; cat $OUT/t.log >>$L
  echo "$3 $1 $4 $2: rc $rc $(grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in 1 2; do
  t dt_x bf16 base$r X=1
  t dt_x bf16 prel$r ITERA_X_PARTREL=1
  t dt_x bf16 w3_$r ITERA_X_WINDOW=3
  t dt_x bf16 w5_$r ITERA_X_WINDOW=5
  t dt_x bf16 w8_$r ITERA_X_WINDOW=8
  t dt_x bf16 pw5_$r "ITERA_X_PARTREL=1 ITERA_X_WINDOW=5"
done
for r in 1 2; do
  t dt_x fp8_e4m3 base$r X=1
  t dt_x fp8_e4m3 prel$r ITERA_X_PARTREL=1
  t dt_x fp8_e4m3 w4_$r ITERA_X_WINDOW=4
  t dt_x fp8_e4m3 pw8_$r "ITERA_X_PARTREL=1 ITERA_X_WINDOW=8"
done
t dt_x bf16 trpw5 "ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_X_PARTREL=1 ITERA_X_WINDOW=5"
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | head -24
rm -f $OUT/t.log
