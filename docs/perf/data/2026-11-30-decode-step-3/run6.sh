#!/usr/bin/env bash
# session 9, run 6: what the products' stores read (fp8 scales, the residual x) loaded before the tiles (dt_z) against run 5's dt_y
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
timeout 120 $B/dt_z --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; echo "dt_z step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L
grep -E "Failure|Expected|Which is" $OUT/t.log | head -14
t() { echo "=== $3 $1 $4 $2" >>$L; env $4 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; rc=$?; cat $OUT/t.log >>$L
  echo "$3 $1 $4 $2: rc $rc $(grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in 1 2 3; do
  for w in bf16 fp8_e4m3; do t dt_y $w y$r X=1; t dt_z $w z$r X=1; done
done
t dt_z bf16 trz ITERA_LLM_DECODE_STEP_TRACE=1
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | head -24
t dt_z fp8_e4m3 trzf ITERA_LLM_DECODE_STEP_TRACE=1
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | head -24
rm -f $OUT/t.log
