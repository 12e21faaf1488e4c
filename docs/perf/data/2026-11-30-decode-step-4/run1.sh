#!/usr/bin/env bash
# session 10, run 1: device tests on 35125b5 (HEAD, commits not yet run on the GPU); step test on the two next_* diffs together; A/B of head, stage, qkv, both (timing test, bf16/fp8, 3 rounds)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv | tee -a $L
timeout 200 $B/dt_head --gtest_filter='-*timing*' >$OUT/device_tests_head.log 2>&1
echo "device tests head rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/device_tests_head.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/device_tests_head.log | head -10
for v in both; do timeout 100 $B/dt_$v --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; echo "dt_$v step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L; done
t() { echo "=== $1 $2" >>$L; ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 60 $B/dt_$1 --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; cat $OUT/t.log >>$L
  grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*CUDA graph: \([0-9.]*\) ms.*/\1/'; }
for r in 1 2 3; do for w in fp8_e4m3 bf16; do
  line="$w"; for v in head stage qkv both; do line="$line $v $(t $v $w)"; done; echo "$line"
done; done
echo "=== trace both fp8" >>$L
ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_TIMING_BATCH=1 timeout 60 $B/dt_both --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | tee -a $L | head -40
rm -f $OUT/t.log
