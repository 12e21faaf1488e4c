#!/usr/bin/env bash
# session 9, run 8: argmax over a cluster of 8 blocks with the lengths' advance in the same launch (dt_b) against a82f63d (dt_a); the llm device tests on dt_b
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
timeout 250 $B/dt_b --gtest_filter='llm*:-*timing*' >$OUT/t.log 2>&1; echo "dt_b llm tests rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L
grep -E "^\[  FAILED|Failure|Expected|Which is|argmax" $OUT/t.log | head -14
t() { echo "=== $3 $1 $4 $2" >>$L; env $4 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; rc=$?; cat $OUT/t.log >>$L
  echo "$3 $1 $4 $2: rc $rc $(grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*context ~[0-9]*, //') | argmax stage: $(grep -E '^  argmax' $OUT/t.log | awk '{print $3}') us"; }
for r in 1 2 3; do
  for w in bf16 fp8_e4m3; do t dt_a $w a$r X=1; t dt_b $w b$r X=1; done
done
rm -f $OUT/t.log
