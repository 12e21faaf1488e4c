#!/usr/bin/env bash
# session 9, run 3: A/B in one binary: ITERA_X_FAST=1, ITERA_X_NOFENCE=1 (grid barrier without the consumers' __threadfence: bar.sync then thread 0's red.release), ITERA_X_WINDOW=n with ITERA_X_AFTER=1 (the L2 prefetch once the qkv barrier has passed)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
ITERA_X_NOFENCE=1 ITERA_X_FAST=1 ITERA_X_WINDOW=4 ITERA_X_AFTER=1 timeout 120 $B/dt_x --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; echo "nofence+fast+window after step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L
grep -E "Failure|Expected|Which is" $OUT/t.log | head -14
t() { echo "=== $3 $1 $4 $2" >>$L; env $4 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; rc=$?; cat $OUT/t.log >>$L
  echo "$3 $1 $4 $2: rc $rc $(grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in 1 2; do
  t dt_x bf16 base$r X=1
  t dt_x bf16 fast$r ITERA_X_FAST=1
  t dt_x bf16 nof$r ITERA_X_NOFENCE=1
  t dt_x bf16 fnof$r "ITERA_X_FAST=1 ITERA_X_NOFENCE=1"
  t dt_x bf16 fa3_$r "ITERA_X_FAST=1 ITERA_X_WINDOW=3 ITERA_X_AFTER=1"
  t dt_x bf16 fna3_$r "ITERA_X_FAST=1 ITERA_X_NOFENCE=1 ITERA_X_WINDOW=3 ITERA_X_AFTER=1"
  t dt_x bf16 fna8_$r "ITERA_X_FAST=1 ITERA_X_NOFENCE=1 ITERA_X_WINDOW=8 ITERA_X_AFTER=1"
done
for r in 1 2; do
  t dt_x fp8_e4m3 base$r X=1
  t dt_x fp8_e4m3 nof$r ITERA_X_NOFENCE=1
  t dt_x fp8_e4m3 na4_$r "ITERA_X_NOFENCE=1 ITERA_X_WINDOW=4 ITERA_X_AFTER=1"
done
t dt_x bf16 trfna3 "ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_X_FAST=1 ITERA_X_NOFENCE=1 ITERA_X_WINDOW=3 ITERA_X_AFTER=1"
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | head -24
rm -f $OUT/t.log
