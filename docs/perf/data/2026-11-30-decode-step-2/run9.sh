#!/usr/bin/env bash
# session 8, run 9: the attention's K/V prefetch at the layer's start (dt_pa), the weights' bulk copies L2::evict_first (dt_ef), both (dt_paef), against 6e68db5 (dt_att)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
for v in pa ef paef; do timeout 120 $B/dt_$v --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; echo "$v step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L; done
t() { echo "=== $3 $1 $4 $2" >>$L; env $4 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; rc=$?; cat $OUT/t.log >>$L
  echo "$3 $1 $4 $2: rc $rc $(grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in 1 2; do for v in att pa ef paef; do t dt_$v bf16 $v$r X=1; done; done
for v in att pa ef paef; do t dt_$v fp8_e4m3 f8$v ITERA_LLM_DECODE_STEP_FP8=1; done
t dt_paef bf16 trpaef ITERA_LLM_DECODE_STEP_TRACE=1
sed -n '/decode_step phases/,/own split/p' $OUT/t.log
t dt_pa bf16 trpa ITERA_LLM_DECODE_STEP_TRACE=1
grep -E "attention|keys" $OUT/t.log
rm $OUT/t.log
