#!/usr/bin/env bash
# session 9, run 9: the K/V copy issued at the layer's n-th tile (ITERA_X_KVAT=n) instead of its first, in one binary (dt_c, the argmax commit + the switch)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
ITERA_X_KVAT=8 timeout 120 $B/dt_c --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; echo "kvat 8 step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L
t() { echo "=== $3 $1 $4 $2" >>$L; env $4 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; rc=$?; cat $OUT/t.log >>$L
  echo "$3 $1 $4 $2: rc $rc $(grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in 1 2; do
  for w in fp8_e4m3 bf16; do t dt_c $w k0_$r X=1; t dt_c $w k5_$r ITERA_X_KVAT=5; t dt_c $w k8_$r ITERA_X_KVAT=8; done
done
t dt_c fp8_e4m3 trk8 "ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_X_KVAT=8"
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | head -24
rm -f $OUT/t.log
