#!/usr/bin/env bash
# session 10, run 7: consumers release their slot once their share is in registers: fp8 (both), bf16 4-row tiles (dt_a) or 4-row and 1-row tiles (dt_b), against c84cc4d (dt_head); step tests; 3 rounds
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv | tee -a $L
for v in a b; do timeout 100 $B/dt_$v --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; echo "dt_$v step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L; done
t() { echo "=== $1 $2" >>$L; ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 60 $B/dt_$1 --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; cat $OUT/t.log >>$L
  grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*CUDA graph: \([0-9.]*\) ms.*/\1/'; }
for r in 1 2 3; do for w in fp8_e4m3 bf16; do
  line="$w"; for v in head a b; do line="$line $v $(t $v $w)"; done; echo "$line"
done; done
echo "=== trace b fp8" >>$L
ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=bf16 ITERA_LLM_TIMING_BATCH=1 timeout 60 $B/dt_b --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | tee -a $L | head -16
rm -f $OUT/t.log
